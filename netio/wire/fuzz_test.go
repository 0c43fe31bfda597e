package wire

import (
	"bytes"
	"errors"
	"testing"
)

// Fuzz targets: every decoder must return an error or a message, never panic, never
// allocate from a hostile length (arrayLen bounds counts by the remaining bytes), and a
// decoded message must re-encode to bytes that decode to the same encoding (stability).

const fuzzFrameBytesMax = 1 << 20

// FuzzSplitRequest feeds arbitrary byte streams to the frame splitter, as the server sees
// them: any number of concatenated, truncated or garbage frames.
func FuzzSplitRequest(f *testing.F) {
	var stream []byte
	for i, m := range sampleRequests() {
		frame := AppendRequest(nil, uint32(i), m)
		f.Add(frame)
		stream = append(stream, frame...)
	}
	f.Add(stream)
	f.Add([]byte{})
	f.Add([]byte{0, 0, 0, 8, 0, 1, 0, 0, 0, 0, 0, 1})             // empty payload
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0, 1, 0, 0, 0, 0, 0, 1}) // huge length
	f.Add([]byte{0, 0, 0, 3, 0, 1})                               // below header
	f.Fuzz(func(t *testing.T, b []byte) {
		rest := b
		for range 1 << 16 {
			h, payload, next, err := SplitRequest(rest, fuzzFrameBytesMax)
			if err != nil {
				if !errors.Is(err, ErrShortBuffer) && !errors.Is(err, ErrFrameLength) {
					t.Fatalf("unexpected error class: %v", err)
				}
				return
			}
			if len(next) >= len(rest) {
				t.Fatal("split made no progress")
			}
			if int(h.Length) != len(payload)+RequestHeaderBytes-4 {
				t.Fatalf("length %d, payload %d", h.Length, len(payload))
			}
			if m := NewRequest(h.API); m != nil {
				SetWireVersion(m, h.Version)
				checkStable(t, m, payload)
			}
			rest = next
		}
	})
}

// FuzzSplitResponse does the same for the client's side of the stream.
func FuzzSplitResponse(f *testing.F) {
	var stream []byte
	for i, m := range sampleResponses() {
		frame := AppendResponse(nil, RequestHeader{API: m.API(), Version: WireVersionOf(m), CorrelationID: uint32(i)}, m)
		f.Add(frame)
		stream = append(stream, frame...)
	}
	f.Add(stream)
	f.Add(AppendErrorResponse(nil, RequestHeader{API: 77, CorrelationID: 3}, ErrUnknownAPI, "no such api"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		rest := b
		for range 1 << 16 {
			h, payload, next, err := SplitResponse(rest, fuzzFrameBytesMax)
			if err != nil {
				return
			}
			if len(next) >= len(rest) {
				t.Fatal("split made no progress")
			}
			if h.ErrorCode != ErrNone {
				_, _ = DecodeErrorPayload(payload)
			} else if m := NewResponse(h.API); m != nil {
				SetWireVersion(m, h.Version)
				checkStable(t, m, payload)
			}
			rest = next
		}
	})
}

// checkStable decodes payload into m; on success the encoding must be a fixed point.
func checkStable(t *testing.T, m Message, payload []byte) {
	t.Helper()
	if err := m.ReadFrom(payload); err != nil {
		return
	}
	first := m.AppendTo(nil)
	again := NewSame(m)
	if err := again.ReadFrom(first); err != nil {
		t.Fatalf("%T: re-decoding own encoding failed: %v", m, err)
	}
	if second := again.AppendTo(nil); !bytes.Equal(first, second) {
		t.Fatalf("%T: encoding not stable\n%x\n%x", m, first, second)
	}
}

// fuzzMessage is the body of one per-API fuzz target: payload bytes straight into the
// decoder of one schema; also, when given, runs on every payload too.
func fuzzMessage(f *testing.F, newMsg func() Message, samples []Message, also ...func(*testing.T, []byte)) {
	key, version := newMsg().API(), WireVersionOf(newMsg())
	for _, m := range samples {
		if m.API() == key && WireVersionOf(m) == version {
			enc := m.AppendTo(nil)
			f.Add(enc)
			if len(enc) > 1 {
				f.Add(enc[:len(enc)/2])
			}
		}
	}
	f.Add([]byte{})
	f.Add([]byte{0x7f, 0xff, 0xff, 0xff, 0x7f, 0xff, 0xff, 0xff, 0x7f, 0xff})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, payload []byte) {
		checkStable(t, newMsg(), payload)
		for _, fn := range also {
			fn(t, payload)
		}
	})
}

