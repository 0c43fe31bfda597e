package engine

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/ringlog/ringlog/engine/batch"
	"github.com/ringlog/ringlog/ring"
)

// RecoveryReport says what OpenLog found and repaired.
type RecoveryReport struct {
	Segments       int   // segments in the log after recovery
	ScannedBytes   int64 // log bytes re-read with every batch CRC-checked
	ScannedBatches int
	// DroppedBatches and DroppedBytes describe torn or corrupt tails cut off. The batch
	// count is best effort: headers that still parse in the dropped bytes, at least one when
	// they are not all zero. Zero padding alone (direct mode) counts bytes but no batches.
	DroppedBatches int
	DroppedBytes   int64
	// ZeroTailBytes: with LogConfig.PreallocateBytes, the zeros found past the active
	// segment's last valid batch, kept in place for appends (prealloc.go) and not counted as
	// dropped. The log ends where they begin.
	ZeroTailBytes int64
	// RebuiltIndexes lists base offsets of segments whose index was missing or corrupt and
	// was rebuilt from the log.
	RebuiltIndexes []int64
	// DeletedSegments lists segments removed because they lay wholly below the log start
	// offset checkpoint (retired segments a power loss brought back), or because an earlier
	// sealed segment had a torn tail that was never synced (see Log.recover). Damage in a
	// segment known to be synced never deletes later segments (see Corruptions).
	DeletedSegments []int64
	Corruption      string // why the first tail was cut; "" when nothing was
	// Corruptions lists bad batches in sealed segments, kept in the log and fenced, not cut
	// (see Log.Corruptions): those recovery's re-scan found (Reason starts with
	// "recovery: "), and with LogConfig.VerifySegments those a full verification found.
	Corruptions []Corruption
	// CleanShutdown: the clean-shutdown marker Close leaves was found. Segments that end at
	// or below the end offset it records were synced by Close, and recovery issued no
	// fdatasync for them.
	CleanShutdown bool
	// ProducerSnapshot is the offset of the producer state snapshot recovery started from
	// (-1: none usable); ProducerBatchesScanned counts the batch headers read after it, and
	// Producers the idempotent producers known afterwards.
	ProducerSnapshot       int64
	ProducerBatchesScanned int
	Producers              int
	Duration               time.Duration
}

// cleanShutdownFileName marks a log that Close synced and closed; OpenLog removes it first.
const cleanShutdownFileName = "clean-shutdown"

// recoveryReadBytes is the read size of the recovery scanner (1 MiB: a 1 GiB segment in
// 1024 preads).
const recoveryReadBytes = 1 << 20

// batchScanner reads a file sequentially, verifying whole batches.
type batchScanner struct {
	fio      ring.FileIO
	fd       int
	fileSize int64
	buf      []byte
	bufStart int64
	bufLen   int
}

func newBatchScanner(fio ring.FileIO, fd int, fileSize int64) *batchScanner {
	return &batchScanner{fio: fio, fd: fd, fileSize: fileSize, buf: make([]byte, min(recoveryReadBytes, max(fileSize, batch.HeaderSize)))}
}

var errTornBatch = errors.New("torn batch (file ends inside it)")

// errRecoveryRead marks a failed read during recovery: the bytes are unknown, not bad, so
// recovery stops with an error instead of cutting the log there.
var errRecoveryRead = errors.New("read failed during recovery")

// window returns [pos, pos+n) of the file, reading as needed. n is bounded by the caller.
func (sc *batchScanner) window(pos int64, n int) ([]byte, error) {
	if pos+int64(n) > sc.fileSize {
		return nil, errTornBatch
	}
	if pos >= sc.bufStart && pos+int64(n) <= sc.bufStart+int64(sc.bufLen) {
		return sc.buf[pos-sc.bufStart : pos-sc.bufStart+int64(n)], nil
	}
	if n > len(sc.buf) {
		sc.buf = make([]byte, n)
	}
	want := min(int64(len(sc.buf)), sc.fileSize-pos)
	if err := preadFull(sc.fio, sc.fd, sc.buf[:want], pos); err != nil {
		sc.bufLen = 0
		if errors.Is(err, errShortFile) {
			return nil, errTornBatch // the file shrank under us: treat as its end
		}
		return nil, fmt.Errorf("%w: %w", errRecoveryRead, err)
	}
	sc.bufStart, sc.bufLen = pos, int(want)
	return sc.buf[:n], nil
}

