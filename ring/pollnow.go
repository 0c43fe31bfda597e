package ring

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// zeroTimeout is ppoll's "return at once".
var zeroTimeout unix.Timespec

// pollNow polls one descriptor without blocking: ppoll with a zero timeout, which every
// Linux architecture has (arm64 has no poll(2) system call). It returns the number of
// ready descriptors (0 or 1) and the errno.
//
// A signal that arrives during the call makes ppoll fail with EINTR even with a zero
// timeout and even under SA_RESTART (ERESTARTNOHAND; about 1 call in 700 under a SIGURG
// storm, and Go preempts with SIGURG). That is no answer about the descriptor, so pollNow
// reports it as "nothing ready yet" (0, 0) and fd.Revents 0: every caller then parks on
// epoll, which reports the descriptor once it is ready (level-triggered, so also when it
// already is). Before, a POLL_ADD completed with -EINTR, which io_uring never posts.
func pollNow(fd *unix.PollFd) (uintptr, unix.Errno) {
	var n uintptr
	var e unix.Errno
	if injectErrno != nil {
		e = injectErrno(unix.SYS_PPOLL)
	}
	if e == 0 {
		n, _, e = unix.Syscall6(unix.SYS_PPOLL, uintptr(unsafe.Pointer(fd)), 1, uintptr(unsafe.Pointer(&zeroTimeout)), 0, 0, 0)
	}
	if e == unix.EINTR {
		fd.Revents = 0
		return 0, 0
	}
	return n, e
}
