package ring

import (
	"fmt"
	"unsafe"
)

// The structures and constants in this file are the Linux io_uring ABI
// (include/uapi/linux/io_uring.h). They are part of the kernel interface and must not change.

// SQE is one submission queue entry, laid out exactly as struct io_uring_sqe (64 bytes).
//
//	 0 opcode u8 | 1 flags u8 | 2 ioprio u16 | 4 fd s32
//	 8 off / addr2 u64
//	16 addr / splice_off_in u64
//	24 len u32 | 28 op flags u32 (rw, fsync, poll, timeout, accept, cancel, open, msg, splice ...)
//	32 user_data u64
//	40 buf_index / buf_group u16 | 42 personality u16 | 44 splice_fd_in / file_index s32
//	48 addr3 u64 | 56 pad u64
type SQE struct {
	Opcode      Opcode
	Flags       uint8
	IoPrio      uint16
	Fd          int32
	Off         uint64
	Addr        uint64
	Len         uint32
	OpFlags     uint32
	UserData    uint64
	BufIndex    uint16
	Personality uint16
	SpliceFdIn  int32
	Addr3       uint64
	pad         uint64
}

// CQE is one completion queue entry, laid out exactly as struct io_uring_cqe (16 bytes).
type CQE struct {
	UserData uint64
	Res      int32
	Flags    uint32
}

// More reports whether a multishot request will post further completions.
func (c CQE) More() bool { return c.Flags&CQEFMore != 0 }

const (
	sqeSize = 64
	cqeSize = 16
)

var (
	_ [sqeSize - unsafe.Sizeof(SQE{})]byte
	_ [unsafe.Sizeof(SQE{}) - sqeSize]byte
	_ [cqeSize - unsafe.Sizeof(CQE{})]byte
	_ [unsafe.Sizeof(CQE{}) - cqeSize]byte
	_ [120 - unsafe.Sizeof(uringParams{})]byte
	_ [unsafe.Sizeof(uringParams{}) - 120]byte
)

// Opcode is an io_uring operation code (enum io_uring_op).
type Opcode uint8

const (
	OpNop            Opcode = 0
	OpReadv          Opcode = 1
	OpWritev         Opcode = 2
	OpFsync          Opcode = 3
	OpReadFixed      Opcode = 4
	OpWriteFixed     Opcode = 5
	OpPollAdd        Opcode = 6
	OpPollRemove     Opcode = 7
	OpSyncFileRange  Opcode = 8
	OpSendmsg        Opcode = 9
	OpRecvmsg        Opcode = 10
	OpTimeout        Opcode = 11
	OpTimeoutRemove  Opcode = 12
	OpAccept         Opcode = 13
	OpAsyncCancel    Opcode = 14
	OpLinkTimeout    Opcode = 15
	OpConnect        Opcode = 16
	OpFallocate      Opcode = 17
	OpOpenat         Opcode = 18
	OpClose          Opcode = 19
	OpFilesUpdate    Opcode = 20
	OpStatx          Opcode = 21
	OpRead           Opcode = 22
	OpWrite          Opcode = 23
	OpFadvise        Opcode = 24
	OpMadvise        Opcode = 25
	OpSend           Opcode = 26
	OpRecv           Opcode = 27
	OpOpenat2        Opcode = 28
	OpEpollCtl       Opcode = 29
	OpSplice         Opcode = 30
	OpProvideBuffers Opcode = 31
	OpRemoveBuffers  Opcode = 32
	OpTee            Opcode = 33
	OpShutdown       Opcode = 34
	OpRenameat       Opcode = 35
	OpUnlinkat       Opcode = 36
	OpMkdirat        Opcode = 37
	OpSymlinkat      Opcode = 38
	OpLinkat         Opcode = 39
	OpMsgRing        Opcode = 40
	OpFsetxattr      Opcode = 41
	OpSetxattr       Opcode = 42
	OpFgetxattr      Opcode = 43
	OpGetxattr       Opcode = 44
	OpSocket         Opcode = 45
	OpUringCmd       Opcode = 46
	OpSendZC         Opcode = 47
	OpSendmsgZC      Opcode = 48
	OpReadMultishot  Opcode = 49
	OpWaitid         Opcode = 50
	OpFutexWait      Opcode = 51
	OpFutexWake      Opcode = 52
	OpFutexWaitv     Opcode = 53
	OpFixedFdInstall Opcode = 54
	OpFtruncate      Opcode = 55
	OpBind           Opcode = 56
	OpListen         Opcode = 57
)

