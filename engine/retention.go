package engine

import (
	"fmt"
	"path/filepath"
)

// Retention off the owner's loop.
//
// A retention pass that deletes must make the new log start offset durable before it
// retires a segment (EnforceRetention): the retire renames are not durable until a later
// directory fsync, a power loss may take back any subset of them, and recovery drops every
// segment wholly below the checkpoint so that one that comes back never sits before a gap.
// Written the blocking way (writeFileAtomic) that is two fsyncs and a rename on the owner's
// thread per pass: about 0.9 s of the shard loops' time blocked in one 64 KiB run of
// BenchmarkDirectAppend churn-recycle, 16 partitions at a retention limit
// (docs/benchmarks.md, sessions 10 and 11).
//
// With AsyncFileOps (SetAsyncRetention; the shard's reactor, whose kernel runs each op on an
// io-wq worker when it would block), a pass writes the checkpoint as an asynchronous atomic
// write (fileasync.go: open, write, fsync, rename, directory fsync, each a ring op started by
// the previous one's completion), and the owner never waits:
//
//	EnforceRetention:  choose the segments, start the checkpoint's atomic write
//	  ... its ops ...
//	  dir fsync done:  the checkpoint is durable; the done hook asks the owner to call
//	CompleteRetention: retire the segments below the checkpoint (their unlinks go to the
//	                   ring too, fileJobs), move the start offset
//
// The rename goes to the ring too: it drops the old checkpoint's last link, and on ext4
// mounted with discard (journal-less, as this project's data disk) freeing its block
// discards it synchronously, which cost the loop as much as an fsync.
//
// Until CompleteRetention the segments stay in the log, readable, and the start offset does
// not move: readers never see a retired segment, and a crash at any point leaves either the
// old checkpoint (nothing was retired) or the new one (recovery drops what a power loss
// brought back). The completions only keep books (close a descriptor, start the next op);
// retiring, which closes files that read results may refer to, waits for CompleteRetention
// at the owner's top level.
//
// While a pass is in flight, whatever else writes or removes the checkpoint or changes the
// front of the log first waits for it and completes it (awaitRetention), as for a roll's
// seal: DeleteRecordsBefore, TruncateTo, ResetTo and Close. A second EnforceRetention takes
// no new pass (the next one does, after CompleteRetention). Rolls and appends go on, and so
// does compaction: a pass names an offset, not segment objects, and a compaction swap
// keeps the segment's base offset (a swapped segment below the checkpoint is retired, or
// dropped by recovery, like the one it replaced). A pass whose op fails retires nothing
// and reports the error at CompleteRetention; the next pass writes the checkpoint again.
// When the ring refuses the first op (full), the pass writes the checkpoint the blocking way;
// where it cannot rename (before Linux 5.11), the rename runs on the loop.

// retentionPhase is where a retention pass's checkpoint stands.
type retentionPhase uint8

const (
	retentionIdle      retentionPhase = iota
	retentionWriting                  // the checkpoint's atomic write is in flight (p.file.phase: which op)
	retentionCompleted                // written (or failed: err); CompleteRetention retires
)

// retentionPass is a log's retention pass in flight. Owner goroutine only.
type retentionPass struct {
	ops    AsyncFileOps // nil: retention writes its checkpoint the blocking way
	done   func()       // SetAsyncRetention's hook
	phase  retentionPhase
	target int64            // the new log start offset: the base of the first segment that stays
	file   asyncAtomicWrite // the checkpoint's write
	err    error            // the failure that ended the pass
	idle   func() bool      // AwaitWrites' condition, bound once
}

func (p *retentionPass) inFlight() bool { return p.phase == retentionWriting }

// SetAsyncRetention makes retention write its log start offset checkpoint through ops
// without blocking the owner (see above), and the log unlink and rename files through ops
// (fileJobs). done runs on the owner's goroutine when a pass's checkpoint is durable or
// failed, possibly from inside a Log method that waits for writes (of this log or another
// on the same loop); it must not call the Log's methods, only arrange for
// CompleteRetention to run soon at the owner's top level. Call it before the first
// EnforceRetention.
func (l *Log) SetAsyncRetention(ops AsyncFileOps, done func()) {
	p := &l.retention
	p.ops, p.done = ops, done
	p.file.init(ops, l.retentionWritten)
	p.file.syncKinds = [2]syncKind{syncCheckpointFile, syncCheckpointDir}
	p.file.dirs = &l.dirs // its directory fsync also covers the pool's map names (dirsync.go)
	p.idle = func() bool { return !p.inFlight() }
	l.setFileOps(ops)
}