// batchAt reads and fully validates the batch at pos.
func (sc *batchScanner) batchAt(pos int64) (batch.Header, error) {
	hb, err := sc.window(pos, batch.HeaderSize)
	if err != nil {
		return batch.Header{}, err
	}
	h, err := batch.ParseHeader(hb)
	if err != nil {
		return h, err
	}
	b, err := sc.window(pos, int(batchSize(h)))
	if err != nil {
		return h, err
	}
	return batch.ValidateStored(b) // the stored rule: compacted batches are not corruption
}

// recover opens every segment in l.dir and re-scans each from its last trustworthy index
// entry to its end (the bytes before that entry were fdatasync'ed before the entry was
// written).
//
// The active (last) segment's tail that fails the scan is cut: a crash tore it. A sealed
// segment whose re-scanned tail fails is either damaged media under synced (perhaps
// acknowledged) records, or the torn unsynced tail of a segment sealed shortly before a power
// loss. The two look alike on disk (the crash model lets unsynced bytes survive, vanish or
// tear in any order, so a torn tail can look like one bad batch), so recovery looks for proof
// that the segment was wholly fdatasync'ed (sealedProof):
//
//   - with proof, the bad batch is damage: it is recorded as a Corruption (as the scrubber
//     would record it), reads are fenced around it, nothing is cut, no later segment is
//     touched, and the segment's end is taken from the next segment's base;
//   - without proof, the tail may be torn, and it is cut as an active segment's would be, and
//     the later segments are deleted (the log stays contiguous).
//
// Why cutting is safe without proof: a sealed segment's bytes can be unsynced only while it is
// on l.unsyncedSegments, and SyncedOffset() is unsyncedSegments[0].syncedNextOffset, so no
// offset in or after that segment counts as synced (nor is acknowledged under flush.always or
// acks=all) until a Sync or EndSync that fdatasync'ed the whole segment returned. Sync syncs
// the sealed segments before the active one; BeginSync puts every unsynced sealed segment in
// the same ticket as the active one, and EndSync raises the marks only after every descriptor
// of the ticket was synced. So a torn sealed segment means no sync completed since it was
// sealed: every later segment holds only records that were never acknowledged as synced
// (their bytes may have reached the disk: a ticket's fdatasyncs run concurrently), and none
// of them is lost by deleting them. Every completed sync since the seal leaves proof behind,
// unless a power loss also took it back (index files are not fsynced): see
// sealedProof for what counts and docs/storage.md for the one case that remains.
func (l *Log) recover(report *RecoveryReport) error {
	if err := l.loadCleanerState(); err != nil {
		return err
	}
	bases, err := l.listSegments()
	if err != nil {
		return err
	}
	marker := filepath.Join(l.dir, cleanShutdownFileName)
	closeEnd := int64(-1) // the log end offset the last Close synced; -1: unknown
	if b, err := os.ReadFile(marker); err == nil {
		report.CleanShutdown = true
		closeEnd = parseCleanShutdown(b)
		// Gone before any new write: a crash from here on must not look clean. The unlink
		// becomes durable with the first sync (dirGen), before anything appended from here
		// on counts as synced; a power loss before that may bring the marker back, which is
		// harmless: the disk then holds what Close synced plus unsynced bytes past the last
		// index entry, which recovery re-scans either way.
		if err := os.Remove(marker); err != nil {
			return fmt.Errorf("remove clean-shutdown marker: %w", err)
		}
		l.dirGen++
	}
	if bases, err = l.dropBelowCheckpoint(bases, report); err != nil {
		return err
	}
	laterIndexed := l.laterIndexed(bases)
	oldMaps, mapNames := l.loadOldBatchMaps() // batchmap.go: the torn-header guard of recycled files
	for i, base := range bases {
		s, err := openSegmentFiles(l.dir, base, false, false)
		if err != nil {
			return err
		}
		l.segments = append(l.segments, s)
		last := i == len(bases)-1
		end := int64(-1) // the active segment: no next base
		if !last {
			end = bases[i+1]
		}
		if err := l.recoverSegment(s, end, closeEnd, laterIndexed[i], oldBatchesOf(oldMaps, s), report); err != nil {
			return err
		}
		// Recovery has read and rewritten what it needed; later syncs reopen them.
		if err := s.closeIndexFiles(); err != nil {
			return fmt.Errorf("segment %d: close index files: %w", base, err)
		}
		if last {
			continue
		}
		if s.nextOffset == end {
			l.releaseIndexAfterRecovery(s)
			continue
		}
		// No proof the segment was ever wholly synced, and its tail was cut (see above).
		if report.Corruption == "" {
			report.Corruption = fmt.Sprintf("segment %d ends at offset %d, next segment starts at %d", base, s.nextOffset, end)
		}
		for _, b := range bases[i+1:] {
			gone := &segment{baseOffset: b}
			if err := gone.removeFiles(l.dir); err != nil {
				return fmt.Errorf("remove segment %d after a torn sealed segment: %w", b, err)
			}
			report.DeletedSegments = append(report.DeletedSegments, b)
		}
		break
	}
	if len(report.DeletedSegments) > 0 {
		// The deletions must be durable before new appends reuse those offsets: a deleted
		// segment that came back after a power loss could otherwise continue the log with
		// records that were never acknowledged.
		if err := syncDir(l.fio, l.dir); err != nil {
			return err
		}
	}
	if len(l.segments) == 0 {
		s, err := openSegmentFiles(l.dir, 0, true, false)
		if err != nil {
			return err
		}
		l.segments = append(l.segments, s)
		if err := syncDir(l.fio, l.dir); err != nil {
			return err
		}
	}
	l.sweepBatchMaps(mapNames)
	l.startOffset = l.segments[0].baseOffset
	if err := l.loadStartOffset(); err != nil {
		return err
	}
	report.Segments = len(l.segments)
	report.Corruptions = l.Corruptions()
	if err := l.activate(l.active()); err != nil {
		return err
	}
	l.assertInvariants()
	return nil
}

