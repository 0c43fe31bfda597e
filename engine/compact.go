package engine

import (
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/ringlog/ringlog/engine/batch"
)

// Log compaction (cleanup.policy=compact): the cleaner keeps the newest record of every key.
//
// A pass, driven by the owner in budgeted steps (Log.Clean, called from the shard's loop),
//
//  1. builds an OffsetMap (key hash -> newest offset) over the dirty part of the closed,
//     synced segments: from the cleaner checkpoint's cleanedTo to the first segment that is
//     unsynced or active. The map is bounded; when it fills, the pass stops its dirty range at
//     the first record it could not add (the rest waits for the next pass);
//  2. rewrites every closed segment that starts below that point (the clean part too:
//     the dirty part may shadow keys there), one segment at a time, into <base>.log.cleaned
//     (+ .index.cleaned, .timeindex.cleaned) keeping a record unless
//     - a newer record of its key is in the map, or
//     - it is a tombstone (null value) in a segment last modified more than
//     delete.retention.ms ago (the file's mtime, kept across rewrites);
//     records without a key and control batches are always kept. Batches are thinned with
//     batch.Filter: offsets never change (gaps are fine), headers keep producer id, epoch
//     and sequence. Two batches are never dropped whole (they keep their newest record):
//     the last batch of a segment, so that every segment still ends where the next begins,
//     and any batch the producer state remembers (an idempotent producer's recent batches),
//     so that the state rebuilt from the log after a restart is the one before it;
//  3. swaps each rewritten segment in (see swapCleaned for the order of renames and fsyncs)
//     and finally advances the checkpoint.
//
// The active segment and segments not yet synced are never touched. A segment the scrubber
// or recovery found corrupt stops cleaning of the log (nothing is rewritten past bad bytes).
//
// # Files
//
//	<base>.log.cleaned, .index.cleaned, .timeindex.cleaned   a rewrite in progress
//	<base>.log.swap                                          a committed rewrite (swap point)
//	cleaner-offset-checkpoint                                "v2 <cleanedTo> <gapsBelow> <tombstonesDueMs>\n"
//
// cleanedTo is the first offset not yet deduplicated (the next pass builds its map from
// there, so a restart does not rescan everything). gapsBelow is the highest offset below
// which a rewritten segment may lie: it is written before the first swap of a pass, and
// recovery accepts batches whose base offset skips forward (the gaps compaction leaves) only
// below it, so torn or stale bytes elsewhere are still caught by the contiguity check.
// tombstonesDueMs (Unix ms, 0: none) is when the earliest tombstone the last finished pass
// kept may go, so that a restart keeps the KIP-534 tombstone pass. A "v1" checkpoint (no
// due time, written before it existed) still decodes, with no tombstones due.

// Cleaner file names.
const (
	cleanedSuffix             = ".cleaned"
	swapSuffix                = ".swap"
	cleanerCheckpointFileName = "cleaner-offset-checkpoint"
	cleanerCheckpointFileMax  = 128
)

// Cleaner sizes.
const (
	// cleanerWriteBytes is how much rewritten log the cleaner buffers before one pwrite.
	cleanerWriteBytes = 1 << 20
	// cleanerReadBytes is the cleaner's read size (one pread per 256 KiB of segment).
	cleanerReadBytes = 256 << 10
	// offsetMapSlotBytes is the memory of one OffsetMap slot: a 128-bit key hash and an offset.
	offsetMapSlotBytes = 24
	// offsetMapLoadFactor is the share of slots the map fills before it reports full (Kafka's
	// log.cleaner.io.buffer.load.factor): linear probing stays short below it.
	offsetMapLoadFactor = 0.9
	// OffsetMapBytesMin is the smallest OffsetMap (1024 slots).
	OffsetMapBytesMin = 1024 * offsetMapSlotBytes
)

// OffsetMap maps a key (by a 128-bit hash: two 64-bit maphash values with independent
// seeds, so a collision that would drop a live record needs both to collide, about 2^-128
// per pair) to the newest offset seen for it. Its memory is fixed at creation:
// bytes/24 slots rounded down to a power of two. One map serves every log of a shard, one
// pass at a time: a Log that finds the map taken by another log's pass restarts its own.
type OffsetMap struct {
	slots        []offsetSlot
	used, limit  int
	seed1, seed2 maphash.Seed
	owner        *Log  // the log whose pass filled it
	pass         int64 // that log's pass number
}

type offsetSlot struct {
	h1, h2 uint64
	offset int64 // offset+1; 0 marks an empty slot
}

