package ring

import (
	"container/heap"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// sysRing is the syscall backend: it interprets the same SQEs as io_uring with plain system
// calls on the owning thread. File ops (read, write, fsync, fallocate, openat, statx, ...)
// run synchronously during Submit. Socket ops run non-blocking (MSG_DONTWAIT, O_NONBLOCK for
// accept, and for connect while the op runs); one that would block is parked on epoll and
// retried when its fd is ready (a connect's EAGAIN: after a delay), so one slow peer never
// stalls the loop. Timeouts and link timeouts live in a deadline heap.
// Links, hardlinks, drain, CQE_SKIP_SUCCESS, fixed files and fixed buffers behave as in the
// kernel. The CQ is bounded like io_uring's; completions beyond it wait in an overflow list
// and are never dropped.
//
// Only MSG_RING targets (inject) are touched from other threads.
type sysRing struct {
	sq     []SQE
	sqMask uint32
	sqHead uint32 // next SQE Submit interprets
	sqTail uint32 // next SQE GetSQE hands out

	cq       []CQE
	cqMask   uint32
	cqHead   uint32
	cqTail   uint32
	overflow []CQE

	free      *sysOp
	addrFree  []*sockaddrCopy // CONNECT address copies not in use: as many as connects were ever in flight at once
	inflight  int             // parked ops and pending timeouts
	drainQ    []*sysOp
	pumping   bool
	waiters   map[int32]*fdWait
	timers    opHeap
	counted   []*sysOp // TIMEOUTs with a completion count
	posted    uint64   // CQEs posted, for counted timeouts
	epfd      int
	evfd      int // wake-up fd; also this ring's Fd() for MSG_RING
	events    []unix.EpollEvent
	pollFds   [2]unix.PollFd
	ctlEvent  unix.EpollEvent // epoll_ctl argument, kept here so it does not escape per call
	wakeBuf   [8]byte
	notifyFd  int // registered eventfd, -1 if none
	files     []int32
	bufs      [][]byte
	bufRings  map[uint16]*sysBufRing
	probe     Probe
	closed    bool
	skipSeen  bool // a CQE_SKIP_SUCCESS SQE was submitted: DRAIN is refused from then on
	inboxMu   sync.Mutex
	inbox     []CQE // MSG_RING completions from other rings, guarded by inboxMu
	inboxSpar []CQE // swapped with inbox while draining (owner only)
	inboxN    atomic.Int32
}

type sysOp struct {
	sqe         SQE
	next        *sysOp // the linked successor, started when this one completes
	linkTimeout *sysOp // LINK_TIMEOUT guarding this op
	target      *sysOp // for a LINK_TIMEOUT: the op it guards
	waitNext    *sysOp // fd wait list
	fd          int32  // resolved descriptor (fixed files looked up)
	events      uint32 // epoll events it waits for
	parkFd      int32
	deadline    int64 // monotonic ns, timers only
	timeoutNs   int64 // TIMEOUT, LINK_TIMEOUT: the timespec, copied at submit as io_timeout_prep does
	heapIndex   int   // -1 when not in the heap
	countAt     uint64
	offIn       int64
	offOut      int64
	initErr     int32 // submit-time error (negative errno), 0 if none
	// OpConnect: whether a connect(2) of this op started the handshake (EINPROGRESS), and
	// the address, copied at submit as the kernel's io_connect_prep copies it
	// (move_addr_to_kernel), so every attempt dials what the SQE named at submit. The
	// address lives out of line, from the ring's pool, so that every other op's sysOp
	// stays small (it is zeroed twice per op).
	connecting  bool
	connectAddr *sockaddrCopy
}

// sockaddrStorageSize is sizeof(struct sockaddr_storage): the longest address connect(2)
// takes; the kernel refuses a longer one with EINVAL before it reads it.
const sockaddrStorageSize = 128

// sockaddrCopy is a CONNECT's address as copied at submit, with the op's state that
// only a CONNECT needs (kept out of line with the address, so sysOp stays small).
type sockaddrCopy struct {
	bytes [sockaddrStorageSize]byte
	len   uint32
	// nonblockSet: the socket was blocking, and the op put it in O_NONBLOCK for its
	// connect(2) calls; complete takes the flag off again (restoreBlocking), as io_uring
	// passes O_NONBLOCK to its own calls only and leaves the file's flags alone. ino and
	// dev identify the socket it was set on, so that a descriptor closed and reused
	// meanwhile is left alone.
	nonblockSet bool
	ino, dev    uint64
	// retryDelayNs is the wait before the next connect(2) after EAGAIN (parkConnectRetry).
	retryDelayNs int64
}

// A connect(2) that answers EAGAIN (a unix socket whose listener's backlog is full) on a
// socket the caller left blocking is asked again after a delay that doubles from
// connectRetryDelayMinNs to connectRetryDelayMaxNs: io_uring waits in an io-wq worker's
// blocking connect until the listener accepts, and nothing the syscall backend can poll
// says when that is (the connecting socket polls writable all along). At the maximum a
// connect stuck on a full backlog costs 16 connect(2) calls a second; a backlog freed
// within the first 10 ms is noticed after at most ~2x the wait.
const (
	connectRetryDelayMinNs = int64(time.Millisecond)
	connectRetryDelayMaxNs = int64(64 * time.Millisecond)
)

// sysBufRing is the syscall backend's view of a registered provided-buffer ring: it
// consumes entries from head up to the tail the owner publishes, like the kernel does.
type sysBufRing struct {
	ents     []bufRingEntry
	tailWord *uint32 // entry 0's bid (low 16 bits) and the ring tail (high 16 bits)
	mask     uint16
	head     uint16
}

type fdWait struct {
	head, tail *sysOp
	mask       uint32
}

// syscallOps lists the ops the syscall backend interprets.
var syscallOps = []Opcode{OpNop, OpRead, OpWrite, OpReadv, OpWritev, OpReadFixed, OpWriteFixed, OpFsync,
	OpFallocate, OpFtruncate, OpRenameat, OpUnlinkat, OpOpenat, OpClose, OpStatx, OpSend, OpRecv, OpSendmsg, OpRecvmsg, OpAccept, OpConnect,
	OpSplice, OpTimeout, OpLinkTimeout, OpAsyncCancel, OpMsgRing, OpPollAdd, OpSendZC}

var (
	sysRingsMu sync.Mutex
	sysRings   = map[int]*sysRing{} // by evfd, for MSG_RING
)

const sysEventsBatch = 128

func newSysRing(cfg Config) (*sysRing, error) {
	cfg = cfg.withDefaults()
	r := &sysRing{
		sq:       make([]SQE, cfg.Entries),
		sqMask:   cfg.Entries - 1,
		cq:       make([]CQE, cfg.CQEntries),
		cqMask:   cfg.CQEntries - 1,
		waiters:  map[int32]*fdWait{},
		events:   make([]unix.EpollEvent, sysEventsBatch),
		notifyFd: -1,
		probe:    Probe{Backend: BackendSyscall, LastOp: OpSendZC},
	}
	for _, op := range syscallOps {
		r.probe.ops[op] = true
	}
	var err error
	if r.epfd, err = unix.EpollCreate1(unix.EPOLL_CLOEXEC); err != nil {
		return nil, fmt.Errorf("ring: syscall backend: epoll_create1: %w", err)
	}
	if r.evfd, err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK); err != nil {
		unix.Close(r.epfd)
		return nil, fmt.Errorf("ring: syscall backend: eventfd: %w", err)
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(r.evfd)}
	if err = unix.EpollCtl(r.epfd, unix.EPOLL_CTL_ADD, r.evfd, &ev); err != nil {
		unix.Close(r.evfd)
		unix.Close(r.epfd)
		return nil, fmt.Errorf("ring: syscall backend: epoll add eventfd: %w", err)
	}
	sysRingsMu.Lock()
	sysRings[r.evfd] = r
	sysRingsMu.Unlock()
	return r, nil
}