// RetentionPending reports whether a retention pass's checkpoint is being written or waits
// for CompleteRetention.
func (l *Log) RetentionPending() bool { return l.retention.phase != retentionIdle }

func (l *Log) startOffsetPath() string { return filepath.Join(l.dir, startOffsetFileName) }

// startRetention begins a pass that moves the log start offset to target (a segment base
// above it): the checkpoint's atomic write starts. started is false, with nothing changed,
// when the ring refused its first op (full): the caller writes the checkpoint the blocking
// way.
func (l *Log) startRetention(target int64) (started bool) {
	p := &l.retention
	if !p.file.start(l.startOffsetPath(), encodeStartOffset(target), true) {
		return false
	}
	p.phase, p.target, p.err = retentionWriting, target, nil
	return true
}

// retentionWritten: the checkpoint is durable, or its write failed.
func (l *Log) retentionWritten(err error) {
	p := &l.retention
	p.phase, p.err = retentionCompleted, err
	if p.done != nil {
		p.done()
	}
}

// CompleteRetention finishes a retention pass whose checkpoint is durable: the segments
// below it retire and the log start offset moves to it. It returns how many segments it
// retired (0 when no pass was completed), or the pass's failure (nothing retired). The owner
// calls it at its top level after SetAsyncRetention's hook ran; EnforceRetention calls it
// too. File pieces of earlier reads stay valid until it runs, as for EnforceRetention.
func (l *Log) CompleteRetention() (int, error) {
	p := &l.retention
	if p.phase != retentionCompleted || l.closed {
		return 0, nil
	}
	p.phase = retentionIdle
	if err := p.err; err != nil {
		p.err = nil
		return 0, fmt.Errorf("retention: write start offset %d: %w", p.target, err)
	}
	return l.retireBelow(p.target)
}

// awaitRetention waits for a retention pass in flight and completes it: before anything
// else writes or removes the checkpoint or changes the front of the log. A failed pass
// retired nothing and is only logged; a failed directory fsync may leave the new checkpoint
// in place above the live start offset, as a failed blocking write did. A failed wait fails
// the log.
func (l *Log) awaitRetention() error {
	p := &l.retention
	if p.inFlight() {
		if err := p.ops.AwaitWrites(p.idle); err != nil {
			return l.fail(fmt.Errorf("wait for the retention checkpoint: %w", err))
		}
	}
	if _, err := l.CompleteRetention(); err != nil {
		l.cfg.Logger.Warn("retention failed", "dir", l.dir, "err", err)
	}
	return nil
}

// retireBelow retires the closed segments that lie wholly below target (the next one starts
// at or below it), oldest first, and moves the log start offset to target, which must be
// durable (the checkpoint, or an offset at or below it). A segment whose roll's seal, batch
// map write or renames are still in flight is not retired yet, nor any after it: it stays,
// below the start offset and unreadable, until a later call (EnforceRetention retires
// what lies below the start offset first). The start offset moves to target all the same:
// a crash from here on recovers the log from the checkpoint, so serving records below it
// now would show a reader records that a restart takes back.
func (l *Log) retireBelow(target int64) (int, error) {
	deleted := 0
	for l.firstRetirable(target) {
		if err := l.retireSegment(0); err != nil {
			return deleted, err
		}
		deleted++
	}
	l.startOffset = max(l.startOffset, target)
	l.assertInvariants()
	return deleted, nil
}

// firstRetirable reports whether the first segment lies wholly below target and its roll is
// finished (no seal, batch map write or renames in flight), so that retireBelow may retire it.
func (l *Log) firstRetirable(target int64) bool {
	if len(l.segments) < 2 || l.segments[1].baseOffset > target {
		return false
	}
	s := l.segments[0]
	return !s.sealing && !s.mapWriting && !s.namesPending
}
