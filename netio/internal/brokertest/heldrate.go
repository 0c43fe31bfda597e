package brokertest

import (
	"slices"
	"time"
)

// ThrottledRead is one produce response as a quota test's client read it.
type ThrottledRead struct {
	At       time.Time     // when the client had read it
	Bytes    int64         // what the quota charged for its request (the frame without its size prefix)
	Throttle time.Duration // its throttle time (0: the client was within its rate)
	// After: the client waits the throttle out after the response (Kafka's KIP-219);
	// otherwise the broker held the response back for it.
	After bool
	// WriteHeld: the broker holds a whole write for the largest throttle of the responses
	// in it (the Kafka listener), so only the last response of a write dates the account;
	// the ringlog listener holds each response for its own throttle.
	WriteHeld bool
}

// HeldRate is the rate a broker held a client to over the responses read at or after
// from, in the broker's own account, and the span of time that account covers. reads are
// in the order the client read them.
//
// The quota is a GCRA bucket: a request of n bytes moves its theoretical arrival time (TAT)
// n/rate forward, and a response throttled for d was charged when TAT stood d past the
// burst. Its throttle thus dates TAT, and between two throttled responses the bytes charged
// are rate x (the difference of their TATs) — whatever the client or the machine did in
// between, so long as the client stayed in debt (a response charged with no debt resets
// TAT to the clock: runs of throttled responses only are counted). A wall-clock rate of
// acknowledgements instead counts the debt the client had at the window's two ends:
// a stall of the loaded test machine before the window left credit that the client spent
// inside it (a run measured 114 %), a stall inside it left the client behind (74.9 %).
//
// A response dates TAT once read: one the client waits out (After) at its read time plus
// its throttle; a held one at its read time, when it was held for its own throttle (with
// WriteHeld, the last of a write's responses: the next response was charged after that
// hold, with a throttle no larger). What is left is each response's read latency, which
// the fit below spreads over all of them (the rate from a run's two ends alone came within
// 7 % of the bound once at load 20).
func HeldRate(reads []ThrottledRead, from time.Time) (bytesPerSec float64, span time.Duration) {
	tat := func(r ThrottledRead) time.Time {
		if r.After {
			return r.At.Add(r.Throttle)
		}
		return r.At
	}
	// Each run of throttled responses gives points (TAT, bytes charged so far) on a line
	// of slope rate; the slope is fitted over all of them, a run's own offset apart, so
	// that the read latency of no single response (a stalled read at a run's end) sways it.
	type point struct{ sec, bytes float64 }
	var runs [][]point
	var run []point
	var charged int64
	for i := 0; i+1 < len(reads); i++ {
		r := reads[i]
		charged += r.Bytes
		switch {
		case r.At.Before(from):
			continue
		case r.Throttle == 0: // the run ends: the client had credit here
			if len(run) > 1 {
				runs = append(runs, run)
			}
			run = nil
			continue
		case r.WriteHeld && reads[i+1].Throttle > r.Throttle:
			continue // not the last of its write
		}
		run = append(run, point{tat(r).Sub(from).Seconds(), float64(charged)})
	}
	if len(run) > 1 {
		runs = append(runs, run)
	}
	var sxy, sxx float64
	for _, run := range runs {
		var mx, my float64
		for _, p := range run {
			mx, my = mx+p.sec/float64(len(run)), my+p.bytes/float64(len(run))
		}
		for _, p := range run {
			sxy += (p.sec - mx) * (p.bytes - my)
			sxx += (p.sec - mx) * (p.sec - mx)
		}
		span += time.Duration((run[len(run)-1].sec - run[0].sec) * float64(time.Second))
	}
	if sxx == 0 {
		return 0, 0
	}
	return sxy / sxx, span
}

// SortedReads returns reads ordered by read time: for clients whose responses are recorded
// by several goroutines, each after its own call returned.
func SortedReads(reads []ThrottledRead) []ThrottledRead {
	s := slices.Clone(reads)
	slices.SortStableFunc(s, func(a, b ThrottledRead) int { return a.At.Compare(b.At) })
	return s
}
