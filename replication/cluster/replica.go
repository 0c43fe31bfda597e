package cluster

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ringlog/ringlog/engine/shard"
	"github.com/ringlog/ringlog/engine/shard/core"
	"github.com/ringlog/ringlog/replication/controller"
	"github.com/ringlog/ringlog/replication/isr"
)

// epochCheckpointName is the file in a partition's directory holding its leader epoch ->
// start offset entries (isr.WriteCheckpoint's format).
const epochCheckpointName = "leader-epoch-checkpoint"

// replica is this broker's replica of one partition.
type replica struct {
	tp  shard.TopicPartition
	dir string

	mu             sync.Mutex
	leader         *isr.Leader   // non-nil while leading; guarded by mu
	follower       *isr.Follower // non-nil while following; guarded by mu
	epochs         *isr.EpochCache
	leaderID       int32 // guarded by mu
	leaderEpoch    int32 // guarded by mu; -1 before the first metadata
	partitionEpoch int32 // guarded by mu
	checkpointed   []isr.EpochEntry

	// writeMu is held across a follower's writes to the partition's log (truncation,
	// appending fetched batches); retire takes it to set retired, so that once the topic
	// is deleted no write of this replica lands in a recreated topic's partition.
	writeMu sync.Mutex
	retired bool // guarded by writeMu

	// Read by the broker core's shard loops without mu.
	leading  atomic.Bool
	lone     atomic.Bool  // leading, and the maximal ISR is this broker alone: HWM = LEO
	hwm      atomic.Int64 // the leader's or the follower's high watermark
	isrSize  atomic.Int32 // the committed ISR less the members lagging now (isr.Leader.InSyncNow)
	leo      atomic.Int64 // the log end offset last seen on the shard loop
	minInsyn atomic.Int32

	// fetching is held by the fetcher lane that truncates or fetches for the replica in
	// its current round, so that the in-sync and catch-up lanes never both do.
	fetching atomic.Bool

	// lane is the fetcher lane syncFetchers last placed the follower in (laneKnown: it
	// did, and the replica has followed since). Guarded by mu.
	lane      fetcherKey
	laneKnown bool
}

func newReplica(tp shard.TopicPartition, dir string) *replica {
	r := &replica{tp: tp, dir: dir, leaderEpoch: -1, leaderID: controller.NoLeader}
	r.isrSize.Store(1)
	return r
}

// loadEpochsLocked reads the epoch checkpoint once, cut to the log's end.
func (r *replica) loadEpochsLocked(logEnd int64) error {
	if r.epochs != nil {
		r.epochs.TruncateFromEnd(logEnd)
		return nil
	}
	entries, err := isr.ReadCheckpoint(filepath.Join(r.dir, epochCheckpointName))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("read epoch checkpoint: %w", err)
	}
	c, err := isr.NewEpochCache(entries)
	if err != nil {
		return fmt.Errorf("epoch checkpoint: %w", err)
	}
	c.TruncateFromEnd(logEnd)
	r.epochs = c
	return nil
}

// saveEpochsLocked writes the epoch checkpoint when it changed.
func (r *replica) saveEpochsLocked() error {
	entries := r.epochs.Entries()
	if slices.Equal(entries, r.checkpointed) {
		return nil
	}
	if err := isr.WriteCheckpoint(filepath.Join(r.dir, epochCheckpointName), entries); err != nil {
		return fmt.Errorf("write epoch checkpoint: %w", err)
	}
	r.checkpointed = entries
	return nil
}

func ids(in []int32) []isr.ReplicaID {
	out := make([]isr.ReplicaID, len(in))
	for i, id := range in {
		out[i] = isr.ReplicaID(id)
	}
	return out
}

