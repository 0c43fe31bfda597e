package client

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"syscall"
	"testing"
	"time"
)

// rawSocketPair returns a rawSocket over a dialed loopback TCP connection, that
// connection, and the accepted peer.
func rawSocketPair(t *testing.T) (*rawSocket, net.Conn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	nc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	peer, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { peer.Close() })
	rc, err := nc.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	return newRawSocket(rc), nc, peer
}

// Both directions move many times the socket buffers and rawSocketCallBytesMax through a
// peer that reads and writes in small pieces: Write waits for room and sends the rest
// (several system calls per Write), Read returns what is there, nothing is lost or
// reordered.
func TestRawSocketMovesEverything(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	readRng, writeRng := rand.New(rand.NewPCG(seed, 1)), rand.New(rand.NewPCG(seed, 2)) // the peer's piece sizes
	s, _, peer := rawSocketPair(t)
	out := make([]byte, 16<<20+rng.IntN(4096))
	for i := range out {
		out[i] = byte(rng.Uint32())
	}
	got := make(chan []byte, 1)
	go func() {
		var b bytes.Buffer
		piece := make([]byte, 1500)
		for b.Len() < len(out) {
			n, err := peer.Read(piece[:1+readRng.IntN(len(piece))])
			b.Write(piece[:n])
			if err != nil {
				break
			}
		}
		got <- b.Bytes()
	}()
	if n, err := s.Write(out); err != nil || n != len(out) {
		t.Fatalf("Write = %d, %v; want %d, nil", n, err, len(out))
	}
	if in := <-got; !bytes.Equal(in, out) {
		t.Fatalf("peer read %d bytes, not the %d written (or not in order)", len(in), len(out))
	}
	go func() {
		for rest := out; len(rest) > 0; {
			k := min(len(rest), 1+writeRng.IntN(100_000))
			if _, err := peer.Write(rest[:k]); err != nil {
				return
			}
			rest = rest[k:]
		}
	}()
	in := make([]byte, len(out))
	if _, err := io.ReadFull(s, in); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(in, out) {
		t.Fatal("read bytes differ from the peer's")
	}
}

// A read deadline in the past ends a waiting Read with os.ErrDeadlineExceeded (how a
// SendSync's context interrupts its inline read), and after the deadline is cleared the
// next Read gets the data.
func TestRawSocketReadDeadline(t *testing.T) {
	s, nc, peer := rawSocketPair(t)
	done := make(chan error, 1)
	go func() {
		_, err := s.Read(make([]byte, 10))
		done <- err
	}()
	nc.SetReadDeadline(aLongTimeAgo)
	if err := <-done; !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Read with a past deadline: %v, want os.ErrDeadlineExceeded", err)
	}
	nc.SetReadDeadline(time.Time{})
	peer.Write([]byte("hello"))
	b := make([]byte, 10)
	n, err := s.Read(b)
	if err != nil || string(b[:n]) != "hello" {
		t.Fatalf("Read after clearing the deadline = %q, %v", b[:n], err)
	}
}

// A peer that closes gives io.EOF to Read; one that resets the connection makes Write fail
// with an error instead of raising SIGPIPE (which would kill the test binary).
func TestRawSocketPeerGone(t *testing.T) {
	s, _, peer := rawSocketPair(t)
	peer.(*net.TCPConn).SetLinger(0) // close sends a reset
	peer.Close()
	if n, err := s.Read(make([]byte, 10)); n != 0 || (err != io.EOF && !errors.Is(err, syscall.ECONNRESET)) {
		t.Fatalf("Read from a closed peer = %d, %v; want 0, EOF or ECONNRESET", n, err)
	}
	frame := make([]byte, 4096)
	var err error
	for range 100 { // the first sends may still be accepted by the kernel
		if _, err = s.Write(frame); err != nil {
			break
		}
	}
	if !errors.Is(err, syscall.EPIPE) && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("Write to a reset connection: %v, want EPIPE or ECONNRESET", err)
	}
}

// Close ends a waiting Read with an error.
func TestRawSocketCloseEndsRead(t *testing.T) {
	s, nc, _ := rawSocketPair(t)
	done := make(chan error, 1)
	go func() {
		_, err := s.Read(make([]byte, 10))
		done <- err
	}()
	nc.Close()
	if err := <-done; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Read on a closed connection: %v, want net.ErrClosed", err)
	}
}
