package assign

import (
	"cmp"
	"slices"
)

// Names of the assignors as they travel in JoinGroup's protocol list (Kafka's names).
const (
	Range             = "range"
	RoundRobin        = "roundrobin"
	Sticky            = "sticky"
	CooperativeSticky = "cooperative-sticky"
)

// TopicPartition names one partition.
type TopicPartition struct {
	Topic     string
	Partition int32
}

func compareTP(a, b TopicPartition) int {
	if c := cmp.Compare(a.Topic, b.Topic); c != 0 {
		return c
	}
	return cmp.Compare(a.Partition, b.Partition)
}

// SortPartitions sorts tps by (topic, partition).
func SortPartitions(tps []TopicPartition) { slices.SortFunc(tps, compareTP) }

// Member is one group member as the leader sees it in the JoinGroup reply.
type Member struct {
	// ID is the member id the coordinator gave it.
	ID string
	// InstanceID is its group.instance.id; "" for a dynamic member.
	InstanceID string
	// Topics is its subscription.
	Topics []string
	// Owned are the partitions it owns now (subscription v1+). The sticky assignors keep
	// them where balance allows; range and round-robin ignore them.
	Owned []TopicPartition
	// Generation is the generation in which it was given Owned (subscription v2+); -1 when
	// unknown. Owned partitions of members with a generation lower than the highest one
	// are stale and ignored, as are partitions that two members of the same generation
	// both claim.
	Generation int32
}

// Plan maps each member id to its partitions, sorted by (topic, partition). Every member
// passed in has an entry, possibly empty.
type Plan map[string][]TopicPartition

// An Assignor computes a Plan from the members and the partition count of each topic.
// Topics missing from partitions (or with a count <= 0) are not assigned.
type Assignor interface {
	Name() string
	Assign(members []Member, partitions map[string]int32) Plan
}

// Cooperative reports whether an assignor follows the cooperative protocol: members keep
// their partitions across a rebalance and revoke only what the plan takes away.
func Cooperative(name string) bool { return name == CooperativeSticky }

// ByName returns the assignor called name.
func ByName(name string) (Assignor, bool) {
	switch name {
	case Range:
		return RangeAssignor{}, true
	case RoundRobin:
		return RoundRobinAssignor{}, true
	case Sticky:
		return StickyAssignor{}, true
	case CooperativeSticky:
		return CooperativeStickyAssignor{}, true
	}
	return nil, false
}

// memberOrder is Kafka's member order for range and round-robin: members with a
// group.instance.id first, by instance id, then the others by member id. Static members
// thereby keep their place (and their partitions) across restarts, which get new member ids.
func memberOrder(a, b *Member) int {
	switch {
	case a.InstanceID != "" && b.InstanceID != "":
		if c := cmp.Compare(a.InstanceID, b.InstanceID); c != 0 {
			return c
		}
	case a.InstanceID != "":
		return -1
	case b.InstanceID != "":
		return 1
	}
	return cmp.Compare(a.ID, b.ID)
}

func sortedMembers(members []Member) []*Member {
	out := make([]*Member, len(members))
	for i := range members {
		out[i] = &members[i]
	}
	slices.SortFunc(out, memberOrder)
	return out
}

func subscribes(m *Member, topic string) bool { return slices.Contains(m.Topics, topic) }

func emptyPlan(members []Member) Plan {
	p := make(Plan, len(members))
	for i := range members {
		p[members[i].ID] = []TopicPartition{}
	}
	return p
}

// subscribedTopics returns the sorted, distinct topics any member subscribes to that exist.
func subscribedTopics(members []Member, partitions map[string]int32) []string {
	var topics []string
	for i := range members {
		for _, t := range members[i].Topics {
			if partitions[t] > 0 {
				topics = append(topics, t)
			}
		}
	}
	slices.Sort(topics)
	return slices.Compact(topics)
}

func (p Plan) sortAll() Plan {
	for _, tps := range p {
		SortPartitions(tps)
	}
	return p
}

// RangeAssignor is Kafka's range assignor.
type RangeAssignor struct{}

