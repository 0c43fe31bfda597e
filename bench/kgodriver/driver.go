// Package kgodriver plugs franz-go's kgo — a Kafka client, not ours — into the benchmark
// framework as driver "kgo". Against ringlogd's Kafka listener (--kafka-listen) it measures
// what a Kafka application sees; against any Kafka-protocol broker it measures that broker
// the same way. Like every driver it talks to brokers only over the wire.
//
// Mapping, as in ringlogdriver so the two compare like for like: topics are created with
// the same configs (ringlogdriver.TopicConfigs, sent in CreateTopics); producers batch with
// linger 1 ms (none for one record in flight), the workload's acks, codec and batch size,
// partitions chosen by the workload (kgo's manual partitioner) or, for null keys of
// keyDistribution none, by kgo's default uniform-bytes partitioner (KIP-794), idempotent
// only with acks=all (kgo requires it); consumers assign their partitions from the earliest offset and long-poll
// for at most 100 ms.
//
// Each client gets the configuration a throughput-minded kgo application would use
// (docs/benchmarks.md, "A Kafka client (kgo) vs the bundled client"): without idempotence
// up to 5 produce requests per broker in flight (kgo's default is 1; Kafka's
// max.in.flight.requests.per.connection default and the bundled client's idempotent
// in-flight batches are 5), and records, their value buffers and their promises are
// recycled instead of allocated per record, on produce (a pool of sends) and on fetch
// (kgo.WithPools with a PoolRecords, every record recycled once handled). Fetches ask for
// 1 MiB per partition and 16 MiB per response (8 MiB responses for 8 partitions). The bundled
// consumer asks 4 MiB per partition since b763583, but kgo read slower with that, kgo against
// kgo in one run (2026-12-02, 1 GiB backlog): 4 MiB at 1.16, 0.98, 0.80, 0.87 of 1 MiB (two
// invocations), with kgo's client CPU per GB higher in all four (it allocates and zeroes each
// response's buffer: 16 MiB instead of 8). The consumer is a bench.BatchConsumer, as the bundled
// one is: the runner accounts per hand-over (a partition's records of one fetch), not per
// message, so the harness does the same work per message behind both clients (the payload
// check).
//
// Tried and dropped, kgo against kgo in alternating rounds on fetch-only-1kib
// (`DRIVERS="kgo kgo-x" bench/kafka-vs-bundled.sh`, docs/benchmarks.md): one kgo
// client shared by all producers of a topic (one connection, as the bundled producers share
// the bundled client's; larger batches) filled the backlog at 0.89 of the rate (median of 4),
// and fetches of 128 KiB per partition and 1 MiB per response read it at 0.30 (2026-12-01);
// 256 KiB per partition and 2 MiB per response read it at 0.73 and 0.92, and GOGC=400 at
// 0.98 (4 rounds) against GOGC=100 (2026-12-02, session 13).
package kgodriver

