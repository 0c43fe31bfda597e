package engine

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/ringlog/ringlog/engine/batch"
	"github.com/ringlog/ringlog/ring"

	"golang.org/x/sys/unix"
)

// Sentinel errors callers act on.
var (
	// ErrOffsetOutOfRange: a read or truncation below the log start offset or above the log
	// end offset.
	ErrOffsetOutOfRange = errors.New("offset out of range")
	// ErrLogFailed: an fdatasync (or the directory fsync after a roll) failed. The kernel may have dropped the
	// dirty pages, so retrying could report durability that does not exist; the log accepts
	// no more appends and must be reopened (which re-runs recovery).
	ErrLogFailed = errors.New("log failed: a sync failed, the partition accepts no more writes")
	// ErrInvalidBatch: an append was given bytes that are not one valid v2 batch.
	ErrInvalidBatch = errors.New("invalid batch")
	// ErrBatchTooLarge: a well-formed batch that can never fit a segment of this log, or a
	// produced batch over the topic's max.message.bytes (Kafka's RecordTooLarge /
	// MESSAGE_TOO_LARGE); retrying cannot help. It comes wrapped together with
	// ErrInvalidBatch.
	ErrBatchTooLarge = errors.New("batch too large")
	// ErrCorruptLog: stored bytes failed a check on read.
	ErrCorruptLog = errors.New("corrupt log data")
	// ErrTimestampNotFound: no record has a timestamp at or after the one asked for.
	ErrTimestampNotFound = errors.New("no record at or after timestamp")
	// ErrClosed: the log was closed.
	ErrClosed = errors.New("log closed")
)

// Special timestamps for OffsetForTimestamp (Kafka's ListOffsets values).
const (
	TimestampLatest   int64 = -1
	TimestampEarliest int64 = -2
)

// Log is one partition's log: an ordered list of segments, the last one active.
//
// A Log is owned by one goroutine (its shard); no method may be called concurrently, and
// no method takes a lock.
//
// Durability: AppendBatches returns after its bytes are written to the file (page cache in
// page-cache mode, the device in direct mode) and are readable. They are durable once
// SyncedOffset() is past them, which Flush (per the flush policy) or Sync makes happen with one
// fdatasync for everything appended since the last sync — the group commit. With FlushAlways,
// call Flush after a loop turn's appends and acknowledge them when it returns nil.
type Log struct {
	dir  string
	cfg  LogConfig
	fio  ring.FileIO
	mode StorageMode

	segments    []*segment // sorted by base offset, contiguous; the last is active
	startOffset int64      // log start offset: >= segments[0].baseOffset

	unsyncedSegments []*segment // sealed by a roll, not yet fdatasync'ed; oldest first
	// dirGen counts rolls (new segment files in dir); dirSyncedGen is the dirGen the last
	// directory fsync covered. A roll no longer fsyncs the directory on the owner's thread
	// (on ext4 that can wait behind writeback for tens of milliseconds): the next Sync or
	// BeginSync does it together with the data, before anything counts as synced.
	dirGen, dirSyncedGen uint64
	loadedIndexes        []*segment // sealed segments whose index was reloaded, oldest first
	unsyncedMessages     int64
	oldestUnsynced       time.Time // time of the first append since the last sync
	leaderEpoch          int32     // rewritten into appended batches when >= 0
	failed               error     // sticky, wraps ErrLogFailed
	closed               bool
	producers            producerState // idempotent producers' sequences (producerstate.go)
	producerHeaders      []batch.Header
	snapshots            []int64 // offsets of the .snapshot files in dir, ascending
	unsyncedSnapshot     int64   // offset of the snapshot the next sync must fdatasync; -1: none
	durableSnapshot      int64   // newest snapshot a completed sync covered; -1: none
	snapshotScratch      []byte

	scrub       scrubCursor  // where the next Scrub continues (scrub.go)
	cleaner     cleanerState // compaction (compact.go)
	corruptions []Corruption // bad batches found in sealed segments, by offset

	headers      headerReader // header window for lookups; invalidated by truncation
	batchScratch []byte       // whole batches for timestamp lookups
	indexScratch []byte
	// syncCoversSpare and syncFdsSpare are the arrays of the last finished SyncTicket,
	// reused by the next BeginSync (syncasync.go).
	syncCoversSpare []syncedPoint
	syncFdsSpare    []int
	syncDups        uint64 // segment descriptors BeginSync duplicated (SyncDups)
	iovecs          [][]byte
	one             [1][]byte
	writeback       writebackCursor // LogConfig.Writeback's position (writeback.go)

	// Asynchronous direct-mode writes (asyncwrite.go); aw nil: appends write synchronously.
	aw        AsyncWriter
	fixedIO   FixedBufferWriter // aw, when it registers fixed buffers; nil otherwise
	onWritten func()
	awIdle    func() bool   // no write op in flight, bound once
	truncator FileTruncator // aw, when it cuts files off the loop; nil otherwise
	// sealing lists the segments a roll left with writes in flight, oldest first;
	// sealsInFlight counts the cuts to size started and not completed (asyncwrite.go,
	// "Rolls").
	sealing       []*segment
	sealsInFlight int
	sealsIdle     func() bool // sealsInFlight == 0, bound once
	groups        writeGroups // the write groups in flight
	chunks        chunkPool   // direct mode's chunks ready for reuse, shared by its segments' writers
	writtenNext   int64       // EndOffset while the active segment has staged bytes

	// Staged page-cache appends (stagedwrite.go); staging false: appends write at once.
	staging   bool
	stageNext bool         // set by AppendBatchesStaged for the duration of its append
	staged    stagedWrites // staged, not written; always in the active segment

	zeroJobs sync.WaitGroup // background zeroing goroutines (prealloc.go)

	retention retentionPass // a retention pass whose checkpoint is in flight (retention.go)
	snapshot  snapshotPass  // a roll's producer snapshot in flight (snapshotasync.go)
	fileJobs  fileJobs      // unlinks and renames in flight through the ring (fileasync.go)
	spare     rollSpare     // the next segment's files, made off the loop (rollasync.go)

	// recyclePool holds the paths of retired .log files kept for new segments (recycle.go),
	// at most cfg.RecycleSegments.
	recyclePool []pooledFile
	// recyclePreparing counts retired files whose pool entry runs in the background
	// (poolRetired); recycleReady brings them back; recycleGen is bumped by emptyPool, whose
	// files still in preparation are then released. poolJobs waits for them at Close.
	recyclePreparing int
	recycleReady     chan pooledFile
	recycleGen       int
	poolJobs         sync.WaitGroup
	// dirs numbers the directory's fsyncs, so that a pool file's map name waits for one
	// (dirsync.go); poolDirSyncing: syncPoolDir's fsync is in flight; poolMissed: the last
	// spare took a new file while pool files waited for one (prepareSpare).
	dirs                       dirSyncs
	poolDirSyncing, poolMissed bool
}

