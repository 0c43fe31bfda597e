package client

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/ringlog/ringlog/netio/wire"
)

// ErrConnClosed is returned for requests on a connection that failed or was closed.
var ErrConnClosed = errors.New("ringlog client: connection closed")

// call is one request waiting for its response. done runs on the connection's reader
// goroutine (or on the failing goroutine) exactly once.
type call struct {
	correlationID uint32
	api           wire.APIKey
	resp          wire.Message
	done          func(resp wire.Message, err error)
	// owned, when set instead of done, also receives the frame buffer the response aliases;
	// the callee calls release once it no longer needs the response's byte fields.
	owned func(resp wire.Message, err error, release func())
}

func (cl *call) finish(resp wire.Message, err error) {
	if cl.owned != nil {
		cl.owned(resp, err, func() {})
		return
	}
	cl.done(resp, err)
}

// conn is one pipelined connection to a broker address. Requests are written in the order
// send is called and their responses are matched by position and checked by correlation
// id. At most inflightMax requests are outstanding; send blocks beyond that.
//
// Who reads responses: on a plain TCP connection nobody while no response is outstanding;
// a send that finds no reader starts one, either a goroutine (readLoop) or, for sendHeld,
// the calling goroutine itself, which reads until its own answer has arrived (readHeld) and
// so skips the goroutine wake-up between a reader and a waiting caller. An idle connection
// a broker closed is noticed by a non-blocking peek when the client next picks it
// (usable), as an idle reader would have noticed it, and a new one is dialed. A TLS connection keeps one reader
// goroutine for its whole life. A plain TCP connection's reads, writes and peeks are raw
// system calls on its non-blocking socket (rawSocket), which spare each round trip a
// wake-up of the runtime's sysmon thread.
type conn struct {
	addr string
	nc   net.Conn
	raw  syscall.RawConn // nil for TLS: a persistent reader goroutine instead
	// sock reads and writes a plain TCP connection without telling the scheduler about
	// each non-blocking call (rawSocket); nil for TLS. w is what frames are written to:
	// sock, or nc for TLS.
	sock          *rawSocket
	w             io.Writer
	frameBytesMax uint32
	pending       chan *call // outstanding calls in send order; capacity = in-flight limit

	wmu  sync.Mutex // serialises frame writes with their enqueue into pending
	corr uint32     // guarded by wmu
	wbuf []byte     // guarded by wmu
	// peekIdle's state, guarded by wmu: its callback, bound once, and what it read.
	peekFn  func(fd uintptr) bool
	peekBuf [1]byte
	peekN   int
	peekErr error
	closed  chan struct{}

	rmu         sync.Mutex
	outstanding int   // guarded by rmu: calls enqueued whose response is not dispatched yet
	reading     bool  // guarded by rmu: a goroutine holds the reader role
	heldBy      *call // guarded by rmu: the call whose caller reads inline (readHeld), or nil
	interrupted bool  // guarded by rmu: the inline reader's context set a past read deadline
	// heldDone is the inline reader's context's Done channel (nil: none, or not cancellable);
	// watch is the one context registration the connection keeps (watchLocked). Both guarded
	// by rmu.
	heldDone <-chan struct{}
	watch    ctxWatch
	fr       frameReader // owned by the reader role
	// pollReadable's state, owned by the reader role: its callback, bound once, the end of
	// the current poll and the counts it adds to (the producer's, or nil).
	pollFn    func(fd uintptr) bool
	pollUntil time.Time
	pollBuf   [1]byte
	pollStats *pollCounts

	emu sync.Mutex
	err error // guarded by emu: first failure
}

// dialConn connects to addr, over TLS when cfg.TLS is set (the handshake completes within
// DialTimeout).
func dialConn(addr string, cfg *Config) (*conn, error) {
	var nc net.Conn
	var err error
	if cfg.TLS != nil {
		d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: cfg.DialTimeout}, Config: cfg.TLS}
		ctx, cancel := context.WithTimeout(context.Background(), cfg.DialTimeout)
		nc, err = d.DialContext(ctx, "tcp", addr)
		cancel()
	} else {
		nc, err = net.DialTimeout("tcp", addr, cfg.DialTimeout)
	}
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	c := &conn{
		addr:          addr,
		nc:            nc,
		frameBytesMax: cfg.FrameBytesMax,
		pending:       make(chan *call, cfg.InflightPerConnMax),
		closed:        make(chan struct{}),
		w:             nc,
	}
	var from io.Reader = nc
	if sc, ok := nc.(syscall.Conn); ok && cfg.TLS == nil {
		c.raw, _ = sc.SyscallConn()
	}
	if c.raw != nil && rawSocketOn {
		c.sock = newRawSocket(c.raw)
		from, c.w = c.sock, c.sock
	}
	c.fr = frameReader{r: bufio.NewReaderSize(from, 64<<10), frameBytesMax: cfg.FrameBytesMax}
	if c.raw == nil {
		c.reading = true // for good
		go c.readLoop()
	}
	return c, nil
}

