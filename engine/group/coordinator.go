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
	// pendingMembersMaxDefault bounds the member ids handed out with MEMBER_ID_REQUIRED and
	// not yet used, per coordinator (Kafka: unbounded, each expiring after its session
	// timeout). An entry costs about 100 bytes, so 100 000 is ~10 MB per coordinator shard.
	pendingMembersMaxDefault = 100_000
	// pendingJoinWaitDefault is how long a join phase waits for a member that was just told
	// MEMBER_ID_REQUIRED (Kafka waits until the id expires: a member that never comes back
	// holds the rebalance for its session timeout). A client comes back within one round
	// trip; one that does not is a stray, and the rebalance goes on without it.
	pendingJoinWaitDefault = time.Second
)

// stateBytesMaxDefault bounds the state the groups of one coordinator keep in memory:
// members' protocol metadata and assignments, committed offsets with their metadata
// (Kafka: unbounded). A consumer keeps hundreds of bytes to a few KiB, an offset about
// offsetEntryBytes, so 256 MiB holds over a million offsets. Without it each JoinGroup
// could leave a frame's worth (up to 64 MiB) behind for its session timeout, and each
// OffsetCommit 40 MB (10,000 partitions of 4 KiB metadata) for the offsets' retention.
const stateBytesMaxDefault = 256 << 20

// offsetEntryBytes is what one committed offset costs besides its topic name and metadata:
// the map entry (key and value, 72 bytes) and the map's overhead.
const offsetEntryBytes = 128

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
	// StateBytesMax bounds what the groups keep: members' protocol names, metadata and
	// assignments, and committed offsets (offsetEntryBytes each, plus topic and metadata).
	// A JoinGroup, a leader's SyncGroup or an OffsetCommit that would take the coordinator
	// past it is answered COORDINATOR_NOT_AVAILABLE (retriable).
	StateBytesMax int64
	// PendingMembersMax bounds the member ids handed out with MEMBER_ID_REQUIRED and not
	// yet used, over all groups of the coordinator; beyond it a new member is answered
	// COORDINATOR_NOT_AVAILABLE (retriable). One group holds at most GroupMembersMax of
	// them; beyond that its oldest is dropped (its member, if it ever comes back, is
	// answered UNKNOWN_MEMBER_ID and starts over).
	PendingMembersMax int
	// PendingJoinWait is how long a join phase waits for a member told MEMBER_ID_REQUIRED
	// to come back (at most until its id expires). Negative: not at all.
	PendingJoinWait time.Duration
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
	if c.StateBytesMax <= 0 {
		c.StateBytesMax = stateBytesMaxDefault
	}
	if c.PendingMembersMax <= 0 {
		c.PendingMembersMax = pendingMembersMaxDefault
	}
	def(&c.PendingJoinWait, pendingJoinWaitDefault)
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
	pendingIDs int                       // member ids pending over all groups (MEMBER_ID_REQUIRED)
	timers     timerHeap                 // each group's next deadline (lazy entries; see timers.go)
	out        []Output                  // outputs not yet taken by Ready

	stateBytes int64 // what the groups keep (state.go; Config.StateBytesMax)
}

type pendingAppend struct {
	partition int32
	group     *group // the group whose state done changes
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

func (c *Coordinator) append(g *group, recs []Record, done func(Code)) {
	id := c.nextAppend
	c.nextAppend++
	partition := g.partition
	c.pending[id] = &pendingAppend{partition: partition, group: g, done: done}
	g.appendsPending++
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
	if p.group != nil {
		p.group.appendsPending--
	}
	p.done(appendCode(err))
	if p.group != nil {
		c.schedule(p.group)
	}
	c.checkIfEnabled()
}

func (c *Coordinator) checkIfEnabled() {
	if invariantsEnabled {
		c.checkInvariants()
		c.checkPendingInvariants()
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
		if old := c.groups[id]; old != nil {
			c.uncountGroup(old) // replaced whole (a partition loads after it unloaded, which uncounted it)
		}
		g := c.loadGroup(id, partition, snap.Groups[id])
		c.groups[id] = g
		c.schedule(g)
	}
	c.partitions[partition] = true
	c.checkIfEnabled()
	return nil
}

func (c *Coordinator) loadGroup(id string, partition int32, lg *LoadedGroup) *group {
	g := newGroup(id, partition, c.now)
	g.offsets = maps.Clone(lg.Offsets)
	for tp, v := range g.offsets {
		c.stateBytes += offsetBytes(tp, v) // stored offsets count, past the bound too
	}
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
		c.recount(m) // stored members count, past the bound too: they were accepted once
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
		c.uncountGroup(g)
		g.state = Dead
		c.dropPending(g)
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

// Loaded reports whether partition is loading or served (loaded) and which (serving).
func (c *Coordinator) Loaded(partition int32) (serving, loaded bool) {
	serving, loaded = c.partitions[partition]
	return serving, loaded
}

// UnloadAll unloads every partition (see Unload), in partition order.
func (c *Coordinator) UnloadAll(now time.Time) {
	for _, p := range slices.Sorted(maps.Keys(c.partitions)) {
		c.Unload(now, p)
	}
}

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
	if g := c.groups[requestGroup(req)]; g != nil {
		c.schedule(g)
	}
	c.checkIfEnabled()
}

// requestGroup is the group a request may change ("" for those that change none).
func requestGroup(req Request) string {
	switch r := req.(type) {
	case JoinGroup:
		return r.Group
	case SyncGroup:
		return r.Group
	case Heartbeat:
		return r.Group
	case LeaveGroup:
		return r.Group
	case OffsetCommit:
		return r.Group
	}
	return ""
}

// Tick runs the timers due at now: join and sync phases that ran out, sessions that
// expired, offsets past retention. The driver calls it at NextDeadline (or periodically).
// Its cost is that of the groups due, not of all groups.
func (c *Coordinator) Tick(now time.Time) {
	c.advance(now)
	var ran []*group
	for len(c.timers) > 0 && !c.timers[0].at.After(c.now) {
		g, _ := c.popTimer()
		if g == nil {
			continue
		}
		if d, ok := g.nextDeadline(c.cfg); ok && !d.After(c.now) {
			c.tickGroup(g)
		}
		ran = append(ran, g)
	}
	for _, g := range ran {
		c.schedule(g)
	}
	c.checkIfEnabled()
}

// NextDeadline returns the earliest time at which Tick has work, if any.
func (c *Coordinator) NextDeadline() (time.Time, bool) {
	for len(c.timers) > 0 {
		top := c.timers[0]
		if c.groups[top.g.id] == top.g {
			if d, ok := top.g.nextDeadline(c.cfg); ok && d.Equal(top.at) {
				return top.at, true
			}
		}
		// Stale or early: drop it and put its group back at its real deadline.
		if g, _ := c.popTimer(); g != nil {
			c.schedule(g)
		}
	}
	return time.Time{}, false
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
	if c.tickPending(g) && g.state == PreparingRebalance {
		c.maybeCompleteJoin(g)
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
