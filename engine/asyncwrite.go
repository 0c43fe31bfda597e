package engine

import (
	"fmt"

	"github.com/ringlog/ringlog/ring"
	"golang.org/x/sys/unix"
)

// Asynchronous direct-mode writes.
//
// With an AsyncWriter (SetAsyncWriter; the shard's reactor in production), a direct-mode
// append copies its batches into the staging chunks, assigns their offsets and returns
// without waiting for the device. The staged bytes go out as one write group: one write op
// per chunk touched (chunk boundaries are block-aligned, so the ops never overlap and run
// in parallel), covering [alignDown(written end), alignUp(staged end)). Only one group is
// in flight per log, because the next one rewrites the partial tail block the current one
// ends in, and two O_DIRECT writes of one block in flight may reach the device in either
// order. Appends arriving meanwhile are staged and go out together as the next group the
// moment the current one completes: several partitions' groups, and every chunk of a
// group, are in flight on the shard's ring at once.
//
// EndOffset is the end of the completed groups: readers, the high watermark and syncs
// (BeginSync covers only completed writes) never see a staged byte. When a group completes
// the written hook runs; the owner acknowledges the appends it covers, in offset order. A
// failed or short write fails the log for good (ErrLogFailed, like a failed fdatasync):
// later groups may already be staged behind it, so nothing after the failure is ever
// reported written, and reopening re-runs recovery, which drops whatever the failed write
// left torn.
//
// Operations that need the staged bytes on disk first (a roll, Sync, truncation, Close)
// wait for the writes with AwaitWrites; that is the only place the owner blocks on them.

// AsyncWriter starts writes whose completions the log's owner reports later, on the log's
// goroutine. *ring.Reactor implements it.
type AsyncWriter interface {
	// StartWrite writes p at off on fd (block-aligned address, length and offset) and calls
	// done(n, err) on the owner's goroutine when it completes, never from inside StartWrite.
	// p stays untouched until then.
	StartWrite(fd int, p []byte, off int64, done func(n int, err error)) error
	// AwaitWrites blocks the owner until cond() is true, running the done callbacks of
	// StartWrite as their writes complete (and nothing else).
	AwaitWrites(cond func() bool) error
}

// FixedBufferWriter is an AsyncWriter that can register the staging chunks as the ring's
// fixed buffers, so their writes go as WRITE_FIXED (no page pinning per write).
// *ring.Reactor implements it. A chunk is registered the first time it is written and
// released when the log drops it.
type FixedBufferWriter interface {
	AsyncWriter
	RegisterWriteBuffer(b []byte) (index int, ok bool)
	UnregisterWriteBuffer(index int)
	StartWriteFixed(fd int, p []byte, off int64, index int, done func(n int, err error)) error
}

// directStagedMax bounds the bytes a log stages behind the write in flight: an append past
// it waits for the device (back-pressure for producers that do not wait for
// acknowledgements, acks=0). A variable for tests.
var directStagedMax int64 = 16 << 20

// writeGroup is the one write group of a log in flight.
type writeGroup struct {
	ops       int   // write ops not yet completed
	want, got int64 // bytes submitted, bytes the completions reported
	err       error // the first failure
	pos       int64 // staged end the group covers (file position)
	next      int64 // offset after its last batch
}

// SetAsyncWriter makes direct-mode appends asynchronous through aw (see above); written
// runs on the owner's goroutine each time EndOffset advances or the log fails because of
// a write, possibly from inside a Log method that waits for writes; it must not call the
// Log's mutating methods. It reports false, changing nothing, when the log is not in
// direct mode. Call it before the first append.
func (l *Log) SetAsyncWriter(aw AsyncWriter, written func()) bool {
	if l.mode != StorageDirect || aw == nil {
		return false
	}
	l.aw, l.onWritten = aw, written
	l.fixedIO, _ = aw.(FixedBufferWriter)
	if s := l.active(); s.direct != nil {
		s.direct.fixedIO = l.fixedIO
	}
	l.awDone = l.writeOpDone
	l.awIdle = func() bool { return l.wg.ops == 0 }
	return true
}

// StagedEndOffset is the offset the next appended record gets; above EndOffset while
// asynchronous writes are staged or in flight.
func (l *Log) StagedEndOffset() int64 { return l.active().nextOffset }

// WritesPending reports whether appended bytes are not yet on the device.
func (l *Log) WritesPending() bool {
	s := l.active()
	return s.direct != nil && s.direct.pending() || l.staged.pending()
}