// sendHeld is send for a caller that waits for the response: when it returns true the
// caller holds the connection's reader role and must call readHeld with cl. cl is the
// caller's (the producer embeds it in a pooled request): once cl.done has run the
// connection does not touch it again, but for readHeld's pointer comparison. (The
// connection's context registration may run late, after readHeld returned; should a new
// held read with the same, now ended, context be under way by then, that read is
// interrupted and handed to a reader goroutine: its answer still arrives, only the inline
// read is lost.)
func (c *conn) sendHeld(req wire.Message, cl *call) bool {
	return c.sendCall(req, cl, true)
}

// send writes req and arranges for done to be called with the decoded response. A nil
// resp means the request gets no response (acks=0 produce): done is called once the
// frame is written.
func (c *conn) send(req wire.Message, resp wire.Message, done func(wire.Message, error)) {
	c.sendCall(req, &call{resp: resp, done: done}, false)
}

// sendOwned is send for responses whose frame buffer the caller takes over (fetch).
func (c *conn) sendOwned(req wire.Message, resp wire.Message, owned func(wire.Message, error, func())) {
	c.sendCall(req, &call{resp: resp, owned: owned}, false)
}

// sendCall writes cl's request. It reports whether the caller took the reader role (held
// and no one was reading); otherwise a reader is running or cl needs none.
func (c *conn) sendCall(req wire.Message, cl *call, held bool) (holds bool) {
	resp := cl.resp
	done := cl.finish
	c.wmu.Lock()
	if err := c.failure(); err != nil {
		c.wmu.Unlock()
		done(nil, err)
		return false
	}
	start := false
	if resp != nil {
		c.rmu.Lock()
		c.outstanding++ // before a reader can see the call: it reads while any is outstanding
		if start = !c.reading; start {
			c.reading = true
			if held {
				c.heldBy = cl
			}
		}
		c.rmu.Unlock()
	}
	c.corr++
	cl.correlationID, cl.api = c.corr, req.API()
	c.wbuf = wire.AppendRequest(c.wbuf[:0], cl.correlationID, req)
	if resp != nil {
		select {
		case c.pending <- cl:
		case <-c.closed:
			c.wmu.Unlock()
			done(nil, c.failure())
			return false
		}
	}
	_, err := c.w.Write(c.wbuf) // one frame, one write: pipelining needs no extra buffering
	if cap(c.wbuf) > 8<<20 {
		c.wbuf = nil
	}
	c.wmu.Unlock()
	if start && !held {
		go c.readLoop()
	}
	if err != nil {
		c.fail(fmt.Errorf("write to %s: %w", c.addr, err))
		if resp == nil {
			done(nil, c.failure())
		}
		return start && held
	}
	if resp == nil {
		done(nil, nil)
	}
	return start && held
}

// usable reports whether the connection can take a request: it has not failed and, when
// nobody reads it, the broker has not closed it meanwhile (peekIdle; a closed one is failed
// here, so that the client dials a new one, as an idle reader goroutine would have noticed
// the close before).
func (c *conn) usable() bool {
	if c.failure() != nil {
		return false
	}
	if c.raw == nil {
		return true
	}
	c.wmu.Lock() // no request goes out meanwhile: no response can be on its way
	c.rmu.Lock()
	idle := !c.reading
	c.rmu.Unlock()
	var err error
	if idle {
		err = c.peekIdle()
	}
	c.wmu.Unlock()
	if err != nil {
		c.fail(err)
		return false
	}
	return true
}

