package batch

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// Benchmarks for the batch hot paths. SetBytes is the uncompressed record payload (key +
// value bytes), so MB/s is comparable across codecs:
//
//	go test -run '^$' -bench . -benchmem ./engine/batch

const benchValueBytes = 1024

// benchValues returns n 1 KiB JSON-like values: field names repeat, numbers do not, so zstd
// sees the 3-6x ratio typical of event payloads rather than all-zero or random bytes.
func benchValues(n int) [][]byte {
	rng := rand.New(rand.NewPCG(7, 7))
	values := make([][]byte, n)
	for i := range values {
		v := make([]byte, 0, benchValueBytes+64)
		for len(v) < benchValueBytes {
			v = fmt.Appendf(v, `{"user":%d,"event":"click","ts":%d,"score":%.4f},`,
				rng.IntN(1_000_000), 1_700_000_000_000+rng.Int64N(1<<30), rng.Float64())
		}
		values[i] = v[:benchValueBytes]
	}
	return values
}

var benchKey = []byte("user-000042")

func buildBench(b *testing.B, builder *Builder, values [][]byte, dst []byte) []byte {
	builder.Reset()
	for i, v := range values {
		builder.Append(1_700_000_000_000+int64(i), benchKey, v, nil)
	}
	out, err := builder.Build(dst[:0])
	if err != nil {
		b.Fatal(err)
	}
	return out
}

func benchBuild(b *testing.B, codec Codec, records int) {
	values := benchValues(records)
	builder := NewBuilder(BuilderOptions{Codec: codec})
	dst := make([]byte, 0, records*(benchValueBytes+64)+HeaderSize)
	dst = buildBench(b, builder, values, dst)
	b.SetBytes(int64(records * (benchValueBytes + len(benchKey))))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		dst = buildBench(b, builder, values, dst)
	}
	b.ReportMetric(float64(len(dst)), "batch-bytes")
}

func BenchmarkBuild(b *testing.B) {
	for _, codec := range []Codec{CodecNone, CodecGzip, CodecSnappy, CodecLZ4, CodecZstd} {
		for _, records := range []int{16, 1024} {
			b.Run(fmt.Sprintf("%s/1KiBx%d", codec, records), func(b *testing.B) { benchBuild(b, codec, records) })
		}
	}
}

// BenchmarkValidate measures the CRC-32C check of a whole batch, the cost the append path
// pays per produced batch.
func BenchmarkValidate(b *testing.B) {
	for _, records := range []int{16, 1024} { // ~16 KiB and ~1 MiB batches
		values := benchValues(records)
		batchBytes := buildBench(b, NewBuilder(BuilderOptions{}), values, nil)
		b.Run(fmt.Sprintf("%dKiB", len(batchBytes)>>10), func(b *testing.B) {
			b.SetBytes(int64(len(batchBytes)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Validate(batchBytes); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkDecode walks every record (Validate + decompress + record parsing), the cost a
// consumer or a deep append-time check pays.
func BenchmarkDecode(b *testing.B) {
	for _, codec := range []Codec{CodecNone, CodecGzip, CodecSnappy, CodecLZ4, CodecZstd} {
		for _, records := range []int{16, 1024} {
			values := benchValues(records)
			batchBytes := buildBench(b, NewBuilder(BuilderOptions{Codec: codec}), values, nil)
			b.Run(fmt.Sprintf("%s/1KiBx%d", codec, records), func(b *testing.B) {
				var seen int
				fn := func(offset, ts int64, r *Record) error { seen += len(r.Value); return nil }
				b.SetBytes(int64(records * (benchValueBytes + len(benchKey))))
				b.ReportAllocs()
				for b.Loop() {
					if err := Decode(batchBytes, fn); err != nil {
						b.Fatal(err)
					}
				}
				if seen == 0 {
					b.Fatal("no records decoded")
				}
			})
		}
	}
}

// BenchmarkValidateProduce is what the append path pays per produced batch: Validate plus
// the record walk (and, for zstd, the decompression). Compare with BenchmarkValidate.
func BenchmarkValidateProduce(b *testing.B) {
	for _, codec := range []Codec{CodecNone, CodecGzip, CodecSnappy, CodecLZ4, CodecZstd} {
		for _, records := range []int{16, 1024} {
			values := benchValues(records)
			batchBytes := buildBench(b, NewBuilder(BuilderOptions{Codec: codec}), values, nil)
			b.Run(fmt.Sprintf("%s/1KiBx%d", codec, records), func(b *testing.B) {
				b.SetBytes(int64(len(batchBytes)))
				b.ReportAllocs()
				for b.Loop() {
					if _, err := ValidateProduce(batchBytes); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
