package ring

import (
	"bytes"
	"errors"
	"testing"

	"golang.org/x/sys/unix"
)

// runUntil steps the reactor until cond holds (bounded).
func runUntil(t *testing.T, r *Reactor, cond func() bool) {
	t.Helper()
	for i := 0; !cond(); i++ {
		if i > 10000 {
			t.Fatal("reactor made no progress")
		}
		if err := r.RunOnce(true); err != nil {
			t.Fatal(err)
		}
	}
}

func TestReactorSockets(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		r := newReactor(t, backend, Config{Entries: 16, SingleIssuer: true, DeferTaskrun: true})
		lfd, addr := listenLoopback(t)

		// Multishot accept: one callback per connection while CQEFMore is set.
		var accepted []int
		err := r.Submit(func(s *SQE) { s.PrepMultishotAccept(lfd, nil, nil, unix.SOCK_CLOEXEC) },
			func(res int32, flags uint32) {
				if res < 0 || flags&CQEFMore == 0 {
					t.Errorf("accept callback res %d flags %#x", res, flags)
					return
				}
				accepted = append(accepted, int(res))
			})
		if err != nil {
			t.Fatal(err)
		}
		clients := []int{newSocket(t), newSocket(t)}
		connected := 0
		for _, c := range clients {
			err := r.Submit(func(s *SQE) { s.PrepConnect(c, addr, unix.SizeofSockaddrInet4) },
				func(res int32, _ uint32) {
					if res != 0 {
						t.Errorf("connect res %d", res)
					}
					connected++
				})
			if err != nil {
				t.Fatal(err)
			}
		}
		runUntil(t, r, func() bool { return len(accepted) == 2 && connected == 2 })
		for _, fd := range accepted {
			defer unix.Close(fd)
		}

		// Recv/Send with pinned heap buffers.
		got := make([]byte, 5)
		var recvRes, sendRes int32 = -1, -1
		if err := r.RecvAsync(accepted[0], got, func(res int32, _ uint32) { recvRes = res }); err != nil {
			t.Fatal(err)
		}
		// Which client maps to accepted[0] is unknown: send on both, read on one.
		for _, c := range clients {
			if err := r.SendAsync(c, []byte("hello"), func(res int32, _ uint32) { sendRes = res }); err != nil {
				t.Fatal(err)
			}
		}
		runUntil(t, r, func() bool { return recvRes >= 0 && sendRes >= 0 })
		if recvRes != 5 || string(got) != "hello" {
			t.Fatalf("recv %d %q", recvRes, got)
		}

		// Zero-copy egress helper, including a file shorter than asked for.
		f, _ := tempFile(t)
		content := bytes.Repeat([]byte("segment!"), 512) // 4 KiB
		f.Write(content)
		var p [2]int
		if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
			t.Fatal(err)
		}
		defer unix.Close(p[0])
		defer unix.Close(p[1])
		for _, tc := range []struct {
			off  int64
			n    uint32
			want int32
		}{{0, 1000, 1000}, {4000, 1000, 96}, {4096, 10, 0}} {
			res := int32(-1 << 30)
			if err := r.SpliceFileToSocket(int(f.Fd()), tc.off, p[0], p[1], clients[0], tc.n, func(v int32) { res = v }); err != nil {
				t.Fatal(err)
			}
			runUntil(t, r, func() bool { return res != -1<<30 })
			if res != tc.want {
				t.Fatalf("splice off %d n %d: %d, want %d", tc.off, tc.n, res, tc.want)
			}
		}
		// Whatever reached clients[0]'s peer equals the file ranges (after the unread
		// "hello" if the recv above consumed the other connection's copy).
		local, _ := unix.Getsockname(clients[0])
		peer, want := -1, []byte(nil)
		for i, fd := range accepted {
			remote, _ := unix.Getpeername(fd)
			if remote.(*unix.SockaddrInet4).Port == local.(*unix.SockaddrInet4).Port {
				peer = fd
				if i != 0 {
					want = []byte("hello")
				}
			}
		}
		if peer < 0 {
			t.Fatal("no accepted fd matches clients[0]")
		}
		want = append(append(want, content[:1000]...), content[4000:]...)
		recv := make([]byte, 0, len(want))
		buf := make([]byte, 4096)
		for len(recv) < len(want) {
			pfd := []unix.PollFd{{Fd: int32(peer), Events: unix.POLLIN}}
			if n, _ := unix.Poll(pfd, 5000); n != 1 {
				t.Fatalf("peer got %d of %d bytes, then nothing", len(recv), len(want))
			}
			n, err := unix.Read(peer, buf)
			if err != nil || n == 0 {
				t.Fatalf("read peer: %d %v (got %d of %d)", n, err, len(recv), len(want))
			}
			recv = append(recv, buf[:n]...)
		}
		if !bytes.Equal(recv, want) {
			t.Fatalf("peer received %d bytes, mismatch", len(recv))
		}
	})
}

func TestSendZC(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		r := newReactor(t, backend, Config{Entries: 8})
		lfd, addr := listenLoopback(t)
		sfd, cfd := connectPair(t, r.Ring(), lfd, addr)
		msg := bytes.Repeat([]byte("zc"), 32<<10) // 64 KiB
		var events []string
		notified := false
		err := r.SendZCAsync(cfd, msg, func(res int32, flags uint32) {
			switch {
			case flags&CQEFNotif != 0:
				events = append(events, "notif")
				notified = true
			case res > 0 && flags&CQEFMore != 0:
				events = append(events, "sent")
			default:
				t.Errorf("unexpected CQE res %d flags %#x", res, flags)
				notified = true
			}
		})
		if errors.Is(err, ErrUnsupported) && backend == "uring" && !kernelAtLeast(t, OpSendZC.MinKernel()) {
			t.Skipf("%v: the kernel is older", err)
		}
		if err != nil {
			t.Fatal(err)
		}
		got := make([]byte, 0, len(msg))
		buf := make([]byte, 64<<10)
		for i := 0; !notified || len(got) < len(msg); i++ {
			if i > 10000 {
				t.Fatalf("no progress: events %v, received %d", events, len(got))
			}
			r.RunOnce(false)
			if n, _, _ := unix.Recvfrom(sfd, buf, unix.MSG_DONTWAIT); n > 0 {
				got = append(got, buf[:n]...)
			}
		}
		if len(events) != 2 || events[0] != "sent" || events[1] != "notif" {
			t.Fatalf("events %v, want [sent notif]", events)
		}
		if !bytes.Equal(got, msg) {
			t.Fatalf("received %d bytes, mismatch", len(got))
		}
	})
}