// NewOffsetMap allocates a map of at most bytes (at least OffsetMapBytesMin).
func NewOffsetMap(bytes int64) *OffsetMap {
	n := 1024
	for int64(n)*2*offsetMapSlotBytes <= bytes {
		n *= 2
	}
	return newOffsetMapSlots(n)
}

// newOffsetMapSlots makes a map of n slots (a power of two); tests use tiny ones.
func newOffsetMapSlots(n int) *OffsetMap {
	return &OffsetMap{slots: make([]offsetSlot, n), limit: int(float64(n) * offsetMapLoadFactor),
		seed1: maphash.MakeSeed(), seed2: maphash.MakeSeed()}
}

// Capacity is how many keys the map holds before it is full.
func (m *OffsetMap) Capacity() int { return m.limit }

func (m *OffsetMap) reset(owner *Log, pass int64) {
	clear(m.slots)
	m.used, m.owner, m.pass = 0, owner, pass
}

func (m *OffsetMap) find(key []byte) (i int, h1, h2 uint64) {
	h1, h2 = maphash.Bytes(m.seed1, key), maphash.Bytes(m.seed2, key)
	mask := len(m.slots) - 1
	for i = int(h1) & mask; ; i = (i + 1) & mask {
		s := &m.slots[i]
		if s.offset == 0 || s.h1 == h1 && s.h2 == h2 {
			return i, h1, h2
		}
	}
}

// put records offset as key's newest; false when key is new and the map is full.
func (m *OffsetMap) put(key []byte, offset int64) bool {
	i, h1, h2 := m.find(key)
	s := &m.slots[i]
	if s.offset == 0 {
		if m.used >= m.limit {
			return false
		}
		m.used++
		s.h1, s.h2 = h1, h2
	}
	s.offset = offset + 1
	return true
}

// get returns key's newest offset, or -1.
func (m *OffsetMap) get(key []byte) int64 {
	i, _, _ := m.find(key)
	return m.slots[i].offset - 1
}

// CleanProgress reports one Clean call.
type CleanProgress struct {
	BytesRead, BytesWritten int64
	SegmentsCleaned         int   // segments swapped for their rewrite
	RecordsRemoved          int64 // records left out of swapped segments
	// PassComplete: a pass finished (the checkpoint moved), or there was nothing to do (then
	// Idle is set too). The owner moves on to another log.
	PassComplete, Idle bool
}

// CleanerStats is what the cleaner of one log has done since it was opened.
type CleanerStats struct {
	CleanedTo        int64 // first offset not yet deduplicated (the checkpoint)
	Passes           int64
	SegmentsCleaned  int64
	RecordsRemoved   int64
	BytesRead        int64
	BytesWritten     int64
	LastError        string // the last pass that failed, "" when none
	PassInProgress   bool
	DirtyBytes       int64 // bytes of closed synced segments at or past CleanedTo
	CleanableSegment int   // closed synced segments (the ones a pass may rewrite)
}

type cleanerPhase int

const (
	cleanerIdle    cleanerPhase = iota
	cleanerMapping              // building the offset map over the dirty range
	cleanerWriting              // rewriting segments below dirtyEnd
)

// cleanerState is a log's compaction state. Owned by the log's goroutine.
type cleanerState struct {
	cleanedTo int64 // checkpoint: first offset not deduplicated; -1 until loaded
	gapsBelow int64 // checkpoint: rewritten segments lie below it (recovery's gap rule)
	phase     cleanerPhase
	pass      int64
	dirtyEnd  int64 // the pass's map covers [cleanedTo, dirtyEnd)
	failed    error // a swap failed half way: no more cleaning until the log is reopened
	// tombstonesDue is when the earliest tombstone the last finished pass had to keep (its
	// segment was modified less than delete.retention.ms before) may go; zero: none.
	// startPass starts a pass for it then even without dirty data (Kafka's KIP-534), so
	// that tombstones go once no more records come. passDue gathers it during a pass. The
	// checkpoint keeps it across restarts.
	tombstonesDue, passDue time.Time

	// The segment being read (mapping) or rewritten (writing).
	seg     *segment
	segSize int64 // seg.size when the step began: a change means it was truncated
	pos     int64 // next batch position in seg
	scanner *batchScanner

	// Writing only.
	out        []byte // rewritten bytes not yet written
	outPos     int64  // file position of out[0]
	files      [3]*os.File
	fresh      *segment // the rewrite's size, offsets and index entries
	removed    int64    // records left out of this segment
	horizon    bool     // tombstones of this segment are past delete.retention.ms
	mtime      time.Time
	protected  map[int64]bool // last offsets of batches the producer state remembers
	stats      CleanerStats
	indexBytes []byte
}

