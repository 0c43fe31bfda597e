package engine

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// TruncateTo removes every batch holding an offset >= offset (a follower diverging from its
// leader). When offset falls inside a batch, that whole batch goes, so EndOffset may end up
// below offset (and the start offset with it, when it was inside that batch). Truncating to
// or below the start of the log empties it and restarts it at offset.
// The truncation is synced before returning.
func (l *Log) TruncateTo(offset int64) error {
	if err := l.writable(); err != nil {
		return err
	}
	if err := l.awaitSeals(); err != nil {
		return err
	}
	if err := l.awaitRetention(); err != nil {
		return err
	}
	if err := l.awaitSnapshot(); err != nil { // a roll's snapshot is in place before any is removed
		return err
	}
	if err := l.awaitFileJobs(); err != nil { // no unlink in flight of a name the cut creates again; its dir fsync covers them
		return err
	}
	if offset < 0 {
		return fmt.Errorf("%w: truncate to %d", ErrOffsetOutOfRange, offset)
	}
	if offset >= l.EndOffset() {
		return nil
	}
	l.cleanerTruncated(offset)
	if offset <= l.startOffset || offset <= l.segments[0].baseOffset {
		return l.truncateFullyAndStartAt(offset)
	}
	i := l.segmentFor(offset)
	if l.segments[i].baseOffset == offset {
		i-- // offset starts segment i: keep segment i-1 whole
	}
	deleted := len(l.segments) > i+1
	for len(l.segments) > i+1 {
		if err := l.deleteSegment(len(l.segments) - 1); err != nil {
			return err
		}
	}
	if deleted {
		// The unlinks must be durable before the cut below is: a deleted segment that came
		// back after a power loss could continue the cut log and resurrect truncated records.
		if err := syncDir(l.fio, l.dir); err != nil {
			return l.fail(fmt.Errorf("truncate to %d: %w", offset, err))
		}
	}
	s := l.active()
	if err := l.ensureIndex(s); err != nil {
		return fmt.Errorf("truncate to %d: %w", offset, err)
	}
	l.forgetLoaded(s)
	pos, newNext := s.size, s.nextOffset
	l.pruneCorruptions()
	if fence, fenced := l.fenceFor(s); fenced && offset >= fence.Offset {
		// Nothing from a known bad batch on is trusted, its header included: cut there.
		pos, newNext = fence.Position, fence.Offset
	} else if offset < s.nextOffset {
		p, h, err := s.findBatch(l.fio, &l.headers, offset)
		if err != nil {
			return fmt.Errorf("truncate to %d: %w", offset, err)
		}
		pos, newNext = p, h.BaseOffset
	}
	if err := l.cutSegment(s, pos, newNext); err != nil {
		return fmt.Errorf("truncate to %d: %w", offset, err)
	}
	if l.startOffset > newNext {
		// The start was inside the batch just removed: the log is now empty at its end.
		if err := writeStartOffset(l.fio, l.dir, newNext); err != nil {
			return l.fail(err)
		}
		l.startOffset = newNext
	}
	l.pruneCorruptions() // before an append can reuse a cut bad batch's position
	if err := l.reloadProducers(); err != nil {
		return err
	}
	l.assertInvariants()
	return nil
}

// cutSegment shortens s (now the active segment) to pos bytes ending at offset newNext.
func (l *Log) cutSegment(s *segment, pos, newNext int64) error {
	l.headers.invalidate()
	if err := s.log.Truncate(pos); err != nil {
		return fmt.Errorf("segment %d: cut at %d: %w", s.baseOffset, pos, err)
	}
	s.stale = false
	s.index.truncateAtPosition(pos)
	s.timeIndex.truncateAtOffset(newNext - s.baseOffset)
	if err := s.truncateIndexFiles(); err != nil {
		return err
	}
	s.size, s.nextOffset = pos, newNext
	// Recompute the max timestamp: the time index covers batches before its last entry; scan
	// the batches after it.
	s.maxTimestamp = s.timeIndex.lastTimestamp()
	scanFrom := int64(0)
	if n := len(s.timeIndex.entries); n > 0 {
		scanFrom = s.checkedFloor(l.fio, &l.headers, s.index.floorIndexByOffset(s.timeIndex.entries[n-1].relativeOffset))
	}
	for p := scanFrom; p < pos; {
		h, err := s.readHeaderAt(l.fio, &l.headers, p)
		if err != nil {
			return err
		}
		s.maxTimestamp = max(s.maxTimestamp, h.MaxTimestamp)
		p += batchSize(h)
	}
	s.bytesSinceIndex = pos
	if e, ok := s.index.last(); ok {
		s.bytesSinceIndex = pos - int64(e.position)
	}
	if err := l.activate(s); err != nil {
		return err
	}
	if s.direct != nil {
		if err := s.direct.reset(l.fio, s.logFd(), pos); err != nil {
			return err
		}
	}
	l.forgetUnsynced(s)
	if err := l.fio.Fdatasync(s.logFd()); err != nil {
		return l.fail(fmt.Errorf("segment %d: sync truncation: %w", s.baseOffset, err))
	}
	s.markSynced()
	l.cutBatchMaps(s, pos) // only now: the cut is durable
	return nil
}

