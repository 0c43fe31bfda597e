package group

import "fmt"

// checkInvariants panics, saying what was expected, if the coordinator's state is one no
// sequence of inputs may produce. Run after every input when invariantsEnabled, and by the
// randomized tests always.
func (c *Coordinator) checkInvariants() {
	var kept int64
	for _, g := range c.groups {
		for _, m := range g.members {
			if m.counted != m.keptBytes() {
				panic(fmt.Sprintf("group: member %q of %q counted as keeping %d bytes, keeps %d", m.id, g.id, m.counted, m.keptBytes()))
			}
			kept += m.counted
		}
		for tp, v := range g.offsets {
			kept += offsetBytes(tp, v)
		}
	}
	if kept != c.stateBytes {
		panic(fmt.Sprintf("group: the groups keep %d bytes, the coordinator counts %d", kept, c.stateBytes))
	}
	for id, g := range c.groups {
		if g.id != id || g.state == Dead {
			panic(fmt.Sprintf("group: %q indexed as %q in state %s", g.id, id, g.state))
		}
		if serving, ok := c.partitions[g.partition]; !ok || !serving {
			panic(fmt.Sprintf("group: %q lives in partition %d, which is not served", id, g.partition))
		}
		g.checkInvariants()
		if d, ok := g.nextDeadline(c.cfg); ok && (!g.scheduled || g.scheduledAt.After(d)) {
			panic(fmt.Sprintf("group: %q has work at %v but its timer is at %v (scheduled %v)", id, d, g.scheduledAt, g.scheduled))
		}
	}
}

func (g *group) checkInvariants() {
	fail := func(format string, args ...any) {
		panic(fmt.Sprintf("group %q (%s, generation %d): ", g.id, g.state, g.generation) + fmt.Sprintf(format, args...))
	}
	if len(g.byID) != len(g.members) {
		fail("%d members listed, %d indexed", len(g.members), len(g.byID))
	}
	statics := 0
	for _, m := range g.members {
		if g.byID[m.id] != m {
			fail("member %q not indexed by its id", m.id)
		}
		if m.instanceID != "" {
			statics++
			if g.static[m.instanceID] != m.id {
				fail("instance %q maps to %q, not to its member %q", m.instanceID, g.static[m.instanceID], m.id)
			}
		}
		if m.awaitingJoin && g.state != PreparingRebalance {
			fail("member %q waits in a join phase outside PreparingRebalance", m.id)
		}
		if m.awaitingSync && g.state != CompletingRebalance {
			fail("member %q waits for an assignment outside CompletingRebalance", m.id)
		}
		if m.awaitingJoin && m.joinReq == 0 || m.awaitingSync && m.syncReq == 0 {
			fail("member %q waits without a request to answer", m.id)
		}
	}
	if statics != len(g.static) {
		fail("%d static members, %d instance ids", statics, len(g.static))
	}
	for id := range g.pendingSync {
		if g.byID[id] == nil {
			fail("pending sync for %q, not a member", id)
		}
	}
	switch g.state {
	case Empty:
		if len(g.members) != 0 {
			fail("%d members", len(g.members))
		}
	case CompletingRebalance, Stable:
		if len(g.members) == 0 || g.byID[g.leader] == nil || g.protocol == "" {
			fail("leader %q, protocol %q, %d members", g.leader, g.protocol, len(g.members))
		}
		if !g.allSupport(g.protocol) {
			fail("protocol %q not supported by every member", g.protocol)
		}
	}
	if g.state != PreparingRebalance && g.initialDelay {
		fail("initial delay outside PreparingRebalance")
	}
}