// CleanerStats reports the cleaner's counters and checkpoint.
func (l *Log) CleanerStats() CleanerStats {
	st := l.cleaner.stats
	st.CleanedTo = l.cleaner.cleanedTo
	st.PassInProgress = l.cleaner.phase != cleanerIdle
	if l.cleaner.failed != nil {
		st.LastError = l.cleaner.failed.Error()
	}
	upper := l.cleanableEnd()
	for _, s := range l.segments {
		if s.baseOffset >= upper {
			break
		}
		st.CleanableSegment++
		if s.nextOffset > l.cleaner.cleanedTo {
			st.DirtyBytes += s.size
		}
	}
	return st
}

// Compacted reports whether the log's cleanup.policy runs the cleaner.
func (l *Log) Compacted() bool { return l.cfg.CleanupPolicy.Compacts() }

// cleanableEnd is the base offset of the first segment the cleaner must not touch: the
// first sealed segment not yet synced, or the active one.
func (l *Log) cleanableEnd() int64 {
	if len(l.unsyncedSegments) > 0 {
		return l.unsyncedSegments[0].baseOffset
	}
	return l.active().baseOffset
}

// Clean advances the log's compaction by about budgetBytes of reads and writes (at least one
// batch), using m as the pass's offset map; see the comment at the top of this file. now
// decides which tombstones are past delete.retention.ms. It returns an error when the pass
// failed (the pass is abandoned, and retried from scratch on a later call, unless a swap
// failed half way: then cleaning stops until the log is reopened, whose recovery finishes
// the swap).
func (l *Log) Clean(m *OffsetMap, budgetBytes int64, now time.Time) (CleanProgress, error) {
	var p CleanProgress
	if l.closed {
		return p, ErrClosed
	}
	c := &l.cleaner
	if len(l.sealing) > 0 || l.sealsInFlight > 0 {
		// A pass reads and swaps sealed segment files: none may still be written or cut.
		if err := l.awaitSeals(); err != nil {
			return p, err
		}
	}
	if !l.Compacted() || c.failed != nil || l.failed != nil {
		p.PassComplete, p.Idle = true, true
		return p, c.failed
	}
	if err := l.awaitRollFiles(); err != nil { // nor be named or have its batch map written (rollasync.go)
		return p, err
	}
	if c.phase != cleanerIdle && (m.owner != l || m.pass != c.pass) {
		l.abandonPass() // another log used the map meanwhile
	}
	if c.phase == cleanerIdle {
		if !l.startPass(m, now) {
			p.PassComplete, p.Idle = true, true
			return p, nil
		}
	}
	for p.BytesRead+p.BytesWritten < budgetBytes || p.BytesRead == 0 {
		var done bool
		var err error
		switch c.phase {
		case cleanerMapping:
			done, err = l.mapStep(m, &p)
		case cleanerWriting:
			done, err = l.writeStep(m, &p, now)
		}
		if errors.Is(err, errPassInterrupted) { // retention or a truncation got there first
			l.abandonPass()
			p.PassComplete = true
			break
		}
		if err != nil {
			l.abandonPass()
			c.stats.LastError = err.Error()
			return p, fmt.Errorf("clean %s: %w", l.dir, err)
		}
		if done {
			p.PassComplete = true
			c.stats.Passes++
			c.stats.LastError = ""
			break
		}
	}
	c.stats.BytesRead += p.BytesRead
	c.stats.BytesWritten += p.BytesWritten
	return p, nil
}

// startPass begins a pass when the dirty share of the cleanable segments reaches
// min.cleanable.dirty.ratio, or, with no dirty data, when tombstones kept by the last pass
// are due (a pass with an empty map over the cleaned segments, which only drops them);
// false when there is nothing to do.
func (l *Log) startPass(m *OffsetMap, now time.Time) bool {
	c := &l.cleaner
	if len(l.corruptions) > 0 {
		l.pruneCorruptions()
		if len(l.corruptions) > 0 {
			return false // never rewrite around bytes known to be bad
		}
	}
	upper := l.cleanableEnd()
	c.cleanedTo = min(max(c.cleanedTo, l.segments[0].baseOffset), l.active().baseOffset)
	if upper <= c.cleanedTo {
		return l.startTombstonePass(m, now)
	}
	var dirty, total int64
	for _, s := range l.segments {
		if s.baseOffset >= upper {
			break
		}
		total += s.size
		if s.nextOffset > c.cleanedTo {
			dirty += s.size
		}
	}
	if dirty == 0 || float64(dirty) < l.cfg.MinCleanableDirtyRatio*float64(total) {
		return l.startTombstonePass(m, now)
	}
	c.pass++
	m.reset(l, c.pass)
	c.phase, c.dirtyEnd, c.passDue = cleanerMapping, upper, time.Time{}
	i := l.segmentFor(c.cleanedTo)
	l.beginSegment(l.segments[i], 0)
	return true
}

