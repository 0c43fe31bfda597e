package netio

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// Replies from memory leave the ring driver by a plain non-blocking send(2) on the loop
// thread first; a ring SEND op takes only what the socket did not accept at once. A
// one-record produce answered in the loop turn that read it costs no ring op for the
// answer, no CQE and no second io_uring_enter that returns at once, and its bytes leave
// before the rest of the turn runs (docs/benchmarks.md, "Single-record latency, step 4").
// The kernel work is the same as the ring's: io_uring also tries a socket send inline
// when it is submitted, then arms a poll when the socket is full.
//
// The send goes through syscall.Syscall (unix.SendmsgN), not a raw call as the client's
// socket calls do: on the shard loop it never wakes the runtime's sysmon (the loop's own
// wait keeps its P out of the idle list), and the scheduler bookkeeping a raw call would
// save is under 1 % of the broker's CPU (docs/ring.md, "Non-obvious").

// sendInline writes as much of b as the socket takes now. It reports the bytes sent and
// false when the connection failed (failLoop was called).
func (c *ringConn) sendInline(b []byte, flags int) (int, bool) {
	for {
		n, err := unix.SendmsgN(c.fd, b, nil, nil, flags|unix.MSG_DONTWAIT)
		switch err {
		case nil:
			c.srv.stats.inlineSendBytes.Add(int64(n))
			return n, true
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			return 0, true
		default:
			c.failLoop(fmt.Errorf("send: %w", err))
			return 0, false
		}
	}
}
