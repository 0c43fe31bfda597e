package ring

import (
	"errors"
	"fmt"
	"log/slog"

	"golang.org/x/sys/unix"
)

// Asynchronous file writes whose owner may have to wait for them from inside a callback.
//
// StartWrite submits one write (IORING_OP_WRITE; StartWriteFixed: IORING_OP_WRITE_FIXED from a
// buffer registered with RegisterWriteBuffer) and reports its completion as (bytes, error).
// AwaitWrites lets the owning thread wait until a condition over those completions holds,
// without running any other op's callback re-entrantly: completions of ops begun by
// StartWrite are dispatched at once (their callbacks must only do bookkeeping), every other
// completion reaped meanwhile goes to the backlog that the loop dispatches afterwards, as a
// blocking FileIO call does. engine's direct mode uses the pair for its in-flight segment
// writes: appends never wait for the device, and the rare operation that must (a segment
// roll, a truncation, Close) waits for exactly those writes.

// StartWrite writes p at off on fd and calls done(n, err) on the loop (or inside
// AwaitWrites) when the write completes; n is the byte count the kernel reported. p must
// stay untouched until then; Go heap memory is pinned for the op's life.
func (r *Reactor) StartWrite(fd int, p []byte, off int64, done func(n int, err error)) error {
	return r.startWrite(fd, p, off, -1, done)
}

// StartWriteFixed is StartWrite from a buffer registered with RegisterWriteBuffer (index
// is its slot; p must lie inside that buffer): IORING_OP_WRITE_FIXED, no page pinning per
// op in the kernel, no runtime.Pinner in Go.
func (r *Reactor) StartWriteFixed(fd int, p []byte, off int64, index int, done func(n int, err error)) error {
	return r.startWrite(fd, p, off, index, done)
}

func (r *Reactor) startWrite(fd int, p []byte, off int64, index int, done func(n int, err error)) error {
	if len(p) == 0 {
		return fmt.Errorf("ring: StartWrite of 0 bytes: %w", unix.EINVAL)
	}
	op, err := r.Begin(nil)
	if err != nil {
		return err
	}
	if index >= 0 {
		op.sqe.PrepWriteFixed(fd, p, uint64(off), uint16(index))
	} else {
		op.sqe.PrepWrite(fd, p, uint64(off))
		op.Pin(&p[0])
	}
	r.setWriteDone(op.idx, done)
	if err := op.Submit(); err != nil {
		return err
	}
	r.stats.writesStarted++
	if index >= 0 {
		r.stats.writesFixed++
	}
	return nil
}

// StartFtruncate cuts fd to size (IORING_OP_FTRUNCATE) and calls done(0, err) the way a
// StartWrite completion is called: on the loop, or inside AwaitWrites, which waits for it
// like a write. engine's direct mode seals a segment this way: on ext4 the cut reads the
// partial last block and, on a file system mounted with discard, discards the freed blocks,
// both synchronously, and the kernel runs the op on an io-wq worker instead of the loop's
// thread. The syscall backend runs it inline. Before Linux 6.9 it reports ErrUnsupported
// and the caller cuts the file itself.
func (r *Reactor) StartFtruncate(fd int, size int64, done func(n int, err error)) error {
	if size < 0 {
		return fmt.Errorf("ring: StartFtruncate to %d bytes: %w", size, unix.EINVAL)
	}
	op, err := r.Begin(nil)
	if err != nil {
		return err
	}
	op.sqe.PrepFtruncate(fd, size)
	r.setWriteDone(op.idx, done)
	return op.Submit()
}

