package engine

import (
	"fmt"
	"sync/atomic"

	"github.com/ringlog/ringlog/ring"
	"golang.org/x/sys/unix"
)

// Asynchronous direct-mode writes.
//
// With an AsyncWriter (SetAsyncWriter; the shard's reactor in production), a direct-mode
// append copies its batches into the staging chunks, assigns their offsets and returns
// without waiting for the device. The staged bytes go out as write groups: one write op per
// chunk touched (chunk boundaries are block-aligned, so the ops never overlap and run in
// parallel). Up to DirectWriteGroupsMax groups (default 1) are in flight per log, in file
// order, each covering [alignDown(the end before it), alignUp(its staged end)): a new group
// starts at once when none is in flight, else once DirectGroupMinBytes are staged past the
// last one (with one group: the moment it finishes).
// Two groups share a block when the first ends inside it; two O_DIRECT writes of one block
// in flight may reach the device in either order, so the second group's write of that
// block waits until the first group finished (its other blocks go out at once):
//
//	group 1 (in flight):   [blk|blk|blk|tail]
//	group 2:                            [tail|blk|blk|blk]   tail: after group 1 finished
//	                                          <-- at once -->
//
// Several partitions' groups, and every chunk of a group, are in flight on the shard's
// ring at once. Groups finish in any order; the written end advances over finished groups
// in file order only.
//
// EndOffset is the end of the groups finished in order: readers, the high watermark and
// syncs (BeginSync covers only completed writes) never see a staged byte. When it advances
// the written hook runs; the owner acknowledges the appends it covers, in offset order. A
// failed or short write fails the log for good (ErrLogFailed, like a failed fdatasync):
// later groups may already be in flight or staged behind it, so from the failure on the
// written end never moves again (not even over an earlier group that finishes later), and
// reopening re-runs recovery, which drops whatever the failed write left torn. A crash
// with groups in flight can leave a later group on disk and an earlier one torn or lost
// (as with the chunks of one group): recovery stops at the first bad batch and cuts the
// rest, none of which was reported written.
//
// Operations that need the staged bytes on disk first (Sync, truncation, Close) wait for
// the writes with AwaitWrites; that is the only place the owner blocks on them.
//
// Rolls do not wait. The sealed segment's staged bytes go out at once as its last group
// (past DirectWriteGroupsMax, which counts the active segment's groups only), the new
// segment takes appends, and its groups start beside the old one's (another file: no block
// is shared). Groups stay in one FIFO in log order, so the written end crosses into the new
// segment only once the old one is wholly written. Until then the old segment keeps its
// writer (reads of its tail are served from the chunks) and stays "sealing"; when its last
// group completes, its chunks go to the log's pool and its file is cut to its logical
// length off the loop (FileTruncator: IORING_OP_FTRUNCATE, which the kernel runs on a
// worker thread — on ext4 the cut reads the partial last block and, mounted with discard,
// discards the freed blocks, both synchronously, which stalled the loop at every roll):
//
//	segment 41 (sealing):  [g1 in flight][g2: the rest, at the roll]  -> cut to size
//	segment 42 (active):                                  [g3][g4 staged]
//	written end:  moves over g1, g2, then g3, g4 — in this order only
//
// BeginSync covers a sealing segment only as far as it is written and nothing after it; a
// sealing segment stays on the unsynced list until a sync covers it whole. A crash before
// the cut leaves the sealed file with zero padding (and a recycled file's stale bytes) past
// its last batch; recovery stops a sealed segment's scan at the next segment's base and
// cuts the rest, and a sealed segment torn by a crash has no proof of a sync, so its tail
// is cut and the later segments deleted (recovery.go): none of their records was reported
// written. Whatever removes, renames, compacts or reactivates a segment file (retention,
// truncation, compaction, Close) first waits for the seals in flight (awaitSeals). A log
// with a zeroing job (prealloc.go) still waits at a roll: the job owns the cut.

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