// AppendResult describes a successful (or partially successful) AppendBatches.
type AppendResult struct {
	FirstOffset int64 // base offset given to the first batch
	LastOffset  int64 // last offset of the last batch appended
	Batches     int   // batches appended; < len(batches) only together with an error
	// Duplicate: every batch was an idempotent producer's retry of batches already in the
	// log. Nothing was appended; FirstOffset and LastOffset are the original batches'.
	Duplicate bool
}

// OpenLog opens (creating if needed) the log in dir, running recovery. The report says what
// recovery found and dropped.
func OpenLog(dir string, cfg LogConfig, fio ring.FileIO) (*Log, RecoveryReport, error) {
	var report RecoveryReport
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, report, fmt.Errorf("open log %s: %w", dir, err)
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return nil, report, fmt.Errorf("open log: %w", err)
	}
	// A new partition directory is made durable in its parent before anything is put in it.
	if _, err := mkdirDurable(fio, dir); err != nil {
		return nil, report, fmt.Errorf("open log %s: %w", dir, err)
	}
	l := &Log{dir: dir, cfg: cfg, fio: fio, mode: cfg.Storage, leaderEpoch: -1, scrub: scrubCursor{segment: -1}, unsyncedSnapshot: -1, durableSnapshot: -1}
	if l.mode == StorageDirect {
		if err := probeDirect(dir); err != nil {
			cfg.Logger.Warn("direct storage unavailable, falling back to page-cache", "dir", dir, "err", err)
			l.mode = StoragePageCache
		}
	}
	start := cfg.Clock()
	if err := l.recover(&report); err != nil {
		l.closeFiles()
		return nil, report, fmt.Errorf("open log %s: %w", dir, err)
	}
	if err := l.loadProducerState(&report); err != nil {
		l.closeFiles()
		return nil, report, fmt.Errorf("open log %s: %w", dir, err)
	}
	if cfg.VerifySegments {
		if _, err := l.VerifySealed(); err != nil {
			l.closeFiles()
			return nil, report, fmt.Errorf("open log %s: verify segments: %w", dir, err)
		}
		report.Corruptions = l.Corruptions()
	}
	report.Duration = cfg.Clock().Sub(start)
	if report.DroppedBytes > 0 || len(report.RebuiltIndexes) > 0 || len(report.DeletedSegments) > 0 {
		cfg.Logger.Warn("log recovered with losses", "dir", dir, "dropped_batches", report.DroppedBatches,
			"dropped_bytes", report.DroppedBytes, "rebuilt_indexes", len(report.RebuiltIndexes),
			"deleted_segments", len(report.DeletedSegments), "reason", report.Corruption)
	}
	return l, report, nil
}

