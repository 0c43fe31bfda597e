package engine

import (
	"errors"
	"os"
	"testing"
	"time"

	"github.com/ringlog/ringlog/engine/faultio"
	"github.com/ringlog/ringlog/ring"
	"golang.org/x/sys/unix"
)

// TestWriteErrorsReachCaller: EIO and ENOSPC from the write reach the caller, the log is left
// exactly as before, and the next append (once the disk recovers) lands where it should.
func TestWriteErrorsReachCaller(t *testing.T) {
	forEachBackend(t, func(t *testing.T, inner ring.FileIO, mode StorageMode) {
		for _, errno := range []unix.Errno{unix.EIO, unix.ENOSPC} {
			t.Run(errno.Error(), func(t *testing.T) {
				dir := t.TempDir()
				fio := faultio.New(inner)
				l, _ := openLog(t, dir, testConfig(mode), fio)
				want := appendSome(t, l, 0, 50, 0)
				end, size := l.EndOffset(), l.Size()
				fio.Inject(faultio.Rule{Op: faultio.OpPwritev, Errno: errno, Times: 1})
				_, err := l.AppendBatches([][]byte{makeBatch(t, 100, 3, 100, 0), makeBatch(t, 101, 3, 100, 0)})
				if !errors.Is(err, errno) {
					t.Fatalf("append error %v, want %v", err, errno)
				}
				// The sentinel the broker maps to STORAGE_ERROR (not UNKNOWN).
				if wantKind := map[unix.Errno]error{unix.EIO: ErrStorageWrite, unix.ENOSPC: ErrDiskFull}[errno]; !errors.Is(err, wantKind) {
					t.Fatalf("append error %v, want %v", err, wantKind)
				}
				if errors.Is(err, ErrLogFailed) || l.Err() != nil {
					t.Fatalf("a failed write must not fail the log: %v", l.Err())
				}
				if l.EndOffset() != end || l.Size() != size {
					t.Fatalf("failed append moved the log: end %d->%d size %d->%d", end, l.EndOffset(), size, l.Size())
				}
				mustEqualBytes(t, "after failed append", readAll(t, l, 1<<20), want)
				want = append(want, appendSome(t, l, 200, 5, 0)...)
				if err := l.Sync(); err != nil {
					t.Fatal(err)
				}
				mustEqualBytes(t, "after recovery", readAll(t, l, 1<<20), want)
				if err := l.Close(); err != nil {
					t.Fatal(err)
				}
				l2, rep := openLog(t, dir, testConfig(mode), inner)
				defer l2.Close()
				if rep.DroppedBytes != 0 {
					t.Fatalf("reopen dropped %+v", rep)
				}
				mustEqualBytes(t, "after reopen", readAll(t, l2, 1<<20), want)
			})
		}
	})
}

