package ring

import (
	"path/filepath"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The syscall backend's CONNECT must complete as the kernel's: 0 only on a connected
// socket, -errno otherwise, never EINPROGRESS, EINTR or EALREADY for a handshake it started.
// Session 10 saw a CQE with res 0 on a socket that never connected (getpeername ENOTCONN,
// local address 0.0.0.0:0, nothing on the listener). The cause was the test's address, not
// the backend: listenLoopback's sockaddr was unreachable after its last use, waitCQEs'
// collection freed it before Submit, and a zeroed sockaddr is AF_UNSPEC, for which
// connect(2) disconnects and returns 0, on both backends (TestConnectUnspecDisconnects).
// These tests pin down the cases the backend itself got wrong or could get wrong.

// connectedPeer returns the peer address of fd, or the getpeername error.
func connectedPeer(fd int) (*unix.SockaddrInet4, error) {
	sa, err := unix.Getpeername(fd)
	if err != nil {
		return nil, err
	}
	return sa.(*unix.SockaddrInet4), nil
}

// synDroppingListener returns the port of a loopback listener whose accept queue is full
// (backlog 0, one connection queued), so it drops every SYN: a non-blocking connect to it
// stays in SYN_SENT for the whole test (the next SYN retransmission is dropped as well).
func synDroppingListener(t *testing.T) int {
	t.Helper()
	_, port := loopbackSocket(t, 0)
	if err := unix.Connect(newSocket(t), &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}, Port: port}); err != nil {
		t.Fatal(err) // fills the accept queue
	}
	return port
}

// closedPort returns an address on which nothing listens: a bound, unlistened socket's port.
func closedPort(t *testing.T) *RawSockaddrAny {
	_, port := loopbackSocket(t, -1)
	return rawInet4(t, port)
}

// submitConnect queues a CONNECT of fd to addr with user data ud and submits it.
func submitConnect(t *testing.T, r Ring, fd int, addr *RawSockaddrAny, addrLen uint32, ud uint64) {
	t.Helper()
	sqe := mustSQE(t, r)
	sqe.PrepConnect(fd, addr, addrLen)
	sqe.UserData = ud
	if _, err := r.Submit(); err != nil {
		t.Fatal(err)
	}
}

// noCompletion fails the test if r has posted a completion.
func noCompletion(t *testing.T, r Ring, what string) {
	t.Helper()
	if _, err := r.SubmitAndWait(0, 0); err != nil {
		t.Fatal(err)
	}
	var cq [4]CQE
	if n := r.PeekCQEs(cq[:]); n > 0 {
		t.Fatalf("%s: completed with %+v", what, cq[:n])
	}
}

// cancelParked cancels the request with user data ud and checks it ends with -ECANCELED.
func cancelParked(t *testing.T, r Ring, ud uint64) {
	t.Helper()
	sqe := mustSQE(t, r)
	sqe.PrepCancel(ud, 0)
	sqe.UserData = ud + 1
	m := byUserData(t, waitCQEs(t, r, 2))
	if m[ud].Res != -int32(unix.ECANCELED) || m[ud+1].Res != 0 {
		t.Fatalf("cancel of request %d: %+v", ud, m)
	}
}

// TestConnectSpuriousWakeup: a wake-up for a socket whose handshake still runs (stale
// epoll events for a reused fd number do this) must not complete the CONNECT. It used to
// complete with res 0, read from SO_ERROR, on a socket in SYN_SENT.
func TestConnectSpuriousWakeup(t *testing.T) {
	r := openRing(t, "syscall", Config{Entries: 8})
	sys := r.(*sysRing)
	addr := rawInet4(t, synDroppingListener(t))
	cfd := newSocket(t)
	submitConnect(t, r, cfd, addr, unix.SizeofSockaddrInet4, 1)
	noCompletion(t, r, "connect to a listener that drops SYNs")
	for _, revents := range []uint32{unix.EPOLLOUT, unix.EPOLLERR, unix.EPOLLHUP} {
		sys.ready(int32(cfd), revents)
		var cq [2]CQE
		if n := r.PeekCQEs(cq[:]); n > 0 {
			_, peerErr := connectedPeer(cfd)
			t.Fatalf("spurious wake-up %#x completed the connect with %+v (getpeername: %v)", revents, cq[:n], peerErr)
		}
	}
	cancelParked(t, r, 1)
}

