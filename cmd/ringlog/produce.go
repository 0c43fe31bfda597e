package main

// `ringlog produce`: one record per stdin line, through the batching producer of
// netio/client. Memory stays bounded however large stdin is: the scanner holds one line,
// and the producer blocks Send once --buffer-bytes of records are unacknowledged.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/ringlog/ringlog/engine/batch"
	"github.com/ringlog/ringlog/netio/client"
	"github.com/ringlog/ringlog/netio/wire"
)

func init() {
	register("produce", "produce stdin lines (or JSON lines) as records to a topic", runProduce)
}

const (
	produceUsage = "produce TOPIC [--key-separator SEP] [--header k=v ...] [--input lines|json] [--acks 0|1|all] [--compression none|gzip|snappy|lz4|zstd] [--partition P]"
	// lineBytesMaxDefault matches the broker's default largest batch comfortably: a line is
	// one record and records are batched, so one line may not exceed a batch.
	lineBytesMaxDefault = 1 << 20
	// lineBytesMaxLimit is the largest --max-line-bytes: a line becomes one record, which
	// must fit one batch inside one request frame of the broker's default frame limit
	// (wire.FrameBytesMaxDefault, 64 MiB) with its batch, record and request headers. Half
	// the frame leaves room for those whatever the key separator and line count.
	lineBytesMaxLimit = wire.FrameBytesMaxDefault / 2
	// produceBufferBytesDefault bounds unacknowledged record bytes (the producer's
	// BufferBytesMax): 16 MiB keeps dozens of 256 KiB batches queued; resident memory
	// stays at a few times this however large stdin is.
	produceBufferBytesDefault = 16 << 20
	closeTimeout              = 60 * time.Second
)

type produceOptions struct {
	broker       string
	topic        string
	keySeparator string
	acks         client.Acks
	codec        batch.Codec
	partition    int32
	lineBytesMax int
	bufferBytes  int64
	linger       time.Duration
	batchBytes   int
	headers      headerFlag // --header, on every record
	inputJSON    bool       // --input json
}

// headerFlag collects repeated --header k=v in order (a key may repeat, as in Kafka).
type headerFlag []batch.RecordHeader

func (f *headerFlag) String() string {
	parts := make([]string, len(*f))
	for i, h := range *f {
		parts[i] = h.Key + "=" + string(h.Value)
	}
	return strings.Join(parts, ",")
}

func (f *headerFlag) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("%q: want key=value", s)
	}
	*f = append(*f, batch.RecordHeader{Key: k, Value: []byte(v)})
	return nil
}

