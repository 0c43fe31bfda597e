package client

import "testing"

// TestSentUnresolved: a partition's room for new batches counts every batch sent since its
// oldest unacknowledged one (in flight, waiting to go again, or acknowledged behind it),
// capped at InflightBatchesMax, and stops at the first batch never sent.
func TestSentUnresolved(t *testing.T) {
	batches := func(states ...string) *partState {
		ps := &partState{}
		for _, s := range states {
			b := &sealedBatch{}
			switch s {
			case "inflight":
				b.state, b.sent = batchInflight, true
			case "retry": // its connection died: queued to go again
				b.state, b.sent = batchQueued, true
			case "acked":
				b.state, b.sent = batchAcked, true
			case "new":
				b.state = batchQueued
			}
			ps.sealed = append(ps.sealed, b)
		}
		return ps
	}
	for _, tc := range []struct {
		states []string
		want   int
	}{
		{nil, 0},
		{[]string{"new", "new"}, 0},
		// Nothing in flight, yet four batches may still go again: one slot left.
		{[]string{"retry", "retry", "acked", "retry", "new", "new"}, 4},
		{[]string{"inflight", "retry", "acked", "acked", "retry", "acked", "new"}, InflightBatchesMax},
	} {
		if got := sentUnresolved(batches(tc.states...)); got != tc.want {
			t.Errorf("%v: %d, want %d", tc.states, got, tc.want)
		}
	}
}
