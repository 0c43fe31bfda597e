package group

import (
	"maps"
	"slices"
)

// ListGroups, DescribeGroups and DeleteGroups.

func (c *Coordinator) list(r ListGroups) ListGroupsResponse {
	resp := ListGroupsResponse{}
	for _, serving := range c.partitions {
		if !serving {
			resp.Err = CodeCoordinatorLoadInProgress
		}
	}
	for _, id := range slices.Sorted(maps.Keys(c.groups)) {
		g := c.groups[id]
		if len(r.States) == 0 || slices.Contains(r.States, g.state) {
			resp.Groups = append(resp.Groups, ListedGroup{Group: id, ProtocolType: g.protocolType, State: g.state})
		}
	}
	return resp
}

func (c *Coordinator) describe(r DescribeGroups) DescribeGroupsResponse {
	resp := DescribeGroupsResponse{}
	for _, id := range r.Groups {
		d := DescribedGroup{Group: id, State: Dead, Generation: -1}
		if d.Err = c.lookupCode(id); d.Err == CodeNone {
			if g := c.groups[id]; g != nil {
				d = g.describe()
			}
		}
		resp.Groups = append(resp.Groups, d)
	}
	return resp
}

func (c *Coordinator) deleteGroups(r DeleteGroups) {
	results := make([]DeleteResult, len(r.Groups))
	waiting := 0
	answer := func() {
		if waiting == 0 {
			c.reply(r.ReqID, DeleteGroupsResponse{Results: results})
		}
	}
	type deletion struct {
		index int
		g     *group
	}
	var deletions []deletion
	for i, id := range r.Groups {
		results[i] = DeleteResult{Group: id}
		if results[i].Err = c.lookupCode(id); results[i].Err != CodeNone {
			continue
		}
		g := c.groups[id]
		switch {
		case g == nil:
			results[i].Err = CodeGroupIDNotFound
		case g.state != Empty:
			results[i].Err = CodeNonEmptyGroup
		default:
			deletions = append(deletions, deletion{i, g})
		}
	}
	waiting = len(deletions)
	for _, d := range deletions {
		var recs []Record
		for _, tp := range slices.SortedFunc(maps.Keys(d.g.offsets), compareTP) {
			recs = append(recs, OffsetTombstone(d.g.id, tp.Topic, tp.Partition))
		}
		recs = append(recs, GroupTombstone(d.g.id))
		d.g.setState(Dead, c.now)
		c.dropPending(d.g)
		c.uncountGroup(d.g)
		delete(c.groups, d.g.id)
		c.append(d.g, recs, func(code Code) {
			results[d.index].Err = code
			waiting--
			answer()
		})
	}
	answer()
}
