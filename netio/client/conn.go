package client

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"

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
type conn struct {
	addr          string
	nc            net.Conn
	frameBytesMax uint32
	pending       chan *call // outstanding calls in send order; capacity = in-flight limit

	wmu    sync.Mutex // serialises frame writes with their enqueue into pending
	corr   uint32     // guarded by wmu
	wbuf   []byte     // guarded by wmu
	closed chan struct{}

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
	}
	go c.readLoop()
	return c, nil
}

// send writes req and arranges for done to be called with the decoded response. A nil
// resp means the request gets no response (acks=0 produce): done is called once the
// frame is written.
func (c *conn) send(req wire.Message, resp wire.Message, done func(wire.Message, error)) {
	c.sendCall(req, &call{resp: resp, done: done})
}

// sendOwned is send for responses whose frame buffer the caller takes over (fetch).
func (c *conn) sendOwned(req wire.Message, resp wire.Message, owned func(wire.Message, error, func())) {
	c.sendCall(req, &call{resp: resp, owned: owned})
}

func (c *conn) sendCall(req wire.Message, cl *call) {
	resp := cl.resp
	done := cl.finish
	c.wmu.Lock()
	if err := c.failure(); err != nil {
		c.wmu.Unlock()
		done(nil, err)
		return
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
			return
		}
	}
	_, err := c.nc.Write(c.wbuf) // one frame, one write: pipelining needs no extra buffering
	if cap(c.wbuf) > 8<<20 {
		c.wbuf = nil
	}
	c.wmu.Unlock()
	if err != nil {
		c.fail(fmt.Errorf("write to %s: %w", c.addr, err))
		if resp == nil {
			done(nil, c.failure())
		}
		return
	}
	if resp == nil {
		done(nil, nil)
	}
}

func (c *conn) readLoop() {
	r := bufio.NewReaderSize(c.nc, 64<<10)
	var buf []byte
	for {
		h, payload, b, err := wire.ReadResponse(r, buf, c.frameBytesMax)
		buf = b
		if err != nil {
			c.fail(fmt.Errorf("read from %s: %w", c.addr, err))
			return
		}
		var cl *call
		select {
		case cl = <-c.pending:
		default:
			c.fail(fmt.Errorf("%s sent a response (correlation id %d) nobody waits for", c.addr, h.CorrelationID))
			return
		}
		if h.CorrelationID != cl.correlationID || h.API != cl.api {
			err := fmt.Errorf("%s answered %s/%d, expected %s/%d", c.addr, h.API, h.CorrelationID, cl.api, cl.correlationID)
			cl.finish(nil, err)
			c.fail(err)
			return
		}
		if h.ErrorCode != wire.ErrNone {
			msg, _ := wire.DecodeErrorPayload(payload)
			cl.finish(nil, &wire.Error{Code: h.ErrorCode, Message: msg})
			continue
		}
		wire.SetWireVersion(cl.resp, h.Version)
		if err := cl.resp.ReadFrom(payload); err != nil {
			cl.finish(nil, fmt.Errorf("%s response from %s: %w", cl.api, c.addr, err))
			continue
		}
		switch {
		case cl.owned != nil:
			// The response aliases buf: hand it over and read on into a pooled buffer.
			owned := buf
			buf = getResponseBuffer()
			cl.owned(cl.resp, nil, func() { putResponseBuffer(owned) })
		case cl.api == wire.APIFetch:
			buf = nil // aliased by the records the caller keeps
			cl.done(cl.resp, nil)
		default:
			cl.done(cl.resp, nil)
		}
	}
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
