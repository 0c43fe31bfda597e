package ring

import (
	"testing"
)

// TestPrepPointersEscape: every prep helper that hands the kernel a pointer makes its
// object escape, so a caller's local buffer, iovec array, msghdr, sockaddr, timespec or
// path is allocated on the heap, never on the goroutine stack (which moves when it grows,
// leaving the kernel the old address: CI at 99623db). Each case would allocate nothing if
// the compiler kept its local on the stack.
func TestPrepPointersEscape(t *testing.T) {
	var sqe SQE
	cases := []struct {
		name string
		prep func()
	}{
		{"PrepRead", func() { var b [64]byte; sqe.PrepRead(0, b[:], 0) }},
		{"PrepWrite", func() { var b [64]byte; sqe.PrepWrite(0, b[:], 0) }},
		{"PrepReadFixed", func() { var b [64]byte; sqe.PrepReadFixed(0, b[:], 0, 0) }},
		{"PrepWriteFixed", func() { var b [64]byte; sqe.PrepWriteFixed(0, b[:], 0, 0) }},
		{"PrepSend", func() { var b [64]byte; sqe.PrepSend(0, b[:], 0) }},
		{"PrepSendZC", func() { var b [64]byte; sqe.PrepSendZC(0, b[:], 0) }},
		{"PrepRecv", func() { var b [64]byte; sqe.PrepRecv(0, b[:], 0) }},
		{"PrepReadv", func() { var v [2]Iovec; sqe.PrepReadv(0, v[:], 0) }},
		{"PrepWritev", func() { var v [2]Iovec; sqe.PrepWritev(0, v[:], 0) }},
		{"PrepSendmsg", func() { var m Msghdr; sqe.PrepSendmsg(0, &m, 0) }},
		{"PrepRecvmsg", func() { var m Msghdr; sqe.PrepRecvmsg(0, &m, 0) }},
		{"PrepAccept/addr", func() { var a RawSockaddrAny; sqe.PrepAccept(0, &a, nil, 0) }},
		{"PrepAccept/addrLen", func() { var n uint32; sqe.PrepAccept(0, nil, &n, 0) }},
		{"PrepMultishotAccept", func() { var a RawSockaddrAny; sqe.PrepMultishotAccept(0, &a, nil, 0) }},
		{"PrepConnect", func() { var a RawSockaddrAny; sqe.PrepConnect(0, &a, 16) }},
		{"PrepTimeout", func() { var ts Timespec; sqe.PrepTimeout(&ts, 0, 0) }},
		{"PrepLinkTimeout", func() { var ts Timespec; sqe.PrepLinkTimeout(&ts, 0) }},
		{"PrepOpenat", func() { var p [8]byte; sqe.PrepOpenat(0, &p[0], 0, 0) }},
		{"PrepUnlinkat", func() { var p [8]byte; sqe.PrepUnlinkat(0, &p[0], 0) }},
		{"PrepRenameat/old", func() { var p [8]byte; sqe.PrepRenameat(0, &p[0], 0, nil, 0) }},
		{"PrepRenameat/new", func() { var p [8]byte; sqe.PrepRenameat(0, nil, 0, &p[0], 0) }},
		{"PrepStatx/path", func() { var p [8]byte; sqe.PrepStatx(0, &p[0], 0, 0, nil) }},
		{"PrepStatx/out", func() { var st Statx; sqe.PrepStatx(0, nil, 0, 0, &st) }},
		{"CString", func() { sqe.PrepOpenat(0, CString("/a"), 0, 0) }},
	}
	for _, c := range cases {
		if n := testing.AllocsPerRun(10, c.prep); n < 1 {
			t.Errorf("%s: %v allocations per prep: its argument stayed on the goroutine stack", c.name, n)
		}
	}
}

// TestRecvIntoLocalBufferSurvivesStackMove: a recv into a buffer the caller declared as a
// local array completes into that buffer although the goroutine's stack moved between the
// prep and the completion (waitCQEs moves it). Before the prep helpers made their pointers
// escape, the array lived on the stack and the kernel wrote "ping" into the old one.
func TestRecvIntoLocalBufferSurvivesStackMove(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		r := openRing(t, backend, Config{Entries: 16})
		lfd, addr := listenLoopback(t)
		sfd, cfd := connectPair(t, r, lfd, addr)
		if got := recvLocal(t, r, sfd, cfd); got != "ping" {
			t.Fatalf("recv into a local buffer read %q, want %q", got, "ping")
		}
	})
}

// recvLocal queues a recv into a local array and a send of "ping" to it, both submitted
// by waitCQEs after it moved the stack, and returns what arrived.
func recvLocal(t *testing.T, r Ring, sfd, cfd int) string {
	var buf [16]byte
	sqe := mustSQE(t, r)
	sqe.PrepRecv(sfd, buf[:], 0)
	sqe.UserData = 1
	sqe = mustSQE(t, r)
	sqe.PrepSend(cfd, pinnedBytes(t, "ping"), 0)
	sqe.UserData = 2
	if m := byUserData(t, waitCQEs(t, r, 2)); m[1].Res != 4 || m[2].Res != 4 {
		t.Fatalf("recv/send: %+v", m)
	}
	return string(buf[:4])
}
