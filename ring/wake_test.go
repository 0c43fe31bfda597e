package ring

import (
	"errors"
	"testing"
	"time"
)

// TestPostFromRunningLoopNeedsNoWakeup: a Post made while the loop runs (here from a timer
// callback, a turn after the outside Post's wake-up was consumed) costs no eventfd write,
// and its message still runs; a Post to a sleeping loop wakes it.
func TestPostFromRunningLoopNeedsNoWakeup(t *testing.T) {
	for _, backend := range []string{"syscall", "uring"} {
		t.Run(backend, func(t *testing.T) {
			var r *Reactor
			ready := make(chan struct{})
			runErr := make(chan error, 1)
			err := StartPinned(-1, Config{Backend: backend}, func(rr *Reactor) {
				r = rr
				close(ready)
				runErr <- rr.Run()
				rr.Close()
			})
			if err != nil {
				t.Skipf("%s reactor: %v", backend, err)
			}
			<-ready
			done := make(chan uint64, 1)
			var before uint64
			posted := make(chan struct{})
			err = r.Post(func() { // from outside: wakes the loop
				r.AfterFunc(time.Millisecond, func() {
					// The loop can run a message before its Post has written the eventfd
					// (the poster preempted between push and wake-up): count from when
					// the outside Post has returned.
					<-posted
					before = r.wakeWrites.Load()
					if err := r.Post(func() { done <- r.wakeWrites.Load() }); err != nil {
						t.Error(err)
					}
				})
			})
			close(posted)
			if err != nil {
				t.Fatal(err)
			}
			select {
			case after := <-done:
				if after != before {
					t.Errorf("a Post from the running loop wrote the eventfd %d times", after-before)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the message posted from the loop never ran")
			}
			stopRunning(t, r, runErr)
		})
	}
}

// wakeWaitMax bounds how long the wake-up tests wait for a message before they call the
// wake-up lost (a failure guard, not a timing assertion: the message runs in microseconds).
const wakeWaitMax = 10 * time.Second

// TestPostRefusedByFullMailboxNeverRuns replays, deterministically, the interleaving that
// hung TestReactorRunPostStop/syscall under -race: posters leave the mailbox full while the
// loop is busy, the next Post gets ErrMailboxFull (the test dropped that error), the loop
// drains what was queued and waits in epoll_wait(-1) for ever, and the refused message never
// runs. A refused message is not queued, so it must never run; the caller's retry then lands
// on a loop that is past its last mailbox check, and that Post must wake it (one eventfd
// write).
func TestPostRefusedByFullMailboxNeverRuns(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		const entries = 4
		r, runErr := startRunning(t, Config{Backend: backend, MailboxEntries: entries})
		entered, release := make(chan struct{}), make(chan struct{})
		waiting := make(chan int, 1)
		var ran, refusedRan int // loop thread only; read after the marker ran
		if err := postAccepted(r, func() {
			r.beforeWait = func() { // from now on: each time the loop is about to wait
				if r.wakePending.Load() {
					return // a wake-up is in flight: this wait returns at once
				}
				select {
				case waiting <- ran:
				default:
				}
			}
			close(entered)
			<-release
		}); err != nil {
			t.Fatal(err)
		}
		<-entered // the loop runs the message above: nothing drains the mailbox meanwhile
		for i := 0; i < entries; i++ {
			if err := r.Post(func() { ran++ }); err != nil {
				t.Fatalf("Post %d into a mailbox of %d: %v", i, entries, err)
			}
		}
		if err := r.Post(func() { refusedRan++ }); !errors.Is(err, ErrMailboxFull) {
			t.Fatalf("Post into a full mailbox: %v, want ErrMailboxFull", err)
		}
		close(release)
		select {
		case n := <-waiting:
			if n != entries {
				t.Fatalf("the loop went to wait after running %d of %d queued messages", n, entries)
			}
		case <-time.After(wakeWaitMax):
			t.Fatal("the loop never went back to its wait")
		}
		before := r.wakeWrites.Load()
		done := make(chan [2]int, 1)
		if err := postAccepted(r, func() { done <- [2]int{ran, refusedRan} }); err != nil {
			t.Fatal(err)
		}
		select {
		case got := <-done:
			if got != [2]int{entries, 0} {
				t.Fatalf("ran %d queued and %d refused messages, want %d and 0", got[0], got[1], entries)
			}
		case <-time.After(wakeWaitMax):
			t.Fatal("lost wake-up: a Post to a loop past its last mailbox check never ran")
		}
		if n := r.wakeWrites.Load() - before; n != 1 {
			t.Errorf("the Post to a waiting loop wrote the eventfd %d times, want 1", n)
		}
		stopRunning(t, r, runErr)
	})
}

