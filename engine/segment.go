package engine

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/ringlog/ringlog/engine/batch"
	"github.com/ringlog/ringlog/ring"
	"golang.org/x/sys/unix"
)

// File name suffixes; a segment is named by its 20-digit zero-padded base offset.
const (
	logSuffix        = ".log"
	indexSuffix      = ".index"
	timeIndexSuffix  = ".timeindex"
	baseOffsetDigits = 20
)

func segmentPath(dir string, base int64, suffix string) string {
	return filepath.Join(dir, fmt.Sprintf("%020d%s", base, suffix))
}

// parseSegmentName returns the base offset of a segment file name and its suffix.
func parseSegmentName(name string) (base int64, suffix string, ok bool) {
	for _, s := range []string{logSuffix, indexSuffix, timeIndexSuffix} {
		if stem, found := strings.CutSuffix(name, s); found && len(stem) == baseOffsetDigits {
			n, err := strconv.ParseInt(stem, 10, 64)
			if err != nil || n < 0 || stem[0] < '0' || stem[0] > '9' {
				return 0, "", false // a sign ("+0000000000000000001", "-0000000000000000000"): not a name segmentPath makes
			}
			return n, s, true
		}
	}
	return 0, "", false
}

// segment is one .log file with its two indexes. All fields are owned by the log's goroutine.
type segment struct {
	baseOffset int64
	nextOffset int64 // offset after the last complete batch
	size       int64 // logical bytes: complete batches only
	syncedSize int64 // bytes known to be on stable storage
	// syncedNextOffset is nextOffset as of the last sync: index entries up to it may be persisted.
	syncedNextOffset int64
	maxTimestamp     int64 // largest batch MaxTimestamp, noTimestamp when none

	log           *os.File // O_RDWR, buffered: reads, page-cache writes, sendfile source
	index         offsetIndex
	timeIndex     timeIndex
	indexFile     lazyFile
	timeIndexFile lazyFile

	bytesSinceIndex int64
	indexMissing    bool      // an index file did not exist when the segment was opened
	indexReleased   bool      // sealed, index only in its files (see indexcache.go)
	firstAppendAt   time.Time // zero until the first append into this segment (segment.ms)
	// direct is non-nil while this is the active segment in direct mode, and after a roll
	// while its last writes are in flight (sealing).
	direct *directWriter
	// sealing: sealed by a roll whose seal has not finished: its writes in flight or its
	// cut to size (asyncwrite.go, "Rolls").
	sealing bool
	staged  *stagedWrites // non-nil while the log has staged bytes here (stagedwrite.go)
	// namesPending: made of a roll's spare files whose renames to the segment's names are in
	// flight (rollasync.go): the written end does not cross into it meanwhile. spareNames are
	// the files' temporary names (.log, .index, .timeindex) until then.
	namesPending bool
	spareNames   [3]string
	// mapWriting: sealed by a roll whose write of its batch map is in flight (rollasync.go):
	// retention does not retire it meanwhile.
	mapWriting bool

	// Zero-filled space past size (prealloc.go): zero is the last zeroing job (nil when none
	// is pending), zeroAsked the file end it was asked to reach, zeroed whether the file may
	// hold zeros past size.
	zero      *zeroJob
	zeroAsked int64
	zeroed    bool
	// stale: the file is a recycled one (recycle.go) and may hold an old segment's bytes
	// past size, until a seal, Close, truncation or recovery cuts it to size.
	stale bool

	// Batch maps (batchmap.go), kept when the log recycles files. inode is the .log file's
	// (0: unknown). batches is this life's map while the segment is active: the (position,
	// CRC) of every batch from position 0 (nil: not kept, the segment will not be recycled);
	// a roll writes it out and drops it. oldBatches is the previous life's map while the
	// segment is an active recycled file (nil otherwise).
	inode      uint64
	batches    []uint64
	oldBatches []uint64
}

func (s *segment) logFd() int { return int(s.log.Fd()) }