func (RangeAssignor) Name() string { return Range }

func (RangeAssignor) Assign(members []Member, partitions map[string]int32) Plan {
	plan := emptyPlan(members)
	ordered := sortedMembers(members)
	for _, topic := range subscribedTopics(members, partitions) {
		var consumers []*Member
		for _, m := range ordered {
			if subscribes(m, topic) {
				consumers = append(consumers, m)
			}
		}
		count := int(partitions[topic])
		per, extra := count/len(consumers), count%len(consumers)
		next := 0
		for i, m := range consumers {
			take := per
			if i < extra {
				take++
			}
			for range take {
				plan[m.ID] = append(plan[m.ID], TopicPartition{topic, int32(next)})
				next++
			}
		}
	}
	return plan.sortAll()
}

// RoundRobinAssignor is Kafka's round-robin assignor.
type RoundRobinAssignor struct{}

func (RoundRobinAssignor) Name() string { return RoundRobin }

func (RoundRobinAssignor) Assign(members []Member, partitions map[string]int32) Plan {
	plan := emptyPlan(members)
	ordered := sortedMembers(members)
	if len(ordered) == 0 {
		return plan
	}
	next := 0
	for _, topic := range subscribedTopics(members, partitions) {
		for p := range partitions[topic] {
			// Some member subscribes to topic, so this loop ends within len(ordered) steps.
			for !subscribes(ordered[next%len(ordered)], topic) {
				next++
			}
			m := ordered[next%len(ordered)]
			plan[m.ID] = append(plan[m.ID], TopicPartition{topic, p})
			next++
		}
	}
	return plan.sortAll()
}

// StickyAssignor keeps valid ownership where balance allows and moves the fewest partitions.
type StickyAssignor struct{}

func (StickyAssignor) Name() string { return Sticky }

func (StickyAssignor) Assign(members []Member, partitions map[string]int32) Plan {
	return stickyPlan(members, partitions)
}

// CooperativeStickyAssignor is the sticky plan without the partitions that change owner:
// those are revoked in this round and assigned in the follow-up one.
type CooperativeStickyAssignor struct{}

func (CooperativeStickyAssignor) Name() string { return CooperativeSticky }

func (CooperativeStickyAssignor) Assign(members []Member, partitions map[string]int32) Plan {
	plan := stickyPlan(members, partitions)
	owner := validOwners(members, partitions)
	for id, tps := range plan {
		plan[id] = slices.DeleteFunc(tps, func(tp TopicPartition) bool {
			prev, owned := owner[tp]
			return owned && prev != id
		})
	}
	return plan
}

// validOwners maps each partition to the member that validly owns it: the member exists,
// subscribes to the topic, the partition exists, the member's generation is the highest
// among members, and no other member of that generation claims it too.
func validOwners(members []Member, partitions map[string]int32) map[TopicPartition]string {
	maxGeneration := int32(-1)
	for i := range members {
		maxGeneration = max(maxGeneration, members[i].Generation)
	}
	owner := map[TopicPartition]string{}
	conflicted := map[TopicPartition]bool{}
	for i := range members {
		m := &members[i]
		if m.Generation < maxGeneration {
			continue
		}
		for _, tp := range m.Owned {
			if tp.Partition < 0 || tp.Partition >= partitions[tp.Topic] || !subscribes(m, tp.Topic) {
				continue
			}
			if prev, dup := owner[tp]; dup && prev != m.ID {
				conflicted[tp] = true
				continue
			}
			owner[tp] = m.ID
		}
	}
	for tp := range conflicted {
		delete(owner, tp)
	}
	return owner
}

func homogeneous(ordered []*Member) bool {
	if len(ordered) == 0 {
		return true
	}
	first := slices.Sorted(slices.Values(ordered[0].Topics))
	first = slices.Compact(first)
	for _, m := range ordered[1:] {
		topics := slices.Compact(slices.Sorted(slices.Values(m.Topics)))
		if !slices.Equal(first, topics) {
			return false
		}
	}
	return true
}