// peekIdle checks, without blocking, that the broker has not closed an idle connection
// (nor sent anything unasked) before a request is written to it: one recv(MSG_PEEK |
// MSG_DONTWAIT), paid only when no response is outstanding.
func (c *conn) peekIdle() error {
	if c.raw == nil {
		return nil
	}
	if c.peekFn == nil {
		c.peekFn = c.peek // bound once: a request on an idle connection allocates nothing here
	}
	err := c.raw.Read(c.peekFn)
	n, peekErr := c.peekN, c.peekErr
	c.peekErr = nil
	switch {
	case err != nil:
		return fmt.Errorf("read from %s: %w", c.addr, err)
	case peekErr == syscall.EAGAIN || peekErr == syscall.EINTR:
		return nil
	case peekErr != nil:
		return fmt.Errorf("read from %s: %w", c.addr, peekErr)
	case n == 0:
		return fmt.Errorf("read from %s: %w", c.addr, io.EOF)
	default:
		return fmt.Errorf("%s sent data while no request was outstanding", c.addr)
	}
}

// peek is peekIdle's non-blocking recv(MSG_PEEK), run by c.raw.Read (wmu held).
func (c *conn) peek(fd uintptr) bool {
	n, errno := rawPeek(fd, c.peekBuf[:])
	c.peekN, c.peekErr = n, nil
	if errno != 0 {
		c.peekErr = errno
	}
	return true // never wait for readability
}

// readHeld reads responses on the calling goroutine, which holds the reader role
// (sendHeld returned true), until until reports true, the connection fails or ctx ends;
// then it passes the role on (to a reader goroutine while responses are outstanding).
// With poll > 0 it first polls the socket for up to poll before its first read may park
// in the netpoller (pollReadable); stats, when not nil, counts what the poll did.
func (c *conn) readHeld(ctx context.Context, cl *call, until func() bool, poll time.Duration, stats *pollCounts) {
	if done := ctx.Done(); done != nil {
		c.rmu.Lock()
		if c.heldBy == cl { // still this caller's turn
			c.watchLocked(ctx, done)
			c.heldDone = done
			if ctx.Err() != nil { // ended before the watch could see this reader
				c.interruptLocked()
			}
		}
		c.rmu.Unlock()
	}
	if poll > 0 && c.raw != nil && c.fr.r.Buffered() == 0 {
		c.pollReadable(poll, stats)
	}
	c.readResponses(until)
}

// pollReadable spins on non-blocking recv(MSG_PEEK) calls until the socket has a byte to
// read, fails, or d has passed (bounded by ReadPollMax), so that the read that follows
// finds the answer without parking the goroutine: a parked reader's thread sleeps, and on
// a virtual machine whose idle vCPU halts, waking it costs tens of µs. It burns the
// calling thread's CPU for at most d per call. A read deadline set meanwhile (the
// caller's context ended) is noticed by the read that follows, at most d later.
func (c *conn) pollReadable(d time.Duration, stats *pollCounts) {
	if c.pollFn == nil {
		c.pollFn = c.pollOnce // bound once: a polled read allocates nothing here
	}
	c.pollUntil = time.Now().Add(min(d, ReadPollMax))
	c.pollStats = stats
	c.raw.Read(c.pollFn) // an error (closed, deadline) is the next read's to report
	c.pollStats = nil
}

// pollOnce is pollReadable's loop, run by c.raw.Read; it never asks to wait for
// readability (it returns true), leaving the wait, if any, to the read that follows.
func (c *conn) pollOnce(fd uintptr) bool {
	for spins := uint64(1); ; spins++ {
		_, errno := rawPeek(fd, c.pollBuf[:])
		hit := errno != syscall.EAGAIN && errno != syscall.EINTR // a byte, the end of the stream or an error
		if !hit && time.Now().Before(c.pollUntil) {
			continue
		}
		if st := c.pollStats; st != nil {
			if hit {
				st.hits.Add(1)
			} else {
				st.misses.Add(1)
			}
			st.spins.Add(spins)
		}
		return true
	}
}

var aLongTimeAgo = time.Unix(1, 0)

// ctxWatch is a connection's registration with an inline reader's context: its function
// (context.AfterFunc) interrupts the inline read of whichever caller reads with that
// context (same Done channel) when it ends. It outlives the readHeld that made it, so a
// caller who sends again and again with one context pays the registration once (three
// allocations) rather than per call; a reader with another context replaces it, and the
// connection's failure or close removes it.
type ctxWatch struct {
	done <-chan struct{}
	stop func() bool // nil: no registration
}

// watchLocked makes sure the connection watches ctx, whose Done channel is done (rmu held).
func (c *conn) watchLocked(ctx context.Context, done <-chan struct{}) {
	if c.watch.stop != nil && c.watch.done == done {
		return
	}
	c.unwatchLocked()
	c.watch = ctxWatch{done: done, stop: context.AfterFunc(ctx, func() {
		c.rmu.Lock()
		if c.heldBy != nil && c.heldDone == done { // the function may run late, or for a past reader
			c.interruptLocked()
		}
		c.rmu.Unlock()
	})}
}