func FuzzApiVersionsRequest(f *testing.F) {
	fuzzMessage(f, func() Message { return new(APIVersionsRequest) }, sampleRequests())
}
func FuzzApiVersionsResponse(f *testing.F) {
	fuzzMessage(f, func() Message { return new(APIVersionsResponse) }, sampleResponses())
}
func FuzzProduceRequest(f *testing.F) {
	fuzzMessage(f, func() Message { return new(ProduceRequest) }, sampleRequests())
}

// FuzzProduceResponse also decodes every payload into a response decoded before (the
// client's pooled requests reuse theirs): it must read exactly as a fresh one.
func FuzzProduceResponse(f *testing.F) {
	used := new(ProduceResponse)
	for _, m := range sampleResponses() {
		if pr, ok := m.(*ProduceResponse); ok {
			if err := used.ReadFrom(pr.AppendTo(nil)); err != nil {
				f.Fatal(err)
			}
		}
	}
	fuzzMessage(f, func() Message { return new(ProduceResponse) }, sampleResponses(), func(t *testing.T, payload []byte) {
		fresh := new(ProduceResponse)
		errFresh, errUsed := fresh.ReadFrom(payload), used.ReadFrom(payload)
		if (errFresh == nil) != (errUsed == nil) {
			t.Fatalf("fresh decode: %v, reused: %v", errFresh, errUsed)
		}
		if errFresh == nil && !bytes.Equal(fresh.AppendTo(nil), used.AppendTo(nil)) {
			t.Fatalf("a reused response decodes differently:\n%+v\n%+v", fresh, used)
		}
	})
}
func FuzzFetchRequest(f *testing.F) {
	fuzzMessage(f, func() Message { return new(FetchRequest) }, sampleRequests())
}
func FuzzFetchResponse(f *testing.F) {
	fuzzMessage(f, func() Message { return new(FetchResponse) }, sampleResponses())
}
func FuzzListOffsetsRequest(f *testing.F) {
	fuzzMessage(f, func() Message { return new(ListOffsetsRequest) }, sampleRequests())
}
func FuzzListOffsetsResponse(f *testing.F) {
	fuzzMessage(f, func() Message { return new(ListOffsetsResponse) }, sampleResponses())
}
func FuzzMetadataRequest(f *testing.F) {
	fuzzMessage(f, func() Message { return new(MetadataRequest) }, sampleRequests())
}
func FuzzMetadataResponse(f *testing.F) {
	fuzzMessage(f, func() Message { return new(MetadataResponse) }, sampleResponses())
}
func FuzzMetadataResponseV1(f *testing.F) {
	fuzzMessage(f, func() Message { return &MetadataResponse{Version: 1} }, sampleResponses())
}
func FuzzCreateTopicsRequest(f *testing.F) {
	fuzzMessage(f, func() Message { return new(CreateTopicsRequest) }, sampleRequests())
}
func FuzzCreateTopicsRequestV1(f *testing.F) {
	fuzzMessage(f, func() Message { return &CreateTopicsRequest{Version: 1} }, sampleRequests())
}
func FuzzCreateTopicsResponse(f *testing.F) {
	fuzzMessage(f, func() Message { return new(CreateTopicsResponse) }, sampleResponses())
}
func FuzzDeleteTopicsRequest(f *testing.F) {
	fuzzMessage(f, func() Message { return new(DeleteTopicsRequest) }, sampleRequests())
}
func FuzzDeleteTopicsRequestV1(f *testing.F) {
	fuzzMessage(f, func() Message { return &DeleteTopicsRequest{Version: 1} }, sampleRequests())
}
func FuzzDeleteTopicsResponse(f *testing.F) {
	fuzzMessage(f, func() Message { return new(DeleteTopicsResponse) }, sampleResponses())
}
func FuzzDescribeTopicsRequest(f *testing.F) {
	fuzzMessage(f, func() Message { return new(DescribeTopicsRequest) }, sampleRequests())
}
func FuzzDescribeTopicsResponse(f *testing.F) {
	fuzzMessage(f, func() Message { return new(DescribeTopicsResponse) }, sampleResponses())
}
func FuzzDescribeConfigsRequest(f *testing.F) {
	fuzzMessage(f, func() Message { return new(DescribeConfigsRequest) }, sampleRequests())
}
func FuzzDescribeConfigsResponse(f *testing.F) {
	fuzzMessage(f, func() Message { return new(DescribeConfigsResponse) }, sampleResponses())
}
func FuzzAlterConfigsRequest(f *testing.F) {
	fuzzMessage(f, func() Message { return new(AlterConfigsRequest) }, sampleRequests())
}
func FuzzAlterConfigsRequestV1(f *testing.F) {
	fuzzMessage(f, func() Message { return &AlterConfigsRequest{Version: 1} }, sampleRequests())
}
func FuzzAlterConfigsResponse(f *testing.F) {
	fuzzMessage(f, func() Message { return new(AlterConfigsResponse) }, sampleResponses())
}
func FuzzReplicaFetchWakeRequest(f *testing.F) {
	fuzzMessage(f, func() Message { return new(ReplicaFetchWakeRequest) }, sampleRequests())
}
func FuzzReplicaFetchWakeResponse(f *testing.F) {
	fuzzMessage(f, func() Message { return new(ReplicaFetchWakeResponse) }, sampleResponses())
}
func FuzzQuotaGroupRequest(f *testing.F) {
	fuzzMessage(f, func() Message { return new(QuotaGroupRequest) }, sampleRequests())
}
func FuzzQuotaGroupResponse(f *testing.F) {
	fuzzMessage(f, func() Message { return new(QuotaGroupResponse) }, sampleResponses())
}
func FuzzSaslHandshakeRequest(f *testing.F) {
	fuzzMessage(f, func() Message { return new(SaslHandshakeRequest) }, sampleRequests())
}
func FuzzSaslHandshakeResponse(f *testing.F) {
	fuzzMessage(f, func() Message { return new(SaslHandshakeResponse) }, sampleResponses())
}
func FuzzSaslAuthenticateRequest(f *testing.F) {
	fuzzMessage(f, func() Message { return new(SaslAuthenticateRequest) }, sampleRequests())
}
func FuzzSaslAuthenticateResponse(f *testing.F) {
	fuzzMessage(f, func() Message { return new(SaslAuthenticateResponse) }, sampleResponses())
}
func FuzzDescribeUsersRequest(f *testing.F) {
	fuzzMessage(f, func() Message { return new(DescribeUsersRequest) }, sampleRequests())
}
func FuzzDescribeUsersResponse(f *testing.F) {
	fuzzMessage(f, func() Message { return new(DescribeUsersResponse) }, sampleResponses())
}
func FuzzAlterUsersRequest(f *testing.F) {
	fuzzMessage(f, func() Message { return new(AlterUsersRequest) }, sampleRequests())
}
func FuzzAlterUsersResponse(f *testing.F) {
	fuzzMessage(f, func() Message { return new(AlterUsersResponse) }, sampleResponses())
}
func FuzzDescribeAclsRequest(f *testing.F) {
	fuzzMessage(f, func() Message { return new(DescribeAclsRequest) }, sampleRequests())
}
func FuzzDescribeAclsResponse(f *testing.F) {
	fuzzMessage(f, func() Message { return new(DescribeAclsResponse) }, sampleResponses())
}
func FuzzCreateAclsRequest(f *testing.F) {
	fuzzMessage(f, func() Message { return new(CreateAclsRequest) }, sampleRequests())
}
func FuzzCreateAclsResponse(f *testing.F) {
	fuzzMessage(f, func() Message { return new(CreateAclsResponse) }, sampleResponses())
}
func FuzzDeleteAclsRequest(f *testing.F) {
	fuzzMessage(f, func() Message { return new(DeleteAclsRequest) }, sampleRequests())
}
func FuzzDeleteAclsResponse(f *testing.F) {
	fuzzMessage(f, func() Message { return new(DeleteAclsResponse) }, sampleResponses())
}