// startTombstonePass begins a pass over the cleaned segments (below cleanedTo) with an
// empty map when the tombstones the last pass kept are due: every record there was
// deduplicated by an earlier pass, so the rewrite only drops tombstones past
// delete.retention.ms. The cursor stands at the end of the mapped range, so the first
// step goes straight to writing.
func (l *Log) startTombstonePass(m *OffsetMap, now time.Time) bool {
	c := &l.cleaner
	if c.tombstonesDue.IsZero() || now.Before(c.tombstonesDue) || c.cleanedTo <= l.segments[0].baseOffset {
		return false
	}
	c.pass++
	m.reset(l, c.pass)
	c.phase, c.dirtyEnd, c.passDue = cleanerMapping, c.cleanedTo, time.Time{}
	s := l.segments[l.segmentFor(c.cleanedTo-1)]
	l.beginSegment(s, s.size)
	return true
}

// beginSegment points the cursor at the start of s.
func (l *Log) beginSegment(s *segment, pos int64) {
	c := &l.cleaner
	c.seg, c.segSize, c.pos = s, s.size, pos
	if c.scanner == nil {
		c.scanner = &batchScanner{fio: l.fio, buf: make([]byte, cleanerReadBytes)}
	}
	c.scanner.fd, c.scanner.fileSize, c.scanner.bufStart, c.scanner.bufLen = s.logFd(), s.size, 0, 0
}

// errPassInterrupted: the segment a pass was reading or rewriting was deleted or cut (retention,
// DeleteRecordsBefore, a truncation) meanwhile; the pass is dropped and starts over later.
var errPassInterrupted = errors.New("segment changed during the pass")

// segmentStillThere reports whether the cursor's segment is still in the log unchanged
// (retention, truncation or DeleteRecordsBefore did not remove or cut it); its index.
func (l *Log) segmentStillThere() (int, bool) {
	c := &l.cleaner
	i := l.segmentFor(c.seg.baseOffset)
	return i, l.segments[i] == c.seg && c.seg.size == c.segSize && i < len(l.segments)-1
}

// abandonPass drops the pass in progress and its files; the next Clean starts over.
func (l *Log) abandonPass() {
	c := &l.cleaner
	if c.phase == cleanerWriting && c.seg != nil {
		l.discardCleaned(c.seg.baseOffset)
	}
	c.phase, c.seg, c.out, c.protected, c.scanner = cleanerIdle, nil, nil, nil, nil
}

// mapStep adds one batch of the dirty range to the map.
func (l *Log) mapStep(m *OffsetMap, p *CleanProgress) (bool, error) {
	c := &l.cleaner
	i, ok := l.segmentStillThere()
	if !ok {
		return false, fmt.Errorf("segment %d: %w", c.seg.baseOffset, errPassInterrupted)
	}
	if c.pos >= c.seg.size {
		if i+1 >= len(l.segments) || l.segments[i+1].baseOffset >= c.dirtyEnd {
			return false, l.startWriting()
		}
		l.beginSegment(l.segments[i+1], 0)
		return false, nil
	}
	h, err := c.scanner.batchAt(c.pos)
	if err != nil {
		return false, fmt.Errorf("map segment %d at %d: %w", c.seg.baseOffset, c.pos, err)
	}
	b, _ := c.scanner.window(c.pos, int(batchSize(h)))
	p.BytesRead += batchSize(h)
	full := int64(-1)
	if h.LastOffset() >= c.cleanedTo && !h.Control() {
		err = batch.Decode(b, func(offset, _ int64, r *batch.Record) error {
			if offset < c.cleanedTo || r.Key == nil {
				return nil
			}
			if !m.put(r.Key, offset) {
				full = offset
				return errStopDecode
			}
			return nil
		})
		if err != nil && !errors.Is(err, errStopDecode) {
			return false, fmt.Errorf("map segment %d at %d: %w", c.seg.baseOffset, c.pos, err)
		}
	}
	if full >= 0 {
		c.dirtyEnd = full // the map holds [cleanedTo, full)
		return false, l.startWriting()
	}
	c.pos += batchSize(h)
	return false, nil
}

// startWriting ends the mapping phase: gapsBelow is checkpointed before any swap (it covers
// the whole of every segment the pass rewrites), and the cursor moves to the first segment.
func (l *Log) startWriting() error {
	c := &l.cleaner
	rewriteEnd := c.dirtyEnd
	if i := l.segmentFor(c.dirtyEnd - 1); l.segments[i].baseOffset < c.dirtyEnd {
		rewriteEnd = max(rewriteEnd, l.segments[i].nextOffset) // the map filled inside it
	}
	if rewriteEnd > c.gapsBelow {
		if err := writeCleanerCheckpoint(l, cleanerCheckpoint{c.cleanedTo, rewriteEnd, c.tombstonesDue}); err != nil {
			return err
		}
		c.gapsBelow = rewriteEnd
	}
	c.phase = cleanerWriting
	c.seg = nil
	return nil
}

