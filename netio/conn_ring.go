package netio

import (
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ringlog/ringlog/netio/wire"

	"golang.org/x/sys/unix"

	"github.com/ringlog/ringlog/ring"
)

// The ring I/O driver: a shard's listener and its connections run on the shard's
// ring.Reactor loop. Accept (multishot) and recv are ring ops; replies leave by a
// non-blocking send(2) on the loop, and by a ring send op for what a full socket did not
// take (conn_ring_inline.go). Handler.Serve runs on the loop thread, so a handler owning
// the shard's partitions can serve them without a hand-off; replies from other goroutines
// reach the loop through Reactor.Post. A batch of responses carrying fetch file ranges
// goes out through a per-connection pipe: the loop fills it itself (headers by write, file
// ranges whose pages are in the page cache by splice(2), both non-blocking), then one
// SPLICE op moves the whole pipe to the socket, so the responses of several partitions and
// requests cost one io-wq hand-off per pipe-full instead of two per file range. A range
// not in the page cache goes by two SPLICE ops linked with IOSQE_IO_LINK (file -> pipe ->
// socket), so the loop never waits for the disk. Every field of ringConn without a lock
// note is owned by the loop thread.

// ringListener is one shard's listener on its reactor.
type ringListener struct {
	srv   *Server
	r     *ring.Reactor
	file  *os.File // dup of the listener's socket; owns fd
	fd    int
	shard int
	done  bool // loop-owned: accept ended
}

// ServeRing accepts connections on ln with reactor r and drives them on r's loop. It must
// be called on r's loop thread (inside the function given to ring.StartPinned before
// r.Run, or from r.Post). It returns once the accept is armed; the listener stops on
// Shutdown or Close, which need the loop to keep running until they return.
//
// shard must be the index of the shard whose reactor r is: requests carry it with
// ConnInfo.OnLoop set, and a handler may run that shard's work inline on the calling
// thread (BrokerHandler does). Serving on a reactor that is not that shard's would run
// shard code on the wrong thread.
func (s *Server) ServeRing(r *ring.Reactor, ln *net.TCPListener, shard int) error {
	if s.cfg.TLS != nil {
		return ErrRingTLS
	}
	f, err := ln.File()
	if err != nil {
		return fmt.Errorf("serve ring shard %d: dup listener: %w", shard, err)
	}
	if s.cfg.MemorySendZC && !r.Probe().Supported(ring.OpSendZC) {
		s.cfg.Logf("netio: shard %d: MemorySendZC is set but this ring has no SEND_ZC (Linux 6.0+): memory is sent with SEND", shard)
	}
	l := &ringListener{srv: s, r: r, file: f, fd: int(f.Fd()), shard: shard}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		f.Close()
		return ErrServerClosed
	}
	s.ringListeners = append(s.ringListeners, l)
	s.mu.Unlock()
	if err := l.arm(); err != nil {
		f.Close()
		return fmt.Errorf("serve ring shard %d: arm accept: %w", shard, err)
	}
	return nil
}

func (l *ringListener) arm() error {
	return l.r.Submit(func(sqe *ring.SQE) { sqe.PrepMultishotAccept(l.fd, nil, nil, unix.SOCK_CLOEXEC) }, l.onAccept)
}

func (l *ringListener) onAccept(res int32, flags uint32) {
	if res >= 0 {
		l.srv.startRingConn(l.r, int(res), l.shard)
	}
	if flags&ring.CQEFMore != 0 {
		return
	}
	// The multishot accept ended: shutdown, or an error such as EMFILE.
	select {
	case <-l.srv.closing:
		l.done = true
		l.file.Close()
		return
	default:
	}
	l.srv.cfg.Logf("netio: ring accept on shard %d ended (res %d); re-arming in %v", l.shard, res, acceptRetryDelay)
	l.r.AfterFunc(acceptRetryDelay, func() {
		if err := l.arm(); err != nil {
			l.srv.cfg.Logf("netio: ring accept on shard %d: %v", l.shard, err)
		}
	})
}

// ErrRingTLS is returned by ServeRing on a server configured with TLS: the ring driver
// sends plain bytes (recv, send and splice ops on the socket), so TLS connections are
// served by Serve (the net driver), whose connections wrap crypto/tls.
var ErrRingTLS = errors.New("netio: TLS connections are served by the net driver (Serve), not ServeRing")

const acceptRetryDelay = 10 * time.Millisecond

// stop ends the accept: shutdown on a listening socket fails its pending accept and
// refuses new connections. It waits (bounded) for the loop to do it, so that Shutdown
// returns with the listener closed.
func (l *ringListener) stop() {
	stopped := make(chan struct{})
	err := l.r.Post(func() {
		unix.Shutdown(l.fd, unix.SHUT_RDWR)
		close(stopped)
	})
	if err != nil {
		l.file.Close() // the loop is gone
		return
	}
	select {
	case <-stopped:
	case <-time.After(listenerStopWaitMax):
	}
}

