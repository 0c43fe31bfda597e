package bench

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Clock is the time source of the producer loop; tests inject a fake one.
type Clock interface {
	Now() time.Time
	// SleepUntil returns at t or when ctx ends (with ctx's error).
	SleepUntil(ctx context.Context, t time.Time) error
}

// RealClock is the wall clock.
type RealClock struct{}

// Now is time.Now.
func (RealClock) Now() time.Time { return time.Now() }

// SleepUntil sleeps on a timer. The kernel's timer slack (~50 µs) shows up as publish delay;
// that is honest: it is when the message really left.
func (RealClock) SleepUntil(ctx context.Context, t time.Time) error {
	wait := time.Until(t)
	if wait <= 0 {
		return ctx.Err()
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// pacer hands out intended send times on a fixed schedule: message n is due at
// start + n×interval, whatever happened to message n-1. A stall therefore shows up as
// publish delay on every message that should have gone out during it — the correction for
// coordinated omission. A pacer that restarted its schedule after a stall would hide it.
type pacer struct {
	start      time.Time
	intervalNs float64
	sent       int64 // messages scheduled so far; owned by the producer goroutine
}

func newPacer(start time.Time, ratePerSecond float64) *pacer {
	return &pacer{start: start, intervalNs: 1e9 / ratePerSecond}
}

// next returns the intended send time of the next message.
func (p *pacer) next() time.Time {
	due := p.start.Add(time.Duration(float64(p.sent) * p.intervalNs))
	p.sent++
	return due
}

// measureGate says whether results are being recorded (after warm-up, before the end).
type measureGate struct{ on atomic.Bool }

// counters are the run's totals; producers and consumers add, the sampler reads.
type counters struct {
	published      atomic.Int64
	publishedBytes atomic.Int64
	publishErrors  atomic.Int64
	consumed       atomic.Int64
	consumedBytes  atomic.Int64
	badPayloads    atomic.Int64
}

// producerStats are one producer's histograms. Acknowledgements arrive on driver goroutines,
// so recording takes the mutex; it is uncontended apart from the final merge.
type producerStats struct {
	mu              sync.Mutex // guards the histograms
	publish         *Latency   // ack − actual send
	publishIntended *Latency   // ack − intended send (latency as the schedule saw it)
	delay           *Latency   // actual send − intended send
}

func newProducerStats() *producerStats {
	return &producerStats{publish: NewLatency(), publishIntended: NewLatency(), delay: NewLatency()}
}

// producerLoop is one producer's send loop: pace (if rate-limited), take an in-flight slot,
// stamp the payload, send, and on the acknowledgement record latency.
type producerLoop struct {
	clock       Clock
	pacer       *pacer // nil at max rate
	inFlight    chan struct{}
	stats       *producerStats
	totals      *counters
	gate        *measureGate
	messageSize int64
	messagesMax int64 // stop after this many sends; 0 = until ctx ends
	bytesMax    int64 // stop once totals.publishedBytes reaches this; 0 = no limit (backlog fill)
	// send transmits one message stamped with sentAt; done reports its acknowledgement.
	send func(sentAt time.Time, done func(error)) error
}

func (l *producerLoop) run(ctx context.Context) error {
	for sent := int64(0); l.messagesMax == 0 || sent < l.messagesMax; sent++ {
		if l.bytesMax > 0 && l.totals.publishedBytes.Load() >= l.bytesMax {
			return nil
		}
		var intended time.Time
		if l.pacer != nil {
			intended = l.pacer.next()
			if err := l.clock.SleepUntil(ctx, intended); err != nil {
				return nil
			}
		}
		select {
		case l.inFlight <- struct{}{}:
		case <-ctx.Done():
			return nil
		}
		actual := l.clock.Now()
		if l.pacer == nil {
			intended = actual
		}
		measuring := l.gate.on.Load()
		if measuring && l.pacer != nil {
			l.stats.mu.Lock()
			l.stats.delay.Record(actual.Sub(intended))
			l.stats.mu.Unlock()
		}
		err := l.send(actual, func(err error) {
			ack := l.clock.Now()
			<-l.inFlight
			if err != nil {
				l.totals.publishErrors.Add(1)
				return
			}
			l.totals.published.Add(1)
			l.totals.publishedBytes.Add(l.messageSize)
			if measuring {
				l.stats.mu.Lock()
				l.stats.publish.Record(ack.Sub(actual))
				l.stats.publishIntended.Record(ack.Sub(intended))
				l.stats.mu.Unlock()
			}
		})
		if err != nil {
			<-l.inFlight
			if ctx.Err() != nil {
				return nil
			}
			l.totals.publishErrors.Add(1)
			return err
		}
	}
	return nil
}
