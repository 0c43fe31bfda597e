package engine

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ringlog/ringlog/engine/batch"
	"github.com/ringlog/ringlog/engine/faultio"
	"github.com/ringlog/ringlog/ring"
	"golang.org/x/sys/unix"
)

// retentionLog opens a log in dir whose retention retires every closed segment (1-byte
// retention.bytes, 32 KiB segments) with its checkpoint flushes queued on qw, and appends
// until it has at least segments segments. hooked counts SetAsyncRetention's hook.
func retentionLog(t *testing.T, dir string, mode StorageMode, fio ring.FileIO, qw *queuedWrites, segments int, hooked *int) *Log {
	t.Helper()
	cfg := LogConfig{Storage: mode, SegmentBytes: 32 << 10, IndexIntervalBytes: 512, RetentionBytes: 1,
		RecycleSegments: -1, Logger: quietLogger}
	l, _ := openLog(t, dir, cfg, fio)
	l.SetAsyncRetention(qw, func() { *hooked++ })
	for l.SegmentCount() < segments {
		if _, err := appendCounted(t, l, qw.rng); err != nil {
			t.Fatal(err)
		}
	}
	return l
}

func readCheckpoint(t *testing.T, dir string) (int64, bool) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, startOffsetFileName))
	if os.IsNotExist(err) {
		return 0, false
	}
	if err != nil {
		t.Fatal(err)
	}
	off, err := decodeStartOffset(b)
	if err != nil {
		t.Fatal(err)
	}
	return off, true
}

// TestAsyncRetentionDoesNotWait: with asynchronous file ops, a retention pass returns with
// its checkpoint's first op in flight and nothing retired; the ops run one after the other
// (write, fsync, rename, directory fsync), the checkpoint replaced only by the rename; the
// segments stay readable and the start offset stays put until all four completed and
// CompleteRetention ran; a second pass meanwhile starts nothing; the hook runs only after
// the directory's fsync.
func TestAsyncRetentionDoesNotWait(t *testing.T) {
	seed := asyncSeed(t)
	for _, mode := range storageModes {
		t.Run(string(mode), func(t *testing.T) {
			dir := t.TempDir()
			qw := &queuedWrites{fio: ring.Syscalls{}, rng: rand.New(rand.NewPCG(seed, 11))}
			hooked := 0
			l := retentionLog(t, dir, mode, ring.Syscalls{}, qw, 4, &hooked)
			defer l.Close()
			segments, start, target := l.SegmentCount(), l.StartOffset(), l.active().baseOffset
			n, err := l.EnforceRetention(time.Now())
			if err != nil {
				t.Fatal(err)
			}
			if n != 0 || l.SegmentCount() != segments || l.StartOffset() != start {
				t.Fatalf("retention retired %d segments (%d -> %d, start %d -> %d) before its checkpoint was durable",
					n, segments, l.SegmentCount(), start, l.StartOffset())
			}
			if !l.RetentionPending() {
				t.Fatal("no retention pass in flight")
			}
			// One op at a time, in this order: the temporary file's open, its write, its
			// fsync, the rename over the checkpoint, the directory's open and fsync.
			for step, want := range []string{"open", "write", "fsync", "rename", "open", "fsync"} {
				if len(qw.q) != 1 {
					t.Fatalf("step %d: %d ops in flight, want one: the %s", step, len(qw.q), want)
				}
				if got := qw.q[0].kind(); got != want {
					t.Fatalf("step %d: a %s in flight, want a %s", step, got, want)
				}
				if got, ok := readCheckpoint(t, dir); ok != (step >= 4) || ok && got != target {
					t.Fatalf("step %d: checkpoint %d %v: it must be replaced by the rename, after the fsync", step, got, ok)
				}
				if _, err := l.Read(start, 1<<10); err != nil {
					t.Fatalf("step %d: read at the start offset with the pass in flight: %v", step, err)
				}
				if n, err := l.EnforceRetention(time.Now()); err != nil || n != 0 || len(qw.q) != 1 {
					t.Fatalf("step %d: a second pass with one in flight: %d, %v, %d ops queued", step, n, err, len(qw.q))
				}
				if hooked != 0 || l.SegmentCount() != segments || l.StartOffset() != start {
					t.Fatalf("step %d: hook %d, %d segments, start %d before the checkpoint was durable", step, hooked, l.SegmentCount(), l.StartOffset())
				}
				qw.completeOne()
			}
			if hooked != 1 || l.SegmentCount() != segments || l.StartOffset() != start {
				t.Fatalf("after the directory's fsync: hook %d, segments %d, start %d: the hook runs, nothing retires yet", hooked, l.SegmentCount(), l.StartOffset())
			}
			mustInvariants(t, l)
			n, err = l.CompleteRetention()
			if err != nil || n != segments-1 || l.StartOffset() != target || l.SegmentCount() != 1 {
				t.Fatalf("CompleteRetention: %d, %v; start %d (want %d), %d segments", n, err, l.StartOffset(), target, l.SegmentCount())
			}
			if _, err := l.Read(start, 1<<10); err == nil {
				t.Fatal("a retired offset is still readable")
			}
			if n, err := l.CompleteRetention(); n != 0 || err != nil || l.RetentionPending() {
				t.Fatalf("a second CompleteRetention: %d, %v", n, err)
			}
			mustInvariants(t, l)
		})
	}
}

