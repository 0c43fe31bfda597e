package shard

import (
	"time"

	"github.com/ringlog/ringlog/engine"
)

// Background compaction: each shard cleans the logs of its partitions whose cleanup.policy
// includes compact (engine.Log.Clean), on its own loop, so that only the owning shard ever
// touches a partition. One pass runs at a time per shard with one offset map (Config.
// CleanerDedupeBufferBytes, allocated when the first compacted partition needs it), in
// 100 ms ticks of at most CleanerIOBytesPerSecond/10 bytes read and written, so a tick holds
// the loop for a few milliseconds at most. Between passes the shard looks for work every
// CleanerInterval.
//
// Back of the envelope: at the default 32 MiB/s a tick moves 3.2 MiB (about 1 ms from the
// page cache); a 1 GiB compacted partition is rewritten in about 30 s of ticks, and the
// default 32 MiB map holds about 1.2 million keys per pass (24 bytes a key, 90 % full).
const (
	cleanerIOBytesPerSecondDefault  = engine.CleanerIOBytesPerSecondDefault
	cleanerDedupeBufferBytesDefault = engine.CleanerDedupeBufferBytesDefault
	cleanerIntervalDefault          = 15 * time.Second
	cleanerTickInterval             = 100 * time.Millisecond
)

// cleanerState is a shard's compaction scheduler. Loop goroutine only.
type cleanerState struct {
	m     *engine.OffsetMap
	order []TopicPartition // compacted partitions of the current round, sorted
	next  int
}

// cleanerBudgetPerTick is the byte budget of one tick, or 0 when the cleaner is off.
func (s *Shard) cleanerBudgetPerTick() int64 {
	cfg := s.b.cfg
	if cfg.CleanerDisabled {
		return 0
	}
	rate := cfg.CleanerIOBytesPerSecond
	if rate <= 0 {
		rate = cleanerIOBytesPerSecondDefault
	}
	return max(1, rate*int64(cleanerTickInterval)/int64(time.Second))
}

func (s *Shard) cleanerInterval() time.Duration {
	if d := s.b.cfg.CleanerInterval; d > 0 {
		return d
	}
	return cleanerIntervalDefault
}

// armCleaner starts the cleaner timer of s (nothing when the cleaner is off).
func (s *Shard) armCleaner() {
	budget := s.cleanerBudgetPerTick()
	if budget == 0 {
		return
	}
	var tick func()
	tick = func() {
		delay := s.cleanerInterval()
		if s.cleanerTick(budget) {
			delay = min(delay, cleanerTickInterval)
		}
		s.r.AfterFunc(delay, tick)
	}
	s.r.AfterFunc(s.cleanerInterval(), tick)
}

// cleanerTick spends budget bytes cleaning compacted partitions in turn; it reports whether
// a pass is still under way (the next tick comes soon) or every partition was idle.
func (s *Shard) cleanerTick(budget int64) bool {
	st := &s.cleaner
	if st.next >= len(st.order) {
		st.order = s.sortedPartitions(st.order[:0], func(p *partition) bool { return p.log.Compacted() })
		st.next = 0
	}
	if len(st.order) == 0 {
		return false
	}
	if st.m == nil {
		size := s.b.cfg.CleanerDedupeBufferBytes
		if size <= 0 {
			size = cleanerDedupeBufferBytesDefault
		}
		st.m = engine.NewOffsetMap(min(size, engine.CleanerDedupeBufferBytesMax))
	}
	busy := false
	now := time.Now()
	for budget > 0 && st.next < len(st.order) {
		p := s.parts[st.order[st.next]]
		if p == nil || !p.log.Compacted() { // dropped or reconfigured since the round began
			st.next++
			continue
		}
		progress, err := p.log.Clean(st.m, budget, now)
		budget -= progress.BytesRead + progress.BytesWritten
		if err != nil {
			s.b.log.Warn("compaction pass failed", "topic", p.tp.Topic, "partition", p.tp.Partition, "err", err)
		}
		if !progress.Idle {
			busy = true
		}
		if progress.PassComplete || err != nil {
			if !progress.Idle && err == nil {
				stats := p.log.CleanerStats()
				s.b.log.Info("log cleaned", "topic", p.tp.Topic, "partition", p.tp.Partition,
					"cleaned_to", stats.CleanedTo, "segments_cleaned", stats.SegmentsCleaned, "records_removed", stats.RecordsRemoved)
			}
			st.next++
		}
	}
	return busy || st.next < len(st.order)
}
