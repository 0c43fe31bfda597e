package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// loopbackBufferBytes is each write and read: large enough that syscall cost is amortised,
// as iperf3's default 128 KiB is.
const loopbackBufferBytes = 128 << 10

// LoopbackBandwidth measures TCP throughput over 127.0.0.1 with streams connections for
// duration (iperf3-style, in Go): the ceiling any broker on this machine can serve a
// consumer at. It returns 10^6 bytes per second.
func LoopbackBandwidth(ctx context.Context, duration time.Duration, streams int) (float64, error) {
	if streams < 1 || streams > 64 || duration <= 0 {
		return 0, fmt.Errorf("loopback: want 1..64 streams and a positive duration, got %d, %v", streams, duration)
	}
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("loopback: %w", err)
	}
	defer listener.Close()
	var received atomic.Int64
	var readers sync.WaitGroup
	acceptErr := make(chan error, 1)
	go func() {
		for range streams {
			conn, err := listener.Accept()
			if err != nil {
				acceptErr <- err
				return
			}
			readers.Add(1)
			go func() {
				defer readers.Done()
				defer conn.Close()
				buffer := make([]byte, loopbackBufferBytes)
				for {
					n, err := conn.Read(buffer)
					received.Add(int64(n))
					if err != nil {
						return
					}
				}
			}()
		}
		acceptErr <- nil
	}()
	var conns []net.Conn
	for range streams {
		conn, err := net.Dial("tcp", listener.Addr().String())
		if err != nil {
			for _, c := range conns {
				c.Close()
			}
			return 0, fmt.Errorf("loopback: %w", err)
		}
		conns = append(conns, conn)
	}
	if err := <-acceptErr; err != nil {
		return 0, fmt.Errorf("loopback: accept: %w", err)
	}
	runCtx, cancel := context.WithTimeout(ctx, duration)
	defer cancel()
	var writers sync.WaitGroup
	start := time.Now()
	for _, conn := range conns {
		writers.Add(1)
		go func() {
			defer writers.Done()
			buffer := make([]byte, loopbackBufferBytes)
			for runCtx.Err() == nil {
				if _, err := conn.Write(buffer); err != nil {
					return
				}
			}
		}()
	}
	<-runCtx.Done()
	elapsed := time.Since(start)
	bytes := received.Load()
	for _, conn := range conns {
		conn.Close()
	}
	writers.Wait()
	readers.Wait()
	if errors.Is(ctx.Err(), context.Canceled) {
		return 0, ctx.Err()
	}
	if bytes == 0 {
		return 0, fmt.Errorf("loopback: no bytes received: %w", io.ErrUnexpectedEOF)
	}
	return float64(bytes) / elapsed.Seconds() / 1e6, nil
}
