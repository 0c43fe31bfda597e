package netio_test

import (
	"context"
	"io"
	"net"
	"testing"
	"time"

	"github.com/ringlog/ringlog/engine/batch"
	"github.com/ringlog/ringlog/engine/shard"
	"github.com/ringlog/ringlog/netio/internal/brokertest"
	"github.com/ringlog/ringlog/netio/wire"
)

// allocsRig is the real broker (handler, shard core, server) in this process with a raw
// socket to the shard that owns its one partition: the client side encodes nothing and
// allocates nothing per request, so the process's allocations per request are the
// broker's.
type allocsRig struct {
	nc      net.Conn
	produce map[int16][]byte // acks -> one pre-encoded produce frame of one 1 KiB record
	fetch   []byte           // a fetch frame of the last record produced before it
	head    [wire.ResponseHeaderBytes]byte
	buf     []byte
	tb      testing.TB
}

func startAllocsRig(tb testing.TB, driver string) *allocsRig {
	rb := brokertest.Start(tb, brokertest.Options{Driver: driver, ShardListeners: true})
	ctx := context.Background()
	if err := rb.Client.CreateTopic(ctx, "allocs", 1, nil); err != nil {
		tb.Fatal(err)
	}
	si, err := rb.Core.ShardOf(shard.TopicPartition{Topic: "allocs", Partition: 0})
	if err != nil {
		tb.Fatal(err)
	}
	nc, err := net.Dial("tcp", rb.ShardAddrs[si])
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { nc.Close() })
	bl := batch.NewBuilder(batch.BuilderOptions{})
	bl.Append(time.Now().UnixMilli(), nil, make([]byte, benchRecordBytes), nil)
	records, err := bl.Build(nil)
	if err != nil {
		tb.Fatal(err)
	}
	r := &allocsRig{nc: nc, produce: map[int16][]byte{}, tb: tb}
	for _, acks := range []int16{wire.AcksNone, wire.AcksLeader, wire.AcksAll} {
		r.produce[acks] = wire.AppendRequest(nil, 1, &wire.ProduceRequest{Acks: acks, TimeoutMs: 30_000,
			Topics: []wire.ProduceTopic{{Topic: "allocs", Partitions: []wire.ProducePartition{{Partition: 0, Records: records}}}}})
	}
	r.fetch = wire.AppendRequest(nil, 1, &wire.FetchRequest{MaxBytes: 1 << 20,
		Topics: []wire.FetchTopic{{Topic: "allocs", Partitions: []wire.FetchPartition{{Partition: 0, FetchOffset: 0, MaxBytes: 1 << 20}}}}})
	r.roundTrip(r.produce[wire.AcksLeader]) // the partition exists and has a record to fetch
	return r
}

// roundTrip writes frame and reads its response, failing on an error code anywhere in it.
func (r *allocsRig) roundTrip(frame []byte) {
	if _, err := r.nc.Write(frame); err != nil {
		r.tb.Fatal(err)
	}
	// Not wire.ReadResponse: its header array escapes (one allocation per response that is
	// the rig's, not the broker's).
	if _, err := io.ReadFull(r.nc, r.head[:]); err != nil {
		r.tb.Fatal(err)
	}
	h, err := wire.ParseResponseHeader(r.head[:], 256<<20)
	if err != nil {
		r.tb.Fatal(err)
	}
	n := int(h.Length) - (wire.ResponseHeaderBytes - wire.FrameLengthBytes)
	if cap(r.buf) < n {
		r.buf = make([]byte, n)
	}
	if _, err := io.ReadFull(r.nc, r.buf[:n]); err != nil {
		r.tb.Fatal(err)
	}
	if h.ErrorCode != wire.ErrNone {
		r.tb.Fatalf("response error %v", h.ErrorCode)
	}
}

func (r *allocsRig) run(op string) {
	switch op {
	case "produce/acks=0":
		// No response: 15 unanswered produces, then one answered one orders them.
		for range 15 {
			if _, err := r.nc.Write(r.produce[wire.AcksNone]); err != nil {
				r.tb.Fatal(err)
			}
		}
		r.roundTrip(r.produce[wire.AcksLeader])
	case "produce/acks=1":
		r.roundTrip(r.produce[wire.AcksLeader])
	case "produce/acks=all":
		r.roundTrip(r.produce[wire.AcksAll])
	case "fetch":
		r.roundTrip(r.fetch)
	}
}

var allocsOps = []string{"produce/acks=0", "produce/acks=1", "produce/acks=all", "fetch"}

// BenchmarkBrokerRequestAllocs: one request at a time from a raw socket into the real
// broker (the shard-port connection, so no mailbox hop), per driver. allocs/op are the
// broker's (the raw client allocates nothing); produce/acks=0 is 16 produces per op.
func BenchmarkBrokerRequestAllocs(b *testing.B) {
	for _, driver := range []string{"net", "ring"} {
		for _, op := range allocsOps {
			b.Run(driver+"/"+op, func(b *testing.B) {
				r := startAllocsRig(b, driver)
				r.tb = b
				b.ReportAllocs()
				for b.Loop() {
					r.run(op)
				}
			})
		}
	}
}

// The produce paths that allocate nothing in the broker (ring driver, the one ringlogd
// runs by default), checked over the real handler, shard core and server: a regression
// here is a new allocation per produced batch. The race detector allocates, so the check
// runs without it.
func TestBrokerProduceAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	r := startAllocsRig(t, "ring")
	for _, op := range []string{"produce/acks=0", "produce/acks=1", "produce/acks=all"} {
		for range 100 { // warm the pools and the connection's buffers
			r.run(op)
		}
		if n := testing.AllocsPerRun(200, func() { r.run(op) }); n != 0 {
			t.Errorf("%s: %v allocations per request in the broker, want 0 (go test ./netio -run XXX -bench BrokerRequestAllocs -memprofile to find them)", op, n)
		}
	}
}
