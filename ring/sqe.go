package ring

import "unsafe"

// Prep helpers fill an SQE the way liburing's io_uring_prep_* do. Every helper zeroes the
// whole SQE first (a reused slot must not carry a stale addr3, personality or buffer index),
// so set flags and UserData after calling it.
//
// Pointers passed in (buffers, iovecs, paths, sockaddrs, timespecs) must point to memory
// that stays reachable and unmoved until the completion arrives: mmap'd arena memory, or Go
// heap memory pinned with runtime.Pinner (Reactor.Pin). Never pass the address of a slice
// header. Every helper marks its pointer arguments as escaping (kernelAddr), so the compiler
// never places what they point to on a goroutine stack, which moves when it grows: the
// kernel would read or write the old place (CI at 99623db: an accept's peer address).

// noOffset is (u64)-1: "use and advance the file position" for read/write and "no offset"
// for splice.
const noOffset = ^uint64(0)

func (s *SQE) prepRW(op Opcode, fd int32, addr uintptr, length uint32, off uint64) {
	*s = SQE{Opcode: op, Fd: fd, Addr: uint64(addr), Len: length, Off: off}
}

// rwBytesMax caps one transfer, as the kernel's MAX_RW_COUNT does (2 GiB - 4 KiB): a longer
// buffer is a short transfer, never a truncated 32-bit length.
const rwBytesMax = 1<<31 - 4096

// bufLen is len(b) as an SQE length, capped at rwBytesMax.
func bufLen(b []byte) uint32 {
	if len(b) > rwBytesMax {
		return rwBytesMax
	}
	return uint32(len(b))
}

func bufAddr(b []byte) uintptr {
	if len(b) == 0 {
		return 0
	}
	return kernelAddr(unsafe.Pointer(&b[0]))
}

// escapeSink receives, never in practice, the pointers kernelAddr is given: the compiler
// cannot prove that the branch is never taken, so it treats every such pointer as escaping
// and allocates its object on the heap (the runtime's own escapes() idiom). The cost is a
// load and a branch that is never taken per prep.
var escapeSink struct {
	on bool
	p  unsafe.Pointer
}

// kernelAddr returns p as an SQE address and makes it escape (see escapeSink). Every prep
// helper that hands the kernel a pointer goes through it.
func kernelAddr(p unsafe.Pointer) uintptr {
	if escapeSink.on {
		escapeSink.p = p
	}
	return uintptr(p)
}

// PrepNop prepares a no-op (completes with res 0).
func (s *SQE) PrepNop() { *s = SQE{Opcode: OpNop, Fd: -1} }

// PrepRead prepares a pread of len(b) bytes at off (off = ^uint64(0) uses the file position).
func (s *SQE) PrepRead(fd int, b []byte, off uint64) {
	s.prepRW(OpRead, int32(fd), bufAddr(b), bufLen(b), off)
}

// PrepWrite prepares a pwrite of b at off.
func (s *SQE) PrepWrite(fd int, b []byte, off uint64) {
	s.prepRW(OpWrite, int32(fd), bufAddr(b), bufLen(b), off)
}

// PrepReadv prepares a preadv into the iovec array (the array itself must stay put too).
func (s *SQE) PrepReadv(fd int, iovecs []Iovec, off uint64) {
	s.prepRW(OpReadv, int32(fd), iovAddr(iovecs), uint32(len(iovecs)), off)
}

// PrepWritev prepares a pwritev of the iovec array at off.
func (s *SQE) PrepWritev(fd int, iovecs []Iovec, off uint64) {
	s.prepRW(OpWritev, int32(fd), iovAddr(iovecs), uint32(len(iovecs)), off)
}

// PrepReadFixed reads into b, which must lie inside registered buffer bufIndex.
func (s *SQE) PrepReadFixed(fd int, b []byte, off uint64, bufIndex uint16) {
	s.prepRW(OpReadFixed, int32(fd), bufAddr(b), bufLen(b), off)
	s.BufIndex = bufIndex
}

// PrepWriteFixed writes b, which must lie inside registered buffer bufIndex.
func (s *SQE) PrepWriteFixed(fd int, b []byte, off uint64, bufIndex uint16) {
	s.prepRW(OpWriteFixed, int32(fd), bufAddr(b), bufLen(b), off)
	s.BufIndex = bufIndex
}

// PrepFsync prepares an fsync, or an fdatasync when datasync is set.
func (s *SQE) PrepFsync(fd int, datasync bool) {
	s.prepRW(OpFsync, int32(fd), 0, 0, 0)
	if datasync {
		s.OpFlags = FsyncDatasync
	}
}

// PrepFallocate prepares fallocate(fd, mode, off, length).
func (s *SQE) PrepFallocate(fd int, mode uint32, off, length int64) {
	s.prepRW(OpFallocate, int32(fd), uintptr(length), mode, uint64(off))
}

