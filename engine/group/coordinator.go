package group

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/ringlog/ringlog/engine"
)

// Defaults and bounds of Config. Each is Kafka's broker default unless said otherwise.
const (
	sessionTimeoutMinDefault     = 6 * time.Second             // group.min.session.timeout.ms
	sessionTimeoutMaxDefault     = 30 * time.Minute            // group.max.session.timeout.ms
	groupMembersMaxDefault       = 1000                        // group.max.size (Kafka: unbounded)
	groupsMaxDefault             = 100_000                     // groups per coordinator (Kafka: unbounded)
	offsetMetadataBytesMaxDef    = 4096                        // offset.metadata.max.bytes
	offsetsRetentionDefault      = 7 * 24 * time.Hour          // offsets.retention.minutes
	commitOffsetsPerRequestMax   = 10_000                      // partitions in one OffsetCommit (ringlog's bound)
	rebalanceTimeoutFallback     = 5 * time.Minute             // when a member sends none (Kafka: its session timeout)
	initialRebalanceDelayDefault = time.Duration(0)            // group.initial.rebalance.delay.ms is 3 s in Kafka
	memberIDSeqMax               = groupMembersMaxDefault * 16 // bound on the search for a free member id
)

// Config configures a Coordinator. Zero fields take the defaults above.
type Config struct {
	// OffsetsPartitions is the partition count of __consumer_offsets (placement).
	OffsetsPartitions int32
	// SessionTimeoutMin and SessionTimeoutMax bound what a JoinGroup may ask for.
	SessionTimeoutMin, SessionTimeoutMax time.Duration
	// InitialRebalanceDelay holds the first rebalance of an Empty group open for more
	// members, up to the rebalance timeout, so a starting fleet forms one generation
	// instead of one per member. 0 means none.
	InitialRebalanceDelay time.Duration
	// GroupMembersMax bounds the members of one group (GROUP_MAX_SIZE_REACHED beyond it).
	GroupMembersMax int
	// GroupsMax bounds the groups of one coordinator (COORDINATOR_NOT_AVAILABLE beyond it).
	GroupsMax int
	// OffsetMetadataBytesMax bounds the metadata string of one committed offset.
	OffsetMetadataBytesMax int
	// Incarnation tells this coordinator's member ids from those of its previous runs
	// (clientID-Incarnation-N); the driver passes something that grows across restarts,
	// such as the broker's start time in milliseconds. 0 leaves it out (clientID-N).
	Incarnation uint64
	// OffsetsRetention is how long the offsets of an Empty group are kept after it became
	// empty (or, for a group that never had members, after the commit). Negative: forever.
	OffsetsRetention time.Duration
}

func (c Config) withDefaults() Config {
	def := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	if c.OffsetsPartitions <= 0 {
		c.OffsetsPartitions = OffsetsPartitionsDefault
	}
	def(&c.SessionTimeoutMin, sessionTimeoutMinDefault)
	def(&c.SessionTimeoutMax, sessionTimeoutMaxDefault)
	def(&c.InitialRebalanceDelay, initialRebalanceDelayDefault)
	def(&c.OffsetsRetention, offsetsRetentionDefault)
	if c.GroupMembersMax <= 0 {
		c.GroupMembersMax = groupMembersMaxDefault
	}
	if c.GroupsMax <= 0 {
		c.GroupsMax = groupsMaxDefault
	}
	if c.OffsetMetadataBytesMax <= 0 {
		c.OffsetMetadataBytesMax = offsetMetadataBytesMaxDef
	}
	return c
}

// Coordinator is the group coordinator for the __consumer_offsets partitions it has loaded,
// as a deterministic state machine: requests, clock ticks and append completions in;
// replies and appends out (Ready). It has no goroutines, timers, clock or I/O; it belongs
// to one goroutine (the shard loop that owns its partitions).
type Coordinator struct {
	cfg        Config
	now        time.Time                 // the latest time an input carried
	partitions map[int32]bool            // loaded partitions: true = serving, false = loading
	groups     map[string]*group         // by group id
	pending    map[uint64]*pendingAppend // appends asked for and not yet done, by id
	nextAppend uint64                    // id of the next Append
	memberSeq  uint64                    // the last member id number handed out
	out        []Output                  // outputs not yet taken by Ready
}

type pendingAppend struct {
	partition int32
	done      func(code Code)
}

