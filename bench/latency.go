package bench

import (
	"fmt"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Latency histograms record nanoseconds from 1 ns to latencyMaxNs with three significant
// digits (0.1% value error). One hour covers every stall worth reporting; a larger value is
// clamped to the maximum and counted in Clamped so the report can say so.
const (
	latencyMinNs    = 1
	latencyMaxNs    = int64(time.Hour)
	latencySigFigs  = 3
	percentileCount = 6
)

// ReportedPercentiles are the quantiles every report prints, in order.
var ReportedPercentiles = [percentileCount]float64{50, 90, 99, 99.9, 99.99, 100}

// Latency is an HdrHistogram of durations. It is not safe for concurrent use: each goroutine
// records into its own and Merge combines them at the end.
type Latency struct {
	hist    *hdrhistogram.Histogram
	Clamped int64 // values above latencyMaxNs, recorded as latencyMaxNs
}

// NewLatency returns an empty histogram.
func NewLatency() *Latency {
	return &Latency{hist: hdrhistogram.New(latencyMinNs, latencyMaxNs, latencySigFigs)}
}

// Record adds one duration. Negative durations (clock steps) count as zero.
func (l *Latency) Record(d time.Duration) {
	ns := int64(d)
	if ns < latencyMinNs {
		ns = latencyMinNs
	}
	if ns > latencyMaxNs {
		ns = latencyMaxNs
		l.Clamped++
	}
	if err := l.hist.RecordValue(ns); err != nil {
		panic(fmt.Sprintf("bench: histogram rejected %d ns within its range: %v", ns, err))
	}
}

// Merge adds every value of other into l.
func (l *Latency) Merge(other *Latency) {
	l.hist.Merge(other.hist)
	l.Clamped += other.Clamped
}

// Count is the number of recorded values.
func (l *Latency) Count() int64 { return l.hist.TotalCount() }

// Quantile returns the value at percentile q (0 < q <= 100).
func (l *Latency) Quantile(q float64) time.Duration {
	if l.hist.TotalCount() == 0 {
		return 0
	}
	if q >= 100 {
		return time.Duration(l.hist.Max())
	}
	return time.Duration(l.hist.ValueAtQuantile(q))
}

// Mean is the average recorded value.
func (l *Latency) Mean() time.Duration { return time.Duration(l.hist.Mean()) }

// Summary is the JSON form of a histogram: percentiles in microseconds, plus a curve of
// (percentile, value) points for plots.
type Summary struct {
	Count   int64        `json:"count"`
	MeanUs  float64      `json:"mean_us"`
	P50Us   float64      `json:"p50_us"`
	P90Us   float64      `json:"p90_us"`
	P99Us   float64      `json:"p99_us"`
	P999Us  float64      `json:"p99_9_us"`
	P9999Us float64      `json:"p99_99_us"`
	MaxUs   float64      `json:"max_us"`
	Clamped int64        `json:"clamped,omitempty"`
	Curve   []CurvePoint `json:"curve,omitempty"`
}

// CurvePoint is one point of a latency percentile curve.
type CurvePoint struct {
	Percentile float64 `json:"p"`
	ValueUs    float64 `json:"us"`
}

// curvePercentiles are the points of the percentile curve, spaced evenly on the
// "number of nines" axis that latency plots use (0, 90, 99, 99.9, ...).
var curvePercentiles = []float64{0, 25, 50, 75, 90, 95, 99, 99.5, 99.9, 99.95, 99.99, 99.995, 99.999, 100}

func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// Summarize computes the reported percentiles and the curve.
func (l *Latency) Summarize() Summary {
	s := Summary{
		Count:   l.Count(),
		MeanUs:  micros(l.Mean()),
		P50Us:   micros(l.Quantile(50)),
		P90Us:   micros(l.Quantile(90)),
		P99Us:   micros(l.Quantile(99)),
		P999Us:  micros(l.Quantile(99.9)),
		P9999Us: micros(l.Quantile(99.99)),
		MaxUs:   micros(l.Quantile(100)),
		Clamped: l.Clamped,
	}
	if s.Count == 0 {
		return s
	}
	for _, p := range curvePercentiles {
		v := l.Quantile(p)
		if p == 0 {
			v = time.Duration(l.hist.Min())
		}
		s.Curve = append(s.Curve, CurvePoint{Percentile: p, ValueUs: micros(v)})
	}
	return s
}