// listenerStopWaitMax bounds how long Shutdown waits for a busy loop to stop accepting.
const listenerStopWaitMax = time.Second

func (s *Server) startRingConn(r *ring.Reactor, fd int, shard int) {
	if s.connCount.Add(1) > int64(s.cfg.ConnectionsMax) {
		s.connCount.Add(-1)
		s.stats.refusedConns.Add(1)
		s.cfg.Logf("netio: refusing a connection on shard %d: %d connections open (ConnectionsMax)", shard, s.cfg.ConnectionsMax)
		unix.Close(fd)
		return
	}
	remote := ""
	if sa, err := unix.Getpeername(fd); err == nil {
		remote = sockaddrString(sa)
	}
	a := s.admitAddress(remote, shard)
	if a == nil {
		s.connCount.Add(-1)
		unix.Close(fd)
		return
	}
	// As Go's net package does: no Nagle delay for small responses (MSG_MORE and
	// SPLICE_F_MORE still coalesce the pieces of one frame).
	unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
	c := &ringConn{srv: s, r: r, fd: fd, addr: a, budgets: s.connBudgets(a, shard),
		info: ConnInfo{ID: s.nextConnID.Add(1), Shard: shard, RemoteAddr: remote, OnLoop: true, FetchFiles: s.fetchFiles(a), Session: &Session{}}}
	c.rbuf = make([]byte, readBufferBytes)
	c.onRecvBufFn, c.onRecvDirectFn = c.onRecvBuf, c.onRecvDirect
	c.onSentFn = c.onSent
	c.onFileToPipeFn, c.onPipeSentFn, c.onPipeDrainFn = c.onFileToPipe, c.onPipeToSocket, c.onPipeDrained
	c.onSentZCFn = c.onSentZC
	c.drainFn = c.drainCompleted
	if !s.addConn(c, c.info) {
		s.addrs.leave(a)
		s.connCount.Add(-1)
		unix.Close(fd)
		return
	}
	c.lastRecv = time.Now()
	c.idleTimer = r.AfterFunc(s.cfg.IdleTimeout, c.checkIdle)
	c.armRecv()
}

// checkIdle closes the connection if it has sent nothing for IdleTimeout and nothing of
// it is outstanding; otherwise it looks again when the timeout could next expire.
func (c *ringConn) checkIdle() {
	c.idleTimer = nil
	if c.dead || c.finished {
		return
	}
	idleFor := time.Since(c.lastRecv)
	busy := len(c.queue) > 0 || c.cur != nil || c.sending
	if !busy && idleFor >= c.srv.cfg.IdleTimeout {
		c.readerDone = true // a quiet close: nothing to log
		c.failLoop(errIdle)
		return
	}
	wait := c.srv.cfg.IdleTimeout - idleFor
	if busy || wait <= 0 {
		wait = c.srv.cfg.IdleTimeout
	}
	c.idleTimer = c.r.AfterFunc(wait, c.checkIdle)
}

func sockaddrString(sa unix.Sockaddr) string {
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		return (&net.TCPAddr{IP: a.Addr[:], Port: a.Port}).String()
	case *unix.SockaddrInet6:
		return (&net.TCPAddr{IP: a.Addr[:], Port: a.Port}).String()
	}
	return ""
}

// ringConn is one connection driven by a reactor.
type ringConn struct {
	srv  *Server
	r    *ring.Reactor
	fd   int
	info ConnInfo
	addr *address
	// budgets hold the request and response bytes of this connection (lock-free: replies
	// from other goroutines charge them too).
	budgets budgets

	rbuf       []byte // receive buffer; unparsed bytes are rbuf[rstart:rend]
	rstart     int
	rend       int
	cur        *Request // frame whose payload is being received
	curFilled  int      // bytes of cur's payload received
	curWant    int      // cur's payload size; len(*cur.frame) grows towards it
	recvArmed  bool
	readerDone bool // EOF, error, fatal frame or stopReading
	stopping   bool
	inflight   int // requests read and not released
	queue      []*Request
	ops        int // ring ops in flight on this connection
	dead       bool
	finished   bool
	frameClock reusedTimer // armed while a frame is incomplete (startFrameClock)
	retryTimer *ring.Timer
	idleTimer  *ring.Timer
	lastRecv   time.Time

	// Sending: one batch at a time, as a plan of memory and file segments.
	sending    bool
	batch      []*Request
	wbuf       []byte
	splices    []wire.Splice
	plan       []sendSegment
	planFiles  bool // plan has file ranges: it goes out through the pipe
	planIndex  int
	segmentOff int64
	writeClock reusedTimer // armed while a batch is being sent (armWriteTimer)
	pipeR      int
	pipeW      int
	pipeCap    int
	pipeBytes  int // bytes spliced into the pipe, not yet to the socket
	spliceOps  int // splice completions still to come for the current step

	onRecvBufFn    func(int32, uint32)
	onRecvDirectFn func(int32, uint32)
	onSentFn       func(int32, uint32)
	onFileToPipeFn func(int32, uint32)
	onPipeSentFn   func(int32, uint32)
	onPipeDrainFn  func(int32, uint32)
	onSentZCFn     func(int32, uint32)
	zcNotifs       int // SEND_ZC notifications still to come for the batch being sent
	drainFn        func()

	mu             sync.Mutex
	completed      []*Request // guarded by mu: replied, not yet seen by the loop
	completedSpare []*Request // loop only: the other half of completed's double buffer
	postPending    bool       // guarded by mu
	gone           bool       // guarded by mu: finished; late replies release themselves
}

