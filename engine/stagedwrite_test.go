package engine

import (
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/ringlog/ringlog/engine/faultio"
	"github.com/ringlog/ringlog/ring"
	"golang.org/x/sys/unix"
)

// stagedLog opens a page-cache log with staging on, over a counting FileIO; written counts
// the hook's calls.
func stagedLog(t *testing.T, dir string, cfg LogConfig) (*Log, *faultio.FileIO, *int) {
	t.Helper()
	fio := faultio.New(ring.Syscalls{})
	l, _ := openLog(t, dir, cfg, fio)
	written := new(int)
	if !l.SetStagedWrites(func() { *written++ }) {
		t.Fatal("SetStagedWrites refused a page-cache log")
	}
	return l, fio, written
}

// closeAndReread closes l and checks that the reopened log (recovery included) holds want.
func closeAndReread(t *testing.T, l *Log, dir string, cfg LogConfig, want []byte) {
	t.Helper()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l2, _ := openLog(t, dir, cfg, ring.Syscalls{})
	defer l2.Close()
	mustEqualBytes(t, "after reopen", readAll(t, l2, 1<<20), want)
}

// TestStagedAppendsOneWritePerTurn: several staged appends are invisible to readers and
// syncs until WriteStaged, which writes them with one pwritev; what is read back (and what
// recovery finds after a reopen) is every batch, in order, with the offsets handed out.
func TestStagedAppendsOneWritePerTurn(t *testing.T) {
	rng := rand.New(rand.NewPCG(modelSeed(t), 1))
	dir := t.TempDir()
	cfg := testConfig(StoragePageCache)
	cfg.SegmentBytes = 1 << 20
	l, fio, written := stagedLog(t, dir, cfg)
	var want []byte
	seq := 0
	for turn := 0; turn < 20; turn++ {
		end := l.EndOffset()
		calls := fio.Calls(faultio.OpPwritev)
		appends := 1 + rng.IntN(6)
		for i := 0; i < appends; i++ {
			b := makeBatch(t, seq, 1+rng.IntN(8), 10+rng.IntN(300), int64(seq))
			seq++
			next := l.StagedEndOffset()
			res, err := l.AppendBatchesStaged([][]byte{b})
			if err != nil {
				t.Fatalf("turn %d: staged append: %v", turn, err)
			}
			if res.FirstOffset != next {
				t.Fatalf("turn %d: first offset %d, want %d", turn, res.FirstOffset, next)
			}
			want = append(want, b...) // the log rewrote b's base offset in place
		}
		if l.EndOffset() != end || !l.WritesPending() {
			t.Fatalf("turn %d: end offset moved to %d (was %d) before the write", turn, l.EndOffset(), end)
		}
		if t2, ok, err := l.BeginSync(); err != nil {
			t.Fatal(err)
		} else if ok {
			for _, c := range t2.covers {
				if c.s == l.active() && c.nextOffset > end {
					t.Fatalf("turn %d: a sync covers staged offsets up to %d (written %d)", turn, c.nextOffset, end)
				}
			}
			l.EndSync(t2, nil)
		}
		// A read of the log as written walks headers next to the staged bytes.
		if end > l.StartOffset() {
			if _, err := l.Read(l.StartOffset(), 1<<20); err != nil {
				t.Fatalf("turn %d: read: %v", turn, err)
			}
		}
		before := *written
		if err := l.WriteStaged(); err != nil {
			t.Fatal(err)
		}
		if got := fio.Calls(faultio.OpPwritev) - calls; got != 1 {
			t.Fatalf("turn %d: %d appends took %d pwritev calls, want 1", turn, appends, got)
		}
		if *written != before+1 || l.EndOffset() != l.StagedEndOffset() || l.WritesPending() {
			t.Fatalf("turn %d: after WriteStaged: hook %d times, end %d, staged end %d", turn, *written-before, l.EndOffset(), l.StagedEndOffset())
		}
	}
	mustEqualBytes(t, "read back", readAll(t, l, 1<<20), want)
	closeAndReread(t, l, dir, cfg, want)
}