func (r *sysRing) Backend() string { return BackendSyscall }
func (r *sysRing) Probe() *Probe   { return &r.probe }
func (r *sysRing) Fd() int         { return r.evfd }

func (r *sysRing) GetSQE() *SQE {
	if r.closed || r.sqTail-r.sqHead >= uint32(len(r.sq)) {
		return nil
	}
	sqe := &r.sq[r.sqTail&r.sqMask]
	r.sqTail++
	return sqe
}

func (r *sysRing) SQSpace() int { return len(r.sq) - int(r.sqTail-r.sqHead) }

// Submit interprets every pending SQE, chain by chain.
func (r *sysRing) Submit() (int, error) {
	if r.closed {
		return 0, ErrClosed
	}
	n := 0
	var head, last *sysOp
	chainFailed := false
	for r.sqHead != r.sqTail {
		sqe := &r.sq[r.sqHead&r.sqMask]
		r.sqHead++
		n++
		op := r.newOp(sqe)
		linked := sqe.Flags&(SQEIOLink|SQEIOHardlink) != 0
		if errno := r.initCheck(op, head, last); errno != 0 {
			// As io_submit_fail_init: a lone request fails alone; in a chain, the whole
			// chain fails without running (even hardlinks).
			op.initErr = errRes(errno)
			if head == nil && !linked {
				r.post(op.sqe.UserData, op.initErr, 0)
				r.freeOp(op)
				continue
			}
			chainFailed = true
		}
		switch {
		case head == nil:
			head, last = op, op
		case op.initErr == 0 && op.sqe.Opcode == OpLinkTimeout:
			// A link timeout guards the request before it; the chain goes on from that one.
			last.linkTimeout = op
			op.target = last
		default:
			last.next = op
			last = op
		}
		if !linked {
			r.endChain(head, chainFailed)
			head, last, chainFailed = nil, nil, false
		}
	}
	if head != nil {
		r.endChain(head, chainFailed) // a chain cut by the end of the submission ends here, as in the kernel
	}
	if r.inflight > 0 {
		r.progress(0)
	}
	return n, nil
}

// initCheck applies the kernel's submit-time checks (io_init_req, io_link_timeout_prep).
func (r *sysRing) initCheck(op *sysOp, head, last *sysOp) unix.Errno {
	if op.sqe.Flags&SQECQESkipSuccess != 0 {
		r.skipSeen = true
	}
	if op.sqe.Flags&SQEIODrain != 0 && r.skipSeen {
		return unix.EOPNOTSUPP // draining is disabled once CQE_SKIP_SUCCESS was used
	}
	switch op.sqe.Opcode {
	case OpTimeout, OpLinkTimeout:
		if errno := prepTimeout(op); errno != 0 {
			return errno
		}
	case OpConnect:
		return r.prepConnect(op)
	}
	if op.sqe.Opcode == OpLinkTimeout && (head == nil || last.sqe.Opcode == OpLinkTimeout || last.linkTimeout != nil) {
		return unix.EINVAL // a link timeout must follow a linked, unguarded request
	}
	return 0
}

// prepTimeout copies a TIMEOUT's or LINK_TIMEOUT's timespec into op at submit, with
// __io_timeout_prep's checks: a nil one is EFAULT, a negative field EINVAL. A timeout that
// starts later (in a link chain, or a link timeout when its request parks) counts the
// duration the SQE named at submit, and the caller may reuse the timespec after Submit.
func prepTimeout(op *sysOp) unix.Errno {
	ts := (*Timespec)(addrPtr(&op.sqe.Addr))
	if ts == nil {
		return unix.EFAULT
	}
	if ts.Sec < 0 || ts.Nsec < 0 {
		return unix.EINVAL
	}
	op.timeoutNs = ts.Sec*1e9 + ts.Nsec
	return 0
}

// prepConnect copies a CONNECT's address into op at submit, with move_addr_to_kernel's
// checks: a length outside [0, sizeof(sockaddr_storage)] is EINVAL, a nil address with a
// length EFAULT. Like every address in an SQE, a non-nil one must point to addrLen bytes
// of live memory (see sqe.go); after Submit the caller may reuse it, as with io_uring.
func (r *sysRing) prepConnect(op *sysOp) unix.Errno {
	addrLen := int32(uint32(op.sqe.Off)) // the kernel reads addr2 into an int
	if addrLen < 0 || addrLen > sockaddrStorageSize {
		return unix.EINVAL
	}
	addr := addrPtr(&op.sqe.Addr)
	if addr == nil && addrLen > 0 {
		return unix.EFAULT
	}
	c := r.takeSockaddrCopy()
	*c = sockaddrCopy{len: uint32(addrLen)}
	copy(c.bytes[:addrLen], unsafe.Slice((*byte)(addr), addrLen))
	op.connectAddr = c
	return 0
}

func (r *sysRing) takeSockaddrCopy() *sockaddrCopy {
	if n := len(r.addrFree); n > 0 {
		c := r.addrFree[n-1]
		r.addrFree = r.addrFree[:n-1]
		return c
	}
	return new(sockaddrCopy)
}

func (r *sysRing) endChain(head *sysOp, failed bool) {
	if failed {
		r.failChain(head)
		return
	}
	r.dispatch(head)
}

// failChain completes a chain that failed at submit time: the head posts -ECANCELED (or its
// own submit error), every other member its submit error or -ECANCELED, silently when the
// head had CQE_SKIP_SUCCESS (the kernel's REQ_F_SKIP_LINK_CQES).
func (r *sysRing) failChain(head *sysOp) {
	quiet := head.sqe.Flags&SQECQESkipSuccess != 0
	for op := head; op != nil; {
		next := op.next
		for _, m := range [2]*sysOp{op, op.linkTimeout} {
			if m == nil {
				continue
			}
			res := errRes(unix.ECANCELED)
			if m.initErr != 0 {
				res = m.initErr
			}
			if m == head || !quiet {
				r.post(m.sqe.UserData, res, 0)
			}
			if m != op {
				r.freeOp(m)
			}
		}
		r.freeOp(op)
		op = next
	}
}

func (r *sysRing) newOp(sqe *SQE) *sysOp {
	op := r.free
	if op != nil {
		r.free = op.next
		*op = sysOp{}
	} else {
		op = &sysOp{}
	}
	op.sqe = *sqe
	op.heapIndex = -1
	op.fd = sqe.Fd
	return op
}

func (r *sysRing) freeOp(op *sysOp) {
	if op.connectAddr != nil {
		r.addrFree = append(r.addrFree, op.connectAddr)
	}
	*op = sysOp{next: r.free}
	r.free = op
}

func (r *sysRing) dispatch(head *sysOp) {
	if len(r.drainQ) > 0 || (head.sqe.Flags&SQEIODrain != 0 && r.inflight > 0) {
		r.drainQ = append(r.drainQ, head)
		return
	}
	r.run(head)
}

func (r *sysRing) pumpDrain() {
	if r.pumping {
		return
	}
	r.pumping = true
	for len(r.drainQ) > 0 {
		h := r.drainQ[0]
		if h.sqe.Flags&SQEIODrain != 0 && r.inflight > 0 {
			break
		}
		copy(r.drainQ, r.drainQ[1:])
		r.drainQ[len(r.drainQ)-1] = nil
		r.drainQ = r.drainQ[:len(r.drainQ)-1]
		r.run(h)
	}
	r.pumping = false
}

