package ring

import (
	"bytes"
	"os"
	"runtime"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// listenLoopback returns a listening TCP socket on 127.0.0.1 and its address.
func listenLoopback(t testing.TB) (int, *RawSockaddrAny) {
	t.Helper()
	fd, port := loopbackSocket(t, 64)
	return fd, rawInet4(t, port)
}

// loopbackSocket returns a TCP socket bound to 127.0.0.1 (a port the kernel picks) and
// that port; it listens with backlog unless backlog is negative.
func loopbackSocket(t testing.TB, backlog int) (int, int) {
	t.Helper()
	fd := newSocket(t)
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if backlog >= 0 {
		if err := unix.Listen(fd, backlog); err != nil {
			t.Fatal(err)
		}
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	return fd, sa.(*unix.SockaddrInet4).Port
}

// rawInet4 returns 127.0.0.1:port as full-size storage (the kernel and checkptr both see
// 112 bytes), pinned until the test ends: a test's last use of an address is often the
// prep, and waitCQEs' collection then freed it before Submit handed it to the kernel,
// which read zeros (AF_UNSPEC) and "connected" with res 0 to nothing (session 10's
// TestSlowPeerDoesNotBlock hang).
func rawInet4(t testing.TB, port int) *RawSockaddrAny {
	storage := new(RawSockaddrAny)
	pinForTest(t, storage)
	raw := (*unix.RawSockaddrInet4)(unsafe.Pointer(storage))
	raw.Family = unix.AF_INET
	raw.Addr = [4]byte{127, 0, 0, 1}
	raw.Port = uint16(port>>8) | uint16(port&0xff)<<8 // network byte order
	return storage
}

func newSocket(t testing.TB) int {
	t.Helper()
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

// connectPair accepts and connects through the ring, returning (server, client) fds.
func connectPair(t testing.TB, r Ring, lfd int, addr *RawSockaddrAny) (int, int) {
	t.Helper()
	cfd := newSocket(t)
	// The kernel writes the peer address when the accept completes, after this frame has
	// called into waitCQEs: both must live on the heap (a stack variable moves when the
	// goroutine's stack grows, and the kernel then writes into the old stack; CI saw family
	// 0 here). Pinning makes them escape and keeps them put.
	peer, peerLen := new(RawSockaddrAny), new(uint32)
	*peerLen = uint32(unsafe.Sizeof(*peer))
	var pin runtime.Pinner
	pin.Pin(peer)
	pin.Pin(peerLen)
	defer pin.Unpin()
	sqe := mustSQE(t, r)
	sqe.PrepAccept(lfd, peer, peerLen, unix.SOCK_CLOEXEC)
	sqe.UserData = 100
	sqe = mustSQE(t, r)
	sqe.PrepConnect(cfd, addr, unix.SizeofSockaddrInet4)
	sqe.UserData = 101
	m := byUserData(t, waitCQEs(t, r, 2))
	if m[100].Res < 0 || m[101].Res != 0 {
		t.Fatalf("accept/connect: %+v", m)
	}
	if peer.Addr.Family != unix.AF_INET || *peerLen != unix.SizeofSockaddrInet4 {
		t.Fatalf("accept peer address family %d len %d", peer.Addr.Family, *peerLen)
	}
	sfd := int(m[100].Res)
	t.Cleanup(func() { unix.Close(sfd) })
	return sfd, cfd
}

func TestSocketOps(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		r := openRing(t, backend, Config{Entries: 16})
		lfd, addr := listenLoopback(t)
		sfd, cfd := connectPair(t, r, lfd, addr)

		// recv posted before the data exists (parks), then send.
		rbuf := make([]byte, 64)
		sqe := mustSQE(t, r)
		sqe.PrepRecv(sfd, rbuf, 0)
		sqe.UserData = 1
		if _, err := r.Submit(); err != nil {
			t.Fatal(err)
		}
		sqe = mustSQE(t, r)
		sqe.PrepSend(cfd, pinnedBytes(t, "ping"), 0)
		sqe.UserData = 2
		m := byUserData(t, waitCQEs(t, r, 2))
		if m[1].Res != 4 || m[2].Res != 4 || string(rbuf[:4]) != "ping" {
			t.Fatalf("send/recv: %+v %q", m, rbuf[:4])
		}

		// sendmsg with two iovecs, recvmsg into two iovecs.
		a, b := []byte("hello "), []byte("world")
		siov := []Iovec{{Base: &a[0]}, {Base: &b[0]}}
		siov[0].SetLen(len(a))
		siov[1].SetLen(len(b))
		smsg := &Msghdr{Iov: &siov[0]}
		smsg.SetIovlen(2)
		pinForTest(t, &a[0], &b[0], &siov[0], smsg)
		x, y := make([]byte, 3), make([]byte, 8)
		riov := []Iovec{{Base: &x[0]}, {Base: &y[0]}}
		riov[0].SetLen(3)
		riov[1].SetLen(8)
		rmsg := &Msghdr{Iov: &riov[0]}
		rmsg.SetIovlen(2)
		pinForTest(t, &riov[0], rmsg)
		sqe = mustSQE(t, r)
		sqe.PrepRecvmsg(cfd, rmsg, unix.MSG_WAITALL)
		sqe.UserData = 3
		sqe = mustSQE(t, r)
		sqe.PrepSendmsg(sfd, smsg, 0)
		sqe.UserData = 4
		m = byUserData(t, waitCQEs(t, r, 2))
		if m[3].Res != 11 || m[4].Res != 11 || string(x)+string(y) != "hello world" {
			t.Fatalf("sendmsg/recvmsg: %+v %q%q", m, x, y)
		}

		// poll_add waits for readability.
		sqe = mustSQE(t, r)
		sqe.PrepPollAdd(sfd, unix.POLLIN)
		sqe.UserData = 5
		if _, err := r.Submit(); err != nil {
			t.Fatal(err)
		}
		if n := r.PeekCQEs(make([]CQE, 1)); n != 0 {
			t.Fatal("poll completed without data")
		}
		if _, err := unix.Write(cfd, []byte("z")); err != nil {
			t.Fatal(err)
		}
		if c := waitCQEs(t, r, 1)[0]; c.UserData != 5 || c.Res&unix.POLLIN == 0 {
			t.Fatalf("poll: %+v", c)
		}
		unix.Read(sfd, rbuf[:1])
	})
}

// TestTimeoutsAndCancel: TIMEOUT, counted TIMEOUT, LINK_TIMEOUT on a recv that never gets
// data, and ASYNC_CANCEL of a pending recv.
func TestTimeoutsAndCancel(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		r := openRing(t, backend, Config{Entries: 16})
		lfd, addr := listenLoopback(t)
		sfd, _ := connectPair(t, r, lfd, addr)

		ts := &Timespec{}
		ts.SetDuration(int64(5 * time.Millisecond))
		start := time.Now()
		sqe := mustSQE(t, r)
		sqe.PrepTimeout(ts, 0, 0)
		sqe.UserData = 1
		if c := waitCQEs(t, r, 1)[0]; c.Res != -int32(unix.ETIME) || time.Since(start) < 5*time.Millisecond {
			t.Fatalf("timeout: %+v after %v", c, time.Since(start))
		}

		long := &Timespec{Sec: 60}
		pinForTest(t, ts, long)
		sqe = mustSQE(t, r)
		sqe.PrepTimeout(long, 1, 0)
		sqe.UserData = 2
		sqe = mustSQE(t, r)
		sqe.PrepNop()
		sqe.UserData = 3
		m := byUserData(t, waitCQEs(t, r, 2))
		if m[2].Res != 0 || m[3].Res != 0 {
			t.Fatalf("counted timeout: %+v", m)
		}

		buf := make([]byte, 8)
		sqe = mustSQE(t, r)
		sqe.PrepRecv(sfd, buf, 0)
		sqe.SetLink()
		sqe.UserData = 4
		sqe = mustSQE(t, r)
		sqe.PrepLinkTimeout(ts, 0)
		sqe.UserData = 5
		m = byUserData(t, waitCQEs(t, r, 2))
		if m[4].Res != -int32(unix.ECANCELED) || m[5].Res != -int32(unix.ETIME) {
			t.Fatalf("link timeout: %+v", m)
		}

		sqe = mustSQE(t, r)
		sqe.PrepRecv(sfd, buf, 0)
		sqe.UserData = 6
		if _, err := r.Submit(); err != nil {
			t.Fatal(err)
		}
		sqe = mustSQE(t, r)
		sqe.PrepCancel(6, 0)
		sqe.UserData = 7
		sqe = mustSQE(t, r)
		sqe.PrepCancel(12345, 0)
		sqe.UserData = 8
		m = byUserData(t, waitCQEs(t, r, 3))
		if m[6].Res != -int32(unix.ECANCELED) || m[7].Res != 0 || m[8].Res != -int32(unix.ENOENT) {
			t.Fatalf("cancel: %+v", m)
		}

		// Cancel every request on an fd at once.
		for ud := uint64(20); ud < 23; ud++ {
			sqe = mustSQE(t, r)
			sqe.PrepRecv(sfd, buf, 0)
			sqe.UserData = ud
		}
		if _, err := r.Submit(); err != nil {
			t.Fatal(err)
		}
		sqe = mustSQE(t, r)
		sqe.PrepCancelFd(sfd, CancelAll)
		sqe.UserData = 23
		m = byUserData(t, waitCQEs(t, r, 4))
		if m[20].Res != -int32(unix.ECANCELED) || m[22].Res != -int32(unix.ECANCELED) || m[23].Res != 3 {
			t.Fatalf("cancel all on fd: %+v", m)
		}
	})
}

