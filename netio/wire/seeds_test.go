package wire

import (
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// TestWriteFuzzSeeds regenerates the committed seed corpus under testdata/fuzz from the
// sample messages. Run with NETIO_WRITE_SEEDS=1 after changing a schema.
func TestWriteFuzzSeeds(t *testing.T) {
	if os.Getenv("NETIO_WRITE_SEEDS") == "" {
		t.Skip("set NETIO_WRITE_SEEDS=1 to rewrite testdata/fuzz seeds")
	}
	write := func(target string, b []byte) {
		dir := filepath.Join("testdata", "fuzz", target)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		name := fmt.Sprintf("seed-%x", sha256.Sum256(b))[:21]
		body := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", b)
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var stream []byte
	for i, m := range sampleRequests() {
		frame := AppendRequest(nil, uint32(i), m)
		stream = append(stream, frame...)
		write("FuzzSplitRequest", frame)
		write("FuzzSplitRequest", frame[:len(frame)-1])
		write("FuzzServerStream", frame)
		enc := m.AppendTo(nil)
		target := "Fuzz" + m.API().String() + "Request"
		if v := WireVersionOf(m); v > 0 {
			target += fmt.Sprintf("V%d", v)
		}
		write(target, enc)
		write(target, enc[:len(enc)/2])
	}
	write("FuzzSplitRequest", stream)
	write("FuzzServerStream", stream)
	write("FuzzServerStream", stream[:len(stream)/2])
	write("FuzzSplitRequest", []byte{0xff, 0xff, 0xff, 0xff, 0, 1, 0, 0, 0, 0, 0, 1})
	write("FuzzServerStream", []byte{0xff, 0xff, 0xff, 0xff, 0, 1, 0, 0, 0, 0, 0, 1})
	write("FuzzServerStream", []byte{0, 0, 0, 8, 0, 99, 0, 0, 0, 0, 0, 1})
	write("FuzzSplitRequest", []byte{0, 0, 0, 8, 0, 200, 0, 0, 0, 0, 0, 1})
	stream = nil
	for i, m := range sampleResponses() {
		frame := AppendResponse(nil, RequestHeader{API: m.API(), Version: WireVersionOf(m), CorrelationID: uint32(i)}, m)
		stream = append(stream, frame...)
		write("FuzzSplitResponse", frame)
		enc := m.AppendTo(nil)
		target := "Fuzz" + m.API().String() + "Response"
		if v := WireVersionOf(m); v > 0 {
			target += fmt.Sprintf("V%d", v)
		}
		write(target, enc)
		write(target, enc[:len(enc)/2])
	}
	write("FuzzSplitResponse", stream)
	write("FuzzSplitResponse", AppendErrorResponse(nil, RequestHeader{API: 77, CorrelationID: 3}, ErrUnknownAPI, "no such api"))
}
