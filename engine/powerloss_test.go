package engine

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ringlog/ringlog/engine/batch"
	"github.com/ringlog/ringlog/engine/faultio"
	"github.com/ringlog/ringlog/ring"
)

const powerLossRounds = 24

// TestPowerLossKeepsSyncedData appends, syncs at random points, rolls segments and runs
// retention and DeleteRecordsBefore, then simulates a power loss (faultio.CrashFS undoes,
// reorders and tears unsynced writes of the logs and their indexes, and takes back directory
// entries — new segments, retirements, checkpoint renames — that no directory fsync covered)
// and reopens: recovery must succeed, everything from the start offset at the crash to the
// last SyncedOffset must be there and intact, and the log must be one contiguous run of valid
// batches.
//
// The "+prealloc" cases keep zero-filled space ahead of the log's end (PreallocateBytes,
// zeros written through the CrashFS too, so a power loss can take them back or tear them).
// The "+recycle" cases keep retired segment files for new segments (RecycleSegments, the
// direct-mode default), so the active segment often holds an old segment's valid batches
// past its end, and a power loss can bring old bytes back where new writes were lost.
func TestPowerLossKeepsSyncedData(t *testing.T) {
	type powerLossCase struct {
		name              string
		mode              StorageMode
		prealloc, recycle bool
	}
	var cases []powerLossCase
	for _, mode := range storageModes {
		cases = append(cases, powerLossCase{string(mode), mode, false, false},
			powerLossCase{string(mode) + "+prealloc", mode, true, false},
			powerLossCase{string(mode) + "+recycle", mode, false, true})
	}
	for _, tc := range cases {
		mode := tc.mode
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			rng := rand.New(rand.NewPCG(powerLossSeed(t), 3))
			// Write-back every 1 KiB (writeback.go) runs throughout: a hint to the real
			// kernel that must change nothing the crash model counts as synced.
			wb := NewWriteback(1 << 10)
			defer wb.Close()
			cfg := LogConfig{Storage: mode, SegmentBytes: 4 << 10, IndexIntervalBytes: 512,
				DirectChunkBytes: 8 << 10, RetentionBytes: 24 << 10, Logger: quietLogger, Writeback: wb}
			if tc.prealloc {
				cfg.SegmentBytes, cfg.PreallocateBytes = 16<<10, 8<<10
			}
			cfg.RecycleSegments = -1
			if tc.recycle {
				cfg.RecycleSegments = 2
			}
			var lost, kept int64
			var undone int
			jobsBefore, zeroTails := ZeroAheadStats().Jobs, 0
			reusedBefore, staleAtCrash := RecycleStats().Reused, 0
			for round := 0; round < powerLossRounds; round++ {
				fs := faultio.NewCrashFS(ring.Syscalls{})
				if err := fs.TrackDir(dir); err != nil {
					t.Fatal(err)
				}
				live := cfg
				live.ZeroFileIO = fs // zeroing (prealloc) and pool preparation (recycle) sync through it
				l, _ := openLog(t, dir, live, fs)
				start := l.EndOffset()
				synced := powerLossWork(t, l, rng)
				end, logStart := l.EndOffset(), l.StartOffset()
				if l.active().stale {
					staleAtCrash++
				}
				l.closeFiles() // the process dies: nothing more is written or synced
				if err := fs.Crash(rng); err != nil {
					t.Fatal(err)
				}
				_, u := fs.NamespaceStats()
				undone += u
				got := verifyPowerLoss(t, dir, cfg, round, synced, logStart, synced > start)
				if lastRecovery.ZeroTailBytes > 0 {
					zeroTails++
				}
				if got < start {
					t.Fatalf("round %d: log shrank below its start %d to %d", round, start, got)
				}
				lost += end - got
				kept += got - start
			}
			t.Logf("unsynced records lost %d, appended records kept %d, directory changes undone %d", lost, kept, undone)
			if lost == 0 {
				t.Fatal("no unsynced record was ever lost: the crash simulation did nothing")
			}
			if undone == 0 {
				t.Fatal("no directory change was ever undone: the namespace model did nothing")
			}
			if reused := RecycleStats().Reused - reusedBefore; tc.recycle {
				t.Logf("segments that took a retired file %d, crashes with old bytes past the end %d", reused, staleAtCrash)
				if reused == 0 || staleAtCrash == 0 {
					t.Fatal("recycling was never exercised at a crash")
				}
			}
			if jobs := ZeroAheadStats().Jobs - jobsBefore; tc.prealloc {
				t.Logf("zeroing jobs %d, recoveries that kept a zero tail %d", jobs, zeroTails)
				if jobs == 0 || zeroTails == 0 {
					t.Fatal("the preallocated space was never exercised")
				}
			}
		})
	}
}

// powerLossWork appends batches whose records encode their offsets, syncing now and then.
func powerLossWork(t *testing.T, l *Log, rng *rand.Rand) int64 {
	b := batch.NewBuilder(batch.BuilderOptions{})
	for i, n := 0, 5+rng.IntN(40); i < n; i++ {
		groups := 1 + rng.IntN(3)
		var batches [][]byte
		next := l.EndOffset()
		for g := 0; g < groups; g++ {
			batches = append(batches, crashBatch(t, b, &next, 1+rng.IntN(4)))
		}
		if _, err := l.AppendBatches(batches); err != nil {
			t.Fatal(err)
		}
		if rng.IntN(2) == 0 { // see settlePoolSometimes; no zeroing without prealloc
			l.zeroJobs.Wait()
		}
		switch rng.IntN(8) {
		case 0, 1:
			if err := l.Sync(); err != nil {
				t.Fatal(err)
			}
		case 2:
			if _, err := l.EnforceRetention(time.Now()); err != nil {
				t.Fatal(err)
			}
			settlePoolSometimes(l, rng)
		case 3:
			if l.EndOffset() > l.StartOffset() && rng.IntN(3) == 0 {
				to := l.StartOffset() + rng.Int64N(l.EndOffset()-l.StartOffset())
				if _, err := l.DeleteRecordsBefore(to); err != nil {
					t.Fatal(err)
				}
				settlePoolSometimes(l, rng)
			}
		}
	}
	return l.SyncedOffset()
}