// TestFsyncFailureFailsLog: after a failed fdatasync the partition stops accepting writes
// instead of retrying (the kernel may have dropped the dirty pages: a retry that succeeds
// would claim durability that does not exist).
func TestFsyncFailureFailsLog(t *testing.T) {
	forEachBackend(t, func(t *testing.T, inner ring.FileIO, mode StorageMode) {
		for _, errno := range []unix.Errno{unix.EIO, unix.ENOSPC} {
			t.Run(errno.Error(), func(t *testing.T) {
				dir := t.TempDir()
				fio := faultio.New(inner)
				cfg := testConfig(mode)
				cfg.FlushAlways = true
				l, _ := openLog(t, dir, cfg, fio)
				want := appendSome(t, l, 0, 10, 0)
				if err := l.Flush(); err != nil {
					t.Fatal(err)
				}
				synced := l.SyncedOffset()
				appendSome(t, l, 10, 3, 0)
				fio.Inject(faultio.Rule{Op: faultio.OpFdatasync, Errno: errno, Times: 1})
				err := l.Flush()
				if !errors.Is(err, errno) || !errors.Is(err, ErrLogFailed) {
					t.Fatalf("Flush error %v, want %v and ErrLogFailed", err, errno)
				}
				if l.SyncedOffset() != synced {
					t.Fatalf("synced offset moved to %d after a failed sync", l.SyncedOffset())
				}
				syncs := fio.Calls(faultio.OpFdatasync)
				if _, err := l.Append(makeBatch(t, 50, 1, 10, 0)); !errors.Is(err, ErrLogFailed) {
					t.Fatalf("append after failed sync: %v", err)
				}
				for _, op := range []func() error{l.Flush, l.Sync, func() error { return l.TruncateTo(0) }} {
					if err := op(); !errors.Is(err, ErrLogFailed) {
						t.Fatalf("write op after failed sync: %v", err)
					}
				}
				if fio.Calls(faultio.OpFdatasync) != syncs {
					t.Fatal("the log retried fdatasync after it failed")
				}
				// Reads still work; Close does not pretend to sync.
				if _, err := l.Read(0, 100); err != nil {
					t.Fatal(err)
				}
				if err := l.Close(); err != nil {
					t.Fatal(err)
				}
				if fio.Calls(faultio.OpFdatasync) != syncs {
					t.Fatal("Close synced a failed log")
				}
				// Reopening re-runs recovery and takes writes again.
				l2, _ := openLog(t, dir, cfg, inner)
				defer l2.Close()
				got := readAll(t, l2, 1<<20)
				mustEqualBytes(t, "synced prefix after reopen", got[:len(want)], want)
				if _, err := l2.Append(makeBatch(t, 60, 1, 10, 0)); err != nil {
					t.Fatalf("append after reopen: %v", err)
				}
			})
		}
	})
}

// TestRollDefersSyncAndFailureFailsLog: a roll does not stall on the old segment's writeback;
// the next Sync fdatasyncs sealed segments first, and if that fails the log fails and the
// synced offset stays where it was.
func TestRollDefersSyncAndFailureFailsLog(t *testing.T) {
	fio := faultio.New(ring.Syscalls{})
	l, _ := openLog(t, t.TempDir(), testConfig(StoragePageCache), fio)
	defer l.Close()
	syncs := fio.Calls(faultio.OpFdatasync)
	for i := 0; l.SegmentCount() < 4; i++ {
		if _, err := l.Append(makeBatch(t, i, 4, 200, 0)); err != nil {
			t.Fatal(err)
		}
	}
	if fio.Calls(faultio.OpFdatasync) != syncs || l.SyncedOffset() != 0 {
		t.Fatalf("rolls synced inline (%d syncs) or synced offset moved (%d)", fio.Calls(faultio.OpFdatasync)-syncs, l.SyncedOffset())
	}
	// The first sealed segment syncs, the second fails.
	fio.Inject(faultio.Rule{Op: faultio.OpFdatasync, Errno: unix.EIO, After: 1})
	err := l.Sync()
	if !errors.Is(err, ErrLogFailed) || !errors.Is(err, unix.EIO) {
		t.Fatalf("Sync with failing fdatasync: %v", err)
	}
	if got, want := l.SyncedOffset(), l.segments[1].baseOffset; got != want {
		t.Fatalf("synced offset %d, want %d (end of the one segment that synced)", got, want)
	}
	if _, err := l.Append(makeBatch(t, 0, 1, 10, 0)); !errors.Is(err, ErrLogFailed) {
		t.Fatalf("append after failed sync: %v", err)
	}
}

func TestShortWritesAreCompleted(t *testing.T) {
	forEachBackend(t, func(t *testing.T, inner ring.FileIO, mode StorageMode) {
		fio := faultio.New(inner)
		fio.ShortWriteBytes = blockBytes // O_DIRECT short writes stay block-aligned
		if mode == StoragePageCache {
			fio.ShortWriteBytes = 77
		}
		dir := t.TempDir()
		l, _ := openLog(t, dir, testConfig(mode), fio)
		var batches [][]byte
		var want []byte
		for i := 0; i < 40; i++ {
			batches = append(batches, makeBatch(t, i, 3, 300, 0))
		}
		if _, err := l.AppendBatches(batches); err != nil {
			t.Fatal(err)
		}
		for _, b := range batches {
			want = append(want, b...)
		}
		if fio.Calls(faultio.OpPwritev) < 2 {
			t.Fatal("short writes were not exercised")
		}
		mustEqualBytes(t, "short writes", readAll(t, l, 1<<20), want)
		l.Close()
		l2, rep := openLog(t, dir, testConfig(mode), inner)
		defer l2.Close()
		if rep.DroppedBytes != 0 {
			t.Fatalf("dropped %+v", rep)
		}
		mustEqualBytes(t, "short writes after reopen", readAll(t, l2, 1<<20), want)
	})
}

