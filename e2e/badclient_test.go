package e2e

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ringlog/ringlog/netio/wire"

	"github.com/ringlog/ringlog/netio/client"
)

const rawTimeout = 20 * time.Second

// netDrivers are ringlogd's connection drivers (--net): the shard io_uring loops and Go's
// netpoller.
var netDrivers = []string{"ring", "go"}

// rawConn is a TCP connection speaking frames by hand.
type rawConn struct {
	t    *testing.T
	conn *net.TCPConn
}

func dialRaw(t *testing.T, addr string) *rawConn {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, rawTimeout)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { conn.Close() })
	return &rawConn{t: t, conn: conn.(*net.TCPConn)}
}

func (r *rawConn) write(b []byte) {
	r.t.Helper()
	r.conn.SetWriteDeadline(time.Now().Add(rawTimeout))
	if _, err := r.conn.Write(b); err != nil {
		r.t.Fatalf("write: %v", err)
	}
}

// readResponse reads one response frame; it fails the test on EOF or timeout.
func (r *rawConn) readResponse() (wire.ResponseHeader, []byte) {
	r.t.Helper()
	r.conn.SetReadDeadline(time.Now().Add(rawTimeout))
	h, payload, _, err := wire.ReadResponse(r.conn, nil, wire.FrameBytesMaxDefault)
	if err != nil {
		r.t.Fatalf("read response: %v", err)
	}
	return h, payload
}

// expectError reads a frame-level error response with the given code and correlation id.
func (r *rawConn) expectError(code wire.ErrorCode, correlationID uint32) {
	r.t.Helper()
	h, payload := r.readResponse()
	if h.ErrorCode != code || h.CorrelationID != correlationID {
		r.t.Fatalf("response: code %s correlation %d, want %s correlation %d", h.ErrorCode.Name(), h.CorrelationID, code.Name(), correlationID)
	}
	if msg, err := wire.DecodeErrorPayload(payload); err != nil || msg == "" {
		r.t.Errorf("error response carries no message: %q %v", msg, err)
	}
}

// expectClosed requires the broker to close the connection (EOF or reset) without sending
// anything more.
func (r *rawConn) expectClosed() {
	r.t.Helper()
	r.conn.SetReadDeadline(time.Now().Add(rawTimeout))
	var buf [64]byte
	n, err := r.conn.Read(buf[:])
	if n > 0 {
		r.t.Fatalf("expected the broker to close the connection, got %d more bytes: %x", n, buf[:n])
	}
	var netErr net.Error
	if errors.As(err, &netErr) && netErr.Timeout() {
		r.t.Fatalf("broker kept the connection open for %v", rawTimeout)
	}
	if err == nil {
		r.t.Fatal("read returned nothing and no error")
	}
}

// expectWorking sends ApiVersions on this connection and expects an answer.
func (r *rawConn) expectWorking(correlationID uint32) {
	r.t.Helper()
	r.write(wire.AppendRequest(nil, correlationID, &wire.APIVersionsRequest{ClientID: "raw"}))
	h, payload := r.readResponse()
	if h.ErrorCode != wire.ErrNone || h.CorrelationID != correlationID || h.API != wire.APIVersions {
		r.t.Fatalf("ApiVersions after the bad frame: %+v", h)
	}
	var resp wire.APIVersionsResponse
	if err := resp.ReadFrom(payload); err != nil || len(resp.APIs) == 0 {
		r.t.Fatalf("ApiVersions response: %v %+v", err, resp)
	}
}

// header builds a request frame header by hand.
func header(length uint32, api, version uint16, correlationID uint32) []byte {
	b := binary.BigEndian.AppendUint32(nil, length)
	b = binary.BigEndian.AppendUint16(b, api)
	b = binary.BigEndian.AppendUint16(b, version)
	return binary.BigEndian.AppendUint32(b, correlationID)
}