// nextToRewrite returns the first closed segment at or after base that starts below
// dirtyEnd. That includes the segment the map filled in (when it did): its records below
// dirtyEnd must be deduplicated by this pass's map, which holds the newer records of the same
// segment (the next pass's map starts at dirtyEnd and would never see them); its records from
// dirtyEnd on are not in the map, so each key's entry there is older, and they are all kept.
func (l *Log) nextToRewrite(base int64) *segment {
	c := &l.cleaner
	for _, s := range l.segments[:len(l.segments)-1] {
		if s.baseOffset >= base && s.baseOffset < c.dirtyEnd && s.size > 0 {
			return s
		}
	}
	return nil
}

// writeStep rewrites one batch (starting a segment, or finishing and swapping one, as due).
func (l *Log) writeStep(m *OffsetMap, p *CleanProgress, now time.Time) (bool, error) {
	c := &l.cleaner
	if c.seg == nil {
		s := l.nextToRewrite(l.segments[0].baseOffset)
		if s == nil {
			return true, l.finishPass()
		}
		return false, l.beginRewrite(s, now)
	}
	if _, ok := l.segmentStillThere(); !ok {
		return false, fmt.Errorf("segment %d: %w", c.seg.baseOffset, errPassInterrupted)
	}
	if c.pos >= c.seg.size {
		base := c.seg.nextOffset
		if err := l.finishRewrite(p); err != nil {
			return false, err
		}
		s := l.nextToRewrite(base)
		if s == nil {
			return true, l.finishPass()
		}
		return false, l.beginRewrite(s, now)
	}
	h, err := c.scanner.batchAt(c.pos)
	if err != nil {
		return false, fmt.Errorf("rewrite segment %d at %d: %w", c.seg.baseOffset, c.pos, err)
	}
	b, _ := c.scanner.window(c.pos, int(batchSize(h)))
	p.BytesRead += batchSize(h)
	last := c.pos+batchSize(h) == c.seg.size
	start := len(c.out)
	if h.Control() {
		c.out = append(c.out, b...)
	} else {
		var res batch.FilterResult
		c.out, res, err = batch.Filter(c.out, b, last || c.protected[h.LastOffset()], func(offset, _ int64, r *batch.Record) bool {
			if r.Key == nil {
				return true
			}
			if newest := m.get(r.Key); newest > offset {
				return false
			}
			if r.Value != nil || offset >= c.dirtyEnd {
				// A tombstone at or past dirtyEnd (in the segment the map filled in) is in
				// no pass's map yet: the older records of its key below may still be there,
				// and dropping it would bring them back. The next pass maps it.
				return true
			}
			if !c.horizon {
				if due := c.mtime.Add(time.Duration(l.cfg.DeleteRetentionMs) * time.Millisecond); c.passDue.IsZero() || due.Before(c.passDue) {
					c.passDue = due
				}
				return true
			}
			return false
		})
		if err != nil {
			return false, fmt.Errorf("rewrite segment %d at %d: %w", c.seg.baseOffset, c.pos, err)
		}
		c.removed += int64(res.Removed)
	}
	if len(c.out) > start {
		nh, _ := batch.ParseHeader(c.out[start:])
		c.fresh.noteBatch(nh, l.cfg.IndexIntervalBytes)
	}
	c.pos += batchSize(h)
	if len(c.out) >= cleanerWriteBytes {
		n := int64(len(c.out))
		if err := pwriteFull(l.fio, int(c.files[0].Fd()), c.out, c.outPos); err != nil {
			return false, fmt.Errorf("write %s: %w", c.files[0].Name(), err)
		}
		p.BytesWritten += n
		c.outPos += n
		c.out = c.out[:0]
	}
	return false, nil
}

