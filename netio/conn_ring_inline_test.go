package netio_test

import (
	"bytes"
	"net"
	"testing"
	"time"

	"github.com/ringlog/ringlog/netio"
	"github.com/ringlog/ringlog/netio/wire"
)

// patternFetchHandler answers fetch n with 256 KiB of the byte n, so a reply that lost,
// doubled or reordered bytes between send(2) and the ring's SEND op shows in its content.
type patternFetchHandler struct{}

func (patternFetchHandler) Serve(req *netio.Request) {
	body := bytes.Repeat([]byte{byte(req.Header.CorrelationID)}, 256<<10)
	req.ReplyMessage(&wire.FetchResponse{Topics: []wire.FetchResponseTopic{{Topic: "t", Partitions: []wire.FetchResponsePartition{{Records: body}}}}})
}

// The ring driver writes replies from memory with send(2) on its loop and hands what a
// full socket did not take to a ring SEND op: replies bigger than the socket buffers, to a
// client that reads only once the server had to queue, arrive whole and in order, and a
// small reply to an idle socket takes no ring op.
func TestRingRepliesInlineThenRingOp(t *testing.T) {
	for _, driver := range []string{"ring", "ring-syscall"} {
		t.Run(driver, func(t *testing.T) {
			srv, addr := testServer(t, driver, patternFetchHandler{}, netio.Config{})
			c := dialRaw(t, addr)
			c.nc.(*net.TCPConn).SetReadBuffer(16 << 10)
			const requests = 32 // 8 MiB of replies, beyond the socket buffers (tcp_wmem allows 4 MiB)
			for i := 1; i <= requests; i++ {
				c.send(uint32(i), &wire.FetchRequest{})
			}
			for deadline := time.Now().Add(20 * time.Second); srv.Stats().RingSendOps == 0; {
				if time.Now().After(deadline) {
					t.Fatalf("no ring send op while the client did not read: %+v", srv.Stats())
				}
				time.Sleep(time.Millisecond) // waiting on another thread's progress, bounded above
			}
			for i := 1; i <= requests; i++ {
				h, payload := c.recv()
				if h.CorrelationID != uint32(i) {
					t.Fatalf("response %d has correlation id %d", i, h.CorrelationID)
				}
				var resp wire.FetchResponse
				if err := resp.ReadFrom(payload); err != nil {
					t.Fatal(err)
				}
				got := resp.Topics[0].Partitions[0].Records
				if len(got) != 256<<10 || !bytes.Equal(got, bytes.Repeat([]byte{byte(i)}, len(got))) {
					t.Fatalf("response %d: %d bytes, not 256 KiB of %d", i, len(got), i)
				}
			}
			before := srv.Stats()
			if before.InlineSendBytes == 0 {
				t.Fatalf("nothing sent inline: %+v", before)
			}
			var ver wire.APIVersionsResponse
			c.call(requests+1, &wire.APIVersionsRequest{}, &ver)
			// The loop counts the bytes once send(2) has returned, which can be after the
			// client read them.
			after := srv.Stats()
			for deadline := time.Now().Add(20 * time.Second); after.InlineSendBytes == before.InlineSendBytes && time.Now().Before(deadline); after = srv.Stats() {
				time.Sleep(time.Millisecond)
			}
			if after.RingSendOps != before.RingSendOps || after.InlineSendBytes <= before.InlineSendBytes {
				t.Fatalf("a small reply to an idle socket: ring ops %d -> %d, inline bytes %d -> %d",
					before.RingSendOps, after.RingSendOps, before.InlineSendBytes, after.InlineSendBytes)
			}
		})
	}
}