// Mode is the storage mode in effect (direct may have fallen back to page-cache).
func (l *Log) Mode() StorageMode { return l.mode }

// Dir is the log's directory.
func (l *Log) Dir() string { return l.dir }

func (l *Log) active() *segment { return l.segments[len(l.segments)-1] }

// StartOffset is the first offset that can be read.
func (l *Log) StartOffset() int64 { return l.startOffset }

// EndOffset is the log end offset: the offset after the last record whose bytes are
// written. It is the offset the next appended record gets, except while asynchronous
// direct-mode writes are in flight (see StagedEndOffset and asyncwrite.go).
func (l *Log) EndOffset() int64 {
	if l.directPending() || l.staged.pending() {
		return l.writtenNext
	}
	return l.active().nextOffset
}

// SyncedOffset is the offset below which every record is on stable storage.
func (l *Log) SyncedOffset() int64 {
	if len(l.unsyncedSegments) > 0 {
		return l.unsyncedSegments[0].syncedNextOffset
	}
	return l.active().syncedNextOffset
}

// Size is the total byte size of all segments.
func (l *Log) Size() int64 {
	var n int64
	for _, s := range l.segments {
		n += s.size
	}
	return n
}

// SegmentCount is the number of segments, the active one included.
func (l *Log) SegmentCount() int { return len(l.segments) }

// SetLeaderEpoch makes appends rewrite each batch's partition leader epoch to epoch; a
// negative epoch keeps the producer's value.
func (l *Log) SetLeaderEpoch(epoch int32) { l.leaderEpoch = epoch }

// Err returns the sticky failure, if any (wraps ErrLogFailed).
func (l *Log) Err() error { return l.failed }

func (l *Log) writable() error {
	if l.closed {
		return ErrClosed
	}
	return l.failed
}

func (l *Log) fail(err error) error {
	if l.failed == nil {
		l.failed = fmt.Errorf("%w: %w", ErrLogFailed, err)
		l.cfg.Logger.Error("log failed, refusing further writes", "dir", l.dir, "err", err)
	}
	return l.failed
}

// Append appends one batch; see AppendBatches.
func (l *Log) Append(batch []byte) (int64, error) {
	l.one[0] = batch
	res, err := l.AppendBatches(l.one[:])
	l.one[0] = nil
	return res.FirstOffset, err
}

// AppendBatches validates every batch (CRC-32C, sizes, every record: see
// batch.ValidateProduce; and the producer sequence of idempotent batches: see
// producerstate.go) before writing any, then assigns
// offsets by rewriting each batch's base offset (and leader epoch, see SetLeaderEpoch) in
// place and writes them with one pwritev per segment touched. When every batch is an
// idempotent producer's duplicate, nothing is written and the result carries the original
// offsets with Duplicate set. The callers' slices are not retained. A roll in the middle syncs the old segment first. On error the log is as before
// the failed write: batches [0, res.Batches) were appended, the rest were not.
func (l *Log) AppendBatches(batches [][]byte) (AppendResult, error) {
	return l.appendBatches(batches, true)
}

// AppendReplicated appends batches that already carry their offsets and leader epochs (a
// follower copying its leader): nothing is rewritten, and the batches must continue the log
// exactly (the first base offset is EndOffset, each next one follows the previous last
// offset), else ErrInvalidBatch and nothing is written. Durability is as for AppendBatches.
// With asynchronous direct writes it returns once the batches are written, so that the end
// offset a follower reports to its leader is on its device.
func (l *Log) AppendReplicated(batches [][]byte) (AppendResult, error) {
	res, err := l.appendBatches(batches, false)
	if err == nil {
		err = l.awaitWrites()
	}
	return res, err
}

