package shard

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/ringlog/ringlog/engine"
	"github.com/ringlog/ringlog/engine/batch"
	"github.com/ringlog/ringlog/engine/group"
	"github.com/ringlog/ringlog/ring"
)

// Consumer groups on the broker: each shard hosts one group.Coordinator serving the groups
// of the __consumer_offsets partitions that shard owns. A group lives on partition
// group.PartitionFor(id, P) of __consumer_offsets, so its coordinator is the shard owning
// that partition; every request for it is carried out on that shard's loop:
//
//	Groups.Do(req) ──post──► shard loop: Coordinator.Handle(now, req)
//	                                     │ Ready()
//	                  ┌──────────────────┴───────────────────┐
//	                  ▼                                      ▼
//	     Reply: done(resp) on the loop      Append: acks=all produce to __consumer_offsets/p
//	                                                 └─► Coordinator.AppendDone(now, id, err)
//
// When a __consumer_offsets partition opens on a shard (broker start, topic creation) the
// shard replays its log (group.ReplayLog) and loads the groups into its coordinator; when
// it closes they are unloaded (their waiting requests answered NOT_COORDINATOR). Session,
// rebalance and offset-retention timers are one reactor timer per shard at the
// coordinator's NextDeadline, on the reactor's clock (ring.Config.Now, injectable).
//
// On a replicated cluster (GroupsConfig.Replicated) __consumer_offsets is a replicated
// topic the controller creates, every broker holds all its partitions (replica or not),
// and a partition's groups are served only by the broker leading it: replication calls
// Groups.Lead when this broker becomes a partition's leader (the shard answers
// COORDINATOR_LOAD_IN_PROGRESS while it replays the log, then serves) and Groups.Resign
// when it stops leading (the groups are dropped; NOT_COORDINATOR). Opening and closing a
// partition then loads nothing. The coordinator's appends are the same acks=all produces,
// answered once the partition's high watermark covers them.

// Defaults of GroupsConfig.
const (
	// OffsetsPartitionsDefault is the partition count of __consumer_offsets created by a
	// broker that has none (Kafka's is 50; a single broker with a few shards needs fewer).
	OffsetsPartitionsDefault = 8
	// offsetsPartitionsMax bounds --offsets-partitions.
	offsetsPartitionsMax = 1024
	// groupReplyWaitMax bounds how long Groups.Handle waits when its ctx has no deadline.
	groupReplyWaitMax = 5 * time.Minute
)

// GroupsConfig configures the group coordinators. Zero fields take the defaults.
type GroupsConfig struct {
	// OffsetsPartitions is the partition count of __consumer_offsets when this broker
	// creates it (at its first start). An existing topic keeps its count: it decides where
	// every group lives. 0 means OffsetsPartitionsDefault.
	OffsetsPartitions int
	// SessionTimeoutMin and SessionTimeoutMax bound what a member may ask for (0: 6 s and
	// 30 min, Kafka's group.min/max.session.timeout.ms).
	SessionTimeoutMin, SessionTimeoutMax time.Duration
	// GroupMembersMax bounds the members of one group (0: 1000).
	GroupMembersMax int
	// PendingMembersMax bounds, per coordinator shard, the member ids handed out with
	// MEMBER_ID_REQUIRED and not yet used (0: 100 000; group.Config.PendingMembersMax).
	PendingMembersMax int
	// StateBytesMax bounds, per coordinator shard, the state the groups keep: members'
	// protocol metadata and assignments, committed offsets (0: 256 MiB; group.Config.StateBytesMax).
	StateBytesMax int64
	// OffsetsRetention: offsets of an Empty group are kept this long (0: 7 days).
	OffsetsRetention time.Duration
	// Replicated: this broker is a member of a replicated cluster. __consumer_offsets is
	// not created at Open (the cluster creates it through its controller), and a
	// partition's groups are loaded by Groups.Lead and dropped by Groups.Resign instead of
	// when the partition opens and closes.
	Replicated bool
}

// ErrInternalTopic is returned for a client produce to, or a delete of, an internal topic.
var ErrInternalTopic = fmt.Errorf("%w: internal topic", engine.ErrInvalidTopic)

// internalTopic reports whether clients may not write or delete name.
func internalTopic(name string) bool { return name == group.OffsetsTopic }

// Groups routes group requests to the coordinator shards. Safe for concurrent use.
type Groups struct {
	b          *Broker
	partitions atomic.Int32 // of __consumer_offsets; fixed at Open, or by SetOffsetsPartitions
}

