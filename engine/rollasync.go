package engine

import (
	"fmt"
	"os"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// A roll's own files off the owner's loop (issue 14: the shard loop never blocks on the
// device).
//
// A roll used to create the new segment on the loop: the .log (O_CREAT|O_EXCL, or a pool
// file renamed into place, recycle.go), its two index files, the O_DIRECT descriptor, and
// then the sealed segment's batch map (batchmap.go). Creating a file allocates an inode, and
// when the inode table block is not cached ext4 reads it from the device first: in one
// profiled 64 KiB churn-recycle run that blocked a shard loop 57 ms in one create and 58 ms
// in two batch map writes (docs/benchmarks.md, "Session 13: a roll's files off the loop").
//
// With asynchronous direct writes and a ring that renames with RENAME_NOREPLACE
// (noReplaceRenamer), the next segment's files are made before the roll needs them — a
// "spare" — and the roll only hands them their names:
//
//	active segment half full:  prepare the spare, each op started by the previous one's completion
//	  open   <pool file> (or create <active base>.log.tmp)  IORING_OP_OPENAT
//	  open   it again with O_DIRECT                          IORING_OP_OPENAT
//	  create <active base>.index.tmp, .timeindex.tmp         IORING_OP_OPENAT (closed at once)
//	roll:  the new segment takes the spare's descriptors and appends go to it at once;
//	  rename the .log, then the index files, to the segment's names   IORING_OP_RENAMEAT (NOREPLACE)
//	  the sealed segment's batch map                                  IORING_OP_OPENAT, IORING_OP_WRITE
//	names done: dirGen moves (the next sync flushes the directory), the written end may
//	  cross into the segment
//
// The ordering rules stay those of the blocking roll:
//
//   - Appends are never issued before the file is open: the spare is open before the roll
//     takes it. Their writes go out at once (by descriptor; the name does not matter to the
//     device), staged and bounded as before (directStagedMax).
//   - Nothing in the new segment is acknowledged before its names are in place: the written
//     end (so every acknowledgement, the high watermark and reads) does not cross into a
//     segment whose names are in flight (popFinished). A kill -9 before that leaves the data
//     under a temporary or pool name, which OpenLog removes — none of it was reported written.
//   - The directory entry is synced before anything in the segment counts as synced: dirGen
//     moves only when the renames completed, before the written end can cross, so the sync
//     that first covers the segment's bytes flushes the directory first.
//   - A recycled spare keeps recycle.go's stale-batch argument: it is a pool file (its batch
//     map of the previous life durable as recycled.<inode>), kept under its pool name until
//     the roll, and dropped unused when the pool is emptied meanwhile (recycleGen): offsets
//     went below those it holds.
//   - The sealed segment's batch map is written before its file can enter the pool: retention
//     does not retire a segment whose map write is in flight (mapWriting), and truncation,
//     DeleteRecordsBefore and Close wait for the file jobs in flight.
//
// Whatever needs the names (Sync, truncation, Close, a compaction pass) waits for them
// (awaitWrites, awaitFileJobs). A spare is made only once the active segment holds half of
// segment.bytes, so an idle partition holds no spare (a spare costs two descriptors and
// three empty files); a roll that finds none ready (a time-based roll, the first ops still in
// flight, a refused op) creates the segment the blocking way, as does every roll without a
// ring (the syscall backend, offline tools) or in page-cache mode.

// spareState is where a log's spare segment files stand.
type spareState uint8

const (
	spareNone      spareState = iota
	sparePreparing            // an op of the preparation is in flight (step)
	spareReady                // open, waiting for a roll
	spareFailed               // an op failed: none until the next roll
)

// spareStep is the op of a preparation in flight.
type spareStep uint8

const (
	spareOpenLog spareStep = iota
	spareOpenDirect
	spareCreateIndex
	spareCreateTimeIndex
)

// rollSpare is a log's spare segment files. Owner goroutine only.
type rollSpare struct {
	state spareState
	step  spareStep
	// paths: the .log's current name (a pool file's, or <active base>.log.tmp) and the
	// temporary names of the index files.
	logPath, indexPath, timeIndexPath string
	pooled                            *pooledFile // the pool file taken (nil: a new file)
	gen                               int         // l.recycleGen when it was taken
	logFd, directFd                   int         // -1 while not open
	inode                             uint64
	created                           []string // files the preparation created, for a drop
	opened                            func(fd int, err error)
	// dropping counts drops whose unlinks are in flight: no preparation starts meanwhile
	// (it would create names they remove).
	dropping int
	// names counts rolls whose renames are in flight, maps sealed segments whose batch map
	// writes are; namesIdle and mapsIdle are AwaitWrites' conditions, bound once.
	names, maps         int
	namesIdle, mapsIdle func() bool
}

// RollFileCounters are process-wide counts of a roll's files (rollasync.go).
type RollFileCounters struct {
	Spare    int64 // rolls that took prepared files (no file created on the loop)
	Blocking int64 // rolls of a log with asynchronous file ops that created the files the blocking way
	Dropped  int64 // spares dropped unused (the pool emptied, Close) or failed
}

var rollFileStats struct{ spare, blocking, dropped atomic.Int64 }

// RollFileStats returns the process-wide roll file counters.
func RollFileStats() RollFileCounters {
	return RollFileCounters{rollFileStats.spare.Load(), rollFileStats.blocking.Load(), rollFileStats.dropped.Load()}
}

// spareRolls reports whether the log's rolls can take spare files: asynchronous direct
// writes and a ring that opens and renames without replacing.
func (l *Log) spareRolls() bool {
	if l.aw == nil || !l.fileJobsAsync() {
		return false
	}
	_, ok := l.fileJobs.ops.(noReplaceRenamer)
	return ok
}

// prepareSpare starts making the next segment's files once the active segment is half
// full (see above). Called after appends; cheap when there is nothing to do.
func (l *Log) prepareSpare() {
	sp := &l.spare
	if sp.state != spareNone || sp.dropping > 0 || l.failed != nil || l.closed {
		return
	}
	s := l.active()
	if s.size < int64(l.cfg.SegmentBytes)/2 || !l.spareRolls() {
		return
	}
	if l.poolWaitsForDir() {
		// Every pool file waits for a directory fsync that covers its map's name. The first
		// time, take a new file: the next retention checkpoint's fsync (one per roll at a
		// retention limit) covers the waiting files before the next spare, and from then on
		// the pool holds one file ahead. Twice in a row, issue the fsync for them; a later
		// call takes a file (dirsync.go).
		if l.poolMissed {
			l.syncPoolDir()
			return
		}
		l.poolMissed = true
	}
	if sp.opened == nil {
		sp.opened = l.spareOpened
		sp.namesIdle = func() bool { return l.spare.names == 0 }
		sp.mapsIdle = func() bool { return l.spare.maps == 0 }
	}
	sp.logFd, sp.directFd, sp.inode, sp.pooled, sp.created = -1, -1, 0, nil, sp.created[:0]
	sp.indexPath = segmentPath(l.dir, s.baseOffset, indexSuffix) + tmpSuffix
	sp.timeIndexPath = segmentPath(l.dir, s.baseOffset, timeIndexSuffix) + tmpSuffix
	flags := unix.O_RDWR | unix.O_CLOEXEC
	if f, ok := l.takePooled(); ok {
		l.poolMissed = false
		sp.pooled, sp.gen, sp.logPath = &f, l.recycleGen, f.path
	} else {
		sp.logPath = segmentPath(l.dir, s.baseOffset, logSuffix) + tmpSuffix
		flags |= unix.O_CREAT | unix.O_EXCL
	}
	sp.state, sp.step = sparePreparing, spareOpenLog
	if err := l.fileJobs.ops.StartOpen(sp.logPath, flags, 0o644, sp.opened); err != nil {
		l.spareFailedWith(err)
	}
}

// spareOpened is the completion of the preparation's op in flight: it starts the next.
func (l *Log) spareOpened(fd int, err error) {
	sp := &l.spare
	if err != nil {
		l.spareFailedWith(fmt.Errorf("open %s: %w", sp.logPath, err))
		return
	}
	const createFlags = unix.O_RDWR | unix.O_CREAT | unix.O_EXCL | unix.O_CLOEXEC
	var next error
	switch sp.step {
	case spareOpenLog:
		sp.logFd = fd
		if sp.pooled == nil {
			sp.created = append(sp.created, sp.logPath)
		}
		sp.step = spareOpenDirect
		next = l.fileJobs.ops.StartOpen(sp.logPath, unix.O_RDWR|unix.O_DIRECT|unix.O_CLOEXEC, 0, sp.opened)
	case spareOpenDirect:
		sp.directFd = fd
		sp.step = spareCreateIndex
		next = l.fileJobs.ops.StartOpen(sp.indexPath, createFlags, 0o644, sp.opened)
	case spareCreateIndex:
		unix.Close(fd)
		sp.created = append(sp.created, sp.indexPath)
		sp.step = spareCreateTimeIndex
		next = l.fileJobs.ops.StartOpen(sp.timeIndexPath, createFlags, 0o644, sp.opened)
	case spareCreateTimeIndex:
		unix.Close(fd)
		sp.created = append(sp.created, sp.timeIndexPath)
		var st unix.Stat_t
		if next = unix.Fstat(sp.logFd, &st); next == nil { // an open file's inode: no I/O
			sp.inode = st.Ino
			sp.state = spareReady
			return
		}
	}
	if next != nil {
		l.spareFailedWith(next)
	}
}

// spareFailedWith ends a preparation that failed: its files go, and rolls create files the
// blocking way until the next roll.
func (l *Log) spareFailedWith(err error) {
	l.cfg.Logger.Warn("prepare next segment files", "dir", l.dir, "err", err)
	l.dropSpare()
	l.spare.state = spareFailed
}

// dropSpare closes the spare's descriptors and removes its files through the ring (a pool
// file loses its batch maps too); no preparation may be in flight.
func (l *Log) dropSpare() {
	sp := &l.spare
	for _, fd := range []*int{&sp.logFd, &sp.directFd} {
		if *fd >= 0 {
			unix.Close(*fd)
			*fd = -1
		}
	}
	var steps []fileStep
	for _, path := range sp.created {
		steps = append(steps, fileStep{from: path})
	}
	if sp.pooled != nil {
		steps = append(append(steps, l.batchMapSteps(sp.pooled.inode)...), fileStep{from: sp.pooled.path})
		recycleStats.released.Add(1)
	}
	sp.created, sp.pooled, sp.state = sp.created[:0], nil, spareNone
	rollFileStats.dropped.Add(1)
	if len(steps) > 0 {
		sp.dropping++
		l.startFileJob(steps, func(error) { l.spare.dropping-- })
	}
}

// takeSpare returns the new segment at base made of the spare's files, or nil when there is
// no usable spare (the roll then creates the files the blocking way). The segment's names
// are given by nameSegment once the roll committed to it.
func (l *Log) takeSpare(base int64) *segment {
	sp := &l.spare
	switch {
	case sp.state == spareReady && sp.pooled != nil && sp.gen != l.recycleGen:
		l.dropSpare() // the pool was emptied meanwhile: its stale offsets may be above the log end
		return nil
	case sp.state != spareReady:
		if l.spareRolls() {
			rollFileStats.blocking.Add(1)
		}
		if sp.state == spareFailed {
			sp.state = spareNone
		}
		return nil
	}
	logPath := segmentPath(l.dir, base, logSuffix)
	s := &segment{baseOffset: base, nextOffset: base, maxTimestamp: noTimestamp,
		indexFile:     lazyFile{path: segmentPath(l.dir, base, indexSuffix)},
		timeIndexFile: lazyFile{path: segmentPath(l.dir, base, timeIndexSuffix)},
		log:           os.NewFile(uintptr(sp.logFd), logPath), inode: sp.inode}
	s.direct = &directWriter{file: os.NewFile(uintptr(sp.directFd), logPath),
		chunkBytes: l.cfg.DirectChunkBytes, cacheMax: l.cfg.DirectCacheChunks, pool: &l.chunks}
	s.direct.fixedIO = l.fixedIO
	if err := s.direct.reset(l.fio, sp.logFd, 0); err != nil { // an empty file: nothing to read
		panic(fmt.Sprintf("engine: direct writer of an empty segment: %v", err))
	}
	if sp.pooled != nil {
		s.stale, s.oldBatches = true, sp.pooled.old
		recycleStats.reused.Add(1)
	}
	l.trackBatches(s)
	s.spareNames = [3]string{sp.logPath, sp.indexPath, sp.timeIndexPath}
	sp.logFd, sp.directFd, sp.pooled, sp.created, sp.state = -1, -1, nil, sp.created[:0], spareNone
	rollFileStats.spare.Add(1)
	return s
}

// abandonSpareSegment undoes takeSpare when the roll failed after it: the files go by their
// temporary names.
func (l *Log) abandonSpareSegment(s *segment) {
	s.closeFiles()
	var steps []fileStep
	for _, path := range s.spareNames {
		steps = append(steps, fileStep{from: path})
	}
	l.startFileJob(steps, nil)
}

// nameSegment renames the files of s, a segment made of the spare, to its names (see
// above): the .log first, so a crash in between leaves a log whose index is rebuilt.
func (l *Log) nameSegment(s *segment) {
	s.namesPending = true
	l.spare.names++
	steps := make([]fileStep, 0, 3)
	for i, suffix := range []string{logSuffix, indexSuffix, timeIndexSuffix} {
		steps = append(steps, fileStep{from: s.spareNames[i], to: segmentPath(l.dir, s.baseOffset, suffix), noReplace: true})
	}
	l.startFileJob(steps, func(err error) { l.segmentNamed(s, err) })
}

// segmentNamed: the renames of s completed (or one failed, which fails the log: appends went
// to a file that did not get its name). The written end may now cross into s.
func (l *Log) segmentNamed(s *segment, err error) {
	l.spare.names--
	s.namesPending, s.spareNames = false, [3]string{}
	if err != nil {
		l.fail(fmt.Errorf("roll: name segment %d: %w", s.baseOffset, err))
	} else {
		l.dirGen++ // the names are made durable by the next sync, before anything in s counts as synced
	}
	if l.closed || l.aw == nil {
		return
	}
	popped := l.popFinished()
	if a := l.active(); l.failed == nil && a.direct != nil {
		l.submitWrites(a, false)
	}
	if l.onWritten != nil && (popped || err != nil) {
		l.onWritten()
	}
}

// startOwnBatchMap writes the batch map of old, just sealed by a roll, through the ring
// when the log has asynchronous file ops (writeOwnBatchMap otherwise). Until it completed,
// retention does not retire old (mapWriting): the pool preparation reads the map.
func (l *Log) startOwnBatchMap(old *segment) {
	if !l.fileJobsAsync() {
		l.writeOwnBatchMap(old)
		return
	}
	path, data, ok := l.takeOwnBatchMap(old)
	if !ok {
		return
	}
	old.mapWriting = true
	l.spare.maps++
	l.startFileJob([]fileStep{{from: path, data: data}}, func(error) {
		old.mapWriting = false
		l.spare.maps--
	})
}

// awaitRollNames waits for the renames of rolls in flight (see above). A failed wait fails
// the log.
func (l *Log) awaitRollNames() error {
	if l.spare.names == 0 {
		return nil
	}
	if err := l.fileJobs.ops.AwaitWrites(l.spare.namesIdle); err != nil {
		return l.fail(fmt.Errorf("wait for a new segment's names: %w", err))
	}
	return nil
}

// awaitRollFiles waits for the renames and batch map writes of rolls in flight: before a
// compaction pass reads and swaps sealed segment files.
func (l *Log) awaitRollFiles() error {
	if err := l.awaitRollNames(); err != nil {
		return err
	}
	if l.spare.maps > 0 {
		if err := l.fileJobs.ops.AwaitWrites(l.spare.mapsIdle); err != nil {
			return l.fail(fmt.Errorf("wait for batch map writes: %w", err))
		}
	}
	return nil
}

// closeSpare ends the spare at Close: a preparation in flight completes first, then the
// files go (through the ring; Close then waits for the file jobs).
func (l *Log) closeSpare() {
	sp := &l.spare
	if sp.state == sparePreparing {
		l.fileJobs.ops.AwaitWrites(func() bool { return sp.state != sparePreparing })
	}
	if sp.state == spareReady {
		l.dropSpare()
	}
}
