package brokertest

import (
	"slices"
	"testing"
	"time"
)

// CheckTenants is the verdict of a quota test with two tenants: the greedy one's measured
// rate got (bytes per second) must be within 10 % of its quota rate, and the calm one's
// median latency beside it (during) must stay within 4x its median alone (baseline) plus
// 10 ms — loose, for a shared test machine. It logs the numbers either way.
func CheckTenants(tb testing.TB, got float64, rate int64, baseline, during []time.Duration) {
	tb.Helper()
	if got < 0.9*float64(rate) || got > 1.1*float64(rate) {
		tb.Errorf("greedy tenant at %.0f B/s, want %d +-10%%", got, rate)
	}
	base, busy := median(baseline), median(during)
	tb.Logf("calm tenant latency p50: %v alone, %v beside the throttled greedy tenant", base, busy)
	if busy > 4*base+10*time.Millisecond {
		tb.Errorf("calm tenant's latency went from %v to %v", base, busy)
	}
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}
