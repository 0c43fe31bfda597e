package batch

import (
	"bytes"
	stdgzip "compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/klauspost/compress/snappy"
)

// xerialFrame lays blocks out the way the Java client's snappy stream does: magic, version
// 1, compatible version 1, then u32 length + raw snappy block per chunk.
func xerialFrame(chunks ...[]byte) []byte {
	out := append([]byte{}, xerialMagic...)
	out = binary.BigEndian.AppendUint32(out, 1)
	out = binary.BigEndian.AppendUint32(out, 1)
	for _, c := range chunks {
		block := snappy.Encode(nil, c)
		out = binary.BigEndian.AppendUint32(out, uint32(len(block)))
		out = append(out, block...)
	}
	return out
}

// TestCodecsRoundTrip builds a batch with every codec, validates it as a produce and decodes
// it back to the same records.
func TestCodecsRoundTrip(t *testing.T) {
	value := bytes.Repeat([]byte("compressible value "), 40)
	for _, codec := range []Codec{CodecNone, CodecGzip, CodecSnappy, CodecLZ4, CodecZstd} {
		t.Run(codec.String(), func(t *testing.T) {
			b := NewBuilder(BuilderOptions{Codec: codec})
			for i := range 20 {
				b.Append(int64(1000+i), fmt.Appendf(nil, "key-%d", i), value, []RecordHeader{{Key: "h", Value: []byte{byte(i)}}})
			}
			out, err := b.Build(nil)
			if err != nil {
				t.Fatal(err)
			}
			h, err := ValidateProduce(out)
			if err != nil {
				t.Fatalf("ValidateProduce: %v", err)
			}
			if h.Compression() != codec {
				t.Fatalf("attributes say %s", h.Compression())
			}
			if codec != CodecNone && len(out) > len(value)*20/4 {
				t.Errorf("%s batch is %d bytes for %d bytes of repetitive values", codec, len(out), len(value)*20)
			}
			n := 0
			err = Decode(out, func(offset, ts int64, r *Record) error {
				if offset != int64(n) || ts != int64(1000+n) || string(r.Key) != fmt.Sprintf("key-%d", n) || !bytes.Equal(r.Value, value) || r.Headers[0].Value[0] != byte(n) {
					return fmt.Errorf("record %d: offset %d ts %d key %q", n, offset, ts, r.Key)
				}
				n++
				return nil
			})
			if err != nil || n != 20 {
				t.Fatalf("Decode: %v after %d records", err, n)
			}
		})
	}
}

// TestCodecsOtherWriters decodes blobs written by other encoders than ours: the standard
// library's gzip (with two concatenated members) and the Java client's xerial snappy stream.
func TestCodecsOtherWriters(t *testing.T) {
	records := withDeltas(0, 1, 2)
	var gz bytes.Buffer
	for _, part := range [][]byte{withDeltas(0), withDeltas(1, 2)} {
		w := stdgzip.NewWriter(&gz)
		w.Write(part)
		w.Close()
	}
	for _, tc := range []struct {
		name  string
		codec Codec
		blob  []byte
	}{
		{"stdlib gzip, two members", CodecGzip, gz.Bytes()},
		{"xerial snappy, two chunks", CodecSnappy, xerialFrame(withDeltas(0), withDeltas(1, 2))},
		{"xerial snappy, no chunk", CodecSnappy, xerialFrame()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := decompress(tc.codec, nil, tc.blob)
			want := records
			if strings.HasSuffix(tc.name, "no chunk") {
				want = nil
			}
			if err != nil || !bytes.Equal(out, want) {
				t.Fatalf("decompress: %v, %d bytes, want %d", err, len(out), len(want))
			}
		})
	}
}

// TestCodecsBombsRefused: output past MaxDecompressedBytes is refused with ErrInvalidRecord
// by every codec, and a snappy block declaring more is refused before any allocation.
func TestCodecsBombsRefused(t *testing.T) {
	zeros := make([]byte, MaxDecompressedBytes+1)
	for _, codec := range []Codec{CodecGzip, CodecLZ4, CodecSnappy} {
		blob := compress(codec, nil, zeros)
		if _, err := decompress(codec, nil, blob); !errors.Is(err, ErrInvalidRecord) || !strings.Contains(err.Error(), "more than") {
			t.Errorf("%s bomb of %d bytes: %v", codec, len(blob), err)
		}
	}
	declared := binary.AppendUvarint(nil, 1<<31)
	// What matters is that the declared length is refused before any allocation of that
	// size: count bytes, not allocations (the race detector adds allocations of its own).
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range 10 {
		if _, err := decompress(CodecSnappy, nil, declared); !errors.Is(err, ErrInvalidRecord) {
			t.Fatalf("snappy declaring 2 GiB: %v", err)
		}
	}
	runtime.ReadMemStats(&after)
	if allocated := after.TotalAlloc - before.TotalAlloc; allocated > 1<<20 {
		t.Errorf("refusing a snappy block declaring 2 GiB 10 times allocated %d bytes", allocated)
	}
}