// apply moves the replica to what the controller's partition state p says. Called by
// the metadata loop only (never concurrently with itself).
func (r *replica) apply(m *Manager, p controller.Partition, minInsync int) error {
	r.minInsyn.Store(int32(max(minInsync, 1)))
	r.mu.Lock()
	if p.PartitionEpoch != r.partitionEpoch {
		m.log.Info("partition state", "topic", r.tp.Topic, "partition", r.tp.Partition, "leader", p.Leader,
			"leader_epoch", p.LeaderEpoch, "partition_epoch", p.PartitionEpoch, "isr", p.ISR, "replicas", p.Replicas)
		r.partitionEpoch = p.PartitionEpoch
	}
	sameEpoch := p.LeaderEpoch == r.leaderEpoch && p.Leader == r.leaderID
	switch {
	case sameEpoch && r.leader != nil:
		err := r.leader.MetadataChanged(m.cfg.Now(), ids(p.Replicas), ids(p.ISR), p.PartitionEpoch)
		r.publishLeaderLocked(m)
		r.mu.Unlock()
		return err
	case sameEpoch && (r.follower != nil || p.Leader == controller.NoLeader):
		r.mu.Unlock()
		return nil
	case sameEpoch && p.Leader == m.cfg.NodeID && r.leaderEpoch > p.LeaderEpoch:
		r.mu.Unlock()
		return nil
	}
	r.mu.Unlock()
	// A new leader epoch (or our first look): stop what we did, then start the new role.
	// The shard calls block on the partition's loop, which may itself wait for r.mu (a
	// follower's fetch), so they run before r.mu is taken.
	r.resign(m)
	_, leo, err := m.b.LogOffsets(r.tp)
	if err != nil {
		return err
	}
	stamp := int32(-1) // a follower keeps the leader's epochs in the batches it copies
	if p.Leader == m.cfg.NodeID {
		stamp = p.LeaderEpoch
	}
	if err := m.b.SetLeaderEpoch(r.tp, stamp); err != nil {
		return err
	}
	// Runs after r.mu is released (deferred before its unlock): the groups of an offsets
	// partition this broker now leads are loaded on its shard's loop.
	defer func() {
		if r.leading.Load() {
			m.groupsLead(r.tp)
		}
	}()
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.loadEpochsLocked(leo); err != nil {
		return err
	}
	r.leaderID, r.leaderEpoch, r.partitionEpoch = p.Leader, p.LeaderEpoch, p.PartitionEpoch
	r.leo.Store(leo)
	switch p.Leader {
	case m.cfg.NodeID:
		if latest := r.epochs.LatestEpoch(); p.LeaderEpoch < latest {
			r.leaderEpoch = -1
			return fmt.Errorf("controller names us leader at epoch %d, the log has %d", p.LeaderEpoch, latest)
		}
		l, err := isr.NewLeader(isr.LeaderConfig{
			Self: isr.ReplicaID(m.cfg.NodeID), Replicas: ids(p.Replicas), ISR: ids(p.ISR),
			LeaderEpoch: p.LeaderEpoch, PartitionEpoch: p.PartitionEpoch,
			LogEndOffset: leo, HighWatermark: min(r.hwm.Load(), leo), MinInsync: max(minInsync, 1),
			ReplicaLagMax: m.cfg.ReplicaLagMax, StallMin: leaderStallMin, Now: m.cfg.Now(),
		}, r.epochs)
		if err != nil {
			r.leaderEpoch = -1
			return err
		}
		if err := r.saveEpochsLocked(); err != nil {
			r.leaderEpoch = -1
			return err
		}
		r.leader = l
		r.leading.Store(true)
		r.publishLeaderLocked(m)
		m.log.Info("leading partition", "topic", r.tp.Topic, "partition", r.tp.Partition, "epoch", p.LeaderEpoch, "isr", p.ISR, "leo", leo)
	case controller.NoLeader:
		// offline: nothing to follow
	default:
		r.follower = isr.NewFollower(isr.ReplicaID(m.cfg.NodeID), isr.ReplicaID(p.Leader), p.LeaderEpoch, leo, min(r.hwm.Load(), leo), r.epochs)
		r.hwm.Store(r.follower.HighWatermark())
		m.log.Info("following partition", "topic", r.tp.Topic, "partition", r.tp.Partition, "leader", p.Leader, "epoch", p.LeaderEpoch, "leo", leo)
	}
	return nil
}

