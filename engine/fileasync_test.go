package engine

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ringlog/ringlog/ring"
)

// retireLog opens a log in dir that retires every closed segment through qw's ring ops and
// keeps one retired .log for reuse, and appends until it has segments segments.
func retireLog(t *testing.T, dir string, mode StorageMode, qw *queuedWrites, segments int) *Log {
	t.Helper()
	cfg := LogConfig{Storage: mode, SegmentBytes: 32 << 10, IndexIntervalBytes: 512, RetentionBytes: 1,
		RecycleSegments: 1, Logger: quietLogger}
	l, _ := openLog(t, dir, cfg, ring.Syscalls{})
	if l.Mode() != mode {
		l.Close()
		skipUnlessDirect(t, l, dir, mode)
	}
	l.SetAsyncRetention(qw, func() {})
	l.SetAsyncSnapshots(qw)
	for l.SegmentCount() < segments {
		if _, err := appendCounted(t, l, qw.rng); err != nil {
			t.Fatal(err)
		}
		qw.completeSome(100) // snapshots, prunes: done at once (each op may start the next)
	}
	return l
}

// retireAll runs a retention pass to its end (its checkpoint's six ops) and retires: every
// closed segment goes, its unlinks (or rename into the pool) left in flight on qw. It
// returns the bases of the retired segments.
func retireAll(t *testing.T, l *Log, qw *queuedWrites) []int64 {
	t.Helper()
	var bases []int64
	for _, s := range l.segments[:len(l.segments)-1] {
		bases = append(bases, s.baseOffset)
	}
	if _, err := l.EnforceRetention(time.Now()); err != nil {
		t.Fatal(err)
	}
	for step := 0; l.retention.inFlight(); step++ {
		if len(qw.q) != 1 || step == 6 {
			t.Fatalf("step %d of the checkpoint: %d ops in flight", step, len(qw.q))
		}
		qw.completeOne()
	}
	n, err := l.CompleteRetention()
	if err != nil || n != len(bases) {
		t.Fatalf("CompleteRetention: %d of %d, %v", n, len(bases), err)
	}
	return bases
}

