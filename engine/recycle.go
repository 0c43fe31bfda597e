package engine

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"

	"github.com/ringlog/ringlog/ring"

	"golang.org/x/sys/unix"
)

// Recycled segment files (LogConfig.RecycleSegments, topic config recycle.segments).
//
// On ext4 an O_DIRECT write that extends a file (or lands in fallocate'd, unwritten blocks)
// cannot be issued without blocking: io_uring hands it to a worker thread, which allocates
// blocks, converts extents and serializes on the inode; an overwrite of written blocks goes
// straight to the device. Measured through the same ring (docs/benchmarks.md, "Recycled
// segment files"): 1 MiB writes at queue depth 64 reach 1.8–2.2 GB/s overwriting a written
// file and 0.76 GB/s extending a new one. A log writes every segment into a fresh file, so
// without recycling it always extends.
//
// With recycling, the .log file of a segment that retention (or DeleteRecordsBefore) retires
// is not unlinked but renamed into a per-log pool (at most RecycleSegments files), and a roll
// renames a pool file to the new segment's name instead of creating an empty file. Appends
// then overwrite the retired segment's blocks; no byte is written twice (zeroing ahead,
// prealloc.go, writes each byte a second time):
//
//	pool:     00000000000000001000.log.recycle   (a retired segment's .log, written, synced)
//	roll:     rename -> 00000000000000052000.log (RENAME_NOREPLACE), new empty index files
//	file:     |new|new|new|0pad|stale stale stale stale stale|
//	                      ^ logical end (s.size)             ^ file end (the old segment's)
//
// The bytes past the logical end are the old segment's batches ("stale"): valid CRCs, offsets
// from the old life. They are never served (every reader stops at s.size); a roll and Close
// cut the file to its logical size as they do direct mode's padding (segment.stale). After a
// crash, recovery's re-scan stops at the first batch that does not continue the log — a stale
// batch's base offset is below the segment's base, never the expected next offset — and cuts
// the tail (counted in RecoveryReport.DroppedBytes), exactly as it cuts a torn one.
//
// Why a stale batch can never continue the log: every batch in a pool file has offsets below
// the log's first segment's base at the moment it was retired (retention and
// DeleteRecordsBefore retire only whole segments at the front). The first segment's base only
// ever goes down in truncateFullyAndStartAt (TruncateTo below the start, ResetTo), which
// empties the pool. A recycled segment's base is the log end, above every offset in the pool,
// and recovery accepts a batch only at the expected next offset (or, in a compacted log, above
// it), so stale bytes fail the check at the first batch. Pool files are removed by OpenLog
// (like *.deleted): the pool never outlives the process, so no reasoning about a previous
// run's offsets is needed, and a power loss that takes back a rename into or out of the pool
// leaves either a file OpenLog removes or a segment name whose records were never synced
// (the new segment's directory entry is fsynced by the next Sync before anything in it
// counts as synced, as for a created file).
//
// A stale batch can also come back under a new header: a write of a new batch over an old
// one that started at the same position, torn after its first bytes (the new base offset),
// leaves the old body under its old, valid CRC (the CRC does not cover the header). Batch
// maps (batchmap.go) close that: a file is pooled only with a map of the (position, CRC) of
// its batches (written at the segment's roll), made durable as recycled.<inode> (in the
// background, after the rename to *.recycle) before the file joins the pool, and recovery
// refuses a re-scanned batch that carries, at its
// position, the CRC of the file's previous life.
//
// Cost: the pool holds up to RecycleSegments × segment.bytes of disk per partition beyond
// retention (space the log would use again at its next rolls). Retired files are not kept
// while the free-space estimate is below twice the guard (LogConfig.Disk), and an append the
// guard refuses empties the pool. Page-cache logs gain nothing from it (a buffered write of
// part of a page that is not cached first reads the page from the file, where an extending
// write does not), so the default is on only for direct mode.

// recycleSuffix names a pool file: the retired segment's .log name plus this suffix.
const recycleSuffix = ".recycle"