// StartFsync flushes fd (IORING_OP_FSYNC; an fdatasync when datasync is set) and calls
// done(0, err) the way a StartWrite completion is called: on the loop, or inside
// AwaitWrites, which waits for it like a write. The kernel runs the flush on an io-wq worker
// thread, so the loop never waits for the device. engine's retention writes its log start
// offset checkpoint this way (the temporary file's fsync, then the directory's), and
// retires the segments when both have completed. The syscall backend runs it inline.
func (r *Reactor) StartFsync(fd int, datasync bool, done func(n int, err error)) error {
	if done == nil {
		return fmt.Errorf("ring: StartFsync with no completion: %w", unix.EINVAL)
	}
	op, err := r.Begin(nil)
	if err != nil {
		return err
	}
	op.sqe.PrepFsync(fd, datasync)
	r.setWriteDone(op.idx, done)
	return op.Submit()
}

// StartRename renames oldPath to newPath (IORING_OP_RENAMEAT, paths relative to the
// working directory unless absolute) and calls done(0, err) the way a StartWrite completion
// is called: on the loop, or inside AwaitWrites, which waits for it like a write. The
// kernel runs it on an io-wq worker: a rename over an existing file drops that file's last
// link, and on ext4 mounted with discard (journal-less) freeing its blocks discards them
// synchronously, which stalled the loop at every retention checkpoint. The syscall backend
// runs it inline. Before Linux 5.11 it reports ErrUnsupported.
func (r *Reactor) StartRename(oldPath, newPath string, done func(n int, err error)) error {
	return r.startRename("StartRename", oldPath, newPath, 0, done)
}

// StartRenameNoReplace is StartRename with RENAME_NOREPLACE: when newPath exists the
// rename fails with EEXIST and changes nothing, as an O_EXCL create would. engine names a
// new segment's files this way at a roll (their descriptors were opened under temporary
// names beforehand).
func (r *Reactor) StartRenameNoReplace(oldPath, newPath string, done func(n int, err error)) error {
	return r.startRename("StartRenameNoReplace", oldPath, newPath, unix.RENAME_NOREPLACE, done)
}

func (r *Reactor) startRename(name, oldPath, newPath string, flags uint32, done func(n int, err error)) error {
	to, err := unix.BytePtrFromString(newPath)
	if err != nil {
		return fmt.Errorf("ring: %s to %q: %w", name, newPath, err)
	}
	return r.startPathOp(name, oldPath, done, func(sqe *SQE, from *byte) (pin *byte) {
		sqe.PrepRenameat(unix.AT_FDCWD, from, unix.AT_FDCWD, to, flags)
		return to
	})
}

// StartUnlink removes the file at path (IORING_OP_UNLINKAT, relative to the working
// directory unless absolute) and calls done(0, err) the way a StartWrite completion is
// called: on the loop, or inside AwaitWrites, which waits for it like a write. The kernel
// runs it on an io-wq worker: unlinking a file's last link frees its blocks, which on ext4
// mounted with discard (journal-less) discards them synchronously. engine unlinks retired
// segments and pruned producer snapshots this way. The syscall backend runs it inline.
// Before Linux 5.11 it reports ErrUnsupported.
func (r *Reactor) StartUnlink(path string, done func(n int, err error)) error {
	return r.startPathOp("StartUnlink", path, done, func(sqe *SQE, p *byte) *byte {
		sqe.PrepUnlinkat(unix.AT_FDCWD, p, 0)
		return nil
	})
}

// StartOpen opens path (IORING_OP_OPENAT, relative to the working directory unless
// absolute; flags and mode as for open(2): O_CLOEXEC is the caller's to pass) and calls
// done(fd, err) the way a StartWrite completion is called: on the loop, or inside
// AwaitWrites, which waits for it like a write. The descriptor is the caller's from then
// on; one whose completion the reactor drops (it was closed meanwhile) leaks. The kernel
// tries the open inline and hands it to an io-wq worker when it would block (a lookup
// that misses the dentry cache, a creation that reads an inode table block). engine
// creates the temporary files of its asynchronous atomic writes this way. The syscall
// backend runs it inline.
func (r *Reactor) StartOpen(path string, flags int, mode uint32, done func(fd int, err error)) error {
	return r.startPathOp("StartOpen", path, done, func(sqe *SQE, p *byte) *byte {
		sqe.PrepOpenat(unix.AT_FDCWD, p, flags, mode)
		return nil
	})
}

