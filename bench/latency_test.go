package bench

import (
	"math"
	"testing"
	"time"
)

func TestLatencyPercentilesOfKnownDistribution(t *testing.T) {
	l := NewLatency()
	// 1..10000 µs once each: pN is N% of 10000 µs.
	for i := 1; i <= 10000; i++ {
		l.Record(time.Duration(i) * time.Microsecond)
	}
	s := l.Summarize()
	check := func(name string, got, want float64) {
		t.Helper()
		if math.Abs(got-want)/want > 0.002 { // 3 significant digits
			t.Errorf("%s = %.1f µs, want %.1f", name, got, want)
		}
	}
	check("p50", s.P50Us, 5000)
	check("p90", s.P90Us, 9000)
	check("p99", s.P99Us, 9900)
	check("p99.9", s.P999Us, 9990)
	check("max", s.MaxUs, 10000)
	check("mean", s.MeanUs, 5000.5)
	if s.Count != 10000 || len(s.Curve) != len(curvePercentiles) {
		t.Fatalf("count %d curve %d", s.Count, len(s.Curve))
	}
	for i := 1; i < len(s.Curve); i++ {
		if s.Curve[i].ValueUs < s.Curve[i-1].ValueUs {
			t.Fatalf("curve not monotonic at %v", s.Curve[i])
		}
	}
}

func TestLatencyTailAndMerge(t *testing.T) {
	a, b := NewLatency(), NewLatency()
	for range 9999 {
		a.Record(100 * time.Microsecond)
	}
	b.Record(50 * time.Millisecond) // one stall in 10000
	b.Record(2 * time.Hour)         // beyond range: clamped, counted
	b.Record(-time.Second)          // clock step: counted as the minimum
	a.Merge(b)
	if a.Count() != 10002 || a.Clamped != 1 {
		t.Fatalf("count %d clamped %d", a.Count(), a.Clamped)
	}
	if p99 := a.Quantile(99); p99 > 101*time.Microsecond {
		t.Errorf("p99 %v should ignore a 1-in-10000 stall", p99)
	}
	if p9999 := a.Quantile(99.995); p9999 < 49*time.Millisecond {
		t.Errorf("p99.995 %v should show the stall", p9999)
	}
	if max := a.Quantile(100); max < 59*time.Minute {
		t.Errorf("max %v should be the clamped hour", max)
	}
}

func TestLatencyEmpty(t *testing.T) {
	s := NewLatency().Summarize()
	if s.Count != 0 || s.P99Us != 0 || s.Curve != nil {
		t.Fatalf("empty summary %+v", s)
	}
}

func BenchmarkLatencyRecord(b *testing.B) {
	l := NewLatency()
	b.ReportAllocs()
	b.SetBytes(8)
	for i := range b.N {
		l.Record(time.Duration(i%100000) * time.Microsecond)
	}
}