// recycleSegmentsDirect is the default pool size of a direct-mode log: 4 files, enough for the
// rolls between two retention passes of a partition appending ≈ 100 MB/s into 1 GiB segments
// (a roll per 10 s, a retention check per 30 s).
const recycleSegmentsDirect = 4

// recycleSegmentsMax bounds RecycleSegments: 64 retired files per partition.
const recycleSegmentsMax = 64

// RecycleCounters are process-wide counts of segment file recycling.
type RecycleCounters struct {
	Pooled   int64 // retired .log files kept for reuse
	Reused   int64 // new segments that took a pool file
	Released int64 // pool files removed unused (truncation below the log start, a refused append, a failed rename)
	// Unmapped counts retired files not recycled for want of a valid batch map of their
	// content (batchmap.go): the segment was active at a crash, its map was lost to a power
	// loss, it was compacted or made active again by a truncation, it held more than
	// batchMapEntriesMax batches, or the map's write failed.
	Unmapped int64
	// SameCRC counts appended batches that carried the CRC the recycled file's previous life
	// had at the same position (segment.noteRecycled).
	SameCRC int64
}

var recycleStats struct{ pooled, reused, released, unmapped, sameCRC atomic.Int64 }

// RecycleStats returns the process-wide recycling counters.
func RecycleStats() RecycleCounters {
	return RecycleCounters{recycleStats.pooled.Load(), recycleStats.reused.Load(), recycleStats.released.Load(),
		recycleStats.unmapped.Load(), recycleStats.sameCRC.Load()}
}

// pooledFile is a retired .log in the pool, with the batch map of the life it retired from
// (made durable as recycled.<inode> before the file entered the pool). A preparation that
// failed comes back with no path. gen is the pool generation it was retired in (emptyPool).
type pooledFile struct {
	path  string
	inode uint64
	old   []uint64
	gen   int
	// dirMark is the log's directory fsync count when the file was collected: its map's
	// name is durable, and the file may be taken, once a later one completed (dirsync.go).
	dirMark uint64
}

func (f pooledFile) String() string { return f.path }

// poolRetired starts moving the retired segment s's .log into the pool when recycling is
// on and the pool (counting files still being prepared) has room; it reports whether it
// took the file. On the owner's goroutine it only renames the .log to <name>.recycle (a
// power loss or crash from here on leaves a file OpenLog removes); preparePooled, in the
// background, then checks that the segment's own batch map (written at its roll,
// batchmap.go) describes it, fdatasyncs the .log (its on-disk content is then what the map
// describes; a file retired unsynced could otherwise hold an older life's bytes after a
// power loss) and makes the map durable as recycled.<inode>. Only then does the file join
// the pool (collectPooled, at the next roll), so before any byte of its next life is
// written. The syncs stay off the shard loop: they cost a device cache flush and two
// metadata writes per retired segment. s's index files are retired as usual by the caller;
// a file not taken loses its batch maps.
func (l *Log) poolRetired(s *segment) bool {
	prep, ok := l.poolCandidate(s)
	if !ok {
		if l.cfg.RecycleSegments > 0 {
			removeBatchMaps(l.dir, s.inode)
		}
		return false
	}
	if err := os.Rename(prep.path[:len(prep.path)-len(recycleSuffix)], prep.path); err != nil {
		l.poolRefused(prep, err)
		removeBatchMaps(l.dir, s.inode)
		return false
	}
	l.startPreparation(prep)
	return true
}

