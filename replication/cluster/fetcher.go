package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/ringlog/ringlog/engine"
	"github.com/ringlog/ringlog/engine/batch"
	"github.com/ringlog/ringlog/engine/shard"
	"github.com/ringlog/ringlog/replication/controller"
	"github.com/ringlog/ringlog/replication/isr"
)

// fetcher copies the partitions this broker follows from one leader broker, in one of two
// lanes: one goroutine and one connection of its own per leader and lane, so that
// replication never queues behind client requests on a shared connection, and the
// replicas in their partition's ISR (whose fetches move the high watermark and answer
// acks=all produces) never queue behind a catching-up replica's large responses and
// appends. The catch-up lane fetches at most catchUpPartitionBytes per partition and round.
type fetcher struct {
	m       *Manager
	leader  int32
	catchUp bool // the lane of the replicas outside their partition's ISR
	ctx     context.Context
	cancel  context.CancelFunc
	done    chan struct{}

	// kickMu guards the round in flight's cancel (nil between rounds) and connection, and
	// kicked, a kick that came between rounds (see kick).
	kickMu      sync.Mutex
	roundCancel context.CancelFunc
	roundConn   PeerConn
	kicked      bool
}

// fetcherKey names a fetcher: its leader broker and lane.
type fetcherKey struct {
	leader  int32
	catchUp bool
}

// catchUpPartitionBytes bounds one partition's records in a catch-up lane's fetch: the
// follower appends each partition's answer in one write on the partition's shard loop,
// which its produces wait behind, and the leader reads it from its segments.
const catchUpPartitionBytes = 1 << 20

// laneBusyWait is how long a lane waits before it looks again when the other lane holds
// every replica it would fetch (for at most that lane's round, after an ISR change), and
// the longest its round parks on the leader while the other lane holds some of them.
const laneBusyWait = 10 * time.Millisecond

// errKicked ends a round whose long-poll kick cut short by cancelling it (a PeerConn
// without FetchWaker): its answer is lost with the connection, and the lane lists its
// replicas again at once.
var errKicked = errors.New("replica fetch round cut short: the lane's replicas changed")

// FetchWaker is a PeerConn that can end its own outstanding ReplicaFetch's long-poll
// without dropping the connection (the ringlog protocol's ReplicaFetchWake): the leader
// answers the parked fetch at once with what it has. WakeFetch may be called from another
// goroutine while ReplicaFetch waits; a wake that comes before the fetch is sent makes it
// not park. It reports false when it could not ask (the connection failed, or the leader
// is of a release without the API): the caller then cancels the round instead.
type FetchWaker interface {
	WakeFetch() bool
}

// kick makes the lane list its replicas again now: a replica joined the in-sync lane (its
// partition's ISR now holds this broker, so acks=all waits for this lane's next fetch of
// it) or must leave the catch-up lane's round for it. A round parked on the leader is cut
// short: the connection asks the leader to answer it now (FetchWaker), and the round ends
// as any other, its answer used; only where the connection cannot ask is the round's
// context cancelled, which drops the connection (the answer on the wire cannot be told
// apart from the next one's). Between rounds, the next round lists first. Without it the
// replica waited for the lane's long-poll on its other partitions, up to the fetch wait
// (500 ms), and every acks=all produce to it with it.
func (f *fetcher) kick() {
	f.kickMu.Lock()
	defer f.kickMu.Unlock()
	if f.roundCancel != nil {
		if w, ok := f.roundConn.(FetchWaker); ok && w.WakeFetch() {
			f.m.laneWakes.Add(1)
			return
		}
		f.roundCancel()
		f.roundCancel, f.roundConn = nil, nil
		return
	}
	f.kicked = true
}

// startRound records the cancel and connection of the round about to send its fetch;
// false: a kick came since the lane listed its replicas, list them again first.
func (f *fetcher) startRound(cancel context.CancelFunc, conn PeerConn) bool {
	f.kickMu.Lock()
	defer f.kickMu.Unlock()
	if f.kicked {
		f.kicked = false
		return false
	}
	f.roundCancel, f.roundConn = cancel, conn
	return true
}

// endRound reports whether a kick cancelled the round.
func (f *fetcher) endRound() (kicked bool) {
	f.kickMu.Lock()
	defer f.kickMu.Unlock()
	kicked = f.roundCancel == nil
	f.roundCancel, f.roundConn = nil, nil
	return kicked
}

