package group

import (
	"bytes"
	"fmt"
	"slices"
	"time"
)

// group is one consumer group's state. Owned by the Coordinator's goroutine.
type group struct {
	id           string
	partition    int32 // of __consumer_offsets
	state        State
	stateSince   time.Time
	protocolType string
	protocol     string // chosen for the current generation; "" when Empty
	generation   int32
	leader       string
	members      []*member          // in join order: the first is leader when one is needed
	byID         map[string]*member // the same members by member id
	static       map[string]string  // group.instance.id → member id
	pendingSync  map[string]bool    // members of this generation that have not sent SyncGroup
	pending      []pendingMember    // ids handed out with MEMBER_ID_REQUIRED, oldest first (pending.go)
	offsets      map[TopicPartition]OffsetValue

	joinDeadline    time.Time // PreparingRebalance: when the join phase ends regardless
	initialDelay    bool      // the join phase is an Empty group's initial delay
	initialDelayEnd time.Time // the latest the initial delay may run to
	syncDeadline    time.Time // when members still in pendingSync are removed
	// assignmentPending: the leader's assignment of generation assignmentPendingGen is being
	// appended. One of an older generation does not count: the new leader's must be stored.
	assignmentPending    bool
	assignmentPendingGen int32
	appendsPending       int // appends for the group not yet done (AppendDone)

	scheduled   bool      // the timer heap holds an entry for the group at scheduledAt
	scheduledAt time.Time // its earliest entry (<= the group's next deadline)
}

// member is one group member.
type member struct {
	id, instanceID, clientID, clientHost string
	sessionTimeout, rebalanceTimeout     time.Duration
	protocols                            []Protocol
	assignment                           []byte
	heartbeatDeadline                    time.Time // removed when reached (unless waiting in join or sync)
	awaitingJoin                         bool      // a JoinGroup (joinReq) waits for the join phase to end
	joinReq                              uint64
	awaitingSync                         bool // a SyncGroup (syncReq) waits for the leader's assignment
	syncReq                              uint64
	counted                              int64 // keptBytes as the coordinator's stateBytes counts it
}

// keptBytes is what the member keeps of its requests: protocols and assignment.
func (m *member) keptBytes() int64 { return protocolsBytes(m.protocols) + int64(len(m.assignment)) }

func newGroup(id string, partition int32, now time.Time) *group {
	return &group{
		id: id, partition: partition, state: Empty, stateSince: now,
		byID: map[string]*member{}, static: map[string]string{}, pendingSync: map[string]bool{},
		offsets: map[TopicPartition]OffsetValue{},
	}
}

func (g *group) setState(s State, now time.Time) {
	if g.state != s {
		g.state, g.stateSince = s, now
	}
}

func (g *group) member(id string) *member { return g.byID[id] }

func (g *group) addMember(m *member) {
	g.members = append(g.members, m)
	g.byID[m.id] = m
	if m.instanceID != "" {
		g.static[m.instanceID] = m.id
	}
}

func (g *group) removeMember(m *member) {
	g.members = slices.DeleteFunc(g.members, func(x *member) bool { return x == m })
	delete(g.byID, m.id)
	if m.instanceID != "" && g.static[m.instanceID] == m.id {
		delete(g.static, m.instanceID)
	}
	delete(g.pendingSync, m.id)
	if g.leader == m.id {
		g.leader = ""
		for _, other := range g.members {
			if other.awaitingJoin || g.state != PreparingRebalance {
				g.leader = other.id
				break
			}
		}
	}
}

// renameMember gives m a new member id (a static member's restart fences the old id).
func (g *group) renameMember(m *member, id string) {
	if g.pendingSync[m.id] {
		delete(g.pendingSync, m.id)
		g.pendingSync[id] = true
	}
	if g.leader == m.id {
		g.leader = id
	}
	delete(g.byID, m.id)
	m.id = id
	g.byID[id] = m
	if m.instanceID != "" {
		g.static[m.instanceID] = id
	}
}

