package netio

import (
	"context"
	"net"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// TestListenersArePlainTCP: the broker's listeners are TCP sockets, not MPTCP ones (Go's
// default for listeners where the kernel has MPTCP), and so are the connections they
// accept: an accepted MPTCP socket refuses SEND_ZC and costs a protocol layer per send.
func TestListenersArePlainTCP(t *testing.T) {
	for name, listen := range map[string]func(context.Context, string) (net.Listener, error){
		"Listen": Listen, "ListenShard": ListenShard,
	} {
		t.Run(name, func(t *testing.T) {
			ln, err := listen(context.Background(), "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			if p := socketProtocol(t, ln.(syscall.Conn)); p != unix.IPPROTO_TCP {
				t.Fatalf("listener protocol %d, want TCP (%d); MPTCP is %d", p, unix.IPPROTO_TCP, unix.IPPROTO_MPTCP)
			}
			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			a, err := ln.Accept()
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			if p := socketProtocol(t, a.(syscall.Conn)); p != unix.IPPROTO_TCP {
				t.Fatalf("accepted connection protocol %d, want TCP (%d)", p, unix.IPPROTO_TCP)
			}
		})
	}
}

func socketProtocol(t *testing.T, sc syscall.Conn) int {
	t.Helper()
	rc, err := sc.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var proto int
	var gerr error
	if err := rc.Control(func(fd uintptr) { proto, gerr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_PROTOCOL) }); err != nil {
		t.Fatal(err)
	}
	if gerr != nil {
		t.Fatal(gerr)
	}
	return proto
}