// retire ends the replica for good (its topic was deleted): it waits for a write in
// flight, refuses later ones, and resigns.
func (r *replica) retire(m *Manager) {
	r.writeMu.Lock()
	r.retired = true
	r.writeMu.Unlock()
	r.resign(m)
}

// resign ends a leadership or followership: waiting acks=all produces are answered with
// ErrNotLeader.
func (r *replica) resign(m *Manager) {
	r.mu.Lock()
	wasLeader := r.leader != nil
	if wasLeader {
		r.leader.Resign()
		r.leader = nil
	}
	r.follower = nil
	r.leading.Store(false)
	r.lone.Store(false)
	r.leaderEpoch = -1
	r.mu.Unlock()
	if wasLeader && m.b != nil {
		m.groupsResign(r.tp)
		_ = m.b.FailWaiting(r.tp, fmt.Errorf("%w: %s/%d", ErrNotLeader, r.tp.Topic, r.tp.Partition))
	}
}

// publishLeaderLocked carries out the leader's outputs and publishes its state to the
// atomics the shard loops read.
func (r *replica) publishLeaderLocked(m *Manager) {
	l := r.leader
	if l == nil {
		return
	}
	moved := false
	for _, o := range l.Outputs() {
		switch o := o.(type) {
		case isr.HighWatermarkMoved:
			moved = true
		case isr.AlterISR:
			m.alterISR(r, o, l.InSyncReplicas())
		}
	}
	pending, inflight := l.PendingISR()
	lone := l.InSyncReplicas() == 1 && (!inflight || len(pending.ISR) <= 1)
	if old := r.hwm.Load(); l.HighWatermark() > old {
		r.hwm.Store(l.HighWatermark())
		moved = true
	}
	r.isrSize.Store(int32(min(l.InSyncReplicas(), l.InSyncNow(m.cfg.Now()))))
	if r.lone.Swap(lone) != lone {
		moved = true
	}
	if moved {
		_ = m.b.OffsetsMoved(r.tp)
	}
}

// tick lets the leader notice lagging followers.
func (r *replica) tick(m *Manager, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.leader == nil {
		return
	}
	if leo := r.leo.Load(); leo > r.leader.LogEndOffset() {
		r.leader.Appended(now, leo)
	}
	r.leader.Tick(now)
	r.publishLeaderLocked(m)
}

func (r *replica) isrRejected(a isr.AlterISR) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.leader != nil {
		r.leader.ISRRejected(a)
	}
}

// ---- core.Replicator ----

func (m *Manager) lookup(p *core.Partition) *replica {
	v, ok := m.reps.Load(shard.TopicPartition{Topic: p.Topic, Partition: p.Index})
	if !ok {
		return nil
	}
	return v.(*replica)
}

// HighWatermark implements core.Replicator: a leader's high watermark (its log end offset
// while the ISR is itself alone), a follower's as its leader last told it. A partition the
// controller has not placed here yet behaves as on a single broker.
func (m *Manager) HighWatermark(p *core.Partition) int64 {
	r := m.lookup(p)
	if r == nil {
		return core.Local{}.HighWatermark(p)
	}
	end := p.Log.EndOffset()
	r.leo.Store(end)
	if r.leading.Load() && r.lone.Load() {
		if p.FlushAlways {
			return p.Log.SyncedOffset()
		}
		return end
	}
	return min(r.hwm.Load(), end)
}

// CommittedOffset implements core.Replicator: acks=all waits for the high watermark and
// for the leader's own fdatasync.
func (m *Manager) CommittedOffset(p *core.Partition) int64 {
	r := m.lookup(p)
	if r == nil {
		return core.Local{}.CommittedOffset(p)
	}
	if !r.leading.Load() {
		return -1
	}
	return min(m.HighWatermark(p), p.Log.SyncedOffset())
}

// InSyncReplicas implements core.Replicator.
func (m *Manager) InSyncReplicas(p *core.Partition) int {
	r := m.lookup(p)
	if r == nil {
		return 1
	}
	return int(r.isrSize.Load())
}

