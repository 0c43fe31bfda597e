package netio

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ringlog/ringlog/netio/security"
	"github.com/ringlog/ringlog/netio/wire"
)

// The net-package I/O driver: per connection, a reader goroutine (frames in, requests to
// the Handler) and a writer goroutine (responses out in request order, file ranges by
// sendfile). Everything a different driver (io_uring on the shard reactor) would have to
// reproduce is in dispatch, complete and release; only readLoop, writeLoop and the egress
// functions touch the socket.

// conn is one client connection.
type conn struct {
	srv      *Server
	nc       net.Conn
	info     ConnInfo
	addr     *address      // the client IP's shared limits
	budgets  budgets       // request and response bytes: connection, address, shard
	inflight chan struct{} // one token per request read and not yet released
	wake     chan struct{} // cap 1: the writer has something to look at
	stopRead chan struct{} // closed by stopReading
	stopOnce sync.Once
	stopped  atomic.Bool // stopRead closed or the connection failed
	// fatalSeen: a request was marked fatal (markFatal); the reader reads no further frame.
	fatalSeen atomic.Bool
	quit      chan struct{} // closed with stopped set: budget waits give up
	quitOnce  sync.Once

	mu         sync.Mutex
	queue      []*Request // guarded by mu: requests in arrival order, released by the writer
	readerDone bool       // guarded by mu
	dead       error      // guarded by mu: the socket failed; responses are dropped
	writerGone bool       // guarded by mu: late replies are released by complete

	// Owned by the writer goroutine.
	batch   []*Request
	wbuf    []byte
	splices []wire.Splice
	out     SpliceWriter
}

func newConn(s *Server, nc net.Conn, info ConnInfo, a *address) *conn {
	c := &conn{
		srv:      s,
		nc:       nc,
		info:     info,
		addr:     a,
		budgets:  s.connBudgets(a, info.Shard),
		inflight: make(chan struct{}, s.cfg.InflightPerConnMax),
		wake:     make(chan struct{}, 1),
		stopRead: make(chan struct{}),
		quit:     make(chan struct{}),
	}
	c.out = NewSpliceWriter(nc, s)
	return c
}

func (c *conn) start() {
	var exits sync.WaitGroup
	exits.Add(2)
	go func() {
		defer exits.Done()
		if c.handshake() {
			c.readLoop()
			return
		}
		c.mu.Lock()
		c.readerDone = true
		c.mu.Unlock()
		c.signal()
	}()
	go func() { defer exits.Done(); c.writeLoop() }()
	go func() {
		exits.Wait()
		c.nc.Close()
		c.srv.connDone(c, c.info, c.addr)
	}()
}

// handshake completes a TLS server handshake within FrameReadTimeout (a client that opens
// a connection and says nothing is dropped like one that sends half a frame). It reports
// false if the connection must close. A plain connection needs none.
func (c *conn) handshake() bool {
	tc, ok := c.nc.(*tls.Conn)
	if !ok {
		return true
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.srv.cfg.FrameReadTimeout)
	defer cancel()
	go func() {
		select {
		case <-c.quit:
			cancel()
		case <-ctx.Done():
		}
	}()
	if err := tc.HandshakeContext(ctx); err != nil {
		if !c.stopped.Load() {
			c.srv.cfg.Logf("netio: conn %d from %s: TLS handshake: %v", c.info.ID, c.info.RemoteAddr, err)
		}
		c.fail(err)
		return false
	}
	c.srv.stats.tlsHandshakes.Add(1)
	if p := security.TLSPrincipal(tc.ConnectionState()); p != "" {
		c.info.Session.setPrincipal(p)
	}
	return true
}

func (c *conn) signal() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// stopReading makes the reader exit after the frame it is reading; requests already read
// are still answered. Used by Shutdown.
func (c *conn) stopReading() {
	c.stopOnce.Do(func() {
		c.stopped.Store(true)
		close(c.stopRead)
		// Order matters: the reader clears its deadline and then checks stopRead.
		c.nc.SetReadDeadline(time.Now())
		c.quitOnce.Do(func() { close(c.quit) })
	})
}

// fail marks the connection broken and closes the socket, which ends both loops.
func (c *conn) fail(err error) {
	c.mu.Lock()
	first := c.dead == nil
	if first {
		c.dead = err
	}
	c.mu.Unlock()
	if !first {
		return
	}
	c.stopped.Store(true)
	c.nc.Close()
	c.quitOnce.Do(func() { close(c.quit) })
	c.signal()
}

// ---------------------------------------------------------------------------------------
// Reading

