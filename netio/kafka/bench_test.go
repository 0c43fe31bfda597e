package kafka

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"

	"github.com/ringlog/ringlog/engine"
	"github.com/ringlog/ringlog/engine/batch"
	"github.com/ringlog/ringlog/engine/shard"
	"github.com/ringlog/ringlog/netio"
	"github.com/ringlog/ringlog/netio/wire"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// BenchmarkDecodeProduce: the per-request cost of the Kafka listener before the core sees a
// produce (header, kmsg decode, splitting into batches), for 16 partitions of 64 KiB. The
// records alias the frame; bytes/op is what kmsg allocates for the request structs.
func BenchmarkDecodeProduce(b *testing.B) {
	builder := batch.NewBuilder(batch.BuilderOptions{})
	value := make([]byte, 1024)
	for i := range 63 {
		builder.Append(int64(i), nil, value, nil)
	}
	records, err := builder.Build(nil)
	if err != nil {
		b.Fatal(err)
	}
	req := kmsg.NewPtrProduceRequest()
	req.Version, req.Acks = 9, 1
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = "bench"
	for p := range 16 {
		rt.Partitions = append(rt.Partitions, kmsg.ProduceRequestTopicPartition{Partition: int32(p), Records: records})
	}
	req.Topics = []kmsg.ProduceRequestTopic{rt}
	frame := binary.BigEndian.AppendUint16(nil, uint16(keyProduce))
	frame = binary.BigEndian.AppendUint16(frame, 9)
	frame = binary.BigEndian.AppendUint32(frame, 1)
	frame = append(frame, 0, 0, 0) // client id "", header tags
	frame = req.AppendTo(frame)
	b.SetBytes(int64(len(frame)))
	b.ReportAllocs()
	for b.Loop() {
		h, _ := parseFixedHeader(frame)
		decoded := kmsg.NewPtrProduceRequest()
		if err := decodeRequest(&h, decoded, frame); err != nil {
			b.Fatal(err)
		}
		for _, p := range decoded.Topics[0].Partitions {
			if _, err := netio.SplitBatches(p.Records); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkAppendFetchResponse: encoding a fetch response of 16 partitions whose records
// are file ranges (their length prefixes in the buffer, the records as splices), per
// response; the records themselves are sent by sendfile and not touched. SetBytes counts
// the records served.
func BenchmarkAppendFetchResponse(b *testing.B) {
	f, err := os.Create(filepath.Join(b.TempDir(), "segment"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	req := kmsg.NewPtrFetchRequest()
	req.Version = 11
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic = "bench"
	var results []shard.FetchResult
	const recordsPerPartition = 1 << 20
	for p := range 16 {
		rt.Partitions = append(rt.Partitions, kmsg.FetchRequestTopicPartition{Partition: int32(p), PartitionMaxBytes: recordsPerPartition})
		results = append(results, shard.FetchResult{
			TopicPartition: shard.TopicPartition{Topic: "bench", Partition: int32(p)}, HighWatermark: 1000, LogStartOffset: 0,
			Records: engine.ReadResult{Pieces: []engine.Piece{{File: f, Position: int64(p) * recordsPerPartition, Size: recordsPerPartition}}, Size: recordsPerPartition},
		})
	}
	req.Topics = []kmsg.FetchRequestTopic{rt}
	b.SetBytes(16 * recordsPerPartition)
	b.ReportAllocs()
	var buf []byte
	var splices []wire.Splice
	head := &kmsg.FetchResponse{Version: req.Version}
	for b.Loop() {
		buf, splices = appendFetchResponse(buf[:0], splices[:0], req, results, head)
		if len(splices) != 16 || len(buf) == 0 {
			b.Fatalf("%d splices", len(splices))
		}
	}
}
