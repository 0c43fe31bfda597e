package cluster

import (
	"testing"
	"time"
)

// The throttle lets a catching-up replica fetch while its budget lasts and keeps the bytes
// copied within rate × elapsed plus two responses (the first, and one of saved credit),
// with an injected clock; fetch round trips shorter than a chunk's time cost no rate.
func TestThrottle(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	th := newThrottle(1<<20, func() time.Time { return now })
	if w := th.wait(); w != 0 {
		t.Fatalf("a fresh throttle waits %v", w)
	}
	if got := th.chunkBytes(); got != 1<<20/10 {
		t.Fatalf("chunk %d, want a tenth of the rate", got)
	}
	// A replica that fetches whenever it may, one chunk at a time, for 10 s of clock.
	start, copied := now, int64(0)
	for now.Sub(start) < 10*time.Second {
		if w := th.wait(); w > 0 {
			now = now.Add(w)
			continue
		}
		n := int64(th.chunkBytes())
		copied += n
		th.charge(n)
		now = now.Add(7 * time.Millisecond) // the round trip
	}
	elapsed := now.Sub(start).Seconds()
	chunk := float64(th.chunkBytes())
	if budget := elapsed * (1 << 20); float64(copied) > budget+2*chunk || float64(copied) < budget-chunk {
		t.Fatalf("copied %d bytes in %.2fs, want the rate's %.0f within -1/+2 chunks of %.0f", copied, elapsed, budget, chunk)
	}
	// Idle time saves one chunk of credit, not the pause's.
	now = now.Add(time.Minute)
	th.charge(int64(th.chunkBytes()))
	if w := th.wait(); w != 0 {
		t.Fatalf("after an idle minute and one chunk the throttle waits %v, want 0", w)
	}
	th.charge(int64(th.chunkBytes()))
	if w := th.wait(); w < 99*time.Millisecond || w > 101*time.Millisecond {
		t.Fatalf("after an idle minute and two chunks the throttle waits %v, want 100ms", w)
	}
	if big := newThrottle(1<<40, time.Now); big.chunkBytes() != fetchBytesMax {
		t.Fatalf("chunk %d above the fetch size", big.chunkBytes())
	}
	if small := newThrottle(1, time.Now); small.chunkBytes() != 64<<10 {
		t.Fatalf("chunk %d below 64 KiB", small.chunkBytes())
	}
}