// expectHealthy proves the broker still serves a fresh, well-behaved client.
func expectHealthy(t *testing.T, b *broker) {
	t.Helper()
	ctx := testContext(t, rawTimeout)
	c, err := client.New(ctx, client.Config{Broker: b.addr})
	if err != nil {
		t.Fatalf("broker no longer accepts clients: %v", err)
	}
	defer c.Close()
	if _, err := c.ListTopics(ctx); err != nil {
		t.Fatalf("broker no longer answers: %v", err)
	}
	if !b.running() {
		t.Fatal("broker exited")
	}
}

// TestHostileFrames sends malformed frames on raw connections; the broker answers each
// with an error (closing the connection where the frame boundary is lost) and keeps
// serving everyone else.
func TestHostileFrames(t *testing.T) {
	for _, net := range netDrivers {
		t.Run("net="+net, func(t *testing.T) { testHostileFrames(t, net) })
	}
}

func testHostileFrames(t *testing.T, netDriver string) {
	b := startBroker(t, "--net", netDriver)
	for _, tc := range []struct {
		name string
		run  func(r *rawConn)
	}{
		{"oversized length", func(r *rawConn) {
			r.write(header(0xFFFFFF00, uint16(wire.APIMetadata), 0, 11))
			r.expectError(wire.ErrFrameTooLarge, 11)
			r.expectClosed()
		}},
		{"length above the maximum by one", func(r *rawConn) {
			r.write(header(wire.FrameBytesMaxDefault+1, uint16(wire.APIProduce), 0, 12))
			r.expectError(wire.ErrFrameTooLarge, 12)
			r.expectClosed()
		}},
		{"length below the header", func(r *rawConn) {
			r.write(header(3, 0, 0, 13))
			r.expectError(wire.ErrInvalidRequest, 13)
			r.expectClosed()
		}},
		{"text garbage", func(r *rawConn) {
			// "GET " read as a length is 1.2 GB: refused before any allocation.
			r.write([]byte("GET / HTTP/1.1\r\nHost: ringlog\r\n\r\n"))
			h, _ := r.readResponse()
			if h.ErrorCode != wire.ErrFrameTooLarge {
				r.t.Fatalf("HTTP request answered with %s, want FRAME_TOO_LARGE", h.ErrorCode.Name())
			}
			r.expectClosed()
		}},
		{"unknown api", func(r *rawConn) {
			r.write(append(header(8+5, 999, 0, 14), "hello"...))
			r.expectError(wire.ErrUnknownAPI, 14)
			r.expectWorking(15)
		}},
		{"unsupported version", func(r *rawConn) {
			r.write(append(header(8+4, uint16(wire.APIMetadata), 7, 16), 0xff, 0xff, 0xff, 0xff))
			r.expectError(wire.ErrUnsupportedVersion, 16)
			r.expectWorking(17)
		}},
		{"undecodable payload", func(r *rawConn) {
			// Metadata with a topic count of -5: refused before allocating for it.
			r.write(append(header(8+4, uint16(wire.APIMetadata), 0, 18), 0xff, 0xff, 0xff, 0xfb))
			r.expectError(wire.ErrInvalidRequest, 18)
			r.expectWorking(19)
		}},
		{"hostile array count", func(r *rawConn) {
			// CreateTopics (timeout_ms, validate_only) claiming 2^31-1 topics in 9 bytes.
			r.write(append(header(8+9, uint16(wire.APICreateTopics), 0, 20), 0, 0, 0x03, 0xe8, 0, 0x7f, 0xff, 0xff, 0xff))
			r.expectError(wire.ErrInvalidRequest, 20)
			r.expectWorking(21)
		}},
		{"binary garbage", func(r *rawConn) {
			garbage := bytes.Repeat([]byte{0xde, 0xad, 0xbe, 0xef}, 256)
			r.write(garbage)
			h, _ := r.readResponse()
			if h.ErrorCode != wire.ErrFrameTooLarge {
				r.t.Fatalf("garbage answered with %s, want FRAME_TOO_LARGE", h.ErrorCode.Name())
			}
			r.expectClosed()
		}},
		{"truncated frame", func(r *rawConn) {
			// A header promising 100 bytes and 20 of them, then silence: the broker waits
			// for the rest without holding anyone else up, and closes on end of stream.
			r.write(append(header(100, uint16(wire.APIMetadata), 0, 22), make([]byte, 20)...))
			expectHealthy(r.t, b)
			if err := r.conn.CloseWrite(); err != nil {
				r.t.Fatal(err)
			}
			r.expectClosed()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.run(dialRaw(t, b.addr))
			expectHealthy(t, b)
		})
	}
}

