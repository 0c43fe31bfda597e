// Package ringlogdriver plugs ringlog's bundled client (netio/client) into the benchmark
// framework. It is the only part of bench/ that talks to a ringlog broker, and it talks to
// it only over the wire, like any application would.
//
// Mapping: a workload topic is a ringlog topic; durability "fsync" sets the topic config
// flush.always=true (fdatasync before the acknowledgement); retentionBytes sets retention.bytes. Producers use the client's
// batching producer with the workload's acks, compression and batchBytes; a producer that may have only
// one record in flight (sync produce) sends without linger. Null keys of keyDistribution
// none go with partition -1: the client places them (sticky runs, docs/client.md). Consumers assign their
// partitions from the earliest offset and long-poll, reading batch by batch
// (client.Consumer.PollBatches); the consumer is a bench.BatchConsumer, so the runner
// accounts per batch rather than per record.
//
// RawProduce (rawproduce.go) is `ringlog bench single`'s produce round trip without the
// client library: one request encoded once, sent as is to the partition's shard.
package ringlogdriver

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"strconv"
	"sync"
	"time"

	"github.com/ringlog/ringlog/bench"
	"github.com/ringlog/ringlog/engine"
	"github.com/ringlog/ringlog/engine/batch"
	"github.com/ringlog/ringlog/netio/client"
	"github.com/ringlog/ringlog/netio/wire"
)

// DefaultAddress is where ringlogd listens unless told otherwise.
const DefaultAddress = "127.0.0.1:9400"

// Client settings for benchmarking.
const (
	connectTimeout   = 10 * time.Second
	lingerBatching   = time.Millisecond       // OMB's Kafka driver uses linger.ms=1
	pollWaitMax      = 100 * time.Millisecond // long-poll; short so a stopping run does not wait
	closeTimeout     = 30 * time.Second
	bufferBytesFloor = 64 << 20
)

func init() {
	bench.RegisterDriver("ringlog", Open)
}

// Driver is a connection to one ringlog broker.
type Driver struct {
	client  *client.Client
	address string
	topic   map[string]string // configs every topic is created with (from the workload)
	rf      int16             // replication factor of every topic (from the workload; 0 = 1)
	mu      sync.Mutex        // guards configs
	configs map[string]string // storage-related configs of the last topic created, for Info
}

// Open connects to a ringlog broker.
func Open(address string, w bench.Workload) (bench.Driver, error) {
	if address == "" {
		address = DefaultAddress
	}
	ctx, cancel := context.WithTimeout(context.Background(), connectTimeout)
	defer cancel()
	c, err := client.New(ctx, client.Config{Broker: address})
	if err != nil {
		return nil, fmt.Errorf("ringlog driver: connect %s: %w", address, err)
	}
	return &Driver{client: c, address: address, topic: TopicConfigs(w), rf: int16(max(w.ReplicationFactor, 1))}, nil
}

// Info describes the broker as far as the wire tells: storage settings come from the
// created topic's configuration.
func (d *Driver) Info() bench.DriverInfo {
	d.mu.Lock()
	defer d.mu.Unlock()
	storage := "unknown until a topic exists"
	if d.configs != nil {
		mode := d.configs[engine.ConfigStorageMode]
		if mode == "" {
			mode = "broker default"
		}
		storage = mode
		if d.configs[engine.ConfigFlushAlways] == "true" {
			storage += ", flush.always (fdatasync before ack)"
		}
		if retention := d.configs[engine.ConfigRetentionBytes]; retention != "" && retention != "0" && retention != "-1" {
			storage += ", retention.bytes " + retention
		}
	}
	return bench.DriverInfo{
		Name: "ringlog", Version: "bundled client", StorageMode: storage,
		IOBackend: "broker-side (see ringlogd's log)", Address: d.address,
	}
}

// CreateTopic creates the topic with the workload's durability and replication factor.
func (d *Driver) CreateTopic(ctx context.Context, name string, partitions int) error {
	configs := d.topic
	err := d.client.CreateReplicatedTopic(ctx, name, int32(partitions), d.rf, configs)
	if errors.Is(err, wire.ErrTopicAlreadyExists) {
		err = fmt.Errorf("%w: %w", bench.ErrTopicExists, err)
	}
	if err != nil && !errors.Is(err, bench.ErrTopicExists) {
		return fmt.Errorf("ringlog driver: create topic %s: %w", name, err)
	}
	described := map[string]string{}
	if descriptions, err := d.client.DescribeConfigs(ctx, name, engine.ConfigStorageMode, engine.ConfigFlushAlways, engine.ConfigRetentionBytes); err == nil {
		for _, description := range descriptions {
			described[description.Key] = description.Value
		}
	}
	for k, v := range configs {
		if _, ok := described[k]; !ok {
			described[k] = v
		}
	}
	d.mu.Lock()
	d.configs = described
	d.mu.Unlock()
	if err != nil { // the topic exists: its configs are described above all the same
		return fmt.Errorf("ringlog driver: create topic %s: %w", name, err)
	}
	return nil
}