func (l *Log) appendBatches(batches [][]byte, assign bool) (AppendResult, error) {
	if !l.stageNext && l.staged.pending() {
		l.WriteStaged() // staged bytes go first; a failure fails the log, seen just below
	}
	res := AppendResult{FirstOffset: l.StagedEndOffset(), LastOffset: l.StagedEndOffset() - 1}
	if err := l.writable(); err != nil {
		return res, err
	}
	next := l.StagedEndOffset()
	for i, b := range batches {
		if err := l.validate(b, assign); err != nil {
			return res, fmt.Errorf("append batch %d of %d: %w", i, len(batches), err)
		}
		if !assign {
			h, _ := batch.ParseHeader(b)
			if h.BaseOffset != next {
				return res, fmt.Errorf("append batch %d of %d: %w: base offset %d, log continues at %d",
					i, len(batches), ErrInvalidBatch, h.BaseOffset, next)
			}
			next = h.LastOffset() + 1
		}
	}
	if assign {
		if dup, ok, err := l.checkProducers(batches); err != nil || ok {
			return dup, err
		}
	}
	if err := l.makeRoom(batches); err != nil { // asyncwrite.go: bound what is staged
		return res, err
	}
	reserved, err := l.reserveDisk(batches)
	if err != nil {
		return res, err
	}
	defer func() { l.releaseDisk(reserved, batches[res.Batches:]) }()
	now := l.cfg.Clock()
	for i := 0; i < len(batches); {
		s := l.active()
		before := s.state()
		j := i
		for ; j < len(batches); j++ {
			h, _ := batch.ParseHeader(batches[j])
			if l.shouldRoll(s, h, now) {
				break
			}
			if assign {
				batch.SetBaseOffset(batches[j], s.nextOffset)
				if l.leaderEpoch >= 0 {
					batch.SetLeaderEpoch(batches[j], l.leaderEpoch)
				}
				h.BaseOffset = s.nextOffset
			}
			if s.batches != nil || s.oldBatches != nil {
				s.noteRecycled(h, l.cfg.IndexIntervalBytes) // batchmap.go
			}
			s.noteBatch(h, l.cfg.IndexIntervalBytes)
		}
		if j == i {
			if err := l.roll(); err != nil {
				return res, fmt.Errorf("append: roll: %w", storageWriteError(l.dir, err))
			}
			continue
		}
		if l.stageNext && s.direct == nil {
			l.stage(s, batches[i:j], before) // stagedwrite.go: written by WriteStaged
		} else if err := l.writeBatches(s, batches[i:j], before.size, before.nextOffset); err != nil {
			s.restore(before)
			if s.direct != nil && l.aw != nil {
				// Nothing was staged: the wait for earlier writes failed (the log failed).
				return res, fmt.Errorf("append to segment %d at %d: %w", s.baseOffset, before.size, err)
			}
			if terr := s.log.Truncate(before.size); terr != nil {
				l.cfg.Logger.Warn("truncate after failed write", "dir", l.dir, "err", terr)
			}
			return res, fmt.Errorf("append to segment %d at %d: %w", s.baseOffset, before.size, storageWriteError(l.dir, err))
		}
		if !l.stageNext {
			l.noteWritten(s, before.size)
		}
		l.noteProducers(batches[i:j])
		if s.firstAppendAt.IsZero() {
			s.firstAppendAt = now
		}
		if l.unsyncedMessages == 0 {
			l.oldestUnsynced = now
		}
		l.unsyncedMessages += s.nextOffset - before.nextOffset
		res.Batches += j - i
		res.LastOffset = s.nextOffset - 1
		i = j
	}
	l.zeroAhead(l.active()) // prealloc.go
	l.prepareSpare()        // rollasync.go
	l.assertInvariants()
	return res, nil
}

// reserveDisk takes the bytes of batches from the data directory's free-space guard (see
// LogConfig.Disk); it returns whether it reserved anything.
func (l *Log) reserveDisk(batches [][]byte) (bool, error) {
	if l.cfg.Disk == nil {
		return false, nil
	}
	if err := l.cfg.Disk.Reserve(totalBytes(batches)); err != nil {
		l.emptyPool() // retired files kept for reuse (recycle.go) give their space back
		return false, fmt.Errorf("append %d batches: %w", len(batches), err)
	}
	return true, nil
}

// releaseDisk returns the reservation of the batches that were not written.
func (l *Log) releaseDisk(reserved bool, unwritten [][]byte) {
	if reserved && len(unwritten) > 0 {
		l.cfg.Disk.Release(totalBytes(unwritten))
	}
}

func totalBytes(batches [][]byte) int64 {
	var n int64
	for _, b := range batches {
		n += int64(len(b))
	}
	return n
}

// validate checks one batch before anything is written. A produced batch (produce true)
// must pass batch.ValidateProduce: every record is walked (and a zstd batch decompressed,
// bounded by batch.MaxDecompressedBytes) so that the log never acknowledges bytes a consumer
// cannot read. A replicated batch is checked by the stored rule (CRC, header, counts that
// compaction may have thinned).
func (l *Log) validate(b []byte, produce bool) error {
	var h batch.Header
	var err error
	if produce {
		h, err = batch.ValidateProduce(b)
	} else {
		h, err = batch.ValidateStored(b)
	}
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidBatch, err)
	}
	if batchSize(h) != int64(len(b)) {
		return fmt.Errorf("%w: %d bytes given, header says %d", ErrInvalidBatch, len(b), batchSize(h))
	}
	if h.LastOffsetDelta < 0 || h.LastOffsetDelta > maxRelativeOffset/2 {
		return fmt.Errorf("%w: last offset delta %d", ErrInvalidBatch, h.LastOffsetDelta)
	}
	if batchSize(h) > l.cfg.SegmentBytes {
		return fmt.Errorf("%w: %w: %d bytes exceed segment.bytes %d", ErrInvalidBatch, ErrBatchTooLarge, batchSize(h), l.cfg.SegmentBytes)
	}
	if produce && l.cfg.MaxMessageBytes > 0 && batchSize(h) > l.cfg.MaxMessageBytes {
		return fmt.Errorf("%w: %w: %d bytes exceed max.message.bytes %d", ErrInvalidBatch, ErrBatchTooLarge, batchSize(h), l.cfg.MaxMessageBytes)
	}
	return nil
}