// unwatchLocked removes the connection's context registration, if any (rmu held). Its
// function, should it be running, finds the reader's Done channel changed or gone.
func (c *conn) unwatchLocked() {
	if c.watch.stop != nil {
		c.watch.stop()
	}
	c.watch = ctxWatch{}
}

// interruptLocked ends the inline reader's current and next reads (rmu held): the reader
// hands the role over (readResponses).
func (c *conn) interruptLocked() {
	c.interrupted = true
	c.nc.SetReadDeadline(aLongTimeAgo)
}

func (c *conn) readLoop() { c.readResponses(nil) }

// readResponses reads and dispatches responses while the calling goroutine holds the
// reader role. It returns once no response is outstanding (giving the role up), or the
// connection failed, or (inline) until is satisfied or the caller's context interrupted
// the read (passing the role to a new reader goroutine when responses are outstanding).
func (c *conn) readResponses(until func() bool) {
	for {
		if until != nil && until() {
			c.handOff()
			return
		}
		h, payload, err := c.fr.next()
		if err != nil {
			c.rmu.Lock()
			interrupted := c.interrupted && errors.Is(err, os.ErrDeadlineExceeded)
			c.rmu.Unlock()
			if interrupted {
				c.handOff()
				return
			}
			c.fail(fmt.Errorf("read from %s: %w", c.addr, err))
			return
		}
		if !c.dispatch(h, payload) {
			return
		}
		c.rmu.Lock()
		c.outstanding--
		if c.outstanding == 0 && c.raw != nil {
			c.releaseLocked()
			c.rmu.Unlock()
			return
		}
		c.rmu.Unlock()
	}
}

// handOff ends an inline reader's turn: with responses outstanding a reader goroutine
// takes the role over, otherwise nobody holds it.
func (c *conn) handOff() {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	if c.outstanding > 0 {
		c.clearInlineLocked()
		go c.readLoop()
		return
	}
	c.releaseLocked()
}

// releaseLocked gives the reader role up: nobody reads until the next request.
func (c *conn) releaseLocked() {
	c.clearInlineLocked()
	c.reading = false
}

// clearInlineLocked ends an inline reader's turn, undoing its context's interruption.
func (c *conn) clearInlineLocked() {
	if c.interrupted {
		c.interrupted = false
		c.nc.SetReadDeadline(time.Time{})
	}
	c.heldBy, c.heldDone = nil, nil
}

// dispatch hands one response to the call waiting for it; false: the connection failed.
func (c *conn) dispatch(h wire.ResponseHeader, payload []byte) bool {
	var cl *call
	select {
	case cl = <-c.pending:
	default:
		c.fail(fmt.Errorf("%s sent a response (correlation id %d) nobody waits for", c.addr, h.CorrelationID))
		return false
	}
	if h.CorrelationID != cl.correlationID || h.API != cl.api {
		err := fmt.Errorf("%s answered %s/%d, expected %s/%d", c.addr, h.API, h.CorrelationID, cl.api, cl.correlationID)
		cl.finish(nil, err)
		c.fail(err)
		return false
	}
	if h.ErrorCode != wire.ErrNone {
		msg, _ := wire.DecodeErrorPayload(payload)
		cl.finish(nil, &wire.Error{Code: h.ErrorCode, Message: msg})
		return true
	}
	wire.SetWireVersion(cl.resp, h.Version)
	if err := cl.resp.ReadFrom(payload); err != nil {
		cl.finish(nil, fmt.Errorf("%s response from %s: %w", cl.api, c.addr, err))
		return true
	}
	if fetch, ok := cl.resp.(*wire.FetchResponse); ok {
		c.fr.check.apply(fetch, payload)
	}
	switch {
	case cl.owned != nil:
		// The response aliases the frame buffer: hand it over and read on into a pooled one.
		owned := c.fr.buf
		c.fr.buf = getResponseBuffer()
		cl.owned(cl.resp, nil, func() { putResponseBuffer(owned) })
	case cl.api == wire.APIFetch || aliasesPayload(cl.api):
		// The response's byte fields alias the frame buffer, and the next frame is read
		// into it as soon as this returns (another goroutine's call may be next on the
		// connection): leave the buffer to the response and read on into a new one.
		c.fr.buf = nil
		cl.done(cl.resp, nil)
	default:
		cl.done(cl.resp, nil)
	}
	return true
}

