package group

// What the groups keep, and its bound (Config.StateBytesMax). The coordinator counts, in
// stateBytes, every member's protocol names, metadata and assignment (member.counted, kept
// up to date by recount) and every committed offset (offsetBytes), as they change. A
// request that would take the count past the bound is refused before anything changes:
// JoinGroup, the leader's SyncGroup and OffsetCommit, with COORDINATOR_NOT_AVAILABLE. An
// offset commit is checked when it arrives and counted once it is stored, so commits in
// flight together may overshoot by what they carry (at most the broker's byte budgets).
// State loaded from __consumer_offsets counts but is never refused.

// recount brings the count up to date after m's protocols or assignment changed.
func (c *Coordinator) recount(m *member) {
	n := m.keptBytes()
	c.stateBytes += n - m.counted
	m.counted = n
}

// uncount takes a removed member out of the count.
func (c *Coordinator) uncount(m *member) {
	c.stateBytes -= m.counted
	m.counted = 0
}

// uncountGroup takes a dropped group's members and offsets out of the count.
func (c *Coordinator) uncountGroup(g *group) {
	for _, m := range g.members {
		c.uncount(m)
	}
	for tp, v := range g.offsets {
		c.stateBytes -= offsetBytes(tp, v)
	}
}

// offsetBytes is what one committed offset keeps.
func offsetBytes(tp TopicPartition, v OffsetValue) int64 {
	return offsetEntryBytes + int64(len(tp.Topic)+len(v.Metadata))
}

// setOffset stores v as g's offset of tp.
func (c *Coordinator) setOffset(g *group, tp TopicPartition, v OffsetValue) {
	if old, ok := g.offsets[tp]; ok {
		c.stateBytes -= offsetBytes(tp, old)
	}
	g.offsets[tp] = v
	c.stateBytes += offsetBytes(tp, v)
}

// deleteOffset drops g's offset of tp.
func (c *Coordinator) deleteOffset(g *group, tp TopicPartition) {
	if old, ok := g.offsets[tp]; ok {
		c.stateBytes -= offsetBytes(tp, old)
		delete(g.offsets, tp)
	}
}

// exceeds reports whether growing the count by grow would pass the bound.
func (c *Coordinator) exceeds(grow int64) bool {
	return grow > 0 && c.stateBytes+grow > c.cfg.StateBytesMax
}

// joinExceeds reports whether r would take the coordinator past the bound: its protocols
// replace those of the member it names (or whose instance it restarts) in g.
func (c *Coordinator) joinExceeds(g *group, r JoinGroup) bool {
	grow := protocolsBytes(r.Protocols)
	if g != nil {
		id := r.MemberID
		if id == "" && r.InstanceID != "" {
			id = g.static[r.InstanceID]
		}
		if m := g.member(id); m != nil {
			grow -= protocolsBytes(m.protocols)
		}
	}
	return c.exceeds(grow)
}

// assignmentExceeds reports whether the leader's assignments would take the coordinator
// past the bound (they replace the members' current ones).
func (c *Coordinator) assignmentExceeds(g *group, assignments []MemberAssignment) bool {
	var grow int64
	for _, m := range g.members {
		grow -= int64(len(m.assignment))
	}
	for _, a := range assignments {
		if g.member(a.MemberID) != nil {
			grow += int64(len(a.Assignment))
		}
	}
	return c.exceeds(grow)
}

// commitExceeds reports whether r's offsets would take the coordinator past the bound (they
// replace g's offsets of the same partitions; g may be nil).
func (c *Coordinator) commitExceeds(g *group, r OffsetCommit) bool {
	var grow int64
	for _, o := range r.Offsets {
		if len(o.Metadata) > c.cfg.OffsetMetadataBytesMax {
			continue // refused on its own
		}
		tp := TopicPartition{o.Topic, o.Partition}
		grow += offsetBytes(tp, OffsetValue{Metadata: o.Metadata})
		if g == nil {
			continue
		}
		if old, ok := g.offsets[tp]; ok {
			grow -= offsetBytes(tp, old)
		}
	}
	return c.exceeds(grow)
}

func protocolsBytes(ps []Protocol) int64 {
	var n int64
	for _, p := range ps {
		n += int64(len(p.Name) + len(p.Metadata))
	}
	return n
}
