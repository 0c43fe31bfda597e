package isr

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// ReplicaID names a replica by the id of the broker holding it.
type ReplicaID int32

// NoReplica is the leader of an offline partition.
const NoReplica ReplicaID = -1

// AcksAll is the protocol's acks=-1.
const AcksAll int16 = -1

// Errors the leader answers with. The wiring maps them to the protocol's error codes.
var (
	// ErrNotEnoughReplicas refuses an acks=all produce before it is appended: the ISR is
	// smaller than min.insync.replicas (NOT_ENOUGH_REPLICAS).
	ErrNotEnoughReplicas = errors.New("not enough in-sync replicas")
	// ErrNotEnoughReplicasAfterAppend answers an acks=all produce that was appended and
	// replicated to the ISR, but the ISR had shrunk below min.insync.replicas by then
	// (NOT_ENOUGH_REPLICAS_AFTER_APPEND). The records may still be visible to consumers.
	ErrNotEnoughReplicasAfterAppend = errors.New("not enough in-sync replicas after append")
	// ErrFencedLeaderEpoch answers a request carrying an older leader epoch than the
	// leader's (FENCED_LEADER_EPOCH): the sender's metadata is stale.
	ErrFencedLeaderEpoch = errors.New("fenced leader epoch")
	// ErrUnknownLeaderEpoch answers a request carrying a newer leader epoch than the
	// leader's (UNKNOWN_LEADER_EPOCH): this replica has not heard of its election yet.
	ErrUnknownLeaderEpoch = errors.New("unknown leader epoch")
	// ErrNotReplica answers a fetch from a broker that is not a replica of the partition.
	ErrNotReplica = errors.New("not a replica of the partition")
	// ErrOffsetOutOfRange answers a follower fetch above the leader's log end offset.
	ErrOffsetOutOfRange = errors.New("fetch offset out of range")
	// ErrNotLeader answers produces waiting on a leader that lost its leadership.
	ErrNotLeader = errors.New("not the leader")
)

// Output is something the leader asks its driver to do. Outputs accumulate in order and
// are taken with Leader.Outputs.
type Output interface{ output() }

// AlterISR asks the controller to make ISR the partition's in-sync replica set. It names
// the leader epoch and partition epoch the leader knows, so that the controller rejects it
// if either moved on. Only one AlterISR is in flight at a time; the driver answers it with
// Leader.ISRCommitted or Leader.ISRRejected.
type AlterISR struct {
	Leader         ReplicaID
	LeaderEpoch    int32
	PartitionEpoch int32
	ISR            []ReplicaID
}

// Ack completes the acks=all produce ID, whose records end at End: Err is nil when the
// high watermark covers End with an ISR of at least min.insync.replicas.
type Ack struct {
	ID  uint64
	End int64
	Err error
}

// HighWatermarkMoved says that consumers may now read below HighWatermark.
type HighWatermarkMoved struct {
	HighWatermark int64
}

func (AlterISR) output()           {}
func (Ack) output()                {}
func (HighWatermarkMoved) output() {}

func (a AlterISR) String() string {
	return fmt.Sprintf("alter-isr leader=%d leader-epoch=%d partition-epoch=%d isr=%s",
		a.Leader, a.LeaderEpoch, a.PartitionEpoch, formatIDs(a.ISR))
}

func (a Ack) String() string {
	if a.Err != nil {
		return fmt.Sprintf("ack id=%d end=%d err=%q", a.ID, a.End, a.Err)
	}
	return fmt.Sprintf("ack id=%d end=%d ok", a.ID, a.End)
}

func (h HighWatermarkMoved) String() string { return fmt.Sprintf("hwm=%d", h.HighWatermark) }

func formatIDs(ids []ReplicaID) string {
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = fmt.Sprint(id)
	}
	return "(" + strings.Join(parts, ",") + ")"
}