// New returns a Coordinator that serves no partition yet.
func New(cfg Config) *Coordinator {
	return &Coordinator{
		cfg:        cfg.withDefaults(),
		partitions: map[int32]bool{},
		groups:     map[string]*group{},
		pending:    map[uint64]*pendingAppend{},
		nextAppend: 1,
	}
}

// Ready returns the outputs produced since the last call, in order, and forgets them.
func (c *Coordinator) Ready() []Output {
	out := c.out
	c.out = nil
	return out
}

func (c *Coordinator) reply(reqID uint64, r Response) {
	c.out = append(c.out, Reply{ReqID: reqID, Response: r})
}

func (c *Coordinator) append(partition int32, recs []Record, done func(Code)) {
	id := c.nextAppend
	c.nextAppend++
	c.pending[id] = &pendingAppend{partition: partition, done: done}
	c.out = append(c.out, Append{ID: id, Partition: partition, Records: recs})
}

// advance moves the coordinator's clock; time never goes backwards inside it.
func (c *Coordinator) advance(now time.Time) {
	if now.After(c.now) {
		c.now = now
	}
}

// AppendDone reports the outcome of the Append with id. A nil err means the records are
// durable in __consumer_offsets (as acks=all would report).
func (c *Coordinator) AppendDone(now time.Time, id uint64, err error) {
	c.advance(now)
	p, ok := c.pending[id]
	if !ok {
		return // its partition was unloaded meanwhile
	}
	delete(c.pending, id)
	p.done(appendCode(err))
	c.checkIfEnabled()
}

func (c *Coordinator) checkIfEnabled() {
	if invariantsEnabled {
		c.checkInvariants()
	}
}

// appendCode is Kafka's mapping of a failed __consumer_offsets append to a group error.
func appendCode(err error) Code {
	switch {
	case err == nil:
		return CodeNone
	case errors.Is(err, engine.ErrBatchTooLarge):
		return CodeInvalidCommitOffsetSize
	default:
		return CodeCoordinatorNotAvailable
	}
}

// BeginLoad marks partition as loading: its groups are answered with
// COORDINATOR_LOAD_IN_PROGRESS until Load.
func (c *Coordinator) BeginLoad(partition int32) {
	c.partitions[partition] = false
}

// ErrWrongPartition is returned by Load for a snapshot holding a group that belongs to
// another partition.
var ErrWrongPartition = errors.New("group belongs to another __consumer_offsets partition")

// Load starts serving partition with the state replayed into snap (see Rebuild). Groups
// with members come back Stable with the stored generation and assignments; each member
// must heartbeat within its session timeout from now or it is removed. Groups without
// members come back Empty.
func (c *Coordinator) Load(now time.Time, partition int32, snap *Snapshot) error {
	c.advance(now)
	for _, id := range snap.GroupIDs() {
		if p := PartitionFor(id, c.cfg.OffsetsPartitions); p != partition {
			return fmt.Errorf("load partition %d: group %q: %w (%d)", partition, id, ErrWrongPartition, p)
		}
	}
	for _, id := range snap.GroupIDs() {
		c.groups[id] = c.loadGroup(id, partition, snap.Groups[id])
	}
	c.partitions[partition] = true
	c.checkIfEnabled()
	return nil
}

func (c *Coordinator) loadGroup(id string, partition int32, lg *LoadedGroup) *group {
	g := newGroup(id, partition, c.now)
	g.offsets = maps.Clone(lg.Offsets)
	md := lg.Metadata
	if md == nil {
		return g
	}
	g.protocolType, g.generation, g.protocol, g.leader = md.ProtocolType, md.Generation, md.Protocol, md.Leader
	if md.Protocol == "" {
		// Members without a chosen protocol cannot be a settled generation (Kafka never
		// writes that): keep the generation, drop the members.
		md = &GroupValue{ProtocolType: md.ProtocolType, Generation: md.Generation, StateTimestampMs: md.StateTimestampMs}
		g.leader = ""
	}
	for _, mv := range md.Members {
		if g.member(mv.MemberID) != nil || mv.MemberID == "" || (mv.InstanceID != "" && g.static[mv.InstanceID] != "") {
			continue // a duplicate (not written by a coordinator): the first one stands
		}
		m := &member{
			id: mv.MemberID, instanceID: mv.InstanceID, clientID: mv.ClientID, clientHost: mv.ClientHost,
			sessionTimeout:   time.Duration(mv.SessionTimeoutMs) * time.Millisecond,
			rebalanceTimeout: time.Duration(mv.RebalanceTimeoutMs) * time.Millisecond,
			protocols:        []Protocol{{Name: md.Protocol, Metadata: mv.Subscription}},
			assignment:       mv.Assignment,
		}
		if m.rebalanceTimeout <= 0 {
			m.rebalanceTimeout = rebalanceTimeoutFallback
		}
		m.heartbeatDeadline = c.now.Add(m.sessionTimeout)
		g.addMember(m)
	}
	if len(g.members) > 0 {
		g.state = Stable
		if g.member(g.leader) == nil {
			g.leader = g.members[0].id
		}
	} else if md.StateTimestampMs >= 0 {
		g.stateSince = time.UnixMilli(md.StateTimestampMs)
	}
	return g
}

