package ring

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time          { return c.t }
func (c *fakeClock) advance(d time.Duration) { c.t = c.t.Add(d) }

func TestReactorTimers(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		clk := &fakeClock{t: time.Unix(1000, 0)}
		r := newReactor(t, backend, Config{Now: clk.now})
		var fired []int
		r.AfterFunc(3*time.Second, func() { fired = append(fired, 3) })
		r.AfterFunc(1*time.Second, func() { fired = append(fired, 1) })
		stopped := r.AfterFunc(2*time.Second, func() { fired = append(fired, 2) })
		if !stopped.Stop() || stopped.Stop() {
			t.Fatal("Stop should report true once, then false")
		}
		if err := r.RunOnce(false); err != nil {
			t.Fatal(err)
		}
		if len(fired) != 0 {
			t.Fatalf("fired early: %v", fired)
		}
		clk.advance(1500 * time.Millisecond)
		r.RunOnce(false)
		clk.advance(5 * time.Second)
		r.RunOnce(false)
		if len(fired) != 2 || fired[0] != 1 || fired[1] != 3 {
			t.Fatalf("fired %v, want [1 3]", fired)
		}
		// Reset re-arms a fired timer and moves a pending one, without a new Timer.
		stopped.Reset(time.Second)
		pending := r.AfterFunc(time.Second, func() { fired = append(fired, 4) })
		pending.Reset(time.Hour)
		if !r.Now().Equal(clk.t) {
			t.Fatal("Now does not use the injected clock")
		}
		clk.advance(2 * time.Second)
		r.RunOnce(false)
		if len(fired) != 3 || fired[2] != 2 {
			t.Fatalf("after Reset fired %v, want [1 3 2]", fired)
		}
		if allocs := testing.AllocsPerRun(50, func() { stopped.Reset(time.Minute) }); allocs != 0 {
			t.Fatalf("Reset allocates %.1f", allocs)
		}
	})
}

// TestReactorRunPostStop drives a real loop on its own pinned thread: Post from many
// goroutines, async file ops with callbacks, a timer on the real clock, then Stop.
func TestReactorRunPostStop(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		f, path := tempFile(t)
		fd := int(f.Fd())
		var (
			ran     atomic.Int64
			timerCh = make(chan struct{})
		)
		r, runErr := startRunning(t, Config{Backend: backend, SingleIssuer: true, DeferTaskrun: true, MailboxEntries: 64})
		if r.Backend() != map[string]string{"uring": BackendUring, "syscall": BackendSyscall}[backend] {
			t.Fatalf("backend %s", r.Backend())
		}
		const posters, perPoster = 4, 200
		var wg sync.WaitGroup
		for p := 0; p < posters; p++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < perPoster; i++ {
					if err := postAccepted(r, func() { ran.Add(1) }); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		// Async writes submitted from the loop, completions via callbacks, then a blocking
		// FileIO read from inside a callback. The posters may have left the mailbox full:
		// this Post must be retried like theirs, or the writes are never submitted.
		result := make(chan string, 1)
		err := postAccepted(r, func() {
			var pending atomic.Int32
			for i := 0; i < 8; i++ {
				pending.Add(1)
				b := bytes.Repeat([]byte{byte('a' + i)}, 512)
				err := r.WriteAsync(fd, b, int64(i*512), func(res int32, _ uint32) {
					if res != 512 {
						t.Errorf("async write res %d", res)
					}
					if pending.Add(-1) == 0 {
						got := make([]byte, 8*512)
						n, err := r.Pread(fd, got, 0)
						if err != nil || n != len(got) {
							t.Errorf("Pread in callback: %d %v", n, err)
						}
						result <- string(got[0]) + string(got[7*512])
					}
				})
				if err != nil {
					t.Errorf("WriteAsync: %v", err)
				}
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		if got := <-result; got != "ah" {
			t.Fatalf("read back %q", got)
		}
		if err := postAccepted(r, func() { r.AfterFunc(time.Millisecond, func() { close(timerCh) }) }); err != nil {
			t.Fatal(err)
		}
		<-timerCh
		stopRunning(t, r, runErr)
		if ran.Load() != posters*perPoster {
			t.Fatalf("ran %d posted closures, want %d", ran.Load(), posters*perPoster)
		}
		disk, _ := os.ReadFile(path)
		if len(disk) != 8*512 || disk[512] != 'b' {
			t.Fatalf("disk content len %d", len(disk))
		}
	})
}

func TestMailboxFull(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		r := newReactor(t, backend, Config{MailboxEntries: 4})
		n := 0
		for i := 0; i < 4; i++ {
			if err := r.Post(func() { n++ }); err != nil {
				t.Fatalf("Post %d: %v", i, err)
			}
		}
		if err := r.Post(func() {}); !errors.Is(err, ErrMailboxFull) {
			t.Fatalf("5th Post: %v, want ErrMailboxFull", err)
		}
		r.RunOnce(false)
		if n != 4 {
			t.Fatalf("ran %d", n)
		}
		if err := r.Post(func() {}); err != nil {
			t.Fatalf("Post after drain: %v", err)
		}
		r.Close()
		if err := r.Post(func() {}); !errors.Is(err, ErrClosed) {
			t.Fatalf("Post after Close: %v", err)
		}
	})
}