import (
	"context"
	"fmt"
	"iter"
	"sync"
	"time"

	"github.com/ringlog/ringlog/bench"
	"github.com/ringlog/ringlog/bench/ringlogdriver"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// DefaultAddress is the Kafka port ringlogd's example configuration uses.
const DefaultAddress = "127.0.0.1:9092"

// Client settings, matching ringlogdriver's.
const (
	lingerBatching     = time.Millisecond
	pollWaitMax        = 100 * time.Millisecond
	closeTimeout       = 30 * time.Second
	bufferedBytesMax   = 64 << 20
	requestTimeout     = 30 * time.Second
	maxInFlightDefault = 1024
	// produceRequestsInflight: produce requests per broker in flight without idempotence
	// (with it kgo allows 5 and ignores the option).
	produceRequestsInflight = 5
	fetchBytesMax           = 16 << 20
	batchBytesMax           = 256 << 10 // the bundled producer's BatchBytes default; the workload's batchBytes overrides it
	partitionFetchBytes     = 1 << 20   // 4 MiB (the bundled consumer's default) measured worse for kgo: package comment
)

func init() {
	bench.RegisterDriver("kgo", Open)
}

// Driver is an admin kgo client of one broker.
type Driver struct {
	address string
	admin   *kgo.Client
	configs map[string]string
	// consumerOpts are the options every consumer client gets besides its assignment.
	consumerOpts []kgo.Opt
}

// Open connects to a Kafka-protocol broker.
func Open(address string, w bench.Workload) (bench.Driver, error) {
	if address == "" {
		address = DefaultAddress
	}
	admin, err := kgo.NewClient(kgo.SeedBrokers(address))
	if err != nil {
		return nil, fmt.Errorf("kgo driver: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	if err := admin.Ping(ctx); err != nil {
		admin.Close()
		return nil, fmt.Errorf("kgo driver: reach %s: %w", address, err)
	}
	return &Driver{address: address, admin: admin, configs: ringlogdriver.TopicConfigs(w), consumerOpts: []kgo.Opt{
		kgo.FetchMaxWait(pollWaitMax), kgo.FetchMaxBytes(fetchBytesMax), kgo.FetchMaxPartitionBytes(partitionFetchBytes),
		kgo.WithPools(&recordPool{}),
	}}, nil
}

// Info names the client; the broker's storage is whatever it was started with.
func (d *Driver) Info() bench.DriverInfo {
	return bench.DriverInfo{Name: "kgo", Version: "franz-go kgo (Kafka protocol)", StorageMode: "broker default + workload topic configs",
		IOBackend: "broker-side", Address: d.address}
}

// CreateTopic creates the topic with CreateTopics and the workload's configs.
func (d *Driver) CreateTopic(ctx context.Context, name string, partitions int) error {
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = name, int32(partitions), -1
	for k, v := range d.configs {
		c := kmsg.NewCreateTopicsRequestTopicConfig()
		c.Name, c.Value = k, kmsg.StringPtr(v)
		rt.Configs = append(rt.Configs, c)
	}
	req.Topics = append(req.Topics, rt)
	req.TimeoutMillis = int32(requestTimeout.Milliseconds())
	resp, err := req.RequestWith(ctx, d.admin)
	if err != nil {
		return fmt.Errorf("kgo driver: create topic %s: %w", name, err)
	}
	if err := kerr.ErrorForCode(resp.Topics[0].ErrorCode); err != nil {
		return fmt.Errorf("kgo driver: create topic %s: %w", name, err)
	}
	return nil
}

// PlacesNullKeys: with keyDistribution none the producers use kgo's uniform-bytes
// partitioner (Kafka's default) instead of the manual one.
func (d *Driver) PlacesNullKeys() bool { return true }

// NewProducer returns a kgo producer client for topic.
func (d *Driver) NewProducer(_ context.Context, topic string, opts bench.ProducerOptions) (bench.Producer, error) {
	inFlight := opts.MaxInFlight
	if inFlight <= 0 {
		inFlight = maxInFlightDefault
	}
	batchBytes := batchBytesMax
	if opts.BatchBytes > 0 {
		batchBytes = opts.BatchBytes
	}
	partitioner := kgo.ManualPartitioner()
	if opts.ClientPlacesNullKeys {
		// Kafka's default for null keys: sticky runs of batch.size bytes, the next partition
		// chosen by queue length (KIP-794 with adaptive partitioning).
		partitioner = kgo.UniformBytesPartitioner(batchBytes, true, true, nil)
	}
	kopts := []kgo.Opt{
		kgo.SeedBrokers(d.address), kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(partitioner),
		kgo.ProducerLinger(lingerBatching), kgo.ProducerBatchMaxBytes(int32(batchBytes)), kgo.MaxBufferedBytes(bufferedBytesMax), kgo.MaxBufferedRecords(max(inFlight, 1)),
	}
	if inFlight == 1 {
		kopts = append(kopts, kgo.ProducerLinger(0))
	}
	switch opts.Acks {
	case "0":
		kopts = append(kopts, kgo.RequiredAcks(kgo.NoAck()), kgo.DisableIdempotentWrite(),
			kgo.MaxProduceRequestsInflightPerBroker(produceRequestsInflight))
	case "1":
		kopts = append(kopts, kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite(),
			kgo.MaxProduceRequestsInflightPerBroker(produceRequestsInflight))
	case "all":
		kopts = append(kopts, kgo.RequiredAcks(kgo.AllISRAcks()))
	default:
		return nil, fmt.Errorf("kgo driver: acks %q", opts.Acks)
	}
	codec, err := compression(opts.Compression)
	if err != nil {
		return nil, err
	}
	kopts = append(kopts, kgo.ProducerBatchCompression(codec))
	cl, err := kgo.NewClient(kopts...)
	if err != nil {
		return nil, fmt.Errorf("kgo driver: producer: %w", err)
	}
	return &producer{cl: cl, topic: topic}, nil
}

func compression(name string) (kgo.CompressionCodec, error) {
	switch name {
	case "none", "":
		return kgo.NoCompression(), nil
	case "gzip":
		return kgo.GzipCompression(), nil
	case "snappy":
		return kgo.SnappyCompression(), nil
	case "lz4":
		return kgo.Lz4Compression(), nil
	case "zstd":
		return kgo.ZstdCompression(), nil
	}
	return kgo.NoCompression(), fmt.Errorf("kgo driver: compression %q", name)
}

type producer struct {
	cl    *kgo.Client
	topic string
	sends sync.Pool // of *send
}

// send is one record in flight: kgo keeps the record and its key and value slices until it
// calls the promise, after which the send goes back to the producer's pool with its buffer
// and its promise (bound once, when the send was made).
type send struct {
	p       *producer
	rec     kgo.Record
	buf     []byte // key then value
	done    func(error)
	promise func(*kgo.Record, error)
}

func (s *send) complete(_ *kgo.Record, err error) {
	done := s.done
	s.rec, s.done = kgo.Record{}, nil
	s.p.sends.Put(s)
	done(err)
}

// Send copies key and value into a pooled send (kgo keeps the slices until the record is
// acknowledged; the caller's are only valid until Send returns).
func (p *producer) Send(partition int, key, value []byte, done func(error)) error {
	s, _ := p.sends.Get().(*send)
	if s == nil {
		s = &send{p: p}
		s.promise = s.complete
	}
	s.buf = append(append(s.buf[:0], key...), value...)
	s.rec = kgo.Record{Topic: p.topic, Partition: int32(partition), Value: s.buf[len(key):]}
	if key != nil {
		s.rec.Key = s.buf[:len(key):len(key)]
	}
	s.done = done
	p.cl.Produce(context.Background(), &s.rec, s.promise)
	return nil
}

func (p *producer) Flush(ctx context.Context) error { return p.cl.Flush(ctx) }

func (p *producer) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	err := p.cl.Flush(ctx)
	p.cl.Close()
	return err
}

// NewConsumer assigns partitions of topic from the earliest offset.
func (d *Driver) NewConsumer(_ context.Context, topic string, partitions []int) (bench.Consumer, error) {
	assigned := map[int32]kgo.Offset{}
	for _, p := range partitions {
		assigned[int32(p)] = kgo.NewOffset().AtStart()
	}
	opts := append([]kgo.Opt{kgo.SeedBrokers(d.address), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: assigned})}, d.consumerOpts...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("kgo driver: consumer: %w", err)
	}
	return &consumer{cl: cl}, nil
}

