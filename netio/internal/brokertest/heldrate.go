package brokertest

import (
	"math"
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
// hold, with a throttle no larger). What is left is each response's read latency: never
// negative (a response is read after the broker charged and, if held, released it), so a
// run's points all lie on or right of its line, the reads with the least latency on it.
// The rate is the slope of the lines, one per run, that lie left of every point of their
// run with the least total gap (a frontier fit). A least-squares fit spread the latency
// over all points instead and read low where runs were short and reads late: at load
// 22-32 (session 14) it read 70.4 % (-race, 1 of 15 runs) and 84.9 % (1 of 19) of the quota
// in TestKgoProduceQuota; over the reads of 57 runs under -race at load 18-33 it read
// 85.8-100.7 % where the frontier reads 99.9-100.2 % (85.8 % the one run that failed), and
// over synthetic reads broken into runs of a few responses, 84-96 % where the frontier
// reads 89-102 %. (The rate from a run's two
// ends alone came within 7 % of the bound once at load 20.)
func HeldRate(reads []ThrottledRead, from time.Time) (bytesPerSec float64, span time.Duration) {
	runs := heldRuns(reads, from)
	if len(runs) == 0 {
		return 0, 0
	}
	for _, run := range runs {
		span += time.Duration((run[len(run)-1].sec - run[0].sec) * float64(time.Second))
	}
	// gap is convex in seconds per byte (a sum of maxima of linear functions less linear
	// ones): a ternary search over 1 KB/s .. 1 GB/s finds its least.
	lo, hi := 1e-9, 1e-3
	for range heldRateSearchSteps {
		m1, m2 := lo+(hi-lo)/3, hi-(hi-lo)/3
		if heldGap(runs, m1) < heldGap(runs, m2) {
			hi = m2
		} else {
			lo = m1
		}
	}
	return 2 / (lo + hi), span
}

// heldRateSearchSteps narrows HeldRate's search range by (2/3)^200, far below a float's
// resolution of the rate.
const heldRateSearchSteps = 200

// heldPoint is a throttled response's dated TAT (seconds after from) and the bytes charged
// up to and including it.
type heldPoint struct{ sec, bytes float64 }

// heldRuns returns the runs of throttled responses read at or after from, as points that lie
// on lines of slope rate, each run with its own offset, but for their read latency.
func heldRuns(reads []ThrottledRead, from time.Time) [][]heldPoint {
	tat := func(r ThrottledRead) time.Time {
		if r.After {
			return r.At.Add(r.Throttle)
		}
		return r.At
	}
	var runs [][]heldPoint
	var run []heldPoint
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
		run = append(run, heldPoint{tat(r).Sub(from).Seconds(), float64(charged)})
	}
	if len(run) > 1 {
		runs = append(runs, run)
	}
	return runs
}

// heldGap is the total time by which the runs' points lie right of lines of secondsPerByte
// laid, one per run, through the run's point furthest left of it: the read latencies those
// lines imply, beyond each run's least.
func heldGap(runs [][]heldPoint, secondsPerByte float64) float64 {
	total := 0.0
	for _, run := range runs {
		lead := math.Inf(-1)
		for _, p := range run {
			lead = max(lead, p.bytes*secondsPerByte-p.sec)
		}
		for _, p := range run {
			total += lead - (p.bytes*secondsPerByte - p.sec)
		}
	}
	return total
}

// SortedReads returns reads ordered by read time: for clients whose responses are recorded
// by several goroutines, each after its own call returned.
func SortedReads(reads []ThrottledRead) []ThrottledRead {
	s := slices.Clone(reads)
	slices.SortStableFunc(s, func(a, b ThrottledRead) int { return a.At.Compare(b.At) })
	return s
}