func TestArena(t *testing.T) {
	a, err := NewArena(5000, 3)
	if err != nil {
		t.Fatal(err)
	}
	if a.BufSize() != 8192 {
		t.Fatalf("BufSize %d, want page-rounded 8192", a.BufSize())
	}
	var got [][]byte
	for i := 0; i < 3; i++ {
		b, idx, err := a.Get()
		if err != nil || idx != i || len(b) != 8192 {
			t.Fatalf("Get %d: idx %d len %d %v", i, idx, len(b), err)
		}
		if a.Index(b[100:]) != i {
			t.Fatalf("Index of sub-slice")
		}
		if uintptrOf(b)%4096 != 0 {
			t.Fatal("buffer not page-aligned")
		}
		got = append(got, b)
	}
	if _, _, err := a.Get(); !errors.Is(err, ErrArenaExhausted) {
		t.Fatalf("Get on empty arena: %v", err)
	}
	if err := a.Release(); err == nil {
		t.Fatal("Release with buffers out should fail")
	}
	a.Put(got[1])
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("double Put did not panic")
			}
		}()
		a.Put(got[1])
	}()
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("foreign Put did not panic")
			}
		}()
		a.Put(make([]byte, 10))
	}()
	a.Put(got[0])
	a.Put(got[2])
	if allocs := testing.AllocsPerRun(100, func() {
		b, _, _ := a.Get()
		a.Put(b)
	}); allocs != 0 {
		t.Fatalf("Get/Put allocate %.1f per op", allocs)
	}
	if err := a.Release(); err != nil {
		t.Fatal(err)
	}
}

func TestReactorFixedBuffers(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		r := newReactor(t, backend, Config{})
		a, err := NewArena(4096, 4)
		if err != nil {
			t.Fatal(err)
		}
		ok, err := r.RegisterArena(a)
		if err != nil || !ok {
			t.Fatalf("RegisterArena: %v %v", ok, err)
		}
		f, _ := tempFile(t)
		buf, idx, _ := a.Get()
		copy(buf, "fixed buffer write")
		res := int32(-1)
		err = r.Submit(func(s *SQE) { s.PrepWriteFixed(int(f.Fd()), buf[:18], 0, uint16(idx)) },
			func(v int32, _ uint32) { res = v })
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; res == -1 && i < 1000; i++ {
			r.RunOnce(true)
		}
		if res != 18 {
			t.Fatalf("write_fixed res %d", res)
		}
		got, _ := os.ReadFile(f.Name())
		if string(got) != "fixed buffer write" {
			t.Fatalf("file %q", got)
		}
		a.Put(buf)
		r.Ring().UnregisterBuffers()
		if err := a.Release(); err != nil {
			t.Fatal(err)
		}
	})
}

