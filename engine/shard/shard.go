package shard

import (
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ringlog/ringlog/engine"
	"github.com/ringlog/ringlog/engine/shard/core"
	"github.com/ringlog/ringlog/ring"
)

// Shard is one pinned loop goroutine with its reactor and the partitions placed on it.
type Shard struct {
	b       *Broker
	index   int
	cpu     int
	backend string
	r       *ring.Reactor // Post/Stop from any goroutine; everything else loop-only
	exited  chan error    // closed (after one send) when the loop goroutine ends

	// Owned by the loop goroutine.
	parts       map[TopicPartition]*partition
	core        *core.Core   // acks, sync schedule and fetch waiters of parts (see package core)
	flushTimer  *ring.Timer  // runs core.EndTurn after a loop turn's mailbox drain
	stagedTimer *ring.Timer  // runs writeStaged after a loop turn's mailbox drain (stagedwrite.go)
	staged      []*partition // partitions with staged appends this turn, in staging order
	freeSyncOps []*syncOp    // StartSync's reusable ops
	endTurnFn   func()       // s.endTurn, bound once (the flush timer's callback)
	inEndTurn   bool         // core.EndTurn is running: StartSync queues in turnSyncs
	turnSyncs   []*core.Partition
	syncInline  bool // an inline fdatasync is running (syncInlineNow: never nested)
	// syncInlineBackoff is how many more syncs go to the ring because work arrived during
	// the last inline one (syncInlineNow).
	syncInlineBackoff int
	waitTimer         *ring.Timer   // runs core.Tick at the earliest long-poll deadline
	tick              func()        // s.onTick, allocated once
	scrub             scrubState    // background segment verification (scrub.go)
	cleaner           cleanerState  // background log compaction (compact.go)
	groups            *shardGroups  // the group coordinator of this shard's __consumer_offsets partitions (groups.go)
	counters          shardCounters // produce, fetch and fsync counters (stats.go)
	sharedFiles       sharedFiles   // segment descriptors shared by fetch results (fetchfiles.go)
}

// partition is a partition's shard-owned state. Loop goroutine only.
type partition struct {
	tp          TopicPartition
	log         *engine.Log
	c           core.Partition // c.Log is log
	leaderEpoch int32          // SetLeaderEpoch's; -1: the producer's value is kept
	writes      pendingAppends // produces whose direct-mode or staged writes are not written yet (directwrite.go)
	stagedIn    bool           // p is in its shard's staged list (stagedwrite.go)
}

func startShard(b *Broker, index int) (*Shard, error) {
	s := &Shard{b: b, index: index, cpu: b.shardCPU(index), parts: map[TopicPartition]*partition{}, sharedFiles: sharedFiles{}, exited: make(chan error, 1)}
	s.core = core.New((*coreDriver)(s), b.rep)
	s.startGroups()
	s.tick = s.onTick
	ready := make(chan struct{})
	err := ring.StartPinned(s.cpu, b.cfg.Ring, func(r *ring.Reactor) {
		s.r = r
		s.backend = r.Backend()
		close(ready) // publishes s.r and s.backend to the starting goroutine
		s.armTimers()
		err := r.Run()
		s.closePartitions()
		s.sharedFiles.sweep(true)
		s.exited <- err
		close(s.exited)
	})
	if err != nil {
		return nil, fmt.Errorf("start shard %d on cpu %d: %w", index, s.cpu, err)
	}
	<-ready
	return s, nil
}

func (s *Shard) armTimers() {
	cfg := s.b.cfg
	// Both timers are re-armed (Reset) by their own callbacks: no allocation per tick.
	var flushTimer, retentionTimer *ring.Timer
	flushTimer = s.r.AfterFunc(cfg.FlushCheckInterval, func() {
		// Only partitions a turn left with unsynced records: an idle partition costs the
		// check nothing (10,000 of them took ~5 % of a core at a 50 ms interval).
		s.core.RecheckUnflushed()
		s.sharedFiles.sweep(false)
		flushTimer.Reset(cfg.FlushCheckInterval)
	})
	retentionTimer = s.r.AfterFunc(cfg.RetentionCheckInterval, func() {
		now := time.Now()
		for _, p := range s.parts {
			if _, err := p.log.EnforceRetention(now); err != nil {
				s.b.log.Warn("retention failed", "topic", p.tp.Topic, "partition", p.tp.Partition, "err", err)
			}
		}
		retentionTimer.Reset(cfg.RetentionCheckInterval)
	})
	s.armScrub()
	s.armCleaner()
}

