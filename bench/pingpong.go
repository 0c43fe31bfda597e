package bench

import (
	"context"
	"fmt"
	"io"
	"net"
	"time"
)

// PingPongSizeMax bounds a ping-pong message: the probe is for single records, not bulk.
const PingPongSizeMax = 1 << 20

// PingPong is a raw TCP ping-pong over 127.0.0.1: one connection, a client that writes size
// bytes and waits for size bytes back, a server goroutine that echoes them. Each round trip
// is the floor under any request/response over loopback on this machine (two socket
// wake-ups, no protocol work): a one-record-at-a-time produce cannot be faster. A PingPong
// keeps its connection open between Run calls, so runs can be interleaved with another
// measurement in the same minute.
type PingPong struct {
	size     int
	listener net.Listener
	conn     net.Conn
	served   chan error
	out, in  []byte
}

// NewPingPong connects a ping-pong of size-byte messages.
func NewPingPong(size int) (*PingPong, error) {
	if size < 1 || size > PingPongSizeMax {
		return nil, fmt.Errorf("pingpong: size %d outside 1..%d", size, PingPongSizeMax)
	}
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("pingpong: %w", err)
	}
	p := &PingPong{size: size, listener: listener, served: make(chan error, 1),
		out: make([]byte, size), in: make([]byte, size)}
	go p.serve()
	conn, err := net.Dial("tcp", listener.Addr().String())
	if err != nil {
		listener.Close()
		return nil, fmt.Errorf("pingpong: %w", err)
	}
	p.conn = conn
	return p, nil
}

func (p *PingPong) serve() {
	conn, err := p.listener.Accept()
	if err != nil {
		p.served <- err
		return
	}
	defer conn.Close()
	buf := make([]byte, p.size)
	for {
		if _, err := io.ReadFull(conn, buf); err != nil {
			p.served <- nil // the client closed
			return
		}
		if _, err := conn.Write(buf); err != nil {
			p.served <- err
			return
		}
	}
}

// Run does count round trips and records each into lat. It stops early when ctx is done.
func (p *PingPong) Run(ctx context.Context, count int, lat *Latency) error {
	for i := range count {
		if i%1024 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		start := time.Now()
		if _, err := p.conn.Write(p.out); err != nil {
			return fmt.Errorf("pingpong: %w", err)
		}
		if _, err := io.ReadFull(p.conn, p.in); err != nil {
			return fmt.Errorf("pingpong: %w", err)
		}
		lat.Record(time.Since(start))
	}
	return nil
}

// Close ends the server goroutine and closes both ends.
func (p *PingPong) Close() error {
	p.conn.Close()
	p.listener.Close()
	return <-p.served
}