func (c *conn) readLoop() {
	defer func() {
		c.mu.Lock()
		c.readerDone = true
		c.mu.Unlock()
		c.signal()
	}()
	cfg := &c.srv.cfg
	br := bufio.NewReaderSize(c.nc, readBufferBytes)
	for {
		select {
		case c.inflight <- struct{}{}:
		case <-c.stopRead:
			return
		}
		req, err := c.readRequest(br, cfg)
		if err != nil {
			<-c.inflight
			if !errors.Is(err, io.EOF) && !errors.Is(err, errIdle) && !c.stopped.Load() {
				cfg.Logf("netio: conn %d from %s: %v", c.info.ID, c.info.RemoteAddr, err)
			}
			return
		}
		c.srv.stats.requests.Add(1)
		// Not req.fatal after dispatch: the writer may have released and recycled req by
		// then. A frame error is fatal before dispatch, the security gate's refusals during
		// it (markFatal).
		fatal := req.fatal
		c.dispatch(req)
		if fatal || c.fatalSeen.Load() {
			return
		}
	}
}

// readRequest reads one frame. It returns a request (possibly one that only carries a
// frame-level error) or an error that ends the connection.
func (c *conn) readRequest(br *bufio.Reader, cfg *Config) (*Request, error) {
	hdr, frameDeadline, err := c.peekHeader(br, cfg)
	if err != nil {
		if errors.Is(err, errIdle) {
			return nil, err
		}
		if len(hdr) == 0 && errors.Is(err, io.EOF) {
			return nil, io.EOF
		}
		return nil, fmt.Errorf("read frame header (%d of %d bytes): %w", len(hdr), wire.RequestHeaderBytes, err)
	}
	h, herr := wire.ParseRequestHeader(hdr, cfg.FrameBytesMax)
	br.Discard(wire.RequestHeaderBytes)
	req := getRequest(h, c.info, c)
	if herr != nil {
		req.refuseHeader(herr, cfg.FrameBytesMax)
		return req, nil
	}
	n := int(h.Length) - (wire.RequestHeaderBytes - wire.FrameLengthBytes)
	deadline := br.Buffered() < n
	if deadline {
		c.setReadDeadline(frameDeadline)
	}
	err = c.readPayload(br, req, n)
	if deadline {
		c.setReadDeadline(time.Time{})
	}
	if err != nil {
		c.uncharge(req)
		return nil, fmt.Errorf("read %d-byte %s payload: %w", n, h.API, wire.NoEOF(err))
	}
	return req, nil
}

// errIdle ends a connection that stayed silent for IdleTimeout with nothing outstanding.
var errIdle = errors.New("idle")

// peekHeader waits for the next frame header and returns the time by which the whole frame
// must have arrived: FrameReadTimeout after its first byte. While it waits for that first
// byte the read deadline is IdleTimeout; when it expires with requests still outstanding
// (the client is waiting for us, e.g. a long-poll) it waits again, otherwise the
// connection is idle.
func (c *conn) peekHeader(br *bufio.Reader, cfg *Config) ([]byte, time.Time, error) {
	for br.Buffered() == 0 {
		c.setReadDeadline(time.Now().Add(cfg.IdleTimeout))
		_, err := br.Peek(1)
		c.setReadDeadline(time.Time{})
		if err == nil {
			break
		}
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() || c.stopped.Load() {
			return nil, time.Time{}, err
		}
		c.mu.Lock()
		outstanding := len(c.queue) > 0
		c.mu.Unlock()
		if !outstanding {
			return nil, time.Time{}, errIdle
		}
	}
	frameDeadline := time.Now().Add(cfg.FrameReadTimeout)
	if br.Buffered() >= wire.RequestHeaderBytes {
		hdr, err := br.Peek(wire.RequestHeaderBytes)
		return hdr, frameDeadline, err
	}
	c.setReadDeadline(frameDeadline)
	hdr, err := br.Peek(wire.RequestHeaderBytes)
	c.setReadDeadline(time.Time{})
	return hdr, frameDeadline, err
}

// setReadDeadline sets the read deadline unless stopReading has taken over the deadline
// (it sets stopped before its own SetReadDeadline(now), so checking after ours is enough).
func (c *conn) setReadDeadline(t time.Time) {
	c.nc.SetReadDeadline(t)
	if c.stopped.Load() {
		c.nc.SetReadDeadline(time.Now())
	}
}

// readPayload reads n payload bytes into req.frame. Memory is charged and allocated as the
// bytes arrive, in chunks that double from frameChunkBytes, so a header that announces a
// huge frame costs nothing until the client actually sends the bytes.
func (c *conn) readPayload(br *bufio.Reader, req *Request, n int) error {
	for filled := 0; ; {
		chunk := nextFrameChunk(filled, n, br.Buffered())
		if !c.charge(int64(chunk)) {
			return ErrServerClosed
		}
		req.charged += int64(chunk)
		growFrame(req, filled+chunk)
		if _, err := io.ReadFull(br, (*req.frame)[filled:filled+chunk]); err != nil {
			return err
		}
		if filled += chunk; filled == n {
			return nil
		}
	}
}