// TestAsyncRetentionFailedFlush: a failed flush of the checkpoint (the temporary file's or
// the directory's) ends the pass: no later op starts, nothing retires, the error comes at
// CompleteRetention, no temporary file is left, and the next pass writes the checkpoint
// again.
func TestAsyncRetentionFailedFlush(t *testing.T) {
	seed := asyncSeed(t)
	for _, failDir := range []bool{false, true} {
		t.Run(fmt.Sprintf("dir=%v", failDir), func(t *testing.T) {
			dir := t.TempDir()
			fs := faultio.New(ring.Syscalls{})
			qw := &queuedWrites{fio: fs, rng: rand.New(rand.NewPCG(seed, 12))}
			hooked := 0
			l := retentionLog(t, dir, StoragePageCache, ring.Syscalls{}, qw, 3, &hooked)
			defer l.Close()
			segments := l.SegmentCount()
			if _, err := l.EnforceRetention(time.Now()); err != nil {
				t.Fatal(err)
			}
			qw.completeSome(2) // the temporary file's open and write
			if failDir {
				qw.completeSome(3) // its fsync, the rename, the directory's open
			}
			fs.Inject(faultio.Rule{Op: faultio.OpFsync, Errno: unix.EIO, Times: 1})
			qw.completeOne()
			if len(qw.q) != 0 {
				t.Fatalf("%d ops started after a failed fsync", len(qw.q))
			}
			if n, err := l.CompleteRetention(); err == nil || n != 0 || l.SegmentCount() != segments {
				t.Fatalf("after a failed flush: retired %d, err %v, %d of %d segments", n, err, l.SegmentCount(), segments)
			}
			if _, err := os.Stat(filepath.Join(dir, startOffsetFileName+tmpSuffix)); !os.IsNotExist(err) {
				t.Fatalf("temporary checkpoint left behind: %v", err)
			}
			if _, err := l.EnforceRetention(time.Now()); err != nil {
				t.Fatal(err)
			}
			qw.completeSome(6)
			if n, err := l.CompleteRetention(); err != nil || n != segments-1 {
				t.Fatalf("the retry: retired %d, %v", n, err)
			}
		})
	}
}

