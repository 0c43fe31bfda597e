package client

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ringlog/ringlog/netio/wire"
)

// oneConnServer accepts one connection on loopback and hands it to serve.
func oneConnServer(t *testing.T, serve func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		defer nc.Close()
		serve(nc)
	}()
	return ln.Addr().String()
}

// readRequest reads one request frame from nc.
func readRequest(nc net.Conn) (wire.RequestHeader, error) {
	var hb [wire.RequestHeaderBytes]byte
	if _, err := io.ReadFull(nc, hb[:]); err != nil {
		return wire.RequestHeader{}, err
	}
	h, err := wire.ParseRequestHeader(hb[:], 1<<20)
	if err != nil {
		return h, err
	}
	_, err = io.CopyN(io.Discard, nc, int64(h.Length)-(wire.RequestHeaderBytes-wire.FrameLengthBytes))
	return h, err
}

// answeringServer answers every request on its one connection with an empty Metadata
// response, after hold(i) returns for the i-th request (from 0).
func answeringServer(t *testing.T, hold func(i int)) string {
	return oneConnServer(t, func(nc net.Conn) {
		for i := 0; ; i++ {
			h, err := readRequest(nc)
			if err != nil {
				return
			}
			hold(i)
			if _, err := nc.Write(wire.AppendResponse(nil, h, &wire.MetadataResponse{})); err != nil {
				return
			}
		}
	})
}

func testConn(t *testing.T, addr string) *conn {
	t.Helper()
	cfg := Config{DialTimeout: 5 * time.Second, InflightPerConnMax: 4, FrameBytesMax: 1 << 20}
	c, err := dialConn(addr, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.close)
	return c
}