// shardGroups is one shard's coordinator and its driver state. Loop goroutine only.
type shardGroups struct {
	coord   *group.Coordinator
	nextReq uint64                          // ReqID of the next request
	waiting map[uint64]func(group.Response) // requests not yet answered, by ReqID
	queue   []group.Output                  // outputs not yet carried out (drainGroups)
	busy    bool                            // drainGroups is running (no reentry)
	timer   *ring.Timer                     // at the coordinator's NextDeadline
	builder *batch.Builder                  // scratch for Append batches
	// leads counts Lead and Resign calls per partition (GroupsConfig.Replicated): a replay
	// that finishes after a later Resign or Lead of its partition is dropped.
	leads map[int32]uint64
}

// Groups returns the broker's group router.
func (b *Broker) Groups() *Groups { return b.groups }

// OffsetsPartitions is the partition count of __consumer_offsets.
func (g *Groups) OffsetsPartitions() int32 { return g.partitions.Load() }

// groupConfig is the coordinators' configuration.
func (b *Broker) groupConfig(partitions int32) group.Config {
	gc := b.cfg.Groups
	return group.Config{
		OffsetsPartitions: partitions,
		SessionTimeoutMin: gc.SessionTimeoutMin, SessionTimeoutMax: gc.SessionTimeoutMax,
		GroupMembersMax: gc.GroupMembersMax, PendingMembersMax: gc.PendingMembersMax, StateBytesMax: gc.StateBytesMax,
		OffsetsRetention: gc.OffsetsRetention,
		Incarnation:      uint64(b.now().UnixMilli()),
	}
}

// offsetsPartitionCount is the count of an existing __consumer_offsets, else the
// configured one.
func (b *Broker) offsetsPartitionCount(m *metadata) (int32, error) {
	if t := m.topics[group.OffsetsTopic]; t != nil {
		if want := b.cfg.Groups.OffsetsPartitions; want > 0 && want != len(t.Partitions) {
			b.log.Warn("__consumer_offsets exists with another partition count; keeping it (it decides where every group lives)",
				"partitions", len(t.Partitions), "configured", want)
		}
		return int32(len(t.Partitions)), nil
	}
	n := b.cfg.Groups.OffsetsPartitions
	if n == 0 {
		n = OffsetsPartitionsDefault
	}
	if n < 1 || n > offsetsPartitionsMax {
		return 0, fmt.Errorf("%w: offsets partitions %d (want 1..%d)", ErrInvalidPartitions, n, offsetsPartitionsMax)
	}
	return int32(n), nil
}

// OffsetsTopicConfig is the configuration __consumer_offsets is created with, as Kafka's:
// compacted (the cleaner keeps the newest commit per group, topic and partition and drops
// tombstones after delete.retention.ms), never deleted by time or size.
func OffsetsTopicConfig() map[string]string {
	return map[string]string{
		engine.ConfigCleanupPolicy:  string(engine.CleanupCompact),
		engine.ConfigRetentionMs:    "-1",
		engine.ConfigRetentionBytes: "-1",
	}
}

// createOffsetsTopic creates __consumer_offsets at Open when the catalog has none.
func (b *Broker) createOffsetsTopic() error {
	if b.cfg.Groups.Replicated || b.Topic(group.OffsetsTopic) != nil {
		return nil
	}
	if err := b.CreateTopic(group.OffsetsTopic, int(b.groups.partitions.Load()), OffsetsTopicConfig()); err != nil {
		return fmt.Errorf("create %s (ringlogd --offsets-partitions, --max-partitions): %w", group.OffsetsTopic, err)
	}
	return nil
}

func (s *Shard) startGroups() {
	s.groups = &shardGroups{
		coord:   group.New(s.b.groupConfig(s.b.groups.partitions.Load())),
		waiting: map[uint64]func(group.Response){},
		builder: batch.NewBuilder(batch.BuilderOptions{}),
		leads:   map[int32]uint64{},
	}
}

// groupsOpened loads the groups of a __consumer_offsets partition that opened here (a
// single broker; on a cluster Groups.Lead loads them).
func (s *Shard) groupsOpened(p *partition) {
	if p.tp.Topic != group.OffsetsTopic || s.b.cfg.Groups.Replicated {
		return
	}
	s.groups.coord.BeginLoad(p.tp.Partition)
	s.loadGroups(p)
}