// writeAsync stages batches, just noted in s (which held prevNext before them), at pos and
// starts a write group when none is in flight.
func (l *Log) writeAsync(s *segment, batches [][]byte, pos, prevNext int64) error {
	w := s.direct
	if !w.pending() {
		l.writtenNext = prevNext // the end of what is on disk, until a group completes
	}
	w.stage(batches, pos)
	l.submitWrites(s)
	return nil
}

// makeRoom waits for the writes in flight when staging batches would leave more than
// directStagedMax bytes behind them. It runs before the append notes any batch: a group
// that completes meanwhile starts the next from what is staged, which must match the
// segment's state.
func (l *Log) makeRoom(batches [][]byte) error {
	if l.aw == nil {
		return nil
	}
	w := l.active().direct
	if w == nil || !w.pending() || w.active.end()+totalBytes(batches)-w.writtenPos <= directStagedMax {
		return nil
	}
	return l.awaitWrites()
}

// submitWrites starts a write group for everything staged in s, unless one is in flight.
func (l *Log) submitWrites(s *segment) {
	w := s.direct
	if l.wg.ops > 0 || !w.pending() || l.failed != nil {
		return
	}
	from := alignDown(w.writtenPos)
	// No fallocate ahead here (the synchronous path does one per 32 MiB): it is a blocking
	// call, and on ext4 it waits for the inode lock that the writes in flight hold. The
	// writes allocate their own blocks, off the loop.
	iov, _ := w.pieces(l.iovecs[:0], from)
	l.wg = writeGroup{pos: w.active.end(), next: s.nextOffset}
	off := from
	for _, p := range iov {
		l.wg.want += int64(len(p))
		var err error
		if idx := w.fixedIndex(w.chunkAt(off)); idx >= 0 {
			err = l.fixedIO.StartWriteFixed(w.fd(), p, off, idx, l.awDone)
		} else {
			err = l.aw.StartWrite(w.fd(), p, off, l.awDone)
		}
		if err != nil {
			// No room on the ring right now: write this piece the blocking way (the pieces
			// never overlap, so it may run beside the ones in flight).
			n, err := pwriteAll(l.fio, w.fd(), p, off)
			l.wg.got += int64(n)
			if err != nil && l.wg.err == nil {
				l.wg.err = err
			}
		} else {
			l.wg.ops++
		}
		off += int64(len(p))
	}
	clear(iov)
	l.iovecs = iov[:0]
	if l.wg.ops == 0 {
		l.groupDone()
	}
}

// pwriteAll is pwriteFull that also reports how many bytes it wrote.
func pwriteAll(fio ring.FileIO, fd int, p []byte, off int64) (int, error) {
	done := 0
	for done < len(p) {
		n, err := fio.Pwrite(fd, p[done:], off+int64(done))
		if err != nil {
			return done, err
		}
		if n <= 0 {
			return done, fmt.Errorf("pwrite at %d wrote %d bytes: %w", off+int64(done), n, unix.EIO)
		}
		done += n
	}
	return done, nil
}

// writeOpDone is the completion of one write op of the group in flight.
func (l *Log) writeOpDone(n int, err error) {
	l.wg.got += int64(max(n, 0))
	if err != nil && l.wg.err == nil {
		l.wg.err = err
	}
	if l.wg.ops--; l.wg.ops == 0 {
		l.groupDone()
	}
}

// groupDone ends the write group: the written end advances to it, or the log fails; the
// next group (what was staged meanwhile) starts; the owner hears of it.
func (l *Log) groupDone() {
	g := l.wg
	l.wg = writeGroup{}
	if g.err == nil && g.got != g.want {
		g.err = fmt.Errorf("short write: %d of %d bytes: %w", g.got, g.want, unix.EIO)
	}
	if l.closed {
		return
	}
	s := l.active()
	switch {
	case g.err != nil:
		l.fail(fmt.Errorf("direct write of segment %d up to %d: %w", s.baseOffset, g.pos, storageWriteError(l.dir, g.err)))
	case l.failed == nil:
		s.direct.written(g.pos)
		l.writtenNext = g.next
		l.submitWrites(s)
	}
	if l.onWritten != nil {
		l.onWritten()
	}
}

// awaitWrites waits until everything staged is on the device (or the log failed, which it
// then returns). Without asynchronous writes it returns at once.
func (l *Log) awaitWrites() error {
	if l.staged.pending() {
		return l.WriteStaged() // stagedwrite.go
	}
	if l.aw == nil {
		return nil
	}
	for {
		if l.wg.ops == 0 {
			if !l.WritesPending() || l.failed != nil {
				return l.failed
			}
			l.submitWrites(l.active())
			continue
		}
		if err := l.aw.AwaitWrites(l.awIdle); err != nil {
			return l.fail(fmt.Errorf("wait for direct writes: %w", err))
		}
	}
}
