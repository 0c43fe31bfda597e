package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ringlog/ringlog/engine/batch"
	"github.com/ringlog/ringlog/netio/client"
	"github.com/ringlog/ringlog/netio/internal/brokertest"
)

// Fetching ahead (ConsumerConfig.NoPrefetch off): an answer bringing records while the
// broker holds more sends that address's next fetch before the records are handed out.

// TestPrefetchReadsEveryRecordOnce: a backlog over 4 partitions on 2 shards, read in small
// fetches by PollBatches with and without prefetch, hands out every offset of every
// partition exactly once and in order.
func TestPrefetchReadsEveryRecordOnce(t *testing.T) {
	b := brokertest.Start(t, brokertest.Options{Shards: 2, Dir: t.TempDir(), Driver: "ring", ShardListeners: true})
	defer b.Stop()
	c := b.Client
	ctx := ctxT(t)
	const topic, partitions, perPartition = "ahead", 4, 2000
	produceRecords(t, ctx, c, topic, partitions, perPartition)
	for _, noPrefetch := range []bool{false, true} {
		co := c.NewConsumer(client.ConsumerConfig{MaxWait: time.Millisecond, PartitionMaxBytes: 8 << 10, NoPrefetch: noPrefetch})
		for p := range int32(partitions) {
			co.Assign(topic, p, client.Earliest())
		}
		next := map[int32]int64{}
		total, sawAhead := 0, false
		for polls := 0; total < partitions*perPartition; polls++ {
			if polls > 10000 {
				t.Fatalf("NoPrefetch=%v: read %d of %d records", noPrefetch, total, partitions*perPartition)
			}
			err := co.PollBatches(ctx, func(b *client.FetchedBatch) error {
				return b.Records(func(offset, _ int64, _, _ []byte, _ []batch.RecordHeader) error {
					if offset != next[b.Partition] {
						t.Fatalf("NoPrefetch=%v: partition %d handed out offset %d, want %d", noPrefetch, b.Partition, offset, next[b.Partition])
					}
					next[b.Partition]++
					total++
					return nil
				})
			})
			if err != nil {
				t.Fatal(err)
			}
			sawAhead = sawAhead || client.FetchesInFlight(co) > 0
		}
		if !noPrefetch && !sawAhead {
			t.Fatal("no fetch in flight between polls of a backlog")
		}
	}
}

// TestPrefetchOvertakenBySeekAndError: an answer fetched ahead is dropped when a Seek moved
// the partition meanwhile, or when the callback refused a batch (the position stayed
// behind): the next poll hands out records from the new position, without an empty round.
func TestPrefetchOvertakenBySeekAndError(t *testing.T) {
	c, stop := startBroker(t, 1, t.TempDir())
	defer stop()
	ctx := ctxT(t)
	produceRecords(t, ctx, c, "seek", 1, 3000)
	co := c.NewConsumer(client.ConsumerConfig{MaxWait: 10 * time.Second, PartitionMaxBytes: 8 << 10})
	co.Assign("seek", 0, client.Earliest())
	firstFrom := func(fn func(*client.FetchedBatch) error) int64 {
		t.Helper()
		from := int64(-1)
		err := co.PollBatches(ctx, func(b *client.FetchedBatch) error {
			if from < 0 {
				from = b.From()
			}
			return fn(b)
		})
		if err != nil && !errors.Is(err, errRefused) {
			t.Fatal(err)
		}
		return from
	}
	accept := func(*client.FetchedBatch) error { return nil }
	firstFrom(accept)
	if client.FetchesInFlight(co) != 1 {
		t.Fatal("no fetch in flight after a round that left data at the broker")
	}
	co.Seek("seek", 0, client.AtOffset(17))
	if from := firstFrom(accept); from != 17 {
		t.Fatalf("after Seek(17) with a fetch ahead in flight: first record handed out %d", from)
	}
	// Refuse the second batch of a round: the fetch sent ahead starts after the round.
	var refusedAt int64
	n := 0
	firstFrom(func(b *client.FetchedBatch) error {
		if n++; n == 2 {
			refusedAt = b.From()
			return errRefused
		}
		return nil
	})
	if n != 2 {
		t.Fatalf("round handed out %d batches, want at least 2", n)
	}
	if from := firstFrom(accept); from != refusedAt {
		t.Fatalf("after refusing the batch at %d: next poll starts at %d", refusedAt, from)
	}
}

var errRefused = errors.New("refused by the test")

// TestCaughtUpAddressDoesNotHoldOthers: a partition whose shard has nothing long-polls
// without holding up the answers of another shard: Poll returns the other's records
// instead of waiting out MaxWait (30 s here, longer than the test's context).
func TestCaughtUpAddressDoesNotHoldOthers(t *testing.T) {
	b := brokertest.Start(t, brokertest.Options{Shards: 2, Dir: t.TempDir(), Driver: "ring", ShardListeners: true})
	defer b.Stop()
	c := b.Client
	ctx := ctxT(t)
	const topic = "apart"
	if err := c.CreateTopic(ctx, topic, 2, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Partitions(ctx, topic); err != nil {
		t.Fatal(err)
	}
	if client.LeaderAddrForTest(c, topic, 0) == client.LeaderAddrForTest(c, topic, 1) {
		t.Fatal("both partitions on one shard address: the test needs two")
	}
	p := c.NewProducer(client.ProducerConfig{Acks: client.AckLeader})
	if _, err := p.SendSync(ctx, &client.Record{Topic: topic, Partition: 1, Value: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	co := c.NewConsumer(client.ConsumerConfig{MaxWait: 30 * time.Second})
	co.Assign(topic, 0, client.Earliest())
	co.Assign(topic, 1, client.Earliest())
	pollCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	got := 0
	for got == 0 {
		recs, err := co.Poll(pollCtx)
		if err != nil {
			t.Fatalf("Poll waited for the empty shard's long-poll: %v", err)
		}
		got = len(recs)
	}
	if client.FetchesInFlight(co) != 1 {
		t.Fatalf("%d fetches in flight, want the empty partition's long-poll", client.FetchesInFlight(co))
	}
}

// produceRecords writes n 100-byte records to each of partitions partitions of a new topic.
func produceRecords(t *testing.T, ctx context.Context, c *client.Client, topic string, partitions int32, n int) {
	t.Helper()
	if err := c.CreateTopic(ctx, topic, partitions, nil); err != nil {
		t.Fatal(err)
	}
	p := c.NewProducer(client.ProducerConfig{Acks: client.AckLeader, BatchBytes: 4 << 10})
	value := make([]byte, 100)
	for i := range n {
		for part := range partitions {
			value[0] = byte(i)
			if err := p.Send(ctx, &client.Record{Topic: topic, Partition: part, Value: value}, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
}