// TestConnectInterruptedIsRetried: if connect(2) ever said EINTR before it started the
// handshake, the socket stays in TCP_CLOSE, which polls EPOLLOUT|EPOLLHUP at once with
// SO_ERROR 0: the op must start the connect again, not complete with 0 (session 10's
// suspicion; Linux does not return EINTR from a non-blocking connect, so it is injected).
func TestConnectInterruptedIsRetried(t *testing.T) {
	r := openRing(t, "syscall", Config{Entries: 8})
	lfd, addr := listenLoopback(t)
	cfd := newSocket(t)
	interrupted := 0
	injectErrno = func(nr uintptr) unix.Errno {
		if nr == unix.SYS_CONNECT && interrupted == 0 {
			interrupted++
			return unix.EINTR
		}
		return 0
	}
	t.Cleanup(func() { injectErrno = nil })
	submitConnect(t, r, cfd, addr, unix.SizeofSockaddrInet4, 1)
	if c := waitCQEs(t, r, 1)[0]; c.Res != 0 || interrupted != 1 {
		t.Fatalf("connect after EINTR: %+v (interrupted %d times)", c, interrupted)
	}
	if _, err := connectedPeer(cfd); err != nil {
		t.Fatalf("connect completed with 0 but getpeername: %v", err)
	}
	if sfd, _, err := unix.Accept4(lfd, unix.SOCK_CLOEXEC); err != nil {
		t.Fatalf("nothing to accept after the connect completed: %v", err)
	} else {
		unix.Close(sfd)
	}
}

// TestConnectAddressCopiedAtSubmit: io_uring copies a CONNECT's address when it prepares
// the SQE, at submit, also for a request that starts later in a link chain; the caller may
// reuse the memory after Submit. The syscall backend read it when the request started, so
// it dialled whatever the memory held then (here AF_UNSPEC: res 0, never connected).
func TestConnectAddressCopiedAtSubmit(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		r := openRing(t, backend, Config{Entries: 8})
		lfd, addr := listenLoopback(t)
		var p [2]int
		if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
			t.Fatal(err)
		}
		defer unix.Close(p[0])
		defer unix.Close(p[1])
		cfd := newSocket(t)
		sqe := mustSQE(t, r)
		sqe.PrepPollAdd(p[0], unix.POLLIN)
		sqe.SetLink()
		sqe.UserData = 1
		submitConnect(t, r, cfd, addr, unix.SizeofSockaddrInet4, 2)
		*addr = RawSockaddrAny{} // reused after Submit: AF_UNSPEC
		if _, err := unix.Write(p[1], []byte{1}); err != nil {
			t.Fatal(err)
		}
		m := byUserData(t, waitCQEs(t, r, 2))
		if m[1].Res <= 0 || m[2].Res != 0 {
			t.Fatalf("poll → connect chain: %+v", m)
		}
		if _, err := connectedPeer(cfd); err != nil {
			t.Fatalf("connect completed with 0 but getpeername: %v", err)
		}
		sfd, _, err := unix.Accept4(lfd, unix.SOCK_CLOEXEC)
		if err != nil {
			t.Fatalf("nothing to accept after the connect completed: %v", err)
		}
		unix.Close(sfd)
	})
}

// TestConnectUnspecDisconnects records the kernel's answer that made session 10's hang:
// connect(2) to an AF_UNSPEC address (what a zeroed, freed sockaddr reads as) dissolves
// the association and returns 0, leaving a fresh TCP socket unconnected, on both backends.
func TestConnectUnspecDisconnects(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		r := openRing(t, backend, Config{Entries: 8})
		unspec := new(RawSockaddrAny)
		pinForTest(t, unspec)
		cfd := newSocket(t)
		submitConnect(t, r, cfd, unspec, unix.SizeofSockaddrInet4, 1)
		if c := waitCQEs(t, r, 1)[0]; c.Res != 0 {
			t.Fatalf("connect to AF_UNSPEC: %+v, want res 0 (the kernel's disconnect)", c)
		}
		if _, err := connectedPeer(cfd); err != unix.ENOTCONN {
			t.Fatalf("getpeername after an AF_UNSPEC connect: %v, want ENOTCONN", err)
		}
	})
}