// startPathOp submits an op on path that completes through the write path: prep fills the
// SQE with path's NUL-terminated copy and returns a second pointer it handed the kernel
// (or nil). Both copies stay pinned until the completion: the kernel reads them when it
// takes the SQE (io_uring_enter, or the syscall backend's submit), which may be long after
// this call returns (the loop's next turn), and the op may be retried from an io-wq worker.
func (r *Reactor) startPathOp(name, path string, done func(n int, err error), prep func(sqe *SQE, p *byte) (other *byte)) error {
	if done == nil {
		return fmt.Errorf("ring: %s with no completion: %w", name, unix.EINVAL)
	}
	p, err := unix.BytePtrFromString(path)
	if err != nil {
		return fmt.Errorf("ring: %s %q: %w", name, path, err)
	}
	op, err := r.Begin(nil)
	if err != nil {
		return err
	}
	op.Pin(p)
	if other := prep(op.sqe, p); other != nil {
		op.Pin(other)
	}
	r.setWriteDone(op.idx, done)
	return op.Submit()
}

// setWriteDone routes slot idx's completion to done (the write path) and counts the op as a
// file op in flight (Reactor.fileOps) until releaseSlot.
func (r *Reactor) setWriteDone(idx uint32, done func(n int, err error)) {
	if done != nil && r.slots[idx].writeDone == nil {
		r.fileOps++
	}
	r.slots[idx].writeDone = done
}

// WriteBufferSlots is the size of the sparse fixed-buffer table RegisterWriteBuffer fills
// (the kernel's limit is 16,384). A buffer that finds no free slot is written unregistered.
const WriteBufferSlots = 4096

// writeBuffers is the reactor's sparse fixed-buffer table for StartWriteFixed.
type writeBuffers struct {
	tried, ok bool
	free      []uint16
}

// RegisterWriteBuffer registers b (page-aligned memory that stays put: an mmap'd arena or
// Go heap memory the caller keeps alive) as a fixed buffer for StartWriteFixed and returns
// its slot. ok is false when the kernel has no sparse tables (before 5.19), refuses the
// locked memory (RLIMIT_MEMLOCK) or every slot is taken: write b with StartWrite then. The
// first call registers the table and logs why if it cannot. Release the slot with
// UnregisterWriteBuffer before b is freed.
func (r *Reactor) RegisterWriteBuffer(b []byte) (index int, ok bool) {
	wb := &r.writeBufs
	if !wb.tried {
		wb.tried = true
		if !r.probe.Supported(OpWriteFixed) {
			return -1, false
		}
		if err := r.ring.RegisterBuffersSparse(WriteBufferSlots); err != nil {
			slog.Warn("ring: no sparse fixed-buffer table; direct writes go unregistered", "err", err)
			return -1, false
		}
		wb.ok = true
		wb.free = make([]uint16, WriteBufferSlots)
		for i := range wb.free {
			wb.free[i] = uint16(WriteBufferSlots - 1 - i)
		}
	}
	if !wb.ok || len(wb.free) == 0 || len(b) == 0 {
		return -1, false
	}
	idx := wb.free[len(wb.free)-1]
	if err := r.ring.UpdateBuffers(uint32(idx), [][]byte{b}); err != nil {
		if r.stats.writeBufferFailures++; r.stats.writeBufferFailures == 1 {
			slog.Warn("ring: registering a write buffer failed; it is written unregistered", "bytes", len(b), "err", err)
		}
		return -1, false
	}
	wb.free = wb.free[:len(wb.free)-1]
	return int(idx), true
}