type sendSegment struct {
	data []byte
	file wire.FileRange
	zc   bool // records memory sent with SEND_ZC (Config.MemorySendZC)
}

// sendZCBytesMin is the smallest memory piece Config.MemorySendZC sends with SEND_ZC:
// below it the notification costs more than the copy it saves.
const sendZCBytesMin = 64 << 10

// recvDirectBytesMin: a frame still missing at least this much is received straight into
// its own buffer instead of through rbuf (saves a copy of large produce payloads).
const recvDirectBytesMin = 16 << 10

func (c *ringConn) armRecv() {
	if c.recvArmed || c.readerDone || c.dead || c.stopping {
		return
	}
	if c.cur == nil && c.inflight >= c.srv.cfg.InflightPerConnMax {
		return // resumed by release
	}
	var err error
	if c.cur != nil && len(*c.cur.frame)-c.curFilled >= recvDirectBytesMin && c.rend == c.rstart {
		// Straight into the allocated part of the frame (never past it: the next chunk is
		// charged first).
		err = c.r.RecvAsync(c.fd, (*c.cur.frame)[c.curFilled:], c.onRecvDirectFn)
	} else {
		if c.rstart > 0 { // compact
			c.rend = copy(c.rbuf, c.rbuf[c.rstart:c.rend])
			c.rstart = 0
		}
		if c.rend == len(c.rbuf) {
			return // full of unparsed bytes: parse must make room first
		}
		err = c.r.RecvAsync(c.fd, c.rbuf[c.rend:], c.onRecvBufFn)
	}
	if err != nil {
		c.failLoop(fmt.Errorf("arm recv: %w", err))
		return
	}
	c.recvArmed = true
	c.ops++
}

func (c *ringConn) onRecvBuf(res int32, _ uint32) {
	if c.recvDone(res) {
		c.rend += int(res)
		c.progress()
	}
}

func (c *ringConn) onRecvDirect(res int32, _ uint32) {
	if c.recvDone(res) {
		c.curFilled += int(res)
		c.progress()
	}
}

// recvDone handles the common part of a recv completion; true when res bytes arrived.
func (c *ringConn) recvDone(res int32) bool {
	c.recvArmed = false
	c.ops--
	if c.dead {
		c.maybeFinish()
		return false
	}
	c.lastRecv = time.Now()
	if res <= 0 {
		if res < 0 && !c.stopping {
			c.srv.cfg.Logf("netio: conn %d from %s: recv: %v", c.info.ID, c.info.RemoteAddr, unix.Errno(-res))
		}
		c.readerDone = true
		c.dropCurrent()
		c.progress()
		return false
	}
	return true
}

// progress parses what arrived, re-arms recv, sends what is ready and finishes the
// connection when nothing is left.
func (c *ringConn) progress() {
	// Replies given while the handler runs on this loop (or by other goroutines meanwhile)
	// are collected without a Post: the loop claims postPending for the duration and
	// drains them itself right after, saving a mailbox hop and an eventfd write per
	// request answered inline.
	c.mu.Lock()
	claimed := !c.postPending
	c.postPending = true
	c.mu.Unlock()
	c.parse()
	if claimed {
		c.takeCompleted()
	}
	c.stopReadingIfStopped()
	c.armRecv()
	c.trySend()
	c.maybeFinish()
}

// stopReadingIfStopped ends the reader once Shutdown has stopped it and no recv is
// pending: armRecv arms none while stopping, so without this a connection whose recv was
// not armed when stopReading ran (at InflightPerConnMax, or a full rbuf), or whose last
// recv brought bytes instead of the EOF that SHUT_RD gives an empty socket (bytes the
// kernel had buffered, or a recv submitted just after), would never read EOF: it stayed
// open with everything answered and held Shutdown until its ctx ended. What is left
// unparsed, a partly received frame included, is dropped, as the bytes still in the socket
// are: Shutdown answers the requests read before it began.
func (c *ringConn) stopReadingIfStopped() {
	if !c.stopping || c.recvArmed || c.readerDone {
		return
	}
	c.readerDone = true
	c.dropCurrent()
}

