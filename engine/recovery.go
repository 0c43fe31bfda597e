package engine

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
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
	// RebuiltIndexes lists base offsets of segments whose index was missing or corrupt and
	// was rebuilt from the log.
	RebuiltIndexes []int64
	// DeletedSegments lists segments removed because an earlier closed segment was corrupt
	// (the log must stay contiguous).
	DeletedSegments []int64
	Corruption      string // why the first tail was cut; "" when nothing was
	// Corruptions lists bad batches in sealed segments found by LogConfig.VerifySegments
	// (kept in the log, not cut: see Log.Corruptions).
	Corruptions []Corruption
	// CleanShutdown: the log was closed by Close, so its files were synced and recovery
	// issued no fdatasync.
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
// written). A closed segment that does not end where the next one begins is corrupt: the log
// ends there and later segments are deleted, so the log stays contiguous.
func (l *Log) recover(report *RecoveryReport) error {
	bases, err := l.listSegments()
	if err != nil {
		return err
	}
	marker := filepath.Join(l.dir, cleanShutdownFileName)
	if _, err := os.Stat(marker); err == nil {
		report.CleanShutdown = true
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
	for i, base := range bases {
		s, err := openSegmentFiles(l.dir, base, false)
		if err != nil {
			return err
		}
		l.segments = append(l.segments, s)
		last := i == len(bases)-1
		if err := l.recoverSegment(s, !last, report.CleanShutdown, report); err != nil {
			return err
		}
		if last {
			continue
		}
		if s.nextOffset == bases[i+1] && s.size > 0 {
			l.releaseIndexAfterRecovery(s)
			continue
		}
		if report.Corruption == "" {
			report.Corruption = fmt.Sprintf("segment %d ends at offset %d, next segment starts at %d", base, s.nextOffset, bases[i+1])
		}
		for _, b := range bases[i+1:] {
			gone := &segment{baseOffset: b}
			if err := gone.removeFiles(l.dir); err != nil {
				return fmt.Errorf("remove segment %d after corruption: %w", b, err)
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
		s, err := openSegmentFiles(l.dir, 0, true)
		if err != nil {
			return err
		}
		l.segments = append(l.segments, s)
		if err := syncDir(l.fio, l.dir); err != nil {
			return err
		}
	}
	l.startOffset = l.segments[0].baseOffset
	if err := l.loadStartOffset(); err != nil {
		return err
	}
	report.Segments = len(l.segments)
	if err := l.activate(l.active()); err != nil {
		return err
	}
	l.assertInvariants()
	return nil
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
func readWhole(fio ring.FileIO, f *os.File, limit int64) ([]byte, error) {
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
	b, err := readWhole(l.fio, s.indexFile, indexBytesLimit(s.size, indexEntryBytes))
	if err != nil {
		return err
	}
	entries, err := decodeIndex(b, logSizeBound)
	if err != nil {
		return err
	}
	tb, err := readWhole(l.fio, s.timeIndexFile, indexBytesLimit(s.size, timeIndexEntryBytes))
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
// must be expected), CRC-checking each and rebuilding index entries, and cuts the file after
// the last intact batch. closed adds the final time-index entry of a closed segment. Index
// files are cut to the entries that are still valid on disk.
func (l *Log) rescan(s *segment, startPos, expected int64, closed bool, report *RecoveryReport) error {
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
	for s.size < fileBytes {
		h, err := sc.batchAt(s.size)
		if errors.Is(err, errRecoveryRead) {
			return fmt.Errorf("segment %d at %d: %w", s.baseOffset, s.size, err)
		}
		if err == nil && h.BaseOffset != s.nextOffset {
			err = fmt.Errorf("base offset %d, expected %d", h.BaseOffset, s.nextOffset)
		}
		if err == nil && h.LastOffset()-s.baseOffset > maxRelativeOffset {
			err = fmt.Errorf("last offset %d too far from segment base", h.LastOffset())
		}
		if err != nil {
			reason = fmt.Errorf("segment %d at %d: %w", s.baseOffset, s.size, err)
			break
		}
		s.noteBatch(h, l.cfg.IndexIntervalBytes)
		report.ScannedBatches++
	}
	report.ScannedBytes += s.size - startPos
	if s.size < fileBytes {
		if err := l.dropTail(s, sc, fileBytes, reason, report); err != nil {
			return err
		}
	}
	if closed {
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

// dropTail cuts the log file of s at s.size and accounts for what was dropped.
func (l *Log) dropTail(s *segment, sc *batchScanner, fileBytes int64, reason error, report *RecoveryReport) error {
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
// claims, and re-scans from there to the end of the file. The recovered segment is synced and
// its rebuilt index entries persisted.
func (l *Log) recoverSegment(s *segment, closed, clean bool, report *RecoveryReport) error {
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
	if err := l.rescan(s, startPos, expected, closed, report); err != nil {
		return err
	}
	// After a clean Close the files are synced; otherwise what recovery kept may still be
	// only in the page cache (a process crash), and it is synced before it is called durable.
	if !clean || len(report.RebuiltIndexes) > 0 && report.RebuiltIndexes[len(report.RebuiltIndexes)-1] == s.baseOffset {
		if err := l.fio.Fdatasync(s.logFd()); err != nil {
			return fmt.Errorf("segment %d: sync recovered log: %w", s.baseOffset, err)
		}
	}
	s.markSynced()
	l.indexScratch, err = s.persistIndexes(l.fio, l.indexScratch)
	return err
}