// LeaderConfig is the state a replica starts leading with, from the controller's decision
// and its own log.
type LeaderConfig struct {
	Self           ReplicaID
	Replicas       []ReplicaID // the assignment, Self included
	ISR            []ReplicaID // the committed ISR, Self included
	LeaderEpoch    int32
	PartitionEpoch int32 // the ISR's version at the controller
	LogEndOffset   int64
	HighWatermark  int64 // what this replica knew as a follower; it may lag
	MinInsync      int   // min.insync.replicas
	ReplicaLagMax  time.Duration
	// AlterISRRetry is how long an AlterISR may go unanswered before Tick sends it again
	// (the controller or the way to it may have lost it); 0 means alterISRRetryDefault.
	AlterISRRetry time.Duration
	// StallMin is the longest gap between two inputs that the leader takes for time it
	// watched its followers; a longer one it takes for time it did not run (a stopped or
	// starved process, a paused VM: the followers' fetches wait in its sockets meanwhile),
	// which it does not hold against them (see observe). 0: every gap counts (a caller
	// that moves time in steps, as the scripted tests do).
	StallMin time.Duration
	Now      time.Time
}

// alterISRRetryDefault: a controller round trip is milliseconds, a raft election one or
// two seconds; retrying every second costs nothing and bounds how long a lost message
// freezes the ISR.
const alterISRRetryDefault = time.Second

// follower is the leader's view of one follower replica.
type follower struct {
	leo               int64     // its log end offset: the offset of its last fetch
	lastCaughtUp      time.Time // last time its LEO reached the leader's LEO
	lastFetch         time.Time
	leaderLEOAtFetch  int64 // the leader's LEO at its last fetch
	fetchedThisLeader bool  // it fetched at least once since this replica became leader
}

type waiter struct {
	id  uint64
	end int64
}

// Leader is the ISR, high-watermark and acks=all state of one partition on its leader. It
// is a deterministic state machine in the style of etcd raft: inputs are method calls
// carrying the time, outputs (AlterISR, Ack, HighWatermarkMoved) queue up for Outputs, and
// it has no goroutines, clock, disk or network. Not safe for concurrent use: it belongs to
// the goroutine that owns the partition.
//
// Rules:
//   - The high watermark is the minimum log end offset over the maximal ISR (the committed
//     ISR plus any replica an in-flight AlterISR adds; members an in-flight AlterISR removes
//     still count until the controller commits it), and never moves backwards. Counting a
//     removed follower until the controller agrees is what keeps an acknowledged record on
//     every replica the controller could elect.
//   - A follower leaves the ISR when it has not caught up to the leader's log end offset for
//     more than ReplicaLagMax; it rejoins when its log end offset reaches the high watermark
//     and the start of this leader epoch. Time the leader did not run (a gap of more than
//     StallMin between its inputs) is not held against its followers.
//   - acks=all produces are refused up front while the committed ISR is smaller than
//     MinInsync, and answered when the high watermark covers them.
type Leader struct {
	cfg            LeaderConfig
	epochs         *EpochCache
	isr            []ReplicaID // committed, sorted
	partitionEpoch int32
	inflight       *AlterISR // the AlterISR awaiting the controller, or nil
	inflightSentAt time.Time // when inflight was last emitted
	leo            int64
	hwm            int64
	epochStart     int64 // the log end offset when this leader epoch began
	followers      map[ReplicaID]*follower
	waiters        []waiter // acks=all produces in end order
	outputs        []Output
	resigned       bool
	lastInput      time.Time // the latest time an input carried (observe)
}

// ErrBadConfig is returned by NewLeader for an inconsistent configuration.
var ErrBadConfig = errors.New("isr: bad configuration")

