package ring

import (
	"errors"
	"testing"

	"golang.org/x/sys/unix"
)

// TestBufRingMultishotRecv: one multishot recv with provided buffers serves several
// messages, each in a buffer the completion names; recycled buffers are reused; an empty
// buffer ring ends the multishot with -ENOBUFS and leaves the data in the socket.
func TestBufRingMultishotRecv(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		r := openRing(t, backend, Config{Entries: 16})
		lfd, addr := listenLoopback(t)
		sfd, cfd := connectPair(t, r, lfd, addr)
		br, err := NewBufRing(r, 7, 2, 64)
		if err != nil {
			t.Fatalf("NewBufRing: %v", err)
		}
		defer br.Close()
		if br.BufSize() != 4096 {
			t.Fatalf("BufSize %d", br.BufSize())
		}
		sqe := mustSQE(t, r)
		sqe.PrepRecvMultishot(sfd, br.Group(), 0)
		sqe.UserData = 1
		if _, err := r.Submit(); err != nil {
			t.Fatal(err)
		}
		recvOne := func(msg string) CQE {
			t.Helper()
			if _, err := unix.Write(cfd, []byte(msg)); err != nil {
				t.Fatal(err)
			}
			return waitCQEs(t, r, 1)[0]
		}
		used := map[uint16]bool{}
		for _, msg := range []string{"first", "second"} {
			c := recvOne(msg)
			if c.UserData != 1 || c.Res != int32(len(msg)) || c.Flags&CQEFBuffer == 0 || !c.More() {
				t.Fatalf("%s: CQE %+v", msg, c)
			}
			bid := BufferID(c.Flags)
			if used[bid] {
				t.Fatalf("buffer %d handed out twice", bid)
			}
			used[bid] = true
			if got := string(br.Buf(bid, int(c.Res))); got != msg {
				t.Fatalf("buffer %d holds %q, want %q", bid, got, msg)
			}
			if msg == "first" {
				br.Recycle(bid) // back in the ring: the third message may land in it
				delete(used, bid)
			}
		}
		c := recvOne("third")
		if c.Res != 5 || !c.More() || string(br.Buf(BufferID(c.Flags), 5)) != "third" {
			t.Fatalf("third: %+v", c)
		}
		// Both buffers are now out: the next message ends the multishot.
		c = recvOne("fourth")
		if c.Res != -int32(unix.ENOBUFS) || c.More() {
			t.Fatalf("with no buffers: %+v, want -ENOBUFS without MORE", c)
		}
		got := make([]byte, 16)
		if n, _ := unix.Read(sfd, got); string(got[:n]) != "fourth" {
			t.Fatalf("socket lost the unreceived message: %q", got[:n])
		}

		// Bad arguments are errors, not crashes.
		if _, err := NewBufRing(r, 8, 3, 64); err == nil {
			t.Fatal("non-power-of-two entries accepted")
		}
		if _, err := NewBufRing(r, 7, 2, 64); err == nil {
			t.Fatal("duplicate group accepted")
		} else if errors.Is(err, ErrUnsupported) {
			t.Fatal(err)
		}
	})
}
