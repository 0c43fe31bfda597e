package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ringlog/ringlog/engine/group/assign"
	"github.com/ringlog/ringlog/netio/wire"
)

// GroupConsumer is a consumer in a consumer group (Kafka's classic protocol): it joins the
// group, the group's leader (one of the members) assigns the subscribed topics' partitions
// with an assignor of engine/group/assign, and each member reads its partitions from the
// group's committed offsets. It is not safe for concurrent use (one goroutine subscribes,
// polls, commits and seeks); a background goroutine heartbeats.
//
// Rebalances happen inside Poll: a member whose heartbeat learns of a rebalance (or whose
// commit is refused for an old generation) rejoins on its next Poll. With an eager assignor
// (range, roundrobin, sticky) it gives up every partition first (OnRevoked, after a commit
// when AutoCommit is on); with cooperative-sticky it keeps its partitions, gives up only
// those the new plan moves away (OnRevoked for them, then a second join round that hands
// them to their new owners), and gets OnAssigned for what it gains.
//
// Delivery is at least once: a record is committed only once Poll returned it and the
// next Poll (auto commit) or a Commit ran; records returned but not committed when a
// member dies are read again by the partition's next owner.
type GroupConsumer struct {
	c   *Client
	cfg GroupConfig
	co  *Consumer

	topics   []string         // subscription (poll goroutine)
	owned    []TopicPartition // current assignment, sorted (poll goroutine)
	noOffset map[TopicPartition]bool
	// lastCommit is when auto commit last ran (poll goroutine).
	lastCommit time.Time
	closed     bool

	mu         sync.Mutex // guards the membership fields below (shared with the heartbeat goroutine)
	memberID   string
	generation int32
	rejoin     bool // a rebalance is under way (or the subscription changed): rejoin on Poll
	// rejoinGen is the generation the rebalance news was about (-1: any); news about an
	// older generation than the member now has is stale (it rejoined meanwhile).
	rejoinGen int32
	lost      bool  // the coordinator removed the member: its partitions are gone
	fatal     error // fenced by a newer instance with the same InstanceID

	// lastPollNanos is when Poll last returned (unix ns); the heartbeat goroutine leaves the
	// group when it is older than RebalanceTimeout (Kafka's max.poll.interval.ms).
	lastPollNanos atomic.Int64
	inPoll        atomic.Bool // a Poll is running (a join inside it may take long)

	stopHeartbeat chan struct{}
	heartbeatDone chan struct{}
}

// GroupConfig configures a GroupConsumer. Zero fields take the defaults noted.
type GroupConfig struct {
	Group string // group.id; required
	// InstanceID is group.instance.id: a static member keeps its partitions across a
	// restart within SessionTimeout, without a rebalance. Close does not leave the group
	// then (the restarted process takes the member's place).
	InstanceID string
	// SessionTimeout: the coordinator removes a member whose heartbeats stop for this
	// long. Default 10 s; the broker bounds it (--group-min/max-session-timeout).
	SessionTimeout time.Duration
	// RebalanceTimeout is Kafka's max.poll.interval.ms: how long a join phase waits for
	// this member's Poll, and how long the member may go without calling Poll before it
	// leaves the group by itself (its partitions go to the others; the next Poll rejoins).
	// Default 5 min.
	RebalanceTimeout time.Duration
	// HeartbeatInterval defaults to SessionTimeout / 3.
	HeartbeatInterval time.Duration
	// Assignors in order of preference: range, roundrobin, sticky, cooperative-sticky.
	// Default range. Every member of a group must list the one the group uses.
	Assignors []string
	// AutoCommit commits the positions of what Poll returned at the start of the next
	// Poll, at most every AutoCommitInterval (default 5 s), before a revoke and on Close.
	AutoCommit         bool
	AutoCommitInterval time.Duration
	// AutoOffsetReset says where a partition without a committed offset starts, and where
	// one whose committed offset fell out of the log restarts: "earliest", "latest"
	// (default) or "none" (Poll reports ErrNoCommittedOffset or OFFSET_OUT_OF_RANGE and
	// skips nothing; Seek decides).
	AutoOffsetReset string
	// OnAssigned and OnRevoked run inside Poll (and Close) when partitions are given to
	// or taken from this member.
	OnAssigned func(ctx context.Context, partitions []TopicPartition)
	OnRevoked  func(ctx context.Context, partitions []TopicPartition)
	// Consumer holds the fetch settings (OnOutOfRange is set from AutoOffsetReset).
	Consumer ConsumerConfig
}

