package netio_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ringlog/ringlog/engine/shard"
	"github.com/ringlog/ringlog/netio/client"
	"github.com/ringlog/ringlog/netio/internal/brokertest"
	"github.com/ringlog/ringlog/netio/wire"
)

// One fetch over partitions on both shards, each partition allowed the whole response
// budget (Kafka clients send max.partition.fetch.bytes >= fetch.max.bytes too), answers
// every partition that has records, with the response within the budget. The shards read
// concurrently; the old reserve-before-read let one partition's reservation of the whole
// budget leave partitions read meanwhile on the other shard empty.
func TestBrokerFetchPartitionMaxIsResponseMax(t *testing.T) {
	rb := brokertest.Start(t, brokertest.Options{Shards: 2})
	c := rb.Client
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const parts = 8
	if err := c.CreateTopic(ctx, "fair", parts, nil); err != nil {
		t.Fatal(err)
	}
	onShard := map[int]int{}
	for p := int32(0); p < parts; p++ {
		si, err := rb.Core.ShardOf(shard.TopicPartition{Topic: "fair", Partition: p})
		if err != nil {
			t.Fatal(err)
		}
		onShard[si]++
	}
	if len(onShard) != 2 {
		t.Fatalf("partitions by shard %v, want both shards", onShard)
	}
	// Partition 0 stays empty; the others get a few small batches each.
	pr := c.NewProducer(client.ProducerConfig{Acks: client.AckLeader})
	for p := int32(1); p < parts; p++ {
		for i := range 3 {
			if _, err := pr.SendSync(ctx, &client.Record{Topic: "fair", Partition: p, Value: fmt.Appendf(nil, "%d-%d", p, i)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	const budget = 1 << 20
	req := &wire.FetchRequest{MaxBytes: budget, Topics: []wire.FetchTopic{{Topic: "fair"}}}
	for p := int32(0); p < parts; p++ {
		req.Topics[0].Partitions = append(req.Topics[0].Partitions, wire.FetchPartition{Partition: p, MaxBytes: budget})
	}
	const rounds = 1000
	for round := range rounds {
		var resp wire.FetchResponse
		if err := c.Call(ctx, rb.Addr, req, &resp); err != nil {
			t.Fatal(err)
		}
		total := 0
		for _, tp := range resp.Topics {
			for _, p := range tp.Partitions {
				if p.ErrorCode != wire.ErrNone {
					t.Fatalf("round %d: partition %d: %v %s", round, p.Partition, p.ErrorCode, p.ErrorMessage)
				}
				total += len(p.Records)
				if p.Partition != 0 && len(p.Records) == 0 {
					t.Fatalf("round %d of %d: partition %d (high watermark %d) answered empty", round, rounds, p.Partition, p.HighWatermark)
				}
			}
		}
		if total > budget {
			t.Fatalf("round %d: %d record bytes, budget %d", round, total, budget)
		}
	}
}