// TestPostInWaitWindowWakesLoop posts from another goroutine exactly in the check-then-sleep
// window of a running loop: after it cleared awake and found the mailbox empty, before it
// enters the kernel wait (epoll_wait on the syscall backend, io_uring_enter on io_uring). The
// Post must see awake false and write the eventfd (PostFrom: send a MSG_RING from another
// loop instead), so that the wait returns and the message runs. A loop that published "going
// to sleep" after its last mailbox check would sleep through it: the test then stops the
// loop and fails instead of hanging.
func TestPostInWaitWindowWakesLoop(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		src, srcErr := startRunning(t, Config{Backend: backend})
		defer func() {
			src.Stop()
			if err := <-srcErr; err != nil {
				t.Error(err)
			}
		}()
		for _, from := range []string{"Post", "PostFrom"} {
			t.Run(from, func(t *testing.T) {
				var r *Reactor
				ran := make(chan struct{})
				post := func() error { return r.Post(func() { close(ran) }) }
				if from == "PostFrom" {
					post = func() error {
						errc := make(chan error, 1)
						if err := postAccepted(src, func() { errc <- r.PostFrom(src, func() { close(ran) }) }); err != nil {
							return err
						}
						return <-errc // the MSG_RING goes out with src's next submission
					}
				}
				writes := make(chan uint64, 1) // eventfd writes made by the Post in the window
				ready, runErr := make(chan struct{}), make(chan error, 1)
				err := StartPinned(-1, Config{Backend: backend}, func(rr *Reactor) {
					// Nothing but the hook posts to this loop, so no other Post's eventfd
					// write can be in flight. A timer makes the loop wait and wake once
					// (awake true) before the turn whose wait window the hook uses.
					r = rr
					timerRan := false
					rr.AfterFunc(time.Millisecond, func() { timerRan = true })
					rr.beforeWait = func() {
						if !timerRan {
							return
						}
						rr.beforeWait = nil
						before := rr.wakeWrites.Load()
						errc := make(chan error, 1)
						go func() { errc <- post() }()
						if err := <-errc; err != nil {
							t.Error(err)
						}
						writes <- rr.wakeWrites.Load() - before
					}
					close(ready)
					runErr <- rr.Run()
				})
				if err != nil {
					t.Fatal(err)
				}
				<-ready
				select {
				case <-ran:
				case <-time.After(wakeWaitMax):
					t.Errorf("lost wake-up: the loop slept through a %s made after its last mailbox check", from)
				}
				stopRunning(t, r, runErr)
				wantWrites := uint64(1)
				if from == "PostFrom" && src.Probe().Supported(OpMsgRing) {
					wantWrites = 0 // the wake-up rode the MSG_RING
				}
				select {
				case n := <-writes:
					if n != wantWrites {
						t.Errorf("%s into the wait window: %d eventfd writes, want %d", from, n, wantWrites)
					}
				default:
					t.Error("the loop never reached its wait")
				}
			})
		}
	})
}

// What a timer posts to the loop's own mailbox runs in the same turn, before the turn
// submits and waits: a produce answer given by engine/shard's staged-write timer leaves
// before the io_uring_enter, not after it (docs/benchmarks.md, session 8).
func TestTimerPostRunsBeforeWait(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		r := newReactor(t, backend, Config{})
		var order []string
		r.AfterFunc(0, func() {
			if err := r.Post(func() { order = append(order, "message") }); err != nil {
				t.Error(err)
			}
		})
		r.AfterFunc(time.Millisecond, func() {}) // bounds the wait
		r.beforeWait = func() { order = append(order, "wait") }
		if err := r.RunOnce(true); err != nil {
			t.Fatal(err)
		}
		if len(order) < 2 || order[0] != "message" || order[1] != "wait" {
			t.Fatalf("one turn ran %v, want the timer's message before the wait", order)
		}
	})
}