func (l *Log) shouldRoll(s *segment, h batch.Header, now time.Time) bool {
	if s.size == 0 {
		return false
	}
	if s.size+batchSize(h) > l.cfg.SegmentBytes {
		return true
	}
	if s.nextOffset+int64(h.LastOffsetDelta)-s.baseOffset > maxRelativeOffset {
		return true
	}
	return l.cfg.SegmentMs > 0 && !s.firstAppendAt.IsZero() && now.Sub(s.firstAppendAt) >= time.Duration(l.cfg.SegmentMs)*time.Millisecond
}

func (l *Log) writeBatches(s *segment, batches [][]byte, pos, prevNext int64) error {
	if s.direct != nil && l.aw != nil {
		return l.writeAsync(s, batches, pos, prevNext)
	}
	if s.direct != nil {
		return s.direct.write(l.fio, batches, pos)
	}
	l.iovecs = append(l.iovecs[:0], batches...)
	err := pwritevFull(l.fio, s.logFd(), l.iovecs, pos)
	clear(l.iovecs)
	return err
}

// Flush syncs if the flush policy says a sync is due (FlushAlways with anything unsynced,
// FlushMessages reached, or FlushMs elapsed since the oldest unsynced append). The owner
// calls it after each loop turn's appends and on a FlushMs timer.
func (l *Log) Flush() error {
	if err := l.writable(); err != nil {
		return err
	}
	if l.unsyncedMessages == 0 {
		return nil
	}
	due := l.cfg.FlushAlways ||
		(l.cfg.FlushMessages > 0 && l.unsyncedMessages >= l.cfg.FlushMessages) ||
		(l.cfg.FlushMs > 0 && l.cfg.Clock().Sub(l.oldestUnsynced) >= time.Duration(l.cfg.FlushMs)*time.Millisecond)
	if !due {
		return nil
	}
	return l.Sync()
}

// FlushDeadline is when Flush becomes due under flush.ms for what is unsynced now; ok is false
// when flush.ms is off or nothing is unsynced. The owner arms its timer with it.
func (l *Log) FlushDeadline() (deadline time.Time, ok bool) {
	if l.cfg.FlushMs <= 0 || l.unsyncedMessages == 0 || l.failed != nil || l.closed {
		return time.Time{}, false
	}
	return l.oldestUnsynced.Add(time.Duration(l.cfg.FlushMs) * time.Millisecond), true
}

// Sync makes everything appended so far durable: one fdatasync for the active segment (plus
// one per segment sealed by a roll since the last sync). A failed fdatasync fails the log
// for good (ErrLogFailed).
func (l *Log) Sync() error {
	if err := l.writable(); err != nil {
		return err
	}
	if err := l.awaitWrites(); err != nil {
		return err
	}
	// A roll's producer snapshot, taken before the directory's sync: one whose rename
	// completes while this waits on the device (snapshotasync.go) is the next sync's.
	snapFd, snapshot, err := l.openUnsyncedSnapshot()
	if err != nil {
		return l.fail(fmt.Errorf("sync: %w", err))
	}
	if snapFd >= 0 {
		defer unix.Close(snapFd)
	}
	if gen := l.dirGen; gen > l.dirSyncedGen {
		noteSyncs(syncSegmentDir, 1)
		seq := l.dirs.start()
		if err := syncDir(l.fio, l.dir); err != nil {
			return l.fail(fmt.Errorf("sync: %w", err))
		}
		l.dirSyncedGen = gen
		l.dirs.done(seq)
	}
	for len(l.unsyncedSegments) > 0 {
		if err := l.syncSegment(l.unsyncedSegments[0], true); err != nil {
			return err
		}
		l.unsyncedSegments = l.unsyncedSegments[1:]
	}
	if snapFd >= 0 {
		noteSyncs(syncSnapshot, 1)
		if err := l.fio.Fdatasync(snapFd); err != nil {
			return l.fail(fmt.Errorf("sync: fdatasync producer snapshot: %w", err))
		}
	}
	s := l.active()
	if s.syncedSize != s.size || s.syncedNextOffset != s.nextOffset {
		if err := l.syncSegment(s, false); err != nil {
			return err
		}
	}
	l.unsyncedMessages = 0
	if snapshot >= 0 {
		l.snapshotDurable(snapshot) // only now: the log reaches its offset durably too
	}
	return nil
}