func TestMultishotAccept(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		r := openRing(t, backend, Config{Entries: 16})
		if !r.Probe().Supported(OpAccept) {
			t.Fatal("accept unsupported")
		}
		lfd, addr := listenLoopback(t)
		sqe := mustSQE(t, r)
		sqe.PrepMultishotAccept(lfd, nil, nil, unix.SOCK_CLOEXEC)
		sqe.UserData = 1
		const clients = 3
		for i := 0; i < clients; i++ {
			sqe = mustSQE(t, r)
			sqe.PrepConnect(newSocket(t), addr, unix.SizeofSockaddrInet4)
			sqe.UserData = uint64(10 + i)
		}
		accepted := 0
		for _, c := range waitCQEs(t, r, 2*clients) {
			if c.UserData == 1 {
				if c.Res < 0 || !c.More() {
					t.Fatalf("multishot accept CQE %+v", c)
				}
				unix.Close(int(c.Res))
				accepted++
			} else if c.Res != 0 {
				t.Fatalf("connect %+v", c)
			}
		}
		if accepted != clients {
			t.Fatalf("accepted %d", accepted)
		}
		sqe = mustSQE(t, r)
		sqe.PrepCancel(1, 0)
		sqe.UserData = 2
		m := byUserData(t, waitCQEs(t, r, 2))
		if m[1].Res != -int32(unix.ECANCELED) || m[1].More() || m[2].Res != 0 {
			t.Fatalf("cancel multishot: %+v", m)
		}
	})
}