// NewLeader starts leading with cfg. The leader epoch is assigned in epochs at the log end
// offset (the first offset this epoch appends); the caller persists epochs afterwards.
func NewLeader(cfg LeaderConfig, epochs *EpochCache) (*Leader, error) {
	if !slices.Contains(cfg.Replicas, cfg.Self) || !slices.Contains(cfg.ISR, cfg.Self) {
		return nil, fmt.Errorf("leader %d not in replicas %v or ISR %v: %w", cfg.Self, cfg.Replicas, cfg.ISR, ErrBadConfig)
	}
	for _, id := range cfg.ISR {
		if !slices.Contains(cfg.Replicas, id) {
			return nil, fmt.Errorf("ISR member %d not a replica %v: %w", id, cfg.Replicas, ErrBadConfig)
		}
	}
	if cfg.MinInsync < 1 || cfg.ReplicaLagMax <= 0 || cfg.LogEndOffset < 0 || cfg.HighWatermark > cfg.LogEndOffset {
		return nil, fmt.Errorf("min.insync.replicas %d, lag %v, leo %d, hwm %d: %w",
			cfg.MinInsync, cfg.ReplicaLagMax, cfg.LogEndOffset, cfg.HighWatermark, ErrBadConfig)
	}
	if latest := epochs.LatestEpoch(); cfg.LeaderEpoch < latest {
		return nil, fmt.Errorf("leader epoch %d older than the log's %d: %w", cfg.LeaderEpoch, latest, ErrBadConfig)
	}
	if _, err := epochs.Assign(cfg.LeaderEpoch, cfg.LogEndOffset); err != nil {
		return nil, fmt.Errorf("start leader epoch %d: %w", cfg.LeaderEpoch, err)
	}
	if cfg.AlterISRRetry <= 0 {
		cfg.AlterISRRetry = alterISRRetryDefault
	}
	l := &Leader{
		cfg:            cfg,
		epochs:         epochs,
		isr:            sortedIDs(cfg.ISR),
		partitionEpoch: cfg.PartitionEpoch,
		leo:            cfg.LogEndOffset,
		hwm:            max(cfg.HighWatermark, 0),
		epochStart:     cfg.LogEndOffset,
		followers:      map[ReplicaID]*follower{},
		lastInput:      cfg.Now,
	}
	for _, id := range cfg.Replicas {
		if id != cfg.Self {
			// Kafka's rule: a follower gets the benefit of the doubt for one lag period
			// after a leader change, and its LEO is unknown (0) until it fetches.
			l.followers[id] = &follower{lastCaughtUp: cfg.Now, lastFetch: cfg.Now}
		}
	}
	l.maybeAdvanceHighWatermark()
	return l, nil
}

func sortedIDs(ids []ReplicaID) []ReplicaID {
	s := slices.Clone(ids)
	slices.Sort(s)
	return slices.Compact(s)
}

// Outputs returns and clears the queued outputs.
func (l *Leader) Outputs() []Output {
	out := l.outputs
	l.outputs = nil
	return out
}

// HighWatermark is the offset below which consumers may read.
func (l *Leader) HighWatermark() int64 { return l.hwm }

// LogEndOffset is the leader's log end offset.
func (l *Leader) LogEndOffset() int64 { return l.leo }

// ISR is the committed in-sync replica set, sorted.
func (l *Leader) ISR() []ReplicaID { return slices.Clone(l.isr) }

// InISR reports whether id is in the committed ISR.
func (l *Leader) InISR(id ReplicaID) bool { return slices.Contains(l.isr, id) }

// InSyncReplicas is the committed ISR's size (core.Replicator's InSyncReplicas).
func (l *Leader) InSyncReplicas() int { return len(l.isr) }

// InSyncNow is how many members of the committed ISR (this leader included) have caught up
// within ReplicaLagMax as of now: the ISR the leader is about to propose, before the
// controller commits it. A produce refused against it (min.insync.replicas) is refused a
// little early, never wrongly accepted: while the controller cannot be reached (a lost
// quorum), an ISR that cannot shrink would otherwise admit acks=all writes that can never
// be acknowledged.
func (l *Leader) InSyncNow(now time.Time) int {
	n := 0
	for _, id := range l.isr {
		if id == l.cfg.Self || now.Sub(l.followers[id].lastCaughtUp) <= l.cfg.ReplicaLagMax {
			n++
		}
	}
	return n
}

// LeaderEpoch and PartitionEpoch are the epochs this leader runs under.
func (l *Leader) LeaderEpoch() int32    { return l.cfg.LeaderEpoch }
func (l *Leader) PartitionEpoch() int32 { return l.partitionEpoch }

// PendingISR is the in-flight AlterISR, if any.
func (l *Leader) PendingISR() (AlterISR, bool) {
	if l.inflight == nil {
		return AlterISR{}, false
	}
	return *l.inflight, true
}

// FollowerLogEndOffset is the leader's view of follower id's log end offset.
func (l *Leader) FollowerLogEndOffset(id ReplicaID) (int64, bool) {
	f, ok := l.followers[id]
	if !ok {
		return 0, false
	}
	return f.leo, true
}

