package group

import "slices"

// JoinGroup, SyncGroup, Heartbeat and LeaveGroup: the membership side of the coordinator.

func (c *Coordinator) join(r JoinGroup) {
	fail := func(code Code) {
		c.reply(r.ReqID, JoinGroupResponse{Err: code, MemberID: r.MemberID, Generation: -1})
	}
	if code := c.lookupCode(r.Group); code != CodeNone {
		fail(code)
		return
	}
	if r.SessionTimeout < c.cfg.SessionTimeoutMin || r.SessionTimeout > c.cfg.SessionTimeoutMax {
		fail(CodeInvalidSessionTimeout)
		return
	}
	if r.ProtocolType == "" || len(r.Protocols) == 0 {
		fail(CodeInconsistentGroupProtocol)
		return
	}
	for _, p := range r.Protocols {
		if p.Name == "" { // "" means "none chosen" to selectProtocol: a member naming only "" made it panic
			fail(CodeInconsistentGroupProtocol)
			return
		}
	}
	if r.RebalanceTimeout <= 0 {
		r.RebalanceTimeout = rebalanceTimeoutFallback
	}
	if c.joinExceeds(c.groups[r.Group], r) {
		fail(CodeCoordinatorNotAvailable)
		return
	}
	g := c.groups[r.Group]
	if g == nil {
		if r.MemberID != "" {
			fail(CodeUnknownMemberID)
			return
		}
		if len(c.groups) >= c.cfg.GroupsMax {
			fail(CodeCoordinatorNotAvailable)
			return
		}
		g = newGroup(r.Group, PartitionFor(r.Group, c.cfg.OffsetsPartitions), c.now)
		c.groups[r.Group] = g
	}
	if !g.supports(r.ProtocolType, r.Protocols) {
		fail(CodeInconsistentGroupProtocol)
		return
	}
	if r.MemberID == "" {
		if r.InstanceID != "" && g.static[r.InstanceID] != "" {
			c.staticRejoin(g, r)
			return
		}
		if len(g.members) >= c.cfg.GroupMembersMax {
			fail(CodeGroupMaxSizeReached)
			return
		}
		if r.RequireKnownMemberID && r.InstanceID == "" {
			c.requireMemberID(g, r)
			return
		}
		c.addMemberAndRebalance(g, r, "")
		return
	}
	m := g.member(r.MemberID)
	if r.InstanceID != "" && g.static[r.InstanceID] != "" && g.static[r.InstanceID] != r.MemberID {
		fail(CodeFencedInstanceID)
		return
	}
	if m == nil && c.takePending(g, r.MemberID) {
		// It came back with the id MEMBER_ID_REQUIRED gave it: now it joins.
		if len(g.members) >= c.cfg.GroupMembersMax {
			fail(CodeGroupMaxSizeReached)
			return
		}
		c.addMemberAndRebalance(g, r, r.MemberID)
		return
	}
	if m == nil {
		fail(CodeUnknownMemberID)
		return
	}
	switch g.state {
	case PreparingRebalance:
		c.updateMemberAndRebalance(g, m, r)
	case CompletingRebalance:
		if m.sameProtocols(r.Protocols) {
			// It missed the join reply: send it again.
			m.heartbeatDeadline = c.now.Add(m.sessionTimeout)
			c.reply(r.ReqID, g.joinResponse(m))
			return
		}
		c.updateMemberAndRebalance(g, m, r)
	case Stable:
		if m.id == g.leader || !m.sameProtocols(r.Protocols) {
			c.updateMemberAndRebalance(g, m, r)
			return
		}
		m.heartbeatDeadline = c.now.Add(m.sessionTimeout)
		resp := g.joinResponse(m)
		resp.Members = nil
		c.reply(r.ReqID, resp)
	default:
		fail(CodeUnknownMemberID)
	}
}