// A caller reading its own response (readHeld) leaves when its context ends, and a reader
// goroutine takes the outstanding response over: it is delivered, and the connection's
// read deadline is back to none for the next caller.
func TestHeldReadLeavesOnContextAndHandsOver(t *testing.T) {
	answer := make(chan struct{})
	addr := answeringServer(t, func(i int) {
		if i == 0 {
			<-answer // the first request is answered only after its caller left
		}
	})
	c := testConn(t, addr)
	got := make(chan error, 2)
	done := func(_ wire.Message, err error) { got <- err }
	cl := &call{resp: &wire.MetadataResponse{}, done: done}
	if !c.sendHeld(&wire.MetadataRequest{}, cl) {
		t.Fatal("an idle connection's first caller did not take the reader role")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	c.readHeld(ctx, cl, func() bool { return len(got) > 0 }, 0, nil)
	if len(got) != 0 {
		t.Fatal("answered before the server answered")
	}
	close(answer)
	if err := <-got; err != nil {
		t.Fatalf("the handed-over response: %v", err)
	}
	// The next caller may find the goroutine still holding the role (then it waits on
	// done) or take it: either way its answer arrives and no deadline is left behind.
	cl = &call{resp: &wire.MetadataResponse{}, done: done}
	if c.sendHeld(&wire.MetadataRequest{}, cl) {
		c.readHeld(context.Background(), cl, func() bool { return len(got) > 0 }, 0, nil)
	}
	if err := <-got; err != nil {
		t.Fatalf("second call: %v", err)
	}
	if err := c.failure(); err != nil {
		t.Fatal(err)
	}
}

// A connection the broker closed while no response was outstanding is found unusable
// before the next request is written to it (the client then dials a new one), as an idle
// reader would have noticed the close.
func TestIdleConnClosedByBrokerNoticedBeforeWrite(t *testing.T) {
	addr := oneConnServer(t, func(nc net.Conn) {})
	c := testConn(t, addr)
	if c.raw == nil {
		t.Skip("no raw socket")
	}
	// Wait (no sleep) until the broker's FIN is readable.
	if err := c.raw.Read(func(fd uintptr) bool {
		var b [1]byte
		_, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		return err != syscall.EAGAIN
	}); err != nil {
		t.Fatal(err)
	}
	if c.usable() {
		t.Fatal("a connection the broker closed is reported usable")
	}
	if err := c.failure(); !errors.Is(err, ErrConnClosed) || !errors.Is(err, io.EOF) && !strings.Contains(err.Error(), "EOF") {
		t.Fatalf("failure %v, want ErrConnClosed from EOF", err)
	}
}

// A live idle connection stays usable (the peek finds nothing to read).
func TestIdleConnUsable(t *testing.T) {
	hold := make(chan struct{})
	t.Cleanup(func() { close(hold) })
	addr := oneConnServer(t, func(nc net.Conn) { <-hold })
	c := testConn(t, addr)
	if !c.usable() {
		t.Fatalf("a live idle connection is not usable: %v", c.failure())
	}
}

// A polled held read (ProducerConfig.ReadPoll) on a connection the broker closes instead
// of answering: the poll sees the end of the stream, stops, and the read after it fails
// the call with the connection's error, as without a poll. Counted as a poll that found
// something to read.
func TestHeldReadPollSeesClose(t *testing.T) {
	addr := oneConnServer(t, func(nc net.Conn) {
		readRequest(nc) // then close without an answer
	})
	c := testConn(t, addr)
	got := make(chan error, 1)
	cl := &call{resp: &wire.MetadataResponse{}, done: func(_ wire.Message, err error) { got <- err }}
	if !c.sendHeld(&wire.MetadataRequest{}, cl) {
		t.Fatal("an idle connection's first caller did not take the reader role")
	}
	var stats pollCounts
	c.readHeld(context.Background(), cl, func() bool { return len(got) > 0 }, ReadPollMax, &stats)
	if err := <-got; !errors.Is(err, ErrConnClosed) {
		t.Fatalf("call ended with %v, want ErrConnClosed", err)
	}
	if h, m := stats.hits.Load(), stats.misses.Load(); h+m != 1 || stats.spins.Load() < 1 {
		t.Fatalf("%d hits, %d misses, %d reads: want one poll", h, m, stats.spins.Load())
	}
}

// The connection keeps its context registration between inline reads (so a caller that
// reuses one context pays it once): a later read with the same context is still
// interrupted when that context ends while it waits, and a read with another context
// replaces the registration. The broker withholds the second answer until the caller left.
func TestHeldReadWatchOutlivesTheRead(t *testing.T) {
	received := make(chan int, 4)
	answer := make(chan struct{})
	addr := answeringServer(t, func(i int) {
		received <- i
		if i == 1 {
			<-answer
		}
	})
	c := testConn(t, addr)
	got := make(chan error, 3)
	done := func(_ wire.Message, err error) { got <- err }
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	read := func(ctx context.Context) (answered bool) {
		cl := &call{resp: &wire.MetadataResponse{}, done: done}
		if !c.sendHeld(&wire.MetadataRequest{}, cl) {
			t.Fatal("an idle connection's caller did not take the reader role")
		}
		c.readHeld(ctx, cl, func() bool { return len(got) > 0 }, 0, nil)
		return len(got) > 0
	}
	if !read(ctx) {
		t.Fatal("first read left without its answer")
	}
	<-got
	first := c.watch.done
	if first == nil {
		t.Fatal("no registration kept after the first read")
	}
	go func() { // cancel once the broker holds the second request
		<-received
		<-received
		cancel()
	}()
	if read(ctx) {
		t.Fatal("answered although the broker withholds the answer")
	}
	if c.watch.done != first {
		t.Fatal("the registration changed for the same context")
	}
	close(answer)
	if err := <-got; err != nil {
		t.Fatalf("the handed-over response: %v", err)
	}
	// A reader with another context replaces the registration.
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	cl := &call{resp: &wire.MetadataResponse{}, done: done}
	if c.sendHeld(&wire.MetadataRequest{}, cl) {
		c.readHeld(ctx2, cl, func() bool { return len(got) > 0 }, 0, nil)
		c.rmu.Lock()
		replaced := c.watch.done == ctx2.Done()
		c.rmu.Unlock()
		if !replaced {
			t.Fatal("a reader with another context kept the old registration")
		}
	}
	if err := <-got; err != nil {
		t.Fatalf("third call: %v", err)
	}
	c.close()
	c.rmu.Lock()
	defer c.rmu.Unlock()
	if c.watch.stop != nil {
		t.Fatal("a closed connection keeps its context registration")
	}
}