// CheckLeader reports whether this broker may serve clients' produces and fetches of tp:
// nil when it leads tp or tp is not a replicated partition, ErrNotLeader when the
// controller's metadata has tp and this broker does not lead it (it follows, or has not
// opened its replica yet: Kafka's NOT_LEADER_OR_FOLLOWER, on which clients refresh their
// metadata and retry), shard.ErrUnknownTopicOrPartition when the replicated topic has no
// such partition.
func (m *Manager) CheckLeader(tp shard.TopicPartition) error {
	v, ok := m.reps.Load(tp)
	if !ok {
		t := m.ctl.Metadata().Topics[tp.Topic]
		switch {
		case t == nil:
			return nil
		case tp.Partition < 0 || int(tp.Partition) >= len(t.Partitions):
			return fmt.Errorf("%w: %s/%d (the topic has %d partitions)", shard.ErrUnknownTopicOrPartition, tp.Topic, tp.Partition, len(t.Partitions))
		}
		return fmt.Errorf("%w: %s/%d", ErrNotLeader, tp.Topic, tp.Partition)
	}
	if !v.(*replica).leading.Load() {
		return fmt.Errorf("%w: %s/%d", ErrNotLeader, tp.Topic, tp.Partition)
	}
	return nil
}

// CheckLeaderEpoch is CheckLeader with a client's view of the leader epoch (KIP-320's
// current_leader_epoch): nil when this broker leads tp at epoch, or epoch is -1 (the client
// does not know it); isr.ErrFencedLeaderEpoch when epoch is older than the leader's,
// isr.ErrUnknownLeaderEpoch when newer (this broker has not applied it yet). A partition
// that is not replicated is at epoch 0.
func (m *Manager) CheckLeaderEpoch(tp shard.TopicPartition, epoch int32) error {
	if err := m.CheckLeader(tp); err != nil || epoch == -1 {
		return err
	}
	current := int32(0)
	if v, ok := m.reps.Load(tp); ok {
		r := v.(*replica)
		r.mu.Lock()
		if r.leader == nil {
			r.mu.Unlock()
			return fmt.Errorf("%w: %s/%d", ErrNotLeader, tp.Topic, tp.Partition)
		}
		current = r.leader.LeaderEpoch()
		r.mu.Unlock()
	}
	switch {
	case epoch < current:
		return fmt.Errorf("%s/%d epoch %d, leader's %d: %w", tp.Topic, tp.Partition, epoch, current, isr.ErrFencedLeaderEpoch)
	case epoch > current:
		return fmt.Errorf("%s/%d epoch %d, leader's %d: %w", tp.Topic, tp.Partition, epoch, current, isr.ErrUnknownLeaderEpoch)
	}
	return nil
}

// ---- the leader's side of replication ----

