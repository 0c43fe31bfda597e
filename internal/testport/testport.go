// Package testport hands tests loopback addresses to bind later: real listeners that a
// test names before it starts them (a raft quorum's voter list, a broker's flags). It owns
// the draw and nothing else; only tests import it.
//
// A port the kernel hands out for ":0" lies in its ephemeral range (ip_local_port_range
// starts at 32768 by default), where any process's outgoing connection or ":0" listener
// may take it between the pick and the bind: on a busy machine, with test binaries of
// several packages running at once, that failed starts with "address already in use".
// Ports are drawn at random below that range instead, where only another process drawing
// the same way can collide, and never twice in one process.
package testport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
)

// The range Loopback draws from: below the default ephemeral range.
const drawnMin, drawnMax = 20000, 32768

// drawTriesMax bounds the draw before Loopback falls back to the kernel's choice.
const drawTriesMax = 1000

// drawn holds the ports handed out in this process (at most a few hundred over a
// package's tests, of the 12,768 in the range): a caller draws several ports before it
// binds any, and two draws of one free port gave two listeners one port.
var (
	drawnMu sync.Mutex
	drawn   = map[int]bool{}
)

// Loopback returns a 127.0.0.1 address whose port was free a moment ago and that this
// process has not handed out before.
func Loopback(tb testing.TB) string {
	tb.Helper()
	drawnMu.Lock()
	defer drawnMu.Unlock()
	for range drawTriesMax {
		port := drawnMin + rand.IntN(drawnMax-drawnMin)
		if drawn[port] {
			continue
		}
		addr := fmt.Sprintf("127.0.0.1:%d", port)
		if ln, err := net.Listen("tcp", addr); err == nil {
			ln.Close()
			drawn[port] = true
			return addr
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("pick a free port: %v", err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