// CheckProduce is asked before a produce is appended: acks=all is refused with
// ErrNotEnoughReplicas while the committed ISR is smaller than min.insync.replicas.
func (l *Leader) CheckProduce(acks int16) error {
	if l.resigned {
		return ErrNotLeader
	}
	if acks == AcksAll && len(l.isr) < l.cfg.MinInsync {
		return fmt.Errorf("isr %s below min.insync.replicas=%d: %w", formatIDs(l.isr), l.cfg.MinInsync, ErrNotEnoughReplicas)
	}
	return nil
}

// Appended reports that the leader's own log now ends at end (records of this leader
// epoch). With a single-member ISR the high watermark follows at once.
func (l *Leader) Appended(now time.Time, end int64) {
	if end < l.leo {
		panic(fmt.Sprintf("isr: leader log end offset moved back from %d to %d", l.leo, end))
	}
	l.observe(now)
	l.leo = end
	l.maybeAdvanceHighWatermark()
}

// WaitAcksAll registers acks=all produce id whose records end at end; an Ack output
// answers it once the high watermark covers end (maybe at once).
func (l *Leader) WaitAcksAll(id uint64, end int64) {
	if end > l.leo {
		panic(fmt.Sprintf("isr: produce %d ends at %d above the log end offset %d", id, end, l.leo))
	}
	if l.resigned {
		l.outputs = append(l.outputs, Ack{ID: id, End: end, Err: ErrNotLeader})
		return
	}
	i, _ := slices.BinarySearchFunc(l.waiters, end, func(w waiter, e int64) int {
		if w.end <= e {
			return -1
		}
		return 1
	})
	l.waiters = slices.Insert(l.waiters, i, waiter{id: id, end: end})
	l.completeWaiters()
}

// FetchRequest is a follower's fetch as the leader sees it.
type FetchRequest struct {
	Replica            ReplicaID
	FetchOffset        int64 // the follower's log end offset
	CurrentLeaderEpoch int32 // the leader epoch the follower believes in (KIP-320)
}

// FetchResponse is what the leader answers a follower's fetch with: the driver adds the
// records from FetchOffset up to LogEndOffset (bounded by its fetch size).
type FetchResponse struct {
	Err           error
	HighWatermark int64
	LogEndOffset  int64
}

// Fetch handles a follower's fetch: its fetch offset is its log end offset. It may move the
// high watermark, complete acks=all produces and propose an ISR expansion.
func (l *Leader) Fetch(now time.Time, req FetchRequest) FetchResponse {
	if err := l.checkEpoch(req.CurrentLeaderEpoch); err != nil {
		return FetchResponse{Err: err, HighWatermark: l.hwm, LogEndOffset: l.leo}
	}
	f, ok := l.followers[req.Replica]
	if !ok {
		return FetchResponse{Err: ErrNotReplica, HighWatermark: l.hwm, LogEndOffset: l.leo}
	}
	if req.FetchOffset < 0 || req.FetchOffset > l.leo {
		return FetchResponse{Err: ErrOffsetOutOfRange, HighWatermark: l.hwm, LogEndOffset: l.leo}
	}
	l.observe(now)
	// Kafka's Replica.updateFetchState: caught up now if the fetch reaches our LEO; caught up
	// as of the previous fetch if it reaches the LEO we had then.
	switch {
	case req.FetchOffset >= l.leo:
		f.lastCaughtUp = maxTime(f.lastCaughtUp, now)
	case f.fetchedThisLeader && req.FetchOffset >= f.leaderLEOAtFetch:
		f.lastCaughtUp = maxTime(f.lastCaughtUp, f.lastFetch)
	}
	f.leo = req.FetchOffset
	f.lastFetch = now
	f.leaderLEOAtFetch = l.leo
	f.fetchedThisLeader = true
	l.maybeExpand(now, req.Replica)
	l.maybeAdvanceHighWatermark()
	return FetchResponse{HighWatermark: l.hwm, LogEndOffset: l.leo}
}