// roll seals the active segment and starts a new one at the log end offset. The sealed
// segment is not synced here (that would stall appends for a whole segment's writeback): the
// next Sync (Flush per policy, or Close) fdatasyncs it, and the directory, before the active
// segment, so SyncedOffset never passes unsynced bytes. With asynchronous direct writes the
// roll does not wait for the old segment's writes either: they complete, and its seal runs,
// in the background (asyncwrite.go, "Rolls").
func (l *Log) roll() error {
	old := l.active()
	inFlight := l.sealInFlight(old)
	if !inFlight {
		if l.aw != nil && old.direct != nil && old.direct.pending() {
			sealStats.waited.Add(1)
		}
		if err := l.awaitWrites(); err != nil { // seal truncates: nothing may be in flight
			return err
		}
	}
	s := l.takeSpare(old.nextOffset) // rollasync.go: files made before the roll, off the loop
	if s == nil {
		var err error
		if s, err = l.newSegment(old.nextOffset); err != nil {
			return err
		}
	}
	s.markSynced()
	if err := l.activate(s); err != nil {
		l.abandonNewSegment(s)
		return err
	}
	if inFlight {
		if old.direct.pending() {
			sealStats.inFlight.Add(1)
		}
		l.sealAsync(old)
	} else if err := l.seal(old); err != nil {
		l.abandonNewSegment(s)
		return errors.Join(err, l.activate(old))
	}
	l.unsyncedSegments = append(l.unsyncedSegments, old)
	l.segments = append(l.segments, s)
	if s.spareNames[0] != "" {
		l.nameSegment(s) // dirGen moves when its names are in place
	} else {
		l.dirGen++ // the new segment's directory entry is made durable by the next sync
	}
	l.startOwnBatchMap(old)
	l.snapshotAfterRoll()
	return nil
}

// abandonNewSegment removes the files of s, a roll's new segment, after the roll failed.
func (l *Log) abandonNewSegment(s *segment) {
	if s.spareNames[0] != "" {
		l.abandonSpareSegment(s)
		return
	}
	s.closeFiles()
	s.removeFiles(l.dir)
}

// seal ends appends to s: its file is cut to its logical length (dropping direct mode's zero
// padding of the last block and preallocated zeros, see prealloc.go) and a direct writer
// retired, its chunks going to the log's pool for the next segment's writer.
func (l *Log) seal(s *segment) error {
	if err := s.trimZeros(false); err != nil {
		return fmt.Errorf("seal: %w", err)
	}
	if s.direct != nil {
		err := s.direct.retire()
		s.direct = nil
		if err != nil {
			return fmt.Errorf("seal segment %d: %w", s.baseOffset, err)
		}
	}
	// No sync_file_range hint here: it submits the writeback on the caller's thread, and
	// under writeback throttling (wbt) that stalled a shard loop for a second at a time in
	// the 10-minute soak. The kernel flushers or the next (asynchronous) fdatasync do it.
	return nil
}

// syncSegment fdatasyncs s and then persists its index entries (closed adds the final
// time-index entry). A failed fdatasync fails the log.
func (l *Log) syncSegment(s *segment, closed bool) error {
	noteSyncs(syncSegmentData, 1)
	if err := l.fio.Fdatasync(s.logFd()); err != nil {
		return l.fail(fmt.Errorf("fdatasync segment %d: %w", s.baseOffset, err))
	}
	s.markSynced()
	if closed {
		s.addFinalTimeEntry()
	}
	var err error
	if l.indexScratch, err = s.persistIndexes(l.fio, l.indexScratch); err != nil {
		// The index is advisory: recovery re-scans from the last entry that made it.
		l.cfg.Logger.Warn("index write failed", "dir", l.dir, "err", err)
	}
	if closed {
		l.releaseIndex(s)
	}
	return nil
}

// forgetUnsynced removes s from the unsynced sealed segments (deleted or reactivated).
func (l *Log) forgetUnsynced(s *segment) {
	for i, u := range l.unsyncedSegments {
		if u == s {
			l.unsyncedSegments = append(l.unsyncedSegments[:i], l.unsyncedSegments[i+1:]...)
			return
		}
	}
}

// activate prepares s to take appends.
func (l *Log) activate(s *segment) error {
	s.reclaimZeroJob()
	if l.mode != StorageDirect || s.direct != nil {
		return nil
	}
	w, err := openDirectWriter(l.fio, segmentPath(l.dir, s.baseOffset, logSuffix), s.logFd(), s.size,
		l.cfg.DirectChunkBytes, l.cfg.DirectCacheChunks, &l.chunks)
	if err != nil {
		return fmt.Errorf("activate segment %d: %w", s.baseOffset, err)
	}
	w.fixedIO = l.fixedIO
	s.direct = w
	return nil
}

