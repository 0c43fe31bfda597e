package shard

import (
	"testing"

	"github.com/ringlog/ringlog/ring"
)

// reportLostWakeups reports the shard loops' waits that ran to the ring's 10 ms bound
// during the timed part, and those that then found completions (ring.Stats.LostWakeups:
// docs/ring.md, "Bounded waits").
func reportLostWakeups(b *testing.B, before, after []ring.Stats) {
	var expired, lost uint64
	for i := range after {
		expired += after[i].WaitsExpired - before[i].WaitsExpired
		lost += after[i].LostWakeups - before[i].LostWakeups
	}
	b.ReportMetric(float64(expired), "waits-expired")
	b.ReportMetric(float64(lost), "lost-wakeups")
}
