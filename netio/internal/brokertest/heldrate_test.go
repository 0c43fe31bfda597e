package brokertest

import (
	"math/rand/v2"
	"testing"
	"time"
)

// gcraReads simulates a client under a GCRA quota of rate bytes per second: requests of
// size bytes, at most inflight unanswered, each response read after a latency drawn by
// latency (never negative), the client pausing between requests as pause draws (its debt
// drains in long pauses: the runs break). After: the client waits throttles out itself;
// else the broker holds each response for its throttle.
func gcraReads(rng *rand.Rand, rate float64, size int64, n int, after bool, latency, pause func() time.Duration) []ThrottledRead {
	start := time.Unix(1000, 0)
	burst := 100 * time.Millisecond
	var tat time.Time // the bucket's theoretical arrival time
	now := start
	var reads []ThrottledRead
	for range n {
		now = now.Add(pause())
		if tat.Before(now) {
			tat = now
		}
		tat = tat.Add(time.Duration(float64(size) / rate * float64(time.Second)))
		throttle := max(tat.Sub(now)-burst, 0).Truncate(time.Millisecond) // ThrottleMillis
		read := now.Add(latency())
		if !after {
			read = read.Add(throttle) // held back for it
		}
		reads = append(reads, ThrottledRead{At: read, Bytes: size, Throttle: throttle, After: after})
		if after { // the client waits it out before its next request
			now = read.Add(throttle)
		} else {
			now = read
		}
	}
	return SortedReads(reads)
}

// TestHeldRateReadsTheQuotaThroughLatency: whatever the read latencies (never negative)
// and however the client's pauses break its throttled runs, HeldRate reads the quota
// within 1 %. Seeded: the seed is logged.
func TestHeldRateReadsTheQuotaThroughLatency(t *testing.T) {
	const rate = 2 << 20
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	for _, tc := range []struct {
		name    string
		latency func() time.Duration
		pause   func() time.Duration
	}{
		{"quiet", func() time.Duration { return time.Duration(rng.IntN(300)) * time.Microsecond }, func() time.Duration { return 0 }},
		{"stalls", func() time.Duration {
			if rng.IntN(10) == 0 {
				return time.Duration(50+rng.IntN(200)) * time.Millisecond // a descheduled reader
			}
			return time.Duration(rng.IntN(5)) * time.Millisecond
		}, func() time.Duration { return 0 }},
		{"broken runs", func() time.Duration { return time.Duration(rng.IntN(20)) * time.Millisecond }, func() time.Duration {
			if rng.IntN(10) == 0 {
				return time.Duration(100+rng.IntN(400)) * time.Millisecond // the debt drains: a run ends
			}
			return 0
		}},
	} {
		for _, after := range []bool{true, false} {
			reads := gcraReads(rng, rate, 64<<10, 1000, after, tc.latency, tc.pause)
			got, span := HeldRate(reads, reads[0].At)
			t.Logf("%s, after=%v: %.2f %% of the quota over %v", tc.name, after, 100*got/rate, span.Round(time.Millisecond))
			if got < 0.99*rate || got > 1.01*rate || span < time.Second {
				t.Errorf("%s, after=%v: held rate %.0f B/s over %v, want %d B/s +-1 %%", tc.name, after, got, span, rate)
			}
		}
	}
	if got, span := HeldRate(nil, time.Time{}); got != 0 || span != 0 {
		t.Errorf("no reads: %v over %v", got, span)
	}
}
