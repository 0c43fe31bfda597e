package client_test

import (
	"bytes"
	"context"
	"fmt"
	"runtime/debug"
	"sync"
	"testing"
	"time"

	"github.com/ringlog/ringlog/netio/client"
	"github.com/ringlog/ringlog/netio/internal/brokertest"
	"github.com/ringlog/ringlog/netio/wire"
)

// SendSync writes its request from the calling goroutine while the sender loop writes the
// batching callers' requests: on one idempotent partition the two must still reach the
// broker in sequence order, every record exactly once, each caller's records in order.
func TestSendSyncBesideSendKeepsOrderAndWritesOnce(t *testing.T) {
	for _, driver := range []string{"net", "ring"} {
		t.Run(driver, func(t *testing.T) {
			c, stop := startBrokerDriver(t, 2, t.TempDir(), driver)
			defer stop()
			ctx := ctxT(t)
			if err := c.CreateTopic(ctx, "mixed", 1, nil); err != nil {
				t.Fatal(err)
			}
			p := c.NewProducer(client.ProducerConfig{Acks: client.AckLeader, BatchBytes: 4 << 10})
			const syncCallers, syncRecords, asyncRecords = 4, 150, 3000
			errs := make(chan error, syncCallers+asyncRecords)
			offsets := make([][]int64, syncCallers+1)
			var wg sync.WaitGroup
			for g := range syncCallers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range syncRecords {
						off, err := p.SendSync(ctx, &client.Record{Topic: "mixed", Partition: 0, Value: []byte(fmt.Sprint(g, i))})
						if err != nil {
							errs <- err
							return
						}
						offsets[g] = append(offsets[g], off)
					}
				}()
			}
			records := make([]client.Record, asyncRecords)
			var mu sync.Mutex
			for i := range records {
				records[i] = client.Record{Topic: "mixed", Partition: 0, Value: []byte(fmt.Sprint("a", i))}
				if err := p.Send(ctx, &records[i], func(r *client.Record, err error) {
					if err != nil {
						errs <- err
						return
					}
					mu.Lock()
					offsets[syncCallers] = append(offsets[syncCallers], r.Offset)
					mu.Unlock()
				}); err != nil {
					t.Fatal(err)
				}
			}
			wg.Wait()
			if err := p.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			seen := map[int64]bool{}
			for g, offs := range offsets {
				for i, off := range offs {
					if seen[off] {
						t.Fatalf("offset %d acknowledged twice", off)
					}
					seen[off] = true
					if i > 0 && off <= offs[i-1] {
						t.Fatalf("caller %d: offset %d after %d", g, off, offs[i-1])
					}
				}
			}
			const total = syncCallers*syncRecords + asyncRecords
			if len(seen) != total {
				t.Fatalf("%d offsets acknowledged, want %d", len(seen), total)
			}
			end, err := c.ListOffset(ctx, "mixed", 0, wire.TimestampLatest)
			if err != nil {
				t.Fatal(err)
			}
			if end != total {
				t.Fatalf("log ends at %d, want %d (a record written twice or lost)", end, total)
			}
			if err := p.Close(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// BenchmarkRealBrokerSendSync1KiB: one 1 KiB record at a time, acks=1, SendSync, into the
// real broker (page-cache mode) over loopback, served on the shards' reactors as ringlogd
// does. ns/op is the round trip; `ringlog bench single` compares it with a ping-pong.
func BenchmarkRealBrokerSendSync1KiB(b *testing.B) {
	benchmarkRealBrokerSendSync(b, context.Background())
}

// BenchmarkRealBrokerSendSync1KiBCancellable is the same with a context that has a
// cancel, as a service's request context has: the connection's context registration is
// made once, not per call.
func BenchmarkRealBrokerSendSync1KiBCancellable(b *testing.B) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	benchmarkRealBrokerSendSync(b, ctx)
}

func benchmarkRealBrokerSendSync(b *testing.B, ctx context.Context) {
	br := brokertest.Start(b, brokertest.Options{Shards: 2, Driver: "ring", ShardListeners: true})
	if err := br.Client.CreateTopic(ctx, "single", 1, nil); err != nil {
		b.Fatal(err)
	}
	p := br.Client.NewProducer(client.ProducerConfig{Acks: client.AckLeader})
	defer p.Close(ctx)
	value := bytes.Repeat([]byte("0123456789abcdef"), 64)
	record := client.Record{Topic: "single", Partition: 0, Value: value}
	b.SetBytes(int64(len(value)))
	b.ReportAllocs()
	for b.Loop() {
		record.Offset = 0
		if _, err := p.SendSync(ctx, &record); err != nil {
			b.Fatal(err)
		}
	}
}

// A SendSync of one record allocates nothing in the client, nor in the broker it talks to
// (both run in this process: testing.AllocsPerRun counts every goroutine): the produce
// request, its wire request and response, the sealed batch, its records array and its
// buffer are all recycled, and the caller reads its answer inline. Idempotent at acks=1
// and acks=all, and without idempotence; on both broker drivers; with a context that
// cannot end and with one that has a cancel or a deadline (the connection registers with
// a context once and keeps the registration while its readers use that context: conn.watch).
// The race detector allocates, so the check runs without it.
func TestSendSyncAllocatesNothing(t *testing.T) {
	if client.RaceEnabled {
		t.Skip("the race detector allocates")
	}
	for _, driver := range []string{"ring", "net"} {
		t.Run(driver, func(t *testing.T) {
			br := brokertest.Start(t, brokertest.Options{Shards: 2, Driver: driver, ShardListeners: true})
			ctx := context.Background()
			if err := br.Client.CreateTopic(ctx, "single", 1, nil); err != nil {
				t.Fatal(err)
			}
			cancellable, cancel := context.WithCancel(ctx)
			defer cancel()
			deadline, cancelDeadline := context.WithTimeout(ctx, time.Hour)
			defer cancelDeadline()
			for _, tc := range []struct {
				name string
				cfg  client.ProducerConfig
				ctx  context.Context
			}{
				{"acks=1", client.ProducerConfig{Acks: client.AckLeader}, ctx},
				{"acks=all", client.ProducerConfig{Acks: client.AckAll}, ctx},
				{"acks=1/no-idempotence", client.ProducerConfig{Acks: client.AckLeader, DisableIdempotence: true}, ctx},
				{"acks=1/read-poll", client.ProducerConfig{Acks: client.AckLeader, ReadPoll: 50 * time.Microsecond}, ctx},
				{"acks=1/cancellable-context", client.ProducerConfig{Acks: client.AckLeader}, cancellable},
				{"acks=all/deadline-context", client.ProducerConfig{Acks: client.AckAll}, deadline},
			} {
				p := br.Client.NewProducer(tc.cfg)
				record := client.Record{Topic: "single", Partition: 0, Value: bytes.Repeat([]byte("v"), 1024)}
				send := func() {
					if _, err := p.SendSync(tc.ctx, &record); err != nil {
						t.Fatal(err)
					}
				}
				for range 100 { // warm the pools, the connection and the broker's buffers
					send()
				}
				// The collector off while counting: a GC empties the sync.Pools, and refilling
				// them counts as allocations steady state does not make (netio's checks saw it).
				gc := debug.SetGCPercent(-1)
				n := testing.AllocsPerRun(200, send)
				debug.SetGCPercent(gc)
				if n != 0 {
					t.Errorf("%s: %v allocations per SendSync, want 0 (go test ./netio/client -run XXX -bench RealBrokerSendSync1KiB -memprofile m.out -memprofilerate 1 finds them)", tc.name, n)
				}
				if err := p.Close(ctx); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// With ReadPoll, every SendSync that reads its own answer polls the socket first: each
// poll either found the answer or ran out and parked, and the records still arrive in
// order, once each. (Whether a poll finds its answer depends on the machine: the test
// checks the accounting and the results, never a hit rate.)
func TestSendSyncReadPoll(t *testing.T) {
	for _, driver := range []string{"ring", "net"} {
		t.Run(driver, func(t *testing.T) {
			c, stop := startBrokerDriver(t, 2, t.TempDir(), driver)
			defer stop()
			ctx := ctxT(t)
			if err := c.CreateTopic(ctx, "polled", 1, nil); err != nil {
				t.Fatal(err)
			}
			p := c.NewProducer(client.ProducerConfig{Acks: client.AckLeader, ReadPoll: client.ReadPollMax})
			const records = 200
			for i := range records {
				off, err := p.SendSync(ctx, &client.Record{Topic: "polled", Partition: 0, Value: []byte(fmt.Sprint(i))})
				if err != nil {
					t.Fatal(err)
				}
				if off != int64(i) {
					t.Fatalf("record %d at offset %d", i, off)
				}
			}
			st := p.ReadPollStats()
			// The first SendSync may go through the sender loop (no connection yet): it
			// does not poll. Every other one reads its own answer on this idle connection.
			if got := st.Hits + st.Misses; got < records-1 || got > records {
				t.Errorf("%d polls (%d found the answer, %d ran out) for %d SendSyncs", got, st.Hits, st.Misses, records)
			}
			if st.Spins < st.Hits+st.Misses {
				t.Errorf("%d non-blocking reads for %d polls: each poll reads at least once", st.Spins, st.Hits+st.Misses)
			}
			if err := p.Close(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}