// Defaults of GroupConfig.
const (
	groupSessionTimeoutDefault   = 10 * time.Second
	groupRebalanceTimeoutDefault = 5 * time.Minute
	autoCommitIntervalDefault    = 5 * time.Second
	// joinRoundsMax bounds the join rounds of one Poll (a cooperative rebalance takes two;
	// each refused join takes one more).
	joinRoundsMax = 16
)

// Errors of the group consumer.
var (
	// ErrNoCommittedOffset: a partition has no committed offset and AutoOffsetReset is
	// "none"; Seek it.
	ErrNoCommittedOffset = errors.New("ringlog client: no committed offset and auto.offset.reset is none")
	// ErrGroupConsumerClosed is returned by calls after Close.
	ErrGroupConsumerClosed = errors.New("ringlog client: group consumer closed")
)

// NewGroupConsumer returns a consumer of group cfg.Group; it joins on the first Poll.
func (c *Client) NewGroupConsumer(cfg GroupConfig) (*GroupConsumer, error) {
	if cfg.Group == "" {
		return nil, fmt.Errorf("group consumer: %w", wire.ErrInvalidGroupID)
	}
	if cfg.SessionTimeout <= 0 {
		cfg.SessionTimeout = groupSessionTimeoutDefault
	}
	if cfg.RebalanceTimeout <= 0 {
		cfg.RebalanceTimeout = groupRebalanceTimeoutDefault
	}
	if cfg.HeartbeatInterval <= 0 {
		cfg.HeartbeatInterval = cfg.SessionTimeout / 3
	}
	if cfg.AutoCommitInterval <= 0 {
		cfg.AutoCommitInterval = autoCommitIntervalDefault
	}
	if len(cfg.Assignors) == 0 {
		cfg.Assignors = []string{assign.Range}
	}
	for _, name := range cfg.Assignors {
		if _, ok := assign.ByName(name); !ok {
			return nil, fmt.Errorf("group consumer: unknown assignor %q (range, roundrobin, sticky, cooperative-sticky)", name)
		}
	}
	switch cfg.AutoOffsetReset {
	case "", "latest":
		cfg.AutoOffsetReset = "latest"
		cfg.Consumer.OnOutOfRange = Latest()
	case "earliest":
		cfg.Consumer.OnOutOfRange = Earliest()
	case "none":
		cfg.Consumer.OnOutOfRange = Offset{}
	default:
		return nil, fmt.Errorf("group consumer: auto.offset.reset %q: want earliest, latest or none", cfg.AutoOffsetReset)
	}
	if cfg.Consumer.QuotaGroup == "" {
		cfg.Consumer.QuotaGroup = cfg.Group // its members share the group's fetch quota
	}
	g := &GroupConsumer{c: c, cfg: cfg, co: c.NewConsumer(cfg.Consumer), noOffset: map[TopicPartition]bool{},
		generation: -1, stopHeartbeat: make(chan struct{}), heartbeatDone: make(chan struct{})}
	go g.heartbeatLoop()
	return g, nil
}

// Subscribe sets the topics to consume (replacing the previous ones); the group
// rebalances on the next Poll.
func (g *GroupConsumer) Subscribe(topics ...string) {
	g.topics = slices.Sorted(slices.Values(topics))
	g.topics = slices.Compact(g.topics)
	g.mu.Lock()
	g.rejoin, g.rejoinGen = true, -1
	g.mu.Unlock()
}

// Assignment returns the partitions this member owns now.
func (g *GroupConsumer) Assignment() []TopicPartition { return slices.Clone(g.owned) }