// TestSpliceFileToSocket links file → pipe → socket splices through the ring.
func TestSpliceFileToSocket(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		r := openRing(t, backend, Config{Entries: 16})
		lfd, addr := listenLoopback(t)
		sfd, cfd := connectPair(t, r, lfd, addr)
		f, _ := tempFile(t)
		content := bytes.Repeat([]byte("0123456789abcdef"), 1024) // 16 KiB
		f.Write(content)
		var p [2]int
		if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
			t.Fatal(err)
		}
		defer unix.Close(p[0])
		defer unix.Close(p[1])
		const off, n = 100, 8000
		sqe := mustSQE(t, r)
		sqe.PrepSplice(int(f.Fd()), off, p[1], -1, n, 0)
		sqe.SetLink()
		sqe.UserData = 1
		sqe = mustSQE(t, r)
		sqe.PrepSplice(p[0], -1, sfd, -1, n, 0)
		sqe.UserData = 2
		m := byUserData(t, waitCQEs(t, r, 2))
		if m[1].Res != n || m[2].Res != n {
			t.Fatalf("splice: %+v", m)
		}
		got := make([]byte, n)
		sqe = mustSQE(t, r)
		sqe.PrepRecv(cfd, got, unix.MSG_WAITALL)
		sqe.UserData = 3
		if c := waitCQEs(t, r, 1)[0]; c.Res != n || !bytes.Equal(got, content[off:off+n]) {
			t.Fatalf("received %d bytes, equal=%v", c.Res, bytes.Equal(got, content[off:off+n]))
		}
	})
}