func (s *segment) relative(offset int64) uint32 {
	rel := offset - s.baseOffset
	if rel < 0 || rel > maxRelativeOffset {
		panic(fmt.Sprintf("engine: offset %d not relative to segment %d", offset, s.baseOffset))
	}
	return uint32(rel)
}

// maxRelativeOffset keeps relative offsets in the index's u32 (and Kafka's int32) range; the
// log rolls before a batch would exceed it.
const maxRelativeOffset = 1<<31 - 1

// openSegmentFiles opens (creating if asked) a segment's .log. Its two index files are
// created with a new segment but otherwise opened only while they are read or written (see
// lazyFile), so an idle partition holds one descriptor per segment, not three. recycled: a
// new segment whose .log is a pool file already renamed into place (recycle.go).
func openSegmentFiles(dir string, base int64, create, recycled bool) (*segment, error) {
	flags := os.O_RDWR
	if create && !recycled {
		flags |= os.O_CREATE | os.O_EXCL
	}
	s := &segment{baseOffset: base, nextOffset: base, maxTimestamp: noTimestamp,
		indexFile:     lazyFile{path: segmentPath(dir, base, indexSuffix)},
		timeIndexFile: lazyFile{path: segmentPath(dir, base, timeIndexSuffix)}}
	var err error
	if s.log, err = os.OpenFile(segmentPath(dir, base, logSuffix), flags, 0o644); err != nil {
		return nil, fmt.Errorf("open segment %d: %w", base, err)
	}
	var st unix.Stat_t
	if unix.Fstat(s.logFd(), &st) == nil {
		s.inode = st.Ino
	}
	if !create {
		for _, x := range []*lazyFile{&s.indexFile, &s.timeIndexFile} {
			if _, err := os.Stat(x.path); errors.Is(err, os.ErrNotExist) {
				s.indexMissing = true
			}
		}
		return s, nil
	}
	// A new segment that cannot be created whole leaves no file behind: its .log (created
	// O_EXCL) would make every later roll to the same base offset fail, e.g. after a full
	// disk refused the index file. The files are closed again until a sync writes entries
	// (then they stay open while the segment is active), so a new idle partition holds one
	// descriptor.
	for _, x := range []*lazyFile{&s.indexFile, &s.timeIndexFile} {
		if _, err := x.open(); err != nil {
			s.closeFiles()
			s.removeFiles(dir)
			return nil, fmt.Errorf("open index of segment %d: %w", base, err)
		}
	}
	if err := s.closeIndexFiles(); err != nil {
		s.closeFiles()
		s.removeFiles(dir)
		return nil, fmt.Errorf("close index of segment %d: %w", base, err)
	}
	return s, nil
}

// lazyFile is an index file opened on first use and closed by closeIndexFiles once its
// segment is sealed and written out (or loaded): sealed segments and idle partitions cost
// no index descriptors. Owned by the log's goroutine, like the segment.
type lazyFile struct {
	path string
	f    *os.File
}

// open returns the file, opening (creating) it if it is closed.
func (x *lazyFile) open() (*os.File, error) {
	if x.f == nil {
		f, err := os.OpenFile(x.path, os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			return nil, err
		}
		x.f = f
	}
	return x.f, nil
}

func (x *lazyFile) close() error {
	if x.f == nil {
		return nil
	}
	err := x.f.Close()
	x.f = nil
	return err
}

// closeIndexFiles closes both index files; the next read or write reopens them.
func (s *segment) closeIndexFiles() error {
	return errors.Join(s.indexFile.close(), s.timeIndexFile.close())
}

func (s *segment) closeFiles() error {
	var errs []error
	if s.direct != nil {
		errs = append(errs, s.direct.close())
		s.direct = nil
	}
	if s.log != nil {
		errs = append(errs, s.log.Close())
	}
	errs = append(errs, s.closeIndexFiles())
	return errors.Join(errs...)
}

