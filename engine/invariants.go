package engine

import "fmt"

// checkInvariants verifies the log's in-memory state: contiguous segments, consistent sizes
// and offsets, sorted indexes, sync bookkeeping. It costs O(segments + index entries) and runs
// after every mutation when built with -tags invariants (tests call it directly too).
func (l *Log) checkInvariants() error {
	if len(l.segments) == 0 {
		return fmt.Errorf("invariant: no segments")
	}
	first := l.segments[0]
	if l.startOffset < first.baseOffset || l.startOffset > l.EndOffset() {
		return fmt.Errorf("invariant: start offset %d outside [%d, %d]", l.startOffset, first.baseOffset, l.EndOffset())
	}
	for i, s := range l.segments {
		// A sealed segment whose file recovery found empty keeps its offsets, fenced.
		_, fenced := l.fenceFor(s)
		if err := s.checkInvariants(fenced && i != len(l.segments)-1); err != nil {
			return err
		}
		if i > 0 && l.segments[i-1].nextOffset != s.baseOffset {
			return fmt.Errorf("invariant: segment %d ends at %d, next starts at %d", l.segments[i-1].baseOffset, l.segments[i-1].nextOffset, s.baseOffset)
		}
		if s.namesPending && l.EndOffset() > s.baseOffset {
			return fmt.Errorf("invariant: written end %d inside segment %d, whose names are in flight", l.EndOffset(), s.baseOffset)
		}
		if s.direct != nil && i != len(l.segments)-1 && !s.sealing {
			return fmt.Errorf("invariant: sealed segment %d still has a direct writer", s.baseOffset)
		}
	}
	for i, u := range l.unsyncedSegments {
		if u == l.active() || (i > 0 && l.unsyncedSegments[i-1].baseOffset >= u.baseOffset) {
			return fmt.Errorf("invariant: unsynced segment list out of order at %d", u.baseOffset)
		}
	}
	if p := &l.retention; p.phase != retentionIdle && !l.closed {
		// A pass's checkpoint names the base of a live segment above the start offset: the
		// front of the log does not change until CompleteRetention (retention.go).
		if p.target <= l.startOffset || l.segments[l.segmentFor(p.target)].baseOffset != p.target {
			return fmt.Errorf("invariant: retention checkpoint %d in flight, start offset %d, no segment starts there", p.target, l.startOffset)
		}
	}
	if a := l.active(); a.direct != nil && a.direct.active.end() != a.size {
		return fmt.Errorf("invariant: direct staging ends at %d, segment size %d", a.direct.active.end(), a.size)
	}
	return l.producers.checkInvariants(l.StagedEndOffset())
}

func (s *segment) checkInvariants(fenced bool) error {
	if s.nextOffset < s.baseOffset || s.size < 0 || (s.size == 0 && !fenced) != (s.nextOffset == s.baseOffset) {
		return fmt.Errorf("invariant: segment %d: next offset %d, size %d", s.baseOffset, s.nextOffset, s.size)
	}
	if s.syncedSize > s.size || s.syncedNextOffset > s.nextOffset {
		return fmt.Errorf("invariant: segment %d: synced %d/%d beyond %d/%d", s.baseOffset, s.syncedSize, s.syncedNextOffset, s.size, s.nextOffset)
	}
	if n := len(s.batches); n > 0 && (s.batches[0]>>32 != 0 || int64(s.batches[n-1]>>32) >= s.size) {
		return fmt.Errorf("invariant: segment %d: batch map [%d, %d] is not a map of [0, %d)", s.baseOffset, s.batches[0]>>32, s.batches[n-1]>>32, s.size)
	}
	if s.indexReleased {
		if len(s.index.entries) != 0 || len(s.timeIndex.entries) != 0 {
			return fmt.Errorf("invariant: segment %d: released index still in memory", s.baseOffset)
		}
		return nil
	}
	if s.index.onDisk > len(s.index.entries) || s.timeIndex.onDisk > len(s.timeIndex.entries) {
		return fmt.Errorf("invariant: segment %d: more index entries on disk than in memory", s.baseOffset)
	}
	relEnd := s.nextOffset - s.baseOffset
	for i, e := range s.index.entries {
		if int64(e.position) >= s.size || int64(e.relativeOffset) >= relEnd ||
			(i > 0 && (e.position <= s.index.entries[i-1].position || e.relativeOffset <= s.index.entries[i-1].relativeOffset)) {
			return fmt.Errorf("invariant: segment %d: index entry %d (%d,%d) out of order or range", s.baseOffset, i, e.relativeOffset, e.position)
		}
	}
	for i, e := range s.timeIndex.entries {
		if int64(e.relativeOffset) > relEnd || e.timestamp > s.maxTimestamp ||
			(i > 0 && (e.timestamp <= s.timeIndex.entries[i-1].timestamp || e.relativeOffset < s.timeIndex.entries[i-1].relativeOffset)) {
			return fmt.Errorf("invariant: segment %d: time entry %d (%d,%d) out of order or range", s.baseOffset, i, e.timestamp, e.relativeOffset)
		}
	}
	return nil
}

// assertInvariants panics when built with -tags invariants and the state is inconsistent.
func (l *Log) assertInvariants() {
	if !invariantsEnabled {
		return
	}
	if err := l.checkInvariants(); err != nil {
		panic("engine: " + err.Error())
	}
}