// syncFetchers starts a fetcher for every leader and lane some replica follows in (md's
// view of the ISR) and stops the others.
//
// A replica that enters an in-sync lane (it joined its partition's ISR, or was placed in it
// from the start) kicks that lane, and the lane it leaves when that lane's round holds it:
// acks=all on its partition waits for this broker's next fetch of it from now on, and the
// lanes' rounds in flight were listed without it (see fetcher.kick).
func (m *Manager) syncFetchers(md *controller.Metadata) {
	want := map[fetcherKey]bool{}
	var kick []fetcherKey
	m.reps.Range(func(_, v any) bool {
		r := v.(*replica)
		r.mu.Lock()
		if r.follower != nil {
			k := fetcherKey{leader: r.leaderID, catchUp: !inISR(md, r.tp, m.cfg.NodeID)}
			want[k] = true
			if !k.catchUp && (!r.laneKnown || r.lane != k) {
				kick = append(kick, k)
				if r.laneKnown && r.fetching.Load() {
					kick = append(kick, r.lane)
				}
			}
			r.lane, r.laneKnown = k, true
		} else {
			r.laneKnown = false
		}
		r.mu.Unlock()
		return true
	})
	m.fmu.Lock()
	defer m.fmu.Unlock()
	if m.stopped() {
		return
	}
	for _, k := range kick { // lanes started below list their replicas fresh
		if f := m.fetchers[k]; f != nil && want[k] {
			f.kick()
			m.laneKicks.Add(1)
		}
	}
	for k, f := range m.fetchers {
		if !want[k] {
			f.close()
			delete(m.fetchers, k)
		}
	}
	for k := range want {
		if m.fetchers[k] == nil {
			ctx, cancel := context.WithCancel(context.Background())
			f := &fetcher{m: m, leader: k.leader, catchUp: k.catchUp, ctx: ctx, cancel: cancel, done: make(chan struct{})}
			m.fetchers[k] = f
			go f.run()
		}
	}
}

func (f *fetcher) close() {
	f.cancel()
	<-f.done
}

// following lists the replicas that follow f's leader in f's lane (md's view of the ISR).
func (f *fetcher) following(md *controller.Metadata) []*replica {
	var out []*replica
	f.m.reps.Range(func(_, v any) bool {
		r := v.(*replica)
		r.mu.Lock()
		if r.follower != nil && r.leaderID == f.leader && inISR(md, r.tp, f.m.cfg.NodeID) != f.catchUp {
			out = append(out, r)
		}
		r.mu.Unlock()
		return true
	})
	return out
}

func (f *fetcher) run() {
	defer close(f.done)
	if f.catchUp {
		lowerPriority() // for good: the thread ends with this goroutine
	}
	m := f.m
	var conn PeerConn
	var addr string
	// A failure that repeats every retry (a refused login, a denied fetch) is logged once
	// at warning level, then at debug level.
	var failures repeatedError
	report := func(what string, err error) {
		if f.ctx.Err() == nil {
			failures.log(f.ctx, m.log, true, what, err, "leader", f.leader)
		}
	}
	defer func() {
		if conn != nil {
			conn.Close()
		}
	}()
	backoff := func() bool {
		select {
		case <-f.ctx.Done():
			return false
		case <-timeAfter(retryBackoff):
			return true
		}
	}
	// The replicas of the lane, listed again only when a reconcile stored new metadata
	// (at every change, and every reconcileEvery): a round neither copies the metadata
	// nor walks every replica of the broker.
	var listed *controller.Metadata
	var parts []*replica
	for f.ctx.Err() == nil {
		md := m.reconciledMetadata()
		if md != listed {
			listed, parts = md, f.following(md)
		}
		b := md.Brokers[f.leader]
		if b == nil || len(parts) == 0 {
			if !backoff() {
				return
			}
			continue
		}
		if conn == nil || addr != b.Address {
			if conn != nil {
				conn.Close()
			}
			c, err := m.cfg.Dial(f.ctx, b.Address)
			if err != nil {
				report("replica fetcher cannot connect to its leader", err)
				conn = nil
				if !backoff() {
					return
				}
				continue
			}
			conn, addr = c, b.Address
			m.laneDials.Add(1)
		}
		wait, err := f.round(conn, parts, md)
		if errors.Is(err, errKicked) {
			conn.Close() // the parked fetch's answer is still to come on it
			conn = nil
			continue
		}
		if err == nil && wait > 0 { // only throttled replicas and the budget is spent, the other lane holds them, or all were refused
			select {
			case <-f.ctx.Done():
				return
			case <-timeAfter(min(wait, m.cfg.FetchWait)):
			}
		}
		if err == nil {
			failures.reset()
		} else {
			report("replica fetch failed", err)
			if !isRemote(err) {
				conn.Close()
				conn = nil
			}
			if !backoff() {
				return
			}
		}
	}
}