type consumer struct{ cl *kgo.Client }

// poll waits for the next fetches and returns the first partition error (the run is over
// when ctx is: the runner stops polling on an error with ctx done).
func (c *consumer) poll(ctx context.Context) (kgo.Fetches, error) {
	fetches := c.cl.PollFetches(ctx)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var firstErr error
	fetches.EachError(func(topic string, p int32, err error) {
		if firstErr == nil {
			firstErr = fmt.Errorf("kgo driver: fetch %s/%d: %w", topic, p, err)
		}
	})
	return fetches, firstErr
}

func (c *consumer) Poll(ctx context.Context, handle func(int, []byte)) error {
	fetches, err := c.poll(ctx)
	fetches.EachRecord(func(r *kgo.Record) {
		handle(int(r.Partition), r.Value)
		r.Recycle() // handle keeps nothing; the slice of records goes back once all are recycled
	})
	return err
}

// The runner's per-batch accounting applies to this driver as to the bundled one.
var _ bench.BatchConsumer = (*consumer)(nil)

// PollBatches hands each partition's records of a fetch to handle as one call
// (bench.BatchConsumer): kgo's unit of hand-over is a partition's slice of decoded records
// (one or more stored batches), as the bundled client's is a stored batch. Every record is
// recycled once handle returns, also those an early-stopping handler did not reach.
func (c *consumer) PollBatches(ctx context.Context, handle func(int, iter.Seq[[]byte])) error {
	fetches, err := c.poll(ctx)
	fetches.EachPartition(func(p kgo.FetchTopicPartition) {
		if len(p.Records) == 0 {
			return
		}
		handle(int(p.Partition), func(yield func([]byte) bool) {
			for _, r := range p.Records {
				if !yield(r.Value) {
					return
				}
			}
		})
		for _, r := range p.Records {
			r.Recycle()
		}
	})
	return err
}

// recordPool recycles the slices kgo decodes fetched records into (kgo.PoolRecords).
type recordPool struct{ pool sync.Pool }

func (rp *recordPool) GetRecords(n int) []kgo.Record {
	if s, ok := rp.pool.Get().(*[]kgo.Record); ok && cap(*s) >= n {
		return (*s)[:0]
	}
	return make([]kgo.Record, 0, n)
}

// PutRecords keeps the slice as it is: kgo puts it back once every record in it was
// recycled, and Recycle zeroes the record.
func (rp *recordPool) PutRecords(records []kgo.Record) {
	records = records[:0]
	rp.pool.Put(&records)
}

func (c *consumer) Close() error {
	c.cl.Close()
	return nil
}

// Close disconnects the admin client.
func (d *Driver) Close() error {
	d.admin.Close()
	return nil
}
