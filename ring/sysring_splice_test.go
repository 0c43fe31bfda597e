package ring

import (
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestSpliceIntoStalledSocketDoesNotBlock: a SPLICE from a pipe into a blocking socket
// whose peer reads nothing never blocks Submit; it completes once the peer reads. The ring
// driver splices file ranges into the connections it accepts, which are blocking sockets.
// SPLICE_F_NONBLOCK covers only the pipe's side, so the syscall backend's splice blocked
// the shard's loop in splice(2) behind a stalled client (e2e TestStalledReader/net=ring and
// TestAdversarialFetchDescriptorsNeverRead/net=ring under RINGLOG_IO=syscall: every other
// request to that shard then timed out); io_uring waits in an io-wq worker instead.
func TestSpliceIntoStalledSocketDoesNotBlock(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		r := openRing(t, backend, Config{Entries: 16})
		lfd, addr := listenLoopback(t)
		sfd, cfd := connectPair(t, r, lfd, addr) // sfd: accepted, blocking
		// Fill the connection until the sender's socket takes no more.
		chunk := make([]byte, 64<<10)
		for filled := 0; ; filled++ {
			if filled > 100_000 {
				t.Fatal("the socket never filled")
			}
			if _, err := unix.SendmsgN(sfd, chunk, nil, nil, unix.MSG_DONTWAIT); err == unix.EAGAIN {
				break
			} else if err != nil {
				t.Fatal(err)
			}
		}
		var p [2]int
		if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unix.Close(p[0]); unix.Close(p[1]) })
		if _, err := unix.Write(p[1], chunk[:4096]); err != nil {
			t.Fatal(err)
		}
		// A blocked Submit stays blocked until the peer reads: after a liveness bound far
		// above a submit's time, the test reads for it, then fails.
		submitted, rescued := make(chan struct{}), atomic.Bool{}
		go func() {
			select {
			case <-submitted:
				return
			case <-time.After(20 * time.Second):
			}
			rescued.Store(true)
			buf := make([]byte, 1<<20)
			for {
				select {
				case <-submitted:
					return
				default:
				}
				if _, err := unix.Read(cfd, buf); err != nil {
					return
				}
			}
		}()
		sqe := mustSQE(t, r)
		sqe.PrepSplice(p[0], -1, sfd, -1, 4096, unix.SPLICE_F_MOVE)
		sqe.UserData = 1
		_, err := r.Submit()
		close(submitted)
		if err != nil {
			t.Fatal(err)
		}
		if rescued.Load() {
			t.Fatal("Submit blocked in a splice into a socket whose peer read nothing")
		}
		if fl := flags(t, sfd); fl&unix.O_NONBLOCK != 0 {
			t.Fatal("the splice left the socket O_NONBLOCK")
		}
		// The peer reads: the splice completes.
		go func() {
			buf := make([]byte, 1<<20)
			for {
				if n, err := unix.Read(cfd, buf); err != nil || n == 0 {
					return
				}
			}
		}()
		if c := waitCQEs(t, r, 1)[0]; c.UserData != 1 || c.Res <= 0 {
			t.Fatalf("splice after the peer read: %+v", c)
		}
		unix.Shutdown(sfd, unix.SHUT_WR) // the reader sees EOF and returns
	})
}
