package engine

import "fmt"

// A roll's producer snapshot off the owner's loop.
//
// Every roll writes the producer state to <offset>.snapshot (producersnapshot.go). Written the
// blocking way that is a buffered pwrite of the temporary file through the owner's FileIO (a
// ring op the kernel hands to io-wq while the owner waits) and a rename: 0.17–0.23 s of the
// shard loops' time blocked per profiled run of BenchmarkDirectAppend churn-recycle, 16
// partitions rolling every ~0.4 s (docs/benchmarks.md, session 11).
//
// With AsyncFileOps (SetAsyncSnapshots; the shard's reactor) the roll encodes the state into
// the log's scratch buffer and starts an asynchronous atomic write of <offset>.snapshot
// (fileasync.go, without its fsyncs), and returns:
//
//	roll:          encode, start the atomic write (open of the temporary file on the ring)
//	  open done:   start its write
//	  write done:  close it, start its rename to <offset>.snapshot
//	  rename done: the snapshot counts as written: it joins l.snapshots, the next Sync or
//	               BeginSync fdatasyncs it and the directory (unsyncedSnapshot, dirGen), and
//	               older snapshots may be pruned (their unlinks go to the ring too,
//	               fileJobs), exactly as after the blocking write
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
// completes it first (awaitSnapshot), and for pruned snapshots' unlinks (awaitFileJobs):
// TruncateTo, ResetTo, a failed staged write's reload, and Close (whose own snapshot is
// written the blocking way after it). Sync takes the snapshot to fdatasync before it
// flushes the directory, so a rename that completes while Sync waits on the device is left
// for the next sync, never counted durable without its directory entry. A failed op ends
// the pass: the temporary file is removed, the error logged (a lost snapshot costs recovery
// time, not correctness). When the ring refuses the open (full) the snapshot is written the
// blocking way; where it cannot rename (before Linux 5.11) the rename runs on the loop.

// snapshotPass is a log's producer snapshot in flight. Owner goroutine only.
type snapshotPass struct {
	ops     AsyncFileOps // nil: snapshots are written the blocking way
	offset  int64        // the log end offset the snapshot in flight describes
	file    asyncAtomicWrite
	skipped int64       // rolls that wrote no snapshot because one was in flight
	idle    func() bool // AwaitWrites' condition, bound once
}

// SetAsyncSnapshots makes rolls write their producer snapshots through ops without waiting
// (see above), and the log unlink and rename files through ops (fileJobs). Call it before
// the first append.
func (l *Log) SetAsyncSnapshots(ops AsyncFileOps) {
	p := &l.snapshot
	p.ops = ops
	p.file.init(ops, l.snapshotWritten)
	p.idle = func() bool { return !p.file.busy() }
	l.setFileOps(ops)
}

// SnapshotPending reports whether a roll's producer snapshot is being written.
func (l *Log) SnapshotPending() bool { return l.snapshot.file.busy() }

// SnapshotsSkipped is how many rolls wrote no producer snapshot because the previous one was
// still in flight. Owner goroutine.
func (l *Log) SnapshotsSkipped() int64 { return l.snapshot.skipped }

// startSnapshot begins writing the producer state as of the log end offset. started is
// false, with nothing changed, when the ring refused the open: the caller writes the
// snapshot the blocking way.
func (l *Log) startSnapshot() (started bool) {
	p := &l.snapshot
	offset := l.EndOffset()
	l.snapshotScratch = appendProducerSnapshot(l.snapshotScratch, &l.producers, offset)
	if !p.file.start(producerSnapshotPath(l.dir, offset), l.snapshotScratch, false) {
		return false
	}
	p.offset = offset
	return true
}

// snapshotWritten: the snapshot is in place, written as the blocking write leaves it, or
// its write failed (the temporary file is gone; logged).
func (l *Log) snapshotWritten(err error) {
	if err == nil {
		err = l.snapshotInPlace(l.snapshot.offset)
	}
	if err != nil {
		l.cfg.Logger.Warn("producer snapshot failed", "dir", l.dir, "err", err)
	}
}

// awaitSnapshot waits for a producer snapshot in flight: before anything removes snapshots
// or reloads the producer state. A failed wait fails the log.
func (l *Log) awaitSnapshot() error {
	p := &l.snapshot
	if !p.file.busy() {
		return nil
	}
	if err := p.ops.AwaitWrites(p.idle); err != nil {
		return l.fail(fmt.Errorf("wait for the producer snapshot: %w", err))
	}
	return nil
}