// TestConnectResults: the results both backends give for connects that fail or that meet
// a socket in another state.
func TestConnectResults(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		r := openRing(t, backend, Config{Entries: 8})
		lfd, addr := listenLoopback(t)
		cases := []struct {
			name    string
			fd      func() int
			addr    *RawSockaddrAny
			addrLen uint32
			want    unix.Errno
		}{
			{"refused", func() int { return newSocket(t) }, closedPort(t), unix.SizeofSockaddrInet4, unix.ECONNREFUSED},
			{"address longer than sockaddr_storage", func() int { return newSocket(t) }, addr, sockaddrStorageSize + 1, unix.EINVAL},
			{"nil address", func() int { return newSocket(t) }, nil, unix.SizeofSockaddrInet4, unix.EFAULT},
			{"not a socket", func() int { return p0(t) }, addr, unix.SizeofSockaddrInet4, unix.ENOTSOCK},
			{"already connected", func() int {
				fd := newSocket(t)
				sa, _ := unix.Getsockname(lfd)
				if err := unix.Connect(fd, sa); err != nil {
					t.Fatal(err)
				}
				return fd
			}, addr, unix.SizeofSockaddrInet4, unix.EISCONN},
			{"connect already in progress before the op", func() int {
				fd := newSocket(t)
				if err := unix.SetNonblock(fd, true); err != nil {
					t.Fatal(err)
				}
				port := synDroppingListener(t)
				if err := unix.Connect(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}, Port: port}); err != unix.EINPROGRESS {
					t.Fatalf("non-blocking connect to a SYN-dropping listener: %v", err)
				}
				return fd
			}, addr, unix.SizeofSockaddrInet4, unix.EALREADY},
		}
		for i, c := range cases {
			submitConnect(t, r, c.fd(), c.addr, c.addrLen, uint64(i))
			if got := waitCQEs(t, r, 1)[0]; got.Res != -int32(c.want) {
				t.Errorf("%s: %+v, want %d (%v)", c.name, got, -int32(c.want), c.want)
			}
		}
	})
}

// p0 returns the read end of a pipe closed when the test ends.
func p0(t *testing.T) int {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(p[0]); unix.Close(p[1]) })
	return p[0]
}

// TestPollAddInterrupted: ppoll with a zero timeout fails with EINTR when a signal lands
// during it (Go preempts goroutines with SIGURG), which says nothing about the descriptor.
// POLL_ADD used to complete with -EINTR, which io_uring never posts; it must wait on.
func TestPollAddInterrupted(t *testing.T) {
	r := openRing(t, "syscall", Config{Entries: 8})
	injectErrno = func(nr uintptr) unix.Errno {
		if nr == unix.SYS_PPOLL {
			return unix.EINTR
		}
		return 0
	}
	t.Cleanup(func() { injectErrno = nil })
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(p[0])
	defer unix.Close(p[1])
	sqe := mustSQE(t, r)
	sqe.PrepPollAdd(p[0], unix.POLLIN)
	sqe.UserData = 1
	if _, err := r.Submit(); err != nil {
		t.Fatal(err)
	}
	noCompletion(t, r, "poll of an empty pipe whose ppoll was interrupted")
	injectErrno = nil
	if _, err := unix.Write(p[1], []byte{1}); err != nil {
		t.Fatal(err)
	}
	if c := waitCQEs(t, r, 1)[0]; c.Res != unix.POLLIN {
		t.Fatalf("poll after the write: %+v, want res POLLIN", c)
	}
}

// nonblocking reports whether fd's file is in O_NONBLOCK mode.
func nonblocking(t *testing.T, fd int) bool {
	t.Helper()
	fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	if err != nil {
		t.Fatal(err)
	}
	return fl&unix.O_NONBLOCK != 0
}

// TestConnectKeepsFileFlags: io_uring makes its connect(2) calls non-blocking without
// touching the socket's file flags, so a socket the caller left blocking is blocking after
// the op, whatever its outcome, and a non-blocking one stays non-blocking. The syscall
// backend used to leave O_NONBLOCK set, and a later blocking read of the socket then
// failed with EAGAIN.
func TestConnectKeepsFileFlags(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		r := openRing(t, backend, Config{Entries: 8})
		_, addr := listenLoopback(t)
		cases := []struct {
			name     string
			nonblock bool
			addr     *RawSockaddrAny
			want     unix.Errno
		}{
			{"connected", false, addr, 0},
			{"refused", false, closedPort(t), unix.ECONNREFUSED},
			{"the caller's non-blocking socket", true, addr, 0},
		}
		for i, c := range cases {
			fd := newSocket(t)
			if err := unix.SetNonblock(fd, c.nonblock); err != nil {
				t.Fatal(err)
			}
			submitConnect(t, r, fd, c.addr, unix.SizeofSockaddrInet4, uint64(i))
			if got := waitCQEs(t, r, 1)[0]; got.Res != -int32(c.want) {
				t.Errorf("%s: %+v, want res %d", c.name, got, -int32(c.want))
			}
			if got := nonblocking(t, fd); got != c.nonblock {
				t.Errorf("%s: O_NONBLOCK %v after the op, want %v", c.name, got, c.nonblock)
			}
		}
		// Cancelled while the handshake runs.
		fd := newSocket(t)
		submitConnect(t, r, fd, rawInet4(t, synDroppingListener(t)), unix.SizeofSockaddrInet4, 10)
		noCompletion(t, r, "connect to a listener that drops SYNs")
		cancelParked(t, r, 10)
		if nonblocking(t, fd) {
			t.Error("cancelled connect: the socket was left in O_NONBLOCK")
		}
	})
}

