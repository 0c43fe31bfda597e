package engine

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// A roll's producer snapshot off the owner's loop.
//
// Every roll writes the producer state to <offset>.snapshot (producersnapshot.go). Written the
// blocking way that is a buffered pwrite of the temporary file through the owner's FileIO (a
// ring op the kernel hands to io-wq while the owner waits) and a rename: 0.17–0.23 s of the
// shard loops' time blocked per profiled run of BenchmarkDirectAppend churn-recycle, 16
// partitions rolling every ~0.4 s (docs/benchmarks.md, session 11).
//
// With AsyncFileOps (SetAsyncSnapshots; the shard's reactor) the roll encodes the state into
// the log's scratch buffer, creates <offset>.snapshot.tmp and starts its write, and returns:
//
//	roll:          encode, create the temporary file, start its write
//	  write done:  close it, start its rename to <offset>.snapshot
//	  rename done: the snapshot counts as written: it joins l.snapshots, the next Sync or
//	               BeginSync fdatasyncs it and the directory (unsyncedSnapshot, dirGen), and
//	               older snapshots may be pruned, exactly as after the blocking write
//
// Nothing trusts the snapshot before its rename completed: recovery never sees a temporary
// file (listProducerSnapshots removes them), and a snapshot renamed in place but not yet
// synced may be lost or fail its CRC after a power loss, when recovery falls back to the older
// one or to the log's headers (as for the blocking write, whose fsync is also deferred). A
// snapshot names the log end offset it describes; recovery deletes one beyond the recovered
// end, so a snapshot of state the log lost is never used.
//
// One snapshot is in flight at a time. A roll meanwhile writes none (the next roll's covers
// it; recovery then reads one more segment's headers): its scratch buffer is still the
// write's. Whatever removes snapshots or reloads the producer state waits for the pass and
// completes it first (awaitSnapshot): TruncateTo, ResetTo, a failed staged write's reload,
// and Close (whose own snapshot is written the blocking way after it). Sync takes the
// snapshot to fdatasync before it flushes the directory, so a rename that completes while
// Sync waits on the device is left for the next sync, never counted durable without its
// directory entry. A failed op ends the pass: the temporary file is removed, the error
// logged (a lost snapshot costs recovery time, not correctness). When the ring refuses the
// write (full) the snapshot is written the blocking way; where it cannot rename (before
// Linux 5.11) the rename runs on the loop.

// snapshotPhase is where a roll's producer snapshot stands.
type snapshotPhase uint8

const (
	snapshotIdle   snapshotPhase = iota
	snapshotWrite                // <offset>.snapshot.tmp created, its write in flight
	snapshotRename               // written and closed, its rename in flight
)

// snapshotPass is a log's producer snapshot in flight. Owner goroutine only.
type snapshotPass struct {
	ops     AsyncFileOps // nil: snapshots are written the blocking way
	phase   snapshotPhase
	offset  int64 // the log end offset the snapshot describes
	fd      int   // the temporary file's descriptor while its write is in flight; -1
	skipped int64 // rolls that wrote no snapshot because one was in flight
	// The completions and AwaitWrites' condition, bound once.
	written, renamed func(int, error)
	idle             func() bool
}

// SetAsyncSnapshots makes rolls write their producer snapshots through ops without waiting
// (see above). Call it before the first append.
func (l *Log) SetAsyncSnapshots(ops AsyncFileOps) {
	p := &l.snapshot
	p.ops, p.fd = ops, -1
	p.written, p.renamed = l.snapshotWritten, l.snapshotRenamed
	p.idle = func() bool { return p.phase == snapshotIdle }
}

// SnapshotPending reports whether a roll's producer snapshot is being written.
func (l *Log) SnapshotPending() bool { return l.snapshot.phase != snapshotIdle }

// SnapshotsSkipped is how many rolls wrote no producer snapshot because the previous one was
// still in flight. Owner goroutine.
func (l *Log) SnapshotsSkipped() int64 { return l.snapshot.skipped }

// startSnapshot begins writing the producer state as of the log end offset. started is
// false, with nothing changed, when the ring refused the write: the caller writes the
// snapshot the blocking way.
func (l *Log) startSnapshot() (started bool, err error) {
	p := &l.snapshot
	offset := l.EndOffset()
	tmp := producerSnapshotPath(l.dir, offset) + tmpSuffix
	fd, err := unix.Open(tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return false, fmt.Errorf("write producer snapshot %d: %w", offset, err)
	}
	l.snapshotScratch = appendProducerSnapshot(l.snapshotScratch, &l.producers, offset)
	if err := p.ops.StartWrite(fd, l.snapshotScratch, 0, p.written); err != nil {
		unix.Close(fd)
		os.Remove(tmp)
		return false, nil
	}
	p.phase, p.offset, p.fd = snapshotWrite, offset, fd
	return true, nil
}

// snapshotWritten: the temporary file holds the snapshot; rename it in place.
func (l *Log) snapshotWritten(n int, err error) {
	p := &l.snapshot
	if err == nil && n != len(l.snapshotScratch) {
		err = fmt.Errorf("short write: %d of %d bytes: %w", n, len(l.snapshotScratch), unix.EIO)
	}
	if cerr := unix.Close(p.fd); err == nil {
		err = cerr // a close error may be a late write error: the file is not trusted
	}
	p.fd = -1
	if err != nil {
		l.snapshotFailed(err)
		return
	}
	p.phase = snapshotRename
	path := producerSnapshotPath(l.dir, p.offset)
	if p.ops.StartRename(path+tmpSuffix, path, p.renamed) != nil {
		// No RENAMEAT (before Linux 5.11) or a full ring: rename here, as the blocking
		// write does.
		p.renamed(0, os.Rename(path+tmpSuffix, path))
	}
}

// snapshotRenamed: the snapshot is in place, written as the blocking write leaves it.
func (l *Log) snapshotRenamed(_ int, err error) {
	p := &l.snapshot
	if err != nil {
		l.snapshotFailed(err)
		return
	}
	p.phase = snapshotIdle
	if err := l.snapshotInPlace(p.offset); err != nil {
		l.cfg.Logger.Warn("producer snapshot failed", "dir", l.dir, "err", err)
	}
}

// snapshotFailed ends a pass whose temporary file failed: it is removed, the error logged.
func (l *Log) snapshotFailed(err error) {
	p := &l.snapshot
	tmp := producerSnapshotPath(l.dir, p.offset) + tmpSuffix
	os.Remove(tmp)
	p.phase = snapshotIdle
	l.cfg.Logger.Warn("producer snapshot failed", "dir", l.dir, "err", fmt.Errorf("write %s: %w", tmp, err))
}

// awaitSnapshot waits for a producer snapshot in flight: before anything removes snapshots
// or reloads the producer state. A failed wait fails the log.
func (l *Log) awaitSnapshot() error {
	p := &l.snapshot
	if p.phase == snapshotIdle {
		return nil
	}
	if err := p.ops.AwaitWrites(p.idle); err != nil {
		return l.fail(fmt.Errorf("wait for the producer snapshot: %w", err))
	}
	return nil
}
