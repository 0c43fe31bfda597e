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
func pollNow(fd *unix.PollFd) (uintptr, unix.Errno) {
	n, _, e := unix.Syscall6(unix.SYS_PPOLL, uintptr(unsafe.Pointer(fd)), 1, uintptr(unsafe.Pointer(&zeroTimeout)), 0, 0, 0)
	return n, e
}
