package shard

import (
	"github.com/ringlog/ringlog/engine"
	"github.com/ringlog/ringlog/ring"
)

// Retention off the loop (engine/retention.go). A retention pass that deletes segments
// writes the log start offset checkpoint first: a write, an fsync, a rename over the old
// checkpoint and a directory fsync. On the loop those blocked every partition of the shard
// for the device's time (0.4–0.9 s per profiled run of BenchmarkDirectAppend churn-recycle,
// docs/benchmarks.md, session 11). The shard's reactor runs them as ring ops, each started by
// the previous one's completion; when the last completes, a zero-delay timer runs the log's
// CompleteRetention at the loop's top level, which retires the segments.

// The shard's reactor writes, flushes and renames the checkpoints.
var _ engine.AsyncFileOps = (*ring.Reactor)(nil)

// enableAsyncRetention makes p's log (either storage mode) write its retention checkpoints
// through the shard's ring. A test FileIO (Config.WrapFileIO) keeps the blocking path,
// where it sees every sync.
func (s *Shard) enableAsyncRetention(p *partition) {
	if s.b.wrapped != nil {
		return
	}
	l := p.log // the log of this call: a reconfigured partition gets a new one
	var complete *ring.Timer
	completeFn := func() {
		if _, err := l.CompleteRetention(); err != nil {
			s.b.log.Warn("retention failed", "topic", p.tp.Topic, "partition", p.tp.Partition, "err", err)
		}
	}
	l.SetAsyncRetention(s.r, func() {
		if complete == nil {
			complete = s.r.AfterFunc(0, completeFn)
			return
		}
		complete.Reset(0)
	})
}
