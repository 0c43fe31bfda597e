package netio_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ringlog/ringlog/netio/wire"

	"github.com/ringlog/ringlog/engine/batch"
	"github.com/ringlog/ringlog/netio"
	"github.com/ringlog/ringlog/netio/fakebroker"
	"github.com/ringlog/ringlog/ring"
)

// drivers are the server's I/O drivers; every server test runs on each.
// "ring-syscall" is the ring driver on the ring package's syscall backend (the fallback
// where io_uring is unavailable).
var drivers = []string{"net", "ring", "ring-syscall"}

func forEachDriver(t *testing.T, test func(t *testing.T, driver string)) {
	for _, d := range drivers {
		t.Run(d, func(t *testing.T) { test(t, d) })
	}
}

// testServer starts a netio.Server for h on 127.0.0.1 with the given driver and returns
// its address. The server is closed at cleanup.
func testServer(t testing.TB, driver string, h netio.Handler, cfg netio.Config) (*netio.Server, string) {
	t.Helper()
	srv, addr, stop := startServer(t, driver, h, cfg)
	t.Cleanup(func() {
		srv.Close()
		stop()
	})
	return srv, addr
}

// startServer starts the server; stop (after Close or Shutdown) waits for the driver to
// end: Serve's return for "net", the reactor loop for "ring".
func startServer(t testing.TB, driver string, h netio.Handler, cfg netio.Config) (*netio.Server, string, func()) {
	t.Helper()
	ln, err := netio.ListenShard(context.Background(), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := netio.NewServer(h, cfg)
	switch driver {
	case "net":
		served := make(chan error, 1)
		go func() { served <- srv.Serve(ln, 0) }()
		return srv, ln.Addr().String(), func() {
			if err := <-served; !errors.Is(err, netio.ErrServerClosed) {
				t.Errorf("Serve returned %v", err)
			}
		}
	case "ring", "ring-syscall", "ring-nosendzc":
		rcfg := ring.Config{Entries: 256, SingleIssuer: true, DeferTaskrun: true, Backend: "uring"}
		switch driver {
		case "ring-syscall":
			rcfg = ring.Config{Entries: 256, Backend: "syscall"}
		case "ring-nosendzc": // a kernel before SEND_ZC (Linux 6.0)
			rcfg.HideOps = []ring.Opcode{ring.OpSendZC}
		}
		ready := make(chan error, 1)
		loopDone := make(chan struct{})
		var reactor *ring.Reactor
		err := ring.StartPinned(-1, rcfg, func(r *ring.Reactor) {
			defer close(loopDone)
			reactor = r
			if err := srv.ServeRing(r, ln.(*net.TCPListener), 0); err != nil {
				ready <- err
				return
			}
			ready <- nil
			if err := r.Run(); err != nil {
				t.Errorf("reactor: %v", err)
			}
		})
		if err != nil && driver == "ring" {
			t.Skipf("io_uring unavailable here: %v", err)
		}
		if err == nil {
			err = <-ready
		}
		if err != nil {
			t.Fatal(err)
		}
		return srv, ln.Addr().String(), func() {
			reactor.Stop()
			<-loopDone
			ln.Close()
		}
	}
	t.Fatalf("unknown driver %q", driver)
	return nil, "", nil
}

// rawClient speaks frames over a plain TCP connection, for protocol-level tests.
type rawClient struct {
	t   testing.TB
	nc  net.Conn
	buf []byte
}

func dialRaw(t testing.TB, addr string) *rawClient {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return &rawClient{t: t, nc: nc}
}

func (c *rawClient) send(corr uint32, m wire.Message) {
	c.t.Helper()
	if _, err := c.nc.Write(wire.AppendRequest(nil, corr, m)); err != nil {
		c.t.Fatal(err)
	}
}

func (c *rawClient) recv() (wire.ResponseHeader, []byte) {
	c.t.Helper()
	c.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	h, payload, buf, err := wire.ReadResponse(c.nc, c.buf, 256<<20)
	c.buf = buf
	if err != nil {
		c.t.Fatalf("read response: %v", err)
	}
	return h, payload
}

// call sends m and decodes the response into resp.
func (c *rawClient) call(corr uint32, m wire.Message, resp wire.Message) {
	c.t.Helper()
	c.send(corr, m)
	h, payload := c.recv()
	if h.CorrelationID != corr || h.API != m.API() {
		c.t.Fatalf("response header %+v for request %s corr %d", h, m.API(), corr)
	}
	if h.ErrorCode != wire.ErrNone {
		msg, _ := wire.DecodeErrorPayload(payload)
		c.t.Fatalf("%s: frame error %s: %s", m.API(), h.ErrorCode.Name(), msg)
	}
	if err := resp.ReadFrom(payload); err != nil {
		c.t.Fatal(err)
	}
}

// expectClosed asserts the server closes the connection (after any pending bytes).
func (c *rawClient) expectClosed() {
	c.t.Helper()
	c.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	n, err := io.Copy(io.Discard, c.nc)
	if err != nil {
		c.t.Fatalf("connection not closed by server: %v (%d bytes)", err, n)
	}
}

func buildBatch(t testing.TB, codec batch.Codec, first, count int) []byte {
	t.Helper()
	b := batch.NewBuilder(batch.BuilderOptions{Codec: codec})
	for i := first; i < first+count; i++ {
		b.Append(int64(1_700_000_000_000+i), []byte(fmt.Sprintf("k%d", i)), []byte(fmt.Sprintf("value-%d", i)), []batch.RecordHeader{{Key: "h", Value: []byte("v")}})
	}
	out, err := b.Build(nil)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func decodeValues(t testing.TB, records []byte, from int64) []string {
	t.Helper()
	var values []string
	for len(records) > 0 {
		h, err := batch.ParseHeader(records)
		if err != nil || h.Size() > len(records) {
			break // trailing partial batch
		}
		err = batch.Decode(records[:h.Size()], func(offset, ts int64, r *batch.Record) error {
			if offset >= from {
				values = append(values, string(r.Value))
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		records = records[h.Size():]
	}
	return values
}

func createTopic(t testing.TB, c *rawClient, name string, partitions int32) {
	t.Helper()
	var resp wire.CreateTopicsResponse
	c.call(1, &wire.CreateTopicsRequest{Topics: []wire.CreateTopic{{Topic: name, Partitions: partitions, ReplicationFactor: 1}}}, &resp)
	if resp.Topics[0].ErrorCode != wire.ErrNone {
		t.Fatalf("create %s: %s", name, resp.Topics[0].ErrorMessage)
	}
}

func TestServerProduceFetchZeroCopy(t *testing.T) { forEachDriver(t, testServerProduceFetchZeroCopy) }

func testServerProduceFetchZeroCopy(t *testing.T, driver string) {
	for _, egress := range []netio.Egress{netio.EgressSendfile, netio.EgressCopy} {
		t.Run(fmt.Sprint("egress", egress), func(t *testing.T) {
			fake := fakebroker.New(t.TempDir(), nil)
			t.Cleanup(fake.Close)
			srv, addr := testServer(t, driver, fake, netio.Config{Egress: egress})
			c := dialRaw(t, addr)
			createTopic(t, c, "orders", 2)
			var pr wire.ProduceResponse
			for i := range 3 {
				c.call(uint32(10+i), &wire.ProduceRequest{Acks: wire.AcksLeader, TimeoutMs: 1000, Topics: []wire.ProduceTopic{{Topic: "orders", Partitions: []wire.ProducePartition{
					{Partition: 1, Records: buildBatch(t, batch.CodecZstd, i*10, 10)},
				}}}}, &pr)
				if p := pr.Topics[0].Partitions[0]; p.ErrorCode != wire.ErrNone || p.BaseOffset != int64(i*10) {
					t.Fatalf("produce %d: %+v", i, p)
				}
			}
			var fr wire.FetchResponse
			c.call(20, &wire.FetchRequest{MaxBytes: 1 << 20, Topics: []wire.FetchTopic{{Topic: "orders", Partitions: []wire.FetchPartition{{Partition: 1, FetchOffset: 15, MaxBytes: 1 << 20}}}}}, &fr)
			p := fr.Topics[0].Partitions[0]
			if p.ErrorCode != wire.ErrNone || p.HighWatermark != 30 {
				t.Fatalf("fetch: %+v", p)
			}
			values := decodeValues(t, p.Records, 15)
			if len(values) != 15 || values[0] != "value-15" || values[14] != "value-29" {
				t.Fatalf("fetched %d values: %v", len(values), values)
			}
			// Out of range gives a partition error, not a frame error.
			c.call(21, &wire.FetchRequest{Topics: []wire.FetchTopic{{Topic: "orders", Partitions: []wire.FetchPartition{{Partition: 1, FetchOffset: 31, MaxBytes: 1 << 20}}}}}, &fr)
			if code := fr.Topics[0].Partitions[0].ErrorCode; code != wire.ErrOffsetOutOfRange {
				t.Fatalf("fetch above high watermark: %s", code.Name())
			}
			// Counted once the batch's last send completed, which precedes the next
			// response.
			// The net driver honours Egress; the ring driver always splices.
			st := srv.Stats()
			copied := egress == netio.EgressCopy && driver == "net"
			if !copied && (st.SendfileBytes == 0 || st.CopiedFileBytes != 0) ||
				copied && (st.CopiedFileBytes == 0 || st.SendfileBytes != 0) {
				t.Fatalf("egress %d: stats %+v", egress, st)
			}
		})
	}
}

// reverseHandler holds n requests and then answers them newest first, so the server's
// in-order guarantee is what puts the responses back in order.
type reverseHandler struct {
	n    int
	mu   sync.Mutex
	held []*netio.Request
}

func (h *reverseHandler) Serve(req *netio.Request) {
	h.mu.Lock()
	h.held = append(h.held, req)
	if len(h.held) < h.n {
		h.mu.Unlock()
		return
	}
	held := h.held
	h.held = nil
	h.mu.Unlock()
	for i := len(held) - 1; i >= 0; i-- {
		req := held[i]
		if req.Header.API == wire.APIProduce {
			req.ReplyMessage(&wire.ProduceResponse{})
			continue
		}
		req.ReplyMessage(&wire.MetadataResponse{BrokerID: int32(req.Header.CorrelationID)})
	}
}

func TestServerPipelinedResponsesInRequestOrder(t *testing.T) {
	forEachDriver(t, testServerPipelinedResponsesInRequestOrder)
}

func testServerPipelinedResponsesInRequestOrder(t *testing.T, driver string) {
	const requests = 40
	_, addr := testServer(t, driver, &reverseHandler{n: requests}, netio.Config{})
	c := dialRaw(t, addr)
	// All frames concatenated in one write, with an acks=0 produce in the middle that must
	// get no response.
	var stream []byte
	for i := range requests {
		if i == requests/2 {
			stream = wire.AppendRequest(stream, 9999, &wire.ProduceRequest{Acks: wire.AcksNone, Topics: []wire.ProduceTopic{{Topic: "t"}}})
			continue
		}
		stream = wire.AppendRequest(stream, uint32(i), &wire.MetadataRequest{})
	}
	if _, err := c.nc.Write(stream); err != nil {
		t.Fatal(err)
	}
	for i := range requests {
		if i == requests/2 {
			continue
		}
		h, payload := c.recv()
		var m wire.MetadataResponse
		if err := m.ReadFrom(payload); err != nil {
			t.Fatal(err)
		}
		if h.CorrelationID != uint32(i) || m.BrokerID != int32(i) {
			t.Fatalf("response %d: corr %d body %d", i, h.CorrelationID, m.BrokerID)
		}
	}
}

func TestServerFrameLevelErrorsKeepConnection(t *testing.T) {
	forEachDriver(t, testServerFrameLevelErrorsKeepConnection)
}

func testServerFrameLevelErrorsKeepConnection(t *testing.T, driver string) {
	fake := fakebroker.New(t.TempDir(), nil)
	t.Cleanup(fake.Close)
	_, addr := testServer(t, driver, fake, netio.Config{})
	c := dialRaw(t, addr)

	frame := func(api, version uint16, corr uint32, payload []byte) []byte {
		b := binary.BigEndian.AppendUint32(nil, uint32(8+len(payload)))
		b = binary.BigEndian.AppendUint16(b, api)
		b = binary.BigEndian.AppendUint16(b, version)
		b = binary.BigEndian.AppendUint32(b, corr)
		return append(b, payload...)
	}
	cases := []struct {
		name  string
		frame []byte
		code  wire.ErrorCode
	}{
		{"unknown api", frame(999, 0, 1, []byte("whatever")), wire.ErrUnknownAPI},
		{"unsupported version", frame(uint16(wire.APIMetadata), 7, 2, nil), wire.ErrUnsupportedVersion},
		{"garbage payload", frame(uint16(wire.APIProduce), 0, 3, []byte{0xde, 0xad, 0xbe, 0xef, 0x7f, 0xff, 0xff, 0xff}), wire.ErrInvalidRequest},
		{"trailing bytes", frame(uint16(wire.APIMetadata), 0, 4, []byte{0, 0, 0, 0, 1}), wire.ErrInvalidRequest},
	}
	for _, tc := range cases {
		if _, err := c.nc.Write(tc.frame); err != nil {
			t.Fatal(err)
		}
		h, payload := c.recv()
		msg, err := wire.DecodeErrorPayload(payload)
		if err != nil || h.ErrorCode != tc.code || msg == "" {
			t.Fatalf("%s: got %s %q %v", tc.name, h.ErrorCode.Name(), msg, err)
		}
		// The connection still serves well-formed requests.
		var ver wire.APIVersionsResponse
		c.call(100, &wire.APIVersionsRequest{ClientID: "test"}, &ver)
		if len(ver.APIs) != len(wire.KnownAPIs()) || ver.FrameBytesMax != wire.FrameBytesMaxDefault {
			t.Fatalf("%s: api versions after error: %+v", tc.name, ver)
		}
	}
}

func TestServerOversizedAndShortFramesClose(t *testing.T) {
	forEachDriver(t, testServerOversizedAndShortFramesClose)
}

func testServerOversizedAndShortFramesClose(t *testing.T, driver string) {
	fake := fakebroker.New(t.TempDir(), nil)
	t.Cleanup(fake.Close)
	srv, addr := testServer(t, driver, fake, netio.Config{FrameBytesMax: 4096})
	for _, tc := range []struct {
		name   string
		length uint32
		code   wire.ErrorCode
	}{
		{"oversized", 4097, wire.ErrFrameTooLarge},
		{"huge", 0xfffffff0, wire.ErrFrameTooLarge},
		{"below header", 3, wire.ErrInvalidRequest},
	} {
		c := dialRaw(t, addr)
		hdr := binary.BigEndian.AppendUint32(nil, tc.length)
		hdr = append(hdr, 0, 1, 0, 0, 0, 0, 0, 42)
		if _, err := c.nc.Write(hdr); err != nil {
			t.Fatal(err)
		}
		h, payload := c.recv()
		msg, _ := wire.DecodeErrorPayload(payload)
		if h.ErrorCode != tc.code || h.CorrelationID != 42 {
			t.Fatalf("%s: got %+v %q", tc.name, h, msg)
		}
		c.expectClosed()
	}
	if got := srv.BufferedBytes(); got != 0 {
		t.Fatalf("server holds %d bytes after rejecting frames", got)
	}
}

func TestServerTruncatedFrameReleasesEverything(t *testing.T) {
	forEachDriver(t, testServerTruncatedFrameReleasesEverything)
}

func testServerTruncatedFrameReleasesEverything(t *testing.T, driver string) {
	closed := make(chan struct{}, 1)
	fake := fakebroker.New(t.TempDir(), nil)
	t.Cleanup(fake.Close)
	srv, addr := testServer(t, driver, fake, netio.Config{ConnState: func(_ netio.ConnInfo, open bool) {
		if !open {
			closed <- struct{}{}
		}
	}})
	c := dialRaw(t, addr)
	frame := wire.AppendRequest(nil, 1, &wire.MetadataRequest{Topics: []string{"some-topic"}})
	if _, err := c.nc.Write(frame[:len(frame)-3]); err != nil {
		t.Fatal(err)
	}
	c.nc.Close()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("server did not close the connection after a truncated frame")
	}
	if srv.ConnCount() != 0 || srv.BufferedBytes() != 0 {
		t.Fatalf("after close: %d conns, %d bytes held", srv.ConnCount(), srv.BufferedBytes())
	}
}

func TestServerMaxConnections(t *testing.T) { forEachDriver(t, testServerMaxConnections) }

func testServerMaxConnections(t *testing.T, driver string) {
	fake := fakebroker.New(t.TempDir(), nil)
	t.Cleanup(fake.Close)
	opened := make(chan struct{}, 4)
	_, addr := testServer(t, driver, fake, netio.Config{ConnectionsMax: 2, ConnState: func(_ netio.ConnInfo, open bool) {
		if open {
			opened <- struct{}{}
		}
	}})
	a, b := dialRaw(t, addr), dialRaw(t, addr)
	<-opened
	<-opened
	third := dialRaw(t, addr)
	third.expectClosed()
	var ver wire.APIVersionsResponse
	a.call(1, &wire.APIVersionsRequest{}, &ver)
	b.call(1, &wire.APIVersionsRequest{}, &ver)
}

// holdHandler keeps every request until release is called.
type holdHandler struct {
	served chan *netio.Request
}

func (h *holdHandler) Serve(req *netio.Request) { h.served <- req }

func TestServerPerConnectionBudgetStopsReading(t *testing.T) {
	forEachDriver(t, testServerPerConnectionBudgetStopsReading)
}

func testServerPerConnectionBudgetStopsReading(t *testing.T, driver string) {
	h := &holdHandler{served: make(chan *netio.Request, 100)}
	const frameBytesMax = 2048
	srv, addr := testServer(t, driver, h, netio.Config{FrameBytesMax: frameBytesMax, ConnBufferBytesMax: 2 * frameBytesMax})
	c := dialRaw(t, addr)
	big := strings.Repeat("x", 1900)
	const requests = 8
	for i := range requests {
		c.send(uint32(i), &wire.MetadataRequest{Topics: []string{big[:1000+i]}})
	}
	var held []*netio.Request
	for range 2 {
		held = append(held, <-h.served)
	}
	// Each frame holds ~1 KiB, so the 4 KiB budget admits 4: the server must stop reading
	// before all 8 and keep its holdings within the budget.
	for len(held) < requests {
		select {
		case req := <-h.served:
			held = append(held, req)
			continue
		case <-time.After(200 * time.Millisecond):
		}
		break
	}
	if len(held) >= requests || srv.BufferedBytes() > 2*frameBytesMax {
		t.Fatalf("server read %d of %d requests holding %d bytes; budget is %d", len(held), requests, srv.BufferedBytes(), 2*frameBytesMax)
	}
	// Answering releases budget and the rest arrive, answered in order.
	for answered := 0; answered < requests; answered++ {
		for len(held) <= answered {
			held = append(held, <-h.served)
		}
		held[answered].ReplyMessage(&wire.MetadataResponse{BrokerID: int32(answered)})
		hdr, _ := c.recv()
		if hdr.CorrelationID != uint32(answered) {
			t.Fatalf("response %d has corr %d", answered, hdr.CorrelationID)
		}
	}
}

// bigFetchHandler answers every fetch with 256 KiB of in-memory records.
type bigFetchHandler struct {
	served chan struct{}
	body   []byte
}

func (h *bigFetchHandler) Serve(req *netio.Request) {
	h.served <- struct{}{}
	req.ReplyMessage(&wire.FetchResponse{Topics: []wire.FetchResponseTopic{{Topic: "t", Partitions: []wire.FetchResponsePartition{{Records: h.body}}}}})
}

func TestServerClientThatStopsReading(t *testing.T) {
	forEachDriver(t, testServerClientThatStopsReading)
}

func testServerClientThatStopsReading(t *testing.T, driver string) {
	h := &bigFetchHandler{served: make(chan struct{}, 1024), body: bytes.Repeat([]byte{1}, 256<<10)}
	closed := make(chan netio.ConnInfo, 4)
	const inflight = 4
	srv, addr := testServer(t, driver, h, netio.Config{InflightPerConnMax: inflight, WriteTimeout: 300 * time.Millisecond, ConnState: func(info netio.ConnInfo, open bool) {
		if !open {
			closed <- info
		}
	}})
	slow := dialRaw(t, addr)
	// Pipeline many fetches and never read: 200 x 256 KiB = 50 MiB would be needed to
	// answer them all, far beyond socket buffers.
	go func() {
		for i := range 200 {
			if _, err := slow.nc.Write(wire.AppendRequest(nil, uint32(i), &wire.FetchRequest{})); err != nil {
				return
			}
		}
	}()
	// Another client is served meanwhile.
	fast := dialRaw(t, addr)
	var ver wire.APIVersionsResponse
	fast.call(1, &wire.APIVersionsRequest{}, &ver)
	// The slow connection is dropped by the write timeout...
	select {
	case info := <-closed:
		if info.ID != 1 {
			t.Fatalf("closed connection %d, want the slow one (1)", info.ID)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("slow reader was not disconnected")
	}
	// ... having been served only what fits in flight plus socket buffers, not 200.
	t.Logf("handler served %d of 200 requests before the slow client was dropped", len(h.served))
	if served := len(h.served); served >= 100 {
		t.Fatalf("handler served %d requests for a client that reads nothing", served)
	}
	fast.call(2, &wire.APIVersionsRequest{}, &ver)
	// A response can reach the client just before the server releases its request, so
	// check the accounting once the fast connection has closed too.
	fast.nc.Close()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("fast connection did not close")
	}
	if srv.BufferedBytes() != 0 {
		t.Fatalf("%d bytes still held", srv.BufferedBytes())
	}
}

func TestServerGracefulShutdownAnswersInflight(t *testing.T) {
	forEachDriver(t, testServerGracefulShutdownAnswersInflight)
}

func testServerGracefulShutdownAnswersInflight(t *testing.T, driver string) {
	h := &holdHandler{served: make(chan *netio.Request, 10)}
	srv, addr, stop := startServer(t, driver, h, netio.Config{})
	c := dialRaw(t, addr)
	c.send(7, &wire.MetadataRequest{})
	req := <-h.served
	shutdown := make(chan error, 1)
	go func() { shutdown <- srv.Shutdown(context.Background()) }()
	<-srv.StoppedAccepting()
	if _, err := net.Dial("tcp", addr); err == nil {
		t.Fatal("listener still accepting after Shutdown")
	}
	select {
	case err := <-shutdown:
		t.Fatalf("Shutdown returned %v before the in-flight request was answered", err)
	default:
	}
	req.ReplyMessage(&wire.MetadataResponse{BrokerID: 5})
	hdr, _ := c.recv()
	if hdr.CorrelationID != 7 {
		t.Fatalf("corr %d", hdr.CorrelationID)
	}
	if err := <-shutdown; err != nil {
		t.Fatal(err)
	}
	c.expectClosed()
	stop()
}

func TestServerGracefulShutdownAtInflightMax(t *testing.T) {
	forEachDriver(t, testServerGracefulShutdownAtInflightMax)
}

// A connection at InflightPerConnMax when Shutdown begins is not reading (no recv armed on
// the ring driver), and a frame behind its in-flight request waits unread in the socket:
// Shutdown answers the in-flight request, drops the unread frame and closes the
// connection, without waiting for ctx. (The ring driver once left such a connection
// neither reading nor finished, so Shutdown ran to its deadline: ringlogd then took its
// whole shutdown grace to exit, as e2e TestSigtermWithParkedFetch saw under load.)
func testServerGracefulShutdownAtInflightMax(t *testing.T, driver string) {
	h := &holdHandler{served: make(chan *netio.Request, 10)}
	srv, addr, stop := startServer(t, driver, h, netio.Config{InflightPerConnMax: 1})
	defer stop()
	c := dialRaw(t, addr)
	c.send(7, &wire.MetadataRequest{})
	req := <-h.served
	c.send(8, &wire.MetadataRequest{}) // not read: the connection is at InflightPerConnMax
	// Failing bound only: a correct Shutdown returns as soon as the reply is written.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	shutdown := make(chan error, 1)
	go func() { shutdown <- srv.Shutdown(ctx) }()
	<-srv.StoppedAccepting()
	req.ReplyMessage(&wire.MetadataResponse{BrokerID: 5})
	hdr, _ := c.recv()
	if hdr.CorrelationID != 7 {
		t.Fatalf("corr %d, want 7", hdr.CorrelationID)
	}
	if err := <-shutdown; err != nil {
		t.Fatalf("Shutdown: %v (the connection at InflightPerConnMax never finished)", err)
	}
	// Closed with frame 8 unread: EOF, or a reset when the kernel had it buffered.
	c.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := io.Copy(io.Discard, c.nc); err != nil && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("connection not closed by server: %v (%d bytes)", err, n)
	}
	select {
	case r := <-h.served:
		t.Fatalf("request %d, unread when Shutdown began, was served", r.Header.CorrelationID)
	default:
	}
}

func TestServerStalledFrameIsDropped(t *testing.T) { forEachDriver(t, testServerStalledFrameIsDropped) }

// A client that announces a large frame and then sends nothing more holds budget only
// until FrameReadTimeout; other clients keep being served meanwhile.
func testServerStalledFrameIsDropped(t *testing.T, driver string) {
	closed := make(chan netio.ConnInfo, 4)
	fake := fakebroker.New(t.TempDir(), nil)
	t.Cleanup(fake.Close)
	srv, addr := testServer(t, driver, fake, netio.Config{FrameReadTimeout: 200 * time.Millisecond, ConnState: func(info netio.ConnInfo, open bool) {
		if !open {
			closed <- info
		}
	}})
	c := dialRaw(t, addr)
	frame := wire.AppendRequest(nil, 1, &wire.ProduceRequest{Topics: []wire.ProduceTopic{{Topic: "t", Partitions: []wire.ProducePartition{{Records: make([]byte, 1<<20)}}}}})
	if _, err := c.nc.Write(frame[:64<<10]); err != nil {
		t.Fatal(err)
	}
	other := dialRaw(t, addr)
	var ver wire.APIVersionsResponse
	other.call(1, &wire.APIVersionsRequest{}, &ver)
	select {
	case info := <-closed:
		if info.ID != 1 {
			t.Fatalf("closed connection %d, want the stalled one", info.ID)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("stalled frame was not dropped")
	}
	c.expectClosed()
	other.call(2, &wire.APIVersionsRequest{}, &ver)
	other.nc.Close()
	<-closed
	if got := srv.BufferedBytes(); got != 0 {
		t.Fatalf("%d bytes still held", got)
	}
}

func TestServerLargeFrameArrivesInChunks(t *testing.T) {
	forEachDriver(t, testServerLargeFrameArrivesInChunks)
}

// A 5 MiB produce crosses several allocation chunks and arrives intact; while only its
// header and 64 KiB have arrived the server holds ~1 MiB, not 5.
func testServerLargeFrameArrivesInChunks(t *testing.T, driver string) {
	h := &holdHandler{served: make(chan *netio.Request, 1)}
	srv, addr := testServer(t, driver, h, netio.Config{})
	c := dialRaw(t, addr)
	records := bytes.Repeat([]byte("0123456789"), 512<<10) // 5 MiB
	frame := wire.AppendRequest(nil, 9, &wire.ProduceRequest{Acks: wire.AcksLeader, Topics: []wire.ProduceTopic{{Topic: "big", Partitions: []wire.ProducePartition{{Records: records}}}}})
	if _, err := c.nc.Write(frame[:64<<10]); err != nil {
		t.Fatal(err)
	}
	var held int64
	for spins := 0; held == 0; spins++ {
		if spins > 1e7 {
			t.Fatal("server never charged the frame")
		}
		held = srv.BufferedBytes()
		runtime.Gosched()
	}
	if held > 1<<20 {
		t.Fatalf("server holds %d bytes after 64 KiB of a 5 MiB frame", held)
	}
	if _, err := c.nc.Write(frame[64<<10:]); err != nil {
		t.Fatal(err)
	}
	req := <-h.served
	got := req.Body.(*wire.ProduceRequest).Topics[0].Partitions[0].Records
	if !bytes.Equal(got, records) {
		t.Fatalf("records differ after chunked receive (%d bytes)", len(got))
	}
	req.ReplyMessage(&wire.ProduceResponse{})
	if hdr, _ := c.recv(); hdr.CorrelationID != 9 {
		t.Fatalf("corr %d", hdr.CorrelationID)
	}
}

func TestServerMixedSplicesPipelined(t *testing.T) { forEachDriver(t, testServerMixedSplicesPipelined) }

// Fetch responses mixing file ranges (several per partition), large in-memory records and
// small ones, pipelined, must arrive byte-exact and in order on every driver.
func testServerMixedSplicesPipelined(t *testing.T, driver string) {
	content := make([]byte, 3<<20)
	for i := range content {
		content[i] = byte(i*7 + i>>11)
	}
	f, err := os.CreateTemp(t.TempDir(), "segment")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() }) // after the server's cleanup: sends may still hold it
	if _, err := f.Write(content); err != nil {
		t.Fatal(err)
	}
	memory := bytes.Repeat([]byte("m"), 10<<10)
	h := netio.HandlerFunc(func(req *netio.Request) {
		i := int64(req.Header.CorrelationID)
		req.ReplyMessage(&wire.FetchResponse{Topics: []wire.FetchResponseTopic{{Topic: "t", Partitions: []wire.FetchResponsePartition{
			{Partition: 0, RecordsFile: []wire.FileRange{{File: f, Offset: i * 1000, Length: 1<<20 + 123}, {File: f, Offset: 2 << 20, Length: 77}}},
			{Partition: 1, Records: memory},
			{Partition: 2, ErrorCode: wire.ErrOffsetOutOfRange, ErrorMessage: "x"},
			{Partition: 3, Records: []byte("small")},
			{Partition: 4, RecordsFile: []wire.FileRange{{File: f, Offset: i, Length: 100}}},
		}}}})
	})
	_, addr := testServer(t, driver, h, netio.Config{})
	c := dialRaw(t, addr)
	const requests = 12
	var stream []byte
	for i := range requests {
		stream = wire.AppendRequest(stream, uint32(i), &wire.FetchRequest{})
	}
	go c.nc.Write(stream)
	for i := range int64(requests) {
		hdr, payload := c.recv()
		if hdr.CorrelationID != uint32(i) || hdr.ErrorCode != wire.ErrNone {
			t.Fatalf("response %d: %+v", i, hdr)
		}
		var resp wire.FetchResponse
		if err := resp.ReadFrom(payload); err != nil {
			t.Fatalf("response %d: %v", i, err)
		}
		p := resp.Topics[0].Partitions
		want0 := append(append([]byte(nil), content[i*1000:i*1000+1<<20+123]...), content[2<<20:2<<20+77]...)
		if !bytes.Equal(p[0].Records, want0) || !bytes.Equal(p[1].Records, memory) || p[2].ErrorCode != wire.ErrOffsetOutOfRange ||
			string(p[3].Records) != "small" || !bytes.Equal(p[4].Records, content[i:i+100]) {
			t.Fatalf("response %d: records differ", i)
		}
	}
}

func TestServerClosesIdleConnections(t *testing.T) { forEachDriver(t, testServerClosesIdleConnections) }

// A silent connection is closed after IdleTimeout; one whose request is still outstanding
// (a long-poll) is not, however long the handler takes.
func testServerClosesIdleConnections(t *testing.T, driver string) {
	h := &holdHandler{served: make(chan *netio.Request, 4)}
	closed := make(chan netio.ConnInfo, 4)
	_, addr := testServer(t, driver, h, netio.Config{IdleTimeout: 100 * time.Millisecond, ConnState: func(info netio.ConnInfo, open bool) {
		if !open {
			closed <- info
		}
	}})
	waiting := dialRaw(t, addr)
	waiting.send(1, &wire.MetadataRequest{})
	req := <-h.served
	idle := dialRaw(t, addr)
	var ver wire.APIVersionsResponse
	idle.call(2, &wire.APIVersionsRequest{}, &ver)
	select {
	case info := <-closed:
		if info.ID != 2 {
			t.Fatalf("closed connection %d, want the idle one (2)", info.ID)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("idle connection was not closed")
	}
	idle.expectClosed()
	// Well past the idle timeout, the waiting connection still gets its answer.
	select {
	case info := <-closed:
		t.Fatalf("connection %d with an outstanding request was closed", info.ID)
	case <-time.After(300 * time.Millisecond):
	}
	req.ReplyMessage(&wire.MetadataResponse{BrokerID: 3})
	if hdr, _ := waiting.recv(); hdr.CorrelationID != 1 {
		t.Fatalf("corr %d", hdr.CorrelationID)
	}
}
