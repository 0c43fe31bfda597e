package wire

import (
	"bytes"
	"errors"
	"testing"
)

func TestRequestFrameRoundTrip(t *testing.T) {
	var stream []byte
	reqs := sampleRequests()
	for i, m := range reqs {
		stream = AppendRequest(stream, uint32(1000+i), m)
	}
	rest := stream
	for i, want := range reqs {
		h, payload, next, err := SplitRequest(rest, FrameBytesMaxDefault)
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if h.API != want.API() || h.Version != WireVersionOf(want) || h.CorrelationID != uint32(1000+i) {
			t.Fatalf("frame %d header %+v", i, h)
		}
		got := NewRequest(h.API)
		SetWireVersion(got, h.Version)
		if err := got.ReadFrom(payload); err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if !bytes.Equal(got.AppendTo(nil), want.AppendTo(nil)) {
			t.Fatalf("frame %d decoded differently", i)
		}
		rest = next
	}
	if len(rest) != 0 {
		t.Fatalf("%d bytes left after concatenated frames", len(rest))
	}
}

func TestSplitRequestTruncated(t *testing.T) {
	frame := AppendRequest(nil, 9, &MetadataRequest{Topics: []string{"a"}})
	for n := 0; n < len(frame); n++ {
		_, _, rest, err := SplitRequest(frame[:n], FrameBytesMaxDefault)
		if !errors.Is(err, ErrShortBuffer) {
			t.Fatalf("prefix %d: got %v, want ErrShortBuffer", n, err)
		}
		if len(rest) != n {
			t.Fatalf("prefix %d: consumed bytes on a short buffer", n)
		}
	}
}

func TestSplitRequestLengthLimits(t *testing.T) {
	hdr := func(length uint32) []byte {
		return []byte{byte(length >> 24), byte(length >> 16), byte(length >> 8), byte(length), 0, 1, 0, 0, 0, 0, 0, 1}
	}
	cases := []struct {
		name   string
		length uint32
		max    uint32
	}{
		{"below header", 7, FrameBytesMaxDefault},
		{"zero", 0, FrameBytesMaxDefault},
		{"above max", 1025, 1024},
		{"huge", 0xffffffff, FrameBytesMaxDefault},
	}
	for _, c := range cases {
		_, _, _, err := SplitRequest(hdr(c.length), c.max)
		if !errors.Is(err, ErrFrameLength) {
			t.Errorf("%s: got %v, want ErrFrameLength", c.name, err)
		}
	}
	// Exactly the maximum is accepted (and reported short until the bytes arrive).
	if _, _, _, err := SplitRequest(hdr(1024), 1024); !errors.Is(err, ErrShortBuffer) {
		t.Fatalf("length == max: got %v", err)
	}
	// An empty payload is a valid frame.
	h, p, _, err := SplitRequest(hdr(8), 1024)
	if err != nil || len(p) != 0 || h.API != APIProduce {
		t.Fatalf("empty payload: %+v %v %v", h, p, err)
	}
}

func TestErrorResponseFrame(t *testing.T) {
	req := RequestHeader{API: APIKey(999), Version: 3, CorrelationID: 5}
	frame := AppendErrorResponse(nil, req, ErrUnknownAPI, "api 999 unknown")
	h, payload, rest, err := SplitResponse(frame, FrameBytesMaxDefault)
	if err != nil || len(rest) != 0 {
		t.Fatal(err)
	}
	if h.API != 999 || h.Version != 3 || h.CorrelationID != 5 || h.ErrorCode != ErrUnknownAPI {
		t.Fatalf("header %+v", h)
	}
	msg, err := DecodeErrorPayload(payload)
	if err != nil || msg != "api 999 unknown" {
		t.Fatalf("message %q %v", msg, err)
	}
}

func TestReadResponse(t *testing.T) {
	var stream []byte
	for i, m := range sampleResponses() {
		stream = AppendResponse(stream, RequestHeader{API: m.API(), Version: WireVersionOf(m), CorrelationID: uint32(i)}, m)
	}
	r := bytes.NewReader(stream)
	var buf []byte
	for i, want := range sampleResponses() {
		h, payload, b, err := ReadResponse(r, buf, FrameBytesMaxDefault)
		buf = b
		if err != nil || h.CorrelationID != uint32(i) {
			t.Fatalf("response %d: %+v %v", i, h, err)
		}
		got := NewResponse(h.API)
		SetWireVersion(got, h.Version)
		if err := got.ReadFrom(payload); err != nil || !bytes.Equal(got.AppendTo(nil), want.AppendTo(nil)) {
			t.Fatalf("response %d: %v", i, err)
		}
	}
	// A truncated stream reports io.ErrUnexpectedEOF-style errors, never a panic.
	_, _, _, err := ReadResponse(bytes.NewReader(stream[:len(stream)-1][:20]), nil, FrameBytesMaxDefault)
	if err == nil {
		t.Fatal("truncated response decoded")
	}
}