func (s *Shard) onTick() { s.core.Tick(s.r.Now()) }

// coreDriver carries out the core's outputs on the shard's reactor (core.Driver).
type coreDriver Shard

// ScheduleFlush: a zero-delay timer runs after this turn's mailbox drain, so every produce
// queued in the same turn shares the syncs EndTurn starts (group commit). writeStaged, the
// turn's last appends, runs it at once when it is pending (stagedwrite.go).
func (d *coreDriver) ScheduleFlush() {
	s := (*Shard)(d)
	if s.flushTimer == nil {
		s.endTurnFn = s.endTurn
		s.flushTimer = s.r.AfterFunc(0, s.endTurnFn)
		return
	}
	s.flushTimer.Reset(0)
}

// endTurn runs the core's EndTurn, then starts the syncs it asked for together: the one
// sync of a quiet turn inline, any other on the ring (syncInlineNow).
func (s *Shard) endTurn() {
	s.inEndTurn = true
	s.core.EndTurn()
	s.inEndTurn = false
	syncs := s.turnSyncs
	s.turnSyncs = nil // an EndTurn nested in a sync's answers gets an array of its own
	inline := s.syncInlineNow(len(syncs))
	for i, p := range syncs {
		syncs[i] = nil
		s.startSync(p, inline)
	}
	if s.turnSyncs == nil {
		s.turnSyncs = syncs[:0]
	}
}

// runFlushNow runs a pending flush timer's EndTurn at once (the turn's appends are all
// done: writeStaged ran them), instead of in a loop turn of its own: the timer, set while
// the timers of this turn run, would otherwise wait for the next turn, after a wait in the
// kernel with a 1 µs timeout.
func (s *Shard) runFlushNow() {
	if s.flushTimer != nil && s.flushTimer.Stop() {
		s.endTurn()
	}
}

// syncInlineNow decides whether the n syncs a turn starts run inline: one fdatasync on the
// shard's own thread, blocking it for the device time, instead of an IORING_OP_FSYNC that
// io_uring hands to an io-wq worker thread, whose wake-up and whose completion's wake-up of
// the shard come on top of the device time, plus a loop turn for the completion and a
// duplicate of the segment descriptor (engine.Log.BeginSyncInline uses the log's own). It
// does so only when that sync is all the loop has to do: the only one of its turn, none
// other in flight on the shard, and the reactor quiet (no completion, message or timer
// waiting; ring.Reactor.Quiet submits what is queued first). The price: a request that
// arrives during the fdatasync waits for it (at most one device sync) instead of being
// served meanwhile. So when work did arrive during an inline sync (another connection's
// request, a message; not the shard's own timers falling due), the next
// syncInlineBackoffSyncs syncs go to the ring: a shard that
// also serves others blocks for at most one sync in that many, a lone producer keeps the
// inline path. Config.SyncInlineOff turns it off; the test hooks of asynchronous syncs and
// a test FileIO keep their own sync paths.
func (s *Shard) syncInlineNow(n int) bool {
	cfg := &s.b.cfg
	if n != 1 || cfg.SyncInlineOff || s.syncInline || cfg.hooks != nil && cfg.hooks.fdatasyncAsync != nil || s.b.wrapped != nil {
		return false
	}
	if s.syncInlineBackoff > 0 {
		s.syncInlineBackoff--
		return false
	}
	return s.core.Syncing() == 1 && s.r.Quiet()
}

// syncInlineBackoffSyncs is how many syncs go to the ring after an inline one during which
// work arrived. Back-of-the-envelope: a neighbour connection on the shard then meets a
// blocked loop in at most 1 of 65 syncs, so well under 1 % of its requests wait for a
// device sync, while a lone producer that gets a stray message during one sync loses the
// inline path for 64 records (≈ 15 ms at 200 µs each).
const syncInlineBackoffSyncs = 64

// ArmTimer arms the shard's one long-poll timer on the reactor's clock.
func (d *coreDriver) ArmTimer(at time.Time) {
	s := (*Shard)(d)
	wait := at.Sub(s.r.Now())
	if s.waitTimer == nil {
		s.waitTimer = s.r.AfterFunc(wait, s.tick)
		return
	}
	s.waitTimer.Reset(wait)
}

// Flush applies the flush.messages / flush.ms policy with a blocking Sync when it is due.
func (d *coreDriver) Flush(p *core.Partition) {
	s := (*Shard)(d)
	if err := p.Log.(*engine.Log).Flush(); err != nil {
		s.b.log.Error("partition flush failed; it accepts no more writes", "topic", p.Topic, "partition", p.Index, "err", err)
	}
}