func parseProduceFlags(args []string) (produceOptions, error) {
	var o produceOptions
	fs := newFlagSet("produce", produceUsage)
	broker := brokerFlag(fs)
	fs.StringVar(&o.keySeparator, "key-separator", "", "split each line at the first SEP: key before, value after (lines without SEP get a null key)")
	acks := fs.String("acks", "all", "acknowledgement: 0 (none), 1 (leader write) or all")
	compression := fs.String("compression", "none", "batch compression: none, gzip, snappy, lz4 or zstd")
	partition := fs.Int("partition", -1, "write every record to this partition; -1 = by key hash, sticky for null keys")
	fs.IntVar(&o.lineBytesMax, "max-line-bytes", lineBytesMaxDefault, "longest accepted stdin line")
	fs.Int64Var(&o.bufferBytes, "buffer-bytes", produceBufferBytesDefault, "unacknowledged record bytes before reading stdin pauses")
	fs.DurationVar(&o.linger, "linger", 5*time.Millisecond, "how long a batch waits for more records")
	fs.IntVar(&o.batchBytes, "batch-bytes", 256<<10, "batch size that triggers a send")
	fs.Var(&o.headers, "header", "add header key=value to every record (repeatable, order kept)")
	input := fs.String("input", "lines", "stdin format: lines (one record per line) or json (one object per line: key, value, headers, partition, timestamp; what consume --format json prints)")
	positional, err := parseArgs(fs, args)
	if err != nil {
		return o, err
	}
	if err := wantArgs(positional, "TOPIC"); err != nil {
		return o, err
	}
	o.broker, o.topic = *broker, positional[0]
	switch *acks {
	case "0":
		o.acks = client.AckNone
	case "1":
		o.acks = client.AckLeader
	case "all", "-1":
		o.acks = client.AckAll
	default:
		return o, fmt.Errorf("--acks %q: want 0, 1 or all", *acks)
	}
	if o.codec, err = batch.ParseCodec(*compression); err != nil {
		return o, fmt.Errorf("--compression %q: want none, gzip, snappy, lz4 or zstd", *compression)
	}
	if *partition < -1 || *partition >= partitionsMax {
		return o, fmt.Errorf("--partition %d: want a partition number", *partition)
	}
	o.partition = int32(*partition)
	if o.lineBytesMax < 1 || o.lineBytesMax > lineBytesMaxLimit {
		return o, fmt.Errorf("--max-line-bytes %d: want 1..%d (a line is one record, and a record must fit one request frame of the broker's default --max-frame-bytes %d)",
			o.lineBytesMax, lineBytesMaxLimit, wire.FrameBytesMaxDefault)
	}
	if o.bufferBytes < 1<<10 {
		return o, fmt.Errorf("--buffer-bytes %d: want at least 1024", o.bufferBytes)
	}
	if o.batchBytes < 1 {
		return o, fmt.Errorf("--batch-bytes %d: want > 0", o.batchBytes)
	}
	switch *input {
	case "lines":
	case "json":
		o.inputJSON = true
		if o.keySeparator != "" {
			return o, errors.New("--key-separator does not apply to --input json (records carry their key)")
		}
	default:
		return o, fmt.Errorf("--input %q: want lines or json", *input)
	}
	if o.linger == 0 {
		o.linger = -1 // the producer reads 0 as "default"
	}
	return o, nil
}

