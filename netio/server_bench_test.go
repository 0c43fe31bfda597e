package netio_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/ringlog/ringlog/netio/wire"

	"github.com/ringlog/ringlog/netio"
)

type echoHandler struct{}

func (echoHandler) Serve(req *netio.Request) { req.ReplyMessage(&wire.MetadataResponse{}) }

// BenchmarkServerRoundTrip: one small request and response on loopback, not pipelined.
func BenchmarkServerRoundTrip(b *testing.B) {
	for _, driver := range []string{"net", "ring"} {
		b.Run(driver, func(b *testing.B) { benchRoundTrip(b, driver) })
	}
}

func benchRoundTrip(b *testing.B, driver string) {
	_, addr := testServer(b, driver, echoHandler{}, netio.Config{})
	c := dialRaw(b, addr)
	frame := wire.AppendRequest(nil, 1, &wire.MetadataRequest{Topics: []string{}})
	b.ReportAllocs()
	b.SetBytes(int64(len(frame)))
	for b.Loop() {
		if _, err := c.nc.Write(frame); err != nil {
			b.Fatal(err)
		}
		c.recv()
	}
}

// fileFetchHandler answers every fetch with one file range.
type fileFetchHandler struct {
	file   *os.File
	length int64
}

func (h *fileFetchHandler) Serve(req *netio.Request) {
	req.ReplyMessage(&wire.FetchResponse{Topics: []wire.FetchResponseTopic{{Topic: "t", Partitions: []wire.FetchResponsePartition{
		{HighWatermark: 1, RecordsFile: []wire.FileRange{{File: h.file, Offset: 0, Length: h.length}}},
	}}}})
}

// memFetchHandler answers every fetch with in-memory ranges, as direct mode's recent-block
// cache does (a read spanning two cache chunks).
type memFetchHandler struct{ chunks [][]byte }

func (h *memFetchHandler) Serve(req *netio.Request) {
	ranges := make([]wire.FileRange, len(h.chunks))
	for i, c := range h.chunks {
		ranges[i] = wire.FileRange{Length: int64(len(c)), Data: c}
	}
	req.ReplyMessage(&wire.FetchResponse{Topics: []wire.FetchResponseTopic{{Topic: "t", Partitions: []wire.FetchResponsePartition{
		{HighWatermark: 1, RecordsFile: ranges},
	}}}})
}

// BenchmarkServerFetchEgress compares sendfile with pread+write for 1 MiB fetch responses
// from a page-cached file, over loopback, 4 requests pipelined; and, for direct mode's
// recent-block cache (1 MiB in two memory ranges), SEND against SEND_ZC on the ring driver
// (Config.MemorySendZC) and writev on the net driver.
func BenchmarkServerFetchEgress(b *testing.B) {
	const recordsBytes = 1 << 20
	path := filepath.Join(b.TempDir(), "segment")
	if err := os.WriteFile(path, bytes.Repeat([]byte{7}, recordsBytes), 0o644); err != nil {
		b.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	mem := &memFetchHandler{chunks: [][]byte{bytes.Repeat([]byte{7}, recordsBytes/2), bytes.Repeat([]byte{8}, recordsBytes/2)}}
	file := &fileFetchHandler{file: f, length: recordsBytes}
	for _, mode := range []struct {
		name    string
		driver  string
		egress  netio.Egress
		handler netio.Handler
		zc      bool
	}{{"net-sendfile", "net", netio.EgressSendfile, file, false}, {"net-copy", "net", netio.EgressCopy, file, false},
		{"ring-splice", "ring", netio.EgressSendfile, file, false},
		{"net-memory-writev", "net", netio.EgressSendfile, mem, false}, {"ring-memory-send", "ring", netio.EgressSendfile, mem, false},
		{"ring-memory-sendzc", "ring", netio.EgressSendfile, mem, true}} {
		b.Run(mode.name, func(b *testing.B) {
			_, addr := testServer(b, mode.driver, mode.handler, netio.Config{Egress: mode.egress, MemorySendZC: mode.zc})
			c := dialRaw(b, addr)
			const depth = 4
			frame := wire.AppendRequest(nil, 1, &wire.FetchRequest{})
			var pipeline []byte
			for range depth {
				pipeline = append(pipeline, frame...)
			}
			b.ReportAllocs()
			b.SetBytes(depth * recordsBytes)
			cpuStart := processCPU()
			for b.Loop() {
				if _, err := c.nc.Write(pipeline); err != nil {
					b.Fatal(err)
				}
				for range depth {
					h, payload := c.recv()
					if h.ErrorCode != wire.ErrNone || len(payload) < recordsBytes {
						b.Fatal(fmt.Sprintf("bad response %+v (%d bytes)", h, len(payload)))
					}
				}
			}
			// CPU of the whole process (server and client) per MiB sent: the client's
			// share is the same in both modes, so the difference is the server's.
			b.ReportMetric(float64(processCPU()-cpuStart)/float64(b.N*depth), "cpu-ns/MiB")
		})
	}
}

// processCPU returns user+system CPU time of this process in nanoseconds.
func processCPU() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// TestMemorySendZC: in-memory records (direct mode's recent-block cache: two ranges, one
// below and one above the SEND_ZC threshold) reach the client intact through the ring
// driver with and without Config.MemorySendZC, several responses pipelined.
func TestMemorySendZC(t *testing.T) {
	big := bytes.Repeat([]byte("0123456789abcdef"), 8<<10) // 128 KiB
	small := []byte("tail of the cache")
	want := append(append([]byte{}, big...), small...)
	for _, tc := range []struct {
		driver string
		zc     bool
	}{{"ring", false}, {"ring", true}, {"ring-nosendzc", true}} { // the last: a kernel before SEND_ZC
		zc := tc.zc
		t.Run(fmt.Sprintf("%s/zc=%v", tc.driver, zc), func(t *testing.T) {
			_, addr := testServer(t, tc.driver, &memFetchHandler{chunks: [][]byte{big, small}}, netio.Config{MemorySendZC: zc})
			c := dialRaw(t, addr)
			frame := wire.AppendRequest(nil, 1, &wire.FetchRequest{})
			if _, err := c.nc.Write(append(append(append([]byte{}, frame...), frame...), frame...)); err != nil {
				t.Fatal(err)
			}
			for i := range 3 {
				h, payload := c.recv()
				var resp wire.FetchResponse
				if h.ErrorCode != wire.ErrNone {
					t.Fatalf("response %d: %+v", i, h)
				}
				if err := resp.ReadFrom(payload); err != nil {
					t.Fatal(err)
				}
				if got := resp.Topics[0].Partitions[0].Records; !bytes.Equal(got, want) {
					t.Fatalf("response %d: %d record bytes, want %d identical", i, len(got), len(want))
				}
			}
		})
	}
}