// TestGroupCommit: a loop turn's batches share one pwritev and one fdatasync.
func TestGroupCommit(t *testing.T) {
	forEachBackend(t, func(t *testing.T, inner ring.FileIO, mode StorageMode) {
		fio := faultio.New(inner)
		cfg := testConfig(mode)
		cfg.FlushAlways = true
		cfg.DirectChunkBytes = 64 << 10
		l, _ := openLog(t, t.TempDir(), cfg, fio)
		defer l.Close()
		writes, syncs := fio.Calls(faultio.OpPwritev), fio.Calls(faultio.OpFdatasync)
		var batches [][]byte
		for i := 0; i < 50; i++ {
			batches = append(batches, makeBatch(t, i, 2, 100, 0))
		}
		res, err := l.AppendBatches(batches)
		if err != nil || res.Batches != 50 || res.FirstOffset != 0 || res.LastOffset != 99 {
			t.Fatalf("AppendBatches: %+v %v", res, err)
		}
		if l.SyncedOffset() != 0 {
			t.Fatalf("synced %d before Flush", l.SyncedOffset())
		}
		if err := l.Flush(); err != nil {
			t.Fatal(err)
		}
		if got := fio.Calls(faultio.OpPwritev) - writes; got != 1 {
			t.Fatalf("%d pwritev calls for one group, want 1", got)
		}
		if got := fio.Calls(faultio.OpFdatasync) - syncs; got != 1 {
			t.Fatalf("%d fdatasync calls for one group, want 1", got)
		}
		if l.SyncedOffset() != 100 {
			t.Fatalf("synced offset %d, want 100", l.SyncedOffset())
		}
		if err := l.Flush(); err != nil || fio.Calls(faultio.OpFdatasync)-syncs != 1 {
			t.Fatalf("Flush with nothing unsynced synced again (%v)", err)
		}
	})
}

func TestFlushPolicies(t *testing.T) {
	type step struct {
		appendRecords int
		advance       time.Duration
		wantSynced    bool
	}
	cases := []struct {
		name  string
		cfg   func(*LogConfig)
		steps []step
	}{
		{"none", func(*LogConfig) {}, []step{{3, 0, false}, {30, time.Hour, false}}},
		{"always", func(c *LogConfig) { c.FlushAlways = true }, []step{{1, 0, true}, {3, 0, true}}},
		{"messages=10", func(c *LogConfig) { c.FlushMessages = 10 }, []step{{3, 0, false}, {3, 0, false}, {3, 0, false}, {3, 0, true}, {9, 0, false}, {1, 0, true}}},
		{"ms=100", func(c *LogConfig) { c.FlushMs = 100 }, []step{{3, 99 * time.Millisecond, false}, {3, time.Millisecond, true}, {1, 50 * time.Millisecond, false}, {1, 50 * time.Millisecond, true}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clock := newFakeClock()
			cfg := testConfig(StoragePageCache)
			cfg.Clock = clock.Now
			tc.cfg(&cfg)
			fio := faultio.New(ring.Syscalls{})
			l, _ := openLog(t, t.TempDir(), cfg, fio)
			defer l.Close()
			for i, st := range tc.steps {
				if _, err := l.Append(makeBatch(t, i, st.appendRecords, 10, 0)); err != nil {
					t.Fatal(err)
				}
				clock.Advance(st.advance)
				syncs := fio.Calls(faultio.OpFdatasync)
				if err := l.Flush(); err != nil {
					t.Fatal(err)
				}
				synced := fio.Calls(faultio.OpFdatasync) > syncs
				if synced != st.wantSynced || (synced && l.SyncedOffset() != l.EndOffset()) {
					t.Fatalf("step %d: synced=%v (offset %d of %d), want %v", i, synced, l.SyncedOffset(), l.EndOffset(), st.wantSynced)
				}
			}
			if err := l.Sync(); err != nil || l.SyncedOffset() != l.EndOffset() {
				t.Fatalf("Sync: %v, synced %d of %d", err, l.SyncedOffset(), l.EndOffset())
			}
		})
	}
}