// removeFiles unlinks the indexes first and the log last, so a crash in between leaves a
// log whose index is rebuilt rather than an index without a log.
func (s *segment) removeFiles(dir string) error {
	var errs []error
	for _, suffix := range []string{indexSuffix, timeIndexSuffix, logSuffix} {
		if err := os.Remove(segmentPath(dir, s.baseOffset, suffix)); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// retiredSuffix marks segment files that retention deleted: renamed (a cheap directory
// operation) on the owner's thread, unlinked by a background goroutine, because unlinking a
// large file frees its blocks synchronously (ext4_evict_inode) and stalled shard loops.
// OpenLog removes any left by a crash.
const retiredSuffix = ".deleted"

// retireFiles renames the segment's files to *.deleted (indexes first, the log last, as
// removeFiles) and unlinks them in the background; pool, when it takes the .log (renames it
// into the log's pool of recycled files, recycle.go), keeps it instead.
func (s *segment) retireFiles(dir string, pool func(*segment) bool) error {
	var errs []error
	var retired []string
	for _, suffix := range []string{indexSuffix, timeIndexSuffix, logSuffix} {
		if suffix == logSuffix && pool(s) {
			continue
		}
		path := segmentPath(dir, s.baseOffset, suffix)
		if err := os.Rename(path, path+retiredSuffix); err != nil {
			if !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
			continue
		}
		retired = append(retired, path+retiredSuffix)
	}
	if len(retired) > 0 {
		go removeRetired(retired)
	}
	return errors.Join(errs...)
}

func removeRetired(paths []string) {
	for _, p := range paths {
		os.Remove(p) // best effort: OpenLog sweeps what is left
	}
}

// leftoverSuffixes name the files OpenLog removes from a partition directory: retired
// segment files, pool files of recycled segments (recycle.go) and the temporary files of
// interrupted atomic writes. The catalog's sweep (onlyLogFiles) counts them as the log's own.
var leftoverSuffixes = [...]string{retiredSuffix, recycleSuffix, tmpSuffix}

// leftoverStem returns name without its leftover suffix, and whether it had one.
func leftoverStem(name string) (string, bool) {
	for _, suffix := range leftoverSuffixes {
		if stem, ok := strings.CutSuffix(name, suffix); ok {
			return stem, true
		}
	}
	return name, false
}

// removeRetiredIn deletes *.deleted files, pool files of recycled segments (*.recycle,
// recycle.go) and the temporary files of interrupted atomic replaces (*.tmp) left in dir.
func removeRetiredIn(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("list %s: %w", dir, err)
	}
	for _, e := range entries {
		if _, leftover := leftoverStem(e.Name()); leftover {
			if err := os.Remove(dir + "/" + e.Name()); err != nil && !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("remove retired %s: %w", e.Name(), err)
			}
		}
	}
	return nil
}

// readAt fills p from the segment at pos, from direct-mode memory where it holds the bytes
// and from the file otherwise. pos+len(p) must not exceed size.
func (s *segment) readAt(fio ring.FileIO, p []byte, pos int64) error {
	if pos < 0 || pos+int64(len(p)) > s.size {
		panic(fmt.Sprintf("engine: readAt [%d,%d) outside segment %d size %d", pos, pos+int64(len(p)), s.baseOffset, s.size))
	}
	if s.direct != nil {
		memStart := s.direct.memoryStart()
		if pos+int64(len(p)) > memStart {
			fileBytes := max(0, memStart-pos)
			s.direct.copyOut(p[fileBytes:], pos+fileBytes)
			p = p[:fileBytes]
		}
	}
	if w := s.staged; w != nil && pos+int64(len(p)) > w.pos {
		fileBytes := max(0, w.pos-pos)
		w.copyOut(p[fileBytes:], pos+fileBytes)
		p = p[:fileBytes]
	}
	return preadFull(fio, s.logFd(), p, pos)
}

func preadFull(fio ring.FileIO, fd int, p []byte, pos int64) error {
	for len(p) > 0 {
		n, err := fio.Pread(fd, p, pos)
		if err != nil {
			return err
		}
		if n == 0 {
			return fmt.Errorf("pread at %d: %w", pos, errShortFile)
		}
		p = p[n:]
		pos += int64(n)
	}
	return nil
}

var errShortFile = errors.New("file shorter than expected")

