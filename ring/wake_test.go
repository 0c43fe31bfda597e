package ring

import (
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
			err = r.Post(func() { // from outside: wakes the loop
				before = r.wakeWrites.Load()
				r.AfterFunc(time.Millisecond, func() {
					if err := r.Post(func() { done <- r.wakeWrites.Load() }); err != nil {
						t.Error(err)
					}
				})
			})
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
			r.Stop()
			if err := <-runErr; err != nil {
				t.Fatal(err)
			}
		})
	}
}