func TestFlushDeadline(t *testing.T) {
	clock := newFakeClock()
	cfg := testConfig(StoragePageCache)
	cfg.Clock = clock.Now
	cfg.FlushMs = 250
	l, _ := openLog(t, t.TempDir(), cfg, ring.Syscalls{})
	defer l.Close()
	if _, ok := l.FlushDeadline(); ok {
		t.Fatal("deadline with nothing unsynced")
	}
	start := clock.now
	appendSome(t, l, 0, 1, 0)
	clock.Advance(100 * time.Millisecond)
	appendSome(t, l, 1, 1, 0)
	d, ok := l.FlushDeadline()
	if !ok || !d.Equal(start.Add(250*time.Millisecond)) {
		t.Fatalf("deadline %v %v, want first append + 250ms", d, ok)
	}
	clock.now = d
	if err := l.Flush(); err != nil || l.SyncedOffset() != l.EndOffset() {
		t.Fatalf("Flush at the deadline: %v, synced %d of %d", err, l.SyncedOffset(), l.EndOffset())
	}
	if _, ok := l.FlushDeadline(); ok {
		t.Fatal("deadline after sync")
	}
}

// TestRollFailureLeavesLogUsable: when the next segment cannot be created, the append fails
// and the active segment keeps taking appends once the obstacle is gone.
func TestRollFailureLeavesLogUsable(t *testing.T) {
	forEachBackend(t, func(t *testing.T, fio ring.FileIO, mode StorageMode) {
		dir := t.TempDir()
		l, _ := openLog(t, dir, testConfig(mode), fio)
		defer l.Close()
		var want []byte
		for l.Size() < 60<<10 {
			want = append(want, appendSome(t, l, len(want), 1, 0)...)
		}
		obstacle := segmentFile(dir, l.EndOffset(), logSuffix)
		if err := os.WriteFile(obstacle, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		big := makeBatch(t, 7, 8, 1000, 0)
		if _, err := l.Append(big); !errors.Is(err, os.ErrExist) {
			t.Fatalf("append needing a roll onto an existing file: %v", err)
		}
		mustInvariants(t, l)
		os.Remove(obstacle)
		if _, err := l.Append(big); err != nil {
			t.Fatalf("append after the obstacle is gone: %v", err)
		}
		want = append(want, big...)
		mustEqualBytes(t, "after failed roll", readAll(t, l, 1<<20), want)
	})
}

// TestRecoveryReadErrorKeepsLog: a read that fails during recovery stops OpenLog with the
// error; it must not be taken for a torn tail and cut the log there.
func TestRecoveryReadErrorKeepsLog(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(StoragePageCache)
	l, _ := openLog(t, dir, cfg, ring.Syscalls{})
	for i := 0; i < 20; i++ {
		if _, err := l.Append(makeBatch(t, i, 4, 200, 0)); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	end := l.EndOffset()
	l.closeFiles() // no clean shutdown: recovery scans
	for after := 0; after < 3; after++ {
		fio := faultio.New(ring.Syscalls{})
		fio.Inject(faultio.Rule{Op: faultio.OpPread, Errno: unix.EIO, After: after, Times: 1})
		if l, _, err := OpenLog(dir, cfg, fio); err == nil {
			l.closeFiles()
			if fio.Injected(faultio.OpPread) > 0 {
				t.Fatalf("after %d reads: OpenLog hid a failed read", after)
			}
		} else if !errors.Is(err, unix.EIO) {
			t.Fatalf("after %d reads: OpenLog: %v, want EIO", after, err)
		}
		l, _ := openLog(t, dir, cfg, ring.Syscalls{})
		if l.EndOffset() != end {
			t.Fatalf("after a read error at read %d the log ends at %d, want %d", after, l.EndOffset(), end)
		}
		l.closeFiles()
	}
}