// takeCompleted marks the replies collected so far ready and releases postPending.
func (c *ringConn) takeCompleted() {
	c.mu.Lock()
	done := c.completed
	c.completed = c.completedSpare[:0] // swapped, not reallocated, on every drain
	c.postPending = false
	c.mu.Unlock()
	for i, req := range done {
		req.ready = true
		done[i] = nil
	}
	c.completedSpare = done[:0]
}

func (c *ringConn) parse() {
	cfg := &c.srv.cfg
	for !c.readerDone && !c.dead {
		if c.cur != nil {
			frame := *c.cur.frame
			if n := copy(frame[c.curFilled:], c.rbuf[c.rstart:c.rend]); n > 0 {
				c.curFilled += n
				c.rstart += n
			}
			if c.curFilled == len(frame) && len(frame) < c.curWant {
				// Charge and allocate the next chunk only now that the bytes are coming.
				chunk := nextFrameChunk(len(frame), c.curWant, c.rend-c.rstart)
				if !c.charge(int64(chunk)) {
					return
				}
				c.cur.charged += int64(chunk)
				growFrame(c.cur, len(frame)+chunk)
				continue
			}
			if c.curFilled < c.curWant {
				c.startFrameClock()
				return
			}
			c.stopFrameClock()
			req := c.cur
			c.cur = nil
			c.dispatch(req)
			continue
		}
		if c.stopping || c.inflight >= cfg.InflightPerConnMax {
			return
		}
		if c.rend-c.rstart < wire.RequestHeaderBytes {
			if c.rend > c.rstart {
				c.startFrameClock() // the clock runs from a frame's first byte
			}
			return
		}
		h, herr := wire.ParseRequestHeader(c.rbuf[c.rstart:c.rend], cfg.FrameBytesMax)
		req := getRequest(h, c.info, c)
		if herr != nil {
			req.refuseHeader(herr, cfg.FrameBytesMax)
			c.inflight++
			c.queue = append(c.queue, req)
			c.readerDone = true
			return
		}
		n := int(h.Length) - (wire.RequestHeaderBytes - wire.FrameLengthBytes)
		chunk := nextFrameChunk(0, n, c.rend-c.rstart-wire.RequestHeaderBytes)
		if chunk < n && c.budgets.tryAcquireUpfront(int64(n)) {
			chunk = n // one buffer, received into straight from the socket (limits.go)
		} else if !c.charge(int64(chunk)) {
			return
		}
		c.rstart += wire.RequestHeaderBytes
		c.inflight++
		req.charged = int64(chunk)
		growFrame(req, chunk)
		c.cur, c.curFilled, c.curWant = req, 0, n
	}
}

// startFrameClock arms the frame timer, unless it runs already: a frame must be complete
// FrameReadTimeout after its first byte arrived, however slowly the rest trickles in.
//
// The timer is the connection's one frame timer, reused (Reset) from frame to frame: a
// produce frame larger than a recv arms it on every request, and allocating it each time (a
// Timer and a closure) made the shard loop allocate per request, and so meet the garbage
// collector (a GC assist or a GC start parks the locked shard thread and hands its P over;
// docs/benchmarks.md, "Session 12: what parks the shard threads").
func (c *ringConn) startFrameClock() {
	if c.frameClock.pending != nil {
		return
	}
	c.frameClock.start(c, c.srv.cfg.FrameReadTimeout, (*ringConn).frameTimedOut)
}

// stopFrameClock stops the frame timer (the frame is complete, or dropped) and keeps it for
// the next frame.
func (c *ringConn) stopFrameClock() { c.frameClock.stop() }

func (c *ringConn) frameTimedOut() {
	c.frameClock.pending = nil
	c.failLoop(errors.New("frame not completed within FrameReadTimeout of its first byte"))
}

// reusedTimer is a connection timer armed and stopped over and over on the loop (the frame
// clock, the write clock): stop keeps the stopped ring.Timer and the next start Resets it, so
// only a connection's first start allocates (a Timer and its closure). Allocating per start
// made the shard loop allocate per request (see startFrameClock). Loop thread only.
type reusedTimer struct {
	pending *ring.Timer // armed and not yet fired or stopped; the fire function clears it
	spare   *ring.Timer // stopped, reused by the next start
}

// start arms the timer to call fire(c) after d. fire is a method expression such as
// (*ringConn).frameTimedOut, a static function value: passing it allocates nothing, and the
// closure over c is made only when there is no spare timer to Reset.
func (t *reusedTimer) start(c *ringConn, d time.Duration, fire func(*ringConn)) {
	if s := t.spare; s != nil {
		t.spare = nil
		s.Reset(d)
		t.pending = s
		return
	}
	t.pending = c.r.AfterFunc(d, func() { fire(c) })
}

// stop stops a pending timer and keeps it for the next start.
func (t *reusedTimer) stop() {
	if t.pending != nil {
		t.pending.Stop()
		t.spare, t.pending = t.pending, nil
	}
}

