package ring

import (
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// uringRing is the io_uring backend. Head/tail words shared with the kernel are accessed
// with sync/atomic: the SQ tail is published with a store after the SQEs are written, the
// CQ tail is loaded before CQEs are read, and the CQ head is stored after they are copied.
// Owned by one thread.
type uringRing struct {
	fd      int
	params  uringParams
	flags   uint32 // setup flags actually in effect
	ringMem []byte // SQ ring (and CQ ring with FEAT_SINGLE_MMAP)
	cqMem   []byte // CQ ring when mapped separately
	sqeMem  []byte
	sqHead  *uint32 // kernel-owned
	sqTail  *uint32 // ours, published with atomic store
	sqFlags *uint32
	sqMask  uint32
	sqeTail uint32 // next SQE GetSQE hands out (local)
	sqes    []SQE
	cqHead  *uint32 // ours
	cqTail  *uint32 // kernel-owned
	cqMask  uint32
	cqes    []CQE
	probe   Probe
	closed  bool
	waitArg getEventsArg // kept in the struct (heap) so the kernel never reads a stack slot
	waitTs  Timespec
}

func ptrAt(mem []byte, off uint32) *uint32 { return (*uint32)(unsafe.Pointer(&mem[off])) }

func newUringRing(cfg Config) (*uringRing, error) {
	r := &uringRing{fd: -1}
	p := &r.params
	p.Flags = setupCQSize | setupClamp
	p.CQEntries = cfg.CQEntries
	if cfg.SQPoll {
		p.Flags |= setupSQPoll
		p.SQThreadIdle = uint32(cfg.SQPollIdle / time.Millisecond)
	}
	if cfg.SingleIssuer {
		p.Flags |= setupSingleIssuer
	}
	if cfg.DeferTaskrun {
		p.Flags |= setupDeferTaskrun | setupTaskrunFlag
	}
	if cfg.CoopTaskrun {
		p.Flags |= setupCoopTaskrun | setupTaskrunFlag
	}
	if cfg.DeferTaskrun && cfg.SQPoll {
		return nil, fmt.Errorf("ring: DeferTaskrun and SQPoll are exclusive: %w", unix.EINVAL)
	}
	r.flags = p.Flags
	fd, _, errno := unix.Syscall(unix.SYS_IO_URING_SETUP, uintptr(cfg.Entries), uintptr(unsafe.Pointer(p)), 0)
	if errno != 0 {
		return nil, fmt.Errorf("ring: io_uring_setup(entries=%d, flags=%#x): %w", cfg.Entries, r.flags, errno)
	}
	r.fd = int(fd)
	if err := r.mapRings(); err != nil {
		r.Close()
		return nil, err
	}
	if p.Features&FeatExtArg == 0 {
		r.Close()
		return nil, fmt.Errorf("%w: io_uring without EXT_ARG (needs Linux 5.11)", ErrUnsupported)
	}
	if p.Features&FeatNoDrop == 0 {
		r.Close()
		return nil, fmt.Errorf("%w: io_uring without NODROP (needs Linux 5.5)", ErrUnsupported)
	}
	if err := r.loadProbe(); err != nil {
		r.Close()
		return nil, err
	}
	return r, nil
}

func (r *uringRing) mapRings() error {
	p := &r.params
	sqSize := int(p.SQOff.Array + p.SQEntries*4)
	cqSize := int(p.CQOff.Cqes + p.CQEntries*cqeSize)
	single := p.Features&FeatSingleMmap != 0
	if single && cqSize > sqSize {
		sqSize = cqSize
	}
	var err error
	r.ringMem, err = unix.Mmap(r.fd, offSQRing, sqSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return fmt.Errorf("ring: mmap SQ ring (%d bytes): %w", sqSize, err)
	}
	cqMem := r.ringMem
	if !single {
		r.cqMem, err = unix.Mmap(r.fd, offCQRing, cqSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
		if err != nil {
			return fmt.Errorf("ring: mmap CQ ring (%d bytes): %w", cqSize, err)
		}
		cqMem = r.cqMem
	}
	r.sqeMem, err = unix.Mmap(r.fd, offSQEs, int(p.SQEntries)*sqeSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return fmt.Errorf("ring: mmap SQE array: %w", err)
	}
	r.sqHead = ptrAt(r.ringMem, p.SQOff.Head)
	r.sqTail = ptrAt(r.ringMem, p.SQOff.Tail)
	r.sqFlags = ptrAt(r.ringMem, p.SQOff.Flags)
	r.sqMask = *ptrAt(r.ringMem, p.SQOff.RingMask)
	r.sqes = unsafe.Slice((*SQE)(unsafe.Pointer(&r.sqeMem[0])), p.SQEntries)
	// Identity-map the SQ index array once, as liburing does.
	array := unsafe.Slice(ptrAt(r.ringMem, p.SQOff.Array), p.SQEntries)
	for i := range array {
		array[i] = uint32(i)
	}
	r.sqeTail = atomic.LoadUint32(r.sqTail)
	r.cqHead = ptrAt(cqMem, p.CQOff.Head)
	r.cqTail = ptrAt(cqMem, p.CQOff.Tail)
	r.cqMask = *ptrAt(cqMem, p.CQOff.RingMask)
	r.cqes = unsafe.Slice((*CQE)(unsafe.Pointer(&cqMem[p.CQOff.Cqes])), p.CQEntries)
	return nil
}

func (r *uringRing) loadProbe() error {
	buf := make([]byte, unsafe.Sizeof(probeHeader{})+probeOpsCapacity*unsafe.Sizeof(probeOp{}))
	if err := r.register(regProbe, unsafe.Pointer(&buf[0]), probeOpsCapacity); err != nil {
		return fmt.Errorf("%w: IORING_REGISTER_PROBE (needs Linux 5.6): %v", ErrUnsupported, err)
	}
	hdr := (*probeHeader)(unsafe.Pointer(&buf[0]))
	ops := unsafe.Slice((*probeOp)(unsafe.Pointer(&buf[unsafe.Sizeof(probeHeader{})])), int(hdr.OpsLen))
	r.probe = Probe{Backend: BackendUring, Features: r.params.Features, LastOp: Opcode(hdr.LastOp)}
	for _, op := range ops {
		if op.Flags&probeOpSupported != 0 {
			r.probe.ops[op.Op] = true
		}
	}
	return nil
}

func (r *uringRing) register(op uintptr, arg unsafe.Pointer, nr uint32) error {
	for {
		_, _, errno := unix.Syscall6(unix.SYS_IO_URING_REGISTER, uintptr(r.fd), op, uintptr(arg), uintptr(nr), 0, 0)
		if errno == unix.EINTR {
			continue
		}
		if errno != 0 {
			return errno
		}
		return nil
	}
}

func (r *uringRing) GetSQE() *SQE {
	head := atomic.LoadUint32(r.sqHead) // kernel-owned (SQPOLL moves it concurrently)
	if r.sqeTail-head >= r.params.SQEntries {
		return nil
	}
	sqe := &r.sqes[r.sqeTail&r.sqMask]
	r.sqeTail++
	return sqe
}

func (r *uringRing) SQSpace() int {
	return int(r.params.SQEntries - (r.sqeTail - atomic.LoadUint32(r.sqHead)))
}

// flush publishes the SQEs handed out since the last flush and returns how many the kernel
// has not consumed yet.
func (r *uringRing) flush() uint32 {
	atomic.StoreUint32(r.sqTail, r.sqeTail)
	return r.sqeTail - atomic.LoadUint32(r.sqHead)
}

func (r *uringRing) enter(toSubmit, minComplete, flags uint32, arg unsafe.Pointer, argSize uintptr) (int, error) {
	n, _, errno := unix.Syscall6(unix.SYS_IO_URING_ENTER, uintptr(r.fd), uintptr(toSubmit), uintptr(minComplete),
		uintptr(flags), uintptr(arg), argSize)
	if errno != 0 {
		return int(n), errno
	}
	return int(n), nil
}

func (r *uringRing) Submit() (int, error) { return r.SubmitAndWait(0, 0) }

func (r *uringRing) SubmitAndWait(waitNr uint32, timeout time.Duration) (int, error) {
	if r.closed {
		return 0, ErrClosed
	}
	pending := r.flush()
	var flags uint32
	if r.flags&setupSQPoll != 0 {
		if atomic.LoadUint32(r.sqFlags)&sqNeedWakeup != 0 {
			flags |= enterSQWakeup
		}
		if pending >= r.params.SQEntries {
			flags |= enterSQWait // SQ full: wait until the SQ thread frees entries
		}
		pending = 0 // the SQ thread submits
	}
	if waitNr > 0 && pending == 0 && flags == 0 && atomic.LoadUint32(r.cqTail)-*r.cqHead >= waitNr {
		return 0, nil // enough completions are already posted: no system call
	}
	if waitNr > 0 || r.cqNeedsFlush() {
		flags |= enterGetEvents
	}
	if pending == 0 && flags == 0 {
		return 0, nil
	}
	var arg unsafe.Pointer
	var argSize uintptr
	if waitNr > 0 {
		r.waitArg = getEventsArg{}
		if timeout > 0 {
			r.waitTs.SetDuration(int64(timeout))
			r.waitArg.Ts = uint64(uintptr(unsafe.Pointer(&r.waitTs)))
		}
		flags |= enterExtArg
		arg, argSize = unsafe.Pointer(&r.waitArg), unsafe.Sizeof(r.waitArg)
	}
	for {
		n, err := r.enter(pending, waitNr, flags, arg, argSize)
		switch {
		case err == nil:
			return n, nil
		case errors.Is(err, unix.EINTR):
			// Go's preemption signal interrupts waits; nothing was submitted, retry once
			// without waiting and let the caller recompute its timeout.
			if waitNr == 0 {
				continue
			}
			return 0, nil
		case errors.Is(err, unix.ETIME):
			return 0, nil
		case errors.Is(err, unix.EEXIST) && r.flags&setupSingleIssuer != 0:
			return 0, fmt.Errorf("%w: io_uring_enter on a SINGLE_ISSUER ring from another thread: %w", ErrWrongThread, err)
		case errors.Is(err, unix.EAGAIN), errors.Is(err, unix.EBUSY):
			return 0, fmt.Errorf("ring: io_uring_enter: completion queue backlog, reap first: %w", err)
		default:
			return 0, fmt.Errorf("ring: io_uring_enter(submit=%d, wait=%d): %w", pending, waitNr, err)
		}
	}
}

// cqNeedsFlush reports whether completions are parked in the kernel: overflowed entries, or
// deferred task work (DEFER_TASKRUN/COOP_TASKRUN) that only an enter with GETEVENTS posts.
func (r *uringRing) cqNeedsFlush() bool {
	return atomic.LoadUint32(r.sqFlags)&(sqCQOverflow|sqTaskrun) != 0
}

func (r *uringRing) PeekCQEs(dst []CQE) int {
	if r.closed || len(dst) == 0 {
		return 0
	}
	n := r.copyCQEs(dst)
	if n < len(dst) && r.cqNeedsFlush() {
		r.enter(0, 0, enterGetEvents, nil, 0)
		n += r.copyCQEs(dst[n:])
	}
	return n
}

// completionWaiting reports whether a completion waits in the CQ (or parked in the kernel), without
// consuming it (Reactor.Quiet).
func (r *uringRing) completionWaiting() bool {
	return r.closed || *r.cqHead != atomic.LoadUint32(r.cqTail) || r.cqNeedsFlush()
}

func (r *uringRing) copyCQEs(dst []CQE) int {
	head := *r.cqHead
	tail := atomic.LoadUint32(r.cqTail)
	n := 0
	for head != tail && n < len(dst) {
		dst[n] = r.cqes[head&r.cqMask]
		head++
		n++
	}
	atomic.StoreUint32(r.cqHead, head)
	return n
}

func (r *uringRing) RegisterBuffers(bufs [][]byte) error {
	if len(bufs) == 0 {
		return fmt.Errorf("ring: RegisterBuffers: no buffers: %w", unix.EINVAL)
	}
	iov := make([]Iovec, len(bufs))
	for i, b := range bufs {
		if len(b) == 0 {
			return fmt.Errorf("ring: RegisterBuffers: buffer %d is empty: %w", i, unix.EINVAL)
		}
		iov[i].Base = &b[0]
		iov[i].SetLen(len(b))
	}
	if err := r.register(regBuffers, unsafe.Pointer(&iov[0]), uint32(len(iov))); err != nil {
		return fmt.Errorf("ring: register %d buffers: %w", len(bufs), err)
	}
	return nil
}

func (r *uringRing) RegisterBuffersSparse(n uint32) error {
	arg := rsrcRegister{Nr: n, Flags: rsrcRegisterSparse}
	if err := r.register(regBuffers2, unsafe.Pointer(&arg), uint32(unsafe.Sizeof(arg))); err != nil {
		return fmt.Errorf("ring: register a sparse table of %d buffers: %w", n, err)
	}
	return nil
}

func (r *uringRing) UpdateBuffers(offset uint32, bufs [][]byte) error {
	if len(bufs) == 0 {
		return nil
	}
	iov := make([]Iovec, len(bufs))
	for i, b := range bufs {
		if len(b) > 0 {
			iov[i].Base = &b[0]
			iov[i].SetLen(len(b))
		}
	}
	arg := rsrcUpdate2{Offset: offset, Data: uint64(uintptr(unsafe.Pointer(&iov[0]))), Nr: uint32(len(iov))}
	err := r.register(regBuffersUpdate, unsafe.Pointer(&arg), uint32(unsafe.Sizeof(arg)))
	runtime.KeepAlive(iov)
	runtime.KeepAlive(bufs)
	if err != nil {
		return fmt.Errorf("ring: update %d buffers at %d: %w", len(bufs), offset, err)
	}
	return nil
}

func (r *uringRing) UnregisterBuffers() error {
	if err := r.register(regUnregBuffers, nil, 0); err != nil {
		return fmt.Errorf("ring: unregister buffers: %w", err)
	}
	return nil
}

func (r *uringRing) RegisterFiles(fds []int32) error {
	if len(fds) == 0 {
		return fmt.Errorf("ring: RegisterFiles: no files: %w", unix.EINVAL)
	}
	if err := r.register(regFiles, unsafe.Pointer(&fds[0]), uint32(len(fds))); err != nil {
		return fmt.Errorf("ring: register %d files: %w", len(fds), err)
	}
	return nil
}

// filesUpdate is struct io_uring_files_update.
type filesUpdate struct {
	Offset uint32
	Resv   uint32
	Fds    uint64
}

func (r *uringRing) UpdateFiles(offset uint32, fds []int32) error {
	if len(fds) == 0 {
		return nil
	}
	up := &filesUpdate{Offset: offset, Fds: uint64(uintptr(unsafe.Pointer(&fds[0])))}
	if err := r.register(regFilesUpdate, unsafe.Pointer(up), uint32(len(fds))); err != nil {
		return fmt.Errorf("ring: update files at %d: %w", offset, err)
	}
	return nil
}

func (r *uringRing) UnregisterFiles() error {
	if err := r.register(regUnregFiles, nil, 0); err != nil {
		return fmt.Errorf("ring: unregister files: %w", err)
	}
	return nil
}

func (r *uringRing) RegisterEventfd(fd int) error {
	v := int32(fd)
	if err := r.register(regEventfd, unsafe.Pointer(&v), 1); err != nil {
		return fmt.Errorf("ring: register eventfd %d: %w", fd, err)
	}
	return nil
}

func (r *uringRing) UnregisterEventfd() error {
	if err := r.register(regUnregEventfd, nil, 0); err != nil {
		return fmt.Errorf("ring: unregister eventfd: %w", err)
	}
	return nil
}

func (r *uringRing) RegisterBufRing(group uint16, ringMem []byte, entries uint16) error {
	reg := &bufReg{RingAddr: uint64(uintptr(unsafe.Pointer(&ringMem[0]))), RingEntries: uint32(entries), Bgid: group}
	if err := r.register(regPbufRing, unsafe.Pointer(reg), 1); err != nil {
		if errors.Is(err, unix.EINVAL) && r.probe.LastOp < OpSocket {
			return fmt.Errorf("%w: provided-buffer rings (needs Linux 5.19): %v", ErrUnsupported, err)
		}
		return err
	}
	return nil
}

func (r *uringRing) UnregisterBufRing(group uint16) error {
	reg := &bufReg{Bgid: group}
	if err := r.register(regUnregPbufRing, unsafe.Pointer(reg), 1); err != nil {
		return fmt.Errorf("ring: unregister buffer ring %d: %w", group, err)
	}
	return nil
}

func (r *uringRing) Probe() *Probe   { return &r.probe }
func (r *uringRing) Fd() int         { return r.fd }
func (r *uringRing) Backend() string { return BackendUring }

func (r *uringRing) Close() error {
	if r.closed {
		return nil
	}
	r.closed = true
	for _, m := range [][]byte{r.sqeMem, r.cqMem, r.ringMem} {
		if m != nil {
			unix.Munmap(m)
		}
	}
	r.sqes, r.cqes = nil, nil
	if r.fd >= 0 {
		return unix.Close(r.fd)
	}
	return nil
}