// TestAsyncRetentionWaiters: whatever writes or removes the checkpoint or changes the
// front of the log first waits for a pass in flight and completes it, so that no flush of
// it is left in flight and no late rename puts a stale checkpoint back: the checkpoint and
// the start offset after a reopen are the operation's.
func TestAsyncRetentionWaiters(t *testing.T) {
	seed := asyncSeed(t)
	type op struct {
		name string
		// run does the operation on l, whose pass in flight moves the start to target;
		// it returns the start offset a reopen must find.
		run func(l *Log, target int64) (int64, error)
	}
	ops := []op{
		{"DeleteRecordsBefore-above", func(l *Log, target int64) (int64, error) {
			_, err := l.DeleteRecordsBefore(target + 1)
			return target + 1, err
		}},
		{"DeleteRecordsBefore-below", func(l *Log, target int64) (int64, error) {
			_, err := l.DeleteRecordsBefore(l.StartOffset() + 1)
			return target, err
		}},
		{"TruncateTo-below-start", func(l *Log, target int64) (int64, error) {
			return 1, l.TruncateTo(1)
		}},
		{"TruncateTo-inside", func(l *Log, target int64) (int64, error) {
			return target, l.TruncateTo(target + 1)
		}},
		{"ResetTo", func(l *Log, target int64) (int64, error) {
			return 5000, l.ResetTo(5000)
		}},
		{"Close", func(l *Log, target int64) (int64, error) { return target, l.Close() }},
	}
	for _, mode := range storageModes {
		for i, o := range ops {
			t.Run(string(mode)+"/"+o.name, func(t *testing.T) {
				dir := t.TempDir()
				rng := rand.New(rand.NewPCG(seed, uint64(13+i)))
				qw := &queuedWrites{fio: ring.Syscalls{}, rng: rng}
				hooked := 0
				l := retentionLog(t, dir, mode, ring.Syscalls{}, qw, 3, &hooked)
				cfg := l.cfg
				target := l.active().baseOffset
				if _, err := l.EnforceRetention(time.Now()); err != nil {
					t.Fatal(err)
				}
				qw.completeSome(rng.IntN(4)) // some of the checkpoint's ops done
				if !l.RetentionPending() {
					t.Fatal("no pass in flight")
				}
				want, err := o.run(l, target)
				if err != nil {
					t.Fatal(err)
				}
				for _, x := range qw.q { // what it retired itself may still be unlinking
					if x.kind() != "unlink" || o.name == "Close" {
						t.Fatalf("%s returned with a %s in flight (%d ops queued)", o.name, x.kind(), len(qw.q))
					}
				}
				if l.RetentionPending() {
					t.Fatalf("%s returned with the pass pending", o.name)
				}
				if !l.closed {
					mustInvariants(t, l)
					l.Close()
				}
				r, _ := openLog(t, dir, cfg, ring.Syscalls{})
				defer r.Close()
				if r.StartOffset() != want {
					t.Fatalf("after %s and a reopen the log starts at %d, want %d", o.name, r.StartOffset(), want)
				}
			})
		}
	}
}