// run starts op: it completes now, parks on its fd, or (timeouts) enters the timer heap.
func (r *sysRing) run(op *sysOp) {
	if op.sqe.Flags&SQEFixedFile != 0 && op.sqe.Opcode != OpMsgRing {
		if int(op.sqe.Fd) < 0 || int(op.sqe.Fd) >= len(r.files) || r.files[op.sqe.Fd] < 0 {
			r.complete(op, -int32(unix.EBADF), 0)
			return
		}
		op.fd = r.files[op.sqe.Fd]
	}
	switch op.sqe.Opcode {
	case OpTimeout:
		r.armTimeout(op)
		return
	case OpLinkTimeout:
		r.complete(op, -int32(unix.EINVAL), 0) // not attached to a linked request
		return
	}
	r.attempt(op)
}

// attempt executes op once; on EAGAIN it parks op (and arms its link timeout).
func (r *sysRing) attempt(op *sysOp) {
	for burst := 0; ; burst++ {
		res, flags, parkFd, events := r.exec(op)
		if parkFd == parkRetryLater {
			r.parkConnectRetry(op)
			return
		}
		if parkFd >= 0 {
			r.park(op, parkFd, events)
			return
		}
		if flags&CQEFMore != 0 { // multishot: post and go again
			if burst >= acceptBurstMax {
				r.post(op.sqe.UserData, res, flags)
				r.park(op, op.fd, unix.EPOLLIN) // level-triggered: retried on the next turn
				return
			}
			r.post(op.sqe.UserData, res, flags)
			continue
		}
		r.complete(op, res, flags)
		return
	}
}

func errRes(errno unix.Errno) int32 { return -int32(errno) }

// sysRes turns a raw syscall result into a CQE res.
func sysRes(n uintptr, errno unix.Errno) int32 {
	if errno != 0 {
		return errRes(errno)
	}
	return int32(n)
}

// addrPtr reinterprets an SQE address word as a pointer without a uintptr round trip.
func addrPtr(a *uint64) unsafe.Pointer { return *(*unsafe.Pointer)(unsafe.Pointer(a)) }

func isAgain(res int32) bool { return res == errRes(unix.EAGAIN) }

// exec performs op's system call. parkFd >= 0 means "would block: wait for events on it".
func (r *sysRing) exec(op *sysOp) (res int32, flags uint32, parkFd int32, events uint32) {
	s := &op.sqe
	fd := uintptr(int(op.fd))
	parkFd = -1
	switch s.Opcode {
	case OpNop:
		return 0, 0, -1, 0
	case OpRead, OpReadFixed, OpWrite, OpWriteFixed:
		if s.Opcode == OpReadFixed || s.Opcode == OpWriteFixed {
			if !r.fixedRangeOK(s) {
				return errRes(unix.EFAULT), 0, -1, 0
			}
		}
		write := s.Opcode == OpWrite || s.Opcode == OpWriteFixed
		res = r.rw(write, fd, uintptr(s.Addr), uintptr(s.Len), s.Off)
		if isAgain(res) {
			if write {
				return res, 0, op.fd, unix.EPOLLOUT
			}
			return res, 0, op.fd, unix.EPOLLIN
		}
		return res, 0, -1, 0
	case OpReadv, OpWritev:
		return r.rwv(op)
	case OpFsync:
		nr := uintptr(unix.SYS_FSYNC)
		if s.OpFlags&FsyncDatasync != 0 {
			nr = unix.SYS_FDATASYNC
		}
		return sysRes(retryEINTR1(nr, fd)), 0, -1, 0
	case OpFallocate:
		_, _, e := unix.Syscall6(unix.SYS_FALLOCATE, fd, uintptr(s.Len), uintptr(s.Off), uintptr(s.Addr), 0, 0)
		return sysRes(0, e), 0, -1, 0
	case OpFtruncate:
		_, _, e := unix.Syscall(unix.SYS_FTRUNCATE, fd, uintptr(s.Off), 0)
		return sysRes(0, e), 0, -1, 0
	case OpRenameat:
		_, _, e := unix.Syscall6(unix.SYS_RENAMEAT2, fd, uintptr(addrPtr(&s.Addr)), uintptr(int(int32(s.Len))), uintptr(addrPtr(&s.Off)), uintptr(s.OpFlags), 0)
		return sysRes(0, e), 0, -1, 0
	case OpUnlinkat:
		_, _, e := unix.Syscall(unix.SYS_UNLINKAT, fd, uintptr(addrPtr(&s.Addr)), uintptr(s.OpFlags))
		return sysRes(0, e), 0, -1, 0
	case OpOpenat:
		n, _, e := unix.Syscall6(unix.SYS_OPENAT, fd, uintptr(addrPtr(&s.Addr)), uintptr(s.OpFlags), uintptr(s.Len), 0, 0)
		return sysRes(n, e), 0, -1, 0
	case OpClose:
		_, _, e := unix.Syscall(unix.SYS_CLOSE, fd, 0, 0)
		return sysRes(0, e), 0, -1, 0
	case OpStatx:
		_, _, e := unix.Syscall6(unix.SYS_STATX, fd, uintptr(addrPtr(&s.Addr)), uintptr(s.OpFlags), uintptr(s.Len), uintptr(addrPtr(&s.Off)), 0)
		return sysRes(0, e), 0, -1, 0
	case OpSend, OpSendZC:
		n, _, e := unix.Syscall6(unix.SYS_SENDTO, fd, uintptr(addrPtr(&s.Addr)), uintptr(s.Len), uintptr(s.OpFlags|unix.MSG_DONTWAIT|unix.MSG_NOSIGNAL), 0, 0)
		return r.sockResult(op, sysRes(n, e), unix.EPOLLOUT)
	case OpRecv:
		if s.Flags&SQEBufferSelect != 0 {
			return r.recvSelect(op)
		}
		n, _, e := unix.Syscall6(unix.SYS_RECVFROM, fd, uintptr(addrPtr(&s.Addr)), uintptr(s.Len), uintptr(s.OpFlags|unix.MSG_DONTWAIT), 0, 0)
		return r.sockResult(op, sysRes(n, e), unix.EPOLLIN)
	case OpSendmsg:
		n, _, e := unix.Syscall(unix.SYS_SENDMSG, fd, uintptr(addrPtr(&s.Addr)), uintptr(s.OpFlags|unix.MSG_DONTWAIT|unix.MSG_NOSIGNAL))
		return r.sockResult(op, sysRes(n, e), unix.EPOLLOUT)
	case OpRecvmsg:
		n, _, e := unix.Syscall(unix.SYS_RECVMSG, fd, uintptr(addrPtr(&s.Addr)), uintptr(s.OpFlags|unix.MSG_DONTWAIT))
		return r.sockResult(op, sysRes(n, e), unix.EPOLLIN)
	case OpAccept:
		return r.accept(op)
	case OpConnect:
		return r.connect(op)
	case OpSplice:
		return r.splice(op)
	case OpAsyncCancel:
		return r.cancel(s.Addr, s.OpFlags, s.Fd), 0, -1, 0
	case OpMsgRing:
		return r.msgRing(op), 0, -1, 0
	case OpPollAdd:
		r.pollFds[0] = unix.PollFd{Fd: op.fd, Events: int16(s.OpFlags)}
		n, e := pollNow(&r.pollFds[0])
		if e != 0 {
			return errRes(e), 0, -1, 0
		}
		if n == 1 {
			return int32(uint16(r.pollFds[0].Revents)), 0, -1, 0
		}
		return 0, 0, op.fd, s.OpFlags & (unix.EPOLLIN | unix.EPOLLOUT | unix.EPOLLPRI | unix.EPOLLRDHUP)
	default:
		return errRes(unix.EINVAL), 0, -1, 0
	}
}

