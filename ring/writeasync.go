package ring

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// Asynchronous file writes whose owner may have to wait for them from inside a callback.
//
// StartWrite submits one write (IORING_OP_WRITE, or IORING_OP_WRITE_FIXED when p lies in an
// arena registered with RegisterWriteArena) and reports its completion as (bytes, error).
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
	if len(p) == 0 {
		return fmt.Errorf("ring: StartWrite of 0 bytes: %w", unix.EINVAL)
	}
	op, err := r.Begin(nil)
	if err != nil {
		return err
	}
	if idx := r.writeArenaIndex(p); idx >= 0 {
		op.sqe.PrepWriteFixed(fd, p, uint64(off), uint16(idx))
	} else {
		op.sqe.PrepWrite(fd, p, uint64(off))
		op.Pin(&p[0])
	}
	s := &r.slots[op.idx]
	s.writeDone = done
	if err := op.Submit(); err != nil {
		return err
	}
	r.stats.writesStarted++
	return nil
}

// writeArenaIndex is the fixed-buffer index of p when it lies whole in the registered write
// arena, else -1.
func (r *Reactor) writeArenaIndex(p []byte) int {
	a := r.writeArena
	if a == nil || !r.probe.Supported(OpWriteFixed) {
		return -1
	}
	idx := a.Index(p)
	if idx < 0 {
		return -1
	}
	if off := r.arenaOffset(a, p); off+len(p) > a.bufSize*(idx+1) {
		return -1 // crosses into the next buffer: not one fixed buffer
	}
	return idx
}

// arenaOffset is p's byte offset inside a's mapping.
func (r *Reactor) arenaOffset(a *Arena, p []byte) int {
	return int(bufAddr(p) - a.base)
}

// RegisterWriteArena registers a as the ring's fixed buffers and makes StartWrite send
// writes from it as WRITE_FIXED (no page pinning per op). registered is false, with the
// reason logged, when the kernel refuses (RLIMIT_MEMLOCK); writes then go as plain WRITE.
func (r *Reactor) RegisterWriteArena(a *Arena) (registered bool, err error) {
	if r.writeArena != nil {
		return false, errors.New("ring: a write arena is already registered")
	}
	ok, err := r.RegisterArena(a)
	if ok {
		r.writeArena = a
	}
	return ok, err
}

// AwaitWrites waits on the owning thread until cond() is true, dispatching the completions
// of StartWrite ops as they arrive (cond must become true through them). Every other
// completion is kept for the loop. It returns an error only when the ring fails.
func (r *Reactor) AwaitWrites(cond func() bool) error {
	if invariantsEnabled && unix.Gettid() != r.ownerTid {
		return fmt.Errorf("%w: AwaitWrites on thread %d, reactor owned by %d", ErrWrongThread, unix.Gettid(), r.ownerTid)
	}
	// Completions reaped earlier may already sit in the backlog.
	for i := 0; i < len(r.backlog) && !cond(); i++ {
		if r.isWrite(r.backlog[i].UserData) {
			c := r.backlog[i]
			r.backlog = append(r.backlog[:i], r.backlog[i+1:]...)
			i--
			r.dispatch(&c)
		}
	}
	for !cond() {
		r.stats.awaits++
		if _, err := r.ring.SubmitAndWait(1, 0); err != nil && !errors.Is(err, unix.EBUSY) && !errors.Is(err, unix.EAGAIN) && !errors.Is(err, unix.EINTR) {
			return fmt.Errorf("ring: await writes: %w", err)
		}
		for round := 0; round < reapRoundsMax; round++ {
			n := r.ring.PeekCQEs(r.syncCQEs)
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
	return nil
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
