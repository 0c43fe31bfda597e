package brokertest

import (
	"slices"
	"testing"
	"time"
)

// CheckTenants is the verdict of a quota test with two tenants: the greedy one's measured
// rate got (bytes per second) must be within 10 % of its quota rate, and the calm one's
// median latency beside it (during) must stay within 4x its median alone (baseline) plus
// the throttle of one of the greedy tenant's requests (requestBytes at rate: the least a
// reply held back or muted behind the greedy tenant's throttle would wait). It logs the
// numbers either way.
//
// That allowance comes from the quota, not from the machine: the calm tenant's latency
// beside the greedy one also grows with the CPU the greedy tenant takes on a loaded
// machine (a fixed 10 ms let a run at load 20 come within 7 % of failing at 22 ms against
// a 3.4 ms baseline), while a tenant held behind another's throttle waits a throttle.
func CheckTenants(tb testing.TB, got float64, rate, requestBytes int64, baseline, during []time.Duration) {
	tb.Helper()
	if got < 0.9*float64(rate) || got > 1.1*float64(rate) {
		tb.Errorf("greedy tenant at %.0f B/s, want %d +-10%%", got, rate)
	}
	base, busy := median(baseline), median(during)
	throttle := time.Duration(requestBytes) * time.Second / time.Duration(rate)
	tb.Logf("calm tenant latency p50: %v alone, %v beside the throttled greedy tenant (bound %v)", base, busy, 4*base+throttle)
	if busy > 4*base+throttle {
		tb.Errorf("calm tenant's latency went from %v to %v; want at most 4x plus one greedy request's throttle (%v)", base, busy, throttle)
	}
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}
