package ring

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// FileIO is the synchronous file API that engine/ uses for data I/O (reads, writes, syncs).
// Metadata operations (open, rename, unlink, ftruncate) stay plain syscalls in the caller.
//
// Implementations:
//   - *Reactor: the op goes through the shard's ring (io_uring or the syscall backend); the
//     call blocks the owning thread until that op's completion arrives, while completions of
//     other ops stay queued for normal dispatch by the loop. Only the owning thread may call it.
//   - Syscalls: plain pread/pwrite/fdatasync on the calling thread, for tools and tests.
//
// Every method returns a wrapped unix.Errno on failure so callers can test it with errors.Is
// (unix.EIO, unix.ENOSPC, ...). A short write is not an error here; the caller loops.
type FileIO interface {
	Pread(fd int, p []byte, off int64) (int, error)
	Pwrite(fd int, p []byte, off int64) (int, error)
	Pwritev(fd int, bufs [][]byte, off int64) (int, error)
	Fdatasync(fd int) error
	Fsync(fd int) error
	Fallocate(fd int, mode uint32, off, size int64) error
}

// Syscalls is the FileIO that issues plain system calls on the calling thread.
type Syscalls struct{}

var _ FileIO = Syscalls{}

func (Syscalls) Pread(fd int, p []byte, off int64) (int, error) {
	for {
		n, err := unix.Pread(fd, p, off)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return n, fmt.Errorf("pread fd %d off %d: %w", fd, off, err)
		}
		return n, nil
	}
}

func (Syscalls) Pwrite(fd int, p []byte, off int64) (int, error) {
	for {
		n, err := unix.Pwrite(fd, p, off)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return n, fmt.Errorf("pwrite fd %d off %d: %w", fd, off, err)
		}
		return n, nil
	}
}

func (Syscalls) Pwritev(fd int, bufs [][]byte, off int64) (int, error) {
	for {
		n, err := unix.Pwritev(fd, bufs, off)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return n, fmt.Errorf("pwritev fd %d off %d: %w", fd, off, err)
		}
		return n, nil
	}
}

func (Syscalls) Fdatasync(fd int) error {
	if err := unix.Fdatasync(fd); err != nil {
		return fmt.Errorf("fdatasync fd %d: %w", fd, err)
	}
	return nil
}

func (Syscalls) Fsync(fd int) error {
	if err := unix.Fsync(fd); err != nil {
		return fmt.Errorf("fsync fd %d: %w", fd, err)
	}
	return nil
}

func (Syscalls) Fallocate(fd int, mode uint32, off, size int64) error {
	if err := unix.Fallocate(fd, mode, off, size); err != nil {
		return fmt.Errorf("fallocate fd %d: %w", fd, err)
	}
	return nil
}