// observe notes an input at now. A gap since the last input longer than StallMin is time
// the leader did not run, not time its followers lagged: their catch-up times move on by
// the gap, so that a leader stopped for longer than ReplicaLagMax does not, on waking and
// before it reads the fetches that waited for it, find every follower lagging, shrink the
// ISR to itself and refuse acks=all (NOT_ENOUGH_REPLICAS) until they rejoin — seen on a
// loaded 2-core machine, and in a test that stops a leader for 4 s with SIGSTOP. A
// follower that really stopped fetching leaves the ISR that much later.
func (l *Leader) observe(now time.Time) {
	if gap := now.Sub(l.lastInput); l.cfg.StallMin > 0 && gap > l.cfg.StallMin {
		for _, f := range l.followers {
			f.lastCaughtUp = f.lastCaughtUp.Add(gap)
		}
	}
	l.lastInput = maxTime(l.lastInput, now)
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func (l *Leader) checkEpoch(epoch int32) error {
	switch {
	case l.resigned:
		return ErrNotLeader
	case epoch < l.cfg.LeaderEpoch:
		return fmt.Errorf("epoch %d, leader's %d: %w", epoch, l.cfg.LeaderEpoch, ErrFencedLeaderEpoch)
	case epoch > l.cfg.LeaderEpoch:
		return fmt.Errorf("epoch %d, leader's %d: %w", epoch, l.cfg.LeaderEpoch, ErrUnknownLeaderEpoch)
	}
	return nil
}

// OffsetsForLeaderEpoch answers a follower asking where this log stops holding records of
// epoch (KIP-101, with KIP-320's current-epoch check).
func (l *Leader) OffsetsForLeaderEpoch(currentLeaderEpoch, epoch int32) (EpochEndOffset, error) {
	if err := l.checkEpoch(currentLeaderEpoch); err != nil {
		return EpochEndOffset{Epoch: UndefinedEpoch, EndOffset: UndefinedOffset}, err
	}
	return l.epochs.EndOffsetFor(epoch, l.leo), nil
}

// Tick lets time pass: followers in the ISR that have not caught up within ReplicaLagMax
// are proposed for removal, and an AlterISR unanswered for AlterISRRetry is sent again.
func (l *Leader) Tick(now time.Time) {
	if l.resigned {
		return
	}
	l.observe(now)
	if l.inflight != nil {
		if now.Sub(l.inflightSentAt) >= l.cfg.AlterISRRetry {
			l.inflightSentAt = now
			l.outputs = append(l.outputs, *l.inflight)
		}
		return
	}
	var out []ReplicaID
	for _, id := range l.isr {
		if id == l.cfg.Self {
			continue
		}
		f := l.followers[id]
		if now.Sub(f.lastCaughtUp) > l.cfg.ReplicaLagMax {
			out = append(out, id)
		}
	}
	if len(out) == 0 {
		return
	}
	l.propose(now, slices.DeleteFunc(slices.Clone(l.isr), func(id ReplicaID) bool { return slices.Contains(out, id) }))
}

// maybeExpand proposes adding follower id to the ISR once its log end offset reaches the
// high watermark and the start of this leader epoch (so that it holds everything of this
// epoch the ISR has agreed on), and it caught up within ReplicaLagMax.
func (l *Leader) maybeExpand(now time.Time, id ReplicaID) {
	if l.inflight != nil || slices.Contains(l.isr, id) {
		return
	}
	f := l.followers[id]
	// Caught up by offset is not enough: a follower that stopped fetching right after its
	// removal still shows a log end offset at the high watermark (Kafka's isCaughtUp also
	// asks for a recent catch-up).
	if f.leo >= l.hwm && f.leo >= l.epochStart && now.Sub(f.lastCaughtUp) <= l.cfg.ReplicaLagMax {
		l.propose(now, sortedIDs(append(slices.Clone(l.isr), id)))
	}
}

func (l *Leader) propose(now time.Time, isr []ReplicaID) {
	l.inflight = &AlterISR{Leader: l.cfg.Self, LeaderEpoch: l.cfg.LeaderEpoch, PartitionEpoch: l.partitionEpoch, ISR: isr}
	l.inflightSentAt = now
	l.outputs = append(l.outputs, *l.inflight)
}

// ISRCommitted applies the controller's answer to the in-flight AlterISR (or an ISR
// change the controller made itself): the committed ISR is now isr at partitionEpoch.
// Answers older than the leader's partition epoch are ignored.
func (l *Leader) ISRCommitted(now time.Time, isr []ReplicaID, partitionEpoch int32) {
	if err := l.MetadataChanged(now, l.cfg.Replicas, isr, partitionEpoch); err != nil {
		panic(fmt.Sprintf("isr: committed ISR %v: %v", isr, err))
	}
}

// MetadataChanged applies a controller change that kept this replica leader at the same
// leader epoch: a new ISR and, during a reassignment, a new replica set, at partitionEpoch.
// Followers that join start with an unknown log end offset (0) and one lag period of grace;
// followers that leave are forgotten. Changes older than the leader's partition epoch are
// ignored. The replica set and ISR must contain this replica (losing it is a leader change:
// Resign).
func (l *Leader) MetadataChanged(now time.Time, replicas, isr []ReplicaID, partitionEpoch int32) error {
	if l.resigned || partitionEpoch <= l.partitionEpoch {
		return nil
	}
	if !slices.Contains(replicas, l.cfg.Self) || !slices.Contains(isr, l.cfg.Self) {
		return fmt.Errorf("leader %d not in replicas %v or ISR %v: %w", l.cfg.Self, replicas, isr, ErrBadConfig)
	}
	for _, id := range isr {
		if !slices.Contains(replicas, id) {
			return fmt.Errorf("ISR member %d not a replica %v: %w", id, replicas, ErrBadConfig)
		}
	}
	l.observe(now)
	l.cfg.Replicas = slices.Clone(replicas)
	for id := range l.followers {
		if !slices.Contains(replicas, id) {
			delete(l.followers, id)
		}
	}
	for _, id := range replicas {
		if _, ok := l.followers[id]; !ok && id != l.cfg.Self {
			l.followers[id] = &follower{lastCaughtUp: now, lastFetch: now}
		}
	}
	l.inflight = nil
	l.isr = sortedIDs(isr)
	l.partitionEpoch = partitionEpoch
	l.maybeAdvanceHighWatermark()
	l.completeWaiters()
	l.Tick(now)
	for _, id := range sortedIDs(l.cfg.Replicas) {
		if id != l.cfg.Self && l.inflight == nil {
			l.maybeExpand(now, id)
		}
	}
	return nil
}

// ISRRejected drops the in-flight AlterISR a after the controller refused it (a stale epoch:
// the leader should expect new metadata), so that a later input may propose again. An
// answer to any other request than the one in flight is ignored.
func (l *Leader) ISRRejected(a AlterISR) {
	if l.resigned || l.inflight == nil || a.LeaderEpoch != l.inflight.LeaderEpoch ||
		a.PartitionEpoch != l.inflight.PartitionEpoch || !slices.Equal(a.ISR, l.inflight.ISR) {
		return
	}
	l.inflight = nil
	l.maybeAdvanceHighWatermark() // members it would have added no longer hold it back
}

// Resign ends this leadership (the controller elected someone else or the broker stops):
// every waiting acks=all produce is answered with ErrNotLeader.
func (l *Leader) Resign() {
	if l.resigned {
		return
	}
	l.resigned = true
	l.inflight = nil
	for _, w := range l.waiters {
		l.outputs = append(l.outputs, Ack{ID: w.id, End: w.end, Err: ErrNotLeader})
	}
	l.waiters = nil
}

// maximalISR is the committed ISR plus members an in-flight AlterISR adds.
func (l *Leader) maximalISR() []ReplicaID {
	if l.inflight == nil {
		return l.isr
	}
	return sortedIDs(append(slices.Clone(l.isr), l.inflight.ISR...))
}

func (l *Leader) maybeAdvanceHighWatermark() {
	if l.resigned {
		return
	}
	low := l.leo
	for _, id := range l.maximalISR() {
		if id != l.cfg.Self {
			low = min(low, l.followers[id].leo)
		}
	}
	if low > l.hwm {
		l.hwm = low
		l.outputs = append(l.outputs, HighWatermarkMoved{HighWatermark: low})
		l.completeWaiters()
	}
}

func (l *Leader) completeWaiters() {
	n := 0
	for _, w := range l.waiters {
		if w.end > l.hwm {
			break
		}
		var err error
		if len(l.isr) < l.cfg.MinInsync {
			err = fmt.Errorf("isr %s below min.insync.replicas=%d: %w", formatIDs(l.isr), l.cfg.MinInsync, ErrNotEnoughReplicasAfterAppend)
		}
		l.outputs = append(l.outputs, Ack{ID: w.id, End: w.end, Err: err})
		n++
	}
	l.waiters = l.waiters[n:]
}