// TestReactorCloseCancelsInflight: Close with a recv pending on a silent socket and a
// multishot accept armed must cancel them and return promptly, on both backends.
func TestReactorCloseCancelsInflight(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		r := newReactor(t, backend, Config{SingleIssuer: true}) // closed again on failure: a leaked reactor's pinned memory panics in the finalizer
		lfd, addr := listenLoopback(t)
		rg := r.Ring()
		sfd, _ := connectPair(t, rg, lfd, addr)
		buf := make([]byte, 64)
		called := false
		if err := r.RecvAsync(sfd, buf, func(int32, uint32) { called = true }); err != nil {
			t.Fatal(err)
		}
		if err := r.Submit(func(s *SQE) { s.PrepMultishotAccept(lfd, nil, nil, 0) }, func(int32, uint32) { called = true }); err != nil {
			t.Fatal(err)
		}
		r.RunOnce(false)
		start := time.Now()
		if err := r.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		if time.Since(start) >= closeWaitMax {
			t.Fatalf("Close waited the full %v: in-flight ops were not cancelled", closeWaitMax)
		}
		for i := range r.slots {
			if r.slots[i].busy {
				t.Fatalf("slot %d still busy after Close", i)
			}
		}
		if called {
			t.Fatal("a callback ran during Close")
		}
	})
}

func TestStartPinnedBadCPU(t *testing.T) {
	err := StartPinned(1<<20, Config{}, func(*Reactor) { t.Error("fn ran") })
	if err == nil {
		t.Fatal("StartPinned on a nonexistent CPU succeeded")
	}
}

// TestPostRacesClose: Post from many goroutines while the owner closes the reactor; every
// Post either succeeds or returns ErrClosed (run with -race).
func TestPostRacesClose(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		r := newReactor(t, backend, Config{MailboxEntries: 1 << 16})
		var wg sync.WaitGroup
		start := make(chan struct{})
		for g := 0; g < 4; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				for i := 0; i < 2000; i++ {
					if err := r.Post(func() {}); err != nil && !errors.Is(err, ErrClosed) && !errors.Is(err, ErrMailboxFull) {
						t.Errorf("Post: %v", err)
						return
					}
					r.Stop()
				}
			}()
		}
		close(start)
		r.RunOnce(false)
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		if err := r.Post(func() {}); !errors.Is(err, ErrClosed) {
			t.Fatalf("Post after Close: %v", err)
		}
	})
}

// TestReserveKeepsChainsWhole: with a nearly full SQ, Reserve flushes first so a
// write -> fdatasync chain is submitted in one piece (the fsync then sees the write).
func TestReserveKeepsChainsWhole(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		r := newReactor(t, backend, Config{Entries: 4})
		f, _ := tempFile(t)
		for i := 0; i < 3; i++ { // fill 3 of 4 SQ slots
			if err := r.Submit(func(s *SQE) { s.PrepNop() }, nil); err != nil {
				t.Fatal(err)
			}
		}
		if err := r.Reserve(2); err != nil {
			t.Fatal(err)
		}
		if r.Ring().SQSpace() < 2 {
			t.Fatalf("SQSpace %d after Reserve(2)", r.Ring().SQSpace())
		}
		var results []int32
		data := []byte("chained")
		w, err := r.Begin(func(res int32, _ uint32) { results = append(results, res) })
		if err != nil {
			t.Fatal(err)
		}
		w.SQE().PrepWrite(int(f.Fd()), data, 0)
		w.SQE().SetLink()
		w.Pin(&data[0])
		if err := w.Submit(); err != nil {
			t.Fatal(err)
		}
		if err := r.Submit(func(s *SQE) { s.PrepFsync(int(f.Fd()), true) }, func(res int32, _ uint32) { results = append(results, res) }); err != nil {
			t.Fatal(err)
		}
		for i := 0; len(results) < 2 && i < 1000; i++ {
			r.RunOnce(true)
		}
		if len(results) != 2 || results[0] != 7 || results[1] != 0 {
			t.Fatalf("write/fdatasync results %v", results)
		}
		if err := r.Reserve(5); !errors.Is(err, ErrSQFull) {
			t.Fatalf("Reserve beyond the SQ size: %v", err)
		}
	})
}