// recvSelect receives into the next provided buffer of the SQE's group; the buffer is
// consumed only when data arrived (EAGAIN and EOF leave it in the ring).
func (r *sysRing) recvSelect(op *sysOp) (int32, uint32, int32, uint32) {
	s := &op.sqe
	br := r.bufRings[s.BufIndex]
	if br == nil {
		return errRes(unix.ENOBUFS), 0, -1, 0
	}
	tail := uint16(atomic.LoadUint32(br.tailWord) >> 16)
	if br.head == tail {
		// Like the kernel, run out of buffers only when there is data to put in one.
		r.pollFds[0] = unix.PollFd{Fd: op.fd, Events: unix.POLLIN}
		if n, _ := pollNow(&r.pollFds[0]); n == 0 {
			return errRes(unix.EAGAIN), 0, op.fd, unix.EPOLLIN
		}
		return errRes(unix.ENOBUFS), 0, -1, 0
	}
	e := &br.ents[br.head&br.mask]
	n, _, errno := unix.Syscall6(unix.SYS_RECVFROM, uintptr(int(op.fd)), uintptr(addrPtr(&e.Addr)), uintptr(e.Len), uintptr(s.OpFlags|unix.MSG_DONTWAIT), 0, 0)
	res := sysRes(n, errno)
	switch {
	case isAgain(res):
		return res, 0, op.fd, unix.EPOLLIN
	case res <= 0:
		return res, 0, -1, 0
	}
	br.head++
	flags := CQEFBuffer | uint32(e.Bid)<<16
	if s.IoPrio&RecvMultishot != 0 {
		flags |= CQEFMore
	}
	return res, flags, -1, 0
}

func (r *sysRing) RegisterBufRing(group uint16, ringMem []byte, entries uint16) error {
	if entries == 0 || entries&(entries-1) != 0 || len(ringMem) < int(entries)*int(unsafe.Sizeof(bufRingEntry{})) {
		return fmt.Errorf("ring: register buffer ring %d: %d entries in %d bytes: %w", group, entries, len(ringMem), unix.EINVAL)
	}
	if r.bufRings == nil {
		r.bufRings = map[uint16]*sysBufRing{}
	}
	if r.bufRings[group] != nil {
		return fmt.Errorf("ring: register buffer ring %d: %w", group, unix.EEXIST)
	}
	r.bufRings[group] = &sysBufRing{
		ents:     unsafe.Slice((*bufRingEntry)(unsafe.Pointer(&ringMem[0])), entries),
		tailWord: (*uint32)(unsafe.Pointer(&ringMem[12])),
		mask:     entries - 1,
	}
	return nil
}

func (r *sysRing) UnregisterBufRing(group uint16) error {
	if r.bufRings[group] == nil {
		return fmt.Errorf("ring: unregister buffer ring %d: %w", group, unix.ENOENT)
	}
	delete(r.bufRings, group)
	return nil
}

func (r *sysRing) sockResult(op *sysOp, res int32, events uint32) (int32, uint32, int32, uint32) {
	if isAgain(res) {
		return res, 0, op.fd, events
	}
	return res, 0, -1, 0
}

func retryEINTR1(nr, a1 uintptr) (uintptr, unix.Errno) {
	for {
		n, _, e := unix.Syscall(nr, a1, 0, 0)
		if e != unix.EINTR {
			return n, e
		}
	}
}

func (r *sysRing) rw(write bool, fd, addr, n uintptr, off uint64) int32 {
	var nr uintptr
	switch {
	case write && off == noOffset:
		nr = unix.SYS_WRITE
	case write:
		nr = unix.SYS_PWRITE64
	case off == noOffset:
		nr = unix.SYS_READ
	default:
		nr = unix.SYS_PREAD64
	}
	for {
		res, _, e := unix.Syscall6(nr, fd, addr, n, uintptr(off), 0, 0)
		if e == unix.EINTR {
			continue
		}
		return sysRes(res, e)
	}
}

func (r *sysRing) rwv(op *sysOp) (int32, uint32, int32, uint32) {
	s := &op.sqe
	write := s.Opcode == OpWritev
	var nr uintptr
	switch {
	case write && s.Off == noOffset:
		nr = unix.SYS_WRITEV
	case write:
		nr = unix.SYS_PWRITEV
	case s.Off == noOffset:
		nr = unix.SYS_READV
	default:
		nr = unix.SYS_PREADV
	}
	for {
		// preadv/pwritev(fd, iov, cnt, pos_l, pos_h): on 64-bit pos_l carries the whole offset.
		n, _, e := unix.Syscall6(nr, uintptr(int(op.fd)), uintptr(addrPtr(&s.Addr)), uintptr(s.Len), uintptr(s.Off), 0, 0)
		if e == unix.EINTR {
			continue
		}
		res := sysRes(n, e)
		if isAgain(res) {
			if write {
				return res, 0, op.fd, unix.EPOLLOUT
			}
			return res, 0, op.fd, unix.EPOLLIN
		}
		return res, 0, -1, 0
	}
}

func (r *sysRing) fixedRangeOK(s *SQE) bool {
	if int(s.BufIndex) >= len(r.bufs) {
		return false
	}
	b := r.bufs[s.BufIndex]
	if len(b) == 0 {
		return false // an empty slot of a sparse table
	}
	start := uint64(uintptr(unsafe.Pointer(&b[0])))
	return s.Addr >= start && s.Addr+uint64(s.Len) <= start+uint64(len(b))
}

// fileFlagsMu serializes the O_NONBLOCK toggles of accept and splice across the process's
// rings (see accept). It is held for a few fcntl calls and one call that cannot block.
var fileFlagsMu sync.Mutex

// nonblockOnce makes fd O_NONBLOCK for one call when it is a blocking socket, pipe or other
// file that can block (a regular file cannot), and returns the flags to restore, or -1 when
// there is nothing to restore. Call with fileFlagsMu held.
func nonblockOnce(fd int) int {
	fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	if err != nil || fl&unix.O_NONBLOCK != 0 {
		return -1
	}
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT == unix.S_IFREG {
		return -1
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFL, fl|unix.O_NONBLOCK); err != nil {
		return -1
	}
	return fl
}

const acceptBurstMax = 64 // multishot completions (accept, recv) per readiness event before yielding

