package shard

import (
	"errors"
	"slices"
	"strings"

	"github.com/ringlog/ringlog/engine/group"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ringlog/ringlog/engine"
	"github.com/ringlog/ringlog/engine/faultio"
	"github.com/ringlog/ringlog/engine/shard/core"
	"github.com/ringlog/ringlog/ring"
)

// heldSync is one pipelined fdatasync the test holds instead of submitting it.
type heldSync struct {
	fd   int
	done func(error)
}

// heldSyncBroker opens a one-shard broker whose logs write through faultio and whose
// asynchronous fdatasyncs are handed to the test (held) instead of the ring.
func heldSyncBroker(t *testing.T, dir string) (*Broker, func() *faultio.FileIO, chan heldSync) {
	t.Helper()
	held := make(chan heldSync, 64)
	var fio *faultio.FileIO // shard 0's; the loop goroutine is its only user
	wrap := func(shard int, inner ring.FileIO) ring.FileIO {
		if shard != 0 {
			return inner // the catalog's
		}
		fio = faultio.New(inner)
		return fio
	}
	hooks := &testHooks{fdatasyncAsync: func(s *Shard, fd int, done func(error)) { held <- heldSync{fd, done} }}
	b, err := Open(Config{DataDir: dir, Shards: 1, Ring: ring.Config{Backend: "syscall"}, WrapFileIO: wrap, hooks: hooks})
	if err != nil {
		t.Fatal(err)
	}
	return b, func() *faultio.FileIO { return fio }, held
}