// poolCandidate reports whether the retired segment s's .log goes into the pool (recycling
// is on, the pool, counting files still being prepared, has room, the disk is not tight),
// and then counts it as being prepared. The caller renames the .log to prep.path, then
// calls startPreparation, or poolRefused when the rename failed; on false it removes the
// batch maps of s.
func (l *Log) poolCandidate(s *segment) (poolPreparation, bool) {
	if l.cfg.RecycleSegments <= 0 {
		return poolPreparation{}, false
	}
	l.collectPooled()
	if len(l.recyclePool)+l.recyclePreparing >= l.cfg.RecycleSegments || s.size == 0 || s.inode == 0 || l.diskTight() {
		return poolPreparation{}, false
	}
	l.recyclePreparing++
	want := batchMap{inode: s.inode, base: s.baseOffset, size: s.size, next: s.nextOffset}
	return poolPreparation{dir: l.dir, path: segmentPath(l.dir, s.baseOffset, logSuffix) + recycleSuffix, want: want,
		gen: l.recycleGen, fio: l.backgroundFileIO(), logger: l.cfg.Logger}, true
}

// retireAsync retires s's files through the ring (fileJobs; the blocking way is
// retireFiles), in the order the blocking way keeps: the index files are unlinked, then the
// .log is renamed into the pool (and prepared once the rename completed) or unlinked, its
// batch maps before it (so that no unlink of a map is still in flight when the file's inode
// is free to be reused by a new segment whose map has that name). Retention retires only
// below a durable checkpoint, so a crash that leaves any of these undone leaves files that
// recovery drops (docs/storage.md, "Crash model").
func (l *Log) retireAsync(s *segment) {
	path := func(suffix string) string { return segmentPath(l.dir, s.baseOffset, suffix) }
	steps := []fileStep{{from: path(indexSuffix)}, {from: path(timeIndexSuffix)}}
	if prep, ok := l.poolCandidate(s); ok {
		steps = append(steps, fileStep{from: path(logSuffix), to: prep.path})
		l.startFileJob(steps, func(err error) {
			if err == nil {
				l.startPreparation(prep)
				return
			}
			l.poolRefused(prep, err)
			l.startFileJob(append(l.batchMapSteps(s.inode), fileStep{from: path(logSuffix)}), nil)
		})
		return
	}
	l.startFileJob(append(append(steps, l.batchMapSteps(s.inode)...), fileStep{from: path(logSuffix)}), nil)
}

// batchMapSteps are the unlinks of inode's batch maps when the log recycles (none else).
func (l *Log) batchMapSteps(inode uint64) []fileStep {
	if l.cfg.RecycleSegments <= 0 {
		return nil
	}
	return []fileStep{{from: filepath.Join(l.dir, batchMapName(batchMapOwnPrefix, inode))},
		{from: filepath.Join(l.dir, batchMapName(batchMapOldPrefix, inode))}}
}

// poolRefused undoes poolCandidate after the rename into the pool failed.
func (l *Log) poolRefused(prep poolPreparation, err error) {
	l.recyclePreparing--
	l.cfg.Logger.Warn("keep retired segment for reuse", "dir", l.dir, "segment", prep.want.base, "err", err)
}

// startPreparation prepares a file renamed into the pool in the background (see
// poolRetired); collectPooled adds it to the pool when it is done.
func (l *Log) startPreparation(prep poolPreparation) {
	if l.recycleReady == nil {
		l.recycleReady = make(chan pooledFile, recycleSegmentsMax) // sends never block
	}
	l.poolJobs.Add(1)
	go func() {
		defer l.poolJobs.Done()
		l.recycleReady <- prep.run()
	}()
}

// backgroundFileIO is the FileIO of work off the owner's goroutine (LogConfig.ZeroFileIO).
func (l *Log) backgroundFileIO() ring.FileIO {
	if l.cfg.ZeroFileIO != nil {
		return l.cfg.ZeroFileIO
	}
	return ring.Syscalls{}
}

// poolPreparation is the background part of poolRetired; it touches no Log state.
type poolPreparation struct {
	dir, path string
	want      batchMap // inode, base, size, next of the retired segment
	gen       int
	fio       ring.FileIO
	logger    *slog.Logger
}