// TestAsyncRetentionCrash: the process dies (kill -9: files keep what reached them) or the
// machine loses power (faultio.CrashFS also takes back unsynced writes and directory
// changes no fsync covered) with retention passes in flight: the checkpoint's flushes
// queued, done or half done, its rename made or not, its segments retired or not. Recovery
// must keep every record from the start offset the log had (or the one the pass was moving
// to) up to what was written (kill -9) or synced (power loss), contiguous and intact.
func TestAsyncRetentionCrash(t *testing.T) {
	seed := asyncSeed(t)
	for _, mode := range storageModes {
		for _, powerLoss := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/powerloss=%v", mode, powerLoss), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(seed, 17))
				dir := t.TempDir()
				cfg := LogConfig{Storage: mode, SegmentBytes: 32 << 10, IndexIntervalBytes: 512,
					RetentionBytes: 64 << 10, RecycleSegments: -1, Logger: quietLogger}
				if mode == StorageDirect {
					cfg.RecycleSegments = 2
				}
				// Crashes with a flush in flight; with a pass not yet retired; with retired
				// segments' unlinks (or renames into the pool) in flight.
				inFlight, completed, retiring := 0, 0, 0
				for round := 0; round < 12 || (inFlight == 0 || completed == 0 || retiring == 0) && round < 60; round++ {
					fs := faultio.NewCrashFS(ring.Syscalls{})
					if err := fs.TrackDir(dir); err != nil {
						t.Fatal(err)
					}
					live := cfg
					live.ZeroFileIO = fs // the recycle pool's preparation renames and syncs through it, as the log's own work does
					l, _ := openLog(t, dir, live, fs)
					skipUnlessDirect(t, l, dir, mode)
					start := l.EndOffset()
					qw := &queuedWrites{fio: fs, rng: rng}
					l.SetAsyncRetention(qw, func() {})
					for i, n := 0, 5+rng.IntN(40); i < n; i++ {
						if _, err := appendCounted(t, l, rng); err != nil {
							t.Fatal(err)
						}
						switch rng.IntN(8) {
						case 0:
							if err := l.Sync(); err != nil {
								t.Fatal(err)
							}
						case 1, 2:
							if _, err := l.EnforceRetention(time.Now()); err != nil {
								t.Fatal(err)
							}
						case 3:
							qw.completeSome(1 + rng.IntN(2))
						case 5:
							// Run a pass's chain to its end (other ops complete on the way):
							// the crash may then find its checkpoint durable, not yet retired.
							for steps := 0; l.retention.inFlight() && len(qw.q) > 0 && steps < 100; steps++ {
								qw.completeOne()
							}
						case 4:
							if l.EndOffset() > l.StartOffset() && rng.IntN(4) == 0 {
								to := l.StartOffset() + rng.Int64N(l.EndOffset()-l.StartOffset())
								if _, err := l.DeleteRecordsBefore(to); err != nil {
									t.Fatal(err)
								}
							}
						}
						mustInvariants(t, l)
					}
					written, synced := l.EndOffset(), l.SyncedOffset()
					// A crash may find the pass's checkpoint durable: the log then starts at
					// its target.
					logStart := l.StartOffset()
					if l.RetentionPending() {
						logStart = l.retention.target
						if l.retention.inFlight() {
							inFlight++
						} else {
							completed++
						}
					}
					if l.FileJobsPending() > 0 {
						retiring++
					}
					crashAndVerify(t, l, qw, fs, powerLoss, cfg, round, written, synced, logStart, start)
				}
				// Retired segments' unlinks are queued on qw (SetAsyncRetention routes the log's
				// fileJobs to it); whether a round's crash finds one there is drawn by the round:
				// counted, not required. TestAsyncSnapshotCrash makes such a crash on purpose (a
				// pruned snapshot's unlink) and TestAsyncRetireOrder checks their order.
				if inFlight == 0 || completed == 0 {
					t.Fatalf("crashes with the checkpoint's flushes in flight %d, with a durable checkpoint not yet retired %d: the test tested nothing",
						inFlight, completed)
				}
				t.Logf("crashes with the checkpoint's flushes in flight %d, with its segments not yet retired %d, with retired segments' unlinks in flight %d",
					inFlight, completed, retiring)
			})
		}
	}
}

// TestAsyncRetentionBesideCompaction: compaction does not wait for a retention pass in flight
// (cleanup.policy compact,delete): a cleaning pass that rewrites and swaps segments below
// the pass's checkpoint meanwhile leaves a valid log, the pass then retires exactly the
// segments below its checkpoint (the swapped ones included), and a reopen starts there.
func TestAsyncRetentionBesideCompaction(t *testing.T) {
	rng := compactRand(t, 9)
	dir := t.TempDir()
	cfg := compactConfig()
	cfg.CleanupPolicy, cfg.RetentionBytes, cfg.RecycleSegments = CleanupCompactDelete, 8<<10, -1
	l, _ := openLog(t, dir, cfg, ring.Syscalls{})
	qw := &queuedWrites{fio: ring.Syscalls{}, rng: rng}
	l.SetAsyncRetention(qw, func() {})
	appendKeyed(t, l, rng, compactModel{}, 300, 20, 0, batch.CodecNone, 1_700_000_000_000)
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	if _, err := l.EnforceRetention(time.Now()); err != nil {
		t.Fatal(err)
	}
	if !l.RetentionPending() {
		t.Fatal("no retention pass in flight")
	}
	target, segments := l.retention.target, l.SegmentCount()
	qw.completeSome(rng.IntN(4))
	p := cleanFully(t, l, NewOffsetMap(OffsetMapBytesMin), time.Now())
	if p.SegmentsCleaned == 0 {
		t.Fatal("the cleaning pass swapped no segment: the test tested nothing")
	}
	mustInvariants(t, l)
	qw.completeSome(len(qw.q) + 6) // the checkpoint's six ops run one after the other
	n, err := l.CompleteRetention()
	if err != nil {
		t.Fatal(err)
	}
	if l.StartOffset() != target || l.segments[0].baseOffset != target || n != segments-l.SegmentCount() || n == 0 {
		t.Fatalf("retired %d of %d segments, start %d, first segment %d; want both at the checkpoint %d", n, segments, l.StartOffset(), l.segments[0].baseOffset, target)
	}
	mustInvariants(t, l)
	readSurvivors(t, l)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	r, _ := openLog(t, dir, cfg, ring.Syscalls{})
	defer r.Close()
	if r.StartOffset() != target {
		t.Fatalf("reopened at %d, want %d", r.StartOffset(), target)
	}
	readSurvivors(t, r)
}