// Unload stops serving partition: its groups are dropped, their waiting JoinGroup and
// SyncGroup requests are answered NOT_COORDINATOR, and its appends in flight are abandoned
// (their commits answered NOT_COORDINATOR; AppendDone for them is then ignored).
func (c *Coordinator) Unload(now time.Time, partition int32) {
	c.advance(now)
	for _, id := range slices.Sorted(maps.Keys(c.groups)) {
		g := c.groups[id]
		if g.partition != partition {
			continue
		}
		for _, m := range slices.Clone(g.members) {
			c.answerWaiting(m, CodeNotCoordinator)
		}
		g.state = Dead
		delete(c.groups, id)
	}
	for _, id := range slices.Sorted(maps.Keys(c.pending)) {
		if p := c.pending[id]; p.partition == partition {
			delete(c.pending, id)
			p.done(CodeNotCoordinator)
		}
	}
	delete(c.partitions, partition)
}

// Serving reports whether the coordinator serves partition (loaded, not loading).
func (c *Coordinator) Serving(partition int32) bool { return c.partitions[partition] }

// lookupCode says whether this coordinator can answer for groupID now.
func (c *Coordinator) lookupCode(groupID string) Code {
	if groupID == "" {
		return CodeInvalidGroupID
	}
	serving, ok := c.partitions[PartitionFor(groupID, c.cfg.OffsetsPartitions)]
	switch {
	case !ok:
		return CodeNotCoordinator
	case !serving:
		return CodeCoordinatorLoadInProgress
	}
	return CodeNone
}

// Handle takes one request at time now. Its reply comes out of Ready, now or later.
func (c *Coordinator) Handle(now time.Time, req Request) {
	c.advance(now)
	switch r := req.(type) {
	case JoinGroup:
		c.join(r)
	case SyncGroup:
		c.sync(r)
	case Heartbeat:
		c.reply(r.ReqID, HeartbeatResponse{Err: c.heartbeat(r)})
	case LeaveGroup:
		c.leave(r)
	case OffsetCommit:
		c.commit(r)
	case OffsetFetch:
		c.reply(r.ReqID, c.fetchOffsets(r))
	case ListGroups:
		c.reply(r.ReqID, c.list(r))
	case DescribeGroups:
		c.reply(r.ReqID, c.describe(r))
	case DeleteGroups:
		c.deleteGroups(r)
	default:
		panic(fmt.Sprintf("group: unknown request %T", req))
	}
	c.checkIfEnabled()
}

// Tick runs the timers due at now: join and sync phases that ran out, sessions that
// expired, offsets past retention. The driver calls it at NextDeadline (or periodically).
func (c *Coordinator) Tick(now time.Time) {
	c.advance(now)
	var due []string
	for id, g := range c.groups {
		if d, ok := g.nextDeadline(c.cfg); ok && !d.After(c.now) {
			due = append(due, id)
		}
	}
	slices.Sort(due)
	for _, id := range due {
		if g := c.groups[id]; g != nil {
			c.tickGroup(g)
		}
	}
	c.checkIfEnabled()
}

// NextDeadline returns the earliest time at which Tick has work, if any.
func (c *Coordinator) NextDeadline() (time.Time, bool) {
	var next time.Time
	found := false
	for _, g := range c.groups {
		if d, ok := g.nextDeadline(c.cfg); ok && (!found || d.Before(next)) {
			next, found = d, true
		}
	}
	return next, found
}

