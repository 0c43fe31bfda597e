package netio_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/ringlog/ringlog/engine/shard"
	"github.com/ringlog/ringlog/netio"
	"github.com/ringlog/ringlog/netio/client"
	"github.com/ringlog/ringlog/ring"
)

// With per-shard listeners, metadata advertises each shard's own address, and a produce
// sent there by the shard-aware client runs on the owning shard's loop (inline).
func TestBrokerHandlerAdvertisesShardAddresses(t *testing.T) {
	b, err := shard.Open(shard.Config{DataDir: t.TempDir(), Shards: 2, Ring: ring.Config{Backend: "auto"},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	main, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var shardLns []net.Listener
	var addrs []string
	for i := 0; i < 2; i++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		shardLns = append(shardLns, ln)
		addrs = append(addrs, ln.Addr().String())
	}
	srv := netio.NewServer(netio.NewBrokerHandler(b, main.Addr().String()).WithShardAddresses(addrs), netio.Config{})
	defer srv.Close()
	for i, ln := range append([]net.Listener{main}, shardLns...) {
		si := max(i-1, 0)
		tl := ln.(*net.TCPListener)
		if err := b.Exec(si, func(r *ring.Reactor) error { return srv.ServeRing(r, tl, si) }); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := client.New(ctx, client.Config{Broker: main.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.CreateTopic(ctx, "t", 4, nil); err != nil {
		t.Fatal(err)
	}
	var md netio.MetadataResponse
	if err := c.Call(ctx, main.Addr().String(), &netio.MetadataRequest{}, &md); err != nil {
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
