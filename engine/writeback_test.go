package engine

import (
	"os"
	"testing"

	"github.com/ringlog/ringlog/ring"
)

// idleWriteback is a Writeback whose goroutine is not running: its requests stay in the
// queue for the test to read.
func idleWriteback(every int64) *Writeback {
	return &Writeback{every: every, reqs: make(chan writebackRequest, writebackQueue), quit: make(chan struct{})}
}

func drainRequests(w *Writeback) []writebackRequest {
	var out []writebackRequest
	for {
		select {
		case r := <-w.reqs:
			out = append(out, r)
		default:
			return out
		}
	}
}

// TestWritebackRequestsFollowAppends: page-cache appends (plain, staged, replicated)
// request write-back in steps of at least Every bytes, contiguous within each segment file
// and inside what was written; direct mode (already on the disk) requests nothing.
func TestWritebackRequestsFollowAppends(t *testing.T) {
	forEachBackend(t, func(t *testing.T, fio ring.FileIO, mode StorageMode) {
		const every = 8 << 10
		w := idleWriteback(every)
		cfg := testConfig(mode)
		cfg.Writeback = w
		l, _ := openLog(t, t.TempDir(), cfg, fio)
		defer l.Close()
		l.SetStagedWrites(func() {}) // false (no staging) in direct mode
		appendSome(t, l, 0, 300, 1000)
		for seq := 300; seq < 400; seq++ {
			if _, err := l.AppendBatchesStaged([][]byte{makeBatch(t, seq, 2, 200, 1000)}); err != nil {
				t.Fatal(err)
			}
			if seq%7 == 0 {
				if err := l.WriteStaged(); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := l.WriteStaged(); err != nil {
			t.Fatal(err)
		}
		reqs := drainRequests(w)
		if mode == StorageDirect {
			if len(reqs) != 0 {
				t.Fatalf("direct mode requested %d write-backs", len(reqs))
			}
			return
		}
		if len(reqs) < 10 {
			t.Fatalf("%d write-back requests for %d bytes in %d-byte steps", len(reqs), l.Size(), every)
		}
		next := map[*os.File]int64{}
		for i, r := range reqs {
			if r.n < every {
				t.Fatalf("request %d: %d bytes, want >= %d", i, r.n, every)
			}
			if at, ok := next[r.f]; ok && r.off != at {
				t.Fatalf("request %d at %d, the file's previous request ended at %d", i, r.off, at)
			}
			next[r.f] = r.off + r.n
			fi, err := r.f.Stat()
			if err != nil {
				t.Fatal(err)
			}
			if r.off+r.n > fi.Size() {
				t.Fatalf("request %d [%d,%d) past the file's %d bytes", i, r.off, r.off+r.n, fi.Size())
			}
		}
		if len(next) < 3 {
			t.Fatalf("requests in %d segment files, want every segment's (rolls at 64 KiB)", len(next))
		}
	})
}

// TestWritebackRunning: a running Writeback beside a log changes nothing the log reads
// back or recovers, and a log appending after Close neither blocks nor panics.
func TestWritebackRunning(t *testing.T) {
	w := NewWriteback(4 << 10)
	cfg := testConfig(StoragePageCache)
	cfg.Writeback = w
	dir := t.TempDir()
	l, _ := openLog(t, dir, cfg, ring.Syscalls{})
	want := appendSome(t, l, 0, 200, 1000)
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	l, rep := openLog(t, dir, cfg, ring.Syscalls{})
	defer l.Close()
	if rep.DroppedBytes != 0 || l.Size() != int64(len(want)) {
		t.Fatalf("reopened: report %+v size %d, want %d", rep, l.Size(), len(want))
	}
	// After Close, requests queue and then drop: (writebackQueue+1) × 4 KiB of appends.
	started, dropped := w.Stats()
	for seq := 200; dropped == 0 && seq < 200+100*writebackQueue; seq++ {
		appendSome(t, l, seq, 1, 1000)
		_, dropped = w.Stats()
	}
	if dropped == 0 {
		t.Fatalf("started %d dropped %d: a closed Writeback's full queue must drop", started, dropped)
	}
	if NewWriteback(0) != nil || (*Writeback)(nil).Every() != 0 {
		t.Fatal("every 0 must be off (nil)")
	}
}