func (p poolPreparation) run() pooledFile {
	ownName := batchMapName(batchMapOwnPrefix, p.want.inode)
	m, err := readBatchMap(p.dir, ownName, p.want.inode)
	if err == nil && (m.base != p.want.base || m.size != p.want.size || m.next != p.want.next) {
		err = fmt.Errorf("%w: map of segment %d (%d bytes, next %d), the file holds segment %d (%d bytes, next %d)",
			errBatchMapCorrupt, m.base, m.size, m.next, p.want.base, p.want.size, p.want.next)
	}
	if err != nil {
		recycleStats.unmapped.Add(1)
		p.logger.Debug("retired segment not kept for reuse: no batch map", "dir", p.dir, "segment", p.want.base, "err", err)
		return p.fail()
	}
	noteSyncs(syncPoolLog, 1)
	if err = syncFile(p.fio, p.path); err == nil {
		// The map's name is made durable by the log's next directory fsync, before the file
		// is taken (takePooled, dirsync.go): no fsync of its own.
		noteSyncs(syncPoolMapFile, 1)
		err = replaceFile(p.fio, p.dir, batchMapName(batchMapOldPrefix, p.want.inode), encodeBatchMap(m))
	}
	if err != nil {
		p.logger.Warn("keep retired segment for reuse", "dir", p.dir, "segment", p.want.base, "err", err)
		return p.fail()
	}
	os.Remove(filepath.Join(p.dir, ownName)) // recycled.<inode> holds it now
	return pooledFile{path: p.path, inode: p.want.inode, old: m.entries, gen: p.gen}
}

// fail removes the file's maps, then the file; the pool gets nothing. Maps first, as
// retireAsync and dropSpare do: once the file is gone its inode may be reused by a new
// segment file, whose own maps a late unlink would remove.
func (p poolPreparation) fail() pooledFile {
	removeBatchMaps(p.dir, p.want.inode)
	os.Remove(p.path)
	return pooledFile{gen: p.gen}
}

// collectPooled adds the files whose preparation finished to the pool (never waits). A file
// prepared before emptyPool, or beyond the pool's size, is released.
func (l *Log) collectPooled() {
	for l.recyclePreparing > 0 {
		select {
		case f := <-l.recycleReady:
			l.recyclePreparing--
			switch {
			case f.path == "":
			case f.gen != l.recycleGen || len(l.recyclePool) >= l.cfg.RecycleSegments:
				l.releasePool([]pooledFile{f})
			default:
				f.dirMark = l.dirs.started // its map was renamed into place before this
				l.recyclePool = append(l.recyclePool, f)
				recycleStats.pooled.Add(1)
			}
		default:
			return
		}
	}
}

// settlePool waits for every pool preparation and collects it (Close, tests).
func (l *Log) settlePool() {
	l.poolJobs.Wait()
	l.collectPooled()
}

// writeOwnBatchMap writes the batch map of old, just sealed by a roll, as batches.<inode>
// (not synced: poolRetired checks it against the segment and makes it durable) and drops
// the maps kept in memory. Without a complete map the file will not be recycled.
func (l *Log) writeOwnBatchMap(old *segment) {
	path, data, ok := l.takeOwnBatchMap(old)
	if !ok {
		return
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		l.cfg.Logger.Warn("write batch map", "dir", l.dir, "segment", old.baseOffset, "err", err)
	}
}

// takeOwnBatchMap drops the maps of old kept in memory and returns the own batch map to
// write (ok false: none, the file will not be recycled). A roll writes it through the ring
// (rollasync.go), Close with writeOwnBatchMap.
func (l *Log) takeOwnBatchMap(old *segment) (path string, data []byte, ok bool) {
	entries := old.batches
	old.batches, old.oldBatches = nil, nil
	if entries == nil || old.inode == 0 || old.size == 0 {
		return "", nil, false
	}
	m := batchMap{inode: old.inode, base: old.baseOffset, size: old.size, next: old.nextOffset, entries: entries}
	return filepath.Join(l.dir, batchMapName(batchMapOwnPrefix, old.inode)), encodeBatchMap(m), true
}