// FileTruncator is an AsyncWriter that can also cut a file without blocking the owner:
// done(0, err) is called like a StartWrite completion (and AwaitWrites waits for it like
// one). *ring.Reactor implements it (IORING_OP_FTRUNCATE; an error such as ErrUnsupported
// before Linux 6.9 makes the log cut the file itself).
type FileTruncator interface {
	StartFtruncate(fd int, size int64, done func(n int, err error)) error
}

// directStagedMax bounds the bytes a log stages behind the write in flight: an append past
// it waits for the device (back-pressure for producers that do not wait for
// acknowledgements, acks=0). A variable for tests.
var directStagedMax int64 = 16 << 20

// DirectWriteGroupsMax is how many write groups a direct-mode log keeps in flight (1 to
// DirectWriteGroupsLimit; ringlogd --direct-write-groups sets it at start-up). Default 1: several groups per partition lost the session-9 A/B
// on this machine's virtio disk (16 partitions at a retention limit: 4 groups won 3 of 12
// comparisons with one, ×0.58–1.19; on one fresh segment a wash), because the log already keeps 40–47 write ops in
// flight (one per chunk a group touches) and more groups only cut them smaller and make a
// roll wait for more (docs/benchmarks.md, "session 9"). The mechanism stays, tested, for
// devices where depth per file matters. Read by SetAsyncWriter; a variable for A/B
// measurements (BenchmarkDirectAppend, the -4groups modes) and for the flag.
var DirectWriteGroupsMax = 1

// DirectWriteGroupsLimit is the size of a log's group array: DirectWriteGroupsMax's bound.
const DirectWriteGroupsLimit = 8

// DirectGroupMinBytes is the least a log stages before it starts another group beside the
// ones in flight; less waits for a completion (as with one group per log), so that a
// stream of small produces still goes out in writes of hundreds of KiB (raw 16-file
// overwrites measured 1.0 GB/s at 16 KiB writes against 2.9 GB/s at 1 MiB). Read at each
// submit; a variable for tests and A/B measurements.
var DirectGroupMinBytes int64 = 1 << 20

// writeGroup is one write group of a log in flight.
type writeGroup struct {
	ops       int   // write ops not yet completed
	want, got int64 // bytes submitted, bytes the completions reported
	err       error // the first failure
	pos       int64 // staged end the group covers (file position)
	next      int64 // offset after its last batch
	// shared is the file position of the group's first block while that block waits for
	// the group before, which ends in it, to finish: two O_DIRECT writes of one block in
	// flight may reach the device in either order, so its write starts only then. -1: none
	// waiting.
	shared   int64
	finished bool // every op done (shared written); waits for the groups before it
	// seg and w are the segment and writer the group writes: the active segment's, or a
	// sealing one's (its groups all precede the active segment's in the FIFO).
	seg *segment
	w   *directWriter
}

// writeGroups is a log's FIFO of write groups in flight, oldest first, in file order: each
// covers [alignDown(the previous one's pos), alignUp(its pos)).
type writeGroups struct {
	g           [DirectWriteGroupsLimit]writeGroup
	done        [DirectWriteGroupsLimit]func(n int, err error) // g[i]'s op completion, bound once
	head, count int
	max         int // DirectWriteGroupsMax when SetAsyncWriter ran
	ops         int // ops in flight over all groups
	sharedIov   [1][]byte
}

// slot is the index in g of the k-th group in flight (0: the oldest).
func (gs *writeGroups) slot(k int) int { return (gs.head + k) % DirectWriteGroupsLimit }

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
	l.truncator, _ = aw.(FileTruncator)
	if s := l.active(); s.direct != nil {
		s.direct.fixedIO = l.fixedIO
	}
	l.groups.max = min(max(DirectWriteGroupsMax, 1), DirectWriteGroupsLimit)
	for i := range l.groups.done {
		l.groups.done[i] = func(n int, err error) { l.writeOpDone(i, n, err) }
	}
	l.awIdle = func() bool { return l.groups.ops == 0 }
	l.sealsIdle = func() bool { return l.sealsInFlight == 0 }
	return true
}

// StagedEndOffset is the offset the next appended record gets; above EndOffset while
// asynchronous writes are staged or in flight.
func (l *Log) StagedEndOffset() int64 { return l.active().nextOffset }