// addMemberAndRebalance adds a new member with id (a new one when id is "").
func (c *Coordinator) addMemberAndRebalance(g *group, r JoinGroup, id string) {
	if id == "" {
		id = g.newMemberID(r.ClientID, c.cfg.Incarnation, &c.memberSeq)
	}
	m := &member{id: id, instanceID: r.InstanceID, clientID: r.ClientID, clientHost: r.ClientHost}
	m.update(r, c.now)
	c.recount(m)
	if len(g.members) == 0 {
		g.protocolType = r.ProtocolType
	}
	g.addMember(m)
	if g.state == PreparingRebalance && g.initialDelay {
		g.joinDeadline = minTime(c.now.Add(c.cfg.InitialRebalanceDelay), g.initialDelayEnd)
	}
	if g.state != PreparingRebalance {
		c.prepareRebalance(g)
	}
	c.maybeCompleteJoin(g)
}

func (c *Coordinator) updateMemberAndRebalance(g *group, m *member, r JoinGroup) {
	if m.awaitingJoin && m.joinReq != r.ReqID {
		c.reply(m.joinReq, JoinGroupResponse{Err: CodeRebalanceInProgress, MemberID: m.id, Generation: -1})
	}
	m.update(r, c.now)
	c.recount(m)
	if g.state != PreparingRebalance {
		c.prepareRebalance(g)
	}
	c.maybeCompleteJoin(g)
}

// staticRejoin handles a restarted static member (known instance id, no member id): it
// takes over the old member's place under a new member id, which fences the old one. In a
// Stable group with unchanged metadata there is no rebalance: it gets the current
// generation and, through SyncGroup, its old assignment.
func (c *Coordinator) staticRejoin(g *group, r JoinGroup) {
	old := g.member(g.static[r.InstanceID])
	c.answerWaiting(old, CodeFencedInstanceID)
	oldID := old.id
	newID := g.newMemberID(r.ClientID, c.cfg.Incarnation, &c.memberSeq)
	g.renameMember(old, newID)
	m := old
	if g.state != Stable {
		c.updateMemberAndRebalance(g, m, r)
		return
	}
	// Kafka's rule: rebalance only if the restarted member's protocols change the group's
	// protocol. Its metadata may differ (a restarted consumer owns nothing yet) without one.
	m.update(r, c.now)
	c.recount(m)
	m.awaitingJoin, m.joinReq = false, 0
	if g.selectProtocol() != g.protocol {
		c.updateMemberAndRebalance(g, m, r)
		return
	}
	generation := g.generation
	c.append(g, []Record{GroupRecord(g.id, g.value(c.now))}, func(code Code) {
		if code == CodeNone && (c.groups[g.id] != g || g.member(newID) != m) {
			code = CodeUnknownMemberID // removed meanwhile
		}
		if code != CodeNone {
			// Not stored: the old member id stays the valid one.
			if c.groups[g.id] == g && g.static[r.InstanceID] == newID && g.member(oldID) == nil {
				g.renameMember(m, oldID)
			}
			c.reply(r.ReqID, JoinGroupResponse{Err: code, Generation: -1})
			return
		}
		resp := JoinGroupResponse{Generation: generation, ProtocolType: g.protocolType, Protocol: g.protocol,
			Leader: g.leader, MemberID: newID}
		c.reply(r.ReqID, resp)
	})
}

// prepareRebalance starts a join phase.
func (c *Coordinator) prepareRebalance(g *group) {
	if g.state == CompletingRebalance {
		// The assignment being completed is void: members waiting in SyncGroup rejoin.
		for _, m := range g.members {
			if m.awaitingSync {
				c.reply(m.syncReq, SyncGroupResponse{Err: CodeRebalanceInProgress})
				m.awaitingSync, m.syncReq = false, 0
			}
			m.assignment = nil
			c.recount(m)
		}
	}
	clear(g.pendingSync)
	rebalanceTimeout := g.rebalanceTimeout()
	if g.state == Empty && c.cfg.InitialRebalanceDelay > 0 {
		g.initialDelay = true
		g.initialDelayEnd = c.now.Add(rebalanceTimeout)
		g.joinDeadline = minTime(c.now.Add(c.cfg.InitialRebalanceDelay), g.initialDelayEnd)
	} else {
		g.joinDeadline = c.now.Add(rebalanceTimeout)
	}
	g.setState(PreparingRebalance, c.now)
	c.maybeCompleteJoin(g) // nobody to wait for (the last member left)
}