// newMemberID returns clientID-N (clientID-I-N with an incarnation I), N from a counter of
// the coordinator, skipping ids in use. Kafka appends a random UUID instead; a counter keeps
// the coordinator deterministic. Ids are not reused within an incarnation, so a removed
// member's late request can never pass for a new member's; across restarts the driver
// passes a new Config.Incarnation. Fencing does not rely on ids being unguessable (a member
// id is not a credential).
func (g *group) newMemberID(clientID string, incarnation uint64, seq *uint64) string {
	if clientID == "" {
		clientID = "member"
	}
	for range memberIDSeqMax {
		*seq++
		id := fmt.Sprintf("%s-%d", clientID, *seq)
		if incarnation != 0 {
			id = fmt.Sprintf("%s-%d-%d", clientID, incarnation, *seq)
		}
		if g.member(id) == nil {
			return id
		}
	}
	panic("group: no free member id within memberIDSeqMax")
}

// checkMember resolves a request's member, fencing a static member's old id.
func (g *group) checkMember(memberID, instanceID string) (*member, Code) {
	if instanceID != "" {
		if static := g.static[instanceID]; static != "" && static != memberID {
			return nil, CodeFencedInstanceID
		}
	}
	m := g.member(memberID)
	if m == nil {
		return nil, CodeUnknownMemberID
	}
	return m, CodeNone
}

// supports reports whether a member with protocolType and protocols can join: an Empty
// group takes any; otherwise the type must match and one protocol must be one every
// member supports.
func (g *group) supports(protocolType string, protocols []Protocol) bool {
	if len(g.members) == 0 {
		return true
	}
	if protocolType != g.protocolType {
		return false
	}
	for _, p := range protocols {
		if g.allSupport(p.Name) {
			return true
		}
	}
	return false
}

func (g *group) allSupport(name string) bool {
	for _, m := range g.members {
		if m.metadataFor(name) == nil {
			return false
		}
	}
	return true
}

// selectProtocol picks the protocol of a new generation: among the protocols every member
// supports, each member votes for the first in its own preference order; the most votes
// win, ties going to the earlier choice of the first member (Kafka breaks ties arbitrarily).
func (g *group) selectProtocol() string {
	votes := map[string]int{}
	for _, m := range g.members {
		for _, p := range m.protocols {
			if g.allSupport(p.Name) {
				votes[p.Name]++
				break
			}
		}
	}
	best := ""
	for _, p := range g.members[0].protocols {
		if n, ok := votes[p.Name]; ok && (best == "" || n > votes[best]) {
			best = p.Name
		}
	}
	if best == "" {
		panic("group: a generation with no protocol every member supports")
	}
	return best
}

func (g *group) joinResponse(m *member) JoinGroupResponse {
	resp := JoinGroupResponse{Generation: g.generation, ProtocolType: g.protocolType, Protocol: g.protocol,
		Leader: g.leader, MemberID: m.id}
	if m.id == g.leader {
		for _, other := range g.members {
			resp.Members = append(resp.Members, JoinedMember{MemberID: other.id, InstanceID: other.instanceID,
				Metadata: other.metadataFor(g.protocol)})
		}
	}
	return resp
}

// rebalanceTimeout is how long a join phase (or a sync phase) may last: the longest
// rebalance timeout (max.poll.interval.ms) among the members.
func (g *group) rebalanceTimeout() time.Duration {
	var d time.Duration
	for _, m := range g.members {
		d = max(d, m.rebalanceTimeout)
	}
	if d == 0 {
		d = rebalanceTimeoutFallback
	}
	return d
}

func (g *group) syncPending() bool { return len(g.pendingSync) > 0 }

// offsetExpiry is when a committed offset of an Empty group expires: retention after the
// group became empty, or after the commit for a group that never had members (Kafka's
// KIP-211 rule).
func (g *group) offsetExpiry(v OffsetValue, retention time.Duration) time.Time {
	base := time.UnixMilli(v.CommitTimestampMs)
	if g.protocolType != "" && g.stateSince.After(base) {
		base = g.stateSince
	}
	return base.Add(retention)
}

