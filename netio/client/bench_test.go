package client_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/ringlog/ringlog/engine/batch"
	"github.com/ringlog/ringlog/netio"
	"github.com/ringlog/ringlog/netio/client"
	"github.com/ringlog/ringlog/netio/fakebroker"
	"github.com/ringlog/ringlog/ring"
)

func benchEnv(b *testing.B) (*client.Client, func()) {
	b.Helper()
	fake := fakebroker.New(b.TempDir(), nil)
	srv := netio.NewServer(fake, netio.Config{})
	ln, err := netio.ListenShard(context.Background(), "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(ln, 0) }()
	c, err := client.New(context.Background(), client.Config{Broker: ln.Addr().String()})
	if err != nil {
		b.Fatal(err)
	}
	return c, func() {
		c.Close()
		srv.Close()
		<-done
		fake.Close()
	}
}

// BenchmarkProduce1KiB: async sends of 1 KiB records to 8 partitions with batching
// (256 KiB batches, 5 ms linger), acks=1, against the fakebroker fixture (which validates
// every batch's CRC and writes it to a file) over loopback.
func BenchmarkProduce1KiB(b *testing.B) {
	for _, codec := range []batch.Codec{batch.CodecNone, batch.CodecZstd} {
		b.Run(codec.String(), func(b *testing.B) {
			c, stop := benchEnv(b)
			defer stop()
			ctx := context.Background()
			if err := c.CreateTopic(ctx, "bench", 8, nil); err != nil {
				b.Fatal(err)
			}
			p := c.NewProducer(client.ProducerConfig{Acks: client.AckLeader, Compression: codec})
			value := bytes.Repeat([]byte("0123456789abcdef"), 64)
			var failed sync.Once
			cb := func(_ *client.Record, err error) {
				if err != nil {
					failed.Do(func() { b.Error(err) })
				}
			}
			records := make([]client.Record, 1024)
			keys := make([][]byte, 1000)
			for k := range keys {
				keys[k] = []byte(fmt.Sprint(k))
			}
			b.SetBytes(benchValueBytes)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				r := &records[i%len(records)]
				*r = client.Record{Topic: "bench", Partition: -1, Key: keys[i%len(keys)], Value: value}
				if err := p.Send(ctx, r, cb); err != nil {
					b.Fatal(err)
				}
				i++
			}
			if err := p.Flush(ctx); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			p.Close(ctx)
		})
	}
}

// BenchmarkConsume1KiB: a consumer polling 1 KiB records from one partition (sendfile
// egress from the fixture's file) over loopback.
func BenchmarkConsume1KiB(b *testing.B) {
	c, stop := benchEnv(b)
	defer stop()
	ctx := context.Background()
	if err := c.CreateTopic(ctx, "bench", 1, nil); err != nil {
		b.Fatal(err)
	}
	const records = 64 << 10 // 64 MiB of values
	p := c.NewProducer(client.ProducerConfig{Acks: client.AckLeader, BatchBytes: 1 << 20})
	value := bytes.Repeat([]byte("x"), benchValueBytes)
	for range records {
		if err := p.Send(ctx, &client.Record{Topic: "bench", Partition: 0, Value: value}, nil); err != nil {
			b.Fatal(err)
		}
	}
	if err := p.Close(ctx); err != nil {
		b.Fatal(err)
	}
	co := c.NewConsumer(client.ConsumerConfig{MaxWait: time.Millisecond, PartitionMaxBytes: 4 << 20, MaxBytes: 4 << 20})
	co.Assign("bench", 0, client.Earliest())
	b.SetBytes(benchValueBytes)
	b.ReportAllocs()
	got := 0
	for b.Loop() {
		if got == 0 {
			recs, err := co.Poll(ctx)
			if err != nil {
				b.Fatal(err)
			}
			got = len(recs)
			if got == 0 {
				co.Seek("bench", 0, client.Earliest())
				recs, err = co.Poll(ctx)
				if err != nil || len(recs) == 0 {
					b.Fatal("no records", err)
				}
				got = len(recs)
			}
		}
		got--
	}
}