// round truncates the replicas that must, then fetches once for the rest. With the
// replication throttle on, a replica outside its partition's ISR (md's view) that its
// topic's follower.replication.throttled.replicas lists (or every one, the key unset) is left out
// while the throttle's budget is spent, and otherwise fetches at most a chunk whose bytes
// are charged to the budget; wait > 0 reports that only such replicas were left and when
// the budget frees.
func (f *fetcher) round(conn PeerConn, parts []*replica, md *controller.Metadata) (wait time.Duration, err error) {
	m := f.m
	req := &FetchRequest{ReplicaID: m.cfg.NodeID, MaxWait: m.cfg.FetchWait, BytesMax: fetchBytesMax, ProtocolVersion: m.wireProtocol(md)}
	var fetching []*replica
	var followers []*isr.Follower
	var throttled []bool
	defer func() { // the replicas this round claimed (their fetching flag) go back
		for _, r := range parts {
			r.fetching.Store(false)
		}
	}()
	claimed := parts[:0:0]
	busy := false // the other lane's round holds a replica of this lane (an ISR change)
	for _, r := range parts {
		// The list is as of the last reconcile: a replica that follows another leader
		// since (or none) is left to the lane of its new leader.
		if !r.follows(f.leader) {
			continue
		}
		if r.fetching.CompareAndSwap(false, true) {
			claimed = append(claimed, r)
		} else {
			busy = true
		}
	}
	if len(claimed) == 0 { // the other lane holds them all (an ISR change): look again soon
		return laneBusyWait, nil
	}
	if busy {
		// Park at most laneBusyWait: the next round claims the held replica once the other
		// lane's round lets it go, instead of after this round's full fetch wait.
		req.MaxWait = min(req.MaxWait, laneBusyWait)
	}
	parts = claimed
	for _, r := range parts {
		// A follower whose log holds an epoch the leader lacks asks again after each cut
		// (isr.Follower.EpochAnswered); every round removes an epoch, so this ends.
		for range truncateRoundsMax {
			if err := r.truncate(f.ctx, m, conn); err != nil {
				return 0, err
			}
			if !r.truncating() {
				break
			}
		}
		r.mu.Lock()
		if fl := r.follower; fl != nil && fl.Phase() == isr.Fetching {
			fp := FetchPartition{TopicPartition: r.tp, LeaderEpoch: fl.LeaderEpoch(), Offset: fl.LogEndOffset()}
			if f.catchUp {
				fp.BytesMax = catchUpPartitionBytes
			}
			th := m.throttle != nil && !inISR(md, r.tp, m.cfg.NodeID) && m.lists.Load().listed(false, r.tp, m.cfg.NodeID)
			if th {
				if w := m.throttle.wait(); w > 0 {
					wait = w
					r.mu.Unlock()
					continue
				}
				fp.BytesMax = min(fp.BytesMax, m.throttle.chunkBytes())
				if fp.BytesMax <= 0 {
					fp.BytesMax = m.throttle.chunkBytes()
				}
			}
			fetching = append(fetching, r)
			followers = append(followers, fl)
			throttled = append(throttled, th)
			req.Partitions = append(req.Partitions, fp)
		}
		r.mu.Unlock()
	}
	if len(req.Partitions) == 0 {
		return wait, nil
	}
	ctx, cancel := context.WithTimeout(f.ctx, m.cfg.FetchWait+submitTimeout)
	defer cancel()
	if !f.startRound(cancel, conn) {
		return 0, nil // kicked since the lane listed its replicas: list them again
	}
	sent := time.Now()
	answers, err := conn.ReplicaFetch(ctx, req)
	if kicked := f.endRound(); err != nil {
		if kicked && f.ctx.Err() == nil {
			return 0, errKicked
		}
		return 0, err
	}
	if !f.catchUp && time.Since(sent) >= slowRound {
		m.slowRounds.Add(1)
	}
	// Append every partition's batches in one visit of each shard's loop, then let each
	// follower learn its answer. writeMu of each appended replica is held across the
	// append (its replicas are this lane's alone this round: fetching).
	got := make([]fetchedAnswer, 0, len(answers))
	var appends []shard.ReplicatedAppend
	for i, a := range answers {
		if i >= len(fetching) || a.TopicPartition != fetching[i].tp {
			continue
		}
		if throttled[i] {
			m.throttle.charge(int64(len(a.Records)))
		}
		fa := fetchedAnswer{r: fetching[i], f: followers[i], a: a, append: -1}
		if a.Err == nil {
			fa.batches, fa.epochs = splitReplicated(a.Records)
			if len(fa.batches) > 0 {
				fa.r.writeMu.Lock()
				if fa.r.retired {
					fa.r.writeMu.Unlock()
					continue
				}
				fa.append = len(appends)
				appends = append(appends, shard.ReplicatedAppend{TopicPartition: fa.r.tp, Batches: fa.batches})
			}
		}
		got = append(got, fa)
	}
	if len(appends) > 0 {
		m.b.AppendReplicatedAll(appends)
		m.replicatedAppends.Add(uint64(len(appends)))
	}
	for _, fa := range got {
		end, err := int64(-1), error(nil)
		if fa.append >= 0 {
			end, err = appends[fa.append].End, appends[fa.append].Err
			fa.r.writeMu.Unlock()
		}
		fa.r.fetched(m, fa, end, err)
	}
	m.fetchRounds.Add(1)
	if allRefused(answers) {
		// Every partition was refused (not the leader, an epoch it has not applied yet):
		// the leader answered at once without a read, and asking again at once spins
		// until the metadata changes (Kafka's replica.fetch.backoff.ms).
		m.failedRounds.Add(1)
		return failedRoundWait, nil
	}
	return 0, nil
}