// parseCleanShutdown reads the log end offset Close wrote into the clean-shutdown marker
// ("<offset>\n"), or -1 when it is missing or unreadable (an older marker, or one whose
// unsynced contents a power loss took).
func parseCleanShutdown(b []byte) int64 {
	text, ok := strings.CutSuffix(string(b), "\n")
	if !ok {
		return -1
	}
	n, err := strconv.ParseInt(text, 10, 64)
	if err != nil || n < 0 || strconv.FormatInt(n, 10) != text {
		return -1 // not what Close writes ("+5", "007")
	}
	return n
}

// laterIndexed reports, for each segment, whether some later segment has a non-empty index or
// time-index file. Index entries are written only after a sync completed (Sync, EndSync,
// Close, or recovery after it fdatasync'ed every earlier segment), and any sync that could
// write a later segment's entries began after the earlier segments were sealed and so
// fdatasync'ed them first (see recover). Such a file is proof that every earlier segment was
// wholly synced.
func (l *Log) laterIndexed(bases []int64) []bool {
	out := make([]bool, len(bases))
	seen := false
	for i := len(bases) - 1; i >= 0; i-- {
		out[i] = seen
		for _, suffix := range []string{indexSuffix, timeIndexSuffix} {
			if fi, err := os.Stat(segmentPath(l.dir, bases[i], suffix)); err == nil && fi.Size() > 0 {
				seen = true
			}
		}
	}
	return out
}

