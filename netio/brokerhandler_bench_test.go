package netio_test

import (
	"context"
	"testing"

	"github.com/ringlog/ringlog/netio/wire"

	"github.com/ringlog/ringlog/engine/batch"
	"github.com/ringlog/ringlog/netio"
	"github.com/ringlog/ringlog/netio/client"
	"github.com/ringlog/ringlog/netio/internal/brokertest"
)

// realBroker starts the real broker core behind netio.BrokerHandler on loopback.
func realBroker(b *testing.B, egress netio.Egress) (*client.Client, func()) {
	rb := brokertest.Start(b, brokertest.Options{Egress: egress})
	return rb.Client, rb.Stop
}

const benchRecordBytes = 1024

// BenchmarkBrokerProduce1KiB: 1 KiB records through the bundled producer (1 MiB batches,
// 8 partitions, acks=1) into the real broker over loopback. Client and broker share the
// machine's cores, as they do in bench/.
func BenchmarkBrokerProduce1KiB(b *testing.B) { benchProduce1KiB(b, client.AckLeader) }

// BenchmarkBrokerProduceSync1KiB: as BenchmarkBrokerProduce1KiB with acks=all, so every
// acknowledgement waits for the broker's pipelined group-commit fdatasync (the sync-produce
// path).
func BenchmarkBrokerProduceSync1KiB(b *testing.B) { benchProduce1KiB(b, client.AckAll) }

// benchProduce1KiB sends 1 KiB records through the bundled producer at the given acks.
func benchProduce1KiB(b *testing.B, acks client.Acks) {
	c, stop := realBroker(b, netio.EgressSendfile)
	defer stop()
	benchProduceOn(b, c, acks)
}

// benchProduceOn is benchProduce1KiB's body on a running broker's client.
func benchProduceOn(b *testing.B, c *client.Client, acks client.Acks) {
	ctx := context.Background()
	if err := c.CreateTopic(ctx, "bench", 8, nil); err != nil {
		b.Fatal(err)
	}
	p := c.NewProducer(client.ProducerConfig{Acks: acks, BatchBytes: 1 << 20})
	value := make([]byte, benchRecordBytes)
	var failed error
	cb := func(_ *client.Record, err error) {
		if err != nil && failed == nil {
			failed = err
		}
	}
	recs := make([]client.Record, 4096)
	b.SetBytes(benchRecordBytes)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r := &recs[i%len(recs)]
		*r = client.Record{Topic: "bench", Partition: int32(i % 8), Value: value}
		if err := p.Send(ctx, r, cb); err != nil {
			b.Fatal(err)
		}
	}
	if err := p.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	if failed != nil {
		b.Fatal(failed)
	}
}

// BenchmarkBrokerFetch1KiB: 1 MiB catch-up fetches of 1 KiB records from the page cache,
// sendfile egress vs a user-space copy (pread + write), in the same run.
func BenchmarkBrokerFetch1KiB(b *testing.B) {
	for _, eg := range []struct {
		name   string
		egress netio.Egress
	}{{"sendfile", netio.EgressSendfile}, {"copy", netio.EgressCopy}} {
		b.Run(eg.name, func(b *testing.B) {
			c, stop := realBroker(b, eg.egress)
			defer stop()
			benchFetchOn(b, c)
		})
	}
}

// benchFetchOn preloads 64 MiB of 1 KiB records and measures 1 MiB raw fetches of them
// (BenchmarkBrokerFetch1KiB's body) on a running broker's client.
func benchFetchOn(b *testing.B, c *client.Client) {
	ctx := context.Background()
	if err := c.CreateTopic(ctx, "bench", 1, nil); err != nil {
		b.Fatal(err)
	}
	// Preload 64 MiB once; every iteration reads one record's worth, cycling.
	const preload = 64 << 10
	p := c.NewProducer(client.ProducerConfig{Acks: client.AckLeader, BatchBytes: 1 << 20, Compression: batch.CodecNone})
	value := make([]byte, benchRecordBytes)
	for i := 0; i < preload; i++ {
		if err := p.Send(ctx, &client.Record{Topic: "bench", Partition: 0, Value: value}, nil); err != nil {
			b.Fatal(err)
		}
	}
	if err := p.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	// Raw fetches (no record decoding in the client): this measures the broker's
	// read path and egress, not the consumer's decoder.
	const fetchBytes = 1 << 20
	req := &wire.FetchRequest{MaxBytes: fetchBytes, Topics: []wire.FetchTopic{{Topic: "bench",
		Partitions: []wire.FetchPartition{{Partition: 0, MaxBytes: fetchBytes}}}}}
	b.SetBytes(fetchBytes)
	b.ReportAllocs()
	b.ResetTimer()
	offset := int64(0)
	for i := 0; i < b.N; i++ {
		req.Topics[0].Partitions[0].FetchOffset = offset
		var resp wire.FetchResponse
		if err := c.Call(ctx, c.BrokerAddr(), req, &resp); err != nil {
			b.Fatal(err)
		}
		p := resp.Topics[0].Partitions[0]
		if p.ErrorCode != wire.ErrNone || len(p.Records) == 0 {
			b.Fatalf("fetch at %d: %v %q, %d bytes", offset, p.ErrorCode, p.ErrorMessage, len(p.Records))
		}
		offset = nextOffset(b, p.Records)
		if offset >= preload {
			offset = 0
		}
	}
}

// nextOffset walks the batches in records and returns the offset after the last one.
func nextOffset(b *testing.B, records []byte) int64 {
	next := int64(-1)
	for len(records) > 0 {
		h, err := batch.ParseHeader(records)
		if err != nil {
			b.Fatal(err)
		}
		next = h.LastOffset() + 1
		records = records[h.Size():]
	}
	return next
}

// BenchmarkBrokerConsume1KiB: catch-up consumption through the bundled consumer (records
// decoded into ConsumedRecord), the path `ringlog bench` measures against loopback TCP.
func BenchmarkBrokerConsume1KiB(b *testing.B) {
	c, stop := realBroker(b, netio.EgressSendfile)
	defer stop()
	ctx := context.Background()
	if err := c.CreateTopic(ctx, "bench", 1, nil); err != nil {
		b.Fatal(err)
	}
	const preload = 64 << 10
	p := c.NewProducer(client.ProducerConfig{Acks: client.AckLeader, BatchBytes: 1 << 20})
	value := make([]byte, benchRecordBytes)
	for i := 0; i < preload; i++ {
		if err := p.Send(ctx, &client.Record{Topic: "bench", Partition: 0, Value: value}, nil); err != nil {
			b.Fatal(err)
		}
	}
	if err := p.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	co := c.NewConsumer(client.ConsumerConfig{PartitionMaxBytes: 4 << 20, MaxBytes: 8 << 20})
	co.Assign("bench", 0, client.Earliest())
	b.SetBytes(benchRecordBytes)
	b.ReportAllocs()
	b.ResetTimer()
	for got := 0; got < b.N; {
		recs, err := co.Poll(ctx)
		if err != nil {
			b.Fatal(err)
		}
		got += len(recs)
		if len(recs) > 0 && recs[len(recs)-1].Offset == preload-1 {
			co.Seek("bench", 0, client.Earliest())
		}
	}
}
