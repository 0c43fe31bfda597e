package engine

import (
	"errors"
	"fmt"
	"os"
	"sync/atomic"

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
}

var recycleStats struct{ pooled, reused, released atomic.Int64 }

// RecycleStats returns the process-wide recycling counters.
func RecycleStats() RecycleCounters {
	return RecycleCounters{recycleStats.pooled.Load(), recycleStats.reused.Load(), recycleStats.released.Load()}
}

// poolRetired moves the retired segment s's .log into the pool when recycling is on and the
// pool has room; it reports whether it did. s's index files are retired as usual by the
// caller.
func (l *Log) poolRetired(s *segment) bool {
	if l.cfg.RecycleSegments <= 0 || len(l.recyclePool) >= l.cfg.RecycleSegments || s.size == 0 || l.diskTight() {
		return false
	}
	path := segmentPath(l.dir, s.baseOffset, logSuffix)
	if err := os.Rename(path, path+recycleSuffix); err != nil {
		l.cfg.Logger.Warn("keep retired segment for reuse", "dir", l.dir, "segment", s.baseOffset, "err", err)
		return false
	}
	l.recyclePool = append(l.recyclePool, path+recycleSuffix)
	recycleStats.pooled.Add(1)
	return true
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
	for len(l.recyclePool) > 0 {
		from := l.recyclePool[len(l.recyclePool)-1]
		l.recyclePool = l.recyclePool[:len(l.recyclePool)-1]
		to := segmentPath(l.dir, base, logSuffix)
		// NOREPLACE: a name collision must fail like the O_EXCL create it replaces.
		if err := unix.Renameat2(unix.AT_FDCWD, from, unix.AT_FDCWD, to, unix.RENAME_NOREPLACE); err != nil {
			l.cfg.Logger.Warn("reuse retired segment file", "dir", l.dir, "file", from, "err", err)
			l.releasePool([]string{from})
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
		recycleStats.reused.Add(1)
		return s, nil
	}
	return openSegmentFiles(l.dir, base, true, false)
}

// emptyPool releases every pool file: offsets are about to go below those they hold.
func (l *Log) emptyPool() {
	if len(l.recyclePool) > 0 {
		l.releasePool(l.recyclePool)
		l.recyclePool = nil
	}
}

// releasePool unlinks pool files in the background (unlinking a large file frees its blocks
// synchronously; see retiredSuffix). Durability is not needed: OpenLog removes every pool
// file it finds.
func (l *Log) releasePool(paths []string) {
	recycleStats.released.Add(int64(len(paths)))
	go removeRetired(append([]string(nil), paths...))
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