// dropBelowCheckpoint removes the segments that lie wholly below the log start offset
// checkpoint (the next segment starts at or below it): retention or DeleteRecordsBefore
// retired them after writing the checkpoint, and a power loss took back the rename. Left in
// place, such a segment could sit before a gap and make the contiguity check below delete
// the live segments after it.
func (l *Log) dropBelowCheckpoint(bases []int64, report *RecoveryReport) ([]int64, error) {
	checkpoint, ok := l.readStartOffset()
	if !ok {
		return bases, nil
	}
	n := 0
	for n+1 < len(bases) && bases[n+1] <= checkpoint {
		n++
	}
	for _, b := range bases[:n] {
		gone := &segment{baseOffset: b}
		if err := gone.removeFiles(l.dir); err != nil {
			return nil, fmt.Errorf("remove segment %d below the log start offset %d: %w", b, checkpoint, err)
		}
		report.DeletedSegments = append(report.DeletedSegments, b)
	}
	return bases[n:], nil
}

// releaseIndexAfterRecovery drops a recovered sealed segment's in-memory index (l.segments
// does not yet end with the active segment, so releaseIndex's check cannot be used).
func (l *Log) releaseIndexAfterRecovery(s *segment) {
	if s.index.onDisk == len(s.index.entries) && s.timeIndex.onDisk == len(s.timeIndex.entries) {
		s.index.entries, s.timeIndex.entries = nil, nil
		s.indexReleased = true
	}
}

// listSegments returns the base offsets of the .log files in l.dir, removing index files
// whose log is gone (a crash during deletion).
func (l *Log) listSegments() ([]int64, error) {
	if err := removeRetiredIn(l.dir); err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(l.dir)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", l.dir, err)
	}
	logs := map[int64]bool{}
	var orphans []string
	for _, e := range entries {
		base, suffix, ok := parseSegmentName(e.Name())
		if !ok {
			continue
		}
		if suffix == logSuffix {
			logs[base] = true
		}
	}
	for _, e := range entries {
		base, suffix, ok := parseSegmentName(e.Name())
		if ok && suffix != logSuffix && !logs[base] {
			orphans = append(orphans, e.Name())
		}
	}
	for _, name := range orphans {
		if err := os.Remove(l.dir + "/" + name); err != nil {
			return nil, fmt.Errorf("remove orphan index %s: %w", name, err)
		}
	}
	bases := make([]int64, 0, len(logs))
	for b := range logs {
		bases = append(bases, b)
	}
	sort.Slice(bases, func(i, j int) bool { return bases[i] < bases[j] })
	return bases, nil
}

func fileSize(f *os.File) (int64, error) {
	fi, err := f.Stat()
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}

// readWhole reads a small file (an index) through the FileIO.
func readWhole(fio ring.FileIO, x *lazyFile, limit int64) ([]byte, error) {
	f, err := x.open()
	if err != nil {
		return nil, err
	}
	n, err := fileSize(f)
	if err != nil {
		return nil, err
	}
	if n > limit {
		return nil, fmt.Errorf("%w: %s is %d bytes, more than the log implies (%d)", errIndexCorrupt, f.Name(), n, limit)
	}
	b := make([]byte, n)
	if err := preadFull(fio, int(f.Fd()), b, 0); err != nil {
		return nil, err
	}
	return b, nil
}

// indexBytesLimit bounds an index file by the number of batches its log can hold.
func indexBytesLimit(logSize int64, entryBytes int64) int64 {
	return (max(logSize, segmentBytesMax)/batch.HeaderSize + 1) * entryBytes
}

// loadIndexes reads and checks both index files of s (size and nextOffset must be set).
func (l *Log) loadIndexes(s *segment, relativeEnd, logSizeBound int64) error {
	if s.indexMissing {
		return fmt.Errorf("%w: index file missing", errIndexCorrupt)
	}
	b, err := readWhole(l.fio, &s.indexFile, indexBytesLimit(s.size, indexEntryBytes))
	if err != nil {
		return err
	}
	entries, err := decodeIndex(b, logSizeBound)
	if err != nil {
		return err
	}
	tb, err := readWhole(l.fio, &s.timeIndexFile, indexBytesLimit(s.size, timeIndexEntryBytes))
	if err != nil {
		return err
	}
	timeEntries, err := decodeTimeIndex(tb, relativeEnd)
	if err != nil {
		return err
	}
	s.index = offsetIndex{entries: entries, onDisk: len(entries)}
	s.timeIndex = timeIndex{entries: timeEntries, onDisk: len(timeEntries)}
	return nil
}