// TestStagedAppendsMixedWithWrites: an unstaged append, a roll, Sync and Close each write
// what is staged first, so the file keeps offset order; the hook hears of each.
func TestStagedAppendsMixedWithWrites(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(StoragePageCache)
	cfg.SegmentBytes = 8 << 10 // rolls every few batches
	l, _, written := stagedLog(t, dir, cfg)
	var want []byte
	for i := 0; i < 60; i++ {
		b := makeBatch(t, i, 3, 500, int64(i))
		var err error
		switch i % 5 {
		case 3:
			_, err = l.AppendBatches([][]byte{b})
		case 4:
			if i%10 == 4 {
				err = l.Sync()
			}
			if err == nil {
				_, err = l.AppendBatchesStaged([][]byte{b})
			}
		default:
			_, err = l.AppendBatchesStaged([][]byte{b})
		}
		if err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
		want = append(want, b...)
	}
	if len(l.segments) < 3 {
		t.Fatalf("only %d segments: the test wants rolls between staged appends", len(l.segments))
	}
	if *written == 0 {
		t.Fatal("the written hook never ran")
	}
	closeAndReread(t, l, dir, cfg, want)
}

// TestStagedWriteFailureRollsBack: a failed write of staged batches undoes every append
// staged since the last write (end offset, file, producers), reports the error once, and
// the next append succeeds at the offsets the failed ones had.
func TestStagedWriteFailureRollsBack(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(StoragePageCache)
	l, fio, written := stagedLog(t, dir, cfg)
	first := makeBatch(t, 0, 2, 100, 0)
	if _, err := l.AppendBatchesStaged([][]byte{first}); err != nil {
		t.Fatal(err)
	}
	if err := l.WriteStaged(); err != nil {
		t.Fatal(err)
	}
	end := l.EndOffset()
	fio.Inject(faultio.Rule{Op: faultio.OpPwritev, Errno: unix.EIO, Times: 1})
	for i := 1; i <= 3; i++ {
		if _, err := l.AppendBatchesStaged([][]byte{makeBatch(t, i, 2, 100, int64(i))}); err != nil {
			t.Fatal(err)
		}
	}
	before := *written
	err := l.WriteStaged()
	if !errors.Is(err, ErrStorageWrite) || !errors.Is(err, unix.EIO) {
		t.Fatalf("WriteStaged: %v, want ErrStorageWrite wrapping EIO", err)
	}
	if *written != before+1 {
		t.Fatal("the hook did not hear of the failure")
	}
	if got := l.TakeStagedError(); !errors.Is(got, unix.EIO) || l.TakeStagedError() != nil {
		t.Fatalf("TakeStagedError: %v, then not nil", got)
	}
	if l.Err() != nil || l.EndOffset() != end || l.StagedEndOffset() != end {
		t.Fatalf("after the failed write: log error %v, end %d, staged end %d, want %d", l.Err(), l.EndOffset(), l.StagedEndOffset(), end)
	}
	again := makeBatch(t, 9, 3, 50, 9)
	res, err := l.AppendBatchesStaged([][]byte{again})
	if err != nil || res.FirstOffset != end {
		t.Fatalf("append after the failure: first offset %d, %v; want %d", res.FirstOffset, err, end)
	}
	if err := l.WriteStaged(); err != nil {
		t.Fatal(err)
	}
	mustEqualBytes(t, "read back", readAll(t, l, 1<<20), append(append([]byte(nil), first...), again...))
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkStagedAppend: 16 produces of one 16-record 1 KiB batch per partition and turn,
// written at once (each its own pwritev) or staged (one pwritev per turn).
func BenchmarkStagedAppend(b *testing.B) {
	for _, staged := range []bool{false, true} {
		name := "each"
		if staged {
			name = "staged"
		}
		b.Run(name, func(b *testing.B) {
			cfg := testConfig(StoragePageCache)
			cfg.SegmentBytes = 1 << 30
			l, _ := openLog(b, b.TempDir(), cfg, ring.Syscalls{})
			defer l.Close()
			if staged {
				l.SetStagedWrites(nil)
			}
			const perTurn = 16
			batches := make([][]byte, perTurn)
			for i := range batches {
				batches[i] = makeBatch(b, i, 16, 1024, 0)
			}
			one := make([][]byte, 1)
			b.SetBytes(int64(perTurn * len(batches[0])))
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				for _, bt := range batches {
					one[0] = bt
					if _, err := l.AppendBatchesStaged(one); err != nil {
						b.Fatal(err)
					}
				}
				if err := l.WriteStaged(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
