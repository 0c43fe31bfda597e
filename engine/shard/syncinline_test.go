package shard

import (
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ringlog/ringlog/ring"
)

// syncCounts reads shard 0's sync counters and the descriptor duplicates of tp's log.
func syncCounts(t *testing.T, b *Broker, tp TopicPartition) (syncs, inline, dups uint64) {
	t.Helper()
	err := b.Exec(0, func(*ring.Reactor) error {
		s := b.shards[0]
		syncs, inline, dups = s.counters.fsync.Count, s.counters.fsyncInline, s.parts[tp].log.SyncDups()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return syncs, inline, dups
}

// openFlushAlwaysHooked opens a one-shard broker (syscall backend) with hooks and a
// flush.always topic "t" of one partition, closed when the test ends.
func openFlushAlwaysHooked(t *testing.T, hooks *testHooks) (*Broker, TopicPartition) {
	t.Helper()
	b, err := Open(Config{DataDir: t.TempDir(), Shards: 1, Ring: ring.Config{Backend: "syscall"}, hooks: hooks})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	if err := b.CreateTopic("t", 1, map[string]string{"flush.always": "true"}); err != nil {
		t.Fatal(err)
	}
	return b, TopicPartition{"t", 0}
}

// A lone flush.always producer: the sync of each record is the only work of its loop turn,
// so the shard runs it inline (no io-wq worker, no duplicate of the segment descriptor);
// with Config.SyncInlineOff every sync goes to the ring with its duplicate.
func TestSyncInlineWhenAlone(t *testing.T) {
	const records = 8
	for _, backend := range backends {
		for _, off := range []bool{false, true} {
			name := backend + "/auto"
			if off {
				name = backend + "/off"
			}
			t.Run(name, func(t *testing.T) {
				b, err := Open(Config{DataDir: t.TempDir(), Shards: 1, Ring: ring.Config{Backend: backend}, SyncInlineOff: off})
				if err != nil {
					t.Skipf("open %s: %v", backend, err)
				}
				defer b.Close()
				if err := b.CreateTopic("t", 1, map[string]string{"flush.always": "true"}); err != nil {
					t.Fatal(err)
				}
				tp := TopicPartition{"t", 0}
				for i := 0; i < records; i++ {
					if r := produce(t, b, tp, AcksLeader, buildBatch(t, "a", 1)); r.Err != nil {
						t.Fatal(r.Err)
					}
				}
				syncs, inline, dups := syncCounts(t, b, tp)
				if syncs < records {
					t.Fatalf("%d syncs for %d flush.always produces", syncs, records)
				}
				if off {
					if inline != 0 || dups != syncs {
						t.Fatalf("sync-inline off: %d inline syncs, %d descriptor dups for %d syncs; want 0 and one each", inline, dups, syncs)
					}
					return
				}
				// Each produce's sync ran alone; a stray completion (the reactor's own wake-up
				// read) may send one to the ring, never most.
				if inline < records/2 || dups != syncs-inline {
					t.Fatalf("sync-inline auto: %d of %d syncs inline, %d descriptor dups; want most inline and dups only for the others", inline, syncs, dups)
				}
			})
		}
	}
}

// Two partitions' syncs started in one turn go to the ring together: the shard does not
// block on the device while another sync is waiting to start.
func TestSyncInlineNotWithOtherSyncs(t *testing.T) {
	b := openBroker(t, t.TempDir(), "syscall", 1)
	defer b.Close()
	if err := b.CreateTopic("t", 2, map[string]string{"flush.always": "true"}); err != nil {
		t.Fatal(err)
	}
	tp0, tp1 := TopicPartition{"t", 0}, TopicPartition{"t", 1}
	_, before, _ := syncCounts(t, b, tp0)
	answers := make(chan ProduceResult, 2)
	records := buildBatch(t, "a", 1)
	err := b.Exec(0, func(*ring.Reactor) error { // both appends in one loop turn
		for _, tp := range []TopicPartition{tp0, tp1} {
			b.ProduceFrom(0, tp, [][]byte{records}, AcksLeader, func(r ProduceResult) { answers <- r })
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		select {
		case r := <-answers:
			if r.Err != nil {
				t.Fatal(r.Err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("flush.always produces not answered")
		}
	}
	_, after, dups0 := syncCounts(t, b, tp0)
	_, _, dups1 := syncCounts(t, b, tp1)
	if after != before || dups0 != 1 || dups1 != 1 {
		t.Fatalf("two syncs in one turn: %d ran inline, dups %d and %d; want none inline, one dup each", after-before, dups0, dups1)
	}
}

// The turn that writes the staged appends starts their sync (runFlushNow: writeStaged
// calls EndTurn), instead of leaving it to a zero-delay timer that would run a loop turn
// later, after a wait in the kernel. The hook sees who started the fdatasync.
func TestStagedWriteStartsSyncSameTurn(t *testing.T) {
	fromWriteStaged := make(chan bool, 4)
	hooks := &testHooks{fdatasyncAsync: func(s *Shard, fd int, done func(error)) {
		pcs := make([]uintptr, 32)
		frames := runtime.CallersFrames(pcs[:runtime.Callers(2, pcs)])
		found := false
		for {
			f, more := frames.Next()
			found = found || strings.HasSuffix(f.Function, ".(*Shard).writeStaged")
			if !more {
				break
			}
		}
		fromWriteStaged <- found
		done(nil)
	}}
	b, tp := openFlushAlwaysHooked(t, hooks)
	if r := produce(t, b, tp, AcksLeader, buildBatch(t, "a", 1)); r.Err != nil || r.BaseOffset != 0 {
		t.Fatalf("produce: %+v", r)
	}
	if !<-fromWriteStaged {
		t.Fatal("the produce's fdatasync was not started by the turn's writeStaged (runFlushNow)")
	}
}

// Work that arrives while an inline sync blocks the loop (here a message posted during
// the fdatasync) sends the next syncInlineBackoffSyncs syncs to the ring, so a shard that
// serves other connections blocks for at most one sync in that many.
func TestSyncInlineBacksOffWhenWorkArrives(t *testing.T) {
	var posted atomic.Int64
	hooks := &testHooks{fdatasyncInline: func(s *Shard, fd int) error {
		posted.Add(1)
		if err := s.r.Post(func() {}); err != nil {
			return err
		}
		return unix.Fdatasync(fd)
	}}
	b, tp := openFlushAlwaysHooked(t, hooks)
	// Until one sync ran inline (a stray completion may send one to the ring).
	for i := 0; posted.Load() == 0; i++ {
		if i == 20 {
			t.Fatal("no sync ran inline in 20 lone flush.always produces")
		}
		if r := produce(t, b, tp, AcksLeader, buildBatch(t, "a", 1)); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	_, inlineBefore, dupsBefore := syncCounts(t, b, tp)
	const after = 5 // < syncInlineBackoffSyncs
	for i := 0; i < after; i++ {
		if r := produce(t, b, tp, AcksLeader, buildBatch(t, "b", 1)); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	_, inline, dups := syncCounts(t, b, tp)
	if inline != inlineBefore || dups != dupsBefore+after {
		t.Fatalf("after work arrived during an inline sync: %d more inline syncs, %d more ring syncs; want 0 and %d", inline-inlineBefore, dups-dupsBefore, after)
	}
}