// StartSync starts the pipelined group commit of p: one fdatasync per unsynced segment
// (engine.Log.BeginSync), submitted on the ring without waiting. The syncs of all
// partitions dirtied in one loop turn go out in the same submission, so the file system can
// fold them into one journal commit. The last completion reports SyncDone.
//
// During EndTurn the syncs are queued and started together when it returns (endTurn).
func (d *coreDriver) StartSync(p *core.Partition) {
	s := (*Shard)(d)
	if s.inEndTurn {
		s.turnSyncs = append(s.turnSyncs, p)
		return
	}
	s.startSync(p, s.syncInlineNow(1))
}

// startSync begins p's sync; inline runs its fdatasyncs on the loop thread before it
// returns (syncInlineNow).
func (s *Shard) startSync(p *core.Partition, inline bool) {
	l := p.Log.(*engine.Log) // the log this sync covers, even if p is reopened meanwhile
	begin := l.BeginSync
	if inline {
		begin = l.BeginSyncInline
	}
	t, ok, err := begin()
	if err != nil { // no fdatasync issued: fail the waiting produces, not the partition
		s.b.log.Warn("partition sync could not start", "topic", p.Topic, "partition", p.Index, "err", err)
		s.core.SyncNotStarted(p, fmt.Errorf("sync %s: %w", p, err))
		return
	}
	if !ok { // already durable (a blocking Sync covered it)
		s.core.SyncDone(p, nil)
		return
	}
	if inline {
		s.syncInlineOn(p, l, t)
		return
	}
	op := s.getSyncOp()
	op.p, op.l, op.t, op.remaining, op.firstErr, op.started = p, l, t, len(t.Fds), nil, monotonic()
	for _, fd := range t.Fds {
		s.fdatasyncAsyncOp(fd, op)
	}
}

// syncInlineOn fdatasyncs t's descriptors on the loop thread, one after the other (the
// first failure ends it), and ends the sync. Plain system calls: through the ring's
// blocking FileIO (--file-io ring) they would go to an io-wq worker again.
func (s *Shard) syncInlineOn(p *core.Partition, l *engine.Log, t engine.SyncTicket) {
	s.syncInline = true
	started := monotonic()
	var err error
	fdatasync := unix.Fdatasync
	if h := s.b.cfg.hooks; h != nil && h.fdatasyncInline != nil {
		fdatasync = func(fd int) error { return h.fdatasyncInline(s, fd) }
	}
	for _, fd := range t.Fds {
		if err = fdatasync(fd); err != nil {
			err = fmt.Errorf("fdatasync: %w", err)
			break
		}
	}
	s.counters.fsync.Observe(monotonic() - started)
	s.counters.fsyncInline++
	if s.r.Waiting() { // work arrived while the loop was blocked: others are being served
		s.syncInlineBackoff = syncInlineBackoffSyncs
	}
	s.syncInline = false
	s.endSync(p, l, t, err)
}

// syncOp is one StartSync in flight: its fdatasyncs' completions count down to endSync.
// Shard-owned and reused (getSyncOp), with its callbacks bound once, so a sync allocates
// nothing.
type syncOp struct {
	s         *Shard
	p         *core.Partition
	l         *engine.Log
	t         engine.SyncTicket
	remaining int
	firstErr  error
	started   time.Duration
	doneFn    func(error)                   // op.done
	ringFn    func(res int32, flags uint32) // op.ringDone
}

// getSyncOp takes a sync op from the shard's free list (loop thread).
func (s *Shard) getSyncOp() *syncOp {
	if n := len(s.freeSyncOps); n > 0 {
		op := s.freeSyncOps[n-1]
		s.freeSyncOps = s.freeSyncOps[:n-1]
		return op
	}
	op := &syncOp{s: s}
	op.doneFn, op.ringFn = op.done, op.ringDone
	return op
}

// freeSyncOpsMax bounds the shard's free list: at most one sync is in flight per partition,
// so this many cover the busiest loop turns; beyond it ops are left to the GC.
const freeSyncOpsMax = 1024

func (op *syncOp) ringDone(res int32, _ uint32) {
	if res < 0 {
		op.done(fmt.Errorf("fdatasync: %w", unix.Errno(-res)))
		return
	}
	op.done(nil)
}