// charge takes n bytes from the connection's, its address's and its shard's budgets
// without blocking the loop. On failure parsing pauses: a release on this connection
// resumes it, and a retry timer covers budget freed by other connections.
func (c *ringConn) charge(n int64) bool {
	if !c.budgets.tryAcquire(n) {
		if c.retryTimer == nil {
			c.retryTimer = c.r.AfterFunc(budgetRetryDelay, func() {
				c.retryTimer = nil
				c.progress()
			})
		}
		return false
	}
	return true
}

const budgetRetryDelay = time.Millisecond

func (c *ringConn) dispatch(req *Request) {
	c.queue = append(c.queue, req)
	c.srv.stats.requests.Add(1)
	c.srv.serveRequest(req)
	if req.fatal { // refused by the security gate: answer, then close
		c.readerDone = true
	}
}

func (c *ringConn) server() *Server { return c.srv }

// dropCurrent releases a frame that will never complete.
func (c *ringConn) dropCurrent() {
	if c.cur == nil {
		return
	}
	c.releaseLoop(c.cur)
	c.cur = nil
	c.stopFrameClock()
}

// complete is called by Reply from any goroutine.
func (c *ringConn) complete(req *Request, resp Response) {
	req.respCharged = responseBytes(&resp)
	c.budgets.force(req.respCharged)
	c.mu.Lock()
	req.response = resp
	if c.gone {
		c.mu.Unlock()
		c.releaseGone(req)
		return
	}
	c.completed = append(c.completed, req)
	post := !c.postPending
	c.postPending = true
	c.mu.Unlock()
	if post {
		c.post(c.drainFn)
	}
}

// post runs fn on the loop, retrying off the caller's goroutine while the mailbox is full.
func (c *ringConn) post(fn func()) {
	err := c.r.Post(fn)
	if err == nil {
		return
	}
	if errors.Is(err, ring.ErrMailboxFull) {
		go func() {
			for range 1 << 20 {
				time.Sleep(50 * time.Microsecond)
				if err := c.r.Post(fn); !errors.Is(err, ring.ErrMailboxFull) {
					return
				}
			}
		}()
		return
	}
	c.srv.cfg.Logf("netio: conn %d: reactor gone: %v", c.info.ID, err)
}

func (c *ringConn) drainCompleted() {
	c.takeCompleted()
	c.progress()
}

func (c *ringConn) trySend() {
	for !c.sending && !c.dead {
		n := 0
		for n < len(c.queue) && n < writeBatchRequestsMax && c.queue[n].ready {
			n++
		}
		if n == 0 {
			return
		}
		c.batch = append(c.batch[:0], c.queue[:n]...)
		c.queue = c.queue[:copy(c.queue, c.queue[n:])]
		c.wbuf, c.splices = c.srv.encodeResponses(c.wbuf[:0], c.splices[:0], c.batch)
		c.buildPlan()
		if len(c.plan) == 0 {
			c.finishBatch()
			continue
		}
		c.sending = true
		c.armWriteTimer()
		c.sendNext()
	}
}

// armWriteTimer starts the WriteTimeout clock of a batch being sent, reusing the timer of
// the previous batch (no allocation per response).
func (c *ringConn) armWriteTimer() {
	c.writeClock.start(c, c.srv.cfg.WriteTimeout, (*ringConn).writeTimedOut)
}

func (c *ringConn) writeTimedOut() {
	c.writeClock.pending = nil
	c.failLoop(errors.New("write timeout: client is not reading"))
}

func (c *ringConn) buildPlan() {
	c.plan, c.planIndex, c.segmentOff, c.planFiles = c.plan[:0], 0, 0, false
	zc := c.srv.cfg.MemorySendZC && c.r.Probe().Supported(ring.OpSendZC)
	prev := 0
	for _, s := range c.splices {
		if s.At > prev {
			c.plan = append(c.plan, sendSegment{data: c.wbuf[prev:s.At]})
			prev = s.At
		}
		if s.Range.File != nil {
			if s.Range.Length > 0 {
				c.plan = append(c.plan, sendSegment{file: s.Range})
				c.planFiles = true
			}
		} else if len(s.Data) > 0 {
			c.plan = append(c.plan, sendSegment{data: s.Data, zc: zc && len(s.Data) >= sendZCBytesMin})
		}
	}
	if prev < len(c.wbuf) {
		c.plan = append(c.plan, sendSegment{data: c.wbuf[prev:]})
	}
}