// Member returns the member id and generation (empty and -1 before the first join).
func (g *GroupConsumer) Member() (string, int32) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.memberID, g.generation
}

// Seek moves an owned partition's position; the next Poll reads from offset.
func (g *GroupConsumer) Seek(tp TopicPartition, offset int64) error {
	if !slices.Contains(g.owned, tp) {
		return fmt.Errorf("seek %s/%d: not assigned to this member", tp.Topic, tp.Partition)
	}
	delete(g.noOffset, tp)
	g.co.Seek(tp.Topic, tp.Partition, AtOffset(offset))
	return nil
}

// Position returns the next offset Poll reads from an owned partition.
func (g *GroupConsumer) Position(ctx context.Context, tp TopicPartition) (int64, error) {
	if !slices.Contains(g.owned, tp) {
		return -1, fmt.Errorf("position of %s/%d: not assigned to this member", tp.Topic, tp.Partition)
	}
	return g.co.Position(ctx, tp.Topic, tp.Partition)
}

// Poll joins or rejoins the group when needed, commits what the previous Polls returned
// when auto commit is due, and returns the next records of the owned partitions (waiting
// up to Consumer.MaxWait).
func (g *GroupConsumer) Poll(ctx context.Context) ([]ConsumedRecord, error) {
	if g.closed {
		return nil, ErrGroupConsumerClosed
	}
	if len(g.topics) == 0 {
		return nil, errors.New("poll: no topics subscribed")
	}
	g.inPoll.Store(true)
	defer func() {
		g.lastPollNanos.Store(time.Now().UnixNano())
		g.inPoll.Store(false)
	}()
	if err := g.ensureActive(ctx); err != nil {
		return nil, err
	}
	if g.cfg.AutoCommit && time.Since(g.lastCommit) >= g.cfg.AutoCommitInterval {
		g.autoCommit(ctx)
	}
	if len(g.noOffset) > 0 {
		for _, tp := range g.owned {
			if g.noOffset[tp] {
				return nil, fmt.Errorf("poll %s/%d: %w", tp.Topic, tp.Partition, ErrNoCommittedOffset)
			}
		}
	}
	if len(g.owned) == 0 {
		sleepContext(ctx, g.co.cfg.MaxWait) // nothing assigned: wait as a long-poll would
		return nil, ctx.Err()
	}
	return g.co.Poll(ctx)
}

// autoCommit commits the positions; a refusal because of a rebalance means rejoin.
func (g *GroupConsumer) autoCommit(ctx context.Context) {
	g.lastCommit = time.Now()
	if err := g.commitOwned(ctx, g.owned); err != nil {
		g.co.cfg.Logger.Warn("group consumer: auto commit failed", "group", g.cfg.Group, "err", err)
	}
}

// CommitSync commits the position of every owned partition (the offset after the last
// record Poll returned) and waits for the answer.
func (g *GroupConsumer) CommitSync(ctx context.Context) error {
	if g.closed {
		return ErrGroupConsumerClosed
	}
	return g.commitOwned(ctx, g.owned)
}

// CommitAsync commits the positions of every owned partition in the background; done (if
// not nil) gets the outcome on another goroutine.
func (g *GroupConsumer) CommitAsync(ctx context.Context, done func(error)) {
	offsets, err := g.positions(ctx, g.owned)
	if err == nil && g.closed {
		err = ErrGroupConsumerClosed
	}
	if err != nil {
		if done != nil {
			go done(err)
		}
		return
	}
	go func() {
		err := g.commitOffsets(ctx, offsets)
		if done != nil {
			done(err)
		}
	}()
}

// CommitOffsets commits the given offsets (the next offset to read, per partition).
func (g *GroupConsumer) CommitOffsets(ctx context.Context, offsets []CommittedOffset) error {
	return g.commitOffsets(ctx, offsets)
}

func (g *GroupConsumer) commitOwned(ctx context.Context, tps []TopicPartition) error {
	offsets, err := g.positions(ctx, tps)
	if err != nil {
		return err
	}
	return g.commitOffsets(ctx, offsets)
}