// WritesPending reports whether appended bytes are not yet on the device.
func (l *Log) WritesPending() bool { return l.directPending() || l.staged.pending() }

// directPending reports whether direct-mode bytes of the active segment, or of a sealing one
// (see "Rolls" above), are not yet on the device: EndOffset is then writtenNext.
func (l *Log) directPending() bool {
	s := l.active()
	return len(l.sealing) > 0 || s.direct != nil && s.direct.pending()
}

// writeAsync stages batches, just noted in s (which held prevNext before them), at pos and
// starts a write group when none is in flight.
func (l *Log) writeAsync(s *segment, batches [][]byte, pos, prevNext int64) error {
	w := s.direct
	if !l.directPending() {
		l.writtenNext = prevNext // the end of what is on disk, until a group completes
	}
	w.stage(batches, pos)
	l.submitWrites(s, false)
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

// submitWrites starts a write group for what is staged in s past its groups in flight: at
// once when it has none in flight, else once DirectGroupMinBytes are staged and fewer than
// DirectWriteGroupsMax of its groups are in flight. force (a roll sealing s) starts one for
// whatever is staged, whatever is in flight, while the FIFO has room.
func (l *Log) submitWrites(s *segment, force bool) {
	w, gs := s.direct, &l.groups
	mine := l.groupsOf(w)
	if !w.pending() || l.failed != nil || gs.count == DirectWriteGroupsLimit || mine >= gs.max && !force {
		return
	}
	from := w.writtenPos
	if mine > 0 {
		from = gs.g[gs.slot(gs.count-1)].pos
	}
	end := w.active.end()
	if end <= from || mine > 0 && end-from < DirectGroupMinBytes && !force {
		return
	}
	idx := gs.slot(gs.count)
	gs.count++
	g := &gs.g[idx]
	*g = writeGroup{pos: end, next: s.nextOffset, shared: -1, seg: s, w: w}
	issueFrom := alignDown(from)
	if mine > 0 && from != issueFrom && !gs.g[gs.slot(gs.count-2)].finished {
		// The group before ends in this block and is writing it: this write waits for it.
		// (A group before that already finished, waiting for an earlier one to advance the
		// written end, wrote the block: no wait, or nothing would ever start it.)
		g.shared = issueFrom
		issueFrom += blockBytes
	}
	// No fallocate ahead here (the synchronous path does one per 32 MiB): it is a blocking
	// call, and on ext4 it waits for the inode lock that the writes in flight hold. The
	// writes allocate their own blocks, off the loop.
	iov, _ := w.pieces(l.iovecs[:0], issueFrom)
	l.startOps(w, idx, iov, issueFrom)
	clear(iov)
	l.iovecs = iov[:0]
	if g.ops == 0 && g.shared < 0 {
		l.groupFinished(idx)
	}
}

// groupsOf counts w's groups in flight: they are the last ones in the FIFO (a sealing
// segment's groups all precede the active segment's).
func (l *Log) groupsOf(w *directWriter) int {
	gs, n := &l.groups, 0
	for n < gs.count && gs.g[gs.slot(gs.count-1-n)].w == w {
		n++
	}
	return n
}

// startOps starts one write op per piece of iov, which lie back to back from file position
// off, for group idx.
func (l *Log) startOps(w *directWriter, idx int, iov [][]byte, off int64) {
	g := &l.groups.g[idx]
	for _, p := range iov {
		g.want += int64(len(p))
		var err error
		if fixed := w.fixedIndex(w.chunkAt(off)); fixed >= 0 {
			err = l.fixedIO.StartWriteFixed(w.fd(), p, off, fixed, l.groups.done[idx])
		} else {
			err = l.aw.StartWrite(w.fd(), p, off, l.groups.done[idx])
		}
		if err != nil {
			// No room on the ring right now: write this piece the blocking way (no op in
			// flight writes any of its blocks, so it may run beside them).
			n, err := pwriteAll(l.fio, w.fd(), p, off)
			g.got += int64(n)
			if err != nil && g.err == nil {
				g.err = err
			}
		} else {
			g.ops++
			l.groups.ops++
		}
		off += int64(len(p))
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

// writeOpDone is the completion of one write op of group idx.
func (l *Log) writeOpDone(idx int, n int, err error) {
	g := &l.groups.g[idx]
	g.got += int64(max(n, 0))
	if err != nil && g.err == nil {
		g.err = err
	}
	l.groups.ops--
	if g.ops--; g.ops == 0 && g.shared < 0 {
		l.groupFinished(idx)
	}
}

// groupFinished ends group idx, whose ops all completed: a failed or short write fails the
// log; the group after it may now write the block they share; the finished groups at the
// head of the FIFO advance the written end, in order; what was staged meanwhile goes out;
// the owner hears of it.
func (l *Log) groupFinished(idx int) {
	gs := &l.groups
	g := &gs.g[idx]
	g.finished = true
	if g.err == nil && g.got != g.want {
		g.err = fmt.Errorf("short write: %d of %d bytes: %w", g.got, g.want, unix.EIO)
	}
	if l.closed {
		l.popFinished()
		return
	}
	if g.err != nil {
		l.fail(fmt.Errorf("direct write of segment %d up to %d: %w", g.seg.baseOffset, g.pos, storageWriteError(l.dir, g.err)))
	}
	if k := (idx - gs.head + DirectWriteGroupsLimit) % DirectWriteGroupsLimit; k+1 < gs.count && l.failed == nil {
		if next := gs.slot(k + 1); gs.g[next].w == g.w {
			l.writeShared(g.w, next)
		}
	}
	popped := l.popFinished()
	if s := l.active(); l.failed == nil && s.direct != nil {
		l.submitWrites(s, false)
	}
	if l.onWritten != nil && (popped || g.err != nil) {
		l.onWritten()
	}
}

// writeShared starts group idx's write of the block it shares with the group before it,
// which just finished.
func (l *Log) writeShared(w *directWriter, idx int) {
	g := &l.groups.g[idx]
	if g.shared < 0 {
		return
	}
	pos := g.shared
	g.shared = -1
	c := w.chunkAt(pos)
	if c == w.active { // the padding past the staged end must be zeros (pieces)
		clear(c.buf[c.fill:alignUp(int64(c.fill))])
	}
	iov := &l.groups.sharedIov
	iov[0] = c.buf[pos-c.start : pos-c.start+blockBytes]
	l.startOps(w, idx, iov[:], pos)
	iov[0] = nil
	if g.ops == 0 {
		l.groupFinished(idx)
	}
}

// popFinished takes the finished groups off the head of the FIFO; each moves the written
// end to its end, unless the log failed (nothing at or after a failure is reported
// written) or is closed. A sealing segment whose last group it took is sealed (finishSeal).
func (l *Log) popFinished() (popped bool) {
	gs := &l.groups
	for gs.count > 0 && gs.g[gs.head].finished {
		if gs.g[gs.head].seg.namesPending && !l.closed && l.failed == nil {
			break // a roll's new segment whose names are in flight (rollasync.go)
		}
		popped = true
		g := gs.g[gs.head]
		gs.g[gs.head] = writeGroup{}
		gs.head = (gs.head + 1) % DirectWriteGroupsLimit
		gs.count--
		if l.closed || l.failed != nil {
			continue
		}
		g.w.written(g.pos)
		l.writtenNext = g.next
		if g.seg.sealing && g.seg.direct == g.w && !g.w.pending() {
			l.finishSeal(g.seg)
		}
	}
	return popped
}

// sealInFlight prepares the roll away from s without waiting for its writes: its staged
// bytes go out as its last group. It reports false (the roll must wait, as before) when
// that cannot be: no asynchronous writer, a zeroing job that owns the cut, or no room in
// the group FIFO.
func (l *Log) sealInFlight(s *segment) bool {
	w := s.direct
	if l.aw == nil || w == nil || l.failed != nil {
		return false
	}
	if !w.pending() {
		return true
	}
	if s.zero != nil {
		return false
	}
	l.submitWrites(s, true)
	gs := &l.groups
	return !w.pending() || l.groupsOf(w) > 0 && gs.g[gs.slot(gs.count-1)].pos == w.active.end()
}

// sealAsync seals s, the segment a roll just left, after sealInFlight: at once when its
// writes are done, else when its last group completes (popFinished).
func (l *Log) sealAsync(s *segment) {
	s.sealing = true
	if s.direct.pending() {
		l.sealing = append(l.sealing, s)
		return
	}
	l.finishSeal(s)
}

// finishSeal ends a sealing segment whose writes are all on the device: its chunks go to
// the log's pool, and its file is cut to its logical length (direct mode's padding of the
// last block, a recycled file's stale bytes) through the FileTruncator, off the loop, or
// here when there is none.
func (l *Log) finishSeal(s *segment) {
	for i, x := range l.sealing {
		if x == s {
			l.sealing = append(l.sealing[:i], l.sealing[i+1:]...)
			break
		}
	}
	w := s.direct
	s.direct = nil
	w.retireChunks()
	l.sealsInFlight++
	done := func(_ int, err error) { l.sealDone(s, w, err) }
	if l.truncator != nil && l.truncator.StartFtruncate(w.fd(), s.size, done) == nil {
		return
	}
	done(0, w.file.Truncate(s.size))
}

// sealDone is the end of s's cut to size: the writer's file is closed, and a failed cut
// fails the log (the disk refused a metadata write).
func (l *Log) sealDone(s *segment, w *directWriter, err error) {
	l.sealsInFlight--
	s.sealing = false
	s.zeroed, s.stale = false, false
	w.file.Close() // its writes completed; a close error changes nothing on disk
	if err != nil {
		l.fail(fmt.Errorf("seal segment %d: cut to %d: %w", s.baseOffset, s.size, err))
	}
	sealStats.cuts.Add(1)
}

// awaitSeals waits for every write and every seal in flight (see "Rolls" above): before a
// segment file is removed, renamed, compacted or reactivated, and at Close. On a failed log
// it waits only for the cuts in flight (the failed writes never finish their seals) and
// returns the failure.
func (l *Log) awaitSeals() error {
	err := l.awaitWrites()
	if l.sealsInFlight > 0 {
		if werr := l.aw.AwaitWrites(l.sealsIdle); werr != nil {
			return l.fail(fmt.Errorf("wait for segment seals: %w", werr))
		}
	}
	return err
}

// awaitSealOf is awaitSeals when s is sealing.
func (l *Log) awaitSealOf(s *segment) error {
	if !s.sealing {
		return nil
	}
	return l.awaitSeals()
}

// SealCounters are process-wide counts of rolls (asyncwrite.go, "Rolls").
type SealCounters struct {
	InFlight int64 // rolls that left the sealed segment's writes in flight
	Waited   int64 // rolls of an asynchronous direct log that waited for the writes instead
	Cuts     int64 // sealed files cut to size after a roll
}

var sealStats struct{ inFlight, waited, cuts atomic.Int64 }

// SealStats returns the process-wide roll counters.
func SealStats() SealCounters {
	return SealCounters{sealStats.inFlight.Load(), sealStats.waited.Load(), sealStats.cuts.Load()}
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
		if l.groups.ops == 0 {
			if l.spare.names > 0 && l.failed == nil {
				// Finished groups of a new segment wait for its names (rollasync.go).
				if err := l.awaitRollNames(); err != nil {
					return err
				}
				continue
			}
			if !l.WritesPending() || l.failed != nil {
				return l.failed
			}
			w := l.active().direct
			before := w.writtenPos
			if len(l.sealing) == 0 {
				l.submitWrites(l.active(), false)
			}
			if l.groups.ops == 0 && w.writtenPos == before && l.failed == nil {
				panic(fmt.Sprintf("engine: direct writes pending (written %d, staged %d, %d groups, %d sealing) and none in flight or startable", w.writtenPos, w.active.end(), l.groups.count, len(l.sealing)))
			}
			continue
		}
		if err := l.aw.AwaitWrites(l.awIdle); err != nil {
			return l.fail(fmt.Errorf("wait for direct writes: %w", err))
		}
	}
}