// accept is accept4(2) that never blocks the loop. The kernel's io_accept makes its call
// non-blocking without touching the listener's flags; from user space only O_NONBLOCK does
// that, so a blocking listener gets it for this one call and loses it again before the op
// parks or completes. (It used to keep it for good, so the caller's own blocking accept on
// that listener returned EAGAIN: TestAcceptLeavesListenerFlags.) The accepted socket gets
// the op's flags alone (SOCK_NONBLOCK, SOCK_CLOEXEC), as from io_uring: Linux's accept4
// never copies the listener's O_NONBLOCK.
//
// O_NONBLOCK belongs to the open file description, which every dup of the listener shares:
// a broker's shards each accept on their own dup of one listening socket (netio.ServeRing),
// on their own threads. Unserialized, a shard that read the flags while another shard's
// call had set O_NONBLOCK took the listener for non-blocking, the other call then took the
// flag off, and the first shard's accept4 blocked its loop until the next connection came
// (TestSysAcceptSharedListenerNeverBlocks). fileFlagsMu makes the read, the toggle and
// the call one step for every ring of the process.
func (r *sysRing) accept(op *sysOp) (int32, uint32, int32, uint32) {
	s := &op.sqe
	fileFlagsMu.Lock()
	fl, err := unix.FcntlInt(uintptr(op.fd), unix.F_GETFL, 0)
	if err != nil {
		fileFlagsMu.Unlock()
		return errRes(err.(unix.Errno)), 0, -1, 0
	}
	blocking := fl&unix.O_NONBLOCK == 0
	if blocking {
		if _, err := unix.FcntlInt(uintptr(op.fd), unix.F_SETFL, fl|unix.O_NONBLOCK); err != nil {
			fileFlagsMu.Unlock()
			return errRes(err.(unix.Errno)), 0, -1, 0
		}
	}
	n, _, e := unix.Syscall6(unix.SYS_ACCEPT4, uintptr(int(op.fd)), uintptr(addrPtr(&s.Addr)), uintptr(addrPtr(&s.Off)), uintptr(s.OpFlags), 0, 0)
	if blocking {
		unix.FcntlInt(uintptr(op.fd), unix.F_SETFL, fl) // the listener's own flags again
	}
	fileFlagsMu.Unlock()
	res := sysRes(n, e)
	if isAgain(res) || e == unix.EINTR {
		return res, 0, op.fd, unix.EPOLLIN
	}
	if s.IoPrio&AcceptMultishot != 0 && res >= 0 {
		return res, CQEFMore, -1, 0
	}
	return res, 0, -1, 0
}

// connect emulates IORING_OP_CONNECT as the kernel's io_connect does: a non-blocking
// connect(2) with the address copied at submit; while the handshake runs it parks on
// EPOLLOUT, and every wake-up asks connect(2) again, which alone knows the outcome: 0 once
// the connection is established (it then marks the socket connected), the handshake's
// error once it failed, EALREADY while it still runs. A wake-up is only a hint: stale or
// spurious ones happen (an event for an fd number that was closed and reused, or
// TestConnectSpuriousWakeup's), and SO_ERROR, which this function used to trust, reads 0
// both on a connected socket and on one still in SYN_SENT. So the op completes with 0 only
// when connect(2) said so, with -errno otherwise, and never with EINPROGRESS, EINTR, or
// EALREADY from a handshake it started. (EALREADY from a socket that was already
// connecting before the op is the kernel's answer too, and is passed on.)
//
// The kernel makes its calls non-blocking without touching the file's flags; from user
// space only O_NONBLOCK does that, so the op sets it on a blocking socket for its calls and
// complete takes it off again. EAGAIN (a unix listener's full backlog) on a socket the
// caller left blocking is asked again later (parkConnectRetry), where io_uring's io-wq
// worker blocks in connect(2) until the listener accepts; on a socket the caller made
// non-blocking it is the answer, as io_uring's is.
func (r *sysRing) connect(op *sysOp) (int32, uint32, int32, uint32) {
	c := op.connectAddr
	if c == nil {
		panic("ring: syscall backend: CONNECT started without the address copy Submit makes (prepConnect)")
	}
	fd := int(op.fd)
	if !op.connecting && !c.nonblockSet {
		if errno := setNonblockFor(fd, c); errno != 0 {
			return errRes(errno), 0, -1, 0
		}
	}
	e := sysConnect(fd, c)
	switch {
	case e == unix.EAGAIN && c.nonblockSet:
		return errRes(e), 0, parkRetryLater, 0
	case e == unix.EINPROGRESS || e == unix.EINTR:
		// EINTR: Linux never returns it from a non-blocking connect (TCP and unix connects
		// only sleep when blocking; 27,379 connects under 432,437 SIGURGs gave none), but if
		// it did, the socket is either untouched (the next connect(2) starts the handshake:
		// a socket in TCP_CLOSE polls EPOLLOUT at once) or connecting (the next one says
		// EALREADY or the outcome). Either way the answer comes from asking again.
		op.connecting = true
		return errRes(e), 0, op.fd, unix.EPOLLOUT
	case e == unix.EALREADY && op.connecting:
		return errRes(e), 0, op.fd, unix.EPOLLOUT // woken while the handshake still runs
	case op.connecting && (e == unix.EBADFD || e == unix.ENOTCONN):
		// As io_connect: some families answer a repeated connect so; the socket error says
		// how the handshake ended.
		v, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR)
		if err != nil {
			return errRes(err.(unix.Errno)), 0, -1, 0
		}
		return -int32(v), 0, -1, 0
	}
	return sysRes(0, e), 0, -1, 0
}

// parkRetryLater is exec's parkFd for an op that would block on something no descriptor
// reports (a CONNECT's EAGAIN): attempt parks it on the timer heap (parkConnectRetry).
const parkRetryLater int32 = -2

// parkConnectRetry queues a CONNECT that got EAGAIN on the timer heap; fireTimers calls
// connect(2) again when its delay passed. ASYNC_CANCEL and its link timeout find it there
// (unpark).
func (r *sysRing) parkConnectRetry(op *sysOp) {
	c := op.connectAddr
	c.retryDelayNs = min(max(2*c.retryDelayNs, connectRetryDelayMinNs), connectRetryDelayMaxNs)
	op.deadline = monoNow() + c.retryDelayNs
	heap.Push(&r.timers, op)
	r.inflight++
	if lt := op.linkTimeout; lt != nil && lt.heapIndex < 0 {
		r.armLinkTimeout(lt)
	}
}

// setNonblockFor puts a blocking fd in O_NONBLOCK for a CONNECT's calls and records in c
// that it did, and on which file; a non-blocking fd is left as it is.
func setNonblockFor(fd int, c *sockaddrCopy) unix.Errno {
	fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	if err != nil {
		return err.(unix.Errno)
	}
	if fl&unix.O_NONBLOCK != 0 {
		return 0
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err.(unix.Errno)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFL, fl|unix.O_NONBLOCK); err != nil {
		return err.(unix.Errno)
	}
	c.nonblockSet, c.ino, c.dev = true, st.Ino, st.Dev
	return 0
}

// restoreBlocking takes O_NONBLOCK off the socket setNonblockFor put it on, unless fd now
// names another file (the caller closed the socket while the op waited and the number was
// reused). Errors are ignored: the op's result is what the caller asked for.
func restoreBlocking(fd int, c *sockaddrCopy) {
	c.nonblockSet = false
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Ino != c.ino || st.Dev != c.dev {
		return
	}
	if fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0); err == nil {
		unix.FcntlInt(uintptr(fd), unix.F_SETFL, fl&^unix.O_NONBLOCK)
	}
}

// sysConnect is connect(2) of fd to addr.
func sysConnect(fd int, addr *sockaddrCopy) unix.Errno {
	if injectErrno != nil {
		if e := injectErrno(unix.SYS_CONNECT); e != 0 {
			return e
		}
	}
	_, _, e := unix.Syscall(unix.SYS_CONNECT, uintptr(fd), uintptr(unsafe.Pointer(&addr.bytes)), uintptr(addr.len))
	return e
}

// injectErrno, set only by tests, is asked before the syscall backend's connect(2) and
// ppoll(2) calls with the syscall number: a non-zero errno is returned as if the kernel had
// answered it, without making the call. It makes answers the kernel gives only under
// signals (EINTR) deterministic. Only the ring's owner thread reads it.
var injectErrno func(nr uintptr) unix.Errno