// positions are the consumed positions of tps whose position is known.
func (g *GroupConsumer) positions(ctx context.Context, tps []TopicPartition) ([]CommittedOffset, error) {
	var out []CommittedOffset
	for _, tp := range tps {
		if g.noOffset[tp] {
			continue
		}
		pos, err := g.co.Position(ctx, tp.Topic, tp.Partition)
		if err != nil {
			return nil, fmt.Errorf("position of %s/%d: %w", tp.Topic, tp.Partition, err)
		}
		out = append(out, CommittedOffset{TopicPartition: tp, Offset: pos})
	}
	return out, nil
}

func (g *GroupConsumer) commitOffsets(ctx context.Context, offsets []CommittedOffset) error {
	g.mu.Lock()
	member, generation := g.memberID, g.generation
	g.mu.Unlock()
	err := g.c.commit(ctx, g.cfg.Group, member, g.cfg.InstanceID, generation, offsets)
	if errors.Is(err, wire.ErrRebalanceInProgress) || errors.Is(err, wire.ErrIllegalGeneration) || errors.Is(err, wire.ErrUnknownMemberID) {
		unknown := errors.Is(err, wire.ErrUnknownMemberID)
		g.needRejoin(generation, unknown, unknown)
	}
	return err
}

// needRejoin marks a rebalance learned while the member was at generation (-1: now).
// lost says the member's partitions are gone (its generation is over); forget says the
// coordinator no longer knows its member id either, so it joins as a new member.
//
// As Kafka's consumer (AbstractCoordinator: SyncGroup and Heartbeat responses call
// resetStateOnResponseError(api, error, error != ILLEGAL_GENERATION), as does
// ConsumerCoordinator's OffsetCommit handler), ILLEGAL_GENERATION keeps the member id:
// the member is still in the group, only its generation is old. Rejoining under a new id
// would leave the old one in the group until its session timeout, and the rebalance
// would wait for it.
func (g *GroupConsumer) needRejoin(generation int32, lost, forget bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if generation >= 0 && generation < g.generation {
		return // about a generation the member already left behind
	}
	g.rejoin, g.rejoinGen = true, -1
	if lost {
		g.lost = true
		g.generation = -1
	}
	if forget {
		g.memberID = ""
	}
}

// ensureActive runs join rounds until the member holds a current assignment.
func (g *GroupConsumer) ensureActive(ctx context.Context) error {
	for range joinRoundsMax {
		g.mu.Lock()
		fatal, rejoin, lost, member := g.fatal, g.rejoin, g.lost, g.memberID
		if rejoin && g.rejoinGen >= 0 && g.rejoinGen < g.generation {
			rejoin = false // news about a generation this member has left behind
		}
		g.rejoin, g.lost = false, false
		g.mu.Unlock()
		if fatal != nil {
			return fatal
		}
		if lost {
			// The partitions now belong to others: drop them without committing.
			g.revoke(ctx, g.owned, false)
		}
		if !rejoin && member != "" {
			return nil
		}
		if err := g.joinRound(ctx); err != nil {
			// A round cut short (the Poll's context ended while SyncGroup waited for the
			// leader, a call failed) leaves no assignment: the next Poll joins again, or the
			// member would stay "active" with nothing assigned while the coordinator's
			// Stable generation gives it partitions nobody reads
			// (kafka.TestBundledMemberPollTimesOutInSync).
			g.needRejoin(-1, false, false)
			return err
		}
	}
	return fmt.Errorf("group %s: no stable assignment after %d join rounds", g.cfg.Group, joinRoundsMax)
}

func (g *GroupConsumer) cooperative(protocol string) bool { return assign.Cooperative(protocol) }