// opInfo names the ops ringlog uses and the first kernel release that has them; it feeds
// error messages and docs/ring.md.
var opInfo = map[Opcode]struct{ name, kernel string }{
	OpNop: {"NOP", "5.1"}, OpReadv: {"READV", "5.1"}, OpWritev: {"WRITEV", "5.1"},
	OpFsync: {"FSYNC", "5.1"}, OpReadFixed: {"READ_FIXED", "5.1"}, OpWriteFixed: {"WRITE_FIXED", "5.1"},
	OpPollAdd: {"POLL_ADD", "5.1"}, OpPollRemove: {"POLL_REMOVE", "5.1"},
	OpSyncFileRange: {"SYNC_FILE_RANGE", "5.2"}, OpSendmsg: {"SENDMSG", "5.3"},
	OpRecvmsg: {"RECVMSG", "5.3"}, OpTimeout: {"TIMEOUT", "5.4"}, OpTimeoutRemove: {"TIMEOUT_REMOVE", "5.5"},
	OpAccept: {"ACCEPT", "5.5"}, OpAsyncCancel: {"ASYNC_CANCEL", "5.5"}, OpLinkTimeout: {"LINK_TIMEOUT", "5.5"},
	OpConnect: {"CONNECT", "5.5"}, OpFallocate: {"FALLOCATE", "5.6"}, OpOpenat: {"OPENAT", "5.6"},
	OpClose: {"CLOSE", "5.6"}, OpFilesUpdate: {"FILES_UPDATE", "5.6"}, OpStatx: {"STATX", "5.6"},
	OpRead: {"READ", "5.6"}, OpWrite: {"WRITE", "5.6"}, OpFadvise: {"FADVISE", "5.6"},
	OpMadvise: {"MADVISE", "5.6"}, OpSend: {"SEND", "5.6"}, OpRecv: {"RECV", "5.6"},
	OpOpenat2: {"OPENAT2", "5.6"}, OpEpollCtl: {"EPOLL_CTL", "5.6"}, OpSplice: {"SPLICE", "5.7"},
	OpProvideBuffers: {"PROVIDE_BUFFERS", "5.7"}, OpRemoveBuffers: {"REMOVE_BUFFERS", "5.7"},
	OpTee: {"TEE", "5.8"}, OpShutdown: {"SHUTDOWN", "5.11"}, OpRenameat: {"RENAMEAT", "5.11"},
	OpUnlinkat: {"UNLINKAT", "5.11"}, OpMkdirat: {"MKDIRAT", "5.15"}, OpSymlinkat: {"SYMLINKAT", "5.15"},
	OpLinkat: {"LINKAT", "5.15"}, OpMsgRing: {"MSG_RING", "5.18"}, OpFsetxattr: {"FSETXATTR", "5.19"},
	OpSetxattr: {"SETXATTR", "5.19"}, OpFgetxattr: {"FGETXATTR", "5.19"}, OpGetxattr: {"GETXATTR", "5.19"},
	OpSocket: {"SOCKET", "5.19"}, OpUringCmd: {"URING_CMD", "5.19"}, OpSendZC: {"SEND_ZC", "6.0"},
	OpSendmsgZC: {"SENDMSG_ZC", "6.1"}, OpReadMultishot: {"READ_MULTISHOT", "6.7"}, OpWaitid: {"WAITID", "6.7"},
	OpFutexWait: {"FUTEX_WAIT", "6.7"}, OpFutexWake: {"FUTEX_WAKE", "6.7"}, OpFutexWaitv: {"FUTEX_WAITV", "6.7"},
	OpFixedFdInstall: {"FIXED_FD_INSTALL", "6.8"}, OpFtruncate: {"FTRUNCATE", "6.9"},
	OpBind: {"BIND", "6.11"}, OpListen: {"LISTEN", "6.11"},
}

// bufReg is struct io_uring_buf_reg (IORING_REGISTER_PBUF_RING).
type bufReg struct {
	RingAddr    uint64
	RingEntries uint32
	Bgid        uint16
	Flags       uint16
	Resv        [3]uint64
}

