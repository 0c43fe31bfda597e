package shard

import (
	"fmt"
	"sort"
	"time"
)

// Background scrubbing: each shard verifies the sealed segments of its partitions (see
// engine.Log.Scrub) on a timer, a bounded number of bytes per tick so that the reads never
// hold the loop for long.
//
// Back of the envelope: 8 MiB/s per shard with a 100 ms tick reads at most 800 KiB per
// tick (well under a millisecond from the page cache, a few from an NVMe drive), and a shard
// holding 1 TiB is verified about every 36 hours.
const (
	scrubBytesPerSecondDefault = 8 << 20
	scrubTickInterval          = 100 * time.Millisecond
)

// scrubState is a shard's round-robin position over its partitions. Loop goroutine only.
type scrubState struct {
	order []TopicPartition // partitions of the current round, sorted
	next  int              // index into order of the partition being scrubbed
	// idleTicks counts ticks to skip after a rebuild found nothing to scrub (no partition
	// has a sealed segment): the shard's partitions are looked at again once a second.
	idleTicks int
}

// scrubIdleTicks is how many ticks a shard with nothing to scrub waits before looking again.
const scrubIdleTicks = 10

// scrubBudgetPerTick is the byte budget of one tick, or 0 when scrubbing is off.
func (s *Shard) scrubBudgetPerTick() int64 {
	rate := s.b.cfg.ScrubBytesPerSecond
	switch {
	case rate < 0:
		return 0
	case rate == 0:
		rate = scrubBytesPerSecondDefault
	}
	return max(1, rate*int64(scrubTickInterval)/int64(time.Second))
}

// armScrub starts the scrub timer of s (nothing when scrubbing is off).
func (s *Shard) armScrub() {
	budget := s.scrubBudgetPerTick()
	if budget == 0 {
		return
	}
	var tick func()
	tick = func() {
		s.scrubTick(budget)
		s.r.AfterFunc(scrubTickInterval, tick)
	}
	s.r.AfterFunc(scrubTickInterval, tick)
}

// scrubTick spends budget bytes verifying partitions in turn. Loop goroutine.
func (s *Shard) scrubTick(budget int64) {
	st := &s.scrub
	rebuilt := false
	for rounds := 0; budget > 0 && rounds <= len(s.parts); rounds++ {
		if st.next >= len(st.order) {
			// A round visits only partitions with sealed segments (the active one is not
			// scrubbed), and the round is rebuilt at most once per tick: idle partitions cost
			// the scrubber one map visit per pass, not a Scrub call each per tick.
			if rebuilt {
				return
			}
			if st.idleTicks > 0 {
				st.idleTicks--
				return
			}
			rebuilt = true
			st.order = s.sortedPartitions(st.order[:0], func(p *partition) bool { return p.log.SegmentCount() > 1 })
			st.next = 0
			if len(st.order) == 0 {
				st.idleTicks = scrubIdleTicks
				return
			}
		}
		p := s.parts[st.order[st.next]]
		if p == nil { // dropped since the round began
			st.next++
			continue
		}
		progress, err := p.log.Scrub(budget)
		budget -= progress.BytesVerified
		if err != nil || progress.PassComplete {
			st.next++
		}
		if progress.Found > 0 {
			s.b.scrubFound.Add(int64(progress.Found))
		}
	}
}

// sortedPartitions appends to dst the partitions of s that keep selects, by topic and
// partition: the round-robin order of the background scrubber and cleaner. Loop goroutine.
func (s *Shard) sortedPartitions(dst []TopicPartition, keep func(*partition) bool) []TopicPartition {
	for tp, p := range s.parts {
		if keep(p) {
			dst = append(dst, tp)
		}
	}
	sort.Slice(dst, func(i, j int) bool {
		a, b := dst[i], dst[j]
		return a.Topic < b.Topic || a.Topic == b.Topic && a.Partition < b.Partition
	})
	return dst
}

// describeCorruption fills the corruption fields of out from p's log. Loop goroutine.
func (p *partition) describeCorruption(out *PartitionState) {
	cs := p.log.Corruptions()
	out.CorruptBatches = len(cs)
	if len(cs) > 0 {
		out.Corruption = fmt.Sprintf("%d corrupt batch(es); first: %s; repair with the broker stopped: ringlog topic repair %s --data DATA_DIR --partition %d --truncate-to %d (drops it and everything after) or --skip-to %d (drops it and everything before)",
			len(cs), cs[0], p.tp.Topic, p.tp.Partition, cs[0].Offset, cs[0].NextOffset)
	}
}

// CorruptBatchesFound is the number of corrupt batches the background scrubbers of this
// broker have found since it started.
func (b *Broker) CorruptBatchesFound() int64 { return b.scrubFound.Load() }