// TestFileIOOffThread: a FileIO call from a goroutine that does not own the reactor (a
// caller bug seen in practice: a handler on shard A writing through shard B's reactor) must
// neither hang nor touch the ring; it is served with plain syscalls and counted.
func TestFileIOOffThread(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		for _, single := range []bool{false, true} {
			testFileIOOffThread(t, Config{Backend: backend, SingleIssuer: single, DeferTaskrun: single})
		}
	})
}

func testFileIOOffThread(t *testing.T, cfg Config) {
	{
		f, _ := tempFile(t)
		var r *Reactor
		ready := make(chan struct{})
		runErr := make(chan error, 1)
		err := StartPinned(-1, cfg, func(rr *Reactor) {
			r = rr
			close(ready)
			runErr <- rr.Run() // the owner is blocked in the ring while we call FileIO below
		})
		if err != nil {
			t.Fatal(err)
		}
		<-ready
		done := make(chan error, 1)
		go func() {
			if _, err := r.Pwrite(int(f.Fd()), []byte("foreign"), 0); err != nil {
				done <- err
				return
			}
			if err := r.Fdatasync(int(f.Fd())); err != nil {
				done <- err
				return
			}
			got := make([]byte, 7)
			if _, err := r.Pread(int(f.Fd()), got, 0); err != nil || string(got) != "foreign" {
				done <- fmt.Errorf("read back %q: %v", got, err)
				return
			}
			done <- nil
		}()
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("FileIO from a foreign thread hung")
		}
		if n := r.ForeignFileIO(); n != 3 {
			t.Fatalf("ForeignFileIO = %d, want 3", n)
		}
		stopRunning(t, r, runErr)
	}
}

// With SpinBeforeWait the loop polls after work instead of sleeping at once: posts,
// completions and timers are still served (a completion found while spinning is
// dispatched), Stop still stops it, and the spin is counted in Stats.
func TestReactorSpinBeforeWait(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		f, _ := tempFile(t)
		r, runErr := startRunning(t, Config{Backend: backend, SpinBeforeWait: 200 * time.Microsecond})
		done := make(chan int32, 1)
		for i := 0; i < 200; i++ {
			// One at a time, as a lone client's requests: each post arrives while the loop
			// spins after the previous one's work, or after it slept.
			if err := r.Post(func() {
				if err := r.WriteAsync(int(f.Fd()), []byte("x"), int64(i), func(res int32, _ uint32) { done <- res }); err != nil {
					t.Errorf("WriteAsync: %v", err)
					done <- -1
				}
			}); err != nil {
				t.Fatal(err)
			}
			if res := <-done; res != 1 {
				t.Fatalf("write %d: res %d", i, res)
			}
		}
		fired := make(chan struct{})
		if err := postAccepted(r, func() { r.AfterFunc(time.Millisecond, func() { close(fired) }) }); err != nil {
			t.Fatal(err)
		}
		<-fired
		stats := make(chan Stats, 1)
		if err := postAccepted(r, func() { stats <- r.Stats() }); err != nil {
			t.Fatal(err)
		}
		if st := <-stats; st.Spin <= 0 {
			t.Fatalf("Stats().Spin = %v after 200 turns with work", st.Spin)
		}
		stopRunning(t, r, runErr)
	})
}

