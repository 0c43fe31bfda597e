package shard

import (
	"testing"

	"github.com/ringlog/ringlog/ring"
)

// reportLostWakeups reports the shard loops' waits that ran to the ring's 10 ms bound
// during the timed part, and those that then found completions (ring.Stats.LostWakeups:
// docs/ring.md, "Bounded waits"), and the blocking turns that began with completions
// reaped outside the loop (ring.Stats.BacklogTurns: each one a wait for nothing before
// session 15).
func reportLostWakeups(b *testing.B, before, after []ring.Stats) {
	var expired, lost, backlog uint64
	for i := range after {
		expired += after[i].WaitsExpired - before[i].WaitsExpired
		lost += after[i].LostWakeups - before[i].LostWakeups
		backlog += after[i].BacklogTurns - before[i].BacklogTurns
	}
	b.ReportMetric(float64(expired), "waits-expired")
	b.ReportMetric(float64(lost), "lost-wakeups")
	b.ReportMetric(float64(backlog), "backlog-turns")
}