// bufRingEntry is struct io_uring_buf. The ring's tail (u16) overlays entry 0's Resv.
type bufRingEntry struct {
	Addr uint64
	Len  uint32
	Bid  uint16
	Resv uint16
}

// String returns the kernel name of the op, e.g. "WRITEV".
func (o Opcode) String() string {
	if info, ok := opInfo[o]; ok {
		return info.name
	}
	return fmt.Sprintf("OP_%d", uint8(o))
}

// MinKernel returns the first Linux release that has the op, or "?" when unknown.
func (o Opcode) MinKernel() string {
	if info, ok := opInfo[o]; ok {
		return info.kernel
	}
	return "?"
}

// SQE flags (IOSQE_*).
const (
	SQEFixedFile      uint8 = 1 << 0 // Fd is an index into the registered file table
	SQEIODrain        uint8 = 1 << 1 // start only after every earlier request completed
	SQEIOLink         uint8 = 1 << 2 // the next SQE starts after this one succeeds
	SQEIOHardlink     uint8 = 1 << 3 // the next SQE starts after this one, even if it fails
	SQEAsync          uint8 = 1 << 4 // always go to the async worker
	SQEBufferSelect   uint8 = 1 << 5
	SQECQESkipSuccess uint8 = 1 << 6 // post no CQE if the request succeeds
)

// CQE flags (IORING_CQE_F_*).
const (
	CQEFBuffer       uint32 = 1 << 0
	CQEFMore         uint32 = 1 << 1 // a multishot request stays armed
	CQEFSockNonempty uint32 = 1 << 2
	CQEFNotif        uint32 = 1 << 3 // zero-copy send: the buffer may be reused
)

// Setup flags (IORING_SETUP_*).
const (
	setupIOPoll       uint32 = 1 << 0
	setupSQPoll       uint32 = 1 << 1
	setupSQAff        uint32 = 1 << 2
	setupCQSize       uint32 = 1 << 3
	setupClamp        uint32 = 1 << 4
	setupAttachWQ     uint32 = 1 << 5
	setupRDisabled    uint32 = 1 << 6
	setupSubmitAll    uint32 = 1 << 7
	setupCoopTaskrun  uint32 = 1 << 8
	setupTaskrunFlag  uint32 = 1 << 9
	setupSingleIssuer uint32 = 1 << 12
	setupDeferTaskrun uint32 = 1 << 13
	setupNoSQArray    uint32 = 1 << 16
)

// Feature bits (IORING_FEAT_*) reported by io_uring_setup.
const (
	FeatSingleMmap     uint32 = 1 << 0  // 5.4
	FeatNoDrop         uint32 = 1 << 1  // 5.5: overflowed CQEs are kept, never dropped
	FeatSubmitStable   uint32 = 1 << 2  // 5.5
	FeatRWCurPos       uint32 = 1 << 3  // 5.6
	FeatCurPersonality uint32 = 1 << 4  // 5.6
	FeatFastPoll       uint32 = 1 << 5  // 5.7
	FeatPoll32Bits     uint32 = 1 << 6  // 5.9
	FeatSQPollNonfixed uint32 = 1 << 7  // 5.11
	FeatExtArg         uint32 = 1 << 8  // 5.11: io_uring_enter takes a timeout
	FeatNativeWorkers  uint32 = 1 << 9  // 5.12
	FeatRsrcTags       uint32 = 1 << 10 // 5.13
	FeatCQESkip        uint32 = 1 << 11 // 5.17
	FeatLinkedFile     uint32 = 1 << 12 // 5.17
)

// io_uring_enter flags.
const (
	enterGetEvents uint32 = 1 << 0
	enterSQWakeup  uint32 = 1 << 1
	enterSQWait    uint32 = 1 << 2
	enterExtArg    uint32 = 1 << 3
)

// SQ ring flags written by the kernel.
const (
	sqNeedWakeup uint32 = 1 << 0
	sqCQOverflow uint32 = 1 << 1
	sqTaskrun    uint32 = 1 << 2
)