// loadGroups replays p's log into the coordinator, whose partition is loading, and starts
// serving it.
func (s *Shard) loadGroups(p *partition) {
	sg := s.groups
	snap, err := group.ReplayLog(p.log)
	if err == nil {
		err = sg.coord.Load(s.r.Now(), p.tp.Partition, snap)
	}
	if err != nil {
		// Its groups answer COORDINATOR_NOT_AVAILABLE (via NOT_COORDINATOR) rather than
		// coming back without their offsets.
		s.b.log.Error("consumer groups not loaded", "partition", p.tp.Partition, "err", err)
		sg.coord.Unload(s.r.Now(), p.tp.Partition)
	} else if snap.Records > 0 || len(snap.Groups) > 0 || s.b.cfg.Groups.Replicated {
		s.b.log.Info("consumer groups loaded", "partition", p.tp.Partition, "groups", len(snap.Groups),
			"records", snap.Records, "skipped", snap.Skipped, "log_end", p.log.EndOffset())
	}
	s.drainGroups()
}

// ErrNotReplicatedGroups is returned by Groups.Lead, Resign and SetOffsetsPartitions on a
// broker whose groups are not replicated (GroupsConfig.Replicated unset).
var ErrNotReplicatedGroups = errors.New("consumer groups are not replicated on this broker")

// Lead starts serving the groups of __consumer_offsets partition p, which this broker
// now leads (GroupsConfig.Replicated): its shard marks the partition loading (group
// requests are answered COORDINATOR_LOAD_IN_PROGRESS), then, in a later turn of its loop,
// replays the partition's log and serves. A Resign or another Lead of p before the replay
// ends cancels it. It returns once the loading mark is posted.
func (g *Groups) Lead(p int32) error {
	return g.onOffsetsShard(p, func(s *Shard, tp TopicPartition) {
		sg := s.groups
		sg.leads[p]++
		lead := sg.leads[p]
		sg.coord.Unload(s.r.Now(), p) // a previous leadership's groups, if any
		sg.coord.BeginLoad(p)
		s.drainGroups()
		s.b.log.Info("loading consumer groups", "partition", p)
		if err := s.r.Post(func() {
			part := s.parts[tp]
			if sg.leads[p] != lead {
				return // resigned or led again meanwhile
			}
			if part == nil {
				sg.coord.Unload(s.r.Now(), p)
				s.drainGroups()
				return
			}
			s.loadGroups(part)
		}); err != nil {
			sg.coord.Unload(s.r.Now(), p)
			s.drainGroups()
		}
	})
}

// Resign stops serving the groups of __consumer_offsets partition p, which this broker no
// longer leads (GroupsConfig.Replicated): they are dropped, their waiting requests and
// commits answered NOT_COORDINATOR, and a replay in progress is cancelled.
func (g *Groups) Resign(p int32) error {
	return g.onOffsetsShard(p, func(s *Shard, _ TopicPartition) {
		sg := s.groups
		sg.leads[p]++
		if _, loaded := sg.coord.Loaded(p); loaded {
			s.b.log.Info("dropped consumer groups: no longer leading their partition", "partition", p)
		}
		sg.coord.Unload(s.r.Now(), p)
		s.drainGroups()
	})
}

// onOffsetsShard posts fn to the loop of the shard owning __consumer_offsets partition p.
func (g *Groups) onOffsetsShard(p int32, fn func(s *Shard, tp TopicPartition)) error {
	if !g.b.cfg.Groups.Replicated {
		return ErrNotReplicatedGroups
	}
	tp := TopicPartition{group.OffsetsTopic, p}
	si, err := g.b.ShardOf(tp)
	if err != nil {
		return err
	}
	s := g.b.shards[si]
	deadline := time.Now().Add(adminWaitMax)
	for {
		err := s.r.Post(func() { fn(s, tp) })
		if err == nil || !errors.Is(err, ring.ErrMailboxFull) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(time.Millisecond) // leadership changes only: wait for the mailbox to drain
	}
}

