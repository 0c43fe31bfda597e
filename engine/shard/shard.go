package shard

import (
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ringlog/ringlog/engine"
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
	parts      map[TopicPartition]*partition
	dirty      []*partition // appended to since the last flushDirty
	flushArmed bool
	scrub      scrubState // background segment verification (scrub.go)
}

// partition is a partition's shard-owned state. Loop goroutine only.
type partition struct {
	tp          TopicPartition
	log         *engine.Log
	flushAlways bool
	minInsync   int
	dirty       bool
	pending     []pendingAck   // produces waiting for the next fdatasync
	inflight    []pendingAck   // produces covered by the fdatasync in flight
	syncing     bool           // an asynchronous sync (BeginSync) is in flight
	syncLog     *engine.Log    // the log that sync began on (the log may be reopened)
	waiters     []*fetchWaiter // long-polls waiting for data past their offset
}

type pendingAck struct {
	res  ProduceResult
	done func(ProduceResult)
}

func startShard(b *Broker, index int) (*Shard, error) {
	s := &Shard{b: b, index: index, cpu: b.shardCPU(index), parts: map[TopicPartition]*partition{}, exited: make(chan error, 1)}
	ready := make(chan struct{})
	err := ring.StartPinned(s.cpu, b.cfg.Ring, func(r *ring.Reactor) {
		s.r = r
		s.backend = r.Backend()
		close(ready) // publishes s.r and s.backend to the starting goroutine
		s.armTimers()
		err := r.Run()
		s.closePartitions()
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
	var flushTick, retentionTick func()
	flushTick = func() {
		for _, p := range s.parts {
			if p.log.SyncedOffset() < p.log.EndOffset() {
				s.markDirty(p)
			}
		}
		s.r.AfterFunc(cfg.FlushCheckInterval, flushTick)
	}
	retentionTick = func() {
		now := time.Now()
		for _, p := range s.parts {
			if _, err := p.log.EnforceRetention(now); err != nil {
				s.b.log.Warn("retention failed", "topic", p.tp.Topic, "partition", p.tp.Partition, "err", err)
			}
		}
		s.r.AfterFunc(cfg.RetentionCheckInterval, retentionTick)
	}
	s.r.AfterFunc(cfg.FlushCheckInterval, flushTick)
	s.r.AfterFunc(cfg.RetentionCheckInterval, retentionTick)
	s.armScrub()
}

// markDirty queues p for the flush at the end of this loop turn.
func (s *Shard) markDirty(p *partition) {
	if !p.dirty {
		p.dirty = true
		s.dirty = append(s.dirty, p)
	}
	if !s.flushArmed {
		s.flushArmed = true
		// A zero-delay timer runs after this turn's mailbox drain: every produce queued in
		// the same turn shares the flush (group commit).
		s.r.AfterFunc(0, s.flushDirty)
	}
}

func (s *Shard) flushDirty() {
	s.flushArmed = false
	dirty := s.dirty
	s.dirty = s.dirty[:0]
	for _, p := range dirty {
		p.dirty = false
		if len(p.pending) > 0 {
			s.startSync(p) // acks=all or flush.always: durable before acknowledged
			continue
		}
		if p.syncing {
			continue // the flush policy is met by the sync already in flight
		}
		if err := p.log.Flush(); err != nil { // flush.messages / flush.ms policy
			s.b.log.Error("partition flush failed; it accepts no more writes", "topic", p.tp.Topic, "partition", p.tp.Partition, "err", err)
		}
	}
}

// startSync starts the pipelined group commit of p: one fdatasync per unsynced segment,
// submitted on the ring without waiting, covering every produce in p.pending. Produces
// arriving while it runs queue in p.pending for the next sync, which starts the moment this
// one completes. The syncs of all partitions dirtied in one loop turn go out in the same
// submission, so the file system can fold them into one journal commit.
func (s *Shard) startSync(p *partition) {
	if p.syncing {
		return // endSync starts the next one
	}
	t, ok, err := p.log.BeginSync()
	if err != nil {
		p.finishAcks(p.pending, err)
		p.pending = p.pending[:0]
		return
	}
	if !ok { // already durable (a blocking Sync covered it)
		p.finishAcks(p.pending, nil)
		p.pending = p.pending[:0]
		return
	}
	p.syncing, p.syncLog = true, p.log
	p.inflight, p.pending = p.pending, p.inflight[:0]
	remaining := len(t.Fds)
	var firstErr error
	complete := func(err error) {
		if err != nil && firstErr == nil {
			firstErr = err
		}
		if remaining--; remaining == 0 {
			s.endSync(p, t, firstErr)
		}
	}
	for _, fd := range t.Fds {
		if s.b.wrapped != nil { // a test's FileIO: blocking, so the wrapper sees every sync
			complete(s.b.fileIO(s.index).Fdatasync(fd))
			continue
		}
		err := s.r.Submit(func(sqe *ring.SQE) { sqe.PrepFsync(fd, true) }, func(res int32, _ uint32) {
			if res < 0 {
				complete(fmt.Errorf("fdatasync: %w", unix.Errno(-res)))
				return
			}
			complete(nil)
		})
		if err != nil {
			// No room on the ring right now: sync this file the blocking way instead of
			// failing the log for a transient submission limit.
			complete(s.r.Fdatasync(fd))
		}
	}
}

func (s *Shard) endSync(p *partition, t engine.SyncTicket, syncErr error) {
	log := p.syncLog
	p.syncing, p.syncLog = false, nil
	err := log.EndSync(t, syncErr)
	if s.parts[p.tp] != p {
		return // dropped meanwhile; its acks were failed then
	}
	if log != p.log {
		err = nil // reopened meanwhile; the blocking Sync before the reopen covered these
	}
	if err != nil {
		err = fmt.Errorf("sync %s/%d: %w", p.tp.Topic, p.tp.Partition, err)
		s.b.log.Error("partition sync failed; it accepts no more writes", "topic", p.tp.Topic, "partition", p.tp.Partition, "err", err)
	}
	p.finishAcks(p.inflight, err)
	p.inflight = p.inflight[:0]
	if p.flushAlways {
		p.wakeWaiters() // the high watermark moved with the sync
	}
	if len(p.pending) > 0 {
		s.startSync(p)
	}
}

// finishAcks answers acks with err (nil: success) and clears them.
func (p *partition) finishAcks(acks []pendingAck, err error) {
	for i, a := range acks {
		if err != nil {
			a.res.Err = err
			a.res.BaseOffset = -1
		}
		a.res.LogStartOffset = p.log.StartOffset()
		a.done(a.res)
		acks[i] = pendingAck{}
	}
}

// highWatermark is the last offset a consumer may see, plus one. With flush.always it is the
// synced offset, so a consumer never reads a record that a crash could take back.
func (p *partition) highWatermark() int64 {
	if p.flushAlways {
		return p.log.SyncedOffset()
	}
	return p.log.EndOffset()
}

func (s *Shard) openPartition(tp TopicPartition, lc engine.LogConfig, minInsync int) error {
	return onShard(s, func() error {
		if s.parts[tp] != nil {
			return nil
		}
		dir := s.b.partitionDir(tp)
		l, report, err := engine.OpenLog(dir, lc, s.b.fileIO(s.index))
		if err != nil {
			return fmt.Errorf("open %s/%d: %w", tp.Topic, tp.Partition, err)
		}
		if report.DroppedBytes > 0 || len(report.RebuiltIndexes) > 0 || len(report.DeletedSegments) > 0 {
			s.b.log.Warn("recovery repaired partition", "topic", tp.Topic, "partition", tp.Partition,
				"dropped_batches", report.DroppedBatches, "dropped_bytes", report.DroppedBytes,
				"rebuilt_indexes", len(report.RebuiltIndexes), "deleted_segments", len(report.DeletedSegments),
				"reason", report.Corruption)
		}
		s.parts[tp] = &partition{tp: tp, log: l, flushAlways: lc.FlushAlways, minInsync: minInsync}
		return nil
	})
}

func (s *Shard) dropPartition(tp TopicPartition, dir string) error {
	return onShard(s, func() error {
		p := s.parts[tp]
		delete(s.parts, tp)
		if p != nil {
			p.failPending(ErrUnknownTopicOrPartition)
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
			return err
		}
		p.completePending()
		if err := p.log.Close(); err != nil {
			return err
		}
		l, _, err := engine.OpenLog(s.b.partitionDir(tp), lc, s.b.fileIO(s.index))
		if err != nil {
			delete(s.parts, tp)
			return fmt.Errorf("reopen %s/%d: %w", tp.Topic, tp.Partition, err)
		}
		p.log, p.flushAlways, p.minInsync = l, lc.FlushAlways, minInsync
		return nil
	})
}

func (s *Shard) describe(tp TopicPartition, out *PartitionState) error {
	return onShard(s, func() error {
		p := s.parts[tp]
		if p == nil {
			return fmt.Errorf("%w: %s/%d", ErrUnknownTopicOrPartition, tp.Topic, tp.Partition)
		}
		*out = PartitionState{
			Partition: tp.Partition, Shard: s.index,
			LogStartOffset: p.log.StartOffset(), LogEndOffset: p.log.EndOffset(),
			HighWatermark: p.highWatermark(), SizeBytes: p.log.Size(),
			Segments: p.log.SegmentCount(), Storage: string(p.log.Mode()),
		}
		if err := p.log.Err(); err != nil {
			out.Err = err.Error()
		}
		p.describeCorruption(out)
		return nil
	})
}

func (p *partition) failPending(err error) {
	p.finishAcks(p.pending, err)
	p.finishAcks(p.inflight, err)
	p.pending, p.inflight = nil, nil
	for _, w := range p.waiters {
		w.fire()
	}
	p.waiters = nil
}

// completePending acknowledges every parked produce after a blocking Sync covered them.
func (p *partition) completePending() {
	p.finishAcks(p.pending, nil)
	p.finishAcks(p.inflight, nil)
	p.pending, p.inflight = nil, nil
}

// closePartitions syncs and closes every log. Loop goroutine, after Run returned.
func (s *Shard) closePartitions() {
	for tp, p := range s.parts {
		err := p.log.Sync()
		if err == nil {
			p.completePending()
		} else {
			p.failPending(err)
		}
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