func (r *sysRing) splice(op *sysOp) (int32, uint32, int32, uint32) {
	s := &op.sqe
	fdIn := s.SpliceFdIn
	if s.OpFlags&SpliceFdInFixed != 0 {
		if int(fdIn) < 0 || int(fdIn) >= len(r.files) {
			return errRes(unix.EBADF), 0, -1, 0
		}
		fdIn = r.files[fdIn]
	}
	var pIn, pOut unsafe.Pointer
	if s.Addr != noOffset {
		op.offIn = int64(s.Addr)
		pIn = unsafe.Pointer(&op.offIn)
	}
	if s.Off != noOffset {
		op.offOut = int64(s.Off)
		pOut = unsafe.Pointer(&op.offOut)
	}
	// SPLICE_F_NONBLOCK makes only the pipe's side non-blocking: a socket (or other file)
	// side blocks as its own O_NONBLOCK says, and the connections the ring driver accepts are
	// blocking. A splice into a socket whose peer stopped reading then blocked the loop (e2e
	// TestStalledReader and TestAdversarialFetchDescriptorsNeverRead under
	// RINGLOG_IO=syscall: a shard's thread in splice(2)); io_uring's splice waits in an io-wq
	// worker instead. So each blocking side is made non-blocking for the call, as accept's
	// listener is.
	flags := uintptr(s.OpFlags&^SpliceFdInFixed) | unix.SPLICE_F_NONBLOCK
	fileFlagsMu.Lock()
	flIn, flOut := nonblockOnce(int(fdIn)), nonblockOnce(int(op.fd))
	n, _, e := unix.Syscall6(unix.SYS_SPLICE, uintptr(int(fdIn)), uintptr(pIn), uintptr(int(op.fd)), uintptr(pOut), uintptr(s.Len), flags)
	if flIn >= 0 {
		unix.FcntlInt(uintptr(int(fdIn)), unix.F_SETFL, flIn)
	}
	if flOut >= 0 {
		unix.FcntlInt(uintptr(int(op.fd)), unix.F_SETFL, flOut)
	}
	fileFlagsMu.Unlock()
	res := sysRes(n, e)
	if !isAgain(res) {
		return res, 0, -1, 0
	}
	// Which side would block? Wait on the input if it has nothing, else on the output.
	r.pollFds[0] = unix.PollFd{Fd: fdIn, Events: unix.POLLIN}
	pollNow(&r.pollFds[0])
	if r.pollFds[0].Revents == 0 {
		return res, 0, fdIn, unix.EPOLLIN
	}
	return res, 0, op.fd, unix.EPOLLOUT
}

func (r *sysRing) msgRing(op *sysOp) int32 {
	s := &op.sqe
	sysRingsMu.Lock()
	target := sysRings[int(op.fd)]
	sysRingsMu.Unlock()
	if target == nil {
		return errRes(unix.EBADFD)
	}
	if s.OpFlags&MsgRingCQESkip != 0 {
		return 0
	}
	if target == r {
		r.post(s.Off, int32(s.Len), 0)
		return 0
	}
	target.inject(CQE{UserData: s.Off, Res: int32(s.Len)})
	return 0
}

// inject queues a completion from another thread and wakes the owner.
func (r *sysRing) inject(c CQE) {
	r.inboxMu.Lock()
	r.inbox = append(r.inbox, c)
	r.inboxN.Store(int32(len(r.inbox)))
	r.inboxMu.Unlock()
	var one [8]byte
	one[0] = 1
	unix.Write(r.evfd, one[:])
}

func (r *sysRing) drainInbox() {
	if r.inboxN.Load() == 0 {
		return
	}
	r.inboxMu.Lock()
	r.inbox, r.inboxSpar = r.inboxSpar[:0], r.inbox
	r.inboxN.Store(0)
	r.inboxMu.Unlock()
	for _, c := range r.inboxSpar {
		r.post(c.UserData, c.Res, c.Flags)
	}
}

// park queues op on fd until epoll reports one of events.
func (r *sysRing) park(op *sysOp, fd int32, events uint32) {
	op.parkFd = fd
	op.events = events
	op.waitNext = nil
	w := r.waiters[fd]
	if w == nil {
		w = &fdWait{}
		r.waiters[fd] = w
	}
	if w.tail == nil {
		w.head = op
	} else {
		w.tail.waitNext = op
	}
	w.tail = op
	r.inflight++
	if lt := op.linkTimeout; lt != nil && lt.heapIndex < 0 {
		r.armLinkTimeout(lt)
	}
	r.updateInterest(fd, w)
}

func (r *sysRing) updateInterest(fd int32, w *fdWait) {
	var mask uint32
	for op := w.head; op != nil; op = op.waitNext {
		mask |= op.events
	}
	if mask == w.mask {
		return
	}
	// The fdWait entry stays in the map when empty (fd numbers are reused; the map is bounded
	// by the highest fd), so parking allocates nothing in steady state.
	r.ctlEvent = unix.EpollEvent{Events: mask, Fd: fd}
	ev := &r.ctlEvent
	var err error
	switch {
	case mask == 0:
		err = unix.EpollCtl(r.epfd, unix.EPOLL_CTL_DEL, int(fd), nil)
	case w.mask == 0:
		err = unix.EpollCtl(r.epfd, unix.EPOLL_CTL_ADD, int(fd), ev)
		if err == unix.EEXIST {
			err = unix.EpollCtl(r.epfd, unix.EPOLL_CTL_MOD, int(fd), ev)
		}
	default:
		err = unix.EpollCtl(r.epfd, unix.EPOLL_CTL_MOD, int(fd), ev)
	}
	w.mask = mask
	if err != nil && mask != 0 {
		// The fd cannot be polled (closed, or a regular file): fail every waiter.
		r.failWaiters(fd, w, err.(unix.Errno))
	}
}

func (r *sysRing) failWaiters(fd int32, w *fdWait, errno unix.Errno) {
	list := w.head
	w.head, w.tail, w.mask = nil, nil, 0
	unix.EpollCtl(r.epfd, unix.EPOLL_CTL_DEL, int(fd), nil)
	for op := list; op != nil; {
		next := op.waitNext
		r.inflight--
		r.complete(op, errRes(errno), 0)
		op = next
	}
}

// unpark removes op from its fd's wait list (a CONNECT waiting to retry: from the timer
// heap).
func (r *sysRing) unpark(op *sysOp) bool {
	if op.sqe.Opcode == OpConnect && op.heapIndex >= 0 {
		heap.Remove(&r.timers, op.heapIndex)
		r.inflight--
		return true
	}
	w := r.waiters[op.parkFd]
	if w == nil {
		return false
	}
	var prev *sysOp
	for cur := w.head; cur != nil; prev, cur = cur, cur.waitNext {
		if cur != op {
			continue
		}
		if prev == nil {
			w.head = cur.waitNext
		} else {
			prev.waitNext = cur.waitNext
		}
		if w.tail == cur {
			w.tail = prev
		}
		r.inflight--
		r.updateInterest(op.parkFd, w)
		return true
	}
	return false
}

// ready retries the ops parked on fd after epoll reported revents. Ops are taken from the
// head one at a time (those that park again go to the tail), so the list stays complete and
// an ASYNC_CANCEL issued by a chain that completes here still finds its target.
func (r *sysRing) ready(fd int32, revents uint32) {
	w := r.waiters[fd]
	if w == nil {
		return
	}
	n := 0
	for op := w.head; op != nil; op = op.waitNext {
		n++
	}
	for ; n > 0 && w.head != nil; n-- {
		op := w.head
		w.head = op.waitNext
		if w.head == nil {
			w.tail = nil
		}
		r.inflight--
		if op.events&revents != 0 || revents&(unix.EPOLLERR|unix.EPOLLHUP) != 0 {
			r.attempt(op)
		} else {
			r.requeue(w, op)
		}
	}
	r.updateInterest(fd, w)
	r.pumpDrain()
}