// joinRound is one JoinGroup + SyncGroup exchange and what follows from its assignment.
func (g *GroupConsumer) joinRound(ctx context.Context) error {
	previouslyOwned := slices.Clone(g.owned)
	coop := g.cfg.Assignors[0] == assign.CooperativeSticky
	if !coop && len(g.owned) > 0 {
		g.revoke(ctx, g.owned, g.cfg.AutoCommit) // eager: give everything up first
	}
	g.mu.Lock()
	member, generation := g.memberID, g.generation
	g.mu.Unlock()
	sub := assign.EncodeSubscription(nil, assign.Subscription{Topics: g.topics, Owned: toAssign(previouslyOwned), Generation: generation})
	req := &wire.JoinGroupRequest{Group: g.cfg.Group, MemberID: member, InstanceID: g.cfg.InstanceID, ClientID: g.c.cfg.ClientID,
		SessionTimeoutMs: durationMs(g.cfg.SessionTimeout), RebalanceTimeoutMs: durationMs(g.cfg.RebalanceTimeout), ProtocolType: assign.ProtocolType}
	for _, name := range g.cfg.Assignors {
		req.Protocols = append(req.Protocols, wire.GroupProtocol{Name: name, Metadata: sub})
	}
	req.Version = g.c.apiVersion(wire.APIJoinGroup)
	joinCtx, cancel := context.WithTimeout(ctx, g.cfg.RebalanceTimeout+g.cfg.SessionTimeout)
	defer cancel()
	var jr wire.JoinGroupResponse
	err := g.c.groupCall(joinCtx, g.cfg.Group, req, &jr, func() wire.ErrorCode { return jr.ErrorCode })
	if errors.Is(err, wire.ErrUnsupportedVersion) && req.Version > 0 {
		// The coordinator runs an older release than the broker we handshook with (a
		// cluster mid-upgrade): join as version 0 did.
		req.Version = 0
		err = g.c.groupCall(joinCtx, g.cfg.Group, req, &jr, func() wire.ErrorCode { return jr.ErrorCode })
	}
	if err != nil {
		return fmt.Errorf("join group %s: %w", g.cfg.Group, err)
	}
	if jr.ErrorCode == wire.ErrMemberIDRequired && member == "" && jr.MemberID != "" {
		// KIP-394: the coordinator handed out our member id without adding us yet; join
		// with it at once. Kept from now on, so a join cut short after this point (Poll's
		// context ending while the join phase waits) leaves no nameless member behind: the
		// next Poll rejoins under this id, and Close leaves with it.
		g.mu.Lock()
		g.memberID, g.generation = jr.MemberID, -1
		g.mu.Unlock()
		req.MemberID, jr = jr.MemberID, wire.JoinGroupResponse{}
		if err := g.c.groupCall(joinCtx, g.cfg.Group, req, &jr, func() wire.ErrorCode { return jr.ErrorCode }); err != nil {
			return fmt.Errorf("join group %s: %w", g.cfg.Group, err)
		}
	}
	if proceed, err := g.membershipCode("join", jr.ErrorCode, jr.ErrorMessage); !proceed {
		return err
	}
	g.mu.Lock()
	g.memberID, g.generation = jr.MemberID, jr.Generation
	g.mu.Unlock()
	syncReq := &wire.SyncGroupRequest{Group: g.cfg.Group, MemberID: jr.MemberID, InstanceID: g.cfg.InstanceID, Generation: jr.Generation,
		ProtocolType: jr.ProtocolType, Protocol: jr.Protocol}
	if jr.Leader == jr.MemberID && len(jr.Members) > 0 {
		assignments, err := g.assign(ctx, jr)
		if err != nil {
			return err
		}
		syncReq.Assignments = assignments
	}
	var sr wire.SyncGroupResponse
	if err := g.c.groupCall(joinCtx, g.cfg.Group, syncReq, &sr, func() wire.ErrorCode { return sr.ErrorCode }); err != nil {
		return fmt.Errorf("sync group %s: %w", g.cfg.Group, err)
	}
	if proceed, err := g.membershipCode("sync", sr.ErrorCode, sr.ErrorMessage); !proceed {
		return err
	}
	var got []TopicPartition
	if len(sr.Assignment) > 0 {
		a, err := assign.DecodeAssignment(sr.Assignment)
		if err != nil {
			return fmt.Errorf("sync group %s: %w", g.cfg.Group, err)
		}
		got = fromAssign(a.Partitions)
	}
	return g.apply(ctx, got, g.cooperative(jr.Protocol))
}