// done counts one fdatasync's end; the last one ends the sync and frees op.
func (op *syncOp) done(err error) {
	if err != nil && op.firstErr == nil {
		op.firstErr = err
	}
	if op.remaining--; op.remaining > 0 {
		return
	}
	s := op.s
	s.counters.fsync.Observe(monotonic() - op.started)
	p, l, t, firstErr := op.p, op.l, op.t, op.firstErr
	*op = syncOp{s: s, doneFn: op.doneFn, ringFn: op.ringFn}
	if len(s.freeSyncOps) < freeSyncOpsMax {
		s.freeSyncOps = append(s.freeSyncOps, op)
	}
	s.endSync(p, l, t, firstErr)
}

// fdatasyncAsyncOp is fdatasyncAsync reporting to a sync op, without a closure per call.
func (s *Shard) fdatasyncAsyncOp(fd int, op *syncOp) {
	if s.b.cfg.hooks != nil && s.b.cfg.hooks.fdatasyncAsync != nil || s.b.wrapped != nil {
		s.fdatasyncAsync(fd, op.doneFn)
		return
	}
	if err := s.r.Submit(func(sqe *ring.SQE) { sqe.PrepFsync(fd, true) }, op.ringFn); err != nil {
		// No room on the ring right now: sync this file the blocking way instead of
		// failing the log for a transient submission limit.
		op.done(s.r.Fdatasync(fd))
	}
}

// fdatasyncAsync submits one fdatasync on the ring; done runs on the loop when it ends.
func (s *Shard) fdatasyncAsync(fd int, done func(error)) {
	if h := s.b.cfg.hooks; h != nil && h.fdatasyncAsync != nil {
		h.fdatasyncAsync(s, fd, done)
		return
	}
	if s.b.wrapped != nil { // a test's FileIO (Config.WrapFileIO): blocking, so it sees every sync
		done(s.b.fileIO(s.index).Fdatasync(fd))
		return
	}
	err := s.r.Submit(func(sqe *ring.SQE) { sqe.PrepFsync(fd, true) }, func(res int32, _ uint32) {
		if res < 0 {
			done(fmt.Errorf("fdatasync: %w", unix.Errno(-res)))
			return
		}
		done(nil)
	})
	if err != nil {
		// No room on the ring right now: sync this file the blocking way instead of
		// failing the log for a transient submission limit.
		done(s.r.Fdatasync(fd))
	}
}

// endSync completes the sync of l that StartSync began for p. A failure fails l for good
// and, through the core, every produce waiting on p (see core's package doc).
func (s *Shard) endSync(p *core.Partition, l *engine.Log, t engine.SyncTicket, syncErr error) {
	err := l.EndSync(t, syncErr)
	if err != nil {
		err = fmt.Errorf("sync %s: %w", p, err)
		s.b.log.Error("partition sync failed; it accepts no more writes", "topic", p.Topic, "partition", p.Index, "err", err)
	}
	s.core.SyncDone(p, err)
}

// highWatermark is the last offset a consumer may see, plus one (core.Replicator).
func (s *Shard) highWatermark(p *partition) int64 { return s.core.HighWatermark(&p.c) }

func (s *Shard) openPartition(tp TopicPartition, lc engine.LogConfig, minInsync int) error {
	return onShard(s, func() error {
		if s.parts[tp] != nil {
			return nil
		}
		l, report, err := s.b.openLog(s, tp, lc)
		if err != nil {
			return fmt.Errorf("open %s/%d: %w", tp.Topic, tp.Partition, err)
		}
		if report.DroppedBytes > 0 || len(report.RebuiltIndexes) > 0 || len(report.DeletedSegments) > 0 {
			s.b.log.Warn("recovery repaired partition", "topic", tp.Topic, "partition", tp.Partition,
				"dropped_batches", report.DroppedBatches, "dropped_bytes", report.DroppedBytes,
				"rebuilt_indexes", len(report.RebuiltIndexes), "deleted_segments", len(report.DeletedSegments),
				"reason", report.Corruption)
		}
		p := &partition{tp: tp, log: l, leaderEpoch: -1}
		p.c = core.Partition{Topic: tp.Topic, Index: tp.Partition, Log: l, FlushAlways: lc.FlushAlways, FlushTimed: lc.FlushMs > 0, MinInsync: minInsync}
		s.parts[tp] = p
		s.enableAsyncWrites(p)
		s.enableAsyncRetention(p)
		s.enableStagedWrites(p)
		s.b.partitionOpened(s.index, tp)
		return nil
	})
}