// rescan drops index state after startPos, then scans batches from startPos (whose base offset
// must be expected), CRC-checking each and rebuilding index entries. end is the next
// segment's base offset for a sealed segment, -1 for the active one. The active segment's
// file is cut after the last intact batch. A sealed segment's is cut after a batch ending
// exactly at end (what follows is zero padding), or where the scan stopped when proof does not
// show the segment was synced past that point (a torn tail); otherwise it keeps its bytes, and
// the first bad batch is recorded as a Corruption (see recover). A sealed segment gets its
// final time-index entry. Index files are cut to the entries that are still valid on disk.
func (l *Log) rescan(s *segment, startPos, expected, end int64, proof sealedProof, oldBatches []uint64, report *RecoveryReport) error {
	fileBytes, err := fileSize(s.log)
	if err != nil {
		return fmt.Errorf("segment %d: %w", s.baseOffset, err)
	}
	startRel := expected - s.baseOffset
	s.index.truncateAtPosition(startPos)
	if startPos > 0 {
		s.index.entries = append(s.index.entries, indexEntry{relativeOffset: uint32(startRel), position: uint32(startPos)})
		s.index.onDisk = len(s.index.entries)
	}
	oldTime := append([]timeIndexEntry(nil), s.timeIndex.entries[:s.timeIndex.onDisk]...)
	s.timeIndex.truncateAtOffset(startRel)
	if startPos == 0 {
		s.timeIndex = timeIndex{}
	}
	s.size, s.nextOffset, s.bytesSinceIndex = startPos, expected, 0
	s.maxTimestamp = s.timeIndex.lastTimestamp()
	sc := newBatchScanner(l.fio, s.logFd(), fileBytes)
	var reason error
	for s.size < fileBytes && (end < 0 || s.nextOffset < end) {
		h, err := sc.batchAt(s.size)
		if errors.Is(err, errRecoveryRead) {
			return fmt.Errorf("segment %d at %d: %w", s.baseOffset, s.size, err)
		}
		if err == nil && h.BaseOffset != s.nextOffset && !l.gapAllowed(s.nextOffset, h.BaseOffset) {
			err = fmt.Errorf("base offset %d, expected %d", h.BaseOffset, s.nextOffset)
		}
		if err == nil && h.LastOffset()-s.baseOffset > maxRelativeOffset {
			err = fmt.Errorf("last offset %d too far from segment base", h.LastOffset())
		}
		if err == nil && end >= 0 && h.LastOffset() >= end {
			err = fmt.Errorf("batch offsets [%d, %d] reach the next segment's base %d", h.BaseOffset, h.LastOffset(), end)
		}
		if err == nil && oldBatches != nil && mayBeTorn(s.size, startPos, h, proof) {
			if crc, ok := crcAt(oldBatches, s.size); ok && crc == h.CRC {
				err = fmt.Errorf("%w: CRC %08x, offsets [%d, %d]", errOldBodyUnderNewHeader, crc, h.BaseOffset, h.LastOffset())
			}
		}
		if err != nil {
			reason = fmt.Errorf("segment %d at %d: %w", s.baseOffset, s.size, err)
			break
		}
		s.noteBatch(h, l.cfg.IndexIntervalBytes)
		report.ScannedBatches++
	}
	report.ScannedBytes += s.size - startPos
	switch {
	case end >= 0 && s.nextOffset < end && proof.synced(s.nextOffset):
		l.fenceSealedTail(s, fileBytes, end, reason)
	case s.size < fileBytes:
		keepZeros := end < 0 && l.cfg.PreallocateBytes > 0
		if err := l.dropTail(s, sc, fileBytes, keepZeros, reason, report); err != nil {
			return err
		}
	}
	if end >= 0 {
		s.addFinalTimeEntry()
	}
	// Entries identical to those already in the file need not be rewritten.
	n := 0
	for n < len(oldTime) && n < len(s.timeIndex.entries) && oldTime[n] == s.timeIndex.entries[n] {
		n++
	}
	s.timeIndex.onDisk = n
	return s.truncateIndexFiles()
}