// UnregisterWriteBuffer empties slot index (no write from it may be in flight).
func (r *Reactor) UnregisterWriteBuffer(index int) {
	if index < 0 || !r.writeBufs.ok {
		return
	}
	if err := r.ring.UpdateBuffers(uint32(index), [][]byte{nil}); err != nil {
		slog.Warn("ring: unregistering a write buffer failed", "slot", index, "err", err)
		return // the slot stays taken: its pages stay pinned, nothing is reused wrongly
	}
	r.writeBufs.free = append(r.writeBufs.free, uint16(index))
}

// AwaitWrites waits on the owning thread until cond() is true, dispatching the completions
// of StartWrite ops as they arrive (cond must become true through them). Every other
// completion is kept for the loop. It returns an error only when the ring fails.
//
// A completion may already be out of the kernel's queue when AwaitWrites is called: in the
// backlog, or in the loop's reap batch behind the callback that called it (a produce that
// rolls a segment, served inline on its connection's loop). Those are taken first; a wait
// in the kernel for them would never end.
//
// Each wait in the kernel lasts at most fileOpWaitMax (a lost wake-up costs that, not a
// hang; see Stats.LostWakeups).
func (r *Reactor) AwaitWrites(cond func() bool) error {
	if invariantsEnabled && unix.Gettid() != r.ownerTid {
		return fmt.Errorf("%w: AwaitWrites on thread %d, reactor owned by %d", ErrWrongThread, unix.Gettid(), r.ownerTid)
	}
	for {
		r.takeReapedWrites(cond)
		if cond() {
			return nil
		}
		r.stats.awaits++
		expired, _, err := r.boundedWait(0, true)
		if err != nil && !errors.Is(err, unix.EBUSY) && !errors.Is(err, unix.EAGAIN) && !errors.Is(err, unix.EINTR) {
			return fmt.Errorf("ring: await writes: %w", err)
		}
		for round := 0; round < reapRoundsMax; round++ {
			n := r.ring.PeekCQEs(r.syncCQEs)
			if round == 0 {
				r.noteBoundedWait(expired, n > 0)
			}
			for i := 0; i < n; i++ {
				c := r.syncCQEs[i]
				if r.isWrite(c.UserData) {
					r.dispatch(&c)
					continue
				}
				r.backlog = append(r.backlog, c)
			}
			if n < len(r.syncCQEs) {
				break
			}
		}
	}
}

// takeReapedWrites dispatches, until cond holds, the StartWrite completions that were
// reaped but not dispatched yet: behind the running callback in the loop's reap batch, and
// in the backlog (a callback's blocking FileIO call may put one there at any time). A taken
// entry becomes an ignored completion in place, so that the loop going through the batch
// or the backlog meanwhile neither skips nor repeats one.
func (r *Reactor) takeReapedWrites(cond func() bool) {
	for i := r.batchNext; i < r.batchLen && !cond(); i++ {
		if c := r.cqes[i]; r.isWrite(c.UserData) {
			r.cqes[i].UserData = tokenIgnore
			r.dispatch(&c)
		}
	}
	for i := 0; i < len(r.backlog) && !cond(); i++ {
		if c := r.backlog[i]; r.isWrite(c.UserData) {
			r.backlog[i].UserData = tokenIgnore
			r.dispatch(&c)
		}
	}
}

// isWrite reports whether tok names a live StartWrite op.
func (r *Reactor) isWrite(tok uint64) bool {
	if tok&tokenInternal != 0 {
		return false
	}
	idx, gen := uint32(tok), uint32(tok>>32)
	return int(idx) < len(r.slots) && r.slots[idx].busy && r.slots[idx].gen == gen && r.slots[idx].writeDone != nil
}

// writeResult turns a write's CQE result into StartWrite's (n, err).
func writeResult(res int32) (int, error) {
	if res < 0 {
		return 0, fmt.Errorf("write: %w", unix.Errno(-res))
	}
	return int(res), nil
}
