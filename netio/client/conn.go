package client

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/ringlog/ringlog/netio"
)

// ErrConnClosed is returned for requests on a connection that failed or was closed.
var ErrConnClosed = errors.New("ringlog client: connection closed")

// call is one request waiting for its response. done runs on the connection's reader
// goroutine (or on the failing goroutine) exactly once.
type call struct {
	correlationID uint32
	api           netio.APIKey
	resp          netio.Message
	done          func(resp netio.Message, err error)
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

func dialConn(addr string, timeout time.Duration, inflightMax int, frameBytesMax uint32) (*conn, error) {
	nc, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	c := &conn{
		addr:          addr,
		nc:            nc,
		frameBytesMax: frameBytesMax,
		pending:       make(chan *call, inflightMax),
		closed:        make(chan struct{}),
	}
	go c.readLoop()
	return c, nil
}

// send writes req and arranges for done to be called with the decoded response. A nil
// resp means the request gets no response (acks=0 produce): done is called once the
// frame is written.
func (c *conn) send(req netio.Message, resp netio.Message, done func(netio.Message, error)) {
	c.wmu.Lock()
	if err := c.failure(); err != nil {
		c.wmu.Unlock()
		done(nil, err)
		return
	}
	c.corr++
	cl := &call{correlationID: c.corr, api: req.API(), resp: resp, done: done}
	c.wbuf = netio.AppendRequest(c.wbuf[:0], cl.correlationID, req)
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
		h, payload, b, err := netio.ReadResponse(r, buf, c.frameBytesMax)
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
			cl.done(nil, err)
			c.fail(err)
			return
		}
		if h.ErrorCode != netio.ErrNone {
			msg, _ := netio.DecodeErrorPayload(payload)
			cl.done(nil, &netio.Error{Code: h.ErrorCode, Message: msg})
			continue
		}
		if err := cl.resp.ReadFrom(payload); err != nil {
			cl.done(nil, fmt.Errorf("%s response from %s: %w", cl.api, c.addr, err))
			continue
		}
		// The decoded response aliases buf (fetch records): hand over this buffer and
		// read the next frame into a fresh one.
		if cl.api == netio.APIFetch {
			buf = nil
		}
		cl.done(cl.resp, nil)
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
		cl.done(nil, c.err)
	}
}

func (c *conn) close() { c.fail(errors.New("closed by client")) }