// membershipCode acts on a JoinGroup or SyncGroup error code: proceed on success; a code
// that means "rejoin" schedules another round (nil error); fencing is fatal.
func (g *GroupConsumer) membershipCode(what string, code wire.ErrorCode, message string) (proceed bool, err error) {
	switch code {
	case wire.ErrNone:
		return true, nil
	case wire.ErrUnknownMemberID:
		g.needRejoin(-1, true, true)
		return false, nil
	case wire.ErrIllegalGeneration:
		g.needRejoin(-1, true, false) // still a member: rejoin under the same id
		return false, nil
	case wire.ErrRebalanceInProgress:
		g.needRejoin(-1, false, false)
		return false, nil
	case wire.ErrFencedInstanceID:
		return false, g.setFatal(wire.CodeError(code, message))
	}
	return false, fmt.Errorf("%s group %s: %w", what, g.cfg.Group, wire.CodeError(code, message))
}

// apply takes the new assignment: revokes what moved away (cooperative: then rejoins for
// the second round), assigns what is new from the committed offsets.
func (g *GroupConsumer) apply(ctx context.Context, got []TopicPartition, coop bool) error {
	sortTPs(got)
	var revoked, added []TopicPartition
	for _, tp := range g.owned {
		if !slices.Contains(got, tp) {
			revoked = append(revoked, tp)
		}
	}
	for _, tp := range got {
		if !slices.Contains(g.owned, tp) {
			added = append(added, tp)
		}
	}
	if len(revoked) > 0 {
		g.revoke(ctx, revoked, g.cfg.AutoCommit)
		if coop {
			g.needRejoin(-1, false, false) // the second round hands them to their new owners
		}
	}
	if len(added) == 0 {
		return nil
	}
	committed, err := g.c.FetchCommitted(ctx, g.cfg.Group, added...)
	if err != nil {
		return err
	}
	at := map[TopicPartition]int64{}
	for _, o := range committed {
		at[o.TopicPartition] = o.Offset
	}
	for _, tp := range added {
		off, ok := at[tp]
		switch {
		case ok && off >= 0:
			g.co.Assign(tp.Topic, tp.Partition, AtOffset(off))
		case g.cfg.AutoOffsetReset == "earliest":
			g.co.Assign(tp.Topic, tp.Partition, Earliest())
		case g.cfg.AutoOffsetReset == "latest":
			g.co.Assign(tp.Topic, tp.Partition, Latest())
		default:
			g.noOffset[tp] = true
		}
		g.owned = append(g.owned, tp)
	}
	sortTPs(g.owned)
	if g.cfg.OnAssigned != nil {
		g.cfg.OnAssigned(ctx, added)
	}
	return nil
}

// revoke gives up tps: commits their positions first when commit is set, tells
// OnRevoked, and stops reading them.
func (g *GroupConsumer) revoke(ctx context.Context, tps []TopicPartition, commit bool) {
	if len(tps) == 0 {
		return
	}
	tps = slices.Clone(tps)
	if commit {
		if err := g.commitOwned(ctx, tps); err != nil {
			g.co.cfg.Logger.Warn("group consumer: commit before revoke failed; the next owner reads these records again",
				"group", g.cfg.Group, "err", err)
		}
	}
	if g.cfg.OnRevoked != nil {
		g.cfg.OnRevoked(ctx, tps)
	}
	for _, tp := range tps {
		g.co.Unassign(tp.Topic, tp.Partition)
		delete(g.noOffset, tp)
	}
	g.owned = slices.DeleteFunc(g.owned, func(tp TopicPartition) bool { return slices.Contains(tps, tp) })
}

