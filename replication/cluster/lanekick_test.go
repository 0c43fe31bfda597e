package cluster

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlog/ringlog/engine/shard"
	"github.com/ringlog/ringlog/replication/controller"
	"github.com/ringlog/ringlog/replication/isr"
)

// parkingConn is a leader that never has data: a fetch parks until its round's context
// ends (the long-poll's deadline is an hour away), except one that asks to park at most
// laneBusyWait, which is answered at once without records. Every fetch's partitions go to
// sent first.
type parkingConn struct{ sent chan []shard.TopicPartition }

func (c parkingConn) ReplicaFetch(ctx context.Context, req *FetchRequest) ([]FetchAnswer, error) {
	return c.fetch(ctx, req, nil)
}

// fetch parks until ctx ends or, when woken is not nil, a wake arrives on it.
func (c parkingConn) fetch(ctx context.Context, req *FetchRequest, woken chan struct{}) ([]FetchAnswer, error) {
	tps := make([]shard.TopicPartition, len(req.Partitions))
	for i, fp := range req.Partitions {
		tps[i] = fp.TopicPartition
	}
	select {
	case c.sent <- tps:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	empty := func() []FetchAnswer {
		out := make([]FetchAnswer, len(req.Partitions))
		for i, fp := range req.Partitions {
			out[i] = FetchAnswer{TopicPartition: fp.TopicPartition, HighWatermark: fp.Offset, LogEndOffset: fp.Offset}
		}
		return out
	}
	if req.MaxWait <= laneBusyWait {
		return empty(), nil
	}
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-woken: // nil: never
		return empty(), nil
	}
}

// wakingConn is parkingConn that answers its parked fetch when asked (FetchWaker), as the
// ringlog protocol's ReplicaFetchWake makes a leader do: a wake that comes before the
// fetch parks makes it answer at once.
type wakingConn struct {
	parkingConn
	woken chan struct{} // capacity 1
}

func (c wakingConn) ReplicaFetch(ctx context.Context, req *FetchRequest) ([]FetchAnswer, error) {
	return c.fetch(ctx, req, c.woken)
}

func (c wakingConn) WakeFetch() bool {
	select {
	case c.woken <- struct{}{}:
	default: // one is pending already
	}
	return true
}

func (parkingConn) OffsetsForLeaderEpoch(context.Context, shard.TopicPartition, int32, int32) (isr.EpochEndOffset, error) {
	return isr.EpochEndOffset{}, nil
}

func (parkingConn) Controller(context.Context, int8, uint16, []byte) ([]byte, error) {
	return nil, nil
}

func (parkingConn) Close() error { return nil }

// TestLaneKickedWhenReplicaJoinsISR: broker 3 follows broker 1 for p0 (in the ISR) and p1
// (catching up); both lanes' fetches are parked on the leader. When p1 joins the ISR, and
// p2 (a partition created meanwhile, with broker 3 in its ISR) is placed, the in-sync
// lane's next fetch holds all three at once: acks=all on p1 and p2 waits for it from now
// on. Before the fix the in-sync lane's fetch stayed parked for its whole fetch wait
// (500 ms by default, an hour here), and p1 and p2 with it; the catch-up lane's parked
// round held p1 as long.
//
// A connection that can ask its leader to answer the parked round (FetchWaker, the
// ringlog protocol's ReplicaFetchWake) keeps it: each lane dials once. One that cannot is
// cancelled and dialed again (the lanes' behaviour before session 9, and still the
// fallback against a leader without the API).
func TestLaneKickedWhenReplicaJoinsISR(t *testing.T) {
	t.Run("wake", func(t *testing.T) { testLaneKick(t, true) })
	t.Run("cancel", func(t *testing.T) { testLaneKick(t, false) })
}