func (s *Shard) dropPartition(tp TopicPartition, dir string) error {
	return onShard(s, func() error {
		p := s.parts[tp]
		delete(s.parts, tp)
		if p != nil {
			s.core.Remove(&p.c, fmt.Errorf("%w: %s/%d deleted", ErrUnknownTopicOrPartition, tp.Topic, tp.Partition))
			s.b.partitionClosed(s.index, tp)
			if err := p.log.Close(); err != nil {
				s.b.log.Warn("close deleted partition", "topic", tp.Topic, "partition", tp.Partition, "err", err)
			}
		}
		if err := os.RemoveAll(dir); err != nil {
			return fmt.Errorf("delete %s: %w", dir, err)
		}
		return nil
	})
}

func (s *Shard) reconfigurePartition(tp TopicPartition, lc engine.LogConfig, minInsync int) error {
	return onShard(s, func() error {
		p := s.parts[tp]
		if p == nil {
			return fmt.Errorf("%w: %s/%d", ErrUnknownTopicOrPartition, tp.Topic, tp.Partition)
		}
		if err := p.log.Sync(); err != nil {
			s.core.Fail(&p.c, err)
			return err
		}
		// Answers what the Sync covered, unless an asynchronous sync is still in flight:
		// its outcome decides (a failed fdatasync is never followed by an acknowledgement).
		s.core.Synced(&p.c)
		if err := p.log.Close(); err != nil {
			return err
		}
		l, _, err := s.b.openLog(s, tp, lc)
		if err != nil {
			delete(s.parts, tp)
			s.core.Remove(&p.c, err)
			s.b.partitionClosed(s.index, tp)
			return fmt.Errorf("reopen %s/%d: %w", tp.Topic, tp.Partition, err)
		}
		p.log = l
		s.enableAsyncWrites(p)
		s.enableAsyncRetention(p)
		s.enableStagedWrites(p)
		l.SetLeaderEpoch(p.leaderEpoch)
		p.c.Log, p.c.FlushAlways, p.c.FlushTimed, p.c.MinInsync = l, lc.FlushAlways, lc.FlushMs > 0, minInsync
		return nil
	})
}

func (s *Shard) describe(tp TopicPartition, out *PartitionState) error {
	return onShard(s, func() error {
		p := s.parts[tp]
		if p == nil {
			return fmt.Errorf("%w: %s/%d", ErrUnknownTopicOrPartition, tp.Topic, tp.Partition)
		}
		*out = s.partitionState(p)
		return nil
	})
}

// partitionState reads p's state. Loop goroutine.
func (s *Shard) partitionState(p *partition) PartitionState {
	out := PartitionState{
		Topic: p.tp.Topic, Partition: p.tp.Partition, Shard: s.index,
		LogStartOffset: p.log.StartOffset(), LogEndOffset: p.log.EndOffset(),
		HighWatermark: s.highWatermark(p), SizeBytes: p.log.Size(),
		Segments: p.log.SegmentCount(), Storage: string(p.log.Mode()),
		InSyncReplicas: s.core.Replicator().InSyncReplicas(&p.c),
	}
	if err := p.log.Err(); err != nil {
		out.Err = err.Error()
	} else if err := p.c.Err(); err != nil { // a sync of the log before a reopen failed
		out.Err = err.Error()
	}
	p.describeCorruption(&out)
	return out
}

// closeSyncWaitMax bounds how long a stopping shard waits for its syncs in flight.
const closeSyncWaitMax = 10 * time.Second

// closePartitions syncs and closes every log. Loop goroutine, after Run returned. Syncs in
// flight end first, so that their outcome, not the blocking Sync here, decides the produces
// they cover.
func (s *Shard) closePartitions() {
	deadline := time.Now().Add(closeSyncWaitMax)
	for s.core.Syncing() > 0 && time.Now().Before(deadline) {
		if err := s.r.RunOnce(false); err != nil {
			break
		}
	}
	for tp, p := range s.parts {
		if err := p.log.Sync(); err != nil {
			s.core.Fail(&p.c, err)
		} else {
			s.core.Synced(&p.c)
		}
		s.core.Remove(&p.c, ErrShuttingDown) // what a sync still in flight covered
		s.b.partitionClosed(s.index, tp)
		if err := p.log.Close(); err != nil {
			s.b.log.Warn("close partition", "topic", tp.Topic, "partition", tp.Partition, "err", err)
		}
	}
	s.parts = nil
}

// stop drains the mailbox (pending posts run), stops the loop and waits for it.
func (s *Shard) stop() error {
	r := s.r
	// Post the stop so that every message queued before it still runs.
	for {
		err := r.Post(r.Stop)
		if err == nil || errors.Is(err, ring.ErrClosed) {
			break
		}
		time.Sleep(time.Millisecond) // shutdown only: mailbox full, let it drain
	}
	err, _ := <-s.exited
	return err
}
