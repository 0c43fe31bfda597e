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
// duration (iperf3-style, in Go; longer, by at most loopbackStretchMax, until a byte has
// arrived): the ceiling any broker on this machine can serve a consumer at. It returns 10^6
// bytes per second.
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
	var writers sync.WaitGroup
	var stop atomic.Bool
	start := time.Now()
	for _, conn := range conns {
		writers.Add(1)
		go func() {
			defer writers.Done()
			buffer := make([]byte, loopbackBufferBytes)
			for !stop.Load() {
				if _, err := conn.Write(buffer); err != nil {
					return
				}
			}
		}()
	}
	waitLoopback(ctx, duration, &received)
	stop.Store(true)
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

// loopbackStretchMax bounds how long LoopbackBandwidth's window stays open past its duration
// while no byte has arrived: a starved machine may not run a reader within a short window
// (a 100 ms window at load 15 on 2 vCPUs moved 2.8 MB/s, two buffers), as a bench run's
// window stays open until it measured acknowledged messages.
const loopbackStretchMax = 10 * time.Second

// waitLoopback returns once duration has passed and received counts a byte, or at most
// loopbackStretchMax later, or when ctx ends.
func waitLoopback(ctx context.Context, duration time.Duration, received *atomic.Int64) {
	timer := time.NewTimer(duration)
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-ctx.Done():
		return
	}
	stretch := time.NewTimer(loopbackStretchMax)
	defer stretch.Stop()
	poll := time.NewTicker(time.Millisecond)
	defer poll.Stop()
	for received.Load() == 0 {
		select {
		case <-poll.C: // a poll of the counter, not a measurement clock
		case <-stretch.C:
			return
		case <-ctx.Done():
			return
		}
	}
}
