package bench

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/ringlog/ringlog/ring"

	"golang.org/x/sys/unix"
)

// UringEcho configures the ping-pong's third floor: an echo served by one ring.Reactor loop
// on one locked thread, as a broker shard serves a connection (netio's ring driver). A
// PingPong against it (DialPingPong, the echo in another process) measures what waking a
// thread asleep in io_uring_enter costs against a Go echo asleep in epoll, with no broker
// work in between. The zero value is the broker's default reactor: no setup flags, a plain
// RECV op re-armed after each message, the answer by a non-blocking sendmsg on the loop
// (netio/conn_ring_inline.go), no timer, no pinning.
//
// Spec form (ParseUringEcho, `ringlog bench pingpong --echo`): "uring" or
// "uring:OPT+OPT...", with OPT one of
//
//	defer      IORING_SETUP_SINGLE_ISSUER|DEFER_TASKRUN|TASKRUN_FLAG (ringlogd --defer-taskrun)
//	coop       IORING_SETUP_COOP_TASKRUN|TASKRUN_FLAG
//	single     IORING_SETUP_SINGLE_ISSUER
//	pollfirst  the RECV skips its first try (IORING_RECVSEND_POLL_FIRST): it arms the poll at once
//	multishot  one multishot RECV from a provided-buffer ring, armed once
//	sendop     the answer by a SEND op instead of an inline sendmsg
//	timer      a 100 ms timer stays armed, so every wait carries a timeout (a shard has its
//	           flush- and retention-check timers)
//	cpuN       pin the loop thread to CPU N (a broker pins each shard)
//	append     before it answers, append the message to a file in the temporary directory
//	           by the reactor's Pwritev (InlineFileIO, as a page-cache broker appends a
//	           produce): the least an acks=1 broker does per record
type UringEcho struct {
	DeferTaskrun, CoopTaskrun, SingleIssuer bool
	PollFirst, Multishot, SendOp, Timer     bool
	Append                                  bool
	CPU                                     int // -1: not pinned
}

// uringEchoAppendBytesMax bounds the append option's file: it is emptied (ftruncate) and
// appended to from 0 again when it would grow past this.
const uringEchoAppendBytesMax = 64 << 20

// uringEchoTimerInterval is the period of UringEcho.Timer's timer (the order of a shard's
// flush-check interval).
const uringEchoTimerInterval = 100 * time.Millisecond

// uringEchoBufRingEntries is the multishot RECV's provided-buffer count: one message is in
// flight at a time, a few spare buffers cover a message split across completions.
const uringEchoBufRingEntries = 8

// ParseUringEcho reads a spec (see UringEcho).
func ParseUringEcho(spec string) (UringEcho, error) {
	e := UringEcho{CPU: -1}
	name, opts, hasOpts := strings.Cut(spec, ":")
	if name != "uring" || hasOpts && opts == "" {
		return e, fmt.Errorf("echo %q: want uring[:opt+opt...]", spec)
	}
	if !hasOpts {
		return e, nil
	}
	for opt := range strings.SplitSeq(opts, "+") {
		switch {
		case opt == "defer":
			e.DeferTaskrun = true
		case opt == "coop":
			e.CoopTaskrun = true
		case opt == "single":
			e.SingleIssuer = true
		case opt == "pollfirst":
			e.PollFirst = true
		case opt == "multishot":
			e.Multishot = true
		case opt == "sendop":
			e.SendOp = true
		case opt == "timer":
			e.Timer = true
		case opt == "append":
			e.Append = true
		case strings.HasPrefix(opt, "cpu"):
			cpu, err := strconv.Atoi(opt[len("cpu"):])
			if err != nil || cpu < 0 {
				return e, fmt.Errorf("echo %q: option %q: want cpuN with N ≥ 0", spec, opt)
			}
			e.CPU = cpu
		default:
			return e, fmt.Errorf("echo %q: unknown option %q (defer, coop, single, pollfirst, multishot, sendop, timer, append, cpuN)", spec, opt)
		}
	}
	if e.DeferTaskrun && e.CoopTaskrun {
		return e, fmt.Errorf("echo %q: defer and coop are exclusive", spec)
	}
	if e.Multishot && e.PollFirst {
		return e, fmt.Errorf("echo %q: multishot and pollfirst are exclusive", spec)
	}
	return e, nil
}