// realBrokerBench starts the real broker core (engine/shard behind BrokerHandler, page-cache
// storage) in-process on a temp dir, served by the net driver or ("ring") on shard 0's
// reactor.
func realBrokerBench(b *testing.B, shards int, driver string) (*client.Client, func()) {
	b.Helper()
	dir := b.TempDir()
	br, err := shardOpen(dir, shards)
	if err != nil {
		b.Fatal(err)
	}
	ln, err := netio.ListenShard(context.Background(), "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := netio.NewServer(netio.NewBrokerHandler(br, ln.Addr().String()), netio.Config{})
	done := make(chan struct{})
	if driver == "ring" {
		// On shard 0's own reactor, as ringlogd serves connections.
		if err := br.Exec(0, func(r *ring.Reactor) error { return srv.ServeRing(r, ln.(*net.TCPListener), 0) }); err != nil {
			b.Skipf("ring driver unavailable: %v", err)
		}
		close(done)
	} else {
		go func() { defer close(done); srv.Serve(ln, 0) }()
	}
	c, err := client.New(context.Background(), client.Config{Broker: ln.Addr().String()})
	if err != nil {
		b.Fatal(err)
	}
	return c, func() {
		c.Close()
		srv.Close()
		<-done
		ln.Close()
		br.Close()
	}
}

// BenchmarkRealBrokerProduce1KiB: 1 KiB records with keys over 8 partitions, batched
// (256 KiB, 5 ms linger), acks=1, into the real broker (page-cache mode) over loopback.
// The default producer is idempotent; the -no-idempotence rows are the same with
// DisableIdempotence (one request per partition in flight, no producer id).
func BenchmarkRealBrokerProduce1KiB(b *testing.B) {
	for _, driver := range []string{"net", "ring"} {
		b.Run(driver, func(b *testing.B) { benchRealBrokerProduce(b, driver, false) })
		b.Run(driver+"-no-idempotence", func(b *testing.B) { benchRealBrokerProduce(b, driver, true) })
	}
}

func benchRealBrokerProduce(b *testing.B, driver string, noIdempotence bool) {
	c, stop := realBrokerBench(b, 2, driver)
	defer stop()
	ctx := context.Background()
	if err := c.CreateTopic(ctx, "bench", 8, nil); err != nil {
		b.Fatal(err)
	}
	p := c.NewProducer(client.ProducerConfig{Acks: client.AckLeader, DisableIdempotence: noIdempotence})
	value := bytes.Repeat([]byte("0123456789abcdef"), 64)
	keys := make([][]byte, 1000)
	for k := range keys {
		keys[k] = []byte(fmt.Sprint(k))
	}
	records := make([]client.Record, 4096)
	var failed sync.Once
	cb := func(_ *client.Record, err error) {
		if err != nil {
			failed.Do(func() { b.Error(err) })
		}
	}
	b.SetBytes(benchValueBytes)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		r := &records[i%len(records)]
		*r = client.Record{Topic: "bench", Partition: -1, Key: keys[i%len(keys)], Value: value}
		if err := p.Send(ctx, r, cb); err != nil {
			b.Fatal(err)
		}
		i++
	}
	if err := p.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	p.Close(ctx)
}

// BenchmarkRealBrokerConsume1KiB: a consumer reading 1 KiB records back from the real
// broker (fetch egress by sendfile from the page cache) over loopback.
func BenchmarkRealBrokerConsume1KiB(b *testing.B) {
	for _, driver := range []string{"net", "ring"} {
		b.Run(driver, func(b *testing.B) { benchRealBrokerConsume(b, driver) })
	}
}

// benchValueBytes is the value size fillBenchTopic writes.
const benchValueBytes = 1024

// fillBenchTopic creates topic "bench" (one partition) and writes records values of
// benchValueBytes to it, acks=1, in 1 MiB batches.
func fillBenchTopic(b *testing.B, c *client.Client, records int) {
	b.Helper()
	ctx := context.Background()
	if err := c.CreateTopic(ctx, "bench", 1, nil); err != nil {
		b.Fatal(err)
	}
	p := c.NewProducer(client.ProducerConfig{Acks: client.AckLeader, BatchBytes: 1 << 20})
	value := bytes.Repeat([]byte("x"), benchValueBytes)
	for range records {
		if err := p.Send(ctx, &client.Record{Topic: "bench", Partition: 0, Value: value}, nil); err != nil {
			b.Fatal(err)
		}
	}
	if err := p.Close(ctx); err != nil {
		b.Fatal(err)
	}
}

func benchRealBrokerConsume(b *testing.B, driver string) {
	c, stop := realBrokerBench(b, 1, driver)
	defer stop()
	ctx := context.Background()
	const records = 64 << 10
	fillBenchTopic(b, c, records)
	co := c.NewConsumer(client.ConsumerConfig{MaxWait: time.Millisecond, PartitionMaxBytes: 4 << 20, MaxBytes: 4 << 20})
	co.Assign("bench", 0, client.Earliest())
	b.SetBytes(benchValueBytes)
	b.ReportAllocs()
	buffered := 0
	for b.Loop() {
		for buffered == 0 {
			recs, err := co.Poll(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if buffered = len(recs); buffered == 0 {
				co.Seek("bench", 0, client.Earliest())
			}
		}
		buffered--
	}
}