// pwriteFull writes p at pos, looping on short writes.
func pwriteFull(fio ring.FileIO, fd int, p []byte, pos int64) error {
	for len(p) > 0 {
		n, err := fio.Pwrite(fd, p, pos)
		if err != nil {
			return err
		}
		if n <= 0 {
			return fmt.Errorf("pwrite at %d wrote %d bytes: %w", pos, n, unix.EIO)
		}
		p = p[n:]
		pos += int64(n)
	}
	return nil
}

// pwritevFull writes every buffer in bufs at pos, at most iovecsPerWriteMax per call,
// advancing over short writes. bufs is consumed (its elements are resliced).
func pwritevFull(fio ring.FileIO, fd int, bufs [][]byte, pos int64) error {
	for len(bufs) > 0 {
		batch := bufs[:min(len(bufs), iovecsPerWriteMax)]
		n, err := fio.Pwritev(fd, batch, pos)
		if err != nil {
			return err
		}
		if n <= 0 {
			return fmt.Errorf("pwritev at %d wrote %d bytes: %w", pos, n, unix.EIO)
		}
		pos += int64(n)
		for n > 0 {
			if n >= len(bufs[0]) {
				n -= len(bufs[0])
				bufs = bufs[1:]
				continue
			}
			bufs[0] = bufs[0][n:]
			n = 0
		}
		for len(bufs) > 0 && len(bufs[0]) == 0 {
			bufs = bufs[1:]
		}
	}
	return nil
}

// headerReader reads batch headers through a small window, so that the short scans of a
// lookup (at most an index interval plus one batch) cost one pread rather than one per batch.
// Bytes below a segment's size never change until a truncation, which must call invalidate.
type headerReader struct {
	buf   []byte // headerWindowBytes
	seg   *segment
	start int64
	n     int
}

// headerWindowBytes covers the default index interval (4 KiB) plus a header, twice over.
const headerWindowBytes = 8 << 10

func (r *headerReader) invalidate() { r.seg = nil }

// readHeaderAt parses the batch header at pos (no CRC check).
func (s *segment) readHeaderAt(fio ring.FileIO, r *headerReader, pos int64) (batch.Header, error) {
	if pos+batch.HeaderSize > s.size {
		return batch.Header{}, fmt.Errorf("segment %d: header at %d past size %d: %w", s.baseOffset, pos, s.size, ErrCorruptLog)
	}
	if r.seg != s || pos < r.start || pos+batch.HeaderSize > r.start+int64(r.n) {
		if len(r.buf) < headerWindowBytes {
			r.buf = make([]byte, headerWindowBytes)
		}
		n := int(min(int64(len(r.buf)), s.size-pos))
		r.seg = nil
		if err := s.readAt(fio, r.buf[:n], pos); err != nil {
			return batch.Header{}, fmt.Errorf("segment %d: read header at %d: %w", s.baseOffset, pos, err)
		}
		r.seg, r.start, r.n = s, pos, n
	}
	h, err := batch.ParseHeader(r.buf[pos-r.start : pos-r.start+batch.HeaderSize])
	if err != nil {
		return h, fmt.Errorf("segment %d: header at %d: %w: %w", s.baseOffset, pos, ErrCorruptLog, err)
	}
	if pos+batchSize(h) > s.size {
		return h, fmt.Errorf("segment %d: batch at %d size %d past segment size %d: %w", s.baseOffset, pos, batchSize(h), s.size, ErrCorruptLog)
	}
	return h, nil
}

// findBatch returns the position and header of the batch holding offset (the first batch
// whose last offset is >= offset), scanning forward from the index floor. offset must be in
// [baseOffset, nextOffset).
func (s *segment) findBatch(fio ring.FileIO, r *headerReader, offset int64) (int64, batch.Header, error) {
	pos := s.checkedFloor(fio, r, s.index.floorIndexByOffset(s.relative(offset)))
	for steps := 0; pos < s.size; steps++ {
		h, err := s.readHeaderAt(fio, r, pos)
		if err != nil {
			return 0, h, err
		}
		if h.LastOffset() >= offset {
			return pos, h, nil
		}
		pos += batchSize(h)
	}
	return 0, batch.Header{}, fmt.Errorf("segment %d: offset %d not found below size %d: %w", s.baseOffset, offset, s.size, ErrCorruptLog)
}

