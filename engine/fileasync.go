package engine

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/ringlog/ringlog/ring"
	"golang.org/x/sys/unix"
)

// File-system work off the owner's loop (issue 14: the shard loop never blocks on the file
// system).
//
// Two pieces, both driven by completions on the owner's goroutine:
//
//   - asyncAtomicWrite replaces a small file the way writeFileAtomic does, as a chain of
//     ring ops, each started by the previous one's completion:
//
//     open <name>.tmp (O_CREAT|O_TRUNC)  IORING_OP_OPENAT
//     write it                           IORING_OP_WRITE
//     fsync it            (durable only) IORING_OP_FSYNC
//     close it                           on the loop (close(2) of a synced file: no I/O)
//     rename it over <name>              IORING_OP_RENAMEAT
//     open the directory  (durable only) IORING_OP_OPENAT
//     fsync it            (durable only) IORING_OP_FSYNC, then close
//
//     Retention's log start offset checkpoint (retention.go) goes the durable way; a roll's
//     producer snapshot (snapshotasync.go) the other, its fsync deferred to the next sync.
//     The order is writeFileAtomic's, so after a crash the file holds its old or its new
//     contents, never a mix (a leftover *.tmp is removed at OpenLog), and the caller's
//     done runs only when the last op completed.
//
//   - fileJobs unlinks, renames and writes names one after another (IORING_OP_UNLINKAT,
//     IORING_OP_RENAMEAT, IORING_OP_OPENAT + IORING_OP_WRITE): a retired segment's files and
//     batch maps (truncate.go, recycle.go), pruned producer snapshots (producersnapshot.go),
//     a sealed segment's batch map and a new segment's names at a roll (rollasync.go). On
//     ext4 mounted with discard (journal-less, this project's data disk) unlinking a file's
//     last link discards its blocks synchronously, on whichever thread unlinks; creating a
//     file reads its inode's table block from the device when it is not cached.
//
// The kernel runs each op on an io-wq worker when it would block; the owner never waits,
// except where the log must (see awaitFileJobs). Where the ring refuses an op (full, or a
// kernel without it: RENAMEAT and UNLINKAT need Linux 5.11) the step runs on the owner's
// thread, as before. The syscall backend runs every op inline at submit, so with it nothing
// is gained; the segment files' unlinks then keep the background goroutine
// (retireFiles), which is faster than inline.

// AsyncFileOps writes, flushes, opens, renames and unlinks files without blocking the
// owner: each Start call's done(n, err) runs on the owner's goroutine when the op
// completed, never from inside the call, and AwaitWrites waits for such completions
// (StartOpen's n is the new descriptor). *ring.Reactor implements it (IORING_OP_WRITE,
// IORING_OP_FSYNC, IORING_OP_RENAMEAT, IORING_OP_OPENAT, IORING_OP_UNLINKAT).
type AsyncFileOps interface {
	AsyncWriter
	StartFsync(fd int, datasync bool, done func(n int, err error)) error
	StartRename(oldPath, newPath string, done func(n int, err error)) error
	StartOpen(path string, flags int, mode uint32, done func(fd int, err error)) error
	StartUnlink(path string, done func(n int, err error)) error
}

// runsInline reports whether ops runs its ops on the calling thread at submit (the ring's
// syscall backend): unlinking there costs the owner what an unlink costs.
func runsInline(ops AsyncFileOps) bool {
	b, ok := ops.(interface{ Backend() string })
	return ok && b.Backend() == ring.BackendSyscall
}

// atomicPhase is where an asyncAtomicWrite stands: the op in flight.
type atomicPhase uint8

const (
	atomicIdle     atomicPhase = iota
	atomicOpen                 // the temporary file's open
	atomicWrite                // its write
	atomicSyncFile             // its fsync
	atomicRename               // its rename over the file
	atomicOpenDir              // the directory's open
	atomicSyncDir              // the directory's fsync
)

// asyncAtomicWrite is one atomic replace in flight (see above). Owner goroutine only.
type asyncAtomicWrite struct {
	ops     AsyncFileOps
	phase   atomicPhase
	path    string // the file replaced; path+tmpSuffix is its temporary file
	data    []byte // the new contents, kept untouched until their write completed
	durable bool   // fsync the file before its rename and the directory after it
	// syncKinds counts the file's and the directory's fsyncs (syncstats.go).
	syncKinds [2]syncKind
	// dirs, when set, numbers the directory's fsync (dirSeq) and learns of its success
	// (dirsync.go: the names it covers besides this file's).
	dirs   *dirSyncs
	dirSeq uint64
	fd     int // the temporary file's or the directory's descriptor while open; -1
	done   func(err error)
	// The completions of each phase, bound once.
	opened, written, fileSynced, renamed, dirOpened, dirSynced func(int, error)
}