// sendNext issues the next op of the plan, or finishes the batch. Memory segments go out
// by send(2) first (sendInline) and by a ring op for what the socket did not take.
func (c *ringConn) sendNext() {
	for {
		if c.dead {
			c.maybeFinish()
			return
		}
		if c.planIndex == len(c.plan) && c.pipeBytes == 0 {
			if c.zcNotifs > 0 {
				return // onSentZC finishes the batch once the kernel let go of its pages
			}
			c.sending = false
			c.writeClock.stop()
			c.finishBatch()
			c.progress()
			return
		}
		if c.planFiles { // the whole batch goes through the pipe
			if err := c.pipeNext(); err != nil {
				c.failLoop(err)
			}
			return
		}
		seg := &c.plan[c.planIndex]
		rest := seg.data[c.segmentOff:]
		flags := unix.MSG_NOSIGNAL
		if c.planIndex+1 < len(c.plan) {
			flags |= unix.MSG_MORE
		}
		done := c.onSentFn
		if seg.zc {
			done = c.onSentZCFn // no inline send: the point is the kernel not copying
		} else {
			n, ok := c.sendInline(rest, flags)
			if !ok {
				return
			}
			if n == len(rest) {
				c.planIndex++
				c.segmentOff = 0
				continue
			}
			c.segmentOff += int64(n)
			rest = rest[n:]
		}
		op, err := c.r.Begin(done)
		if err != nil {
			c.failLoop(fmt.Errorf("send: %w", err))
			return
		}
		if seg.zc {
			op.SQE().PrepSendZC(c.fd, rest, flags)
		} else {
			op.SQE().PrepSend(c.fd, rest, flags)
		}
		op.Pin(&rest[0])
		if err := op.Submit(); err != nil {
			c.failLoop(fmt.Errorf("send: %w", err))
			return
		}
		c.ops++
		c.srv.stats.ringSendOps.Add(1)
		return
	}
}

func (c *ringConn) onSent(res int32, _ uint32) {
	c.ops--
	c.sent(res)
}

// onSentZC is onSent for SEND_ZC: its result arrives first (with CQEFMore when a
// notification follows), then the notification; the op counts until the last of them.
func (c *ringConn) onSentZC(res int32, flags uint32) {
	if flags&ring.CQEFNotif != 0 {
		c.ops--
		c.zcNotifs--
		if c.dead {
			c.maybeFinish()
		} else if c.zcNotifs == 0 && c.planIndex == len(c.plan) {
			c.sendNext()
		}
		return
	}
	if flags&ring.CQEFMore != 0 {
		c.zcNotifs++
	} else {
		c.ops--
	}
	c.sent(res)
}

func (c *ringConn) sent(res int32) {
	if c.dead {
		c.maybeFinish()
		return
	}
	if res < 0 {
		c.failLoop(fmt.Errorf("send: %w", unix.Errno(-res)))
		return
	}
	c.segmentOff += int64(res)
	if c.segmentOff == int64(len(c.plan[c.planIndex].data)) {
		c.planIndex++
		c.segmentOff = 0
	}
	c.sendNext()
}

// spliceNext moves the next piece of a file segment: bytes already in the pipe go to the
// socket first; otherwise up to the pipe's capacity is spliced file -> pipe -> socket as
// two linked ops. segmentOff counts file bytes moved into the pipe.
func (c *ringConn) spliceNext(seg *sendSegment) error {
	if c.pipeCap == 0 {
		if err := c.openPipe(); err != nil {
			return err
		}
	}
	fileFD := int(seg.file.File.Fd())
	if c.pipeBytes > 0 {
		c.spliceOps = 1
		return c.submitSplice(c.pipeR, -1, c.fd, uint32(c.pipeBytes), false, c.onPipeSentFn)
	}
	n := min(seg.file.Length-c.segmentOff, int64(c.pipeCap))
	c.spliceOps = 2
	if err := c.submitSplice(fileFD, seg.file.Offset+c.segmentOff, c.pipeW, uint32(n), true, c.onFileToPipeFn); err != nil {
		c.spliceOps = 0
		return err
	}
	return c.submitSplice(c.pipeR, -1, c.fd, uint32(n), false, c.onPipeSentFn)
}

func (c *ringConn) submitSplice(in int, inOff int64, out int, n uint32, link bool, done func(int32, uint32)) error {
	op, err := c.r.Begin(done)
	if err != nil {
		return fmt.Errorf("splice: %w", err)
	}
	flags := uint32(unix.SPLICE_F_MOVE)
	if out == c.fd && c.planIndex+1 < len(c.plan) {
		flags |= unix.SPLICE_F_MORE // more of this batch follows
	}
	op.SQE().PrepSplice(in, inOff, out, -1, n, flags)
	if link {
		op.SQE().SetLink()
	}
	if err := op.Submit(); err != nil {
		return fmt.Errorf("splice: %w", err)
	}
	c.ops++
	return nil
}

func (c *ringConn) onFileToPipe(res int32, _ uint32) {
	c.ops--
	c.spliceOps--
	switch {
	case c.dead:
	case res < 0:
		c.failLoop(fmt.Errorf("splice file to pipe: %w", unix.Errno(-res)))
	case res == 0:
		c.failLoop(ErrShortFile)
	default:
		c.pipeBytes += int(res)
		c.segmentOff += int64(res)
	}
	c.spliceStepDone()
}