func TestMsgRing(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		src := openRing(t, backend, Config{Entries: 8})
		dst := openRing(t, backend, Config{Entries: 8})
		sqe := mustSQE(t, src)
		sqe.PrepMsgRing(dst.Fd(), 4242, 0xfeed, 0)
		sqe.UserData = 1
		if c := waitCQEs(t, src, 1)[0]; c.Res != 0 {
			t.Fatalf("msg_ring sender: %+v", c)
		}
		if c := waitCQEs(t, dst, 1)[0]; c.UserData != 0xfeed || c.Res != 4242 {
			t.Fatalf("msg_ring target: %+v", c)
		}
		sqe = mustSQE(t, src)
		sqe.PrepMsgRing(-1, 1, 1, 0)
		sqe.UserData = 2
		if c := waitCQEs(t, src, 1)[0]; c.Res >= 0 {
			t.Fatalf("msg_ring to a bad fd: %+v", c)
		}
	})
}

// TestSlowPeerDoesNotBlock: a recv on a peer that never sends stays pending while file
// writes and other sockets complete on the same ring.
func TestSlowPeerDoesNotBlock(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		r := openRing(t, backend, Config{Entries: 16})
		lfd, addr := listenLoopback(t)
		slow, _ := connectPair(t, r, lfd, addr)
		fast, fastClient := connectPair(t, r, lfd, addr)
		f, _ := tempFile(t)
		buf := make([]byte, 16) // the recv stays pending until the ring closes
		pinForTest(t, &buf[0])
		sqe := mustSQE(t, r)
		sqe.PrepRecv(slow, buf, 0)
		sqe.UserData = 1
		// A blocking-mode socket must not block the loop either: fill the send buffer.
		big := make([]byte, 8<<20)
		pinForTest(t, &big[0]) // unused after the prep: waitCQEs' collection would free it
		sqe = mustSQE(t, r)
		sqe.PrepSend(fastClient, big, 0)
		sqe.UserData = 2
		sqe = mustSQE(t, r)
		sqe.PrepWrite(int(f.Fd()), pinnedBytes(t, "durable"), 0)
		sqe.UserData = 3
		fastBuf := make([]byte, 4096)
		pinForTest(t, &fastBuf[0])
		sqe = mustSQE(t, r)
		sqe.PrepRecv(fast, fastBuf, 0)
		sqe.UserData = 4
		got := byUserData(t, waitCQEs(t, r, 3))
		if _, ok := got[1]; ok {
			t.Fatalf("recv from the silent peer completed: %+v", got[1])
		}
		if got[2].Res <= 0 || got[3].Res != 7 || got[4].Res <= 0 {
			t.Fatalf("other ops: %+v", got)
		}
		disk, _ := os.ReadFile(f.Name())
		if string(disk) != "durable" {
			t.Fatalf("file %q", disk)
		}
		sqe = mustSQE(t, r)
		sqe.PrepCancel(1, 0)
		sqe.UserData = 5
		m := byUserData(t, waitCQEs(t, r, 2))
		if m[1].Res != -int32(unix.ECANCELED) {
			t.Fatalf("cancel: %+v", m)
		}
	})
}

// TestPeekFlushesDeferredTaskrun: with DEFER_TASKRUN (and COOP_TASKRUN) a socket completion
// is only posted when the owner enters the kernel; PeekCQEs alone must notice the TASKRUN
// flag and flush it, or the completion would never show up.
func TestPeekFlushesDeferredTaskrun(t *testing.T) {
	if why := uringUnavailable(); why != "" {
		t.Skipf("io_uring unavailable: %s", why)
	}
	for _, cfg := range []Config{
		{Entries: 8, SingleIssuer: true, DeferTaskrun: true},
		{Entries: 8, CoopTaskrun: true},
	} {
		func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			r := openRing(t, "uring", cfg)
			lfd, addr := listenLoopback(t)
			sfd, cfd := connectPair(t, r, lfd, addr)
			buf := make([]byte, 8)
			sqe := mustSQE(t, r)
			sqe.PrepRecv(sfd, buf, 0)
			sqe.UserData = 1
			if _, err := r.Submit(); err != nil {
				t.Fatal(err)
			}
			if _, err := unix.Write(cfd, []byte("late")); err != nil {
				t.Fatal(err)
			}
			cq := make([]CQE, 2)
			deadline := time.Now().Add(5 * time.Second)
			for {
				if n := r.PeekCQEs(cq); n == 1 && cq[0].Res == 4 && string(buf[:4]) == "late" {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%+v: completion never became visible through PeekCQEs", cfg)
				}
				runtime.Gosched()
			}
		}()
	}
}