// beginRewrite starts rewriting s into its .cleaned files.
func (l *Log) beginRewrite(s *segment, now time.Time) error {
	c := &l.cleaner
	fi, err := s.log.Stat()
	if err != nil {
		return fmt.Errorf("segment %d: %w", s.baseOffset, err)
	}
	c.mtime = fi.ModTime()
	c.horizon = now.Sub(c.mtime) > time.Duration(l.cfg.DeleteRetentionMs)*time.Millisecond
	l.discardCleaned(s.baseOffset)
	for i, suffix := range []string{logSuffix, indexSuffix, timeIndexSuffix} {
		f, err := os.OpenFile(segmentPath(l.dir, s.baseOffset, suffix)+cleanedSuffix, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			l.closeCleaned()
			l.discardCleaned(s.baseOffset)
			return fmt.Errorf("segment %d: create rewrite: %w", s.baseOffset, err)
		}
		c.files[i] = f
	}
	c.fresh = &segment{baseOffset: s.baseOffset, nextOffset: s.baseOffset, maxTimestamp: noTimestamp}
	c.out, c.outPos, c.removed = c.out[:0], 0, 0
	c.protected = map[int64]bool{}
	for _, e := range l.producers.producers {
		for _, b := range e.batches {
			c.protected[b.lastOffset] = true
		}
	}
	l.beginSegment(s, 0)
	return nil
}

func (l *Log) closeCleaned() {
	c := &l.cleaner
	for i, f := range c.files {
		if f != nil {
			f.Close()
			c.files[i] = nil
		}
	}
}

// discardCleaned removes the rewrite files of segment base, if any.
func (l *Log) discardCleaned(base int64) {
	l.closeCleaned()
	for _, suffix := range []string{logSuffix, indexSuffix, timeIndexSuffix} {
		os.Remove(segmentPath(l.dir, base, suffix) + cleanedSuffix)
	}
}

// finishRewrite completes the rewrite of the cursor's segment: when it removed anything, its
// files are written whole, synced and swapped in (swapCleaned); otherwise they are dropped.
func (l *Log) finishRewrite(p *CleanProgress) error {
	c := &l.cleaner
	old, fresh := c.seg, c.fresh
	if c.removed == 0 {
		l.discardCleaned(old.baseOffset)
		c.seg = nil
		return nil
	}
	if fresh.nextOffset != old.nextOffset {
		return fmt.Errorf("segment %d: rewrite ends at %d, the segment at %d", old.baseOffset, fresh.nextOffset, old.nextOffset)
	}
	if len(c.out) > 0 {
		if err := pwriteFull(l.fio, int(c.files[0].Fd()), c.out, c.outPos); err != nil {
			return fmt.Errorf("write %s: %w", c.files[0].Name(), err)
		}
		p.BytesWritten += int64(len(c.out))
		c.out = c.out[:0]
	}
	fresh.addFinalTimeEntry()
	c.indexBytes = appendIndexEntries(c.indexBytes[:0], fresh.index.entries)
	if err := pwriteFull(l.fio, int(c.files[1].Fd()), c.indexBytes, 0); err != nil {
		return fmt.Errorf("write %s: %w", c.files[1].Name(), err)
	}
	c.indexBytes = appendTimeIndexEntries(c.indexBytes[:0], fresh.timeIndex.entries)
	if err := pwriteFull(l.fio, int(c.files[2].Fd()), c.indexBytes, 0); err != nil {
		return fmt.Errorf("write %s: %w", c.files[2].Name(), err)
	}
	// The rewrite keeps the segment's modification time: retention (for segments without
	// timestamps) and the tombstone rule count from the last append, not from the rewrite.
	if err := os.Chtimes(c.files[0].Name(), c.mtime, c.mtime); err != nil {
		return fmt.Errorf("segment %d: keep mtime: %w", old.baseOffset, err)
	}
	for _, f := range c.files {
		if err := l.fio.Fsync(int(f.Fd())); err != nil {
			return fmt.Errorf("sync %s: %w", f.Name(), err)
		}
	}
	l.closeCleaned()
	if err := l.swapCleaned(old.baseOffset); err != nil {
		return err
	}
	if err := l.replaceSegment(old, fresh); err != nil {
		return err
	}
	p.SegmentsCleaned++
	p.RecordsRemoved += c.removed
	c.stats.SegmentsCleaned++
	c.stats.RecordsRemoved += c.removed
	c.seg = nil
	return nil
}