func (c *conn) charge(n int64) bool {
	if c.stopped.Load() {
		return false
	}
	return c.budgets.acquire(n, c.quit)
}

func (c *conn) uncharge(req *Request) {
	if req.frame != nil {
		putFrameBuffer(req.frame)
		req.frame = nil
	}
	if n := req.charged + req.respCharged; n > 0 {
		c.budgets.release(n)
		req.charged, req.respCharged = 0, 0
	}
}

// dispatch queues req in arrival order and hands it on.
func (c *conn) dispatch(req *Request) {
	fatal := req.fatal // req is the writer's once queued
	c.mu.Lock()
	c.queue = append(c.queue, req)
	c.mu.Unlock()
	if fatal {
		c.signal()
		return
	}
	c.srv.serveRequest(req)
}

// serveRequest answers req here (frame-level errors, ApiVersions) or hands it to the
// handler. The request must already be queued on its connection.
func (s *Server) serveRequest(req *Request) {
	h := req.Header
	switch {
	case !h.API.Known():
		req.ReplyError(wire.ErrUnknownAPI, fmt.Sprintf("api key %d is not known to this broker", uint16(h.API)))
		return
	case h.Version > s.versionMax(h.API):
		req.ReplyError(wire.ErrUnsupportedVersion, fmt.Sprintf("%s version %d not supported (max %d)", h.API, h.Version, s.versionMax(h.API)))
		return
	}
	if n := countEntries(h.API, *req.frame, s.cfg.RequestEntriesMax); n > s.cfg.RequestEntriesMax {
		s.stats.refusedRequests.Add(1)
		req.ReplyError(wire.ErrInvalidRequest, fmt.Sprintf("%s request names more than %d entries (RequestEntriesMax)", h.API, s.cfg.RequestEntriesMax))
		return
	}
	body := req.bodyFor(h.API)
	wire.SetWireVersion(body, h.Version)
	if err := body.ReadFrom(*req.frame); err != nil {
		req.ReplyError(wire.ErrInvalidRequest, err.Error())
		return
	}
	if err := checkEntries(body); err != nil {
		s.stats.refusedRequests.Add(1)
		req.ReplyError(wire.ErrInvalidRequest, err.Error())
		return
	}
	req.Body = body
	if p, ok := body.(*wire.ProduceRequest); ok && p.Acks == wire.AcksNone {
		req.silent = true
	}
	if s.serveSecurity(req) {
		return
	}
	if h.API == wire.APIVersions {
		req.ReplyMessage(s.apiVersions())
		return
	}
	s.handler.Serve(req)
}

// encodeResponses appends the response frames of batch to buf (skipping acks=0 produce)
// with their spliced ranges.
func (s *Server) encodeResponses(buf []byte, splices []wire.Splice, batch []*Request) ([]byte, []wire.Splice) {
	for _, req := range batch {
		if req.silent {
			continue
		}
		r := &req.response
		switch {
		case r.ErrorCode != wire.ErrNone:
			buf = wire.AppendErrorResponse(buf, req.Header, r.ErrorCode, r.ErrorMessage)
		case r.Body == nil || r.Body.API() != req.Header.API:
			buf = wire.AppendErrorResponse(buf, req.Header, wire.ErrUnknown, "broker bug: handler replied without a matching response body")
		default:
			wire.SetWireVersion(r.Body, req.Header.Version) // answered in the request's version
			buf, splices = wire.AppendResponseSpliced(buf, req.Header, r.Body, splices)
		}
		s.stats.responses.Add(1)
	}
	return buf, splices
}

func (s *Server) apiVersions() *wire.APIVersionsResponse {
	resp := &wire.APIVersionsResponse{
		FrameBytesMax:      int32(min(s.cfg.FrameBytesMax, 1<<31-1)),
		InflightPerConnMax: int32(s.cfg.InflightPerConnMax),
		BrokerVersion:      s.cfg.BrokerVersion,
	}
	for _, k := range wire.KnownAPIs() {
		resp.APIs = append(resp.APIs, wire.APIVersionRange{API: k, VersionMin: 0, VersionMax: s.versionMax(k)})
	}
	return resp
}

// versionMax is the highest version of k this server serves: the codec's, or lower
// (Config.APIVersionsMax).
func (s *Server) versionMax(k wire.APIKey) uint16 {
	if v, ok := s.cfg.APIVersionsMax[k]; ok {
		return min(v, k.VersionMax())
	}
	return k.VersionMax()
}

func (c *conn) server() *Server { return c.srv }

// complete records a handler's reply and wakes the writer.
func (c *conn) complete(req *Request, resp Response) {
	req.respCharged = responseBytes(&resp)
	c.budgets.force(req.respCharged)
	c.mu.Lock()
	req.response = resp
	req.ready = true
	gone := c.writerGone
	if gone {
		c.removeLocked(req)
	}
	c.mu.Unlock()
	if gone {
		c.release(req)
		return
	}
	c.signal()
}