func (c *Coordinator) maybeCompleteJoin(g *group) {
	if g.state != PreparingRebalance || g.initialDelay || g.awaitsPending(c.now) {
		return
	}
	for _, m := range g.members {
		if !m.awaitingJoin {
			return
		}
	}
	c.completeJoin(g)
}

// completeJoin ends the join phase: members that did not rejoin are removed, the next
// generation starts, and every joined member gets its reply (the leader with the members).
func (c *Coordinator) completeJoin(g *group) {
	for _, m := range slices.Clone(g.members) {
		if !m.awaitingJoin {
			c.removeMember(g, m, CodeUnknownMemberID)
		}
	}
	g.initialDelay = false
	g.generation++
	if len(g.members) == 0 {
		g.protocol, g.leader = "", ""
		g.setState(Empty, c.now)
		c.append(g, []Record{GroupRecord(g.id, g.value(c.now))}, func(Code) {})
		return
	}
	g.protocol = g.selectProtocol()
	if g.member(g.leader) == nil {
		g.leader = g.members[0].id
	}
	g.setState(CompletingRebalance, c.now)
	g.syncDeadline = c.now.Add(g.rebalanceTimeout())
	for _, m := range g.members {
		g.pendingSync[m.id] = true
		resp := g.joinResponse(m)
		c.reply(m.joinReq, resp)
		m.awaitingJoin, m.joinReq = false, 0
		m.heartbeatDeadline = c.now.Add(m.sessionTimeout)
	}
}

// ---- SyncGroup ----

func (c *Coordinator) sync(r SyncGroup) {
	fail := func(code Code) { c.reply(r.ReqID, SyncGroupResponse{Err: code}) }
	if code := c.lookupCode(r.Group); code != CodeNone {
		fail(code)
		return
	}
	g := c.groups[r.Group]
	if g == nil {
		fail(CodeUnknownMemberID)
		return
	}
	m, code := g.checkMember(r.MemberID, r.InstanceID)
	if code != CodeNone {
		fail(code)
		return
	}
	if r.Generation != g.generation {
		fail(CodeIllegalGeneration)
		return
	}
	if (r.ProtocolType != "" && r.ProtocolType != g.protocolType) || (r.Protocol != "" && r.Protocol != g.protocol) {
		fail(CodeInconsistentGroupProtocol)
		return
	}
	m.heartbeatDeadline = c.now.Add(m.sessionTimeout)
	switch g.state {
	case PreparingRebalance:
		fail(CodeRebalanceInProgress)
	case Stable:
		delete(g.pendingSync, m.id)
		c.reply(r.ReqID, SyncGroupResponse{ProtocolType: g.protocolType, Protocol: g.protocol, Assignment: m.assignment})
	case CompletingRebalance:
		assigns := m.id == g.leader && !(g.assignmentPending && g.assignmentPendingGen == g.generation)
		if assigns && c.assignmentExceeds(g, r.Assignments) {
			fail(CodeCoordinatorNotAvailable) // as if it never came: the sync deadline applies
			return
		}
		if m.awaitingSync {
			c.reply(m.syncReq, SyncGroupResponse{Err: CodeRebalanceInProgress})
		}
		m.awaitingSync, m.syncReq = true, r.ReqID
		delete(g.pendingSync, m.id)
		if assigns {
			c.storeAssignment(g, r.Assignments)
		}
	default:
		fail(CodeUnknownMemberID)
	}
}