// init binds w to ops; done(err) runs on the owner's goroutine when a write is finished:
// in place (and, durable, synced with its directory entry), or failed (err).
func (w *asyncAtomicWrite) init(ops AsyncFileOps, done func(err error)) {
	w.ops, w.done, w.fd = ops, done, -1
	w.opened, w.written, w.fileSynced = w.onOpened, w.onWritten, w.onFileSynced
	w.renamed, w.dirOpened, w.dirSynced = w.onRenamed, w.onDirOpened, w.onDirSynced
}

func (w *asyncAtomicWrite) busy() bool { return w.phase != atomicIdle }

// start begins replacing path with data (see above); data stays untouched until done ran.
// started is false, with nothing changed, when the ring refused the first op: the caller
// writes the file the blocking way.
func (w *asyncAtomicWrite) start(path string, data []byte, durable bool) (started bool) {
	if w.busy() {
		panic(fmt.Sprintf("engine: atomic write of %s while one of %s is in flight", path, w.path))
	}
	if w.ops.StartOpen(path+tmpSuffix, unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC|unix.O_CLOEXEC, 0o644, w.opened) != nil {
		return false
	}
	w.phase, w.path, w.data, w.durable = atomicOpen, path, data, durable
	return true
}

// onOpened: the temporary file exists; write it.
func (w *asyncAtomicWrite) onOpened(fd int, err error) {
	if err != nil {
		w.failTemp(fmt.Errorf("open: %w", err))
		return
	}
	w.fd = fd
	if err := w.ops.StartWrite(fd, w.data, 0, w.written); err != nil {
		w.failTemp(err)
		return
	}
	w.phase = atomicWrite
}

// onWritten: the temporary file holds data; flush it, or rename it in place.
func (w *asyncAtomicWrite) onWritten(n int, err error) {
	if err == nil && n != len(w.data) {
		err = fmt.Errorf("short write: %d of %d bytes: %w", n, len(w.data), unix.EIO)
	}
	w.data = nil
	if err == nil && w.durable {
		if err = w.ops.StartFsync(w.fd, false, w.fileSynced); err == nil {
			noteSyncs(w.syncKinds[0], 1)
			w.phase = atomicSyncFile
			return
		}
	}
	if err != nil {
		w.failTemp(err)
		return
	}
	w.closeAndRename()
}

// onFileSynced: the temporary file is durable; rename it in place.
func (w *asyncAtomicWrite) onFileSynced(_ int, err error) {
	if err != nil {
		w.failTemp(err)
		return
	}
	w.closeAndRename()
}

func (w *asyncAtomicWrite) closeAndRename() {
	err := unix.Close(w.fd) // a close error may be a late write error: the file is not trusted
	w.fd = -1
	if err != nil {
		w.failTemp(err)
		return
	}
	w.phase = atomicRename
	if w.ops.StartRename(w.path+tmpSuffix, w.path, w.renamed) != nil {
		// No RENAMEAT (before Linux 5.11) or a full ring: rename here, as the blocking
		// write does.
		w.renamed(0, os.Rename(w.path+tmpSuffix, w.path))
	}
}

// onRenamed: the file is in place; flush its directory when durable.
func (w *asyncAtomicWrite) onRenamed(_ int, err error) {
	if err != nil {
		w.failTemp(err)
		return
	}
	if !w.durable {
		w.finish(nil)
		return
	}
	w.phase = atomicOpenDir
	dir := filepath.Dir(w.path)
	const flags = unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC
	if w.ops.StartOpen(dir, flags, 0, w.dirOpened) != nil {
		w.dirOpened(unix.Open(dir, flags, 0)) // a full ring: open it here
	}
}

// onDirOpened: flush the directory.
func (w *asyncAtomicWrite) onDirOpened(fd int, err error) {
	if err == nil {
		var seq uint64
		if w.dirs != nil {
			seq = w.dirs.start()
		}
		if err = w.ops.StartFsync(fd, false, w.dirSynced); err != nil {
			unix.Close(fd)
		} else {
			noteSyncs(w.syncKinds[1], 1)
			w.dirSeq = seq
		}
	}
	if err != nil {
		w.finish(fmt.Errorf("sync dir %s: %w", filepath.Dir(w.path), err))
		return
	}
	w.phase, w.fd = atomicSyncDir, fd
}