// segmentFor returns the index of the segment holding offset (the last with base <= offset).
func (l *Log) segmentFor(offset int64) int {
	i := sort.Search(len(l.segments), func(i int) bool { return l.segments[i].baseOffset > offset })
	return max(i-1, 0)
}

// Read returns whole batches starting with the one holding offset, up to maxBytes (at least
// one batch, so a consumer always progresses), from a single segment.
func (l *Log) Read(offset int64, maxBytes int) (ReadResult, error) {
	return l.ReadBounded(offset, maxBytes, l.EndOffset())
}

// ReadBounded is Read that returns only batches whose base offset is below maxOffset (the
// high watermark).
func (l *Log) ReadBounded(offset int64, maxBytes int, maxOffset int64) (ReadResult, error) {
	return l.ReadBoundedInto(nil, offset, maxBytes, maxOffset)
}

// ReadBoundedInto is ReadBounded with the result's pieces in pieces' array when it is large
// enough (pieces[:0] is appended to), so that a caller reusing it reads without allocating.
func (l *Log) ReadBoundedInto(pieces []Piece, offset int64, maxBytes int, maxOffset int64) (ReadResult, error) {
	res := ReadResult{FirstOffset: offset, NextOffset: offset, fio: l.fio}
	if l.closed {
		return res, ErrClosed
	}
	end := l.EndOffset()
	if offset < l.startOffset || offset > end {
		return res, fmt.Errorf("%w: read at %d, log holds [%d, %d)", ErrOffsetOutOfRange, offset, l.startOffset, end)
	}
	maxOffset = min(maxOffset, end)
	if offset >= maxOffset {
		return res, nil
	}
	s := l.segments[l.segmentFor(offset)]
	fence, fenced := Corruption{}, false
	if len(l.corruptions) > 0 {
		l.pruneCorruptions()
		fence, fenced = l.fenceFor(s)
	}
	if fenced && offset >= fence.Offset {
		return res, fmt.Errorf("read at %d: %w", offset, l.corruptReadError(fence))
	}
	if err := l.ensureIndex(s); err != nil {
		return res, fmt.Errorf("read at %d: %w", offset, err)
	}
	pos, first, err := s.findBatch(l.fio, &l.headers, offset)
	if err != nil {
		return res, fmt.Errorf("read at %d: %w", offset, err)
	}
	limit := s.size
	switch {
	case fenced && maxOffset >= fence.Offset:
		limit = fence.Position // headers from there on are not trusted: never walk them
	case maxOffset < s.nextOffset:
		if limit, err = s.positionOf(l.fio, &l.headers, maxOffset); err != nil {
			return res, fmt.Errorf("read at %d: %w", offset, err)
		}
	}
	endPos, err := l.readEnd(s, pos, first, limit, min(int64(max(maxBytes, 0)), segmentBytesMax))
	if err != nil {
		return res, fmt.Errorf("read at %d: %w", offset, err)
	}
	res.FirstOffset = first.BaseOffset
	res.NextOffset = s.nextOffset
	if fenced && endPos == fence.Position {
		res.NextOffset = fence.Offset // the good batches before it are served
	}
	if endPos < s.size && res.NextOffset == s.nextOffset {
		h, err := s.readHeaderAt(l.fio, &l.headers, endPos)
		if err != nil {
			return res, fmt.Errorf("read at %d: %w", offset, err)
		}
		res.NextOffset = h.BaseOffset
	}
	res.Size = endPos - pos
	res.Pieces = l.appendPieces(pieces[:0], s, pos, endPos)
	return res, nil
}

// readEnd finds where a read starting at the batch at pos stops: the end of the last whole
// batch within maxBytes and limit, but at least the first batch.
func (l *Log) readEnd(s *segment, pos int64, first batch.Header, limit, maxBytes int64) (int64, error) {
	if pos+maxBytes >= limit {
		return limit, nil
	}
	upper := pos + maxBytes
	p := max(pos, s.checkedFloor(l.fio, &l.headers, s.index.floorIndexByPosition(uint32(upper))))
	for steps := 0; p < limit; steps++ {
		h, err := s.readHeaderAt(l.fio, &l.headers, p)
		if err != nil {
			return 0, err
		}
		if p+batchSize(h) > upper {
			break
		}
		p += batchSize(h)
	}
	if p == pos {
		p = pos + batchSize(first)
	}
	return p, nil
}

func (l *Log) appendPieces(out []Piece, s *segment, pos, end int64) []Piece {
	if s.direct == nil {
		return append(out, Piece{File: s.log, Position: pos, Size: end - pos})
	}
	memStart := s.direct.memoryStart()
	if pos < memStart {
		stop := min(end, memStart)
		out = append(out, Piece{File: s.log, Position: pos, Size: stop - pos})
		pos = stop
	}
	return s.direct.appendPieces(out, pos, end)
}

