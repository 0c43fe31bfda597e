package client_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/ringlog/ringlog/netio/client"
)

// Null keys, against the real broker: a run of records goes to one partition until
// BatchBytes of record bytes went to it (KIP-794), then moves to another partition, and the
// finished run's batch is sent without waiting for its linger.

// stickyValue makes each record cost 124 bytes of BatchBytes (100 + the 24 the producer
// counts per record): a 1 KiB batch takes 8 of them, a ninth would overflow it.
var stickyValue = bytes.Repeat([]byte("v"), 100)

const stickyRunRecords = 8

// stickyProducer starts a real broker with a 16-partition topic "nullkeys" and returns a
// producer of 1 KiB batches that linger for an hour: a batch goes out only because it is
// full, its run ended, or a Flush.
func stickyProducer(t *testing.T) (*client.Producer, context.Context) {
	c, stop := startBroker(t, 2, t.TempDir())
	t.Cleanup(stop)
	ctx := ctxT(t)
	if err := c.CreateTopic(ctx, "nullkeys", 16, nil); err != nil {
		t.Fatal(err)
	}
	p := c.NewProducer(client.ProducerConfig{BatchBytes: 1 << 10, Linger: time.Hour, Acks: client.AckLeader})
	t.Cleanup(func() { p.Close(context.Background()) })
	return p, ctx
}

func TestStickyRunsMeasuredInBatchBytes(t *testing.T) {
	p, ctx := stickyProducer(t)
	acked := make(chan *client.Record, 200)
	var recs []*client.Record
	send := func() {
		r := &client.Record{Topic: "nullkeys", Partition: -1, Value: stickyValue}
		recs = append(recs, r)
		if err := p.Send(ctx, r, func(r *client.Record, err error) {
			if err != nil {
				t.Errorf("record failed: %v", err)
			}
			acked <- r
		}); err != nil {
			t.Fatal(err)
		}
	}
	for range stickyRunRecords + 1 {
		send()
	}
	// The ninth record started a new run: the first run's batch must be acknowledged
	// without a Flush (its linger is an hour; ctx bounds the wait).
	for i := range stickyRunRecords {
		select {
		case r := <-acked:
			if r.Partition != recs[0].Partition {
				t.Fatalf("acknowledged record on partition %d, want the first run's %d", r.Partition, recs[0].Partition)
			}
		case <-ctx.Done():
			t.Fatalf("the finished run's batch was not sent: %d of %d records acknowledged", i, stickyRunRecords)
		}
	}
	for range 200 - len(recs) {
		send()
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	// Maximal runs of one partition: exactly stickyRunRecords each (the last may be short),
	// and each run on a partition other than the one before.
	start := 0
	for i := 1; i <= len(recs); i++ {
		if i < len(recs) && recs[i].Partition == recs[start].Partition {
			continue
		}
		if n := i - start; n != stickyRunRecords && i != len(recs) {
			t.Fatalf("records %d..%d went to partition %d: a run of %d, want %d (1 KiB of 124-byte records)",
				start, i-1, recs[start].Partition, n, stickyRunRecords)
		}
		if start > 0 && recs[start-1].Partition == recs[start].Partition {
			t.Fatalf("run at record %d stayed on partition %d", start, recs[start].Partition)
		}
		start = i
	}
	used := map[int32]bool{}
	for _, r := range recs {
		if r.Partition < 0 || r.Offset < 0 {
			t.Fatalf("record placed at %d/%d", r.Partition, r.Offset)
		}
		used[r.Partition] = true
	}
	if len(used) < 4 {
		t.Fatalf("25 runs used %d partitions of 16", len(used))
	}
}

// A Flush (or a linger expiry) seals the open batch but does not end the run: KIP-480
// moved to a new partition with every new batch, KIP-794 does not.
func TestStickyRunOutlastsFlush(t *testing.T) {
	p, ctx := stickyProducer(t)
	var recs []*client.Record
	for range 4 { // 4 flushes of 2 records: 8 records, one run
		for range 2 {
			r := &client.Record{Topic: "nullkeys", Partition: -1, Value: stickyValue}
			recs = append(recs, r)
			if err := p.Send(ctx, r, nil); err != nil {
				t.Fatal(err)
			}
		}
		if err := p.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for i, r := range recs {
		if r.Partition != recs[0].Partition {
			t.Fatalf("record %d went to partition %d after a flush, want the run's %d", i, r.Partition, recs[0].Partition)
		}
	}
	// SendSync places null keys the same way.
	r := &client.Record{Topic: "nullkeys", Partition: -1, Value: stickyValue}
	if _, err := p.SendSync(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	if r.Partition == recs[0].Partition {
		t.Fatalf("the ninth record stayed on partition %d: the run holds 8", r.Partition)
	}
}