// trackBatches starts the own batch map of s, a new empty segment, when the log recycles.
func (l *Log) trackBatches(s *segment) {
	if l.cfg.RecycleSegments > 0 && s.size == 0 {
		s.batches = make([]uint64, 0, 64)
	}
}

// diskTight reports whether the data directory's free space (LogConfig.Disk's estimate) is
// below twice its guard: retired files are then freed, not kept.
func (l *Log) diskTight() bool {
	d := l.cfg.Disk
	return d != nil && d.FreeBytes() < 2*d.FreeMinBytes()
}

// newSegment creates the files of a new segment at base: from a pool file when there is one
// (the segment is then marked stale: its file holds an old segment's bytes past its end),
// else empty files.
func (l *Log) newSegment(base int64) (*segment, error) {
	for {
		pooled, ok := l.takePooled()
		if !ok {
			break
		}
		from := pooled.path
		to := segmentPath(l.dir, base, logSuffix)
		// NOREPLACE: a name collision must fail like the O_EXCL create it replaces.
		if err := unix.Renameat2(unix.AT_FDCWD, from, unix.AT_FDCWD, to, unix.RENAME_NOREPLACE); err != nil {
			l.cfg.Logger.Warn("reuse retired segment file", "dir", l.dir, "file", from, "err", err)
			l.releasePool([]pooledFile{pooled})
			if errors.Is(err, unix.EEXIST) {
				break // the O_EXCL create below reports it
			}
			continue
		}
		s, err := openSegmentFiles(l.dir, base, true, true)
		if err != nil {
			return nil, err
		}
		s.stale = true
		s.oldBatches = pooled.old
		l.trackBatches(s)
		recycleStats.reused.Add(1)
		return s, nil
	}
	s, err := openSegmentFiles(l.dir, base, true, false)
	if err == nil {
		l.trackBatches(s)
	}
	return s, err
}

// emptyPool releases every pool file: offsets are about to go below those they hold.
func (l *Log) emptyPool() {
	l.recycleGen++ // files still being prepared are released when collected
	if len(l.recyclePool) > 0 {
		l.releasePool(l.recyclePool)
		l.recyclePool = nil
	}
}

// releasePool unlinks pool files in the background (unlinking a large file frees its blocks
// synchronously; see retiredSuffix). Durability is not needed: OpenLog removes every pool
// file it finds.
func (l *Log) releasePool(files []pooledFile) {
	recycleStats.released.Add(int64(len(files)))
	paths := make([]string, len(files))
	for i, f := range files {
		paths[i] = f.path
		removeBatchMaps(l.dir, f.inode)
	}
	go removeRetired(paths)
}

// checkRecycleSegments resolves LogConfig.RecycleSegments: 0 is the default for the mode,
// -1 off.
func checkRecycleSegments(n int, mode StorageMode) (int, error) {
	switch {
	case n == 0 && mode == StorageDirect:
		return recycleSegmentsDirect, nil
	case n == 0 || n == -1:
		return -1, nil
	case n < 0 || n > recycleSegmentsMax:
		return 0, fmt.Errorf("recycle.segments %d: want -1 (off), 0 (default) or up to %d", n, recycleSegmentsMax)
	}
	return n, nil
}

// cutBatchMaps follows TruncateTo's cut of s (now the active segment) to pos bytes: its own
// map keeps the batches before pos (a sealed segment made active again has none in memory,
// and its written one no longer describes it), and the previous life's map goes, as the
// cut, synced before the truncation returns, leaves no old bytes past the end.
func (l *Log) cutBatchMaps(s *segment, pos int64) {
	if s.inode == 0 {
		return
	}
	if s.batches != nil {
		n := 0
		for n < len(s.batches) && int64(s.batches[n]>>32) < pos {
			n++
		}
		s.batches = s.batches[:n]
	} else {
		os.Remove(filepath.Join(l.dir, batchMapName(batchMapOwnPrefix, s.inode)))
	}
	s.oldBatches = nil
	os.Remove(filepath.Join(l.dir, batchMapName(batchMapOldPrefix, s.inode)))
}