func (c *ringConn) onPipeToSocket(res int32, _ uint32) {
	c.ops--
	c.spliceOps--
	switch {
	case c.dead:
	case res == -int32(unix.ECANCELED): // the linked file splice ran short; retry from the pipe
	case res < 0:
		c.failLoop(fmt.Errorf("splice pipe to socket: %w", unix.Errno(-res)))
	default:
		c.pipeBytes -= int(res)
		c.srv.stats.sendfileBytes.Add(int64(res))
	}
	c.spliceStepDone()
}

func (c *ringConn) spliceStepDone() {
	if c.spliceOps > 0 {
		return
	}
	if c.dead {
		c.maybeFinish()
		return
	}
	seg := &c.plan[c.planIndex]
	if c.segmentOff == seg.file.Length && c.pipeBytes == 0 {
		c.planIndex++
		c.segmentOff = 0
	}
	c.sendNext()
}

// pipeNext fills the pipe with what follows in the plan and moves it to the socket with one
// SPLICE op; a file range whose pages are not cached goes by the linked pair instead.
func (c *ringConn) pipeNext() error {
	if c.pipeCap == 0 {
		if err := c.openPipe(); err != nil {
			return err
		}
	}
	if err := c.fillPipe(); err != nil {
		return err
	}
	if c.pipeBytes > 0 {
		c.spliceOps = 1
		return c.submitSplice(c.pipeR, -1, c.fd, uint32(c.pipeBytes), false, c.onPipeDrainFn)
	}
	return c.spliceNext(&c.plan[c.planIndex]) // an empty pipe refused it: not in the page cache
}

// fillPipe moves plan segments into the pipe on the loop thread until the pipe is full,
// the plan ends, or the next file range is not in the page cache (splice(2) would wait
// for the disk). It never blocks: the pipe's write end is non-blocking.
func (c *ringConn) fillPipe() error {
	for c.planIndex < len(c.plan) {
		seg := &c.plan[c.planIndex]
		var n, size int
		var err error
		if seg.file.File == nil {
			size = len(seg.data)
			n, err = unix.Write(c.pipeW, seg.data[c.segmentOff:])
		} else {
			size = int(seg.file.Length)
			want := int(min(seg.file.Length-c.segmentOff, int64(c.pipeCap)))
			off := seg.file.Offset + c.segmentOff
			fd := int(seg.file.File.Fd())
			if !pageCached(fd, off, want) {
				return nil
			}
			var moved int64
			moved, err = unix.Splice(fd, &off, c.pipeW, nil, want, unix.SPLICE_F_MOVE|unix.SPLICE_F_NONBLOCK)
			n = int(max(moved, 0))
			if err == nil && n == 0 {
				return ErrShortFile
			}
			if n > 0 {
				c.srv.stats.sendfileBytes.Add(int64(n))
			}
		}
		switch {
		case err == unix.EAGAIN:
			return nil // the pipe is full
		case err == unix.EINTR:
			continue
		case err != nil:
			return fmt.Errorf("fill splice pipe: %w", err)
		}
		c.pipeBytes += n
		c.segmentOff += int64(n)
		if c.segmentOff == int64(size) {
			c.planIndex++
			c.segmentOff = 0
		}
	}
	return nil
}

// pageCached reports whether bytes [off, off+n) of fd are all in the page cache
// (cachestat(2), Linux 6.5+; false where it is missing, so the ring splices instead).
func pageCached(fd int, off int64, n int) bool {
	if noCachestat.Load() {
		return false
	}
	const page = 4096
	first, end := off/page, (off+int64(n)+page-1)/page
	r := unix.CachestatRange{Off: uint64(first * page), Len: uint64((end - first) * page)}
	var st unix.Cachestat_t
	if err := unix.Cachestat(uint(fd), &r, &st, 0); err != nil {
		if err == unix.ENOSYS {
			noCachestat.Store(true)
		}
		return false
	}
	return st.Cache >= uint64(end-first)
}

var noCachestat atomic.Bool

// onPipeDrained is the completion of a pipe -> socket splice of the filled pipe.
func (c *ringConn) onPipeDrained(res int32, _ uint32) {
	c.ops--
	c.spliceOps--
	switch {
	case c.dead:
		c.maybeFinish()
		return
	case res < 0:
		c.failLoop(fmt.Errorf("splice pipe to socket: %w", unix.Errno(-res)))
		return
	}
	c.pipeBytes -= int(res)
	c.sendNext()
}

// pipeBytesWanted is the pipe size asked for per connection: one splice moves at most this.
const pipeBytesWanted = 1 << 20