// ResetTo deletes every segment and starts an empty log at offset (a follower whose leader's
// log starts beyond its own end, or a log restored at a given offset).
func (l *Log) ResetTo(offset int64) error {
	if err := l.writable(); err != nil {
		return err
	}
	if err := l.awaitSeals(); err != nil {
		return err
	}
	if err := l.awaitRetention(); err != nil {
		return err
	}
	if err := l.awaitSnapshot(); err != nil { // a roll's snapshot is in place before any is removed
		return err
	}
	if err := l.awaitFileJobs(); err != nil { // no unlink in flight of a name the cut creates again; its dir fsync covers them
		return err
	}
	if offset < 0 {
		return fmt.Errorf("%w: reset to %d", ErrOffsetOutOfRange, offset)
	}
	l.cleanerTruncated(offset)
	return l.truncateFullyAndStartAt(offset)
}

// truncateFullyAndStartAt deletes every segment and starts an empty log at offset.
func (l *Log) truncateFullyAndStartAt(offset int64) error {
	l.emptyPool() // the pool's stale batches may hold offsets from here on (recycle.go)
	for len(l.segments) > 0 {
		if err := l.deleteSegment(len(l.segments) - 1); err != nil {
			return err
		}
	}
	s, err := openSegmentFiles(l.dir, offset, true, false)
	if err != nil {
		return l.fail(err) // no segment left: the log cannot take writes
	}
	l.trackBatches(s)
	l.segments = append(l.segments, s)
	l.startOffset = offset
	l.unsyncedMessages = 0
	if err := os.Remove(filepath.Join(l.dir, startOffsetFileName)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return l.fail(err)
	}
	if err := l.activate(s); err != nil {
		return l.fail(err)
	}
	if err := syncDir(l.fio, l.dir); err != nil {
		return l.fail(err)
	}
	return l.reloadProducers()
}

// deleteSegment closes and removes segment i.
func (l *Log) deleteSegment(i int) error { return l.dropSegment(i, false) }

// retireSegment drops segment i like deleteSegment but leaves the unlinking to the ring
// (retireAsync) or a background goroutine (retireFiles): for the oldest segments, whose base
// offsets come back only after a truncation or reset below them, which waits for the
// unlinks (awaitFileJobs).
func (l *Log) retireSegment(i int) error { return l.dropSegment(i, true) }

func (l *Log) dropSegment(i int, retire bool) error {
	s := l.segments[i]
	l.headers.invalidate()
	l.segments = append(l.segments[:i], l.segments[i+1:]...)
	l.forgetUnsynced(s)
	l.forgetLoaded(s)
	if err := s.closeFiles(); err != nil {
		l.cfg.Logger.Warn("close deleted segment", "dir", l.dir, "segment", s.baseOffset, "err", err)
	}
	remove := func(dir string) error {
		removeBatchMaps(dir, s.inode)
		return s.removeFiles(dir)
	}
	if retire && l.fileJobsAsync() {
		l.retireAsync(s)
		return nil
	}
	if retire {
		remove = func(dir string) error { return s.retireFiles(dir, l.poolRetired) }
	}
	if err := remove(l.dir); err != nil {
		return fmt.Errorf("delete segment %d: %w", s.baseOffset, err)
	}
	return nil
}