// SetOffsetsPartitions makes n the partition count of __consumer_offsets, which decides
// where every group lives (GroupsConfig.Replicated: the controller's topic may have been
// created by a broker configured with another count). When it changes, every shard's
// coordinator is replaced by an empty one of the new count (call it before leading any
// partition: the groups it served are dropped). It waits for the shards.
func (g *Groups) SetOffsetsPartitions(n int32) error {
	if !g.b.cfg.Groups.Replicated {
		return ErrNotReplicatedGroups
	}
	if n < 1 || n > offsetsPartitionsMax {
		return fmt.Errorf("%w: offsets partitions %d (want 1..%d)", ErrInvalidPartitions, n, offsetsPartitionsMax)
	}
	if g.partitions.Swap(n) == n {
		return nil
	}
	g.b.log.Info("__consumer_offsets partition count from the controller", "partitions", n)
	var fns []func() error
	for _, s := range g.b.shards {
		fns = append(fns, func() error {
			return onShard(s, func() error {
				sg := s.groups
				for p := range sg.leads {
					sg.leads[p]++
				}
				sg.coord.UnloadAll(s.r.Now())
				s.drainGroups()
				sg.coord = group.New(s.b.groupConfig(n))
				s.armGroupTimer()
				return nil
			})
		})
	}
	return runAll(fns)
}

// groupsClosed unloads the groups of a __consumer_offsets partition that closed here.
func (s *Shard) groupsClosed(tp TopicPartition) {
	if tp.Topic != group.OffsetsTopic || s.groups == nil {
		return
	}
	s.groups.coord.Unload(s.r.Now(), tp.Partition)
	s.drainGroups()
}

// unloadGroups stops serving every group of this shard (Broker.Drain). Loop goroutine.
func (s *Shard) unloadGroups() {
	for tp := range s.parts {
		if tp.Topic == group.OffsetsTopic {
			s.groups.coord.Unload(s.r.Now(), tp.Partition)
		}
	}
	s.drainGroups()
}

// handleGroup runs one request on this shard's coordinator. Loop goroutine.
func (s *Shard) handleGroup(req group.Request, done func(group.Response)) {
	sg := s.groups
	sg.nextReq++
	id := sg.nextReq
	sg.waiting[id] = done
	sg.coord.Handle(s.r.Now(), withReqID(req, id))
	s.drainGroups()
}

// drainGroups carries out the coordinator's outputs in order: replies go to their
// callbacks, appends become acks=all produces whose completion reports AppendDone. It does
// not reenter: outputs produced meanwhile (a produce that fails at once) join the queue.
func (s *Shard) drainGroups() {
	sg := s.groups
	sg.queue = append(sg.queue, sg.coord.Ready()...)
	if sg.busy {
		return
	}
	sg.busy = true
	for len(sg.queue) > 0 {
		out := sg.queue[0]
		sg.queue[0] = nil
		sg.queue = sg.queue[1:]
		switch o := out.(type) {
		case group.Reply:
			if done := sg.waiting[o.ReqID]; done != nil {
				delete(sg.waiting, o.ReqID)
				done(o.Response)
			}
		case group.Append:
			s.appendGroupRecords(o)
		}
		sg.queue = append(sg.queue, sg.coord.Ready()...)
	}
	sg.busy = false
	s.armGroupTimer()
}

func (s *Shard) appendGroupRecords(o group.Append) {
	sg := s.groups
	tp := TopicPartition{group.OffsetsTopic, o.Partition}
	finish := func(err error) {
		sg.coord.AppendDone(s.r.Now(), o.ID, err)
		s.drainGroups()
	}
	b, err := group.EncodeBatch(nil, sg.builder, o.Records, s.r.Now().UnixMilli())
	if err != nil {
		finish(err)
		return
	}
	s.produce(tp, [][]byte{b}, AcksAll, func(r ProduceResult) { finish(r.Err) })
}

// armGroupTimer sets the shard's group timer to the coordinator's next deadline.
func (s *Shard) armGroupTimer() {
	sg := s.groups
	at, ok := sg.coord.NextDeadline()
	if !ok {
		if sg.timer != nil {
			sg.timer.Stop()
		}
		return
	}
	wait := max(at.Sub(s.r.Now()), 0)
	if sg.timer == nil {
		sg.timer = s.r.AfterFunc(wait, s.groupTick)
		return
	}
	sg.timer.Reset(wait)
}

func (s *Shard) groupTick() {
	s.groups.coord.Tick(s.r.Now())
	s.drainGroups()
}

// withReqID returns req with its ReqID set to id.
func withReqID(req group.Request, id uint64) group.Request {
	switch r := req.(type) {
	case group.JoinGroup:
		r.ReqID = id
		return r
	case group.SyncGroup:
		r.ReqID = id
		return r
	case group.Heartbeat:
		r.ReqID = id
		return r
	case group.LeaveGroup:
		r.ReqID = id
		return r
	case group.OffsetCommit:
		r.ReqID = id
		return r
	case group.OffsetFetch:
		r.ReqID = id
		return r
	case group.ListGroups:
		r.ReqID = id
		return r
	case group.DescribeGroups:
		r.ReqID = id
		return r
	case group.DeleteGroups:
		r.ReqID = id
		return r
	}
	panic(fmt.Sprintf("shard: unknown group request %T", req))
}