// startRunning starts a reactor pinned to CPU 0 running its loop; Run's error arrives on
// the channel once it is stopped.
func startRunning(t *testing.T, cfg Config) (*Reactor, chan error) {
	t.Helper()
	var r *Reactor
	runErr, ready := make(chan error, 1), make(chan struct{})
	err := StartPinned(0, cfg, func(rr *Reactor) {
		r = rr
		close(ready)
		runErr <- rr.Run()
	})
	if err != nil {
		t.Fatalf("StartPinned: %v", err)
	}
	<-ready
	return r, runErr
}

// stopRunning stops a reactor startRunning started and fails t if Run returned an error.
func stopRunning(t *testing.T, r *Reactor, runErr chan error) {
	t.Helper()
	r.Stop()
	if err := <-runErr; err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// Quiet is true only when the loop has nothing to run: no message, due timer or waiting
// completion; it submits queued operations (so their completions can arrive meanwhile).
func TestReactorQuiet(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		clk := &fakeClock{t: time.Unix(1000, 0)}
		r := newReactor(t, backend, Config{Now: clk.now})
		if err := r.RunOnce(false); err != nil {
			t.Fatal(err)
		}
		if !r.Quiet() {
			t.Fatal("an idle reactor is not quiet")
		}
		if err := r.Post(func() {}); err != nil {
			t.Fatal(err)
		}
		if r.Quiet() || !r.Waiting() {
			t.Fatal("quiet, or nothing waiting, with a message in the mailbox")
		}
		r.RunOnce(false)
		r.AfterFunc(time.Second, func() {})
		if !r.Quiet() {
			t.Fatal("a timer not yet due makes the reactor busy")
		}
		clk.advance(2 * time.Second)
		if r.Quiet() || r.Waiting() {
			t.Fatal("quiet with a timer due, or the timer counted as work waiting")
		}
		r.RunOnce(false)

		f, _ := tempFile(t)
		written := false
		if err := r.WriteAsync(int(f.Fd()), []byte("quiet"), 0, func(res int32, _ uint32) { written = res == 5 }); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for r.Quiet() { // the first call submits the write; its completion then waits
			if time.Now().After(deadline) {
				t.Fatal("quiet for 10s after a write was submitted: its completion was never seen")
			}
			runtime.Gosched()
		}
		r.RunOnce(false)
		if !written || !r.Quiet() {
			t.Fatalf("after dispatching the write's completion: written %v, quiet %v", written, r.Quiet())
		}
	})
}

// A completion reaped in the same batch as the one being dispatched counts as waiting:
// a callback that asks Quiet sees the rest of its batch.
func TestReactorWaitingSeesRestOfBatch(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		r := newReactor(t, backend, Config{})
		f, _ := tempFile(t)
		quietInFirst := true
		done := 0
		for i := 0; i < 2; i++ {
			err := r.WriteAsync(int(f.Fd()), []byte("ab"), int64(2*i), func(int32, uint32) {
				q := r.Quiet()
				if done++; done == 1 {
					quietInFirst = q
				}
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		if _, err := r.Ring().Submit(); err != nil {
			t.Fatal(err)
		}
		waitReady := time.Now().Add(10 * time.Second)
		for cqCount(r) < 2 { // both completions in the queue, so the loop reaps them in one batch
			if time.Now().After(waitReady) {
				t.Fatal("two writes not completed within 10s")
			}
			runtime.Gosched()
		}
		r.RunOnce(false)
		if done != 2 || quietInFirst {
			t.Fatalf("dispatched %d; quiet in the first callback: %v (want false: the second waits)", done, quietInFirst)
		}
	})
}

// cqCount is the number of completions waiting in r's ring (not consumed).
func cqCount(r *Reactor) int {
	switch rg := r.ring.(type) {
	case *uringRing:
		return int(atomic.LoadUint32(rg.cqTail) - *rg.cqHead)
	case *sysRing:
		rg.drainInbox()
		return rg.cqReady()
	}
	return 0
}
