package netio

import (
	"bytes"
	"testing"

	"github.com/ringlog/ringlog/netio/wire"
)

func benchProduceRequest(partitions, batchBytes int) *wire.ProduceRequest {
	batch := bytes.Repeat([]byte{0xab}, batchBytes)
	req := &wire.ProduceRequest{Acks: wire.AcksLeader, TimeoutMs: 1000, Topics: []wire.ProduceTopic{{Topic: "bench"}}}
	for p := range partitions {
		req.Topics[0].Partitions = append(req.Topics[0].Partitions, wire.ProducePartition{Partition: int32(p), Records: batch})
	}
	return req
}

func BenchmarkProduceRequestEncode(b *testing.B) {
	req := benchProduceRequest(8, 16<<10)
	buf := wire.AppendRequest(nil, 1, req)
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		buf = wire.AppendRequest(buf[:0], uint32(i), req)
	}
}

func BenchmarkProduceRequestDecode(b *testing.B) {
	frame := wire.AppendRequest(nil, 1, benchProduceRequest(8, 16<<10))
	b.SetBytes(int64(len(frame)))
	b.ReportAllocs()
	var req wire.ProduceRequest
	for b.Loop() {
		_, payload, _, err := wire.SplitRequest(frame, wire.FrameBytesMaxDefault)
		if err != nil {
			b.Fatal(err)
		}
		if err := req.ReadFrom(payload); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkFrameSplit(b *testing.B) {
	var stream []byte
	for i := range 64 {
		stream = wire.AppendRequest(stream, uint32(i), &wire.FetchRequest{MaxWaitMs: 100, Topics: []wire.FetchTopic{{Topic: "t", Partitions: []wire.FetchPartition{{Partition: 0, FetchOffset: int64(i), MaxBytes: 1 << 20}}}}})
	}
	b.SetBytes(int64(len(stream)))
	b.ReportAllocs()
	for b.Loop() {
		rest := stream
		for len(rest) > 0 {
			_, _, next, err := wire.SplitRequest(rest, wire.FrameBytesMaxDefault)
			if err != nil {
				b.Fatal(err)
			}
			rest = next
		}
	}
}

func BenchmarkFetchResponseEncodeSpliced(b *testing.B) {
	resp := &wire.FetchResponse{Topics: []wire.FetchResponseTopic{{Topic: "bench"}}}
	for p := range 8 {
		resp.Topics[0].Partitions = append(resp.Topics[0].Partitions, wire.FetchResponsePartition{Partition: int32(p), HighWatermark: 1 << 20, RecordsFile: []wire.FileRange{{Offset: 4096, Length: 1 << 20}}})
	}
	h := wire.RequestHeader{API: wire.APIFetch, CorrelationID: 1}
	var buf []byte
	var splices []wire.Splice
	b.ReportAllocs()
	b.SetBytes(8 << 20) // bytes described (sent by sendfile), not copied
	for b.Loop() {
		buf, splices = wire.AppendResponseSpliced(buf[:0], h, resp, splices[:0])
	}
}