// PrepFtruncate prepares ftruncate(fd, length) (IORING_OP_FTRUNCATE, Linux 6.9; the kernel
// always runs it on an io-wq worker).
func (s *SQE) PrepFtruncate(fd int, length int64) {
	s.prepRW(OpFtruncate, int32(fd), 0, 0, uint64(length))
}

// PrepRenameat prepares renameat2(oldDirfd, oldPath, newDirfd, newPath, flags)
// (IORING_OP_RENAMEAT, Linux 5.11; the kernel always runs it on an io-wq worker). Both paths
// must be NUL-terminated (see CString) and stay put until completion.
func (s *SQE) PrepRenameat(oldDirfd int, oldPath *byte, newDirfd int, newPath *byte, flags uint32) {
	s.prepRW(OpRenameat, int32(oldDirfd), kernelAddr(unsafe.Pointer(oldPath)), uint32(newDirfd), uint64(kernelAddr(unsafe.Pointer(newPath))))
	s.OpFlags = flags
}

// PrepOpenat prepares openat(dirfd, path, flags, mode). path must be NUL-terminated
// (see CString) and stay put until completion.
func (s *SQE) PrepOpenat(dirfd int, path *byte, flags int, mode uint32) {
	s.prepRW(OpOpenat, int32(dirfd), kernelAddr(unsafe.Pointer(path)), mode, 0)
	s.OpFlags = uint32(flags)
}

// PrepUnlinkat prepares unlinkat(dirfd, path, flags) (IORING_OP_UNLINKAT, Linux 5.11; the
// kernel always runs it on an io-wq worker; flags: 0 or AT_REMOVEDIR). path must be
// NUL-terminated (see CString) and stay put until completion.
func (s *SQE) PrepUnlinkat(dirfd int, path *byte, flags uint32) {
	s.prepRW(OpUnlinkat, int32(dirfd), kernelAddr(unsafe.Pointer(path)), 0, 0)
	s.OpFlags = flags
}

// PrepClose prepares close(fd).
func (s *SQE) PrepClose(fd int) { s.prepRW(OpClose, int32(fd), 0, 0, 0) }

// PrepStatx prepares statx(dirfd, path, flags, mask, out).
func (s *SQE) PrepStatx(dirfd int, path *byte, flags int, mask uint32, out *Statx) {
	s.prepRW(OpStatx, int32(dirfd), kernelAddr(unsafe.Pointer(path)), mask, uint64(kernelAddr(unsafe.Pointer(out))))
	s.OpFlags = uint32(flags)
}

// PrepSend prepares send(fd, b, flags).
func (s *SQE) PrepSend(fd int, b []byte, flags int) {
	s.prepRW(OpSend, int32(fd), bufAddr(b), bufLen(b), 0)
	s.OpFlags = uint32(flags)
}

// PrepSendZC prepares a zero-copy send (6.0). It posts two CQEs: the result, with
// CQEFMore set when a notification follows, then a CQEFNotif one once the kernel no longer
// references b. b must stay untouched until the notification.
func (s *SQE) PrepSendZC(fd int, b []byte, flags int) {
	s.prepRW(OpSendZC, int32(fd), bufAddr(b), bufLen(b), 0)
	s.OpFlags = uint32(flags)
}

// PrepRecv prepares recv(fd, b, flags).
func (s *SQE) PrepRecv(fd int, b []byte, flags int) {
	s.prepRW(OpRecv, int32(fd), bufAddr(b), bufLen(b), 0)
	s.OpFlags = uint32(flags)
}

// PrepRecvMultishot receives into buffers picked by the kernel from provided-buffer group
// (a BufRing) and stays armed (6.0): one CQE per message with CQEFBuffer and the buffer id
// (BufferID(flags)), CQEFMore while armed. An empty buffer ring ends it with -ENOBUFS.
func (s *SQE) PrepRecvMultishot(fd int, group uint16, flags int) {
	s.prepRW(OpRecv, int32(fd), 0, 0, 0)
	s.OpFlags = uint32(flags)
	s.Flags |= SQEBufferSelect
	s.BufIndex = group
	s.IoPrio |= RecvMultishot
}

// BufferID returns the provided-buffer id carried in a CQE's flags (valid with CQEFBuffer).
func BufferID(cqeFlags uint32) uint16 { return uint16(cqeFlags >> 16) }

// PrepSendmsg prepares sendmsg(fd, msg, flags).
func (s *SQE) PrepSendmsg(fd int, msg *Msghdr, flags int) {
	s.prepRW(OpSendmsg, int32(fd), kernelAddr(unsafe.Pointer(msg)), 1, 0)
	s.OpFlags = uint32(flags)
}