func (c *conn) removeLocked(req *Request) {
	for i, q := range c.queue {
		if q == req {
			c.queue = append(c.queue[:i], c.queue[i+1:]...)
			return
		}
	}
}

// release returns everything a request holds: its frame buffer, its budget charge, its
// in-flight token, and the response's Done callback.
func (c *conn) release(req *Request) {
	c.uncharge(req)
	<-c.inflight
	if done := req.response.Done; done != nil {
		req.response.Done = nil
		done()
	}
	recycleRequest(req)
}

func (c *conn) fatalRequest() { c.fatalSeen.Store(true) }

// ---------------------------------------------------------------------------------------
// Writing

// writeBatchRequestsMax bounds how many responses one writev gathers.
const writeBatchRequestsMax = 64

func (c *conn) writeLoop() {
	for {
		c.mu.Lock()
		n := 0
		for n < len(c.queue) && n < writeBatchRequestsMax && c.queue[n].ready {
			n++
		}
		if c.dead != nil && c.readerDone {
			// Drop whatever is ready; replies still to come are released by complete.
			c.writerGone = true
			n = 0
			var ready []*Request
			rest := c.queue[:0]
			for _, q := range c.queue {
				if q.ready {
					ready = append(ready, q)
				} else {
					rest = append(rest, q)
				}
			}
			c.queue = rest
			c.mu.Unlock()
			for _, q := range ready {
				c.release(q)
			}
			return
		}
		c.batch = append(c.batch[:0], c.queue[:n]...)
		c.queue = c.queue[:copy(c.queue, c.queue[n:])]
		finished := n == 0 && len(c.queue) == 0 && c.readerDone
		dead := c.dead != nil
		c.mu.Unlock()
		if finished {
			return
		}
		if n == 0 {
			select {
			case <-c.wake:
			case <-c.srv.killed:
				c.fail(ErrServerClosed)
			}
			continue
		}
		fatal := false
		if !dead {
			if err := c.writeBatch(c.batch); err != nil {
				c.srv.cfg.Logf("netio: conn %d to %s: write: %v", c.info.ID, c.info.RemoteAddr, err)
				c.fail(err)
			}
		}
		for i, req := range c.batch {
			fatal = fatal || req.fatal
			c.release(req)
			c.batch[i] = nil
		}
		if fatal {
			c.fail(errors.New("closed after a fatal frame error"))
		}
	}
}

func (c *conn) writeBatch(batch []*Request) error {
	buf, splices := c.srv.encodeResponses(c.wbuf[:0], c.splices[:0], batch)
	c.wbuf, c.splices = buf, splices
	defer func() {
		clear(c.splices) // drop file and memory references
		if cap(c.wbuf) > 4*c.srv.cfg.writeBatchBytesTarget {
			c.wbuf = nil
		}
	}()
	if len(buf) == 0 {
		return nil
	}
	c.nc.SetWriteDeadline(time.Now().Add(c.srv.cfg.WriteTimeout))
	return c.out.Emit(buf, splices)
}

// ---------------------------------------------------------------------------------------
// Frame buffers, pooled by power-of-two size class.

// nextFrameChunk is how many more bytes to charge and allocate for a payload of size total
// with filled bytes received and arrived more already waiting to be read: what has arrived,
// at least frameChunkMinBytes, and at least as much as filled, so that the buffer grows by
// doubling (at most one extra copy of the payload in total) however slowly bytes come.
func nextFrameChunk(filled, total, arrived int) int {
	return min(total-filled, max(filled, arrived, frameChunkMinBytes))
}

// growFrame makes req.frame size bytes long, keeping its contents.
func growFrame(req *Request, size int) {
	if req.frame == nil {
		req.frame = getFrameBuffer(size)
		return
	}
	old := req.frame
	if cap(*old) >= size {
		*old = (*old)[:size]
		return
	}
	req.frame = getFrameBuffer(size)
	copy(*req.frame, *old)
	putFrameBuffer(old)
}

const frameBufferClassMin = 9 // 512 bytes

var framePools [33]sync.Pool

func frameClass(n int) int {
	if n <= 1<<frameBufferClassMin {
		return frameBufferClassMin
	}
	return bits.Len(uint(n - 1))
}

func getFrameBuffer(n int) *[]byte {
	class := frameClass(n)
	if v := framePools[class].Get(); v != nil {
		b := v.(*[]byte)
		*b = (*b)[:n]
		return b
	}
	b := make([]byte, n, 1<<class)
	return &b
}

func putFrameBuffer(b *[]byte) {
	framePools[frameClass(cap(*b))].Put(b)
}