// nextDeadline is the earliest time Tick has work for the group.
func (g *group) nextDeadline(cfg Config) (time.Time, bool) {
	var next time.Time
	found := false
	consider := func(t time.Time) {
		if !found || t.Before(next) {
			next, found = t, true
		}
	}
	switch g.state {
	case PreparingRebalance:
		consider(g.joinDeadline)
	case CompletingRebalance, Stable:
		if g.syncPending() {
			consider(g.syncDeadline)
		}
	case Empty:
		if cfg.OffsetsRetention >= 0 {
			for _, v := range g.offsets {
				consider(g.offsetExpiry(v, cfg.OffsetsRetention))
			}
			if len(g.offsets) == 0 && g.appendsPending == 0 && len(g.pending) == 0 {
				consider(g.stateSince) // an empty group with nothing to keep: drop it
			}
		}
	}
	for _, m := range g.members {
		if !m.awaitingJoin && !m.awaitingSync {
			consider(m.heartbeatDeadline)
		}
	}
	for _, p := range g.pending {
		consider(p.expires)
		if !p.waitUntil.IsZero() {
			consider(p.waitUntil)
		}
	}
	return next, found
}

// value is the group's metadata record value.
func (g *group) value(now time.Time) GroupValue {
	v := GroupValue{ProtocolType: g.protocolType, Generation: g.generation, Protocol: g.protocol,
		Leader: g.leader, StateTimestampMs: now.UnixMilli()}
	for _, m := range g.members {
		v.Members = append(v.Members, MemberValue{
			MemberID: m.id, InstanceID: m.instanceID, ClientID: m.clientID, ClientHost: m.clientHost,
			RebalanceTimeoutMs: int32(m.rebalanceTimeout / time.Millisecond),
			SessionTimeoutMs:   int32(m.sessionTimeout / time.Millisecond),
			Subscription:       m.metadataFor(g.protocol), Assignment: m.assignment,
		})
	}
	return v
}

func (g *group) describe() DescribedGroup {
	d := DescribedGroup{Group: g.id, State: g.state, ProtocolType: g.protocolType, Protocol: g.protocol,
		Generation: g.generation, Leader: g.leader}
	for _, m := range g.members {
		dm := DescribedMember{
			MemberID: m.id, InstanceID: m.instanceID, ClientID: m.clientID, ClientHost: m.clientHost,
			SessionTimeout: m.sessionTimeout, RebalanceTimeout: m.rebalanceTimeout,
		}
		if g.state == Stable { // as Kafka: metadata and assignment only of a settled generation
			dm.Metadata, dm.Assignment = m.metadataFor(g.protocol), m.assignment
		}
		d.Members = append(d.Members, dm)
	}
	return d
}

// update takes a JoinGroup's fields and marks the member as waiting in the join phase.
func (m *member) update(r JoinGroup, now time.Time) {
	m.clientID, m.clientHost = r.ClientID, r.ClientHost
	m.sessionTimeout, m.rebalanceTimeout = r.SessionTimeout, r.RebalanceTimeout
	m.protocols = slices.Clone(r.Protocols)
	m.awaitingJoin, m.joinReq = true, r.ReqID
	m.heartbeatDeadline = now.Add(m.sessionTimeout)
}

func (m *member) metadataFor(name string) []byte {
	for _, p := range m.protocols {
		if p.Name == name {
			if p.Metadata == nil {
				return []byte{}
			}
			return p.Metadata
		}
	}
	return nil
}

func (m *member) sameProtocols(ps []Protocol) bool {
	return slices.EqualFunc(m.protocols, ps, func(a, b Protocol) bool {
		return a.Name == b.Name && bytes.Equal(a.Metadata, b.Metadata)
	})
}