// swapCleaned puts the synced rewrite of segment base in place of the segment:
//
//  1. rename <base>.log.cleaned to <base>.log.swap, fsync the directory: the commit point
//     (the same fsync makes the names of the two .cleaned indexes durable; from here on
//     recovery finishes the swap instead of discarding the rewrite);
//  2. rename <base>.index.cleaned and <base>.timeindex.cleaned over the indexes, fsync the
//     directory;
//  3. rename <base>.log.swap over <base>.log, fsync the directory.
//
// While <base>.log.swap exists, every index is either still .cleaned or already the new one,
// so finishSwap can complete from any crash point. (Recovery would also survive a stale index
// next to a rewritten log: it drops index entries whose batch does not match, from the end,
// and re-scans; the order above does not rely on that.) An error after step 1 leaves the swap
// to the next open's recovery and stops cleaning this log (the live log keeps serving its old,
// still open, files meanwhile).
func (l *Log) swapCleaned(base int64) error {
	path := func(suffix string) string { return segmentPath(l.dir, base, suffix) }
	if err := os.Rename(path(logSuffix)+cleanedSuffix, path(logSuffix)+swapSuffix); err != nil {
		return fmt.Errorf("segment %d: commit rewrite: %w", base, err)
	}
	if err := syncDir(l.fio, l.dir); err != nil {
		l.cleaner.failed = fmt.Errorf("segment %d: swap committed, directory sync failed (the next open finishes it): %w", base, err)
		return l.cleaner.failed
	}
	if err := finishSwap(l, base); err != nil {
		l.cleaner.failed = fmt.Errorf("segment %d: swap committed, not finished (the next open finishes it): %w", base, err)
		return l.cleaner.failed
	}
	return nil
}

// finishSwap does steps 2 and 3 of swapCleaned for a committed rewrite of segment base.
func finishSwap(l *Log, base int64) error {
	path := func(suffix string) string { return segmentPath(l.dir, base, suffix) }
	renamed := false
	for _, suffix := range []string{indexSuffix, timeIndexSuffix} {
		err := os.Rename(path(suffix)+cleanedSuffix, path(suffix))
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("swap index of segment %d: %w", base, err)
		}
		renamed = renamed || err == nil
	}
	if renamed {
		if err := syncDir(l.fio, l.dir); err != nil {
			return err
		}
	}
	if err := os.Rename(path(logSuffix)+swapSuffix, path(logSuffix)); err != nil {
		return fmt.Errorf("swap segment %d: %w", base, err)
	}
	return syncDir(l.fio, l.dir)
}

// replaceSegment makes the log serve the swapped-in rewrite of old (already renamed in place).
func (l *Log) replaceSegment(old, fresh *segment) error {
	s, err := openSegmentFiles(l.dir, old.baseOffset, false, false)
	if err != nil {
		l.cleaner.failed = fmt.Errorf("segment %d: reopen after swap: %w", old.baseOffset, err)
		l.fail(l.cleaner.failed)
		return l.cleaner.failed
	}
	s.nextOffset, s.size, s.maxTimestamp = fresh.nextOffset, fresh.size, fresh.maxTimestamp
	s.markSynced()
	s.indexReleased = true // in its files; reloaded on the next lookup
	i := l.segmentFor(old.baseOffset)
	l.segments[i] = s
	l.forgetLoaded(old)
	l.headers.invalidate()
	if l.scrub.segment == old.baseOffset {
		l.scrub.position, l.scrub.expected = 0, old.baseOffset
	}
	if err := old.closeFiles(); err != nil {
		l.cfg.Logger.Warn("close replaced segment", "dir", l.dir, "segment", old.baseOffset, "err", err)
	}
	l.assertInvariants()
	return nil
}

// finishPass advances the checkpoint past the pass's dirty range.
func (l *Log) finishPass() error {
	c := &l.cleaner
	c.phase, c.seg, c.protected, c.scanner, c.out = cleanerIdle, nil, nil, nil, nil
	if err := writeCleanerCheckpoint(l, cleanerCheckpoint{c.dirtyEnd, max(c.gapsBelow, c.dirtyEnd), c.passDue}); err != nil {
		return err
	}
	c.cleanedTo, c.gapsBelow = c.dirtyEnd, max(c.gapsBelow, c.dirtyEnd)
	c.tombstonesDue = c.passDue
	return nil
}

// cleanerCheckpoint is what cleaner-offset-checkpoint holds.
type cleanerCheckpoint struct {
	cleanedTo, gapsBelow int64
	tombstonesDue        time.Time // zero: no kept tombstone
}

// writeCleanerCheckpoint replaces the checkpoint atomically (writeFileAtomic).
func writeCleanerCheckpoint(l *Log, cp cleanerCheckpoint) error {
	var due int64
	if !cp.tombstonesDue.IsZero() {
		due = max(cp.tombstonesDue.UnixMilli(), 1)
	}
	b := fmt.Appendf(nil, "v2 %d %d %d\n", cp.cleanedTo, cp.gapsBelow, due)
	if err := writeFileAtomic(l.fio, l.dir, cleanerCheckpointFileName, b); err != nil {
		return fmt.Errorf("write cleaner checkpoint: %w", err)
	}
	return nil
}

var errCleanerCheckpointCorrupt = errors.New("cleaner checkpoint corrupt")

