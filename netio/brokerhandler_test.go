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

// A single broker answers Metadata version 1 with itself as the only broker and the
// leader, only replica and only ISR member of every partition, and version 0 without those
// fields (what a client of version 0 decodes).
func TestBrokerHandlerMetadataV1SingleBroker(t *testing.T) {
	rb := brokertest.Start(t, brokertest.Options{Driver: "net"})
	c := rb.Client
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := c.CreateTopic(ctx, "t", 2, nil); err != nil {
		t.Fatal(err)
	}
	var v1 wire.MetadataResponse
	if err := c.Call(ctx, rb.Addr, &wire.MetadataRequest{Topics: []string{"t"}, Version: 1}, &v1); err != nil {
		t.Fatal(err)
	}
	if v1.Version != 1 || len(v1.Brokers) != 1 || v1.Brokers[0].Address == "" || v1.ControllerID != -1 {
		t.Fatalf("version 1 brokers %+v controller %d", v1.Brokers, v1.ControllerID)
	}
	for _, p := range v1.Topics[0].Partitions {
		if p.Leader != v1.BrokerID || len(p.Replicas) != 1 || len(p.ISR) != 1 || p.HighWatermark != -1 {
			t.Fatalf("version 1 partition %+v", p)
		}
	}
	var v0 wire.MetadataResponse
	if err := c.Call(ctx, rb.Addr, &wire.MetadataRequest{Topics: []string{"t"}}, &v0); err != nil {
		t.Fatal(err)
	}
	if v0.Version != 0 || v0.Brokers != nil || v0.Topics[0].Partitions[0].Replicas != nil {
		t.Fatalf("version 0 answer %+v", v0)
	}
}