// TestAsyncRetireOrder: a retired segment's files go through the ring one op at a time, in
// the blocking way's order: the index files, then the batch maps, then the .log (or the
// .log's rename into the recycle pool, whose background preparation starts only once the
// rename completed: the file then joins the pool). Completions arrive in random order across
// segments; before each, the files a queued op's predecessors remove must be gone. A
// ResetTo to a retired segment's base waits for those unlinks: none removes the new
// segment's files, and the records appended after it survive a reopen. Fails if a step
// starts before the one before it completed, if the preparation runs before its rename, or
// if ResetTo does not wait (awaitFileJobs).
func TestAsyncRetireOrder(t *testing.T) {
	seed := asyncSeed(t)
	for _, mode := range storageModes {
		t.Run(string(mode), func(t *testing.T) {
			dir := t.TempDir()
			rng := rand.New(rand.NewPCG(seed, 31))
			qw := &queuedWrites{fio: ring.Syscalls{}, rng: rng}
			l := retireLog(t, dir, mode, qw, 4)
			inodes := map[int64]uint64{}
			for _, s := range l.segments {
				inodes[s.baseOffset] = s.inode
			}
			unmapped := RecycleStats().Unmapped
			bases := retireAll(t, l, qw)
			if l.FileJobsPending() != len(bases) || len(qw.q) != len(bases) {
				t.Fatalf("%d jobs, %d ops in flight for %d retired segments: want one op per segment", l.FileJobsPending(), len(qw.q), len(bases))
			}
			pooled := ""
			for ops := 0; len(qw.q) > 0; ops++ {
				if ops > 100 {
					t.Fatalf("retirement ops do not end: %d queued", len(qw.q))
				}
				for _, x := range qw.q {
					checkRetireStep(t, dir, x, inodes)
					if x.rename != nil {
						pooled = x.rename[1]
						if l.recyclePreparing != 1 || l.recycleReady != nil {
							t.Fatalf("rename into the pool in flight: %d preparing, preparation started %v", l.recyclePreparing, l.recycleReady != nil)
						}
					}
				}
				qw.completeOne()
			}
			l.settlePool()
			if pooled == "" || len(l.recyclePool) != 1 || l.recyclePool[0].path != pooled || RecycleStats().Unmapped != unmapped {
				t.Fatalf("pool %v after its rename of %q completed (unmapped %d -> %d)", l.recyclePool, pooled, unmapped, RecycleStats().Unmapped)
			}
			if left := segmentFilesBelow(t, dir, l.StartOffset()); len(left) != 1 || filepath.Join(dir, left[0]) != pooled {
				t.Fatalf("files of retired segments left: %v, want only the pool's %s", left, filepath.Base(pooled))
			}

			// ResetTo a retired segment's base with its unlinks in flight.
			for l.SegmentCount() < 3 {
				if _, err := appendCounted(t, l, rng); err != nil {
					t.Fatal(err)
				}
				qw.completeSome(100)
			}
			bases = retireAll(t, l, qw)
			if len(qw.q) == 0 {
				t.Fatal("no unlink in flight")
			}
			if err := l.ResetTo(bases[0]); err != nil {
				t.Fatal(err)
			}
			if len(qw.q) != 0 || l.FileJobsPending() != 0 {
				t.Fatalf("ResetTo returned with %d ops (%d jobs) in flight", len(qw.q), l.FileJobsPending())
			}
			for l.EndOffset() < bases[0]+20 {
				if _, err := appendCounted(t, l, rng); err != nil {
					t.Fatal(err)
				}
			}
			end := l.EndOffset()
			qw.completeSome(100)
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			r, _ := openLog(t, dir, l.cfg, ring.Syscalls{})
			defer r.Close()
			if r.StartOffset() != bases[0] || r.EndOffset() != end {
				t.Fatalf("after ResetTo(%d), appends to %d and a reopen: log [%d, %d)", bases[0], end, r.StartOffset(), r.EndOffset())
			}
			readAll(t, r, 1<<20)
		})
	}
}

// checkRetireStep fails when x, a retirement op in flight, was started before the steps
// that come before it in its segment's order had completed.
func checkRetireStep(t *testing.T, dir string, x queuedWrite, inodes map[int64]uint64) {
	t.Helper()
	path := x.unlink
	if x.rename != nil {
		path = x.rename[0]
	}
	name := filepath.Base(path)
	var before []string // what must be gone already
	inode, prefix, isMap := parseBatchMapName(name)
	if isMap {
		for base, in := range inodes {
			if in == inode {
				before = []string{segmentPath(dir, base, indexSuffix), segmentPath(dir, base, timeIndexSuffix)}
			}
		}
		if prefix == batchMapOldPrefix {
			before = append(before, filepath.Join(dir, batchMapName(batchMapOwnPrefix, inode)))
		}
	} else {
		base, suffix, ok := parseSegmentName(name)
		if !ok {
			t.Fatalf("unexpected op in flight: %s of %s", x.kind(), path)
		}
		switch suffix {
		case timeIndexSuffix:
			before = []string{segmentPath(dir, base, indexSuffix)}
		case logSuffix:
			before = []string{segmentPath(dir, base, indexSuffix), segmentPath(dir, base, timeIndexSuffix)}
			if x.rename == nil {
				for _, p := range []string{batchMapOwnPrefix, batchMapOldPrefix} {
					before = append(before, filepath.Join(dir, batchMapName(p, inodes[base])))
				}
			}
		}
	}
	for _, p := range before {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Fatalf("%s of %s in flight while %s is still there (%v)", x.kind(), name, filepath.Base(p), err)
		}
	}
}