// fullUnixListener returns a unix stream listener, its address and the address length;
// its backlog is full (listen backlog 0, one connection queued), so that connect(2) answers
// EAGAIN on a non-blocking socket and waits on a blocking one until the listener accepts.
func fullUnixListener(t *testing.T) (int, *RawSockaddrAny, uint32) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "s")
	raw := new(RawSockaddrAny)
	pinForTest(t, raw)
	sun := (*unix.RawSockaddrUnix)(unsafe.Pointer(raw))
	if len(path) >= len(sun.Path) {
		t.Skipf("temporary directory path too long for a unix socket: %s", path)
	}
	sun.Family = unix.AF_UNIX
	for i := range len(path) {
		sun.Path[i] = int8(path[i])
	}
	lfd := newUnixSocket(t)
	if err := unix.Bind(lfd, &unix.SockaddrUnix{Name: path}); err != nil {
		t.Fatal(err)
	}
	if err := unix.Listen(lfd, 0); err != nil {
		t.Fatal(err)
	}
	if err := unix.Connect(newUnixSocket(t), &unix.SockaddrUnix{Name: path}); err != nil {
		t.Fatal(err) // queued: the backlog is full from now on
	}
	return lfd, raw, uint32(unsafe.Offsetof(sun.Path)) + uint32(len(path)) + 1
}

func newUnixSocket(t *testing.T) int {
	t.Helper()
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

// TestConnectWaitsForFullUnixBacklog: connect(2) to a unix listener whose backlog is full
// answers EAGAIN when non-blocking. io_uring passes that on only for a socket the caller
// made non-blocking; on a blocking one the CONNECT waits (in an io-wq worker) until the
// listener accepts, and then completes with 0. The syscall backend used to post -EAGAIN
// for both.
func TestConnectWaitsForFullUnixBacklog(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		r := openRing(t, backend, Config{Entries: 8})
		lfd, addr, addrLen := fullUnixListener(t)

		nb := newUnixSocket(t)
		if err := unix.SetNonblock(nb, true); err != nil {
			t.Fatal(err)
		}
		submitConnect(t, r, nb, addr, addrLen, 1)
		if got := waitCQEs(t, r, 1)[0]; got.Res != -int32(unix.EAGAIN) {
			t.Fatalf("connect of a non-blocking socket to a full backlog: %+v, want -EAGAIN", got)
		}

		fd := newUnixSocket(t)
		submitConnect(t, r, fd, addr, addrLen, 2)
		noCompletion(t, r, "connect of a blocking socket to a full backlog")
		queued, _, err := unix.Accept4(lfd, unix.SOCK_CLOEXEC) // room for one more
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(queued)
		if got := waitCQEs(t, r, 1)[0]; got.Res != 0 {
			t.Fatalf("connect once the listener accepted: %+v, want 0", got)
		}
		if _, err := unix.Getpeername(fd); err != nil {
			t.Fatalf("connect completed with 0 but getpeername: %v", err)
		}
		if nonblocking(t, fd) {
			t.Error("the blocking socket was left in O_NONBLOCK")
		}
	})
}

// TestConnectRetryCancelled: a syscall-backend CONNECT waiting to ask a full backlog again
// sits on the timer heap; ASYNC_CANCEL and a link timeout must find it there, complete it
// with -ECANCELED and take O_NONBLOCK off the socket. (io_uring answers these
// differently: its connect is blocked in an io-wq worker, which a cancel interrupts.)
func TestConnectRetryCancelled(t *testing.T) {
	r := openRing(t, "syscall", Config{Entries: 8})
	_, addr, addrLen := fullUnixListener(t)
	fd := newUnixSocket(t)
	submitConnect(t, r, fd, addr, addrLen, 1)
	noCompletion(t, r, "connect of a blocking socket to a full backlog")
	cancelParked(t, r, 1)
	if nonblocking(t, fd) {
		t.Error("cancelled connect: the socket was left in O_NONBLOCK")
	}

	fd = newUnixSocket(t)
	ts := &Timespec{Nsec: int64(20 * time.Millisecond)}
	pinForTest(t, ts)
	sqe := mustSQE(t, r)
	sqe.PrepConnect(fd, addr, addrLen)
	sqe.SetLink()
	sqe.UserData = 3
	sqe = mustSQE(t, r)
	sqe.PrepLinkTimeout(ts, 0)
	sqe.UserData = 4
	m := byUserData(t, waitCQEs(t, r, 2))
	if m[3].Res != -int32(unix.ECANCELED) || m[4].Res != -int32(unix.ETIME) {
		t.Fatalf("connect to a full backlog under a 20 ms link timeout: %+v", m)
	}
	if nonblocking(t, fd) {
		t.Error("timed-out connect: the socket was left in O_NONBLOCK")
	}
}