// EnforceRetention (under cleanup.policy delete or compact,delete; a compact-only log keeps
// its segments and only expires idle producers) deletes closed segments (never the active one), oldest first, while the
// oldest one is past retention.ms (by its newest timestamp, or its file's modification time
// when it has none) or the log without it still holds retention.bytes. The log start offset
// advances to the first remaining segment. A segment whose roll's seal is still in flight
// (its last writes or its cut, asyncwrite.go) ends the pass: the next pass takes it, and the
// owner's loop never waits for the device here.
//
// Before any segment goes, the new start offset is checkpointed (one file fsync and one
// directory fsync per pass that deletes something): the renames that retire segments are
// not durable until a later directory fsync, and a power loss may take back any subset of
// them. Recovery drops every segment wholly below the checkpoint, so a retired segment that
// comes back can never leave a gap before the live ones. With SetAsyncRetention the
// checkpoint is written off the loop and the segments retire at CompleteRetention
// (retention.go): EnforceRetention then first completes the last pass, takes no new one
// while that one's checkpoint is in flight, and returns the segments retired in this call.
func (l *Log) EnforceRetention(now time.Time) (int, error) {
	if l.closed {
		return 0, ErrClosed
	}
	l.ExpireProducers(now.UnixMilli())
	retired, err := l.CompleteRetention()
	if err != nil || l.retention.inFlight() {
		return retired, err
	}
	// What an earlier pass could not retire yet (retireBelow) lies below the durable start
	// offset already: it goes without a new checkpoint.
	k, err := l.retireBelow(l.startOffset)
	if retired += k; err != nil {
		return retired, err
	}
	n, size := 0, l.Size()
	for ; n < len(l.segments)-1 && l.cfg.CleanupPolicy.Deletes(); n++ {
		s := l.segments[n]
		if s.sealing {
			break // a roll's seal in flight (asyncwrite.go): the next pass takes it, nothing waits
		}
		expired, err := l.expired(s, now)
		if err != nil {
			return retired, err
		}
		tooBig := l.cfg.RetentionBytes > 0 && size-s.size >= l.cfg.RetentionBytes
		if !expired && !tooBig {
			break
		}
		size -= s.size
	}
	if n == 0 {
		return retired, nil
	}
	next := l.segments[n].baseOffset
	if next > l.startOffset {
		if l.retention.ops != nil && l.startRetention(next) {
			return retired, nil // CompleteRetention retires them
		}
		if err := writeStartOffset(l.fio, l.dir, next); err != nil {
			return retired, fmt.Errorf("retention: %w", err)
		}
	}
	k, err = l.retireBelow(next)
	return retired + k, err
}

func (l *Log) expired(s *segment, now time.Time) (bool, error) {
	if l.cfg.RetentionMs < 0 {
		return false, nil
	}
	newest := s.maxTimestamp
	if newest < 0 {
		fi, err := os.Stat(segmentPath(l.dir, s.baseOffset, logSuffix))
		if err != nil {
			return false, fmt.Errorf("retention: %w", err)
		}
		newest = fi.ModTime().UnixMilli()
	}
	return now.UnixMilli()-newest > l.cfg.RetentionMs, nil
}

// DeleteRecordsBefore advances the log start offset to offset (Kafka's DeleteRecords) and
// deletes closed segments that lie wholly below it. Reads below the new start fail with
// ErrOffsetOutOfRange. The new start offset is persisted (log-start-offset) before the call
// returns.
func (l *Log) DeleteRecordsBefore(offset int64) (int, error) {
	if l.closed {
		return 0, ErrClosed
	}
	if offset > l.EndOffset() {
		return 0, fmt.Errorf("%w: delete before %d beyond end %d", ErrOffsetOutOfRange, offset, l.EndOffset())
	}
	if err := l.awaitRetention(); err != nil { // one writer of the checkpoint at a time
		return 0, err
	}
	if err := l.awaitFileJobs(); err != nil { // earlier retirements' unlinks and renames done
		return 0, err
	}
	if offset <= l.startOffset {
		return 0, nil
	}
	if err := writeStartOffset(l.fio, l.dir, offset); err != nil {
		return 0, err
	}
	l.startOffset = offset
	deleted := 0
	for len(l.segments) > 1 && l.segments[0].nextOffset <= offset {
		if err := l.awaitSealOf(l.segments[0]); err != nil {
			return deleted, err
		}
		if err := l.retireSegment(0); err != nil {
			return deleted, err
		}
		deleted++
	}
	return deleted, nil
}