// assign runs the group's assignor as its leader.
func (g *GroupConsumer) assign(ctx context.Context, jr wire.JoinGroupResponse) ([]wire.SyncGroupAssignment, error) {
	assignor, ok := assign.ByName(jr.Protocol)
	if !ok {
		return nil, fmt.Errorf("group %s: the group chose assignor %q, which this client does not have", g.cfg.Group, jr.Protocol)
	}
	members := make([]assign.Member, 0, len(jr.Members))
	counts := map[string]int32{}
	for _, m := range jr.Members {
		sub, err := assign.DecodeSubscription(m.Metadata)
		if err != nil {
			return nil, fmt.Errorf("group %s: subscription of %s: %w", g.cfg.Group, m.MemberID, err)
		}
		members = append(members, sub.Member(m.MemberID, m.InstanceID))
		for _, t := range sub.Topics {
			if _, seen := counts[t]; seen {
				continue
			}
			n, err := g.c.Partitions(ctx, t)
			if err != nil && !errors.Is(err, wire.ErrUnknownTopicOrPartition) {
				return nil, fmt.Errorf("group %s: partitions of %s: %w", g.cfg.Group, t, err)
			}
			counts[t] = int32(n) // 0 for a topic that does not exist: not assigned
		}
	}
	plan := assignor.Assign(members, counts)
	out := make([]wire.SyncGroupAssignment, 0, len(members))
	for _, m := range members {
		out = append(out, wire.SyncGroupAssignment{MemberID: m.ID, Assignment: assign.EncodeAssignment(nil, assign.Assignment{Partitions: plan[m.ID]})})
	}
	return out, nil
}

func (g *GroupConsumer) setFatal(err error) error {
	g.mu.Lock()
	g.fatal = fmt.Errorf("group %s: %w", g.cfg.Group, err)
	err = g.fatal
	g.mu.Unlock()
	return err
}

// heartbeatLoop keeps the member's session alive and notices rebalances.
func (g *GroupConsumer) heartbeatLoop() {
	defer close(g.heartbeatDone)
	t := time.NewTicker(g.cfg.HeartbeatInterval)
	defer t.Stop()
	for {
		select {
		case <-g.stopHeartbeat:
			return
		case <-t.C:
		}
		g.mu.Lock()
		member, generation := g.memberID, g.generation
		g.mu.Unlock()
		if member == "" || generation < 0 {
			continue
		}
		if last := g.lastPollNanos.Load(); last != 0 && !g.inPoll.Load() && time.Since(time.Unix(0, last)) > g.cfg.RebalanceTimeout {
			g.leaveStuck(member)
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), g.cfg.HeartbeatInterval)
		var resp wire.HeartbeatResponse
		err := g.c.groupCall(ctx, g.cfg.Group, &wire.HeartbeatRequest{Group: g.cfg.Group, MemberID: member, InstanceID: g.cfg.InstanceID, Generation: generation},
			&resp, func() wire.ErrorCode { return resp.ErrorCode })
		cancel()
		if errors.Is(err, ErrClosed) {
			return
		}
		if err != nil {
			continue // the next beat tries again; the session timeout is the judge
		}
		g.mu.Lock()
		if g.memberID == member && g.generation == generation { // not rejoined meanwhile
			switch resp.ErrorCode {
			case wire.ErrRebalanceInProgress:
				g.rejoin, g.rejoinGen = true, generation
			case wire.ErrIllegalGeneration: // still a member (needRejoin says why the id is kept)
				g.rejoin, g.rejoinGen, g.lost = true, -1, true
				g.generation = -1
			case wire.ErrUnknownMemberID:
				g.rejoin, g.rejoinGen, g.lost = true, -1, true
				g.memberID, g.generation = "", -1
			case wire.ErrFencedInstanceID:
				g.fatal = fmt.Errorf("group %s: %w", g.cfg.Group, wire.CodeError(resp.ErrorCode, resp.ErrorMessage))
			}
		}
		g.mu.Unlock()
	}
}