// decodeCleanerCheckpoint reads "v2 <cleanedTo> <gapsBelow> <tombstonesDueMs>\n" or the
// older "v1 <cleanedTo> <gapsBelow>\n": non-negative decimals without leading zeros.
func decodeCleanerCheckpoint(b []byte) (cleanerCheckpoint, error) {
	if len(b) > cleanerCheckpointFileMax {
		return cleanerCheckpoint{}, fmt.Errorf("%w: %d bytes", errCleanerCheckpointCorrupt, len(b))
	}
	want := 3
	rest, ok := strings.CutPrefix(string(b), "v2 ")
	if !ok {
		rest, ok = strings.CutPrefix(string(b), "v1 ")
		want = 2
	}
	if ok {
		rest, ok = strings.CutSuffix(rest, "\n")
	}
	fields := strings.Split(rest, " ")
	if !ok || len(fields) != want {
		return cleanerCheckpoint{}, fmt.Errorf("%w: %q", errCleanerCheckpointCorrupt, b)
	}
	var n [3]int64
	for i, f := range fields {
		v, err := strconv.ParseInt(f, 10, 64)
		if err != nil || v < 0 || strconv.FormatInt(v, 10) != f {
			return cleanerCheckpoint{}, fmt.Errorf("%w: %q", errCleanerCheckpointCorrupt, b)
		}
		n[i] = v
	}
	cp := cleanerCheckpoint{cleanedTo: n[0], gapsBelow: n[1]}
	if n[2] > 0 {
		cp.tombstonesDue = time.UnixMilli(n[2])
	}
	return cp, nil
}

// loadCleanerState finishes or discards interrupted swaps and reads the checkpoint. It runs
// at the start of recovery, before the segments are listed: a committed swap (a .swap file)
// is completed, every other rewrite file is removed. A checkpoint that exists but does not
// decode (it is written atomically, so only damage gets there) is logged; the next pass then
// starts from scratch, and recovery accepts gaps anywhere rather than taking the rewritten
// segments for torn ones.
func (l *Log) loadCleanerState() error {
	c := &l.cleaner
	c.cleanedTo, c.gapsBelow, c.tombstonesDue = 0, 0, time.Time{}
	entries, err := os.ReadDir(l.dir)
	if err != nil {
		return fmt.Errorf("list %s: %w", l.dir, err)
	}
	finished := false
	for _, e := range entries {
		stem, ok := strings.CutSuffix(e.Name(), logSuffix+swapSuffix)
		if !ok {
			continue
		}
		base, suffix, ok := parseSegmentName(stem + logSuffix)
		if !ok || suffix != logSuffix {
			continue
		}
		if err := finishSwap(l, base); err != nil {
			return fmt.Errorf("finish interrupted cleaner swap: %w", err)
		}
		finished = true
	}
	if finished {
		l.cfg.Logger.Info("finished an interrupted compaction swap", "dir", l.dir)
	}
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), cleanedSuffix) {
			if err := os.Remove(filepath.Join(l.dir, e.Name())); err != nil && !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("remove unfinished rewrite %s: %w", e.Name(), err)
			}
			if strings.HasSuffix(e.Name(), logSuffix+cleanedSuffix) {
				l.cfg.Logger.Info("discarded an unfinished compaction rewrite", "dir", l.dir, "file", e.Name())
			}
		}
	}
	b, err := os.ReadFile(filepath.Join(l.dir, cleanerCheckpointFileName))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err == nil {
		var cp cleanerCheckpoint
		if cp, err = decodeCleanerCheckpoint(b); err == nil {
			c.cleanedTo, c.gapsBelow, c.tombstonesDue = cp.cleanedTo, cp.gapsBelow, cp.tombstonesDue
		}
	}
	if err != nil {
		// The file exists, so the log was cleaned: recovery tolerates gaps anywhere rather
		// than cutting or fencing rewritten segments, and the next pass starts from scratch.
		l.cfg.Logger.Warn("ignoring damaged cleaner checkpoint; recovery accepts compaction gaps anywhere in this log",
			"dir", l.dir, "err", err)
		c.cleanedTo, c.gapsBelow = 0, math.MaxInt64
	}
	return nil
}

// gapAllowed reports whether recovery may accept a batch at base when the segment so far
// ends at expected: compaction leaves such gaps, only below the checkpoint's gapsBelow.
func (l *Log) gapAllowed(expected, base int64) bool {
	return base > expected && base < l.cleaner.gapsBelow
}

// cleanerTruncated is told that the log was cut at offset: the map must not trust anything
// from there on.
func (l *Log) cleanerTruncated(offset int64) {
	c := &l.cleaner
	if c.phase != cleanerIdle {
		l.abandonPass()
	}
	c.cleanedTo = min(c.cleanedTo, offset)
}