func (r *sysRing) requeue(w *fdWait, op *sysOp) {
	op.waitNext = nil
	if w.tail == nil {
		w.head = op
	} else {
		w.tail.waitNext = op
	}
	w.tail = op
	r.inflight++
}

// complete posts op's CQE, then continues or cancels its chain and frees it. As in the
// kernel (req_set_fail), a failure includes a short transfer, a failed request posts its CQE
// even with CQE_SKIP_SUCCESS, and then the chain it cancels posts none.
func (r *sysRing) complete(op *sysOp, res int32, flags uint32) {
	if c := op.connectAddr; c != nil && c.nonblockSet {
		restoreBlocking(int(op.fd), c) // before anyone sees the CQE or a linked op runs
	}
	failed := r.failsLink(op, res)
	if lt := op.linkTimeout; lt != nil {
		op.linkTimeout = nil
		if lt.heapIndex >= 0 {
			heap.Remove(&r.timers, lt.heapIndex)
		}
		r.postOp(op, res, flags, failed)
		r.complete(lt, errRes(unix.ECANCELED), 0)
	} else {
		r.postOp(op, res, flags, failed)
	}
	if next := op.next; next != nil {
		if failed && op.sqe.Flags&SQEIOHardlink == 0 {
			r.cancelChain(next, op.sqe.Flags&SQECQESkipSuccess != 0)
		} else {
			r.run(next)
		}
	}
	r.freeOp(op)
}

func (r *sysRing) postOp(op *sysOp, res int32, flags uint32, failed bool) {
	if op.sqe.Opcode == OpSendZC && res >= 0 {
		// A copying send: the buffer is free at once, so the notification follows directly.
		if op.sqe.Flags&SQECQESkipSuccess == 0 || failed {
			r.post(op.sqe.UserData, res, CQEFMore)
		}
		r.post(op.sqe.UserData, 0, CQEFNotif)
		return
	}
	if op.sqe.Flags&SQECQESkipSuccess != 0 && !failed {
		return
	}
	r.post(op.sqe.UserData, res, flags)
}

// failsLink reports whether res breaks an IOSQE_IO_LINK chain: an error, a short read,
// write or splice, or a short send/recv with MSG_WAITALL.
func (r *sysRing) failsLink(op *sysOp, res int32) bool {
	if res < 0 {
		return true
	}
	switch op.sqe.Opcode {
	case OpRead, OpWrite, OpReadFixed, OpWriteFixed, OpSplice:
		return uint32(res) < op.sqe.Len
	case OpSend, OpRecv, OpSendZC:
		return op.sqe.OpFlags&unix.MSG_WAITALL != 0 && uint32(res) < op.sqe.Len
	}
	return false
}

// cancelChain completes op and its successors with -ECANCELED; quiet suppresses their CQEs
// (the failed head had CQE_SKIP_SUCCESS).
func (r *sysRing) cancelChain(op *sysOp, quiet bool) {
	for op != nil {
		next := op.next
		op.next = nil
		if quiet {
			if lt := op.linkTimeout; lt != nil { // never armed: op never started
				op.linkTimeout = nil
				r.freeOp(lt)
			}
			r.freeOp(op)
		} else {
			r.complete(op, errRes(unix.ECANCELED), 0)
		}
		op = next
	}
}

func (r *sysRing) post(userData uint64, res int32, flags uint32) {
	if r.cqTail-r.cqHead >= uint32(len(r.cq)) {
		r.overflow = append(r.overflow, CQE{UserData: userData, Res: res, Flags: flags})
	} else {
		r.cq[r.cqTail&r.cqMask] = CQE{UserData: userData, Res: res, Flags: flags}
		r.cqTail++
	}
	r.posted++
	if r.notifyFd >= 0 {
		var one [8]byte
		one[0] = 1
		unix.Write(r.notifyFd, one[:])
	}
	if len(r.counted) > 0 {
		r.checkCounted()
	}
}

func (r *sysRing) checkCounted() {
	for i := 0; i < len(r.counted); i++ {
		op := r.counted[i]
		if r.posted < op.countAt {
			continue
		}
		r.counted = append(r.counted[:i], r.counted[i+1:]...)
		i--
		if op.heapIndex >= 0 {
			heap.Remove(&r.timers, op.heapIndex)
		}
		r.inflight--
		r.complete(op, 0, 0)
	}
}

