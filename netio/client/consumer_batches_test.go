package client_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ringlog/ringlog/engine/batch"
	"github.com/ringlog/ringlog/netio/client"
)

// produceForBatches writes n records to each of 2 partitions of topic in small batches
// (about 4 KiB), keys, headers and null values mixed in.
func produceForBatches(t *testing.T, ctx context.Context, c *client.Client, topic string, codec batch.Codec, n int) {
	t.Helper()
	if err := c.CreateTopic(ctx, topic, 2, nil); err != nil {
		t.Fatal(err)
	}
	p := c.NewProducer(client.ProducerConfig{Acks: client.AckLeader, BatchBytes: 4 << 10, Compression: codec})
	for i := range n {
		for part := range int32(2) {
			r := &client.Record{Topic: topic, Partition: part, Key: fmt.Appendf(nil, "k%d", i), Value: fmt.Appendf(nil, "value-%d-%06d", part, i)}
			if i%7 == 0 {
				r.Headers = []batch.RecordHeader{{Key: "seq", Value: fmt.Appendf(nil, "%d", i)}}
			}
			if i%11 == 0 {
				r.Value = nil
			}
			if err := p.Send(ctx, r, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

func describe(topic string, partition int32, offset, ts int64, key, value []byte, headers []batch.RecordHeader) string {
	if len(headers) == 0 {
		headers = nil
	}
	return fmt.Sprintf("%s/%d@%d ts=%d key=%q value=%q null=%v headers=%v", topic, partition, offset, ts, key, value, value == nil, headers)
}

// TestPollBatchesMatchesPoll: PollBatches hands out exactly the records Poll returns, from
// the same start positions (one in the middle of a batch), uncompressed and compressed.
func TestPollBatchesMatchesPoll(t *testing.T) {
	c, stop := startBroker(t, 2, t.TempDir())
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const n = 600
	for _, codec := range []batch.Codec{batch.CodecNone, batch.CodecZstd} {
		topic := "batches-" + codec.String()
		produceForBatches(t, ctx, c, topic, codec, n)
		assign := func(co *client.Consumer) {
			co.Assign(topic, 0, client.AtOffset(7)) // most likely inside the first batch
			co.Assign(topic, 1, client.Earliest())
		}
		const want = 2*n - 7
		cfg := client.ConsumerConfig{MaxWait: time.Millisecond, PartitionMaxBytes: 8 << 10}
		polling := c.NewConsumer(cfg)
		assign(polling)
		var polled []string
		for len(polled) < want {
			records, err := polling.Poll(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range records {
				polled = append(polled, describe(r.Topic, r.Partition, r.Offset, r.Timestamp.UnixMilli(), r.Key, r.Value, r.Headers))
			}
		}
		batching := c.NewConsumer(cfg)
		assign(batching)
		var walked []string
		batches := 0
		midBatch := false
		for len(walked) < want {
			err := batching.PollBatches(ctx, func(b *client.FetchedBatch) error {
				batches++
				midBatch = midBatch || b.From() > b.BaseOffset
				h, err := batch.ParseHeader(b.Raw)
				if err != nil || h.BaseOffset != b.BaseOffset || h.LastOffset() != b.LastOffset || h.Size() != len(b.Raw) {
					t.Fatalf("batch %s/%d [%d, %d]: raw bytes hold header %+v (%v)", b.Topic, b.Partition, b.BaseOffset, b.LastOffset, h, err)
				}
				if !b.CRCChecked() { // the reader checks every whole batch's CRC as it arrives
					t.Fatalf("batch %s/%d [%d, %d]: CRC not checked on arrival", b.Topic, b.Partition, b.BaseOffset, b.LastOffset)
				}
				return b.Records(func(offset, ts int64, key, value []byte, headers []batch.RecordHeader) error {
					walked = append(walked, describe(b.Topic, b.Partition, offset, ts, key, value, headers))
					return nil
				})
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		if len(walked) != len(polled) {
			t.Fatalf("%s: Poll returned %d records, PollBatches %d", codec, len(polled), len(walked))
		}
		for i := range polled {
			if polled[i] != walked[i] {
				t.Fatalf("%s: record %d: Poll %s, PollBatches %s", codec, i, polled[i], walked[i])
			}
		}
		if !midBatch || batches < 4 {
			t.Fatalf("%s: %d batches, one started mid-batch: %v; the test meant several and one", codec, batches, midBatch)
		}
		for part := range int32(2) {
			if pos, err := batching.Position(ctx, topic, part); err != nil || pos != n {
				t.Fatalf("%s: position of partition %d: %d, %v; want %d", codec, part, pos, err, n)
			}
		}
	}
}

// TestPollBatchesCallbackError: an error from the callback comes back unchanged and leaves
// the position before the batch, which the next poll hands out again; a Seek from the
// callback applies from the partition's next batch on.
func TestPollBatchesCallbackError(t *testing.T) {
	c, stop := startBroker(t, 1, t.TempDir())
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	produceForBatches(t, ctx, c, "t", batch.CodecNone, 300)
	co := c.NewConsumer(client.ConsumerConfig{MaxWait: time.Millisecond})
	co.Assign("t", 0, client.Earliest())
	stopped := errors.New("stop here")
	var first client.FetchedBatch
	err := co.PollBatches(ctx, func(b *client.FetchedBatch) error {
		first = *b
		return stopped
	})
	if err != stopped {
		t.Fatalf("PollBatches returned %v, want the callback's error unchanged", err)
	}
	if pos, err := co.Position(ctx, "t", 0); err != nil || pos != 0 {
		t.Fatalf("position after a refused batch: %d, %v", pos, err)
	}
	var seen []int64
	if err := co.PollBatches(ctx, func(b *client.FetchedBatch) error {
		seen = append(seen, b.BaseOffset)
		if len(seen) == 2 {
			co.Seek("t", 0, client.AtOffset(first.LastOffset+1)) // read the second batch again
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(seen) != 2 || seen[0] != first.BaseOffset {
		t.Fatalf("batches %v after the refused one at %d: want it again, then one more before the Seek took effect", seen, first.BaseOffset)
	}
	if err := co.PollBatches(ctx, func(b *client.FetchedBatch) error {
		if b.BaseOffset != seen[1] {
			t.Fatalf("after the Seek: batch at %d, want %d", b.BaseOffset, seen[1])
		}
		return stopped
	}); err != stopped {
		t.Fatal(err)
	}
}

// BenchmarkRealBrokerCatchUp1KiB: reading 64 MiB of 1 KiB records back from the real
// broker (ring driver, sendfile egress from the page cache) over loopback, by Poll and by
// PollBatches with FetchedBatch.Records, touching every value; per op is one record. The
// two share the broker and the data, so their ratio is the figure (the machine is shared).
func BenchmarkRealBrokerCatchUp1KiB(b *testing.B) {
	c, stop := realBrokerBench(b, 1, "ring")
	defer stop()
	ctx := context.Background()
	const records = 64 << 10
	fillBenchTopic(b, c, records)
	newConsumer := func() *client.Consumer {
		co := c.NewConsumer(client.ConsumerConfig{MaxWait: time.Millisecond})
		co.Assign("bench", 0, client.Earliest())
		return co
	}
	sum := 0
	b.Run("Poll", func(b *testing.B) {
		co := newConsumer()
		b.SetBytes(benchValueBytes)
		b.ReportAllocs()
		for read := 0; read < b.N; {
			recs, err := co.Poll(ctx)
			if err != nil {
				b.Fatal(err)
			}
			for i := range recs {
				sum += len(recs[i].Value)
			}
			if read += len(recs); len(recs) == 0 {
				co.Seek("bench", 0, client.Earliest())
			}
		}
	})
	b.Run("PollBatches", func(b *testing.B) {
		co := newConsumer()
		read := 0
		onRecord := func(_, _ int64, _, value []byte, _ []batch.RecordHeader) error {
			sum += len(value)
			read++
			return nil
		}
		onBatch := func(fb *client.FetchedBatch) error { return fb.Records(onRecord) }
		b.SetBytes(benchValueBytes)
		b.ReportAllocs()
		for read < b.N {
			before := read
			if err := co.PollBatches(ctx, onBatch); err != nil {
				b.Fatal(err)
			}
			if read == before {
				co.Seek("bench", 0, client.Earliest())
			}
		}
	})
}

// TestPollBatchesDefaultFetchSize: a consumer with the default configuration reads up to
// 4 MiB of one partition's backlog in one fetch round (catch-up pays a fixed cost per round).
func TestPollBatchesDefaultFetchSize(t *testing.T) {
	c, stop := startBroker(t, 1, t.TempDir())
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const topic, valueBytes, records = "fetch-size", 1 << 10, 5 << 10 // 5 MiB of values
	if err := c.CreateTopic(ctx, topic, 1, nil); err != nil {
		t.Fatal(err)
	}
	p := c.NewProducer(client.ProducerConfig{Acks: client.AckLeader, BatchBytes: 64 << 10})
	value := make([]byte, valueBytes)
	for range records {
		if err := p.Send(ctx, &client.Record{Topic: topic, Partition: 0, Value: value}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	co := c.NewConsumer(client.ConsumerConfig{MaxWait: time.Millisecond})
	co.Assign(topic, 0, client.Earliest())
	var read int
	if err := co.PollBatches(ctx, func(b *client.FetchedBatch) error {
		read += len(b.Raw)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if read <= 3<<20 || read > 4<<20 {
		t.Fatalf("first round read %d bytes of a 5 MiB backlog, want more than 3 MiB and at most 4 MiB", read)
	}
}
