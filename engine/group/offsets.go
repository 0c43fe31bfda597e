package group

import (
	"maps"
	"slices"
)

// OffsetCommit, OffsetFetch and offset expiry.

func (c *Coordinator) commit(r OffsetCommit) {
	failAll := func(code Code) {
		resp := OffsetCommitResponse{}
		for _, o := range r.Offsets {
			resp.Partitions = append(resp.Partitions, PartitionResult{o.Topic, o.Partition, code})
		}
		c.reply(r.ReqID, resp)
	}
	if code := c.lookupCode(r.Group); code != CodeNone {
		failAll(code)
		return
	}
	if len(r.Offsets) > commitOffsetsPerRequestMax {
		failAll(CodeInvalidCommitOffsetSize)
		return
	}
	if c.commitExceeds(c.groups[r.Group], r) {
		failAll(CodeCoordinatorNotAvailable)
		return
	}
	g := c.groups[r.Group]
	if g == nil {
		if r.Generation >= 0 || r.MemberID != "" {
			failAll(CodeUnknownMemberID)
			return
		}
		if len(c.groups) >= c.cfg.GroupsMax {
			failAll(CodeCoordinatorNotAvailable)
			return
		}
		g = newGroup(r.Group, PartitionFor(r.Group, c.cfg.OffsetsPartitions), c.now)
		c.groups[r.Group] = g
	}
	if code := c.commitCode(g, r); code != CodeNone {
		failAll(code)
		return
	}
	c.storeOffsets(g, r)
}

// commitCode is Kafka's order of checks for an offset commit. A commit with the current
// generation is accepted while the group prepares a rebalance (members commit before they
// rejoin), refused while it completes one, and refused from any older generation.
func (c *Coordinator) commitCode(g *group, r OffsetCommit) Code {
	if r.InstanceID != "" {
		if static := g.static[r.InstanceID]; static != "" && static != r.MemberID {
			return CodeFencedInstanceID
		}
	}
	if r.Generation < 0 && g.state == Empty {
		return CodeNone
	}
	if g.state == CompletingRebalance {
		return CodeRebalanceInProgress
	}
	m := g.member(r.MemberID)
	if m == nil {
		return CodeUnknownMemberID
	}
	if r.Generation != g.generation {
		return CodeIllegalGeneration
	}
	m.heartbeatDeadline = c.now.Add(m.sessionTimeout)
	return CodeNone
}

func (c *Coordinator) storeOffsets(g *group, r OffsetCommit) {
	results := make([]PartitionResult, len(r.Offsets))
	var recs []Record
	var stored []int // indexes into r.Offsets of what recs hold
	nowMs := c.now.UnixMilli()
	for i, o := range r.Offsets {
		results[i] = PartitionResult{Topic: o.Topic, Partition: o.Partition}
		if len(o.Metadata) > c.cfg.OffsetMetadataBytesMax {
			results[i].Err = CodeOffsetMetadataTooLarge
			continue
		}
		recs = append(recs, OffsetRecord(g.id, o.Topic, o.Partition,
			OffsetValue{Offset: o.Offset, LeaderEpoch: o.LeaderEpoch, Metadata: o.Metadata, CommitTimestampMs: nowMs}))
		stored = append(stored, i)
	}
	if len(recs) == 0 {
		c.reply(r.ReqID, OffsetCommitResponse{Partitions: results})
		return
	}
	c.append(g, recs, func(code Code) {
		for _, i := range stored {
			results[i].Err = code
			if code != CodeNone {
				continue
			}
			o := r.Offsets[i]
			if live := c.groups[g.id]; live != nil { // not deleted meanwhile
				c.setOffset(live, TopicPartition{o.Topic, o.Partition}, OffsetValue{
					Offset: o.Offset, LeaderEpoch: o.LeaderEpoch, Metadata: o.Metadata,
					CommitTimestampMs: nowMs, ExpireTimestampMs: -1})
			}
		}
		c.reply(r.ReqID, OffsetCommitResponse{Partitions: results})
	})
}

func (c *Coordinator) fetchOffsets(r OffsetFetch) OffsetFetchResponse {
	if code := c.lookupCode(r.Group); code != CodeNone {
		return OffsetFetchResponse{Err: code}
	}
	g := c.groups[r.Group]
	tps := r.Partitions
	if tps == nil && g != nil {
		tps = slices.SortedFunc(maps.Keys(g.offsets), compareTP)
	}
	resp := OffsetFetchResponse{}
	for _, tp := range tps {
		fo := FetchedOffset{Topic: tp.Topic, Partition: tp.Partition, Offset: -1, LeaderEpoch: -1}
		if g != nil {
			if v, ok := g.offsets[tp]; ok {
				fo.Offset, fo.LeaderEpoch, fo.Metadata = v.Offset, v.LeaderEpoch, v.Metadata
			}
		}
		resp.Partitions = append(resp.Partitions, fo)
	}
	return resp
}

// expireOffsets drops the offsets of an Empty group that outlived the retention, and the
// group with them when none remain, writing tombstones for both.
func (c *Coordinator) expireOffsets(g *group) {
	if c.cfg.OffsetsRetention < 0 {
		return
	}
	var recs []Record
	for _, tp := range slices.SortedFunc(maps.Keys(g.offsets), compareTP) {
		if g.offsetExpiry(g.offsets[tp], c.cfg.OffsetsRetention).After(c.now) {
			continue
		}
		c.deleteOffset(g, tp)
		recs = append(recs, OffsetTombstone(g.id, tp.Topic, tp.Partition))
	}
	if len(g.offsets) == 0 && g.appendsPending == 0 && len(g.pending) == 0 { // a commit in flight may still add offsets; a pending member may still join
		if g.generation > 0 { // its metadata was written once
			recs = append(recs, GroupTombstone(g.id))
		}
		g.setState(Dead, c.now)
		delete(c.groups, g.id)
	}
	if len(recs) > 0 {
		c.append(g, recs, func(Code) {})
	}
}
