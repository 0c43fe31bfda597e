package ring

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// Aliases of the kernel structures that prep helpers take, so callers need not import unix
// for them.
type (
	Iovec          = unix.Iovec
	Msghdr         = unix.Msghdr
	RawSockaddrAny = unix.RawSockaddrAny
	Statx          = unix.Statx_t
)

func iovAddr(v []Iovec) uintptr {
	if len(v) == 0 {
		return 0
	}
	return kernelAddr(unsafe.Pointer(&v[0]))
}

// CString returns a NUL-terminated copy of s on the Go heap, for PrepOpenat/PrepStatx.
func CString(s string) *byte {
	b := make([]byte, len(s)+1)
	copy(b, s)
	return &b[0]
}