// errOldBodyUnderNewHeader: a re-scanned batch of a recycled file carries, at its position,
// the CRC of the batch the file's previous life had there (batchmap.go): its body is the old
// batch's under a torn new header, and the scan stops as at any torn batch.
var errOldBodyUnderNewHeader = errors.New("the previous life's batch of a recycled file under a new header (torn write)")

// mayBeTorn reports whether the batch h at pos of a re-scan that started at startPos may
// be a torn write: not when an index entry points at it (written only after it was synced),
// nor when proof says it was synced.
func mayBeTorn(pos, startPos int64, h batch.Header, proof sealedProof) bool {
	return !(pos == startPos && startPos > 0) && !proof.synced(h.LastOffset())
}

// sealedProof is what recovery knows about whether a sealed segment was wholly fdatasync'ed.
type sealedProof struct {
	closeEnd     int64 // offsets below it were synced by the last Close (clean-shutdown marker); -1: none
	laterIndexed bool  // a later segment has index entries on disk (see laterIndexed)
	finalEntry   bool  // the segment's own final time-index entry is on disk
}

// synced reports whether the sealed segment is known to have been synced past offset (where
// its re-scan stopped): then a bad batch there is damage, not a torn write.
func (p sealedProof) synced(offset int64) bool {
	return p.laterIndexed || p.finalEntry || offset < p.closeEnd
}

// fenceSealedTail keeps the bytes of sealed segment s from s.size (where the scan stopped,
// short of the next segment's base end) to the end of its file, and records them as a
// Corruption ending at end: reads stop before it, and the segment ends at end, so the log
// stays contiguous and every later segment stays readable.
func (l *Log) fenceSealedTail(s *segment, fileBytes, end int64, reason error) {
	why := "recovery: "
	switch {
	case reason != nil:
		why += reason.Error()
	case fileBytes == 0:
		why += fmt.Sprintf("segment file is empty, the next segment starts at %d", end)
	default:
		why += fmt.Sprintf("segment file ends at offset %d, the next segment starts at %d", s.nextOffset, end)
	}
	l.recordCorruption(Corruption{Segment: s.baseOffset, Position: s.size, Offset: s.nextOffset, NextOffset: end, Reason: why})
	s.size, s.nextOffset = fileBytes, end
}

// dropTail cuts the log file of s at s.size and accounts for what was dropped. With keepZeros
// (the active segment of a log that preallocates) a tail of zeros only stays in the file as
// preallocated space: the log ends where it begins. A tail with any other byte is cut
// whatever keepZeros says, so that nothing past the end of the log can ever continue it
// (a batch that survived a power loss behind a lost one would otherwise follow a new batch
// of the same length written over the lost one).
func (l *Log) dropTail(s *segment, sc *batchScanner, fileBytes int64, keepZeros bool, reason error, report *RecoveryReport) error {
	batches, zero := 0, true
	for pos := s.size; pos < fileBytes; {
		n := int(min(recoveryReadBytes, fileBytes-pos))
		b, err := sc.window(pos, n)
		if err != nil {
			return fmt.Errorf("segment %d: read dropped tail: %w", s.baseOffset, err)
		}
		for _, c := range b {
			if c != 0 {
				zero = false
				break
			}
		}
		if !zero {
			break
		}
		pos += int64(n)
	}
	if !zero {
		batches = 1
		for pos := s.size; pos+batch.HeaderSize <= fileBytes; {
			hb, err := sc.window(pos, batch.HeaderSize)
			if err != nil {
				break
			}
			h, err := batch.ParseHeader(hb)
			if err != nil || pos+batchSize(h) > math.MaxInt64/2 {
				break
			}
			if pos > s.size {
				batches++
			}
			pos += batchSize(h)
		}
	}
	if zero && keepZeros {
		report.ZeroTailBytes += fileBytes - s.size
		s.zeroed, s.zeroAsked = true, fileBytes
		return nil
	}
	// A recycled file's bytes from its earlier life (recycle.go) are cut and counted here
	// too: after the zero padding of a direct-mode block they cannot be told from a torn
	// write, and either way none of them is part of the log.
	report.DroppedBatches += batches
	report.DroppedBytes += fileBytes - s.size
	if report.Corruption == "" && reason != nil && !zero {
		report.Corruption = reason.Error()
	}
	if err := s.log.Truncate(s.size); err != nil {
		return fmt.Errorf("segment %d: cut tail at %d: %w", s.baseOffset, s.size, err)
	}
	return nil
}

