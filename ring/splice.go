package ring

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// SpliceFileToSocket sends up to n bytes of file at off to sock without copying through
// user space: two SPLICE ops linked with IOSQE_IO_LINK, file → pipe (pipeW) at an explicit
// offset, then pipe (pipeR) → socket. n should not exceed the pipe's capacity (64 KiB by
// default; F_SETPIPE_SZ raises it); callers loop for larger ranges.
//
// done receives the number of bytes that reached the socket, or a negative errno. A short
// first splice (end of file) cancels the linked second one; the helper then moves the bytes
// already in the pipe with a follow-up splice, so the pipe is empty whenever done runs with a
// non-negative result.
func (r *Reactor) SpliceFileToSocket(file int, off int64, pipeR, pipeW, sock int, n uint32, done func(res int32)) error {
	if n == 0 {
		return fmt.Errorf("ring: SpliceFileToSocket: zero length")
	}
	if err := r.Reserve(2); err != nil {
		return fmt.Errorf("ring: SpliceFileToSocket: %w", err)
	}
	var first int32
	op1, err := r.Begin(func(res int32, _ uint32) { first = res })
	if err != nil {
		return err
	}
	op1.SQE().PrepSplice(file, off, pipeW, -1, n, 0)
	op1.SQE().SetLink()
	op2, err := r.Begin(func(res int32, _ uint32) {
		switch {
		case res >= 0 || first < 0:
			if first < 0 {
				res = first
			}
			done(res)
		case first == 0:
			done(0)
		default:
			// The file ran short: flush what reached the pipe.
			err := r.Submit(func(s *SQE) { s.PrepSplice(pipeR, -1, sock, -1, uint32(first), 0) },
				func(res int32, _ uint32) { done(res) })
			if err != nil {
				done(-int32(unix.EIO)) // the pipe keeps data we could not move
			}
		}
	})
	if err != nil {
		op1.Abort()
		return err
	}
	op2.SQE().PrepSplice(pipeR, -1, sock, -1, n, 0)
	if err := op1.Submit(); err != nil {
		op2.Abort()
		return err
	}
	return op2.Submit()
}