func monoNow() int64 {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

func (r *sysRing) armTimeout(op *sysOp) {
	if op.sqe.OpFlags&TimeoutAbs != 0 {
		op.deadline = op.timeoutNs
	} else {
		op.deadline = monoNow() + op.timeoutNs
	}
	if op.sqe.Off > 0 {
		op.countAt = r.posted + op.sqe.Off
		r.counted = append(r.counted, op)
	}
	heap.Push(&r.timers, op)
	r.inflight++
}

func (r *sysRing) armLinkTimeout(lt *sysOp) {
	lt.deadline = monoNow() + lt.timeoutNs
	heap.Push(&r.timers, lt)
}

// fireTimers completes every timer whose deadline passed.
func (r *sysRing) fireTimers() {
	if len(r.timers) == 0 {
		return
	}
	now := monoNow()
	for len(r.timers) > 0 && r.timers[0].deadline <= now {
		op := heap.Pop(&r.timers).(*sysOp)
		if op.sqe.Opcode == OpConnect { // its EAGAIN retry delay passed (parkConnectRetry)
			r.inflight--
			r.attempt(op)
			continue
		}
		if op.sqe.Opcode == OpLinkTimeout {
			target := op.target
			target.linkTimeout = nil
			if r.unpark(target) {
				r.complete(target, errRes(unix.ECANCELED), 0)
			}
			r.complete(op, errRes(unix.ETIME), 0)
			continue
		}
		r.removeCounted(op)
		r.inflight--
		res := errRes(unix.ETIME)
		if op.sqe.OpFlags&TimeoutETimeSuccess != 0 {
			res = 0
		}
		r.complete(op, res, 0)
	}
	r.pumpDrain()
}

func (r *sysRing) removeCounted(op *sysOp) {
	for i, c := range r.counted {
		if c == op {
			r.counted = append(r.counted[:i], r.counted[i+1:]...)
			return
		}
	}
}

// cancel completes in-flight requests matching the ASYNC_CANCEL arguments with -ECANCELED.
func (r *sysRing) cancel(userData uint64, flags uint32, fd int32) int32 {
	match := func(op *sysOp) bool {
		switch {
		case flags&CancelAny != 0:
			return true
		case flags&CancelFd != 0:
			return op.fd == fd
		default:
			return op.sqe.UserData == userData
		}
	}
	var found []*sysOp
	for _, w := range r.waiters {
		for op := w.head; op != nil; op = op.waitNext {
			if match(op) {
				found = append(found, op)
			}
		}
	}
	for _, op := range r.timers {
		if (op.sqe.Opcode == OpTimeout || op.sqe.Opcode == OpConnect) && match(op) {
			found = append(found, op)
		}
	}
	if len(found) == 0 {
		return errRes(unix.ENOENT)
	}
	if flags&CancelAll == 0 {
		found = found[:1]
	}
	for _, op := range found {
		if op.sqe.Opcode == OpTimeout {
			heap.Remove(&r.timers, op.heapIndex)
			r.removeCounted(op)
			r.inflight--
		} else {
			r.unpark(op)
		}
		r.complete(op, errRes(unix.ECANCELED), 0)
	}
	r.pumpDrain()
	if flags&CancelAll != 0 {
		return int32(len(found))
	}
	return 0
}

// progress waits up to timeoutNs (0 = poll, <0 = forever) for fd readiness, timers or
// injected completions, and handles what arrived.
func (r *sysRing) progress(timeoutNs int64) error {
	if len(r.timers) > 0 {
		untilTimer := r.timers[0].deadline - monoNow()
		if untilTimer < 0 {
			untilTimer = 0
		}
		if timeoutNs < 0 || untilTimer < timeoutNs {
			timeoutNs = untilTimer
		}
	}
	msec := -1
	if timeoutNs >= 0 {
		msec = int((timeoutNs + 999_999) / 1_000_000)
	}
	n, err := unix.EpollWait(r.epfd, r.events, msec)
	if err != nil && err != unix.EINTR {
		return fmt.Errorf("ring: syscall backend: epoll_wait: %w", err)
	}
	for i := 0; i < n; i++ {
		ev := r.events[i]
		if int(ev.Fd) == r.evfd {
			unix.Read(r.evfd, r.wakeBuf[:])
			continue
		}
		r.ready(ev.Fd, ev.Events)
	}
	r.fireTimers()
	r.drainInbox()
	return nil
}

func (r *sysRing) cqReady() int { return int(r.cqTail-r.cqHead) + len(r.overflow) }

func (r *sysRing) SubmitAndWait(waitNr uint32, timeout time.Duration) (int, error) {
	n, err := r.Submit()
	if err != nil || waitNr == 0 {
		return n, err
	}
	var deadline int64
	if timeout > 0 {
		deadline = monoNow() + int64(timeout)
	}
	r.drainInbox()
	for r.cqReady() < int(waitNr) {
		wait := int64(-1)
		if timeout > 0 {
			wait = deadline - monoNow()
			if wait <= 0 {
				break
			}
		}
		if err := r.progress(wait); err != nil {
			return n, err
		}
	}
	return n, nil
}

// completionWaiting reports whether a completion waits to be reaped, without consuming it
// (Reactor.Quiet). Operations whose descriptors became ready since the last progress
// round are not seen: this backend completes them only inside Submit/SubmitAndWait.
func (r *sysRing) completionWaiting() bool {
	return r.closed || r.cqHead != r.cqTail || len(r.overflow) > 0 || r.inboxN.Load() > 0
}

func (r *sysRing) PeekCQEs(dst []CQE) int {
	if !r.closed {
		r.drainInbox()
	}
	n := 0
	for n < len(dst) && r.cqHead != r.cqTail {
		dst[n] = r.cq[r.cqHead&r.cqMask]
		r.cqHead++
		n++
	}
	if len(r.overflow) > 0 {
		moved := 0
		for moved < len(r.overflow) && r.cqTail-r.cqHead < uint32(len(r.cq)) {
			r.cq[r.cqTail&r.cqMask] = r.overflow[moved]
			r.cqTail++
			moved++
		}
		r.overflow = r.overflow[:copy(r.overflow, r.overflow[moved:])]
		if n < len(dst) {
			n += r.PeekCQEs(dst[n:])
		}
	}
	return n
}

func (r *sysRing) RegisterBuffers(bufs [][]byte) error {
	if len(bufs) == 0 {
		return fmt.Errorf("ring: RegisterBuffers: no buffers: %w", unix.EINVAL)
	}
	for i, b := range bufs {
		if len(b) == 0 {
			return fmt.Errorf("ring: RegisterBuffers: buffer %d is empty: %w", i, unix.EINVAL)
		}
	}
	r.bufs = append([][]byte(nil), bufs...)
	return nil
}

func (r *sysRing) RegisterBuffersSparse(n uint32) error {
	if n == 0 {
		return fmt.Errorf("ring: RegisterBuffersSparse: no slots: %w", unix.EINVAL)
	}
	if r.bufs != nil {
		return fmt.Errorf("ring: RegisterBuffersSparse: buffers already registered: %w", unix.EBUSY)
	}
	r.bufs = make([][]byte, n)
	return nil
}

func (r *sysRing) UpdateBuffers(offset uint32, bufs [][]byte) error {
	if int(offset)+len(bufs) > len(r.bufs) {
		return fmt.Errorf("ring: update buffers at %d: %w", offset, unix.EINVAL)
	}
	for i, b := range bufs {
		if len(b) == 0 {
			b = nil
		}
		r.bufs[int(offset)+i] = b
	}
	return nil
}

func (r *sysRing) UnregisterBuffers() error {
	if r.bufs == nil {
		return fmt.Errorf("ring: unregister buffers: %w", unix.ENXIO)
	}
	r.bufs = nil
	return nil
}

func (r *sysRing) RegisterFiles(fds []int32) error {
	if len(fds) == 0 {
		return fmt.Errorf("ring: RegisterFiles: no files: %w", unix.EINVAL)
	}
	r.files = append([]int32(nil), fds...)
	return nil
}

func (r *sysRing) UpdateFiles(offset uint32, fds []int32) error {
	if int(offset)+len(fds) > len(r.files) {
		return fmt.Errorf("ring: update files at %d: %w", offset, unix.EINVAL)
	}
	copy(r.files[offset:], fds)
	return nil
}

func (r *sysRing) UnregisterFiles() error {
	if r.files == nil {
		return fmt.Errorf("ring: unregister files: %w", unix.ENXIO)
	}
	r.files = nil
	return nil
}

func (r *sysRing) RegisterEventfd(fd int) error {
	if r.notifyFd >= 0 {
		return fmt.Errorf("ring: register eventfd %d: %w", fd, unix.EBUSY)
	}
	r.notifyFd = fd
	return nil
}

func (r *sysRing) UnregisterEventfd() error {
	if r.notifyFd < 0 {
		return fmt.Errorf("ring: unregister eventfd: %w", unix.ENXIO)
	}
	r.notifyFd = -1
	return nil
}

// Close completes every request still waiting — parked socket ops, timeouts, connects
// waiting to retry — with -ECANCELED, as the kernel cancels a closing io_uring's requests,
// so none is left holding the caller's memory or a socket it set O_NONBLOCK on (a parked
// CONNECT's socket gets its blocking mode back). Those completions stay readable with
// PeekCQEs after Close, so a caller that drains them sees every request answered (they
// used to vanish: nothing ever completed them, TestSysRingCloseCompletesWaiting). Later
// submits fail.
func (r *sysRing) Close() error {
	if r.closed {
		return nil
	}
	r.cancel(0, CancelAny|CancelAll, -1)
	r.closed = true
	sysRingsMu.Lock()
	delete(sysRings, r.evfd)
	sysRingsMu.Unlock()
	unix.Close(r.epfd)
	return unix.Close(r.evfd)
}

// opHeap is a min-heap of timers by deadline.
type opHeap []*sysOp

func (h opHeap) Len() int           { return len(h) }
func (h opHeap) Less(i, j int) bool { return h[i].deadline < h[j].deadline }
func (h opHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].heapIndex = i
	h[j].heapIndex = j
}
func (h *opHeap) Push(x any) {
	op := x.(*sysOp)
	op.heapIndex = len(*h)
	*h = append(*h, op)
}
func (h *opHeap) Pop() any {
	old := *h
	op := old[len(old)-1]
	old[len(old)-1] = nil
	op.heapIndex = -1
	*h = old[:len(old)-1]
	return op
}