// groupOf is the group a request names ("" for ListGroups, DescribeGroups, DeleteGroups).
func groupOf(req group.Request) string {
	switch r := req.(type) {
	case group.JoinGroup:
		return r.Group
	case group.SyncGroup:
		return r.Group
	case group.Heartbeat:
		return r.Group
	case group.LeaveGroup:
		return r.Group
	case group.OffsetCommit:
		return r.Group
	case group.OffsetFetch:
		return r.Group
	}
	return ""
}

// errorResponse is req's answer when it cannot reach a coordinator.
func errorResponse(req group.Request, code group.Code) group.Response {
	switch r := req.(type) {
	case group.JoinGroup:
		return group.JoinGroupResponse{Err: code, Generation: -1, MemberID: r.MemberID}
	case group.SyncGroup:
		return group.SyncGroupResponse{Err: code}
	case group.Heartbeat:
		return group.HeartbeatResponse{Err: code}
	case group.LeaveGroup:
		return group.LeaveGroupResponse{Err: code}
	case group.OffsetCommit:
		resp := group.OffsetCommitResponse{}
		for _, o := range r.Offsets {
			resp.Partitions = append(resp.Partitions, group.PartitionResult{Topic: o.Topic, Partition: o.Partition, Err: code})
		}
		return resp
	case group.OffsetFetch:
		return group.OffsetFetchResponse{Err: code}
	case group.ListGroups:
		return group.ListGroupsResponse{Err: code}
	case group.DescribeGroups:
		resp := group.DescribeGroupsResponse{}
		for _, id := range r.Groups {
			resp.Groups = append(resp.Groups, group.DescribedGroup{Err: code, Group: id, State: group.Dead, Generation: -1})
		}
		return resp
	case group.DeleteGroups:
		resp := group.DeleteGroupsResponse{}
		for _, id := range r.Groups {
			resp.Results = append(resp.Results, group.DeleteResult{Group: id, Err: code})
		}
		return resp
	}
	panic(fmt.Sprintf("shard: unknown group request %T", req))
}

// CoordinatorShard returns the shard coordinating groupID (the owner of its
// __consumer_offsets partition), or a code saying why there is none.
func (g *Groups) CoordinatorShard(groupID string) (int, group.Code) {
	if groupID == "" {
		return -1, group.CodeInvalidGroupID
	}
	if g.b.closing.Load() {
		return -1, group.CodeCoordinatorNotAvailable
	}
	si, err := g.b.ShardOf(TopicPartition{group.OffsetsTopic, group.PartitionFor(groupID, g.partitions.Load())})
	if err != nil {
		return -1, group.CodeCoordinatorNotAvailable
	}
	return si, group.CodeNone
}

// Do carries out one group request on its coordinator shard; done runs exactly once with
// the response, on a shard loop (or on the caller's goroutine when no shard could be
// reached), and must not block. The request's ReqID is ignored (the shard sets its own).
// ListGroups asks every shard; DescribeGroups and DeleteGroups are split by coordinator
// and their answers kept in the request's order. caller is the shard whose loop runs the
// call, or CallerNone (see ProduceFrom).
func (g *Groups) Do(caller int, req group.Request, done func(group.Response)) {
	switch r := req.(type) {
	case group.ListGroups:
		g.listGroups(r, done)
	case group.DescribeGroups:
		g.split(r.Groups, func(ids []string) group.Request { return group.DescribeGroups{Groups: ids} }, func(parts []group.Response) group.Response {
			var out group.DescribeGroupsResponse
			for _, p := range parts {
				out.Groups = append(out.Groups, p.(group.DescribeGroupsResponse).Groups...)
			}
			return out
		}, done)
	case group.DeleteGroups:
		g.split(r.Groups, func(ids []string) group.Request { return group.DeleteGroups{Groups: ids} }, func(parts []group.Response) group.Response {
			var out group.DeleteGroupsResponse
			for _, p := range parts {
				out.Results = append(out.Results, p.(group.DeleteGroupsResponse).Results...)
			}
			return out
		}, done)
	default:
		si, code := g.CoordinatorShard(groupOf(req))
		if code != group.CodeNone {
			done(errorResponse(req, code))
			return
		}
		g.onShard(caller, si, req, done)
	}
}

