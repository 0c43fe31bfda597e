package shard

import (
	"fmt"

	"github.com/ringlog/ringlog/engine"
	"github.com/ringlog/ringlog/ring"
)

// Asynchronous direct-mode appends (engine/asyncwrite.go). A direct-mode log writes on the
// shard's ring without waiting: AppendBatches stages the records and returns, the reactor
// completes the writes, and the log's written hook tells the shard how far its end offset
// (the end of the records on the device) has moved. A produce is handed to the core
// (core.Appended: answered, or queued for a sync) only once its records are written, in
// offset order; until then it waits here, in its partition's pendingAppends.

// The shard's reactor is the logs' asynchronous writer; it can register fixed buffers too.
var _ engine.FixedBufferWriter = (*ring.Reactor)(nil)

// pendingAppend is a produce whose records are staged, not yet written.
type pendingAppend struct {
	acks int16
	end  int64 // the log's staged end offset after its records
	res  ProduceResult
	done func(ProduceResult)
}

// pendingAppends is a partition's FIFO of pendingAppend, in offset order.
type pendingAppends struct {
	q    []pendingAppend
	head int
}

func (w *pendingAppends) waiting() bool { return w.head < len(w.q) }

func (w *pendingAppends) pop() pendingAppend {
	a := w.q[w.head]
	w.q[w.head] = pendingAppend{}
	if w.head++; w.head == len(w.q) {
		w.q, w.head = w.q[:0], 0
	}
	return a
}

// enableAsyncWrites lets p's log (direct mode only) write through the shard's ring. A test
// FileIO (Config.WrapFileIO) keeps the synchronous path, where it sees every write.
func (s *Shard) enableAsyncWrites(p *partition) {
	if s.b.wrapped != nil || s.b.cfg.hooks != nil && s.b.cfg.hooks.syncDirectWrites {
		return
	}
	l := p.log
	// Without fixed buffers by default: registering each new 1 MiB chunk cost more than the
	// per-write page pinning it saves (BenchmarkDirectAppend, mode=async-registered, and
	// docs/benchmarks.md); a chunk handed to a tailing consumer is never reused, so in a real
	// workload every chunk would be registered anew.
	var aw engine.AsyncWriter = struct{ engine.AsyncWriter }{s.r} // hides the fixed-buffer methods
	if h := s.b.cfg.hooks; h != nil && h.registeredDirectWrites {
		aw = s.r
	}
	l.SetAsyncWriter(aw, func() { s.writesDone(p, l) })
}

// appended hands a completed AppendBatches of p to the core, or queues it until its
// records are written.
func (s *Shard) appended(p *partition, acks int16, r ProduceResult, done func(ProduceResult)) {
	end := p.log.StagedEndOffset()
	if p.writes.waiting() || end > p.log.EndOffset() {
		p.writes.q = append(p.writes.q, pendingAppend{acks: acks, end: end, res: r, done: done})
		return
	}
	s.core.Appended(&p.c, acks, end, r, done)
}

// writesDone is l's written hook: the produces whose records are now written go to the
// core, in order; when a write failed (l failed for good), the rest are answered with the
// failure and the partition fails. Loop goroutine, possibly from inside a method of l that
// waited for its writes.
func (s *Shard) writesDone(p *partition, l *engine.Log) {
	w := &p.writes
	if s.parts[p.tp] != p { // deleted while its writes were in flight
		err := fmt.Errorf("%w: %s/%d deleted", ErrUnknownTopicOrPartition, p.tp.Topic, p.tp.Partition)
		for w.waiting() {
			a := w.pop()
			s.produceFailed(a.res.Received, err, -1, a.done)
		}
		return
	}
	written := l.EndOffset()
	for w.waiting() && w.q[w.head].end <= written {
		a := w.pop()
		s.core.Appended(&p.c, a.acks, a.end, a.res, a.done)
	}
	if err := l.TakeStagedError(); err != nil && l.Err() == nil {
		// A staged write failed and was rolled back (stagedwrite.go): its appends fail,
		// the partition goes on.
		for w.waiting() {
			a := w.pop()
			s.produceFailed(a.res.Received, fmt.Errorf("append to %s/%d: %w", p.tp.Topic, p.tp.Partition, err), l.StartOffset(), a.done)
		}
		return
	}
	if err := l.Err(); err != nil && w.waiting() {
		err = fmt.Errorf("append to %s/%d: %w", p.tp.Topic, p.tp.Partition, err)
		s.b.log.Error("partition write failed; it accepts no more writes", "topic", p.tp.Topic, "partition", p.tp.Partition, "err", err)
		s.core.Fail(&p.c, err)
		for w.waiting() {
			a := w.pop()
			s.produceFailed(a.res.Received, err, l.StartOffset(), a.done)
		}
	}
}