// leaveStuck leaves the group for a member whose Poll has not run for RebalanceTimeout,
// as Kafka's consumer does: the others get its partitions at once instead of waiting for
// the coordinator's rebalance timeout. The next Poll revokes the partitions (without
// committing: they belong to others now) and joins again. A static member leaves too.
func (g *GroupConsumer) leaveStuck(member string) {
	g.mu.Lock()
	if g.memberID != member {
		g.mu.Unlock()
		return
	}
	g.rejoin, g.rejoinGen, g.lost = true, -1, true
	g.memberID, g.generation = "", -1
	g.mu.Unlock()
	g.co.cfg.Logger.Warn("group consumer: Poll not called within the rebalance timeout (max.poll.interval); leaving the group",
		"group", g.cfg.Group, "member", member, "rebalance_timeout", g.cfg.RebalanceTimeout)
	ctx, cancel := context.WithTimeout(context.Background(), g.cfg.SessionTimeout)
	defer cancel()
	var resp wire.LeaveGroupResponse
	_ = g.c.groupCall(ctx, g.cfg.Group, &wire.LeaveGroupRequest{Group: g.cfg.Group, Members: []wire.GroupMemberRef{{MemberID: member, InstanceID: g.cfg.InstanceID}}},
		&resp, func() wire.ErrorCode { return resp.ErrorCode })
}

// Close commits (AutoCommit), revokes the partitions and leaves the group — except a
// static member, which stays in the group until its session timeout so that a restart
// takes its place without a rebalance. It does not close the Client.
func (g *GroupConsumer) Close(ctx context.Context) error {
	if g.closed {
		return nil
	}
	g.closed = true
	close(g.stopHeartbeat)
	<-g.heartbeatDone
	g.revoke(ctx, g.owned, g.cfg.AutoCommit)
	g.mu.Lock()
	member := g.memberID
	g.memberID, g.generation = "", -1
	g.mu.Unlock()
	if member == "" || g.cfg.InstanceID != "" {
		return nil
	}
	var resp wire.LeaveGroupResponse
	err := g.c.groupCall(ctx, g.cfg.Group, &wire.LeaveGroupRequest{Group: g.cfg.Group, Members: []wire.GroupMemberRef{{MemberID: member}}},
		&resp, func() wire.ErrorCode { return resp.ErrorCode })
	if err == nil && resp.ErrorCode != wire.ErrNone {
		err = wire.CodeError(resp.ErrorCode, resp.ErrorMessage)
	}
	if err != nil {
		return fmt.Errorf("leave group %s: %w", g.cfg.Group, err)
	}
	return nil
}

// Abandon stops the heartbeats and forgets the membership without leaving or committing:
// what a crashed process leaves behind (the coordinator removes the member once its
// session timeout passes). For tests and benchmarks of failure handling.
func (g *GroupConsumer) Abandon() {
	if g.closed {
		return
	}
	g.closed = true
	close(g.stopHeartbeat)
	<-g.heartbeatDone
}

func toAssign(tps []TopicPartition) []assign.TopicPartition {
	out := make([]assign.TopicPartition, len(tps))
	for i, tp := range tps {
		out[i] = assign.TopicPartition{Topic: tp.Topic, Partition: tp.Partition}
	}
	return out
}

func fromAssign(tps []assign.TopicPartition) []TopicPartition {
	out := make([]TopicPartition, len(tps))
	for i, tp := range tps {
		out[i] = TopicPartition{Topic: tp.Topic, Partition: tp.Partition}
	}
	return out
}

func sortTPs(tps []TopicPartition) {
	slices.SortFunc(tps, func(a, b TopicPartition) int {
		if a.Topic != b.Topic {
			if a.Topic < b.Topic {
				return -1
			}
			return 1
		}
		return int(a.Partition) - int(b.Partition)
	})
}

func durationMs(d time.Duration) int32 { return int32(min(d.Milliseconds(), 1<<31-1)) }

// DecodeMemberAssignment decodes a member's assignment as DescribeGroup reports it.
func DecodeMemberAssignment(b []byte) ([]TopicPartition, error) {
	if len(b) == 0 {
		return nil, nil
	}
	a, err := assign.DecodeAssignment(b)
	if err != nil {
		return nil, err
	}
	return fromAssign(a.Partitions), nil
}