// onDirSynced: the file and its name are durable.
func (w *asyncAtomicWrite) onDirSynced(_ int, err error) {
	unix.Close(w.fd)
	w.fd = -1
	if err != nil {
		err = fmt.Errorf("sync dir %s: %w", filepath.Dir(w.path), err)
	} else if w.dirs != nil {
		w.dirs.done(w.dirSeq)
	}
	w.finish(err)
}

// failTemp ends a write whose temporary file failed before it replaced the file: the
// temporary file is closed and removed (on the owner's thread: a rare path), the file is
// untouched.
func (w *asyncAtomicWrite) failTemp(err error) {
	if w.fd >= 0 {
		unix.Close(w.fd)
		w.fd = -1
	}
	os.Remove(w.path + tmpSuffix)
	w.finish(fmt.Errorf("write %s: %w", w.path+tmpSuffix, err))
}

func (w *asyncAtomicWrite) finish(err error) {
	w.phase, w.data = atomicIdle, nil
	w.done(err)
}

// fileJobs runs a log's unlinks and renames through the ring (see above). Owner goroutine.
type fileJobs struct {
	ops      AsyncFileOps // nil: names change on the owner's thread
	inFlight int          // jobs started and not finished
	idle     func() bool  // AwaitWrites' condition, bound once
}

// fileStep is one namespace change: a rename of from to to (RENAME_NOREPLACE when
// noReplace: an existing to fails it with EEXIST), an unlink of from (to ""), or, with
// data set, a write of data as the whole new contents of from (created or truncated; not
// synced).
type fileStep struct {
	from, to  string
	noReplace bool
	data      []byte
	// dirSynced, when set, makes the step an fsync of the directory from (opened, synced,
	// closed) and runs with its result (dirsync.go).
	dirSynced func(err error)
}

// noReplaceRenamer is an AsyncFileOps that also renames with RENAME_NOREPLACE
// (*ring.Reactor: StartRenameNoReplace). A roll names a new segment's files through it
// (rollasync.go); without it the roll creates them the blocking way.
type noReplaceRenamer interface {
	StartRenameNoReplace(oldPath, newPath string, done func(n int, err error)) error
}

// fileJob is a sequence of steps, each started when the one before it completed, so that
// their order holds on disk as far as the file system keeps the order of its metadata
// changes (and the crash argument never needs more: see docs/storage.md, "Crash model").
// A failed unlink or write is logged (ENOENT is not a failure) and the job goes on; a
// failed rename ends it. then, when set, runs at the end with the failed rename's error.
type fileJob struct {
	l     *Log
	steps []fileStep
	next  int
	then  func(err error)
	step  func(int, error) // j.stepDone, bound once
	// A write step's descriptor while its write is in flight (-1: none), and its op
	// completions.
	fd              int
	opened, written func(int, error)
}

// setFileOps routes the log's unlinks and renames through ops (SetAsyncRetention and
// SetAsyncSnapshots; the shard passes its reactor to both).
// With a backend that runs its ops inline (runsInline) the names change the blocking way,
// which is the same work on the same thread, and the segment files' unlinks stay in the
// background goroutine.
func (l *Log) setFileOps(ops AsyncFileOps) {
	if runsInline(ops) {
		return
	}
	l.fileJobs.ops = ops
	l.fileJobs.idle = func() bool { return l.fileJobs.inFlight == 0 }
}

// fileJobsAsync reports whether namespace changes go through the ring.
func (l *Log) fileJobsAsync() bool { return l.fileJobs.ops != nil }

// FileJobsPending is how many unlink/rename sequences are in flight. Owner goroutine.
func (l *Log) FileJobsPending() int { return l.fileJobs.inFlight }

// startFileJob runs steps in order through the ring (on the owner's thread without one)
// and then then(err), if set.
func (l *Log) startFileJob(steps []fileStep, then func(err error)) {
	j := &fileJob{l: l, steps: steps, then: then, fd: -1}
	j.step = j.stepDone
	l.fileJobs.inFlight++
	j.run()
}