// Op-specific flags.
const (
	FsyncDatasync uint32 = 1 << 0 // IORING_FSYNC_DATASYNC

	TimeoutAbs          uint32 = 1 << 0 // IORING_TIMEOUT_ABS (CLOCK_MONOTONIC deadline)
	TimeoutETimeSuccess uint32 = 1 << 5 // IORING_TIMEOUT_ETIME_SUCCESS

	AcceptMultishot uint16 = 1 << 0 // IORING_ACCEPT_MULTISHOT, in ioprio
	RecvMultishot   uint16 = 1 << 1 // IORING_RECV_MULTISHOT, in ioprio
	// RecvSendPollFirst (IORING_RECVSEND_POLL_FIRST, 5.19, in ioprio): arm the poll at once
	// instead of trying the socket first (for a recv that is known to find nothing yet).
	RecvSendPollFirst uint16 = 1 << 0

	CancelAll uint32 = 1 << 0 // IORING_ASYNC_CANCEL_ALL
	CancelFd  uint32 = 1 << 1 // IORING_ASYNC_CANCEL_FD
	CancelAny uint32 = 1 << 2 // IORING_ASYNC_CANCEL_ANY

	MsgRingCQESkip uint32 = 1 << 0 // IORING_MSG_RING_CQE_SKIP

	SpliceFdInFixed uint32 = 1 << 31 // SPLICE_F_FD_IN_FIXED

	msgData uint64 = 0 // IORING_MSG_DATA
)

// register opcodes (io_uring_register).
const (
	regBuffers       = 0
	regUnregBuffers  = 1
	regFiles         = 2
	regUnregFiles    = 3
	regEventfd       = 4
	regUnregEventfd  = 5
	regFilesUpdate   = 6
	regProbe         = 8
	regBuffers2      = 15 // 5.13; with rsrcRegisterSparse 5.19
	regBuffersUpdate = 16 // 5.13
	regPbufRing      = 22
	regUnregPbufRing = 23
	probeOpsCapacity = 256
)

// rsrcRegisterSparse (IORING_RSRC_REGISTER_SPARSE) registers an empty table of that many
// slots, filled later with regBuffersUpdate.
const rsrcRegisterSparse = 1

// rsrcRegister is struct io_uring_rsrc_register; rsrcUpdate2 is io_uring_rsrc_update2.
type rsrcRegister struct {
	Nr, Flags         uint32
	Resv2, Data, Tags uint64
}

type rsrcUpdate2 struct {
	Offset, Resv uint32
	Data, Tags   uint64
	Nr, Resv2    uint32
}

type sqringOffsets struct {
	Head, Tail, RingMask, RingEntries, Flags, Dropped, Array, Resv1 uint32
	UserAddr                                                        uint64
}

type cqringOffsets struct {
	Head, Tail, RingMask, RingEntries, Overflow, Cqes, Flags, Resv1 uint32
	UserAddr                                                        uint64
}

// uringParams is struct io_uring_params (120 bytes).
type uringParams struct {
	SQEntries    uint32
	CQEntries    uint32
	Flags        uint32
	SQThreadCPU  uint32
	SQThreadIdle uint32
	Features     uint32
	WQFd         uint32
	Resv         [3]uint32
	SQOff        sqringOffsets
	CQOff        cqringOffsets
}

// getEventsArg is struct io_uring_getevents_arg, passed with IORING_ENTER_EXT_ARG.
type getEventsArg struct {
	Sigmask   uint64
	SigmaskSz uint32
	MinWaitUs uint32
	Ts        uint64
}

type probeOp struct {
	Op    uint8
	Resv  uint8
	Flags uint16
	Resv2 uint32
}

type probeHeader struct {
	LastOp uint8
	OpsLen uint8
	Resv   uint16
	Resv2  [3]uint32
}

const probeOpSupported = 1 << 0

// mmap offsets.
const (
	offSQRing = 0
	offCQRing = 0x8000000
	offSQEs   = 0x10000000
)

// Timespec is struct __kernel_timespec, used by TIMEOUT and LINK_TIMEOUT. It must stay
// reachable and unmoved until the op's completion arrives (keep it off the stack).
type Timespec struct {
	Sec  int64
	Nsec int64
}

// SetDuration sets the timespec to d.
func (ts *Timespec) SetDuration(nanos int64) {
	ts.Sec = nanos / 1e9
	ts.Nsec = nanos % 1e9
}
