package netio_test

import (
	"context"
	"testing"
	"time"

	"github.com/ringlog/ringlog/netio/wire"

	"github.com/ringlog/ringlog/netio/client"
	"github.com/ringlog/ringlog/netio/internal/brokertest"
)

// With per-shard listeners, metadata advertises each shard's own address, and a produce
// sent there by the shard-aware client runs on the owning shard's loop (inline).
func TestBrokerHandlerAdvertisesShardAddresses(t *testing.T) {
	rb := brokertest.Start(t, brokertest.Options{Driver: "ring", ShardListeners: true})
	b, c, addrs := rb.Core, rb.Client, rb.ShardAddrs
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := c.CreateTopic(ctx, "t", 4, nil); err != nil {
		t.Fatal(err)
	}
	var md wire.MetadataResponse
	if err := c.Call(ctx, rb.Addr, &wire.MetadataRequest{}, &md); err != nil {
		t.Fatal(err)
	}
	if len(md.Shards) != 2 || md.Shards[0].Address != addrs[0] || md.Shards[1].Address != addrs[1] {
		t.Fatalf("metadata shards = %+v, want %v", md.Shards, addrs)
	}
	p := c.NewProducer(client.ProducerConfig{Acks: client.AckLeader})
	for part := int32(0); part < 4; part++ {
		if _, err := p.SendSync(ctx, &client.Record{Topic: "t", Partition: part, Value: []byte("v")}); err != nil {
			t.Fatal(err)
		}
	}
	_, states, err := b.DescribeTopic("t")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range states {
		if s.LogEndOffset != 1 {
			t.Fatalf("partition %d holds %d records, want 1", s.Partition, s.LogEndOffset)
		}
	}
}
