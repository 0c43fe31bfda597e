package ring

import (
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// The syscall backend made a blocking listener non-blocking for good on its first ACCEPT
// (the caller's own accept(2) on it then failed with EAGAIN); io_uring leaves the
// listener's flags alone. Both backends now leave them alone, and give the accepted socket
// the op's flags only.
func TestAcceptLeavesListenerFlags(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		r := openRing(t, backend, Config{Entries: 16})
		lfd, addr := listenLoopback(t) // blocking
		for _, tc := range []struct {
			flags    int
			nonblock bool
		}{{unix.SOCK_CLOEXEC, false}, {unix.SOCK_CLOEXEC | unix.SOCK_NONBLOCK, true}} {
			cfd := newSocket(t)
			sqe := mustSQE(t, r)
			sqe.PrepAccept(lfd, nil, nil, tc.flags)
			sqe.UserData = 1
			sqe = mustSQE(t, r)
			sqe.PrepConnect(cfd, addr, unix.SizeofSockaddrInet4)
			sqe.UserData = 2
			m := byUserData(t, waitCQEs(t, r, 2))
			if m[1].Res < 0 || m[2].Res != 0 {
				t.Fatalf("accept/connect: %+v", m)
			}
			sfd := int(m[1].Res)
			t.Cleanup(func() { unix.Close(sfd) })
			if fl := flags(t, lfd); fl&unix.O_NONBLOCK != 0 {
				t.Errorf("listener O_NONBLOCK after an ACCEPT: the caller's listener was made non-blocking")
			}
			if fl := flags(t, sfd); fl&unix.O_NONBLOCK != 0 != tc.nonblock {
				t.Errorf("accepted with flags %#x: O_NONBLOCK %v, want %v", tc.flags, fl&unix.O_NONBLOCK != 0, tc.nonblock)
			}
			if fl := flags(t, cfd); fl&unix.O_NONBLOCK != 0 {
				t.Errorf("connected socket left O_NONBLOCK")
			}
		}
	})
}

func flags(t *testing.T, fd int) int {
	t.Helper()
	fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	if err != nil {
		t.Fatal(err)
	}
	return fl
}

// The syscall backend's Close left its waiting requests (a parked recv, a pending timeout)
// uncompleted: nothing ever answered them, so a caller that closes the ring and drains it
// waited for completions that never came. Close now completes them with -ECANCELED, as
// the kernel cancels a closing io_uring's requests, and they can be reaped after Close.
func TestSysRingCloseCompletesWaiting(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	r := openRing(t, "syscall", Config{Entries: 16})
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(pair[0]); unix.Close(pair[1]) })
	buf := make([]byte, 8)
	ts := &Timespec{Sec: 3600}
	pinForTest(t, &buf[0], ts)
	sqe := mustSQE(t, r)
	sqe.PrepRecv(pair[0], buf, 0)
	sqe.UserData = 1
	sqe = mustSQE(t, r)
	sqe.PrepTimeout(ts, 0, 0)
	sqe.UserData = 2
	if _, err := r.Submit(); err != nil {
		t.Fatal(err)
	}
	if n := r.PeekCQEs(make([]CQE, 4)); n != 0 {
		t.Fatalf("%d completions before Close", n)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	got := make([]CQE, 4)
	n := r.PeekCQEs(got)
	m := byUserData(t, got[:n])
	if n != 2 || m[1].Res != -int32(unix.ECANCELED) || m[2].Res != -int32(unix.ECANCELED) {
		t.Fatalf("after Close: %d completions %+v, want the recv and the timeout cancelled", n, got[:n])
	}
	if r.GetSQE() != nil {
		t.Error("GetSQE after Close handed out an SQE")
	}
	if fl := flags(t, pair[0]); fl&unix.O_NONBLOCK != 0 {
		t.Error("the recv's socket was left O_NONBLOCK")
	}
}