// run starts the next step, running on the owner's thread those the ring refuses, until one
// is in flight or the job is over.
func (j *fileJob) run() {
	ops := j.l.fileJobs.ops
	for j.next < len(j.steps) {
		s := j.steps[j.next]
		if ops != nil && j.start(ops, s) == nil {
			return
		}
		var err error
		switch {
		case s.dirSynced != nil:
			err = syncDir(j.l.fio, s.from)
		case s.data != nil:
			err = os.WriteFile(s.from, s.data, 0o644)
		case s.to == "":
			err = os.Remove(s.from)
		case s.noReplace:
			err = unix.Renameat2(unix.AT_FDCWD, s.from, unix.AT_FDCWD, s.to, unix.RENAME_NOREPLACE)
		default:
			err = os.Rename(s.from, s.to)
		}
		if !j.done(err) {
			return
		}
	}
	j.finish(nil)
}

// start submits step s through ops; an error means the ring refused it (nothing started).
func (j *fileJob) start(ops AsyncFileOps, s fileStep) error {
	if (s.data != nil || s.dirSynced != nil) && j.opened == nil {
		j.opened, j.written = j.onOpened, j.onWritten
	}
	switch {
	case s.dirSynced != nil:
		return ops.StartOpen(s.from, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0, j.opened)
	case s.data != nil:
		return ops.StartOpen(s.from, unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC|unix.O_CLOEXEC, 0o644, j.opened)
	case s.to == "":
		return ops.StartUnlink(s.from, j.step)
	case s.noReplace:
		r, ok := ops.(noReplaceRenamer)
		if !ok {
			return unix.ENOTSUP
		}
		return r.StartRenameNoReplace(s.from, s.to, j.step)
	}
	return ops.StartRename(s.from, s.to, j.step)
}

// onOpened: a write step's file is open; write its contents (here, when the ring refuses).
// A directory sync step's directory is open; fsync it (here, when the ring refuses).
func (j *fileJob) onOpened(fd int, err error) {
	if err != nil {
		j.stepDone(0, err)
		return
	}
	j.fd = fd
	if j.steps[j.next].dirSynced != nil {
		if j.l.fileJobs.ops.StartFsync(fd, false, j.written) != nil {
			j.onWritten(0, j.l.fio.Fsync(fd))
		}
		return
	}
	data := j.steps[j.next].data
	if j.l.fileJobs.ops.StartWrite(fd, data, 0, j.written) != nil {
		n, err := unix.Pwrite(fd, data, 0)
		j.onWritten(n, err)
	}
}

// onWritten: a write step's write completed; close the file (no I/O: it is not synced).
// Also the completion of a directory sync step's fsync (no data: n is 0).
func (j *fileJob) onWritten(n int, err error) {
	if err == nil && n != len(j.steps[j.next].data) {
		err = fmt.Errorf("short write: %d of %d bytes: %w", n, len(j.steps[j.next].data), unix.EIO)
	}
	if cerr := unix.Close(j.fd); err == nil {
		err = cerr
	}
	j.fd = -1
	j.stepDone(0, err)
}

// stepDone is the completion of the step in flight.
func (j *fileJob) stepDone(_ int, err error) {
	if j.done(err) {
		j.run()
	}
}

// done books the current step's result and reports whether the job goes on (it ended on
// a failed rename).
func (j *fileJob) done(err error) bool {
	s := j.steps[j.next]
	j.next++
	if s.dirSynced != nil {
		s.dirSynced(err)
	}
	switch {
	case err == nil:
	case s.dirSynced != nil:
		j.l.cfg.Logger.Warn("sync dir", "dir", s.from, "err", err)
	case s.to != "":
		j.finish(fmt.Errorf("rename %s to %s: %w", s.from, s.to, err))
		return false
	case s.data != nil:
		j.l.cfg.Logger.Warn("write file", "path", s.from, "err", err)
	case !errors.Is(err, unix.ENOENT):
		j.l.cfg.Logger.Warn("remove file", "path", s.from, "err", err) // OpenLog sweeps what is left
	}
	return true
}

func (j *fileJob) finish(err error) {
	j.next = len(j.steps)
	j.l.fileJobs.inFlight--
	if j.then != nil {
		j.then(err)
	}
}

// awaitFileJobs waits for the unlinks and renames in flight: before anything creates a
// name one of them may still remove (a truncation or reset that starts a segment at an
// offset a retired one had, a snapshot at an offset a pruned one had), lists the
// directory (a producer state reload), or closes the log. A failed wait fails the log.
func (l *Log) awaitFileJobs() error {
	if l.fileJobs.inFlight == 0 {
		return nil
	}
	if err := l.fileJobs.ops.AwaitWrites(l.fileJobs.idle); err != nil {
		return l.fail(fmt.Errorf("wait for unlinks and renames: %w", err))
	}
	return nil
}
