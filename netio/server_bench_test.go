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

// BenchmarkServerFetchEgress compares sendfile with pread+write for 1 MiB fetch responses
// from a page-cached file, over loopback, 4 requests pipelined.
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
	for _, mode := range []struct {
		name   string
		driver string
		egress netio.Egress
	}{{"net-sendfile", "net", netio.EgressSendfile}, {"net-copy", "net", netio.EgressCopy}, {"ring-splice", "ring", netio.EgressSendfile}} {
		b.Run(mode.name, func(b *testing.B) {
			_, addr := testServer(b, mode.driver, &fileFetchHandler{file: f, length: recordsBytes}, netio.Config{Egress: mode.egress})
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
