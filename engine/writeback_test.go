package engine

import (
	"os"
	"testing"
	"time"

	"github.com/ringlog/ringlog/ring"
)

// idleWriteback is a Writeback whose goroutine is not running: its requests stay in the
// queue for the test to read.
func idleWriteback(every int64) *Writeback {
	return newWriteback(every, nil)
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
		dir := t.TempDir()
		l, _ := openLog(t, dir, cfg, fio)
		defer l.Close()
		skipUnlessDirect(t, l, dir, mode)
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

// TestWritebackWakesOncePerPoll: appends do not wake the write-back goroutine per request.
// Only a request that finds it idle wakes it; while busy it takes what queued at each poll
// tick (injected here), merges each file's contiguous ranges into one sync_file_range, and
// goes idle after a tick that finds nothing; half a queue of requests wakes it before its
// tick. A goroutine woken per request (the design
// before session 11: ≈ 280 futex wake-ups a second on the append path under
// produce-only-1kib) fails the wake-up count.
func TestWritebackWakesOncePerPoll(t *testing.T) {
	const every = 4 << 10
	ticks := make(chan time.Time)
	events := make(chan string, 4*writebackQueue) // never blocks the goroutine
	w := newWriteback(every, func() <-chan time.Time { return ticks })
	w.served = func() { events <- "served" }
	w.idle = func() { events <- "idle" }
	w.start()
	defer w.Close()
	expect := func(want string) {
		t.Helper()
		if got := <-events; got != want {
			t.Fatalf("write-back goroutine %s, want %s", got, want)
		}
	}
	cfg := testConfig(StoragePageCache) // rolls at 64 KiB: about 12 requests per segment
	cfg.Writeback = w
	l, _ := openLog(t, t.TempDir(), cfg, ring.Syscalls{})
	defer l.Close()
	appendOne := func(seq int) { // one batch of > every bytes: one request
		t.Helper()
		if _, err := l.Append(makeBatch(t, seq, 5, 1000, 1000)); err != nil {
			t.Fatal(err)
		}
	}

	expect("idle")
	appendOne(0) // wakes the idle goroutine
	expect("served")
	const queued = 100 // fewer than writebackQueue: none dropped
	for seq := 1; seq <= queued; seq++ {
		appendOne(seq) // queued behind the next tick, no wake-up
	}
	tick := func() { // a goroutine woken by a request would report before taking the tick
		t.Helper()
		select {
		case ticks <- time.Time{}:
		case ev := <-events:
			t.Fatalf("write-back goroutine %s before its poll tick: a request woke it", ev)
		}
	}
	tick()
	expect("served")
	started, dropped := w.Stats()
	if wakes := w.Wakeups(); wakes != 1 || dropped != 0 {
		t.Fatalf("%d requests woke the goroutine %d times (%d dropped), want once", 1+queued, wakes, dropped)
	}
	// 100 requests over about 9 segment files, each file's run merged into one call.
	if started < 2 || started > 1+queued/5 {
		t.Fatalf("%d sync_file_range calls for %d requests in about %d files", started, 1+queued, queued*5*1000/(64<<10))
	}
	tick() // nothing queued: idle again
	expect("idle")
	appendOne(queued + 1)
	expect("served")
	if wakes := w.Wakeups(); wakes != 2 {
		t.Fatalf("after an idle spell, %d wake-ups, want 2", wakes)
	}
	// Busy again: the request that fills half the queue wakes it without a tick.
	seq := queued + 2
	for ; seq < queued+2+writebackKickQueued; seq++ {
		appendOne(seq)
	}
	expect("served")
	if wakes := w.Wakeups(); wakes != 3 {
		t.Fatalf("%d requests queued while busy: %d wake-ups, want 3 (one kick)", writebackKickQueued, wakes)
	}
	tick()
	expect("idle")
}

// TestWritebackServeMerges: serve joins a file's contiguous requests, keeps gaps and other
// files apart, and holds no file once done.
func TestWritebackServeMerges(t *testing.T) {
	dir := t.TempDir()
	open := func(name string) *os.File {
		f, err := os.Create(dir + "/" + name)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		if err := f.Truncate(1 << 20); err != nil {
			t.Fatal(err)
		}
		return f
	}
	a, b := open("a"), open("b")
	w := idleWriteback(1)
	batch := []writebackRequest{{a, 0, 10}, {b, 0, 5}, {a, 10, 20}, {a, 40, 10}, {b, 5, 5}, {a, 30, 10}}
	w.serve(batch)
	// a's [0,10), [10,20) and [30,40) join in arrival order; [40,50) arrived before a's run
	// reached 40 and stays a call of its own (a log's requests arrive in order); b's two join.
	if started, _ := w.Stats(); started != 3 {
		t.Fatalf("%d calls, want 3 (a [0,40), a [40,50), b [0,10))", started)
	}
	for i, r := range batch {
		if r.f != nil {
			t.Fatalf("batch[%d] still holds %v", i, r.f.Name())
		}
	}
}
