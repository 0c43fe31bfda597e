package client

import (
	"io"
	"syscall"
	"unsafe"
)

// rawSocket reads and writes a plain TCP connection's non-blocking socket with
// syscall.RawSyscall6 inside the connection's syscall.RawConn callbacks, instead of
// net.Conn's Read and Write (which go through syscall.Syscall).
//
// Why: syscall.Syscall tells the Go scheduler that the thread may block
// (entersyscall/exitsyscall), and entersyscall wakes the runtime's sysmon thread whenever
// sysmon sleeps because every P was idle — which is the case after every round trip long
// enough for the process to go idle (a SendSync waiting for its answer). That wake-up is a
// futex call to another thread, on the critical path of the first read after the wait
// (and, on a virtual machine whose idle vCPU halts, an inter-processor interrupt). A
// recv or send on a non-blocking socket never blocks, so it need not tell the scheduler:
// the P stays with the goroutine for the few µs the call takes, as for the runtime's own
// non-blocking calls. Waiting for readability or writability is still the netpoller's
// (the callback returns false on EAGAIN), so read deadlines, and with them context
// cancellation (conn.interruptLocked), and Close work as with net.Conn.
//
// A call holds its P (and a stop-the-world waits for it) while the kernel copies, so each
// call moves at most rawSocketCallBytesMax: at 5–10 GB/s of memcpy, 256 KiB is 25–50 µs,
// where a 4 MiB produce request in one send would be up to 1 ms.
//
// Memory handed to the kernel: p of Read and Write, which the kernel is done with when the
// system call returns (no asynchronous I/O here).
//
// A rawSocket serves one reader and one writer at a time (the connection's reader role and
// wmu); its fields are each side's own.
type rawSocket struct {
	rc syscall.RawConn

	readBuf []byte // owned by the reader role: Read's p, for readOnce
	readN   int
	readErr syscall.Errno
	readFn  func(fd uintptr) bool

	writeBuf []byte // guarded by the connection's wmu: what Write has left to send
	writeErr syscall.Errno
	writeFn  func(fd uintptr) bool
}

// rawSocketCallBytesMax bounds the bytes one recv or send system call of a rawSocket moves.
const rawSocketCallBytesMax = 256 << 10

func newRawSocket(rc syscall.RawConn) *rawSocket {
	s := &rawSocket{rc: rc}
	s.readFn, s.writeFn = s.readOnce, s.writeSome // bound once: reads and writes allocate nothing
	return s
}

// Read reads into p what the socket has, waiting in the netpoller while it has nothing.
func (s *rawSocket) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	s.readBuf = p[:min(len(p), rawSocketCallBytesMax)]
	err := s.rc.Read(s.readFn)
	n, errno := s.readN, s.readErr
	s.readBuf, s.readN, s.readErr = nil, 0, 0
	switch {
	case err != nil: // deadline, closed
		return 0, err
	case errno != 0:
		return 0, errno
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

// readOnce is Read's recv, run by rc.Read: false asks the netpoller to wait for data.
func (s *rawSocket) readOnce(fd uintptr) bool {
	for {
		n, _, errno := syscall.RawSyscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&s.readBuf[0])), uintptr(len(s.readBuf)), 0, 0, 0)
		switch errno {
		case 0:
			s.readN = int(n)
			return true
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false
		}
		s.readErr = errno
		return true
	}
}

// Write sends all of p, waiting in the netpoller while the socket's send buffer is full.
// MSG_NOSIGNAL: a peer that closed the connection makes it fail with EPIPE, no signal.
func (s *rawSocket) Write(p []byte) (int, error) {
	s.writeBuf = p
	err := s.rc.Write(s.writeFn)
	left, errno := len(s.writeBuf), s.writeErr
	s.writeBuf, s.writeErr = nil, 0
	if err == nil && errno != 0 {
		err = errno
	}
	return len(p) - left, err
}

// writeSome is Write's send loop, run by rc.Write: false asks the netpoller to wait for
// room in the send buffer.
func (s *rawSocket) writeSome(fd uintptr) bool {
	for len(s.writeBuf) > 0 {
		n, _, errno := syscall.RawSyscall6(syscall.SYS_SENDTO, fd, uintptr(unsafe.Pointer(&s.writeBuf[0])), uintptr(min(len(s.writeBuf), rawSocketCallBytesMax)), syscall.MSG_NOSIGNAL, 0, 0)
		switch errno {
		case 0:
			s.writeBuf = s.writeBuf[n:]
		case syscall.EINTR:
		case syscall.EAGAIN:
			return false
		default:
			s.writeErr = errno
			return true
		}
	}
	return true
}

// rawPeek is a non-blocking recv(MSG_PEEK) of one byte into b, without telling the
// scheduler (see rawSocket): n and the errno.
func rawPeek(fd uintptr, b []byte) (int, syscall.Errno) {
	n, _, errno := syscall.RawSyscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), syscall.MSG_PEEK|syscall.MSG_DONTWAIT, 0, 0)
	return int(n), errno
}