// refusedRenames is queuedWrites without IORING_OP_RENAMEAT and IORING_OP_UNLINKAT (Linux
// before 5.11).
type refusedRenames struct{ *queuedWrites }

func (refusedRenames) StartRename(string, string, func(int, error)) error {
	return fmt.Errorf("rename: %w", ring.ErrUnsupported)
}

func (refusedRenames) StartUnlink(string, func(int, error)) error {
	return fmt.Errorf("unlink: %w", ring.ErrUnsupported)
}

// TestAsyncRetentionRenameRefused: where the ring cannot rename, the pass renames the
// checkpoint itself between the two flushes and completes as usual; where it cannot
// unlink, the retired segments' files are unlinked on the owner's thread.
func TestAsyncRetentionRenameRefused(t *testing.T) {
	seed := asyncSeed(t)
	dir := t.TempDir()
	qw := &queuedWrites{fio: ring.Syscalls{}, rng: rand.New(rand.NewPCG(seed, 19))}
	hooked := 0
	l := retentionLog(t, dir, StoragePageCache, ring.Syscalls{}, qw, 3, &hooked)
	defer l.Close()
	l.SetAsyncRetention(refusedRenames{qw}, func() { hooked++ })
	segments, target := l.SegmentCount(), l.active().baseOffset
	if _, err := l.EnforceRetention(time.Now()); err != nil {
		t.Fatal(err)
	}
	qw.completeSome(3) // the open, the write and the file's fsync: renamed inline, the directory's open starts
	if got, ok := readCheckpoint(t, dir); !ok || got != target || len(qw.q) != 1 || hooked != 0 {
		t.Fatalf("checkpoint %d %v (want %d), %d ops queued, hook %d", got, ok, target, len(qw.q), hooked)
	}
	qw.completeSome(2)
	if n, err := l.CompleteRetention(); err != nil || n != segments-1 || hooked != 1 {
		t.Fatalf("CompleteRetention: %d, %v, hook %d", n, err, hooked)
	}
	if len(qw.q) != 0 || l.FileJobsPending() != 0 {
		t.Fatalf("%d ops queued, %d unlink jobs pending after retiring with the unlinks refused", len(qw.q), l.FileJobsPending())
	}
	if left := segmentFilesBelow(t, dir, target); len(left) != 0 {
		t.Fatalf("retired segments' files left: %v", left)
	}
}

// segmentFilesBelow lists the segment files (.log, .index, .timeindex, under any leftover
// suffix) in dir whose base offset is below offset.
func segmentFilesBelow(t *testing.T, dir string, offset int64) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		stem, _ := leftoverStem(e.Name())
		if base, _, ok := parseSegmentName(stem); ok && base < offset {
			names = append(names, e.Name())
		}
	}
	return names
}