// OffsetForTimestamp returns the offset of the first record whose timestamp is >= ts
// (TimestampEarliest and TimestampLatest return the start and end offsets).
func (l *Log) OffsetForTimestamp(ts int64) (int64, error) {
	switch ts {
	case TimestampEarliest:
		return l.startOffset, nil
	case TimestampLatest:
		return l.EndOffset(), nil
	}
	for _, s := range l.segments {
		if s.maxTimestamp < ts || s.nextOffset <= l.startOffset {
			continue
		}
		off, found, err := l.offsetForTimestampIn(s, ts)
		if err != nil || found {
			return off, err
		}
	}
	return -1, fmt.Errorf("%w: %d", ErrTimestampNotFound, ts)
}

var errStopDecode = errors.New("stop")

func (l *Log) offsetForTimestampIn(s *segment, ts int64) (int64, bool, error) {
	if err := l.ensureIndex(s); err != nil {
		return 0, false, err
	}
	rel := s.timeIndex.lowerBound(ts)
	pos := s.checkedFloor(l.fio, &l.headers, s.index.floorIndexByOffset(rel))
	limit := s.size
	if len(l.corruptions) > 0 {
		l.pruneCorruptions()
		if fence, fenced := l.fenceFor(s); fenced {
			limit = fence.Position // a known bad batch: its header is not walked
		}
	}
	for pos < limit {
		h, err := s.readHeaderAt(l.fio, &l.headers, pos)
		if err != nil {
			return 0, false, err
		}
		if h.MaxTimestamp < ts || h.LastOffset() < l.startOffset {
			pos += batchSize(h)
			continue
		}
		if int64(cap(l.batchScratch)) < batchSize(h) {
			l.batchScratch = make([]byte, batchSize(h))
		}
		b := l.batchScratch[:batchSize(h)]
		if err := s.readAt(l.fio, b, pos); err != nil {
			return 0, false, fmt.Errorf("segment %d: read batch at %d: %w", s.baseOffset, pos, err)
		}
		found := int64(-1)
		err = batch.Decode(b, func(offset, recordTs int64, _ *batch.Record) error {
			if recordTs >= ts && offset >= l.startOffset {
				found = offset
				return errStopDecode
			}
			return nil
		})
		if err != nil && !errors.Is(err, errStopDecode) {
			return 0, false, fmt.Errorf("segment %d: decode batch at %d: %w: %w", s.baseOffset, pos, ErrCorruptLog, err)
		}
		if found >= 0 {
			return found, true, nil
		}
		pos += batchSize(h)
	}
	return 0, false, nil
}

// Close syncs and closes the log. A failed log is closed without syncing.
func (l *Log) Close() error {
	if l.closed {
		return nil
	}
	l.awaitSeals()     // a failure fails the log: Close then skips the sync
	l.awaitRetention() // a pass in flight completes: its checkpoint's descriptors close
	l.awaitSnapshot()  // a roll's snapshot in flight is in place (or failed): its scratch is free
	var err error
	if l.failed == nil {
		l.snapshotBlocking() // before Sync, which makes its directory entry durable
		if err = l.Sync(); err == nil {
			err = l.finishActive()
		}
	}
	if l.fileJobsAsync() {
		l.closeSpare() // rollasync.go: unused spare files go
	}
	l.awaitFileJobs() // unlinks and renames in flight (retirements, pruned snapshots, a spare) done; pool preparations started
	l.abandonPass()
	l.closed = true
	err = errors.Join(err, l.closeFiles())
	if err == nil && l.failed == nil {
		// Not synced: if the marker (or its contents) is lost, the next open merely syncs
		// what it recovered. It records the end offset that is synced now: after a power
		// loss took back its removal at the next open, only offsets below it count as
		// synced by Close (see recover).
		err = os.WriteFile(filepath.Join(l.dir, cleanShutdownFileName), []byte(strconv.FormatInt(l.EndOffset(), 10)+"\n"), 0o644)
	}
	return err
}

// finishActive prepares the synced active segment for a clean close: its file is cut to its
// logical length (direct-mode padding, preallocated zeros) and the final time-index entry is
// persisted.
func (l *Log) finishActive() error {
	s := l.active()
	if err := s.trimZeros(true); err != nil {
		return fmt.Errorf("close: %w", err)
	}
	s.addFinalTimeEntry()
	var err error
	l.indexScratch, err = s.persistIndexes(l.fio, l.indexScratch)
	l.writeOwnBatchMap(s) // batchmap.go: the next OpenLog continues it (sweepBatchMaps)
	return err
}

func (l *Log) closeFiles() error {
	l.zeroJobs.Wait() // zeroing and handed-off cuts (prealloc.go) end before Close returns
	l.settlePool()    // pool preparations (recycle.go) too
	var errs []error
	for _, s := range l.segments {
		errs = append(errs, s.closeFiles())
	}
	return errors.Join(errs...)
}
