package group

import (
	"cmp"
	"container/heap"
	"time"
)

// Timers: Tick and NextDeadline must not scan every group (10 000 groups cost 7.6 ms a
// scan on the shared 2-core test machine, too much for a shard loop ticking often). Each
// group's next deadline sits in a min-heap instead. Entries are lazy: an entry may be
// earlier than its group's real deadline (a heartbeat moved it later) or stale (the group
// is gone); popping one recomputes the group's deadline and schedules it again. The rule
// that keeps it correct: after every input that touches a group, schedule(g), so that the
// heap always holds an entry at or before each group's next deadline (checked by
// checkInvariants).

// timerEntry is one heap entry: group g has work at or after at.
type timerEntry struct {
	at time.Time
	g  *group
}

// timerHeap orders entries by time, then group id (so Tick runs due groups in a
// deterministic order).
type timerHeap []timerEntry

func (h timerHeap) Len() int { return len(h) }
func (h timerHeap) Less(i, j int) bool {
	if c := h[i].at.Compare(h[j].at); c != 0 {
		return c < 0
	}
	return cmp.Less(h[i].g.id, h[j].g.id)
}
func (h timerHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *timerHeap) Push(x any)   { *h = append(*h, x.(timerEntry)) }
func (h *timerHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = timerEntry{}
	*h = old[:len(old)-1]
	return e
}

// schedule makes sure the heap holds an entry at or before g's next deadline.
func (c *Coordinator) schedule(g *group) {
	if c.groups[g.id] != g {
		return
	}
	d, ok := g.nextDeadline(c.cfg)
	if !ok || (g.scheduled && !g.scheduledAt.After(d)) {
		return
	}
	heap.Push(&c.timers, timerEntry{at: d, g: g})
	g.scheduled, g.scheduledAt = true, d
}

// popTimer removes the earliest entry and returns its group if it is still live. The group
// no longer counts as scheduled when this was its earliest entry.
func (c *Coordinator) popTimer() (*group, time.Time) {
	e := heap.Pop(&c.timers).(timerEntry)
	g := e.g
	if c.groups[g.id] != g {
		return nil, e.at
	}
	if g.scheduled && g.scheduledAt.Equal(e.at) {
		g.scheduled = false
	}
	return g, e.at
}
