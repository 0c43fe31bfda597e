package netio

import (
	"bytes"
	"testing"
)

func benchProduceRequest(partitions, batchBytes int) *ProduceRequest {
	batch := bytes.Repeat([]byte{0xab}, batchBytes)
	req := &ProduceRequest{Acks: AcksLeader, TimeoutMs: 1000, Topics: []ProduceTopic{{Topic: "bench"}}}
	for p := range partitions {
		req.Topics[0].Partitions = append(req.Topics[0].Partitions, ProducePartition{Partition: int32(p), Records: batch})
	}
	return req
}

func BenchmarkProduceRequestEncode(b *testing.B) {
	req := benchProduceRequest(8, 16<<10)
	buf := AppendRequest(nil, 1, req)
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		buf = AppendRequest(buf[:0], uint32(i), req)
	}
}

func BenchmarkProduceRequestDecode(b *testing.B) {
	frame := AppendRequest(nil, 1, benchProduceRequest(8, 16<<10))
	b.SetBytes(int64(len(frame)))
	b.ReportAllocs()
	var req ProduceRequest
	for b.Loop() {
		_, payload, _, err := SplitRequest(frame, FrameBytesMaxDefault)
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
		stream = AppendRequest(stream, uint32(i), &FetchRequest{MaxWaitMs: 100, Topics: []FetchTopic{{Topic: "t", Partitions: []FetchPartition{{0, int64(i), 1 << 20}}}}})
	}
	b.SetBytes(int64(len(stream)))
	b.ReportAllocs()
	for b.Loop() {
		rest := stream
		for len(rest) > 0 {
			_, _, next, err := SplitRequest(rest, FrameBytesMaxDefault)
			if err != nil {
				b.Fatal(err)
			}
			rest = next
		}
	}
}

func BenchmarkFetchResponseEncodeSpliced(b *testing.B) {
	resp := &FetchResponse{Topics: []FetchResponseTopic{{Topic: "bench"}}}
	for p := range 8 {
		resp.Topics[0].Partitions = append(resp.Topics[0].Partitions, FetchResponsePartition{Partition: int32(p), HighWatermark: 1 << 20, RecordsFile: []FileRange{{Offset: 4096, Length: 1 << 20}}})
	}
	h := RequestHeader{API: APIFetch, CorrelationID: 1}
	var buf []byte
	var splices []Splice
	b.ReportAllocs()
	b.SetBytes(8 << 20) // bytes described (sent by sendfile), not copied
	for b.Loop() {
		buf, splices = AppendResponseSpliced(buf[:0], h, resp, splices[:0])
	}
}