// TestRetentionStartsAtCheckpointBesideBusySegment: a pass whose checkpoint is durable moves
// the log start offset to the checkpoint even when a segment below it cannot retire yet (its
// roll's batch map write in flight): readers never see records a crash would take back, and
// the next EnforceRetention retires the leftover without a new checkpoint. Before, the start
// offset stayed at the busy segment (TestAsyncRetentionCrash seed 982 failed in CI that way:
// DeleteRecordsBefore completed a pass that retired one segment of two, and a power loss
// then recovered the log from the checkpoint, past the start it had reported).
func TestRetentionStartsAtCheckpointBesideBusySegment(t *testing.T) {
	rng := rand.New(rand.NewPCG(asyncSeed(t), 23))
	dir := t.TempDir()
	cfg := LogConfig{Storage: StorageDirect, SegmentBytes: 32 << 10, IndexIntervalBytes: 512,
		RetentionBytes: 1, RecycleSegments: 2, Logger: quietLogger}
	l, _ := openLog(t, dir, cfg, ring.Syscalls{})
	if l.Mode() != StorageDirect {
		l.Close()
		skipUnlessDirect(t, l, dir, StorageDirect)
	}
	qw := &queuedWrites{fio: ring.Syscalls{}, rng: rng}
	l.SetAsyncRetention(qw, func() {})
	all := func(queuedWrite) bool { return true }
	var busy *segment
	notMap := func(x queuedWrite) bool { // the busy segment's batch map write waits at its open
		return x.open == nil || busy == nil ||
			!strings.Contains(filepath.Base(x.open.path), batchMapName(batchMapOwnPrefix, busy.inode))
	}
	for l.SegmentCount() < 3 {
		if _, err := appendCounted(t, l, rng); err != nil {
			t.Fatal(err)
		}
		qw.completeWhere(1000, all)
	}
	for n := l.SegmentCount(); l.SegmentCount() == n; { // a roll whose batch map is not written yet
		if _, err := appendCounted(t, l, rng); err != nil {
			t.Fatal(err)
		}
	}
	// Only the last roll's map stays in flight (an append may have rolled twice, a
	// retention pass beside it: seed 30800 left two maps in flight).
	busy = l.segments[l.SegmentCount()-2]
	qw.completeWhere(1000, notMap)
	for _, s := range l.segments {
		if s.mapWriting != (s == busy) {
			t.Fatalf("segment %d: map in flight %v; want only the roll's, %d (%d ops queued)", s.baseOffset, s.mapWriting, busy.baseOffset, len(qw.q))
		}
	}
	target, below := l.active().baseOffset, l.SegmentCount()-2
	if _, err := l.EnforceRetention(time.Now()); err != nil {
		t.Fatal(err)
	}
	qw.completeWhere(1000, notMap) // the checkpoint's ops
	if l.retention.phase != retentionCompleted {
		t.Fatalf("the checkpoint is not durable (%d ops queued)", len(qw.q))
	}
	n, err := l.CompleteRetention()
	if err != nil {
		t.Fatal(err)
	}
	if l.StartOffset() != target || l.segments[0] != busy || n != below {
		t.Fatalf("retired %d, start %d, first segment %d; want %d retired, start at the checkpoint %d, the busy segment %d kept",
			n, l.StartOffset(), l.segments[0].baseOffset, below, target, busy.baseOffset)
	}
	mustInvariants(t, l)
	if _, err := l.Read(busy.baseOffset, 1<<20); !errors.Is(err, ErrOffsetOutOfRange) {
		t.Fatalf("read below the start offset: %v, want ErrOffsetOutOfRange", err)
	}
	qw.completeWhere(1000, all) // the map written
	if n, err := l.EnforceRetention(time.Now()); err != nil || n != 1 || l.SegmentCount() != 1 {
		t.Fatalf("EnforceRetention retired %d (%v), %d segments left; want the leftover retired", n, err, l.SegmentCount())
	}
	qw.completeWhere(1000, all)
	if l.StartOffset() != target || l.RetentionPending() {
		t.Fatalf("start %d, pass pending %v; want %d and no new pass", l.StartOffset(), l.RetentionPending(), target)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	r, _ := openLog(t, dir, cfg, ring.Syscalls{})
	defer r.Close()
	if r.StartOffset() != target {
		t.Fatalf("reopened at %d, want %d", r.StartOffset(), target)
	}
}