func testLaneKick(t *testing.T, wakeable bool) {
	sent := make(chan []shard.TopicPartition)
	var dials atomic.Int32
	m := &Manager{
		cfg: Config{NodeID: 3, FetchWait: time.Hour, Now: time.Now,
			Dial: func(context.Context, string) (PeerConn, error) {
				dials.Add(1)
				if wakeable {
					return wakingConn{parkingConn{sent: sent}, make(chan struct{}, 1)}, nil
				}
				return parkingConn{sent: sent}, nil
			}},
		log:      slog.New(slog.NewTextHandler(io.Discard, nil)),
		fetchers: map[fetcherKey]*fetcher{},
		stop:     make(chan struct{}),
	}
	defer func() {
		close(m.stop)
		m.fmu.Lock()
		for _, f := range m.fetchers {
			f.close()
		}
		m.fmu.Unlock()
	}()
	tp := func(i int32) shard.TopicPartition { return shard.TopicPartition{Topic: "t", Partition: i} }
	follow := func(i int32) {
		r := newReplica(tp(i), t.TempDir())
		epochs, err := isr.NewEpochCache(nil)
		if err != nil {
			t.Fatal(err)
		}
		r.follower = isr.NewFollower(3, 1, 0, 0, 0, epochs)
		r.leaderID, r.leaderEpoch, r.epochs = 1, 0, epochs
		m.reps.Store(tp(i), r)
	}
	metadata := func(version uint64, isrs ...[]int32) *controller.Metadata {
		md := &controller.Metadata{Version: version,
			Brokers: map[int32]*controller.Broker{1: {ID: 1, Address: "leader"}, 3: {ID: 3, Address: "self"}},
			Topics:  map[string]*controller.Topic{"t": {Name: "t"}}}
		for i, in := range isrs {
			md.Topics["t"].Partitions = append(md.Topics["t"].Partitions, controller.Partition{
				Index: int32(i), Replicas: []int32{1, 2, 3}, Leader: 1, ISR: in})
		}
		return md
	}
	// next returns the partitions of the next fetch that holds every one of want, after
	// the fetches before it (the other lane's, or an in-sync round while the catch-up
	// lane still held a replica).
	next := func(want ...shard.TopicPartition) {
		t.Helper()
		guard := time.After(time.Minute) // a hang guard, not a timing assertion
		for {
			select {
			case got := <-sent:
				if !slices.ContainsFunc(want, func(w shard.TopicPartition) bool { return !slices.Contains(got, w) }) {
					return
				}
			case <-guard:
				t.Fatalf("no fetch of %v: the lane's long-poll was not cut short", want)
			}
		}
	}

	follow(0)
	follow(1)
	md := metadata(1, []int32{1, 2, 3}, []int32{1, 2})
	m.reconciled.Store(md)
	m.syncFetchers(md)
	// The in-sync lane parks on p0, the catch-up lane on p1, in either order.
	first := [][]shard.TopicPartition{<-sent, <-sent}
	slices.SortFunc(first, func(a, b []shard.TopicPartition) int { return int(a[0].Partition - b[0].Partition) })
	if !slices.Equal(first[0], []shard.TopicPartition{tp(0)}) || !slices.Equal(first[1], []shard.TopicPartition{tp(1)}) {
		t.Fatalf("first fetches %v, want [t/0] (in-sync lane) and [t/1] (catch-up lane)", first)
	}
	if n := m.laneKicks.Load(); n != 0 {
		t.Fatalf("%d lane kicks when the lanes started, want 0", n)
	}

	follow(2)
	md = metadata(2, []int32{1, 2, 3}, []int32{1, 2, 3}, []int32{1, 2, 3})
	m.reconciled.Store(md)
	m.syncFetchers(md)
	next(tp(0), tp(1), tp(2))
	if n := m.laneKicks.Load(); n < 2 {
		t.Fatalf("%d lane kicks, want the in-sync lane's and the catch-up lane's", n)
	}
	dialed, wakes := m.ReplicaLaneConns()
	if int32(dialed) != dials.Load() {
		t.Fatalf("ReplicaLaneConns counts %d dials, the dialer saw %d", dialed, dials.Load())
	}
	switch {
	case wakeable && (dialed != 2 || wakes < 2):
		t.Fatalf("%d dials and %d wakes: want each lane's one connection kept (2 dials) and its parked round woken", dialed, wakes)
	case !wakeable && (dialed < 3 || wakes != 0):
		t.Fatalf("%d dials and %d wakes: want a cancelled round's connection dialed again", dialed, wakes)
	}
}
