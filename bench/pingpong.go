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
// bytes and waits for size bytes back, an echo that sends them back. Each round trip is the
// floor under any request/response over loopback on this machine (two socket wake-ups, no
// protocol work): a one-record-at-a-time produce cannot be faster. The echo runs either in
// this process (NewPingPong: a goroutine of the same Go runtime, whose spinning threads often
// spare a wake-up) or in another process (DialPingPong, against ServeEcho there: the same
// process boundary a broker has; ServeUringEcho serves the same protocol from a ring.Reactor
// loop, as a broker shard does). A PingPong keeps its connection open between Run calls, so
// runs can be interleaved with another measurement in the same minute.
type PingPong struct {
	size     int
	listener net.Listener // nil when the echo is elsewhere
	conn     net.Conn
	served   chan error
	out, in  []byte
}

func checkPingPongSize(size int) error {
	if size < 1 || size > PingPongSizeMax {
		return fmt.Errorf("pingpong: size %d outside 1..%d", size, PingPongSizeMax)
	}
	return nil
}

// NewPingPong connects a ping-pong of size-byte messages to an echo goroutine of its own.
func NewPingPong(size int) (*PingPong, error) {
	if err := checkPingPongSize(size); err != nil {
		return nil, err
	}
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("pingpong: %w", err)
	}
	served := make(chan error, 1)
	go func() { served <- ServeEcho(listener, size) }()
	p, err := DialPingPong(listener.Addr().String(), size)
	if err != nil {
		listener.Close()
		return nil, err
	}
	p.listener, p.served = listener, served
	return p, nil
}

// DialPingPong connects a ping-pong of size-byte messages to an echo at addr (ServeEcho).
func DialPingPong(addr string, size int) (*PingPong, error) {
	if err := checkPingPongSize(size); err != nil {
		return nil, err
	}
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("pingpong: %w", err)
	}
	return &PingPong{size: size, conn: conn, out: make([]byte, size), in: make([]byte, size)}, nil
}

// ServeEcho accepts one connection on listener and sends back every size-byte message it
// reads until the peer closes it (a clean end: nil) or a write fails.
func ServeEcho(listener net.Listener, size int) error {
	if err := checkPingPongSize(size); err != nil {
		return err
	}
	conn, err := listener.Accept()
	if err != nil {
		return err
	}
	defer conn.Close()
	buf := make([]byte, size)
	for {
		if _, err := io.ReadFull(conn, buf); err != nil {
			return nil // the client closed
		}
		if _, err := conn.Write(buf); err != nil {
			return err
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

// Close closes the connection and, for an echo of its own, ends the echo goroutine.
func (p *PingPong) Close() error {
	p.conn.Close()
	if p.listener == nil {
		return nil
	}
	p.listener.Close()
	return <-p.served
}