func runProduce(args []string) error {
	o, err := parseProduceFlags(args)
	if errors.Is(err, errHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	ctx, cancel := commandContext()
	defer cancel()
	c, err := dial(ctx, o.broker)
	if err != nil {
		return err
	}
	defer c.Close()
	sum, err := produceLines(ctx, c, o, os.Stdin)
	if err == nil || sum.records > 0 {
		fmt.Fprintln(os.Stderr, sum.String())
	}
	return err
}

// produceSummary is what `ringlog produce` reports on stderr.
type produceSummary struct {
	records int64 // acknowledged (or, with acks=0, sent)
	bytes   int64 // key and value bytes of those records
	elapsed time.Duration
}

func (s produceSummary) String() string {
	seconds := s.elapsed.Seconds()
	rate, recordRate := 0.0, 0.0
	if seconds > 0 {
		rate = float64(s.bytes) / 1e6 / seconds
		recordRate = float64(s.records) / seconds
	}
	return fmt.Sprintf("produced %s, %d bytes in %.3f s (%.2f MB/s, %.0f records/s)", plural(int(s.records), "record"), s.bytes, seconds, rate, recordRate)
}

// produceLines sends one record per line of in and waits for every acknowledgement. It
// stops at the first failed record (the producer has already retried what is retriable).
func produceLines(ctx context.Context, c *client.Client, o produceOptions, in io.Reader) (produceSummary, error) {
	start := time.Now()
	partitions, err := c.Partitions(ctx, o.topic)
	if err != nil {
		return produceSummary{}, err
	}
	if int(o.partition) >= partitions {
		return produceSummary{}, fmt.Errorf("partition %d of %s: %w (topic has %s)", o.partition, o.topic, wire.ErrUnknownTopicOrPartition, plural(partitions, "partition"))
	}
	p := c.NewProducer(client.ProducerConfig{
		Acks:           o.acks,
		Compression:    o.codec,
		BufferBytesMax: o.bufferBytes,
		Linger:         o.linger,
		BatchBytes:     o.batchBytes,
	})
	var (
		mu       sync.Mutex
		sum      produceSummary
		firstErr error // guarded by mu
	)
	callback := func(r *client.Record, err error) {
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			return
		}
		sum.records++
		sum.bytes += int64(len(r.Key) + len(r.Value))
	}
	failed := func() error {
		mu.Lock()
		defer mu.Unlock()
		return firstErr
	}

	scanner := bufio.NewScanner(in)
	scanner.Buffer(make([]byte, 0, min(64<<10, o.lineBytesMax)), o.lineBytesMax)
	sep := []byte(o.keySeparator)
	var line int64
	var sendErr error
	for scanner.Scan() {
		line++
		if sendErr = failed(); sendErr != nil {
			break
		}
		rec := &client.Record{Topic: o.topic, Partition: o.partition, Value: scanner.Bytes()}
		if o.inputJSON {
			if len(bytes.TrimSpace(rec.Value)) == 0 {
				continue // blank lines separate nothing in JSON lines
			}
			var err error
			if rec, err = recordFromJSON(o, rec.Value); err != nil {
				sendErr = fmt.Errorf("line %d: %w", line, err)
				break
			}
		} else if len(sep) > 0 {
			if key, value, ok := bytes.Cut(rec.Value, sep); ok {
				rec.Key, rec.Value = key, value
			}
		}
		if len(o.headers) > 0 {
			rec.Headers = append(rec.Headers, o.headers...)
		}
		// Send copies key and value, so the scanner may reuse its buffer.
		if err := p.Send(ctx, rec, callback); err != nil {
			sendErr = fmt.Errorf("line %d: %w", line, err)
			break
		}
	}
	if sendErr == nil && scanner.Err() != nil {
		sendErr = fmt.Errorf("read stdin after line %d: %w", line, scanner.Err())
		if errors.Is(scanner.Err(), bufio.ErrTooLong) {
			sendErr = fmt.Errorf("line %d is longer than --max-line-bytes %d", line+1, o.lineBytesMax)
		}
	}
	closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeTimeout)
	defer cancel()
	if ctx.Err() != nil { // interrupted: do not wait long for what is in flight
		closeCtx, cancel = context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
	}
	closeErr := p.Close(closeCtx)
	mu.Lock()
	defer mu.Unlock()
	sum.elapsed = time.Since(start)
	switch {
	case firstErr != nil:
		return sum, firstErr
	case sendErr != nil:
		return sum, sendErr
	case closeErr != nil:
		return sum, fmt.Errorf("waiting for acknowledgements: %w", closeErr)
	}
	return sum, nil
}

// recordFromJSON decodes one --input json line: {"key", "value" (with key_encoding and
// value_encoding utf8|base64), "headers" (a list of {key, value, value_encoding} or an
// object of UTF-8 values), "partition", "timestamp" (ms)}. A missing or null key or value
// is null. "topic" and "offset", which consume --format json prints, are accepted and
// ignored: the topic is the command's, offsets are the broker's.
func recordFromJSON(o produceOptions, line []byte) (*client.Record, error) {
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	var j jsonRecord
	if err := dec.Decode(&j); err != nil {
		return nil, fmt.Errorf("not a JSON record: %w", err)
	}
	if dec.More() {
		return nil, errors.New("more than one JSON value on the line")
	}
	rec := &client.Record{Topic: o.topic, Partition: o.partition}
	var err error
	if rec.Key, err = decodeBytes(j.Key, j.KeyEncoding, "key"); err != nil {
		return nil, err
	}
	if rec.Value, err = decodeBytes(j.Value, j.ValueEncoding, "value"); err != nil {
		return nil, err
	}
	if rec.Headers, err = headersFromJSON(j.Headers); err != nil {
		return nil, err
	}
	if j.Partition != nil {
		if *j.Partition < -1 || *j.Partition >= partitionsMax {
			return nil, fmt.Errorf("partition %d: want a partition number or -1", *j.Partition)
		}
		rec.Partition = *j.Partition
	}
	if j.Timestamp != nil {
		if *j.Timestamp < 0 {
			return nil, fmt.Errorf("timestamp %d: want milliseconds since the epoch", *j.Timestamp)
		}
		rec.Timestamp = time.UnixMilli(*j.Timestamp)
	}
	return rec, nil
}