func (e UringEcho) ringConfig() ring.Config {
	return ring.Config{
		Backend:      "uring",
		SingleIssuer: e.SingleIssuer || e.DeferTaskrun,
		DeferTaskrun: e.DeferTaskrun,
		CoopTaskrun:  e.CoopTaskrun,
		InlineFileIO: e.Append,
	}
}

// ServeUringEcho listens on 127.0.0.1 (a plain TCP socket, as the broker's listeners),
// calls ready with the address, accepts one connection and sends back every size-byte
// message it reads, on one reactor loop, until the peer closes it (nil) or an operation
// fails. The accepted socket is blocking, as netio's multishot accept leaves it: io_uring
// polls it, and the inline answer passes MSG_DONTWAIT.
func ServeUringEcho(size int, cfg UringEcho, ready func(addr string)) error {
	if err := checkPingPongSize(size); err != nil {
		return err
	}
	lfd, addr, err := listenLoopback()
	if err != nil {
		return fmt.Errorf("uring echo: %w", err)
	}
	ready(addr)
	fd, _, err := unix.Accept4(lfd, unix.SOCK_CLOEXEC)
	unix.Close(lfd)
	if err != nil {
		return fmt.Errorf("uring echo: accept: %w", err)
	}
	defer unix.Close(fd)
	if err := unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1); err != nil {
		return fmt.Errorf("uring echo: TCP_NODELAY: %w", err)
	}
	done := make(chan error, 1)
	if err := ring.StartPinned(cfg.CPU, cfg.ringConfig(), func(r *ring.Reactor) {
		e := &uringEcho{r: r, fd: fd, cfg: cfg, buf: make([]byte, size)}
		done <- e.run()
	}); err != nil {
		return fmt.Errorf("uring echo: %w", err)
	}
	return <-done
}

// listenLoopback opens a listening TCP socket on 127.0.0.1 with a kernel-chosen port.
func listenLoopback() (int, string, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, "", err
	}
	sa := &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}
	if err := unix.Bind(fd, sa); err != nil {
		unix.Close(fd)
		return -1, "", err
	}
	if err := unix.Listen(fd, 1); err != nil {
		unix.Close(fd)
		return -1, "", err
	}
	bound, err := unix.Getsockname(fd)
	if err != nil {
		unix.Close(fd)
		return -1, "", err
	}
	in4, ok := bound.(*unix.SockaddrInet4)
	if !ok {
		unix.Close(fd)
		return -1, "", fmt.Errorf("listener bound to %T", bound)
	}
	return fd, fmt.Sprintf("127.0.0.1:%d", in4.Port), nil
}

// uringEcho is the loop's state; every field is owned by the loop thread.
type uringEcho struct {
	r          *ring.Reactor
	fd         int
	cfg        UringEcho
	buf        []byte
	filled     int // bytes of the current message received
	sent       int // bytes of the answer sent
	bufs       *ring.BufRing
	recvArmed  bool
	closed     bool // the peer closed the connection
	err        error
	onRecvFn   func(res int32, flags uint32)
	onSendFn   func(res int32, flags uint32)
	timer      *ring.Timer
	timerTicks int
	file       int      // the append option's file (unlinked), else -1
	fileBytes  int64    // its length
	iov        [][]byte // {buf}, for Pwritev
}

func (e *uringEcho) run() error {
	e.onRecvFn, e.onSendFn = e.onRecv, e.onSend
	e.file = -1
	if e.cfg.Append {
		f, err := os.CreateTemp("", "ringlog-uring-echo-*")
		if err != nil {
			return fmt.Errorf("uring echo: %w", err)
		}
		os.Remove(f.Name()) // nothing is left behind, however the process ends
		fd, err := unix.Dup(int(f.Fd()))
		f.Close()
		if err != nil {
			return fmt.Errorf("uring echo: %w", err)
		}
		defer unix.Close(fd)
		e.file, e.iov = fd, [][]byte{e.buf}
	}
	if e.cfg.Multishot {
		bufs, err := ring.NewBufRing(e.r.Ring(), 1, uringEchoBufRingEntries, len(e.buf))
		if err != nil {
			return fmt.Errorf("uring echo: %w", err)
		}
		defer bufs.Close()
		e.bufs = bufs
	}
	if e.cfg.Timer {
		e.timer = e.r.AfterFunc(uringEchoTimerInterval, e.tick)
		defer e.timer.Stop()
	}
	e.armRecv()
	for e.err == nil && !e.closed {
		if err := e.r.RunOnce(true); err != nil {
			return fmt.Errorf("uring echo: %w", err)
		}
	}
	return e.err
}