// slowRound is the in-sync lane's fetch that Manager.slowRounds counts: a leader written
// continuously answers within a few milliseconds, so such a round is a long-poll that woke
// late (or a slow network or loop).
const slowRound = 100 * time.Millisecond

// failedRoundWait is how long a lane waits after a round whose every partition was
// refused: short, since after a leader change the refusals end as soon as the new leader
// applies its epoch, and the in-sync lane's next fetch is what acks=all waits for.
const failedRoundWait = 20 * time.Millisecond

// allRefused reports whether a round had answers and the leader refused every one.
func allRefused(answers []FetchAnswer) bool {
	for _, a := range answers {
		if a.Err == nil {
			return false
		}
	}
	return len(answers) > 0
}

// fetchedAnswer is the leader's answer for one replica of a round, cut into batches.
type fetchedAnswer struct {
	r       *replica
	f       *isr.Follower
	a       FetchAnswer
	batches [][]byte
	epochs  []isr.BatchEpoch
	append  int // index of its batches in the round's appends; -1: none
}

// inISR reports whether broker id is in tp's ISR in md; a partition md does not know
// counts as in sync (never throttled on a stale view).
func inISR(md *controller.Metadata, tp shard.TopicPartition, id int32) bool {
	t := md.Topics[tp.Topic]
	if t == nil || int(tp.Partition) >= len(t.Partitions) || tp.Partition < 0 {
		return true
	}
	return slices.Contains(t.Partitions[tp.Partition].ISR, id)
}

// truncateRoundsMax bounds one fetch round's OffsetsForLeaderEpoch exchanges per replica;
// a replica still truncating after it goes on in the next round.
const truncateRoundsMax = 64

// follows reports whether the replica follows leader now.
func (r *replica) follows(leader int32) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.follower != nil && r.leaderID == leader
}

// truncating reports whether the replica's follower must still ask where its log diverged.
func (r *replica) truncating() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.follower != nil && r.follower.Phase() == isr.Truncating
}

