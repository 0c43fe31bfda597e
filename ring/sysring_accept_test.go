package ring

import (
	"fmt"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestSysAcceptSharedListenerNeverBlocks: the syscall backend's ACCEPT never blocks its
// thread, also when other threads accept on the same listener at the same time. A broker's
// shards all accept on one listening socket, each on its own dup of it (netio.ServeRing:
// net.TCPListener.File, whose Fd makes the shared open file description blocking). accept
// makes a blocking listener non-blocking for its one call, and O_NONBLOCK belongs to that
// shared description: a shard that read the flags while another shard's call had set them
// took the listener for non-blocking, the other call took the flag off again, and the
// first shard's accept4 then blocked its loop until the next connection arrived (netio
// TestACLs/ring with RINGLOG_IO=syscall hung 2 times in 129 runs, a shard's loop in
// accept4 in the goroutine dump). Two threads call accept on two dups with no connection
// pending: every call must return EAGAIN.
func TestSysAcceptSharedListenerNeverBlocks(t *testing.T) {
	lfd, port := loopbackSocket(t, 64) // blocking, as File().Fd() leaves it
	const threads, calls = 2, 20_000
	var blocked atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, threads)
	for i := 0; i < threads; i++ {
		fd, err := unix.Dup(lfd)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unix.Close(fd) })
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			r := &sysRing{}
			op := &sysOp{fd: int32(fd)}
			for k := 0; k < calls; k++ {
				op.sqe.PrepAccept(fd, nil, nil, unix.SOCK_CLOEXEC)
				res, _, parkFd, _ := r.accept(op)
				switch {
				case res >= 0: // only the rescue below connects: this call blocked
					blocked.Add(1)
					unix.Close(int(res))
				case !isAgain(res) || parkFd != int32(fd):
					errs <- fmt.Errorf("accept: res %d, park on %d; want EAGAIN, park on %d", res, parkFd, fd)
					return
				}
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	// A liveness bound, far above the calls' time (under a second): a thread blocked in
	// accept4 stays there until a connection arrives, so the test brings one per stuck
	// thread, then fails.
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		for rescued := false; !rescued; {
			if c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err == nil {
				defer c.Close()
			}
			select {
			case <-done:
				rescued = true
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := blocked.Load(); n > 0 {
		t.Fatalf("%d of %d accepts on a shared blocking listener blocked their thread until a connection came", n, threads*calls)
	}
	if fl := flags(t, lfd); fl&unix.O_NONBLOCK != 0 {
		t.Fatal("the listener was left O_NONBLOCK")
	}
}