// checkedFloor returns the position of index entry i, or of the nearest entry before it,
// whose batch header carries the offset the entry names; 0 (the segment's start, always a
// batch) when none does or i < 0. Index files are advisory and never fsynced: a power loss can
// tear a write in the middle of one while later entries survive, leaving an entry that still
// decodes in order but points inside a batch (recovery checks every entry of the active
// segment, not those of sealed ones). The check costs nothing on the usual path: the header it
// reads is the one the caller reads next, from the same window.
func (s *segment) checkedFloor(fio ring.FileIO, r *headerReader, i int) int64 {
	for ; i >= 0; i-- {
		e := s.index.entries[i]
		h, err := s.readHeaderAt(fio, r, int64(e.position))
		if err == nil && h.BaseOffset == s.baseOffset+int64(e.relativeOffset) {
			return int64(e.position)
		}
	}
	return 0
}

// positionOf returns the position of the first batch whose base offset is >= offset, or
// size when none.
func (s *segment) positionOf(fio ring.FileIO, r *headerReader, offset int64) (int64, error) {
	if offset >= s.nextOffset {
		return s.size, nil
	}
	if offset <= s.baseOffset {
		return 0, nil
	}
	pos, h, err := s.findBatch(fio, r, offset)
	if err != nil {
		return 0, err
	}
	if h.BaseOffset < offset {
		pos += batchSize(h)
	}
	return pos, nil
}

// noteBatch updates the in-memory indexes for a batch about to be placed at s.size.
func (s *segment) noteBatch(h batch.Header, intervalBytes int64) {
	if s.size > 0 && s.bytesSinceIndex >= intervalBytes {
		rel := s.relative(h.BaseOffset)
		if s.maxTimestamp > s.timeIndex.lastTimestamp() {
			s.timeIndex.entries = append(s.timeIndex.entries, timeIndexEntry{timestamp: s.maxTimestamp, relativeOffset: rel})
		}
		s.index.entries = append(s.index.entries, indexEntry{relativeOffset: rel, position: uint32(s.size)})
		s.bytesSinceIndex = 0
	}
	s.bytesSinceIndex += batchSize(h)
	s.size += batchSize(h)
	s.nextOffset = h.LastOffset() + 1
	s.maxTimestamp = max(s.maxTimestamp, h.MaxTimestamp)
}

// noteRecycled is noteBatch's companion for a log that recycles files (batchmap.go), called
// just before it: it records the batch about to be placed at s.size in the segment's own
// batch map, and, when the segment is a recycled file whose previous life had a batch with
// the same CRC at this position (a byte-identical body, or a 2^-32 coincidence), forces an
// index entry at it. Recovery refuses such a batch in its re-scan (it cannot tell it from the
// old body under a torn new header), and the re-scan starts at the last index entry, which
// is written only once the batch is synced.
func (s *segment) noteRecycled(h batch.Header, intervalBytes int64) {
	if s.oldBatches != nil {
		if crc, ok := crcAt(s.oldBatches, s.size); ok && crc == h.CRC {
			s.bytesSinceIndex = max(s.bytesSinceIndex, intervalBytes)
			recycleStats.sameCRC.Add(1)
		}
	}
	if s.batches == nil {
		return
	}
	if len(s.batches) >= batchMapEntriesMax || s.size > maxSegmentPosition {
		s.batches = nil // too many batches to map: this file will not be recycled
		return
	}
	s.batches = append(s.batches, batchMapEntry(s.size, h.CRC))
}

// segmentState is what an append may change, for rolling back a failed write.
type segmentState struct {
	size, nextOffset, maxTimestamp, bytesSinceIndex int64
	indexEntries, timeIndexEntries, batches         int
}

func (s *segment) state() segmentState {
	return segmentState{s.size, s.nextOffset, s.maxTimestamp, s.bytesSinceIndex, len(s.index.entries), len(s.timeIndex.entries), len(s.batches)}
}