// TestStalledReader opens connections that pipeline fetches of megabytes and never read a
// response. The broker must push back (stop reading them, keep its memory bounded) and
// keep serving another client's produce and fetch meanwhile.
func TestStalledReader(t *testing.T) {
	for _, net := range netDrivers {
		t.Run("net="+net, func(t *testing.T) { testStalledReader(t, net) })
	}
}

func testStalledReader(t *testing.T, netDriver string) {
	b := startBroker(t, "--net", netDriver)
	ctx := testContext(t, 60*time.Second)
	c := b.client(t)
	const topic = "big"
	if err := c.CreateTopic(ctx, topic, 1, nil); err != nil {
		t.Fatal(err)
	}
	p := c.NewProducer(client.ProducerConfig{Acks: client.AckLeader})
	value := bytes.Repeat([]byte("v"), 1024)
	for range 4096 { // 4 MiB to fetch over and over
		if err := p.Send(ctx, &client.Record{Topic: topic, Partition: 0, Value: value}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}

	// Four stalled connections, so both shards' listeners most likely get one.
	const stalled = 4
	fetch := &wire.FetchRequest{MaxWaitMs: 0, MinBytes: 1, MaxBytes: 4 << 20, Topics: []wire.FetchTopic{{
		Topic: topic, Partitions: []wire.FetchPartition{{Partition: 0, FetchOffset: 0, MaxBytes: 4 << 20}},
	}}}
	var chunk []byte
	for i := range 1000 {
		chunk = wire.AppendRequest(chunk, uint32(i), fetch)
	}
	const chunksMax = 1000 // 1M requests, far more than any socket buffer holds
	writeDone := make(chan error, stalled)
	var conns []*rawConn
	for range stalled {
		r := dialRaw(t, b.addr)
		conns = append(conns, r)
		go func() {
			// Writes block once the broker stops reading (in-flight limit reached and the
			// socket buffers full); the deadline ends the attempt.
			r.conn.SetWriteDeadline(time.Now().Add(5 * time.Second))
			for range chunksMax {
				if _, err := r.conn.Write(chunk); err != nil {
					writeDone <- err
					return
				}
			}
			writeDone <- nil
		}()
	}

	// Meanwhile a normal client produces and reads back on the same broker.
	other := b.client(t)
	if err := other.CreateTopic(ctx, "live", 2, nil); err != nil {
		t.Fatalf("create topic while stalled clients exist: %v", err)
	}
	acks := produceRecords(t, ctx, other, "live", "s", 0, 2000, client.ProducerConfig{Acks: client.AckAll})
	checkConsumed(t, "s", expectedByPartition(t, acks), consumeAll(t, ctx, other, "live"))

	for range stalled {
		err := <-writeDone
		var netErr net.Error
		if !errors.As(err, &netErr) || !netErr.Timeout() {
			t.Errorf("a client that never reads wrote %d requests without being pushed back (err %v)", chunksMax*1000, err)
		}
	}
	if rss := brokerRSSBytes(t, b); rss > 1<<30 {
		t.Errorf("broker resident memory %d MiB with stalled readers: not bounded", rss>>20)
	} else {
		t.Logf("broker resident memory with %d stalled readers: %d MiB", stalled, rss>>20)
	}
	for _, r := range conns {
		r.conn.Close()
	}
	expectHealthy(t, b)
}

// brokerRSSBytes reads the broker process's resident set size from /proc.
func brokerRSSBytes(t *testing.T, b *broker) int64 {
	t.Helper()
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", b.cmd.Process.Pid))
	if err != nil {
		t.Fatalf("read broker status: %v", err)
	}
	for line := range strings.Lines(string(status)) {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("VmRSS line %q: %v", line, err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmRSS in broker status")
	return 0
}