// storeAssignment writes the leader's assignment to __consumer_offsets and, once it is
// durable, answers every member waiting in SyncGroup and makes the group Stable.
func (c *Coordinator) storeAssignment(g *group, assignments []MemberAssignment) {
	byMember := map[string][]byte{}
	for _, a := range assignments {
		if g.member(a.MemberID) != nil {
			byMember[a.MemberID] = a.Assignment
		}
	}
	for _, m := range g.members {
		if a, ok := byMember[m.id]; ok {
			m.assignment = a
		} else {
			m.assignment = []byte{}
		}
		c.recount(m)
	}
	generation := g.generation
	g.assignmentPending, g.assignmentPendingGen = true, generation
	c.append(g, []Record{GroupRecord(g.id, g.value(c.now))}, func(code Code) {
		if g.assignmentPendingGen == generation {
			g.assignmentPending = false
		}
		if c.groups[g.id] != g || g.generation != generation || g.state != CompletingRebalance {
			return // the rebalance moved on; its waiting syncs were answered then
		}
		if code != CodeNone {
			for _, m := range g.members {
				if m.awaitingSync {
					c.reply(m.syncReq, SyncGroupResponse{Err: code})
					m.awaitingSync, m.syncReq = false, 0
				}
				m.assignment = nil
				c.recount(m)
			}
			c.prepareRebalance(g)
			return
		}
		for _, m := range g.members {
			if m.awaitingSync {
				c.reply(m.syncReq, SyncGroupResponse{ProtocolType: g.protocolType, Protocol: g.protocol, Assignment: m.assignment})
				m.awaitingSync, m.syncReq = false, 0
			}
		}
		g.setState(Stable, c.now)
	})
}

// ---- Heartbeat and LeaveGroup ----

func (c *Coordinator) heartbeat(r Heartbeat) Code {
	if code := c.lookupCode(r.Group); code != CodeNone {
		return code
	}
	g := c.groups[r.Group]
	if g == nil {
		return CodeUnknownMemberID
	}
	m, code := g.checkMember(r.MemberID, r.InstanceID)
	if code != CodeNone {
		return code
	}
	if r.Generation != g.generation {
		return CodeIllegalGeneration
	}
	switch g.state {
	case CompletingRebalance, Stable:
		m.heartbeatDeadline = c.now.Add(m.sessionTimeout)
		return CodeNone
	case PreparingRebalance:
		m.heartbeatDeadline = c.now.Add(m.sessionTimeout)
		return CodeRebalanceInProgress
	}
	return CodeUnknownMemberID
}

func (c *Coordinator) leave(r LeaveGroup) {
	if code := c.lookupCode(r.Group); code != CodeNone {
		c.reply(r.ReqID, LeaveGroupResponse{Err: code})
		return
	}
	g := c.groups[r.Group]
	if g == nil {
		c.reply(r.ReqID, LeaveGroupResponse{Err: CodeUnknownMemberID})
		return
	}
	resp := LeaveGroupResponse{}
	left, pendingLeft := false, false
	for _, lm := range r.Members {
		id := lm.MemberID
		code := CodeNone
		if lm.InstanceID != "" {
			switch static := g.static[lm.InstanceID]; {
			case static == "":
				code = CodeUnknownMemberID
			case id != "" && id != static:
				code = CodeFencedInstanceID
			default:
				id = static
			}
		}
		m := g.member(id)
		if code == CodeNone && m == nil && lm.InstanceID == "" && c.takePending(g, id) {
			// A member told MEMBER_ID_REQUIRED leaves before joining (Kafka does the same).
			resp.Members = append(resp.Members, LeftMember{MemberID: lm.MemberID, Err: CodeNone})
			pendingLeft = true
			continue
		}
		if code == CodeNone && m == nil {
			code = CodeUnknownMemberID
		}
		if code == CodeNone {
			c.removeMember(g, m, CodeUnknownMemberID)
			left = true
		}
		resp.Members = append(resp.Members, LeftMember{MemberID: lm.MemberID, InstanceID: lm.InstanceID, Err: code})
	}
	c.reply(r.ReqID, resp)
	if left {
		c.membershipChanged(g)
	} else if pendingLeft {
		c.maybeCompleteJoin(g) // the join phase may have waited for it
	}
}

// removeMember drops m from g, answering its waiting JoinGroup or SyncGroup with code.
func (c *Coordinator) removeMember(g *group, m *member, code Code) {
	c.answerWaiting(m, code)
	g.removeMember(m)
	c.uncount(m)
}

func (c *Coordinator) answerWaiting(m *member, code Code) {
	if m.awaitingJoin {
		c.reply(m.joinReq, JoinGroupResponse{Err: code, MemberID: m.id, Generation: -1})
		m.awaitingJoin, m.joinReq = false, 0
	}
	if m.awaitingSync {
		c.reply(m.syncReq, SyncGroupResponse{Err: code})
		m.awaitingSync, m.syncReq = false, 0
	}
}