// PrepRecvmsg prepares recvmsg(fd, msg, flags).
func (s *SQE) PrepRecvmsg(fd int, msg *Msghdr, flags int) {
	s.prepRW(OpRecvmsg, int32(fd), kernelAddr(unsafe.Pointer(msg)), 1, 0)
	s.OpFlags = uint32(flags)
}

// PrepAccept prepares accept4(fd, addr, addrLen, flags); addr and addrLen may be nil.
func (s *SQE) PrepAccept(fd int, addr *RawSockaddrAny, addrLen *uint32, flags int) {
	s.prepRW(OpAccept, int32(fd), kernelAddr(unsafe.Pointer(addr)), 0, uint64(kernelAddr(unsafe.Pointer(addrLen))))
	s.OpFlags = uint32(flags)
}

// PrepMultishotAccept is PrepAccept that stays armed (5.19): one CQE per accepted
// connection, each with CQEFMore while the request is still armed.
func (s *SQE) PrepMultishotAccept(fd int, addr *RawSockaddrAny, addrLen *uint32, flags int) {
	s.PrepAccept(fd, addr, addrLen, flags)
	s.IoPrio |= AcceptMultishot
}

// PrepConnect prepares connect(fd, addr, addrLen).
func (s *SQE) PrepConnect(fd int, addr *RawSockaddrAny, addrLen uint32) {
	s.prepRW(OpConnect, int32(fd), kernelAddr(unsafe.Pointer(addr)), 0, uint64(addrLen))
}

// PrepSplice prepares splice(fdIn, offIn, fdOut, offOut, n, flags). An offset of -1 means
// "no offset" (required for pipes and sockets).
func (s *SQE) PrepSplice(fdIn int, offIn int64, fdOut int, offOut int64, n uint32, flags uint32) {
	s.prepRW(OpSplice, int32(fdOut), uintptr(offIn), n, uint64(offOut))
	s.SpliceFdIn = int32(fdIn)
	s.OpFlags = flags
}

// PrepTimeout prepares a timeout that completes with -ETIME when ts elapses, or with 0
// once count other completions have been posted (count 0 = time only).
func (s *SQE) PrepTimeout(ts *Timespec, count uint32, flags uint32) {
	s.prepRW(OpTimeout, -1, kernelAddr(unsafe.Pointer(ts)), 1, uint64(count))
	s.OpFlags = flags
}

// PrepLinkTimeout prepares a timeout for the previous, IOSQE_IO_LINK-ed request: if it does
// not complete within ts it is cancelled (-ECANCELED) and this one completes with -ETIME.
func (s *SQE) PrepLinkTimeout(ts *Timespec, flags uint32) {
	s.prepRW(OpLinkTimeout, -1, kernelAddr(unsafe.Pointer(ts)), 1, 0)
	s.OpFlags = flags
}

// PrepCancel cancels the in-flight request whose user data is target (res 0, or -ENOENT /
// -EALREADY when it could not be found or stopped).
func (s *SQE) PrepCancel(target uint64, flags uint32) {
	s.prepRW(OpAsyncCancel, -1, uintptr(target), 0, 0)
	s.OpFlags = flags
}

// PrepCancelFd cancels in-flight requests on fd (5.19): the first one, or with CancelAll
// every one (res = how many).
func (s *SQE) PrepCancelFd(fd int, flags uint32) {
	s.prepRW(OpAsyncCancel, int32(fd), 0, 0, 0)
	s.OpFlags = flags | CancelFd
}

// PrepMsgRing posts a CQE {UserData: userData, Res: res} into the ring whose fd is
// ringFd (Ring.Fd) — a cross-core wake-up with a payload (5.18).
func (s *SQE) PrepMsgRing(ringFd int, res uint32, userData uint64, flags uint32) {
	s.prepRW(OpMsgRing, int32(ringFd), uintptr(msgData), res, userData)
	s.OpFlags = flags
}

// PrepPollAdd completes once fd reports one of the poll events (res = revents).
func (s *SQE) PrepPollAdd(fd int, events uint32) {
	s.prepRW(OpPollAdd, int32(fd), 0, 0, 0)
	s.OpFlags = events
}

// SetLink chains the next SQE after this one (IOSQE_IO_LINK).
func (s *SQE) SetLink() { s.Flags |= SQEIOLink }

// SetHardlink chains the next SQE after this one even if it fails (IOSQE_IO_HARDLINK).
func (s *SQE) SetHardlink() { s.Flags |= SQEIOHardlink }

// SetDrain makes this SQE wait for every earlier one (IOSQE_IO_DRAIN).
func (s *SQE) SetDrain() { s.Flags |= SQEIODrain }

// SetFixedFile marks Fd as an index into the registered file table (IOSQE_FIXED_FILE).
func (s *SQE) SetFixedFile() { s.Flags |= SQEFixedFile }