// settlePoolSometimes waits, half the time, for the pool preparations a retirement started
// (recycle.go, in the background), so that the next roll takes a recycled file whatever the
// scheduling; the other half a roll may find them still in preparation and create a file.
// Without it the recycle case depended on the scheduler: with GOMAXPROCS=1 on a tmpfs the
// test's goroutine never yielded to a preparation before Close, so no segment ever took a
// retired file (10 of 10 runs failed "recycling was never exercised at a crash").
// powerLossWork waits for the zeroing goroutines (prealloc.go) after half the appends for
// the same reason: with GOMAXPROCS=1 the prealloc cases kept a zero tail in as few as 1 of
// 24 recoveries (0 fails the test), 5 or more with GOMAXPROCS 4 and 8.
func settlePoolSometimes(l *Log, rng *rand.Rand) {
	if rng.IntN(2) == 0 { // no preparations without recycling: a no-op
		l.settlePool()
	}
}

// crashBatch builds a batch of n records from offset *next on whose values encode their
// offsets (crashValue), advancing *next.
func crashBatch(t *testing.T, b *batch.Builder, next *int64, n int) []byte {
	t.Helper()
	b.Reset()
	for ; n > 0; n-- {
		b.Append(*next, nil, crashValue(*next), nil)
		*next++
	}
	bb, err := b.Build(nil)
	if err != nil {
		t.Fatal(err)
	}
	return bb
}

// lastRecovery is the report of verifyPowerLoss's last reopen (tests run it serially).
var lastRecovery RecoveryReport

// errTornHeaderOverRecycled: recovery accepted a batch whose header (base offset, outside
// the batch CRC) is new but whose CRC-covered body is an older batch's, left in a recycled
// file at the same position: a write torn within the header's first 17 bytes over an older
// batch of the same length. Seen 1 run in about 240 of TestPowerLossKeepsSyncedData/
// page-cache+recycle under load before batch maps (batchmap.go) guarded recovery against it;
// named apart from other mismatches so that a regression says what it is.
var errTornHeaderOverRecycled = errors.New("a new batch header over an older batch's body in a recycled file")

// staleCrashValue reports whether v is crashValue of an offset below offset, and which.
func staleCrashValue(v []byte, offset int64) (int64, bool) {
	var old int64
	if _, err := fmt.Sscanf(string(v), "offset=%d;", &old); err != nil || old >= offset || old < 0 {
		return 0, false
	}
	return old, bytes.Equal(v, crashValue(old))
}

func verifyPowerLoss(t *testing.T, dir string, cfg LogConfig, round int, synced, logStart int64, syncedSinceOpen bool) int64 {
	t.Helper()
	l, rep, err := OpenLog(dir, cfg, ring.Syscalls{})
	if err != nil {
		t.Fatalf("round %d: reopen: %v", round, err)
	}
	defer l.Close()
	lastRecovery = rep
	if rep.CleanShutdown && syncedSinceOpen { // before the first sync the marker's removal may be undone
		t.Fatalf("round %d: a crashed log reported a clean shutdown", round)
	}
	if l.EndOffset() < synced {
		t.Fatalf("round %d: log ends at %d, synced was %d (report %+v)", round, l.EndOffset(), synced, rep)
	}
	if l.StartOffset() > logStart {
		t.Fatalf("round %d: log starts at %d, it started at %d before the crash (report %+v)", round, l.StartOffset(), logStart, rep)
	}
	next := l.StartOffset()
	for data := readAll(t, l, 1<<20); len(data) > 0; {
		h, err := validateFirst(data)
		if err != nil {
			t.Fatalf("round %d: batch at %d: %v", round, next, err)
		}
		if next == l.StartOffset() && h.BaseOffset < next && h.LastOffset() >= next {
			next = h.BaseOffset // the start offset is inside the first batch (DeleteRecordsBefore)
		}
		err = batch.Decode(data[:h.Size()], func(offset, ts int64, r *batch.Record) error {
			if offset != next || !bytes.Equal(r.Value, crashValue(offset)) {
				if old, ok := staleCrashValue(r.Value, offset); ok && offset == next && cfg.RecycleSegments > 0 {
					return fmt.Errorf("%w: record at %d holds the record of offset %d", errTornHeaderOverRecycled, offset, old)
				}
				return fmt.Errorf("record at %d (want %d): %q", offset, next, r.Value)
			}
			next++
			return nil
		})
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		data = data[h.Size():]
	}
	if next != l.EndOffset() {
		t.Fatalf("round %d: records end at %d, log end %d", round, next, l.EndOffset())
	}
	return l.EndOffset()
}

// TestStaleCrashValue: verifyPowerLoss's naming of errTornHeaderOverRecycled recognises
// exactly an older offset's record.
func TestStaleCrashValue(t *testing.T) {
	if old, ok := staleCrashValue(crashValue(2108), 2287); !ok || old != 2108 {
		t.Fatalf("older record: %d %v", old, ok)
	}
	for _, v := range [][]byte{crashValue(2287), crashValue(2300), []byte("offset=2108;zz"), []byte("garbage")} {
		if old, ok := staleCrashValue(v, 2287); ok {
			t.Fatalf("%q read as the record of %d", v, old)
		}
	}
}