// recoverSegment loads a segment's indexes (a missing or corrupt index is rebuilt from the
// log), finds the last index entry whose batch passes its CRC with the offset the entry
// claims, and re-scans from there to the end of the file (see rescan; end is the next
// segment's base, -1 for the active segment). The recovered segment is synced and its
// rebuilt index entries persisted.
func (l *Log) recoverSegment(s *segment, end, closeEnd int64, laterIndexed bool, oldBatches []uint64, report *RecoveryReport) error {
	var err error
	if s.size, err = fileSize(s.log); err != nil {
		return fmt.Errorf("segment %d: %w", s.baseOffset, err)
	}
	// Entries past the end of the file are not corruption here: the walk below drops them.
	if err := l.loadIndexes(s, math.MaxUint32, math.MaxUint32+1); err != nil {
		if !errors.Is(err, errIndexCorrupt) {
			return fmt.Errorf("segment %d: %w", s.baseOffset, err)
		}
		if s.size > 0 {
			report.RebuiltIndexes = append(report.RebuiltIndexes, s.baseOffset)
			l.cfg.Logger.Warn("rebuilding segment index", "dir", l.dir, "segment", s.baseOffset, "reason", err)
		}
		s.index, s.timeIndex = offsetIndex{}, timeIndex{}
	}
	s.indexMissing = false // the files exist now and are rewritten below
	proof := sealedProof{closeEnd: closeEnd, laterIndexed: laterIndexed}
	if n := len(s.timeIndex.entries); end >= 0 && n > 0 {
		// The final entry of a sealed segment is written only after it was wholly synced.
		proof.finalEntry = int64(s.timeIndex.entries[n-1].relativeOffset) == end-s.baseOffset
	}
	sc := newBatchScanner(l.fio, s.logFd(), s.size)
	startPos, expected := int64(0), s.baseOffset
	for {
		e, ok := s.index.last()
		if !ok {
			break
		}
		h, err := sc.batchAt(int64(e.position))
		if errors.Is(err, errRecoveryRead) {
			return fmt.Errorf("segment %d: index entry at %d: %w", s.baseOffset, e.position, err)
		}
		if err == nil && h.BaseOffset == s.baseOffset+int64(e.relativeOffset) {
			startPos, expected = int64(e.position), h.BaseOffset
			break
		}
		s.index.entries = s.index.entries[:len(s.index.entries)-1]
		s.index.onDisk = len(s.index.entries)
	}
	if err := l.rescan(s, startPos, expected, end, proof, oldBatches, report); err != nil {
		return err
	}
	// What the last Close synced (below the end offset in its marker) needs no sync; anything
	// else recovery kept may still be only in the page cache (a process crash, or appends after
	// a clean open whose marker removal a power loss took back), and it is synced before it is
	// called durable.
	closeSynced := closeEnd >= 0 && s.nextOffset <= closeEnd
	if !closeSynced || len(report.RebuiltIndexes) > 0 && report.RebuiltIndexes[len(report.RebuiltIndexes)-1] == s.baseOffset {
		if err := l.fio.Fdatasync(s.logFd()); err != nil {
			return fmt.Errorf("segment %d: sync recovered log: %w", s.baseOffset, err)
		}
	}
	s.markSynced()
	l.indexScratch, err = s.persistIndexes(l.fio, l.indexScratch)
	return err
}