func stickyPlan(members []Member, partitions map[string]int32) Plan {
	plan := emptyPlan(members)
	if len(members) == 0 {
		return plan
	}
	ordered := sortedMembers(members)
	owner := validOwners(members, partitions)
	var all []TopicPartition
	for _, topic := range subscribedTopics(members, partitions) {
		for p := range partitions[topic] {
			all = append(all, TopicPartition{topic, p})
		}
	}
	for _, tp := range all {
		if id, ok := owner[tp]; ok {
			plan[id] = append(plan[id], tp)
		}
	}
	plan.sortAll()
	if homogeneous(ordered) {
		stickyBalanced(plan, ordered, all, owner)
	} else {
		stickyGeneral(plan, ordered, all, owner)
	}
	return plan.sortAll()
}

// stickyBalanced handles identical subscriptions: with n partitions and m members, n mod m
// members get ceil(n/m) and the rest floor(n/m). The ceil slots go to the members that
// already own the most, so the partitions kept — and hence the movement — are optimal.
func stickyBalanced(plan Plan, ordered []*Member, all []TopicPartition, owner map[TopicPartition]string) {
	floor, ceilSlots := len(all)/len(ordered), len(all)%len(ordered)
	byOwned := slices.Clone(ordered)
	slices.SortStableFunc(byOwned, func(a, b *Member) int { return cmp.Compare(len(plan[b.ID]), len(plan[a.ID])) })
	quota := make(map[string]int, len(ordered))
	for i, m := range byOwned {
		quota[m.ID] = floor
		if i < ceilSlots {
			quota[m.ID]++
		}
	}
	for _, m := range byOwned {
		if tps := plan[m.ID]; len(tps) > quota[m.ID] {
			for _, tp := range tps[quota[m.ID]:] {
				delete(owner, tp)
			}
			plan[m.ID] = tps[:quota[m.ID]]
		}
	}
	free := unowned(all, owner)
	for _, m := range byOwned {
		for len(plan[m.ID]) < quota[m.ID] {
			plan[m.ID] = append(plan[m.ID], free[0])
			free = free[1:]
		}
	}
	if len(free) != 0 {
		panic("assign: sticky quotas do not add up to the partition count")
	}
}

// stickyGeneral handles differing subscriptions: kept partitions stay, each free partition
// goes to the least-loaded member subscribed to its topic, then partitions move from a
// member to a subscribed one holding at least two fewer until no such move exists.
func stickyGeneral(plan Plan, ordered []*Member, all []TopicPartition, owner map[TopicPartition]string) {
	leastLoaded := func(topic string, except string) *Member {
		var best *Member
		for _, m := range ordered {
			if m.ID != except && subscribes(m, topic) && (best == nil || len(plan[m.ID]) < len(plan[best.ID])) {
				best = m
			}
		}
		return best
	}
	for _, tp := range unowned(all, owner) {
		if m := leastLoaded(tp.Topic, ""); m != nil {
			plan[m.ID] = append(plan[m.ID], tp)
			owner[tp] = m.ID
		}
	}
	// Each move lowers the sum of squared loads by at least 2, so the passes are bounded by
	// that sum (at most len(all)^2); the explicit bound makes a bug loop visibly, not forever.
	passesMax := len(all)*len(all) + 1
	for pass := 0; ; pass++ {
		if pass > passesMax {
			panic("assign: sticky balancing did not converge")
		}
		moved := false
		for _, tp := range all {
			from, ok := owner[tp]
			if !ok {
				continue
			}
			to := leastLoaded(tp.Topic, from)
			if to == nil || len(plan[to.ID])+1 >= len(plan[from]) {
				continue
			}
			plan[from] = slices.DeleteFunc(plan[from], func(x TopicPartition) bool { return x == tp })
			plan[to.ID] = append(plan[to.ID], tp)
			owner[tp] = to.ID
			moved = true
		}
		if !moved {
			return
		}
	}
}

func unowned(all []TopicPartition, owner map[TopicPartition]string) []TopicPartition {
	var free []TopicPartition
	for _, tp := range all {
		if _, ok := owner[tp]; !ok {
			free = append(free, tp)
		}
	}
	return free
}