// PlacesNullKeys: the bundled producer places a record sent with partition -1 and a nil
// key in sticky runs of its BatchBytes (KIP-794, docs/client.md).
func (d *Driver) PlacesNullKeys() bool { return true }

// NewProducer returns a batching producer for topic.
func (d *Driver) NewProducer(_ context.Context, topic string, opts bench.ProducerOptions) (bench.Producer, error) {
	cfg := client.ProducerConfig{Linger: lingerBatching}
	switch opts.Acks {
	case "0":
		cfg.Acks = client.AckNone
	case "1":
		cfg.Acks = client.AckLeader
	case "all":
		cfg.Acks = client.AckAll
	default:
		return nil, fmt.Errorf("ringlog driver: acks %q", opts.Acks)
	}
	codec, err := batch.ParseCodec(opts.Compression)
	if err != nil {
		return nil, fmt.Errorf("ringlog driver: compression: %w", err)
	}
	cfg.Compression = codec
	if opts.MaxInFlight == 1 {
		cfg.Linger = -1 // one record at a time: nothing to wait for
	}
	cfg.BufferBytesMax = bufferBytesFloor
	cfg.BatchBytes = opts.BatchBytes // 0: the client's default
	return &producer{p: d.client.NewProducer(cfg), topic: topic}, nil
}

type producer struct {
	p     *client.Producer
	topic string
}

// Send queues one record; the client copies key and value before returning.
func (p *producer) Send(partition int, key, value []byte, done func(error)) error {
	record := &client.Record{Topic: p.topic, Partition: int32(partition), Key: key, Value: value}
	if err := p.p.Send(context.Background(), record, func(_ *client.Record, err error) { done(err) }); err != nil {
		return fmt.Errorf("ringlog driver: send: %w", err)
	}
	return nil
}

func (p *producer) Flush(ctx context.Context) error { return p.p.Flush(ctx) }

func (p *producer) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	return p.p.Close(ctx)
}

// NewConsumer reads partitions of topic from the earliest offset.
func (d *Driver) NewConsumer(_ context.Context, topic string, partitions []int) (bench.Consumer, error) {
	co := d.client.NewConsumer(client.ConsumerConfig{MaxWait: pollWaitMax})
	for _, p := range partitions {
		co.Assign(topic, int32(p), client.Earliest())
	}
	return &consumer{co: co}, nil
}

type consumer struct{ co *client.Consumer }

// Poll hands each fetched record's value to handle batch by batch, as it sits in the
// fetch response: no record object or copy per message (values are valid only during
// handle, as bench.Consumer allows).
func (c *consumer) Poll(ctx context.Context, handle func(int, []byte)) error {
	err := c.co.PollBatches(ctx, func(b *client.FetchedBatch) error {
		partition := int(b.Partition)
		return b.Records(func(_, _ int64, _, value []byte, _ []batch.RecordHeader) error {
			handle(partition, value)
			return nil
		})
	})
	if err != nil {
		return fmt.Errorf("ringlog driver: poll: %w", err)
	}
	return nil
}

// The runner's per-batch accounting applies to this driver.
var _ bench.BatchConsumer = (*consumer)(nil)

// errStopYield ends a batch's record loop when the bench's handler stops iterating early.
var errStopYield = errors.New("ringlog driver: handler stopped iterating")

// PollBatches hands each fetched batch to handle as one call (bench.BatchConsumer): the
// values iterator decodes the batch's records in place as the handler ranges over it.
func (c *consumer) PollBatches(ctx context.Context, handle func(int, iter.Seq[[]byte])) error {
	err := c.co.PollBatches(ctx, func(b *client.FetchedBatch) error {
		var decodeErr error
		handle(int(b.Partition), func(yield func([]byte) bool) {
			decodeErr = b.Records(func(_, _ int64, _, value []byte, _ []batch.RecordHeader) error {
				if !yield(value) {
					return errStopYield
				}
				return nil
			})
		})
		if decodeErr != nil && !errors.Is(decodeErr, errStopYield) {
			return decodeErr
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("ringlog driver: poll: %w", err)
	}
	return nil
}

func (c *consumer) Close() error { return nil }

// Close disconnects.
func (d *Driver) Close() error { return d.client.Close() }

// TopicConfigs maps a workload's durability and retention to topic configs. Retention
// deletes whole closed segments, so with retentionBytes the segments are a quarter of it
// (at least 1 MiB): with the default 1 GiB segments a 256 MiB retention would never delete
// anything, and the active segment's in-memory index would grow for the whole run.
func TopicConfigs(w bench.Workload) map[string]string {
	configs := map[string]string{}
	if w.Durability == "fsync" {
		configs[engine.ConfigFlushAlways] = strconv.FormatBool(true)
	}
	if w.RetentionBytes > 0 {
		configs[engine.ConfigRetentionBytes] = strconv.FormatInt(int64(w.RetentionBytes), 10)
		configs[engine.ConfigSegmentBytes] = strconv.FormatInt(max(int64(w.RetentionBytes)/4, 1<<20), 10)
	}
	if len(configs) == 0 {
		return nil
	}
	return configs
}
