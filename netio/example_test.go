package netio

import (
	"bytes"
	"testing"

	"github.com/ringlog/ringlog/netio/wire"
)

// TestDocExample keeps the hex examples at the end of docs/protocol.md true.
func TestDocExample(t *testing.T) {
	got := wire.AppendRequest(nil, 1, &wire.MetadataRequest{Topics: []string{"t"}})
	want := []byte{0, 0, 0, 0x0f, 0, 4, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1, 0, 1, 't'}
	if !bytes.Equal(got, want) {
		t.Fatalf("got % x\nwant % x", got, want)
	}

	got = wire.AppendErrorResponse(nil, wire.RequestHeader{API: 99, CorrelationID: 7}, wire.ErrUnknownAPI, "unknown api 99")
	want = append([]byte{0, 0, 0, 0x1a, 0, 0x63, 0, 0, 0, 0, 0, 7, 0, 0x0f, 0, 0x0e}, "unknown api 99"...)
	if !bytes.Equal(got, want) {
		t.Fatalf("error response: got % x\nwant % x", got, want)
	}

	got = wire.AppendResponse(nil, wire.RequestHeader{API: wire.APIProduce, CorrelationID: 2}, &wire.ProduceResponse{Topics: []wire.ProduceResponseTopic{{Topic: "t",
		Partitions: []wire.ProduceResponsePartition{{Partition: 0, BaseOffset: 42, LogAppendTime: -1, LogStartOffset: 0}}}}})
	want = []byte{0, 0, 0, 0x39, 0, 1, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 1, 't', 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0,
		0, 0, 0, 0, 0, 0, 0, 0x2a, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0}
	if !bytes.Equal(got, want) {
		t.Fatalf("produce response: got % x\nwant % x", got, want)
	}
}