func (c *Coordinator) tickGroup(g *group) {
	now := c.now
	switch g.state {
	case PreparingRebalance:
		if !g.joinDeadline.After(now) {
			c.completeJoin(g)
			return
		}
	case CompletingRebalance, Stable:
		if g.syncPending() && !g.syncDeadline.After(now) {
			// Members that did not fetch their assignment within the rebalance timeout are
			// stuck (or the leader never sent one): remove them and rebalance.
			for _, m := range slices.Clone(g.members) {
				if g.pendingSync[m.id] {
					c.removeMember(g, m, CodeUnknownMemberID)
				}
			}
			c.prepareRebalance(g)
			return
		}
	}
	expired := false
	for _, m := range slices.Clone(g.members) {
		if !m.awaitingJoin && !m.awaitingSync && !m.heartbeatDeadline.After(now) {
			c.removeMember(g, m, CodeUnknownMemberID)
			expired = true
		}
	}
	if expired {
		c.membershipChanged(g)
	}
	if g.state == Empty {
		c.expireOffsets(g)
	}
}

// membershipChanged moves the group on after members left or were removed.
func (c *Coordinator) membershipChanged(g *group) {
	switch g.state {
	case Stable, CompletingRebalance:
		c.prepareRebalance(g)
	case PreparingRebalance:
		c.maybeCompleteJoin(g)
	}
}

// ---- JoinGroup ----

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
	if r.RebalanceTimeout <= 0 {
		r.RebalanceTimeout = rebalanceTimeoutFallback
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
		c.addMemberAndRebalance(g, r)
		return
	}
	m := g.member(r.MemberID)
	if r.InstanceID != "" && g.static[r.InstanceID] != "" && g.static[r.InstanceID] != r.MemberID {
		fail(CodeFencedInstanceID)
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

func (c *Coordinator) addMemberAndRebalance(g *group, r JoinGroup) {
	m := &member{
		id: g.newMemberID(r.ClientID, c.cfg.Incarnation, &c.memberSeq), instanceID: r.InstanceID, clientID: r.ClientID, clientHost: r.ClientHost,
	}
	m.update(r, c.now)
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
	m.awaitingJoin, m.joinReq = false, 0
	if g.selectProtocol() != g.protocol {
		c.updateMemberAndRebalance(g, m, r)
		return
	}
	generation := g.generation
	c.append(g.partition, []Record{GroupRecord(g.id, g.value(c.now))}, func(code Code) {
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
	if g.state != PreparingRebalance || g.initialDelay {
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
		c.append(g.partition, []Record{GroupRecord(g.id, g.value(c.now))}, func(Code) {})
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
		if m.awaitingSync {
			c.reply(m.syncReq, SyncGroupResponse{Err: CodeRebalanceInProgress})
		}
		m.awaitingSync, m.syncReq = true, r.ReqID
		delete(g.pendingSync, m.id)
		if m.id == g.leader && !g.assignmentPending {
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
	}
	g.assignmentPending = true
	generation := g.generation
	c.append(g.partition, []Record{GroupRecord(g.id, g.value(c.now))}, func(code Code) {
		g.assignmentPending = false
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
	left := false
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
	}
}

// removeMember drops m from g, answering its waiting JoinGroup or SyncGroup with code.
func (c *Coordinator) removeMember(g *group, m *member, code Code) {
	c.answerWaiting(m, code)
	g.removeMember(m)
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

// ---- Offsets ----

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
	c.append(g.partition, recs, func(code Code) {
		for _, i := range stored {
			results[i].Err = code
			if code != CodeNone {
				continue
			}
			o := r.Offsets[i]
			if live := c.groups[g.id]; live != nil { // not deleted meanwhile
				live.offsets[TopicPartition{o.Topic, o.Partition}] = OffsetValue{
					Offset: o.Offset, LeaderEpoch: o.LeaderEpoch, Metadata: o.Metadata,
					CommitTimestampMs: nowMs, ExpireTimestampMs: -1}
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
		delete(g.offsets, tp)
		recs = append(recs, OffsetTombstone(g.id, tp.Topic, tp.Partition))
	}
	if len(g.offsets) == 0 {
		if g.generation > 0 { // its metadata was written once
			recs = append(recs, GroupTombstone(g.id))
		}
		g.setState(Dead, c.now)
		delete(c.groups, g.id)
	}
	if len(recs) > 0 {
		c.append(g.partition, recs, func(Code) {})
	}
}

// ---- ListGroups, DescribeGroups, DeleteGroups ----

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
		delete(c.groups, d.g.id)
		c.append(d.g.partition, recs, func(code Code) {
			results[d.index].Err = code
			waiting--
			answer()
		})
	}
	answer()
}

func compareTP(a, b TopicPartition) int {
	if c := cmp.Compare(a.Topic, b.Topic); c != 0 {
		return c
	}
	return cmp.Compare(a.Partition, b.Partition)
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