// loopTurns waits until shard 0 has run n more loop turns (timers of earlier turns ran).
func loopTurns(t *testing.T, b *Broker, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		if err := b.Exec(0, func(*ring.Reactor) error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
}

// takeHeld returns the fdatasyncs held so far, waiting (bounded) for the first: the loop
// turns that start a sync return before the ring has run it, and on a loaded machine (or
// under -race) it may not have reached the hook yet.
func takeHeld(t *testing.T, held chan heldSync) []heldSync {
	t.Helper()
	var out []heldSync
	select {
	case h := <-held:
		out = append(out, h)
	case <-time.After(10 * time.Second):
		t.Fatal("no fdatasync was started within 10s")
	}
	for {
		select {
		case h := <-held:
			out = append(out, h)
		default:
			if len(out) == 0 {
				t.Fatal("no fdatasync was started")
			}
			return out
		}
	}
}

func noResult(t *testing.T, ch chan ProduceResult, when string) {
	t.Helper()
	select {
	case r := <-ch:
		t.Fatalf("%s: produce answered (%+v) before the fdatasync covering it ended", when, r)
	default:
	}
}

// Issue 10 item 13: AlterConfigs' blocking Sync races an asynchronous fdatasync in flight on
// the same file. Linux reports a writeback error once per open file description, so the
// blocking fdatasync can succeed while the asynchronous one fails; the produces that sync
// covered (and those queued behind it) must get the error, never an acknowledgement.
func TestNoAckAfterFailedAsyncSync(t *testing.T) {
	b, faultFIO, held := heldSyncBroker(t, t.TempDir())
	defer b.Close()
	if err := b.CreateTopic("t", 1, nil); err != nil {
		t.Fatal(err)
	}
	fio := faultFIO() // the partition's log writes and syncs through it
	tp := TopicPartition{"t", 0}
	first, second := make(chan ProduceResult, 1), make(chan ProduceResult, 1)
	b.Produce(tp, [][]byte{buildBatch(t, "a", 2)}, AcksAll, func(r ProduceResult) { first <- r })
	loopTurns(t, b, 2)
	inflight := takeHeld(t, held)
	// Queued behind the sync in flight.
	b.Produce(tp, [][]byte{buildBatch(t, "b", 1)}, AcksAll, func(r ProduceResult) { second <- r })
	loopTurns(t, b, 2)
	noResult(t, first, "sync in flight")
	noResult(t, second, "sync in flight")

	// The blocking Sync of the reconfiguration succeeds and reopens the log.
	if err := b.AlterTopicConfig("t", map[string]string{"retention.ms": "3600000"}, nil); err != nil {
		t.Fatal(err)
	}
	noResult(t, first, "after the blocking sync")
	noResult(t, second, "after the blocking sync")

	// The asynchronous fdatasync now reports EIO.
	err := b.Exec(0, func(*ring.Reactor) error {
		fio.Inject(faultio.Rule{Op: faultio.OpFdatasync, Errno: unix.EIO, Times: 1})
		for i, h := range inflight {
			if i == 0 {
				h.done(fio.Fdatasync(h.fd))
			} else {
				h.done(nil)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if fio.Injected(faultio.OpFdatasync) != 1 {
		t.Fatalf("faultio injected %d fdatasync failures, want 1", fio.Injected(faultio.OpFdatasync))
	}
	for name, ch := range map[string]chan ProduceResult{"covered": first, "queued": second} {
		select {
		case r := <-ch:
			if !errors.Is(r.Err, unix.EIO) || !errors.Is(r.Err, engine.ErrLogFailed) || r.BaseOffset != -1 {
				t.Fatalf("%s produce: %+v, want a failed-log EIO error", name, r)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s produce never answered", name)
		}
	}
	// The partition refuses writes until a restart re-validates it; describe says why.
	if r := produce(t, b, tp, AcksLeader, buildBatch(t, "c", 1)); !errors.Is(r.Err, unix.EIO) {
		t.Fatalf("produce after the failed sync: %+v", r)
	}
	_, states, err := b.DescribeTopic("t")
	if err != nil || states[0].Err == "" {
		t.Fatalf("describe after the failed sync: %+v %v", states, err)
	}
	select {
	case h := <-held:
		t.Fatalf("a sync started on the failed partition (fd %d)", h.fd)
	default:
	}
}

// A sync in flight that succeeds after the reconfiguration answers both produces.
func TestAckAfterAsyncSyncAcrossReopen(t *testing.T) {
	b, _, held := heldSyncBroker(t, t.TempDir())
	defer b.Close()
	if err := b.CreateTopic("t", 1, nil); err != nil {
		t.Fatal(err)
	}
	tp := TopicPartition{"t", 0}
	first, second := make(chan ProduceResult, 1), make(chan ProduceResult, 1)
	b.Produce(tp, [][]byte{buildBatch(t, "a", 2)}, AcksAll, func(r ProduceResult) { first <- r })
	loopTurns(t, b, 2)
	inflight := takeHeld(t, held)
	b.Produce(tp, [][]byte{buildBatch(t, "b", 1)}, AcksAll, func(r ProduceResult) { second <- r })
	if err := b.AlterTopicConfig("t", map[string]string{"retention.ms": "3600000"}, nil); err != nil {
		t.Fatal(err)
	}
	noResult(t, first, "after the blocking sync")
	err := b.Exec(0, func(*ring.Reactor) error {
		for _, h := range inflight {
			h.done(ring.Syscalls{}.Fdatasync(h.fd))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if r := <-first; r.Err != nil || r.BaseOffset != 0 {
		t.Fatalf("covered produce: %+v", r)
	}
	if r := <-second; r.Err != nil || r.BaseOffset != 2 {
		t.Fatalf("queued produce: %+v", r)
	}
}

// fakeClock is a reactor clock the test moves by hand.
type fakeClock struct{ nanos atomic.Int64 }

func (c *fakeClock) Now() time.Time          { return time.Unix(0, c.nanos.Load()) }
func (c *fakeClock) Advance(d time.Duration) { c.nanos.Add(int64(d)) }

// A long-poll ends on the reactor's clock, not the wall clock: with an injected clock an
// hour-long wait answers the moment the clock passes its deadline, and not before.
func TestLongPollDeadlineOnReactorClock(t *testing.T) {
	clock := &fakeClock{}
	clock.nanos.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	b, err := Open(Config{DataDir: t.TempDir(), Shards: 1, Ring: ring.Config{Backend: "syscall", Now: clock.Now}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.CreateTopic("t", 1, nil); err != nil {
		t.Fatal(err)
	}
	ch := make(chan []FetchResult, 1)
	b.Fetch(FetchRequest{Partitions: []FetchPartition{{TopicPartition{"t", 0}, 0, 1 << 20}}, MinBytes: 1, MaxWait: 4 * time.Minute},
		func(r []FetchResult) { ch <- r })
	loopTurns(t, b, 3)
	select {
	case r := <-ch:
		t.Fatalf("answered at once: %+v", r[0])
	default:
	}
	clock.Advance(4*time.Minute - time.Millisecond)
	loopTurns(t, b, 3)
	select {
	case <-ch:
		t.Fatal("long-poll answered before its deadline")
	default:
	}
	clock.Advance(time.Millisecond)
	loopTurns(t, b, 1) // wakes the loop; its timers see the new time
	select {
	case r := <-ch:
		if r[0].Err != nil || r[0].Records.Size != 0 {
			t.Fatalf("expired long-poll: %+v", r[0])
		}
	case <-time.After(10 * time.Second):
		t.Fatal("long-poll not answered at its deadline")
	}
}

// stubReplicator is a leader with followers that have fetched up to follower, all isr in
// sync: the seam replication/ will implement.
type stubReplicator struct {
	isr      atomic.Int32
	follower atomic.Int64
}

func (r *stubReplicator) HighWatermark(p *core.Partition) int64 {
	return min(core.Local{}.HighWatermark(p), r.follower.Load())
}
func (r *stubReplicator) CommittedOffset(p *core.Partition) int64 {
	return min(core.Local{}.CommittedOffset(p), r.follower.Load())
}
func (r *stubReplicator) InSyncReplicas(*core.Partition) int { return int(r.isr.Load()) }

type listener struct {
	mu     sync.Mutex
	events []string
}

func (l *listener) PartitionOpened(shard int, tp TopicPartition) { l.add("open", tp) }
func (l *listener) PartitionClosed(shard int, tp TopicPartition) { l.add("close", tp) }
func (l *listener) add(ev string, tp TopicPartition) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, ev+" "+tp.Topic)
}

// The Replicator seam: acks=all and the high watermark wait for the followers, the ISR size
// gates min.insync.replicas, and OffsetsMoved releases what the followers caught up on.
// The PartitionListener seam sees partitions open and close.
func TestReplicatorAndListenerSeams(t *testing.T) {
	rep := &stubReplicator{}
	rep.isr.Store(1)
	lis := &listener{}
	b, err := Open(Config{DataDir: t.TempDir(), Shards: 1, Ring: ring.Config{Backend: "syscall"},
		Replicator: rep, PartitionListeners: []PartitionListener{lis}})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.CreateTopic("r", 1, map[string]string{"min.insync.replicas": "2"}); err != nil {
		t.Fatal(err)
	}
	tp := TopicPartition{"r", 0}
	if r := produce(t, b, tp, AcksAll, buildBatch(t, "x", 1)); !errors.Is(r.Err, ErrNotEnoughReplicas) {
		t.Fatalf("acks=all with an ISR of 1: %+v", r)
	}
	rep.isr.Store(2)
	ch := make(chan ProduceResult, 1)
	b.Produce(tp, [][]byte{buildBatch(t, "y", 3)}, AcksAll, func(r ProduceResult) { ch <- r })
	loopTurns(t, b, 3)
	select {
	case r := <-ch:
		t.Fatalf("acknowledged before any follower had it: %+v", r)
	default:
	}
	if res := fetch(t, b, FetchRequest{Partitions: []FetchPartition{{tp, 0, 1 << 20}}}); res[0].HighWatermark != 0 {
		t.Fatalf("high watermark %d before the followers fetched, want 0", res[0].HighWatermark)
	}
	rep.follower.Store(3)
	if err := b.OffsetsMoved(tp); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-ch:
		if r.Err != nil || r.BaseOffset != 0 {
			t.Fatalf("after the followers caught up: %+v", r)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("OffsetsMoved did not release the acknowledgement")
	}
	if err := b.DeleteTopic("r"); err != nil {
		t.Fatal(err)
	}
	b.Close()
	lis.mu.Lock()
	defer lis.mu.Unlock()
	got := slices.DeleteFunc(lis.events, func(e string) bool { return strings.HasSuffix(e, " "+group.OffsetsTopic) })
	if len(got) != 2 || got[0] != "open r" || got[1] != "close r" {
		t.Fatalf("listener saw %v, want [open r close r]", got)
	}
}

// An acks=all produce to a topic without flush.always moves the high watermark (the log
// end) at once: a long-poll waiting on it answers without waiting for its deadline.
func TestLongPollWakesOnAcksAllProduce(t *testing.T) {
	b := openBroker(t, t.TempDir(), "syscall", 1)
	defer b.Close()
	if err := b.CreateTopic("t", 1, nil); err != nil {
		t.Fatal(err)
	}
	ch := make(chan []FetchResult, 1)
	b.Fetch(FetchRequest{Partitions: []FetchPartition{{TopicPartition{"t", 0}, 0, 1 << 20}}, MinBytes: 1, MaxWait: fetchWaitMax},
		func(r []FetchResult) { ch <- r })
	for i := 0; i < 3; i++ { // the fetch reads, finds nothing and parks
		if err := b.Exec(0, func(*ring.Reactor) error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	if r := produce(t, b, TopicPartition{"t", 0}, AcksAll, buildBatch(t, "x", 1)); r.Err != nil {
		t.Fatal(r.Err)
	}
	select {
	case r := <-ch:
		if got := values(t, &r[0]); len(got) != 1 {
			t.Fatalf("woken fetch got %v", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("long-poll not woken by an acks=all produce")
	}
}

// A follower's fetch that parked and was woken by an append is counted by that cause (the
// counters the leader exports as ringlog_replica_fetch_parks_total); a consumer's fetch
// woken the same way is not a follower's and is not counted.
func TestReplicaFetchWakeCounted(t *testing.T) {
	b := openBroker(t, t.TempDir(), "syscall", 1)
	defer b.Close()
	if err := b.CreateTopic("t", 1, nil); err != nil {
		t.Fatal(err)
	}
	tp := TopicPartition{"t", 0}
	for i, replica := range []bool{true, false} {
		ch := make(chan []FetchResult, 1)
		b.Fetch(FetchRequest{Partitions: []FetchPartition{{tp, int64(i), 1 << 20}}, MinBytes: 1, MaxWait: time.Minute, Replica: replica},
			func(r []FetchResult) { ch <- r })
		loopTurns(t, b, 3) // parked before the produce below
		produce(t, b, tp, AcksLeader, buildBatch(t, "w", 1))
		select {
		case r := <-ch:
			if r[0].Err != nil || r[0].Records.Size == 0 {
				t.Fatalf("fetch %d (replica %v) woken with %+v", i, replica, r[0])
			}
			r[0].Release()
		case <-time.After(10 * time.Second):
			t.Fatalf("fetch %d (replica %v) not woken by the produce", i, replica)
		}
	}
	st, err := b.Stats()
	if err != nil {
		t.Fatal(err)
	}
	want := [core.WakeCauses]uint64{}
	want[core.WakeAppend] = 1
	if st[0].ReplicaWakes != want {
		t.Fatalf("replica wakes by cause %v, want one append (%v)", st[0].ReplicaWakes, want)
	}
}