// truncate asks the leader where the replica's log diverged and cuts it there, when the
// follower is in its truncating phase (after a leader change).
func (r *replica) truncate(ctx context.Context, m *Manager, conn PeerConn) error {
	r.mu.Lock()
	f := r.follower
	if f == nil || f.Phase() != isr.Truncating {
		r.mu.Unlock()
		return nil
	}
	q := f.EpochRequest()
	r.mu.Unlock()
	answer, err := conn.OffsetsForLeaderEpoch(ctx, r.tp, q.CurrentLeaderEpoch, q.Epoch)
	if err != nil {
		return fmt.Errorf("offsets for leader epoch of %s/%d: %w", r.tp.Topic, r.tp.Partition, err)
	}
	r.mu.Lock()
	if r.follower != f {
		r.mu.Unlock()
		return nil
	}
	from := f.LogEndOffset()
	to := f.EpochAnswered(answer)
	r.mu.Unlock()
	r.writeMu.Lock()
	if r.retired {
		r.writeMu.Unlock()
		return nil
	}
	end, err := m.b.TruncateTo(r.tp, to)
	r.writeMu.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	if err == nil && end != to {
		err = fmt.Errorf("log cut to %d, the follower expected %d", end, to)
	}
	if err != nil {
		r.resetFollowerLocked()
		return fmt.Errorf("truncate %s/%d to %d: %w", r.tp.Topic, r.tp.Partition, to, err)
	}
	r.leo.Store(end)
	if end < from {
		m.log.Info("follower truncated its log to the leader's", "topic", r.tp.Topic, "partition", r.tp.Partition,
			"from", from, "to", end, "leader_epoch_answer", answer.String())
	}
	return r.saveEpochsLocked()
}

// resetFollowerLocked drops the follower state so that the next reconciliation starts it
// again from the log as it is (after a failed append or truncation).
func (r *replica) resetFollowerLocked() {
	r.follower = nil
	r.leaderEpoch = -1
}

// fetched applies the leader's answer for r once the round appended its batches (end,
// err: the log end offset after them and the append's error; end -1: nothing appended):
// the follower learns the batches' epochs and the high watermark.
func (r *replica) fetched(m *Manager, fa fetchedAnswer, end int64, err error) {
	f, a := fa.f, fa.a
	if a.Err != nil {
		if errors.Is(a.Err, engine.ErrOffsetOutOfRange) || errors.Is(a.Err, isr.ErrOffsetOutOfRange) {
			r.mu.Lock()
			if r.follower == f {
				_ = f.Fetched(isr.FetchResponse{Err: isr.ErrOffsetOutOfRange})
			}
			r.mu.Unlock()
		}
		return
	}
	if err != nil {
		m.log.Warn("append replicated batches", "topic", r.tp.Topic, "partition", r.tp.Partition, "err", err)
		r.mu.Lock()
		if r.follower == f {
			r.resetFollowerLocked()
		}
		r.mu.Unlock()
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.follower != f {
		return
	}
	if err := f.Appended(fa.epochs); err != nil {
		m.log.Warn("replicated batches out of order", "topic", r.tp.Topic, "partition", r.tp.Partition, "err", err)
		r.resetFollowerLocked()
		return
	}
	if end >= 0 {
		r.leo.Store(end)
	}
	_ = f.Fetched(isr.FetchResponse{HighWatermark: a.HighWatermark, LogEndOffset: a.LogEndOffset})
	r.hwm.Store(f.HighWatermark())
	if err := r.saveEpochsLocked(); err != nil {
		m.log.Warn("save epoch checkpoint", "topic", r.tp.Topic, "partition", r.tp.Partition, "err", err)
	}
}

// splitReplicated cuts fetched bytes into whole batches (a trailing partial batch, cut by
// the fetch size, is dropped) with each batch's leader epoch and offsets.
func splitReplicated(records []byte) ([][]byte, []isr.BatchEpoch) {
	var out [][]byte
	var epochs []isr.BatchEpoch
	for len(records) > 0 {
		h, err := batch.ParseHeader(records)
		if err != nil || h.Size() > len(records) {
			break
		}
		out = append(out, records[:h.Size():h.Size()])
		epochs = append(epochs, isr.BatchEpoch{Epoch: max(h.LeaderEpoch, 0), BaseOffset: h.BaseOffset, EndOffset: h.LastOffset() + 1})
		records = records[h.Size():]
	}
	return out, epochs
}

// timeAfter is time.After (a seam for nothing but readability of the select above).
var timeAfter = time.After

// repeatedError logs a failure that a loop retries: at warning level when it is news
// (another message than the last one warned about), at debug level while it repeats.
type repeatedError struct{ last string }

// log logs err; warn false keeps it at debug level whatever it is.
func (r *repeatedError) log(ctx context.Context, log *slog.Logger, warn bool, what string, err error, attrs ...any) {
	level := slog.LevelDebug
	if warn && err.Error() != r.last {
		level, r.last = slog.LevelWarn, err.Error()
	}
	log.Log(ctx, level, what, append(attrs, "err", err)...)
}

func (r *repeatedError) reset() { r.last = "" }