// ReplicaFetch serves a follower's fetch: the records up to the log end offset are read
// on the partition's shard, then the leader records the follower's log end offset (which
// may move the high watermark and expand the ISR). done runs once, off the shard loops:
// the records are copied out of the segment files on a goroutine of their own, so that a
// catching-up follower's large reads never hold up the produces on the leader's shard,
// and for a follower outside the ISR at a lowered CPU priority (lowerPriority).
//
// With the leader throttle on (leader.replication.throttled.rate), a follower outside the
// partition's ISR that the topic's leader.replication.throttled.replicas lists (every
// one, the key unset) shares the leader's byte budget: while it is spent such a partition
// is answered without records, and a fetch holding only such partitions is answered when
// the budget frees (at most the fetch's long-poll later); otherwise it reads at most a
// chunk, charged to the budget.
func (m *Manager) ReplicaFetch(req *FetchRequest, done func([]FetchAnswer)) {
	answers := make([]FetchAnswer, len(req.Partitions))
	fr := shard.FetchRequest{Replica: true, MaxWait: req.MaxWait, MinBytes: 1, ResponseBytesMax: int64(max(req.BytesMax, 1)), Wake: req.Wake}
	var idx []int      // answers[idx[k]] is fr.Partitions[k]
	var charged []bool // fr.Partitions[k] is charged to the leader throttle
	var held []int     // answers of throttled partitions left out while the budget is spent
	var wait time.Duration
	catchUp := false // a follower outside the ISR of some partition: copy at low priority
	lists := m.lists.Load()
	for i, fp := range req.Partitions {
		answers[i] = FetchAnswer{TopicPartition: fp.TopicPartition, HighWatermark: -1, LogEndOffset: -1}
		inSync, err := m.checkFollowerFetch(fp, req.ReplicaID)
		if err != nil {
			answers[i].Err = err
			continue
		}
		catchUp = catchUp || !inSync
		bytesMax := fp.BytesMax
		th := m.leaderThrottle != nil && !inSync && lists.listed(true, fp.TopicPartition, m.cfg.NodeID)
		if th {
			if w := m.leaderThrottle.wait(); w > 0 {
				held = append(held, i)
				wait = max(wait, w)
				continue
			}
			if c := m.leaderThrottle.chunkBytes(); bytesMax <= 0 || c < bytesMax {
				bytesMax = c
			}
		}
		idx = append(idx, i)
		charged = append(charged, th)
		fr.Partitions = append(fr.Partitions, shard.FetchPartition{TopicPartition: fp.TopicPartition, Offset: fp.Offset, MaxBytes: bytesMax})
	}
	finish := func() {
		now := m.cfg.Now()
		for _, i := range held { // positions only: checkFollowerFetch recorded the offset
			answers[i].HighWatermark, answers[i].LogEndOffset, answers[i].Err = m.followerFetched(req.Partitions[i], req.ReplicaID, -1, now)
		}
		done(answers)
	}
	if len(fr.Partitions) == 0 || m.b == nil {
		if len(held) > 0 && len(fr.Partitions) == 0 {
			afterFunc(min(wait, req.MaxWait), finish)
			return
		}
		finish()
		return
	}
	m.b.FetchFrom(req.Caller, fr, func(results []shard.FetchResult) {
		copyOut := func() {
			now := m.cfg.Now()
			for k := range results {
				res := &results[k]
				a := &answers[idx[k]]
				fp := req.Partitions[idx[k]]
				if res.Err != nil {
					a.Err = res.Err
					res.Release()
					continue
				}
				data, err := res.AppendTo(make([]byte, 0, res.Records.Size))
				res.Release()
				if err != nil {
					a.Err = err
					continue
				}
				if charged[k] {
					m.leaderThrottle.charge(int64(len(data)))
				}
				a.Records = data
				a.HighWatermark, a.LogEndOffset, a.Err = m.followerFetched(fp, req.ReplicaID, res.LogEndOffset, now)
			}
			finish()
		}
		if !catchUp && resultsBytes(results) <= inlineCopyBytesMax {
			// An in-sync follower's answer, a few recent batches: copied here, on the
			// shard loop that answered (from the page cache), instead of waking another
			// thread for a goroutine per answer.
			copyOut()
			return
		}
		go func() {
			if catchUp {
				lowerPriority() // for good: the thread ends with this goroutine
			}
			copyOut()
		}()
	})
}

// inlineCopyBytesMax bounds the records of a fetch answer copied on the shard loop that
// answered it (ReplicaFetch): larger ones, and every answer to a follower outside an ISR,
// are copied on a goroutine of their own so that produces on the shard never wait for
// them.
const inlineCopyBytesMax = 64 << 10

func resultsBytes(results []shard.FetchResult) int64 {
	var n int64
	for i := range results {
		n += results[i].Records.Size
	}
	return n
}

// afterFunc is time.AfterFunc (the leader throttle's pacing of a held fetch).
var afterFunc = time.AfterFunc