func (e *uringEcho) tick() {
	e.timerTicks++
	e.timer.Reset(uringEchoTimerInterval)
}

func (e *uringEcho) fail(err error) {
	if e.err == nil {
		e.err = fmt.Errorf("uring echo: %w", err)
	}
}

func (e *uringEcho) armRecv() {
	if e.recvArmed || e.closed || e.err != nil {
		return
	}
	op, err := e.r.Begin(e.onRecvFn)
	if err != nil {
		e.fail(err)
		return
	}
	if e.cfg.Multishot {
		op.SQE().PrepRecvMultishot(e.fd, e.bufs.Group(), 0)
	} else {
		op.SQE().PrepRecv(e.fd, e.buf[e.filled:], 0)
		if e.cfg.PollFirst {
			op.SQE().IoPrio |= ring.RecvSendPollFirst
		}
		op.Pin(&e.buf[0])
	}
	if err := op.Submit(); err != nil {
		e.fail(err)
		return
	}
	e.recvArmed = true
}

func (e *uringEcho) onRecv(res int32, flags uint32) {
	if !e.cfg.Multishot || flags&ring.CQEFMore == 0 {
		e.recvArmed = false
	}
	switch {
	case res == 0 || res == -int32(unix.ECONNRESET):
		e.closed = true
		return
	case res == -int32(unix.ENOBUFS) && e.cfg.Multishot:
		e.fail(errors.New("multishot recv ran out of buffers"))
		return
	case res < 0:
		e.fail(fmt.Errorf("recv: %w", unix.Errno(-res)))
		return
	}
	n := int(res)
	if e.filled+n > len(e.buf) {
		e.fail(fmt.Errorf("peer sent %d bytes past a %d-byte message", e.filled+n-len(e.buf), len(e.buf)))
		return
	}
	if e.cfg.Multishot {
		bid := ring.BufferID(flags)
		copy(e.buf[e.filled:], e.bufs.Buf(bid, n))
		e.bufs.Recycle(bid)
	}
	e.filled += n
	if e.filled < len(e.buf) {
		e.armRecv()
		return
	}
	e.filled, e.sent = 0, 0
	if e.file >= 0 && !e.append() {
		return
	}
	e.send()
}

// append writes the message at the end of the append option's file, as a broker's
// page-cache append does (one pwritev on the loop thread).
func (e *uringEcho) append() bool {
	if e.fileBytes+int64(len(e.buf)) > uringEchoAppendBytesMax {
		if err := unix.Ftruncate(e.file, 0); err != nil {
			e.fail(fmt.Errorf("truncate: %w", err))
			return false
		}
		e.fileBytes = 0
	}
	n, err := e.r.Pwritev(e.file, e.iov, e.fileBytes)
	if err != nil {
		e.fail(fmt.Errorf("append: %w", err))
		return false
	}
	e.fileBytes += int64(n)
	return true
}

// send sends what is left of the answer: inline first (as netio's ring driver does) unless
// SendOp, the rest by a SEND op. The next RECV is armed once the answer is out.
func (e *uringEcho) send() {
	if !e.cfg.SendOp {
		for e.sent < len(e.buf) {
			n, err := unix.SendmsgN(e.fd, e.buf[e.sent:], nil, nil, unix.MSG_DONTWAIT)
			if err == unix.EINTR {
				continue
			}
			if err == unix.EAGAIN {
				break
			}
			if err != nil {
				e.fail(fmt.Errorf("send: %w", err))
				return
			}
			e.sent += n
		}
		if e.sent == len(e.buf) {
			e.armRecv()
			return
		}
	}
	op, err := e.r.Begin(e.onSendFn)
	if err != nil {
		e.fail(err)
		return
	}
	op.SQE().PrepSend(e.fd, e.buf[e.sent:], 0)
	op.Pin(&e.buf[0])
	if err := op.Submit(); err != nil {
		e.fail(err)
	}
}

func (e *uringEcho) onSend(res int32, _ uint32) {
	if res < 0 {
		if res == -int32(unix.ECONNRESET) || res == -int32(unix.EPIPE) {
			e.closed = true
			return
		}
		e.fail(fmt.Errorf("send: %w", unix.Errno(-res)))
		return
	}
	e.sent += int(res)
	if e.sent < len(e.buf) {
		e.send()
		return
	}
	e.armRecv()
}