// onShard runs req on shard si's coordinator.
func (g *Groups) onShard(caller, si int, req group.Request, done func(group.Response)) {
	s := g.b.shards[si]
	if si == caller && s.r.OnOwnerThread() {
		s.handleGroup(req, done)
		return
	}
	if err := s.r.Post(func() { s.handleGroup(req, done) }); err != nil {
		done(errorResponse(req, group.CodeCoordinatorNotAvailable))
	}
}

// listGroups asks every shard and merges the lists (sorted by group id).
func (g *Groups) listGroups(r group.ListGroups, done func(group.Response)) {
	parts := make([]group.Response, len(g.b.shards))
	g.gather(len(parts), func(i int, put func(group.Response)) {
		g.onShard(CallerNone, i, r, put)
	}, parts, func() {
		var out group.ListGroupsResponse
		for _, p := range parts {
			lr := p.(group.ListGroupsResponse)
			if lr.Err != group.CodeNone && out.Err == group.CodeNone {
				out.Err = lr.Err
			}
			out.Groups = append(out.Groups, lr.Groups...)
		}
		slices.SortFunc(out.Groups, func(a, b group.ListedGroup) int { return cmpString(a.Group, b.Group) })
		done(out)
	})
}

// split sends each shard the ids it coordinates and merges the answers in ids' order.
func (g *Groups) split(ids []string, build func([]string) group.Request, merge func([]group.Response) group.Response, done func(group.Response)) {
	type target struct {
		shard int
		code  group.Code
	}
	targets := make([]target, len(ids))
	byShard := map[int][]string{}
	for i, id := range ids {
		si, code := g.CoordinatorShard(id)
		targets[i] = target{si, code}
		if code == group.CodeNone {
			byShard[si] = append(byShard[si], id)
		}
	}
	shards := make([]int, 0, len(byShard))
	for si := range byShard {
		shards = append(shards, si)
	}
	slices.Sort(shards)
	parts := make([]group.Response, len(shards))
	g.gather(len(shards), func(k int, put func(group.Response)) {
		g.onShard(CallerNone, shards[k], build(byShard[shards[k]]), put)
	}, parts, func() {
		// Reassemble in the request's order: each shard's answers come in its ids' order.
		next := map[int]int{}
		index := map[int]int{}
		for k, si := range shards {
			index[si] = k
		}
		ordered := make([]group.Response, 0, len(ids))
		for i, id := range ids {
			t := targets[i]
			if t.code != group.CodeNone {
				ordered = append(ordered, errorResponse(build([]string{id}), t.code))
				continue
			}
			k := index[t.shard]
			ordered = append(ordered, pick(parts[k], next[k]))
			next[k]++
		}
		done(merge(ordered))
	})
}

// pick returns the i-th entry of a DescribeGroups or DeleteGroups response as a response
// of its own.
func pick(r group.Response, i int) group.Response {
	switch v := r.(type) {
	case group.DescribeGroupsResponse:
		return group.DescribeGroupsResponse{Groups: v.Groups[i : i+1]}
	case group.DeleteGroupsResponse:
		return group.DeleteGroupsResponse{Results: v.Results[i : i+1]}
	}
	panic(fmt.Sprintf("shard: pick from %T", r))
}

// gather runs n calls; each puts its response into parts[i]; the last one calls finish.
func (g *Groups) gather(n int, call func(i int, put func(group.Response)), parts []group.Response, finish func()) {
	if n == 0 {
		finish()
		return
	}
	var remaining atomic.Int32
	remaining.Store(int32(n))
	for i := range n {
		call(i, func(r group.Response) {
			parts[i] = r
			if remaining.Add(-1) == 0 {
				finish()
			}
		})
	}
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Handle carries out one group request and waits for its answer: the entry point for
// protocol adapters that call from their own goroutine (never from a shard loop). A
// JoinGroup may wait for the whole join phase (up to the group's rebalance timeout). It
// fails only when ctx ends first (without a deadline, after groupReplyWaitMax).
func (g *Groups) Handle(ctx context.Context, req group.Request) (group.Response, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, groupReplyWaitMax)
		defer cancel()
	}
	answer := make(chan group.Response, 1)
	g.Do(CallerNone, req, func(r group.Response) { answer <- r })
	select {
	case r := <-answer:
		return r, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("group request %T: %w", req, ctx.Err())
	}
}
