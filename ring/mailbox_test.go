package ring

import (
	"runtime"
	"sync"
	"testing"
)

// TestMailboxMPSC: several producers push concurrently into a small mailbox while one
// consumer pops; nothing is lost or duplicated and each producer's items stay in order.
func TestMailboxMPSC(t *testing.T) {
	var m mailbox
	m.init(8)
	const producers, perProducer = 4, 5000
	last := make([]int, producers)
	for i := range last {
		last[i] = -1
	}
	var wg sync.WaitGroup
	for p := 0; p < producers; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < perProducer; i++ {
				fn := func() {
					if i != last[p]+1 {
						t.Errorf("producer %d: got item %d after %d", p, i, last[p])
					}
					last[p] = i
				}
				for attempt := 0; !m.push(fn); attempt++ {
					if attempt > 10_000_000 {
						t.Error("push never succeeded")
						return
					}
					runtime.Gosched()
				}
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	popped := 0
	for finished := false; ; {
		if fn := m.pop(); fn != nil {
			fn()
			popped++
			continue
		}
		if finished {
			break
		}
		select {
		case <-done:
			finished = true // drain what is left, then stop
		default:
			runtime.Gosched()
		}
	}
	if popped != producers*perProducer {
		t.Fatalf("popped %d, want %d", popped, producers*perProducer)
	}
	if !m.empty() {
		t.Fatal("mailbox not empty at the end")
	}
}
