package netio_test

import (
	"bytes"
	"fmt"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/ringlog/ringlog/netio"
	"github.com/ringlog/ringlog/netio/wire"
)

// bigReplyHandler answers every request at once with a metadata reply of about
// replyBytes, and counts what it served.
type bigReplyHandler struct {
	served chan struct{}
	reply  *wire.MetadataResponse
}

func (h *bigReplyHandler) Serve(req *netio.Request) {
	h.served <- struct{}{}
	req.ReplyMessage(h.reply)
}

// Replies are charged to the connection's budget until written: a client that pipelines
// and never reads stops being read after about a budget's worth of replies, instead of
// the server holding 64 of them (issue 10 #6).
func TestServerResponsesCharged(t *testing.T) { forEachDriver(t, testServerResponsesCharged) }

func testServerResponsesCharged(t *testing.T, driver string) {
	topics := make([]wire.MetadataTopic, 20000) // ~2 MiB as charged, ~300 KiB encoded
	for i := range topics {
		topics[i] = wire.MetadataTopic{Topic: fmt.Sprintf("topic-%06d", i)}
	}
	h := &bigReplyHandler{served: make(chan struct{}, 1000), reply: &wire.MetadataResponse{Topics: topics}}
	const connBudget = 1 << 20
	srv, addr := testServer(t, driver, h, netio.Config{FrameBytesMax: 64 << 10, ConnBufferBytesMax: connBudget})
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.(*net.TCPConn).SetReadBuffer(4 << 10) // keep the kernel from absorbing the replies
	var frames []byte
	const requests = 60
	for i := range requests {
		frames = wire.AppendRequest(frames, uint32(i), &wire.MetadataRequest{Topics: []string{"x"}})
	}
	if _, err := nc.Write(frames); err != nil {
		t.Fatal(err)
	}
	served := 0
	for served < requests {
		select {
		case <-h.served:
			served++
			continue
		case <-time.After(300 * time.Millisecond):
		}
		break
	}
	// The kernel's socket buffers take a few replies; the server itself holds at most
	// about its budget plus one reply.
	if served >= requests {
		t.Fatalf("server served all %d requests of a client that reads nothing", requests)
	}
	if held := srv.BufferedBytes(); held > connBudget+4<<20 {
		t.Fatalf("server holds %d bytes for one connection, budget %d", held, connBudget)
	}
	t.Logf("%d of %d requests served while the client read nothing; %d bytes held", served, requests, srv.BufferedBytes())
}

// A connection beyond ConnectionsPerAddressMax from one IP is closed at accept; another
// IP is still admitted.
func TestServerConnectionsPerAddress(t *testing.T) {
	forEachDriver(t, func(t *testing.T, driver string) {
		h := &bigReplyHandler{served: make(chan struct{}, 100), reply: &wire.MetadataResponse{}}
		srv, addr := testServer(t, driver, h, netio.Config{ConnectionsMax: 10, ConnectionsPerAddressMax: 2})
		dialFrom := func(ip string) net.Conn {
			d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
			nc, err := d.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { nc.Close() })
			return nc
		}
		works := func(nc net.Conn) bool {
			nc.SetDeadline(time.Now().Add(5 * time.Second))
			if _, err := nc.Write(wire.AppendRequest(nil, 1, &wire.APIVersionsRequest{})); err != nil {
				return false
			}
			_, _, _, err := wire.ReadResponse(nc, nil, 1<<20)
			return err == nil
		}
		a, b, c := dialFrom("127.0.0.2"), dialFrom("127.0.0.2"), dialFrom("127.0.0.2")
		if !works(a) || !works(b) {
			t.Fatal("connections within the per-address limit refused")
		}
		if works(c) {
			t.Fatal("third connection from one address served, limit 2")
		}
		if !works(dialFrom("127.0.0.3")) {
			t.Fatal("another address refused")
		}
		if srv.Stats().RefusedConns != 1 {
			t.Errorf("RefusedConns = %d, want 1", srv.Stats().RefusedConns)
		}
	})
}

// On the ring drivers a produce frame within frameUpfrontBytesMax is charged whole when its
// header is parsed, and received into one buffer, if every budget then holds at most half
// of its maximum; a frame that would take one past half is charged as its bytes arrive,
// as on the net driver, so headers alone never hold more than half of a budget.
func TestServerFrameChargedUpFront(t *testing.T) {
	for _, driver := range []string{"ring", "ring-syscall"} {
		t.Run(driver, func(t *testing.T) { testServerFrameChargedUpFront(t, driver) })
	}
}

func testServerFrameChargedUpFront(t *testing.T, driver string) {
	h := &holdHandler{served: make(chan *netio.Request, 1)}
	const frameBytesMax = 1 << 20 // the connection's budget too: half of it is 512 KiB
	srv, addr := testServer(t, driver, h, netio.Config{FrameBytesMax: frameBytesMax, ConnBufferBytesMax: frameBytesMax})
	for i, tc := range []struct {
		records int
		upfront bool
	}{{400 << 10, true}, {700 << 10, false}, {500 << 10, true}} {
		c := dialRaw(t, addr)
		records := bytes.Repeat([]byte{byte('a' + i)}, tc.records)
		corr := uint32(20 + i)
		frame := wire.AppendRequest(nil, corr, &wire.ProduceRequest{Acks: wire.AcksLeader, Topics: []wire.ProduceTopic{{Topic: "t", Partitions: []wire.ProducePartition{{Records: records}}}}})
		if _, err := c.nc.Write(frame[:4<<10]); err != nil {
			t.Fatal(err)
		}
		held := waitBuffered(t, srv, func(n int64) bool { return n != 0 })
		if tc.upfront && held < int64(tc.records) || !tc.upfront && held > 64<<10 {
			t.Fatalf("%d-byte records: server holds %d bytes after the first 4 KiB (charged whole: %v)", tc.records, held, tc.upfront)
		}
		if _, err := c.nc.Write(frame[4<<10:]); err != nil {
			t.Fatal(err)
		}
		req := <-h.served
		if got := req.Body.(*wire.ProduceRequest).Topics[0].Partitions[0].Records; !bytes.Equal(got, records) {
			t.Fatalf("records differ (%d bytes, want %d)", len(got), len(records))
		}
		req.ReplyMessage(&wire.ProduceResponse{})
		if hdr, _ := c.recv(); hdr.CorrelationID != corr {
			t.Fatalf("corr %d, want %d", hdr.CorrelationID, corr)
		}
		c.nc.Close()
		waitBuffered(t, srv, func(n int64) bool { return n == 0 })
	}
}

// waitBuffered spins until the server's buffered bytes satisfy ok and returns them.
func waitBuffered(t *testing.T, srv *netio.Server, ok func(int64) bool) int64 {
	t.Helper()
	for spins := 0; ; spins++ {
		if n := srv.BufferedBytes(); ok(n) {
			return n
		}
		if spins > 1e7 {
			t.Fatalf("server holds %d bytes", srv.BufferedBytes())
		}
		runtime.Gosched()
	}
}
