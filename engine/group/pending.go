package group

import (
	"fmt"
	"slices"
	"time"
)

// Pending members (KIP-394, Kafka's JoinGroup v4+). A new dynamic member's first JoinGroup
// does not add it: the coordinator hands it a member id with MEMBER_ID_REQUIRED and adds it
// when it joins again with that id. A client whose first join was cut short (its caller
// gave up before the answer came) therefore leaves only a pending id behind, never a
// member that the others must wait for and that the leader assigns partitions to.
//
// What Kafka does, and where ringlog differs (apache/kafka group-coordinator,
// GroupMetadataManager.classicGroupJoinNewDynamicMember and ClassicGroup):
//   - the id is kept in the group's pendingJoinMembers until the member comes back or its
//     session timeout passes (the same here);
//   - static members (group.instance.id) skip the step (the same);
//   - the group's size limit is checked when the member comes back (the same; ringlog also
//     refuses at once when the group is already full);
//   - ClassicGroup.hasAllMembersJoined is false while any id is pending, so a join phase
//     waits for every pending member up to its session timeout. ringlog waits at most
//     PendingJoinWait (1 s) after the id was handed out: long enough for a client coming
//     straight back (a fleet starting together still forms one generation), short enough
//     that a stray does not hold a rebalance for a session timeout;
//   - Kafka does not bound the pending ids; ringlog bounds them per group (GroupMembersMax,
//     the oldest dropped) and per coordinator (PendingMembersMax, COORDINATOR_NOT_AVAILABLE
//     beyond it). Each operation on a group's pending ids scans at most GroupMembersMax of
//     them.

// pendingMember is a member id handed out with MEMBER_ID_REQUIRED and not yet used.
type pendingMember struct {
	id        string
	expires   time.Time // dropped when reached (its session timeout after the hand-out)
	waitUntil time.Time // a join phase waits for it until then; zero once passed (see tick)
}

// requireMemberID answers a new dynamic member's JoinGroup with MEMBER_ID_REQUIRED and a
// member id it may join with until its session timeout passes.
func (c *Coordinator) requireMemberID(g *group, r JoinGroup) {
	if c.pendingIDs >= c.cfg.PendingMembersMax {
		c.reply(r.ReqID, JoinGroupResponse{Err: CodeCoordinatorNotAvailable, Generation: -1})
		return
	}
	if len(g.pending) >= c.cfg.GroupMembersMax {
		g.pending = slices.Delete(g.pending, 0, 1) // the oldest: most likely a stray
		c.pendingIDs--
	}
	id := g.newMemberID(r.ClientID, c.cfg.Incarnation, &c.memberSeq)
	p := pendingMember{id: id, expires: c.now.Add(r.SessionTimeout)}
	if c.cfg.PendingJoinWait > 0 {
		p.waitUntil = minTime(c.now.Add(c.cfg.PendingJoinWait), p.expires)
	}
	g.pending = append(g.pending, p)
	c.pendingIDs++
	c.reply(r.ReqID, JoinGroupResponse{Err: CodeMemberIDRequired, MemberID: id, Generation: -1})
}

// takePending removes id from g's pending ids and reports whether it was there.
func (c *Coordinator) takePending(g *group, id string) bool {
	i := slices.IndexFunc(g.pending, func(p pendingMember) bool { return p.id == id })
	if i < 0 {
		return false
	}
	g.pending = slices.Delete(g.pending, i, i+1)
	c.pendingIDs--
	return true
}

// dropPending forgets all of g's pending ids (the group is deleted or unloaded).
func (c *Coordinator) dropPending(g *group) {
	c.pendingIDs -= len(g.pending)
	g.pending = nil
}

// tickPending drops g's expired pending ids and ends the join-phase wait of those whose
// wait passed; it reports whether anything changed.
func (c *Coordinator) tickPending(g *group) bool {
	changed := false
	kept := g.pending[:0]
	for _, p := range g.pending {
		if !p.expires.After(c.now) {
			c.pendingIDs--
			changed = true
			continue
		}
		if !p.waitUntil.IsZero() && !p.waitUntil.After(c.now) {
			p.waitUntil = time.Time{}
			changed = true
		}
		kept = append(kept, p)
	}
	clear(g.pending[len(kept):])
	g.pending = kept
	return changed
}

// awaitsPending reports whether a join phase still waits for a pending member.
func (g *group) awaitsPending(now time.Time) bool {
	for _, p := range g.pending {
		if p.waitUntil.After(now) {
			return true
		}
	}
	return false
}

// checkPendingInvariants panics unless the coordinator's count matches its groups'.
func (c *Coordinator) checkPendingInvariants() {
	n := 0
	for _, g := range c.groups {
		n += len(g.pending)
		if len(g.pending) > c.cfg.GroupMembersMax {
			panic(fmt.Sprintf("group %q: %d pending member ids, at most %d", g.id, len(g.pending), c.cfg.GroupMembersMax))
		}
		for _, p := range g.pending {
			if g.byID[p.id] != nil {
				panic(fmt.Sprintf("group %q: %q is both a member and pending", g.id, p.id))
			}
		}
	}
	if n != c.pendingIDs || n > c.cfg.PendingMembersMax {
		panic(fmt.Sprintf("group: %d pending member ids in groups, %d counted, at most %d", n, c.pendingIDs, c.cfg.PendingMembersMax))
	}
}
