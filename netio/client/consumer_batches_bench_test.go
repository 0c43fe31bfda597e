package client

import (
	"bytes"
	"fmt"
	"runtime"
	"testing"

	"github.com/ringlog/ringlog/engine/batch"
)

// fetchedPartition builds what one partition of a fetch response carries: 1 MiB of
// 1 KiB records in batches of 16, base offsets consecutive from 0.
func fetchedPartition(tb testing.TB, codec batch.Codec) (records []byte, count int) {
	tb.Helper()
	value := bytes.Repeat([]byte("0123456789abcdef"), 64)
	b := batch.NewBuilder(batch.BuilderOptions{Codec: codec})
	for offset := 0; offset < 1024; offset += 16 {
		b.Reset()
		for range 16 {
			b.Append(1_800_000_000_000, nil, value, nil)
		}
		start := len(records)
		var err error
		if records, err = b.Build(records); err != nil {
			tb.Fatal(err)
		}
		batch.SetBaseOffset(records[start:], int64(offset))
	}
	return records, 1024
}

// BenchmarkDecodeFetch: the client's work on one fetched partition (1 MiB of 1 KiB
// records, 16 per batch) by Poll (a ConsumedRecord per record) and by PollBatches with
// FetchedBatch.Records (nothing per record), reading every value. allocs/record is the
// figure to compare: PollBatches' should be 0.
func BenchmarkDecodeFetch(b *testing.B) {
	for _, codec := range []batch.Codec{batch.CodecNone, batch.CodecZstd} {
		records, count := fetchedPartition(b, codec)
		key := topicPartition{"bench", 0}
		b.Run(fmt.Sprintf("Poll/%s", codec), func(b *testing.B) {
			b.SetBytes(int64(count) * 1024)
			b.ReportAllocs()
			sum := 0
			allocsPerRecord(b, count, func() {
				for b.Loop() {
					out, err := decodeRecords(key, records, 0, &assignment{}, nil)
					if err != nil || len(out) != count {
						b.Fatal(err, len(out))
					}
					for i := range out {
						sum += len(out[i].Value)
					}
				}
			})
		})
		b.Run(fmt.Sprintf("PollBatches/%s", codec), func(b *testing.B) {
			co := &Consumer{assigned: map[topicPartition]*assignment{}}
			fb := new(FetchedBatch)
			sum := 0
			onRecord := func(_, _ int64, _, value []byte, _ []batch.RecordHeader) error {
				sum += len(value)
				return nil
			}
			onBatch := func(fb *FetchedBatch) error { return fb.Records(onRecord) }
			a := new(assignment)
			co.assigned[key] = a
			b.SetBytes(int64(count) * 1024)
			b.ReportAllocs()
			allocsPerRecord(b, count, func() {
				for b.Loop() {
					a.position = 0
					if _, err := co.deliverBatches(key, a, records, 0, fb, onBatch); err != nil || a.position != int64(count) {
						b.Fatal(err, a.position)
					}
				}
			})
		})
	}
}

// allocsPerRecord measures the heap allocations of loop (a whole benchmark loop) and
// reports them per record as allocs/record.
func allocsPerRecord(b *testing.B, perOp int, loop func()) {
	b.Helper()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	loop()
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(after.Mallocs-before.Mallocs)/float64(b.N*perOp), "allocs/record")
}