// checkFollowerFetch fences the follower's leader epoch, records its fetch offset and
// reports whether it is in the partition's committed ISR.
func (m *Manager) checkFollowerFetch(fp FetchPartition, replicaID int32) (inSync bool, err error) {
	v, ok := m.reps.Load(fp.TopicPartition)
	if !ok {
		return false, fmt.Errorf("%w: %s/%d", ErrNotLeader, fp.Topic, fp.Partition)
	}
	r := v.(*replica)
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.leader == nil:
		return false, fmt.Errorf("%w: %s/%d", ErrNotLeader, fp.Topic, fp.Partition)
	case fp.LeaderEpoch < r.leader.LeaderEpoch():
		return false, fmt.Errorf("epoch %d, leader's %d: %w", fp.LeaderEpoch, r.leader.LeaderEpoch(), isr.ErrFencedLeaderEpoch)
	case fp.LeaderEpoch > r.leader.LeaderEpoch():
		return false, fmt.Errorf("epoch %d, leader's %d: %w", fp.LeaderEpoch, r.leader.LeaderEpoch(), isr.ErrUnknownLeaderEpoch)
	}
	// Record the follower's position now: the fetch may park until new records come, and
	// the high watermark (and acks=all) must not wait for that.
	now := m.cfg.Now()
	if leo := r.leo.Load(); leo > r.leader.LogEndOffset() {
		r.leader.Appended(now, leo)
	}
	if fp.Offset <= r.leader.LogEndOffset() {
		r.leader.Fetch(now, isr.FetchRequest{Replica: isr.ReplicaID(replicaID), FetchOffset: fp.Offset, CurrentLeaderEpoch: fp.LeaderEpoch})
		r.publishLeaderLocked(m)
	}
	return r.leader.InISR(isr.ReplicaID(replicaID)), nil
}

// followerFetched records the follower's fetch offset against the leader's log end offset
// leo read with the records.
func (m *Manager) followerFetched(fp FetchPartition, replicaID int32, leo int64, now time.Time) (hwm, end int64, err error) {
	v, ok := m.reps.Load(fp.TopicPartition)
	if !ok {
		return -1, -1, fmt.Errorf("%w: %s/%d", ErrNotLeader, fp.Topic, fp.Partition)
	}
	r := v.(*replica)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.leader == nil {
		return -1, -1, fmt.Errorf("%w: %s/%d", ErrNotLeader, fp.Topic, fp.Partition)
	}
	r.leo.Store(max(r.leo.Load(), leo))
	if leo > r.leader.LogEndOffset() {
		r.leader.Appended(now, leo)
	}
	resp := r.leader.Fetch(now, isr.FetchRequest{Replica: isr.ReplicaID(replicaID), FetchOffset: fp.Offset, CurrentLeaderEpoch: fp.LeaderEpoch})
	r.publishLeaderLocked(m)
	return resp.HighWatermark, resp.LogEndOffset, resp.Err
}

// OffsetsForLeaderEpoch answers a follower (or a Kafka client) asking where this leader's
// log stops holding records of epoch; currentEpoch is the asker's view of the leader epoch,
// checked unless it is -1.
func (m *Manager) OffsetsForLeaderEpoch(tp shard.TopicPartition, currentEpoch, epoch int32) (isr.EpochEndOffset, error) {
	none := isr.EpochEndOffset{Epoch: isr.UndefinedEpoch, EndOffset: isr.UndefinedOffset}
	v, ok := m.reps.Load(tp)
	if !ok {
		return none, fmt.Errorf("%w: %s/%d", ErrNotLeader, tp.Topic, tp.Partition)
	}
	r := v.(*replica)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.leader == nil {
		return none, fmt.Errorf("%w: %s/%d", ErrNotLeader, tp.Topic, tp.Partition)
	}
	if leo := r.leo.Load(); leo > r.leader.LogEndOffset() {
		r.leader.Appended(m.cfg.Now(), leo)
	}
	if currentEpoch == -1 { // a Kafka client before KIP-320 (OffsetForLeaderEpoch v0-v1): unchecked
		currentEpoch = r.leader.LeaderEpoch()
	}
	return r.leader.OffsetsForLeaderEpoch(currentEpoch, epoch)
}