func (s *segment) restore(st segmentState) {
	s.size, s.nextOffset, s.maxTimestamp, s.bytesSinceIndex = st.size, st.nextOffset, st.maxTimestamp, st.bytesSinceIndex
	s.index.entries = s.index.entries[:st.indexEntries]
	s.timeIndex.entries = s.timeIndex.entries[:st.timeIndexEntries]
	if s.batches != nil {
		s.batches = s.batches[:st.batches]
	}
}

// persistIndexes writes index entries that describe synced log bytes: the time index first,
// then the offset index, so a crash between them can only leave the offset index behind
// (recovery then scans a little more). scratch is returned for reuse.
func (s *segment) persistIndexes(fio ring.FileIO, scratch []byte) ([]byte, error) {
	syncedRel := s.syncedNextOffset - s.baseOffset
	t := s.timeIndex.onDisk
	for t < len(s.timeIndex.entries) && int64(s.timeIndex.entries[t].relativeOffset) <= syncedRel {
		t++
	}
	if t > s.timeIndex.onDisk {
		scratch = appendTimeIndexEntries(scratch[:0], s.timeIndex.entries[s.timeIndex.onDisk:t])
		f, err := s.timeIndexFile.open()
		if err == nil {
			err = pwriteFull(fio, int(f.Fd()), scratch, int64(s.timeIndex.onDisk)*timeIndexEntryBytes)
		}
		if err != nil {
			return scratch, fmt.Errorf("segment %d: write time index: %w", s.baseOffset, err)
		}
		s.timeIndex.onDisk = t
	}
	o := s.index.onDisk
	for o < len(s.index.entries) && int64(s.index.entries[o].position) < s.syncedSize {
		o++
	}
	if o > s.index.onDisk {
		scratch = appendIndexEntries(scratch[:0], s.index.entries[s.index.onDisk:o])
		f, err := s.indexFile.open()
		if err == nil {
			err = pwriteFull(fio, int(f.Fd()), scratch, int64(s.index.onDisk)*indexEntryBytes)
		}
		if err != nil {
			return scratch, fmt.Errorf("segment %d: write index: %w", s.baseOffset, err)
		}
		s.index.onDisk = o
	}
	return scratch, nil
}

// markSynced records that everything appended so far is on stable storage.
func (s *segment) markSynced() {
	s.syncedSize = s.size
	s.syncedNextOffset = s.nextOffset
}

// truncateIndexFiles cuts the index files to the entries marked on disk (only when they are
// longer: a needless truncate-to-zero makes ext4 flush the file on close).
func (s *segment) truncateIndexFiles() error {
	for _, x := range []struct {
		f    *lazyFile
		size int64
	}{{&s.indexFile, int64(s.index.onDisk) * indexEntryBytes}, {&s.timeIndexFile, int64(s.timeIndex.onDisk) * timeIndexEntryBytes}} {
		f, err := x.f.open()
		if err != nil {
			return fmt.Errorf("segment %d: %w", s.baseOffset, err)
		}
		have, err := fileSize(f)
		if err != nil {
			return fmt.Errorf("segment %d: %w", s.baseOffset, err)
		}
		if have == x.size {
			continue
		}
		if err := f.Truncate(x.size); err != nil {
			return fmt.Errorf("segment %d: truncate %s: %w", s.baseOffset, f.Name(), err)
		}
	}
	return nil
}

// batchSize is a batch's total byte size (12 + batchLength) as a file-position type.
func batchSize(h batch.Header) int64 { return int64(h.Size()) }

// addFinalTimeEntry appends (max timestamp, next offset) when the time index does not yet
// carry the segment's maximum: the last entry of a closed segment holds its max timestamp.
func (s *segment) addFinalTimeEntry() {
	if s.maxTimestamp > s.timeIndex.lastTimestamp() {
		s.timeIndex.entries = append(s.timeIndex.entries, timeIndexEntry{timestamp: s.maxTimestamp, relativeOffset: s.relative(s.nextOffset)})
	}
}