func (c *ringConn) openPipe() error {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return fmt.Errorf("pipe for splice: %w", err)
	}
	c.pipeR, c.pipeW = p[0], p[1]
	// The loop fills the pipe itself (fillPipe): a full pipe must refuse, not wait. The
	// read end, drained by ring SPLICE ops, is a description of its own and stays blocking.
	if _, err := unix.FcntlInt(uintptr(c.pipeW), unix.F_SETFL, unix.O_NONBLOCK); err != nil {
		unix.Close(c.pipeR)
		unix.Close(c.pipeW)
		return fmt.Errorf("pipe for splice: non-blocking: %w", err)
	}
	unix.FcntlInt(uintptr(c.pipeW), unix.F_SETPIPE_SZ, pipeBytesWanted) // best effort
	size, err := unix.FcntlInt(uintptr(c.pipeW), unix.F_GETPIPE_SZ, 0)
	if err != nil || size <= 0 {
		size = 64 << 10
	}
	c.pipeCap = size
	return nil
}

// finishBatch releases the requests of the batch just written.
func (c *ringConn) finishBatch() {
	fatal := false
	for i, req := range c.batch {
		fatal = fatal || req.fatal
		c.releaseLoop(req)
		c.batch[i] = nil
	}
	c.batch = c.batch[:0]
	clear(c.splices)
	clear(c.plan)
	c.plan = c.plan[:0]
	if fatal {
		c.failLoop(errors.New("closed after a fatal frame error"))
	}
}

// releaseLoop returns what a request holds (loop thread).
func (c *ringConn) releaseLoop(req *Request) {
	c.inflight--
	c.releaseGone(req)
}

// releaseGone returns a request's buffer, server budget and Done callback, then the
// request itself to the pool: it is the last use of a request (any goroutine).
func (c *ringConn) releaseGone(req *Request) {
	if req.frame != nil {
		putFrameBuffer(req.frame)
		req.frame = nil
	}
	if n := req.charged + req.respCharged; n > 0 {
		c.budgets.release(n)
		req.charged, req.respCharged = 0, 0
	}
	if done := req.response.Done; done != nil {
		req.response.Done = nil
		done()
	}
	recycleRequest(req)
}

// stopReading and fail implement serverConn; they may be called from any goroutine.
func (c *ringConn) stopReading() {
	c.postOrFinish(func() {
		c.stopping = true
		unix.Shutdown(c.fd, unix.SHUT_RD) // completes a pending recv with 0
		c.progress()
	})
}

func (c *ringConn) fail(err error) { c.postOrFinish(func() { c.failLoop(err) }) }

func (c *ringConn) postOrFinish(fn func()) {
	if err := c.r.Post(fn); err != nil {
		if errors.Is(err, ring.ErrClosed) {
			// The loop is gone, so nothing else touches this connection.
			c.dead = true
			c.ops = 0
			c.maybeFinish()
			return
		}
		c.post(fn)
	}
}

func (c *ringConn) failLoop(err error) {
	if c.dead || c.finished {
		return
	}
	if !c.readerDone || c.sending {
		c.srv.cfg.Logf("netio: conn %d to %s: %v", c.info.ID, c.info.RemoteAddr, err)
	}
	c.dead = true
	unix.Shutdown(c.fd, unix.SHUT_RDWR) // completes pending recv and send ops
	for _, t := range []**ring.Timer{&c.writeClock.pending, &c.frameClock.pending, &c.retryTimer, &c.idleTimer} {
		if *t != nil {
			(*t).Stop()
			*t = nil
		}
	}
	c.maybeFinish()
}

// maybeFinish closes the connection once it is dead with no ops in flight, or once the
// reader is done and every request has been answered.
func (c *ringConn) maybeFinish() {
	if c.finished {
		return
	}
	idle := !c.dead && c.readerDone && len(c.queue) == 0 && !c.sending && c.cur == nil
	if !(c.dead && c.ops == 0) && !idle {
		return
	}
	c.finished = true
	if c.idleTimer != nil {
		c.idleTimer.Stop()
		c.idleTimer = nil
	}
	unix.Close(c.fd)
	if c.pipeCap > 0 {
		unix.Close(c.pipeR)
		unix.Close(c.pipeW)
	}
	c.dropCurrent()
	if c.sending {
		c.finishBatchQuiet()
	}
	// Which queued requests are answered is read under the lock: once gone is set, a
	// reply on another goroutine releases (and recycles) its request itself (complete),
	// so the loop must not look at an unanswered request after unlocking.
	c.mu.Lock()
	c.gone = true
	replied := c.completed
	c.completed = nil
	for _, req := range replied {
		req.ready = true
	}
	answered := replied[:0]
	for _, req := range c.queue {
		if req.ready {
			answered = append(answered, req)
		}
	}
	c.mu.Unlock()
	for _, req := range answered {
		c.releaseGone(req)
	}
	c.queue = nil
	c.srv.connDone(c, c.info, c.addr)
}

func (c *ringConn) finishBatchQuiet() {
	for _, req := range c.batch {
		c.releaseGone(req)
	}
	c.batch = nil
	c.sending = false
}
