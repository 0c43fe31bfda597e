package bench

import (
	"context"
	"testing"
	"time"
)

// fakeClock advances only when told; SleepUntil jumps to the wake-up time.
type fakeClock struct{ now time.Time }

func (c *fakeClock) Now() time.Time { return c.now }
func (c *fakeClock) SleepUntil(ctx context.Context, t time.Time) error {
	if t.After(c.now) {
		c.now = t
	}
	return ctx.Err()
}
func (c *fakeClock) advance(d time.Duration) { c.now = c.now.Add(d) }

func TestPacerKeepsItsScheduleAfterAStall(t *testing.T) {
	start := time.Unix(1000, 0)
	p := newPacer(start, 1000) // 1 ms apart
	for i := range 5 {
		if due := p.next(); due != start.Add(time.Duration(i)*time.Millisecond) {
			t.Fatalf("message %d due %v", i, due.Sub(start))
		}
	}
}

// TestProducerLoopRecordsPublishDelay runs the real producer loop on a fake clock: 1000 msg/s,
// and message 10's send stalls for 100 ms. Every message due during the stall must show the
// delay it suffered (the coordinated-omission correction), and publish latency measured from
// the actual send must not.
func TestProducerLoopRecordsPublishDelay(t *testing.T) {
	clock := &fakeClock{now: time.Unix(1000, 0)}
	var totals counters
	var gate measureGate
	gate.on.Store(true)
	stats := newProducerStats()
	sent := 0
	loop := &producerLoop{
		clock: clock, pacer: newPacer(clock.now, 1000), inFlight: make(chan struct{}, 1),
		stats: stats, totals: &totals, gate: &gate, messageSize: 100, messagesMax: 1000,
		send: func(_ time.Time, done func(error)) error {
			sent++
			if sent == 10 {
				clock.advance(100 * time.Millisecond) // the broker stalls on this one
			} else {
				clock.advance(10 * time.Microsecond)
			}
			done(nil)
			return nil
		},
	}
	if err := loop.run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if totals.published.Load() != 1000 || totals.publishedBytes.Load() != 100_000 {
		t.Fatalf("published %d (%d bytes)", totals.published.Load(), totals.publishedBytes.Load())
	}
	delay := stats.delay
	if delay.Count() != 1000 {
		t.Fatalf("delay count %d", delay.Count())
	}
	// Messages 10..~109 were due during the stall: their delays run from ~99 ms down to ~0.
	if max := delay.Quantile(100); max < 99*time.Millisecond || max > 101*time.Millisecond {
		t.Errorf("max delay %v, want ~100ms", max)
	}
	// ~100 of 1000 messages were due during the stall, with delays spread evenly from 100 ms
	// down to 0: the top 5% waited at least ~50 ms.
	if p95 := delay.Quantile(95); p95 < 45*time.Millisecond || p95 > 55*time.Millisecond {
		t.Errorf("p95 delay %v, want ~50ms", p95)
	}
	if p50 := delay.Quantile(50); p50 > time.Millisecond {
		t.Errorf("p50 delay %v: the schedule should have caught up", p50)
	}
	// Latency from the actual send sees one slow message; from the intended time, ~100.
	if p99 := stats.publish.Quantile(99); p99 > time.Millisecond {
		t.Errorf("publish p99 %v should hide the stall (only one message was slow)", p99)
	}
	if p95 := stats.publishIntended.Quantile(95); p95 < 45*time.Millisecond {
		t.Errorf("publish-from-intended p95 %v should show the stall", p95)
	}
}

func TestProducerLoopMaxRateRecordsNoDelay(t *testing.T) {
	clock := &fakeClock{now: time.Unix(1000, 0)}
	var totals counters
	var gate measureGate
	gate.on.Store(true)
	stats := newProducerStats()
	loop := &producerLoop{
		clock: clock, inFlight: make(chan struct{}, 4), stats: stats, totals: &totals, gate: &gate,
		messageSize: 10, messagesMax: 50,
		send: func(_ time.Time, done func(error)) error { clock.advance(time.Millisecond); done(nil); return nil },
	}
	if err := loop.run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if stats.delay.Count() != 0 || stats.publish.Count() != 50 {
		t.Fatalf("delay %d publish %d", stats.delay.Count(), stats.publish.Count())
	}
}

func TestProducerLoopBoundsInFlightAndCountsErrors(t *testing.T) {
	clock := &fakeClock{now: time.Unix(1000, 0)}
	var totals counters
	var gate measureGate
	stats := newProducerStats()
	var pending []func(error)
	ctx, cancel := context.WithCancel(context.Background())
	loop := &producerLoop{
		clock: clock, inFlight: make(chan struct{}, 3), stats: stats, totals: &totals, gate: &gate,
		messageSize: 10, messagesMax: 100,
		send: func(_ time.Time, done func(error)) error {
			pending = append(pending, done)
			if len(pending) == 3 {
				cancel() // the fourth send would block on the in-flight limit
			}
			return nil
		},
	}
	if err := loop.run(ctx); err != nil {
		t.Fatal(err)
	}
	if len(pending) != 3 {
		t.Fatalf("%d sends in flight with a limit of 3", len(pending))
	}
	pending[0](nil)
	pending[1](context.DeadlineExceeded)
	if totals.published.Load() != 1 || totals.publishErrors.Load() != 1 || stats.publish.Count() != 0 {
		t.Fatalf("published %d errors %d recorded %d (gate off)", totals.published.Load(), totals.publishErrors.Load(), stats.publish.Count())
	}
}

func BenchmarkProducerLoopMaxRate(b *testing.B) {
	var totals counters
	var gate measureGate
	gate.on.Store(true)
	loop := &producerLoop{
		clock: RealClock{}, inFlight: make(chan struct{}, 64), stats: newProducerStats(), totals: &totals,
		gate: &gate, messageSize: 1024, messagesMax: int64(b.N),
		send: func(_ time.Time, done func(error)) error { done(nil); return nil },
	}
	b.ReportAllocs()
	b.SetBytes(1024)
	b.ResetTimer()
	if err := loop.run(context.Background()); err != nil {
		b.Fatal(err)
	}
}