// aliasesPayload reports whether a decoded response of api keeps byte fields that alias
// its frame (wire's reader.bytes), other than Fetch: the group APIs' member metadata and
// assignments, the SASL exchange, the controller's bodies, replica fetches. Until session
// 11 they were left aliasing the connection's frame buffer, so a group consumer's
// heartbeat answered on the same connection could overwrite the subscriptions its leader
// was about to decode ("malformed consumer protocol data", seen in
// netio.TestGroupFetchQuota). These APIs are rare; a fresh buffer each costs nothing
// measurable.
func aliasesPayload(api wire.APIKey) bool {
	switch api {
	case wire.APIJoinGroup, wire.APISyncGroup, wire.APIDescribeGroups, wire.APISaslAuthenticate,
		wire.APIReplicaFetch, wire.APIController:
		return true
	}
	return false
}

// frameReader reads response frames and can stop between any two reads (an interrupted
// read deadline) and resume where it stopped, so the reader role can change hands in the
// middle of a frame.
type frameReader struct {
	r             *bufio.Reader
	frameBytesMax uint32
	head          [wire.ResponseHeaderBytes]byte
	headHave      int // bytes of head read
	h             wire.ResponseHeader
	buf           []byte // the payload being read (grown as needed, reused)
	have          int    // bytes of buf read; meaningful once head is complete
	check         fetchChecker
}

func (f *frameReader) next() (wire.ResponseHeader, []byte, error) {
	for f.headHave < len(f.head) {
		n, err := f.r.Read(f.head[f.headHave:])
		f.headHave += n
		if err != nil && f.headHave < len(f.head) {
			if f.headHave > 0 {
				err = wire.NoEOF(err)
			}
			return wire.ResponseHeader{}, nil, err
		}
		if f.headHave == len(f.head) {
			h, err := wire.ParseResponseHeader(f.head[:], f.frameBytesMax)
			if err != nil {
				return h, nil, err
			}
			n := int(h.Length) - (wire.ResponseHeaderBytes - wire.FrameLengthBytes)
			if cap(f.buf) < n {
				f.buf = make([]byte, n)
			}
			f.h, f.buf, f.have = h, f.buf[:n], 0
			f.check.reset(h.API == wire.APIFetch && h.ErrorCode == wire.ErrNone)
		}
	}
	for f.have < len(f.buf) {
		n, err := f.r.Read(f.buf[f.have:])
		f.have += n
		if f.check.on && n > 0 {
			f.check.advance(f.buf[:f.have]) // CRC-32C of the batches while in cache
		}
		if err != nil && f.have < len(f.buf) {
			return f.h, nil, fmt.Errorf("read %d-byte %s response payload: %w", len(f.buf), f.h.API, wire.NoEOF(err))
		}
	}
	f.headHave = 0
	return f.h, f.buf, nil
}

func (c *conn) failure() error {
	c.emu.Lock()
	defer c.emu.Unlock()
	return c.err
}

// fail records the first error, closes the socket and fails every outstanding call.
func (c *conn) fail(err error) {
	c.emu.Lock()
	if c.err != nil {
		c.emu.Unlock()
		return
	}
	c.err = fmt.Errorf("%w: %v", ErrConnClosed, err)
	close(c.closed)
	c.emu.Unlock()
	c.nc.Close()
	c.rmu.Lock()
	c.unwatchLocked() // the user's context no longer holds the connection
	c.rmu.Unlock()
	// A sender holding wmu either saw the error or is about to leave through c.closed;
	// once we hold wmu no new call can be enqueued.
	c.wmu.Lock()
	var orphans []*call
	for drained := false; !drained; {
		select {
		case cl := <-c.pending:
			orphans = append(orphans, cl)
		default:
			drained = true
		}
	}
	c.wmu.Unlock()
	for _, cl := range orphans {
		cl.finish(nil, c.err)
	}
}

func (c *conn) close() { c.fail(errors.New("closed by client")) }

// Fetch response buffers, recycled by consumers once they have copied the records out.
var responseBuffers sync.Pool

// responseBufferBytesMax: larger buffers are left to the GC instead of being pooled.
const responseBufferBytesMax = 64 << 20

func getResponseBuffer() []byte {
	if v := responseBuffers.Get(); v != nil {
		return *(v.(*[]byte))
	}
	return nil
}

func putResponseBuffer(b []byte) {
	if cap(b) == 0 || cap(b) > responseBufferBytesMax {
		return
	}
	b = b[:0]
	responseBuffers.Put(&b)
}
