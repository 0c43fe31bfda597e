package ring

import (
	"errors"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// lostWakeRing wraps a syscall-backend ring and loses the wake-up of every wait: the
// completions the wrapped ring posts are held back (as a kernel holds a completion it
// posted or parked without waking the waiter) until a wait with a timeout runs to it. A
// wait without a timeout while completions are held would sleep forever on a real ring;
// here it fails with errWaitForever. A wait with nothing held returns at once, as a wait
// ended by a signal (EINTR) does: the caller must loop.
type lostWakeRing struct {
	Ring
	held     []CQE
	released bool // the held completions are visible (a bounded wait ran to its timeout)
	buf      [reapBatch]CQE
	timeouts []time.Duration // the timeout of every wait, in order
	hangs    int             // waits without a timeout while completions were held
}

var errWaitForever = errors.New("test: a wait without a timeout while the kernel held completions (a hang on a real ring)")

func (s *lostWakeRing) pull() {
	n := s.Ring.PeekCQEs(s.buf[:])
	s.held = append(s.held, s.buf[:n]...)
}

func (s *lostWakeRing) SubmitAndWait(waitNr uint32, timeout time.Duration) (int, error) {
	n, err := s.Ring.Submit()
	if err != nil || waitNr == 0 {
		return n, err
	}
	s.timeouts = append(s.timeouts, timeout)
	s.pull()
	if len(s.held) == 0 || s.released {
		return n, nil
	}
	if timeout <= 0 {
		s.hangs++
		return n, errWaitForever
	}
	// The kernel's timer: the wait lasts its timeout, then finds the completions. The
	// sleep is the simulated wait itself, not a synchronisation.
	time.Sleep(timeout)
	s.released = true
	return n, nil
}

func (s *lostWakeRing) PeekCQEs(dst []CQE) int {
	s.pull()
	if !s.released {
		return 0
	}
	n := copy(dst, s.held)
	s.held = s.held[:copy(s.held, s.held[n:])]
	if len(s.held) == 0 {
		s.released = false
	}
	return n
}

// newLostWakeReactor is a syscall-backend reactor whose ring loses every wake-up, and a
// file to write.
func newLostWakeReactor(t *testing.T) (*Reactor, *lostWakeRing, int) {
	t.Helper()
	r, fd := newWrappedReactor(t)
	lw := &lostWakeRing{Ring: r.ring}
	r.ring = lw
	return r, lw, fd
}

// newWrappedReactor is a syscall-backend reactor owned by the test's (locked) thread, whose
// ring the caller wraps, and a file to write.
func newWrappedReactor(t *testing.T) (*Reactor, int) {
	t.Helper()
	runtime.LockOSThread()
	t.Cleanup(runtime.UnlockOSThread)
	r := newReactor(t, "syscall", Config{})
	fd, err := unix.Open(filepath.Join(t.TempDir(), "seg"), unix.O_RDWR|unix.O_CREAT|unix.O_CLOEXEC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return r, fd
}

// checkOneLostWakeup: exactly one wait ran to fileOpWaitMax and found the held completions,
// and no wait went without a timeout while they were held.
func checkOneLostWakeup(t *testing.T, r *Reactor, lw *lostWakeRing) {
	t.Helper()
	if lw.hangs != 0 {
		t.Errorf("%d waits without a timeout while completions were held (timeouts %v)", lw.hangs, lw.timeouts)
	}
	st := r.Stats()
	if st.LostWakeups != 1 || st.WaitsExpired != 1 {
		t.Errorf("LostWakeups %d, WaitsExpired %d; want 1 and 1 (timeouts %v)", st.LostWakeups, st.WaitsExpired, lw.timeouts)
	}
	if r.fileOps != 0 {
		t.Errorf("%d file ops counted in flight after their completions", r.fileOps)
	}
}

// TestAwaitWritesBoundedWhenWakeLost: AwaitWrites with a write in flight waits with a
// bound, so a lost wake-up costs fileOpWaitMax, not a hang.
func TestAwaitWritesBoundedWhenWakeLost(t *testing.T) {
	r, lw, fd := newLostWakeReactor(t)
	written := false
	if err := r.StartWrite(fd, []byte("record"), 0, func(n int, err error) { written = err == nil && n == 6 }); err != nil {
		t.Fatal(err)
	}
	if err := r.AwaitWrites(func() bool { return written }); err != nil {
		t.Fatalf("AwaitWrites: %v", err)
	}
	checkOneLostWakeup(t, r, lw)
	if len(lw.timeouts) == 0 || lw.timeouts[0] != fileOpWaitMax {
		t.Errorf("wait timeouts %v, want the first to be %v", lw.timeouts, fileOpWaitMax)
	}
}

// TestRunOnceBoundedWhenWakeLost: the loop's wait with no timer armed is bounded while a
// file op is in flight, and unbounded again once none is.
func TestRunOnceBoundedWhenWakeLost(t *testing.T) {
	r, lw, fd := newLostWakeReactor(t)
	synced := false
	if err := r.StartFsync(fd, true, func(_ int, err error) { synced = err == nil }); err != nil {
		t.Fatal(err)
	}
	for turn := 0; turn < 4 && !synced; turn++ {
		if err := r.RunOnce(true); err != nil {
			t.Fatalf("turn %d: %v", turn, err)
		}
	}
	if !synced {
		t.Fatalf("the fsync's completion never came (wait timeouts %v)", lw.timeouts)
	}
	checkOneLostWakeup(t, r, lw)
	waits := len(lw.timeouts)
	if err := r.RunOnce(true); err != nil { // nothing in flight: returns at once (see lostWakeRing)
		t.Fatal(err)
	}
	if len(lw.timeouts) != waits+1 || lw.timeouts[waits] != 0 {
		t.Errorf("an idle loop with no timer waited with timeouts %v, want an unbounded wait last", lw.timeouts[waits:])
	}
}

// TestBlockingFileIOBoundedWhenWakeLost: a blocking FileIO call through the ring waits
// with a bound too.
func TestBlockingFileIOBoundedWhenWakeLost(t *testing.T) {
	r, lw, fd := newLostWakeReactor(t)
	if n, err := r.Pwrite(fd, []byte("record"), 0); err != nil || n != 6 {
		t.Fatalf("Pwrite: %d, %v", n, err)
	}
	checkOneLostWakeup(t, r, lw)
}

// countWaitsRing wraps a ring and counts the waits (SubmitAndWait with waitNr > 0); a wait
// submits and returns at once, as one ended by a signal does.
type countWaitsRing struct {
	Ring
	waits int
}

func (c *countWaitsRing) SubmitAndWait(waitNr uint32, timeout time.Duration) (int, error) {
	if waitNr > 0 {
		c.waits++
	}
	return c.Ring.Submit()
}

// TestRunOnceDispatchesReapedCompletionsWithoutWaiting: a blocking FileIO call made between
// loop turns reaps a StartWrite completion into the backlog; the next RunOnce(true)
// dispatches it and returns without waiting in the kernel, which has nothing left to wake it
// for. Before, the turn dispatched the completion and then slept until the next timer: the
// 20 s stall of engine's TestCrashSIGKILLAsync/repeat (its child's blocking index writes
// between turns reaped the segment writes it waited for; docs/ring.md, "Bounded waits").
func TestRunOnceDispatchesReapedCompletionsWithoutWaiting(t *testing.T) {
	r, fd := newWrappedReactor(t)
	cw := &countWaitsRing{Ring: r.ring}
	r.ring = cw
	written := false
	if err := r.StartWrite(fd, []byte("record"), 0, func(n int, err error) { written = err == nil && n == 6 }); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Pwrite(fd, []byte("index"), 4096); err != nil { // reaps the write's completion too
		t.Fatal(err)
	}
	if written || len(r.backlog) != 1 {
		t.Fatalf("after the blocking call: written %v, backlog %d; want the write's completion in the backlog", written, len(r.backlog))
	}
	cw.waits = 0
	if err := r.RunOnce(true); err != nil {
		t.Fatal(err)
	}
	if !written {
		t.Fatal("RunOnce did not dispatch the reaped write completion")
	}
	if st := r.Stats(); st.BacklogTurns != 1 {
		t.Errorf("BacklogTurns %d, want 1", st.BacklogTurns)
	}
	if cw.waits != 0 {
		t.Fatalf("RunOnce(true) waited in the kernel %d times after dispatching the reaped completion (a real ring sleeps until the next timer there)", cw.waits)
	}
}
