package batch

import (
	"bytes"
	"encoding/binary"
	"errors"
	"reflect"
	"testing"
)

// filterSeed is one FuzzFilter input: a records section wrapped like wrapRecords, the
// lastOffsetDelta (a thinned batch when above count-1), which records to keep (bit i of
// mask for the i-th record, modulo 64) and whether an empty result keeps one record.
type filterSeed struct {
	attributes             int16
	count, lastOffsetDelta int32
	mask                   uint64
	keepOne                bool
	records                []byte
}

func filterSeeds(t testing.TB) []filterSeed {
	plain := sampleBatch(t)
	z := NewBuilder(BuilderOptions{Codec: CodecZstd})
	for i := range 6 {
		z.Append(int64(10+i), []byte{'k', byte('0' + i%3)}, bytes.Repeat([]byte{'v'}, 40), []RecordHeader{{Key: "h", Value: nil}})
	}
	zstdBatch, err := z.Build(nil)
	if err != nil {
		t.Fatal(err)
	}
	return []filterSeed{
		{0, 3, 2, 0b101, false, plain[HeaderSize:]},
		{0, 3, 2, 0, false, plain[HeaderSize:]},
		{0, 3, 2, 0, true, plain[HeaderSize:]},
		{0, 3, 2, 0b111, false, plain[HeaderSize:]},
		{int16(CodecZstd), 6, 5, 0b100110, false, zstdBatch[HeaderSize:]},
		{int16(CodecZstd), 6, 5, 0, true, zstdBatch[HeaderSize:]},
		{0, 2, 5, 0b10, false, withDeltas(1, 4)},
		{0, 2, 5, 0b01, true, withDeltas(3, 3)},
		{0x08, 3, 2, 0b011, false, plain[HeaderSize:]},
		{int16(CodecZstd), 1, 0, 1, false, []byte{0x28, 0xb5, 0x2f, 0xfd, 0xff, 0xff, 0xff}},
		{0, 1, 0, 1, false, nil},
	}
}

// FuzzFilter: whatever Filter returns is a batch the stored rule accepts, with the input's
// header fields (but length, count and CRC) and exactly the selected records, byte for byte
// in what a consumer sees; it fails exactly when Decode fails, and never panics.
func FuzzFilter(f *testing.F) {
	for _, s := range filterSeeds(f) {
		f.Add(s.attributes, s.count, s.lastOffsetDelta, s.mask, s.keepOne, s.records)
	}
	f.Fuzz(func(t *testing.T, attributes int16, count, lastOffsetDelta int32, mask uint64, keepOne bool, records []byte) {
		b := wrapRecords(attributes, count, records)
		put32(b, offsetLastOffsetDelta, lastOffsetDelta)
		fixCRC(b)
		checkFilter(t, b, mask, keepOne)
	})
}

func checkFilter(t *testing.T, b []byte, mask uint64, keepOne bool) {
	t.Helper()
	var all []decoded
	derr := Decode(b, func(offset, ts int64, r *Record) error {
		all = append(all, decodedOf(offset, ts, r))
		return nil
	})
	selected := func(i int) bool { return mask&(1<<(i%64)) != 0 }
	prefix := []byte("prefix")
	index := 0
	out, res, err := Filter(append([]byte{}, prefix...), b, keepOne, func(offset, ts int64, r *Record) bool {
		if index >= len(all) || !reflect.DeepEqual(decodedOf(offset, ts, r), all[index]) {
			t.Fatalf("keep saw record %d as %+v, Decode saw %+v", index, decodedOf(offset, ts, r), all)
		}
		index++
		return selected(index - 1)
	})
	if (err == nil) != (derr == nil) {
		t.Fatalf("Filter says %v, Decode says %v", err, derr)
	}
	if err != nil {
		if !isSentinel(err) {
			t.Fatalf("Filter returned an error without a sentinel: %v", err)
		}
		if !bytes.Equal(out, prefix) {
			t.Fatalf("failed Filter changed dst")
		}
		return
	}
	if !bytes.HasPrefix(out, prefix) {
		t.Fatalf("Filter lost dst's prefix")
	}
	out = out[len(prefix):]
	var want []decoded
	for i, d := range all {
		if selected(i) {
			want = append(want, d)
		}
	}
	if len(want) == 0 && keepOne {
		want = all[len(all)-1:]
	}
	if res.Kept != len(want) || res.Kept+res.Removed != len(all) {
		t.Fatalf("result %+v, want %d kept of %d", res, len(want), len(all))
	}
	if len(want) == 0 {
		if len(out) != 0 {
			t.Fatalf("dropped batch left %d bytes", len(out))
		}
		return
	}
	if res.Unchanged != (len(want) == len(all)) || res.Unchanged && !bytes.Equal(out, b) {
		t.Fatalf("unchanged %v but %d of %d kept", res.Unchanged, len(want), len(all))
	}
	h, err := CheckStoredRecords(out)
	if err != nil {
		t.Fatalf("filtered batch refused by the stored rule: %v", err)
	}
	in, _ := ParseHeader(b)
	in.Length, in.RecordCount, in.CRC = h.Length, h.RecordCount, h.CRC
	if h != in {
		t.Fatalf("header changed: %+v, want %+v", h, in)
	}
	var got []decoded
	if err := Decode(out, func(offset, ts int64, r *Record) error {
		got = append(got, decodedOf(offset, ts, r))
		return nil
	}); err != nil {
		t.Fatalf("filtered batch does not decode: %v", err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("filtered records %+v, want %+v", got, want)
	}
}

func decodedOf(offset, ts int64, r *Record) decoded {
	d := decoded{offset: offset, ts: ts, key: clone(r.Key), value: clone(r.Value)}
	for _, h := range r.Headers {
		d.headers = append(d.headers, RecordHeader{Key: h.Key, Value: clone(h.Value)})
	}
	return d
}

// TestFilterKeepsProducerFields: an idempotent producer's batch, thinned, keeps producer id,
// epoch, base sequence and its offset span, and its codec, in every codec.
func TestFilterKeepsProducerFields(t *testing.T) {
	for _, codec := range []Codec{CodecNone, CodecGzip, CodecSnappy, CodecLZ4, CodecZstd} {
		bld := NewBuilder(BuilderOptions{Codec: codec, ProducerID: 42, ProducerEpoch: 3, BaseSequence: 17, Idempotent: true})
		for i := range 5 {
			bld.Append(int64(100+i), []byte{'k', byte(i % 2)}, []byte("value"), nil)
		}
		b, err := bld.Build(nil)
		if err != nil {
			t.Fatal(err)
		}
		SetBaseOffset(b, 1000)
		out, res, err := Filter(nil, b, false, func(offset, _ int64, _ *Record) bool { return offset >= 1003 })
		if err != nil || res.Kept != 2 || res.Removed != 3 {
			t.Fatalf("%s: %+v %v", codec, res, err)
		}
		h, err := CheckStoredRecords(out)
		if err != nil {
			t.Fatal(err)
		}
		if h.ProducerID != 42 || h.ProducerEpoch != 3 || h.BaseSequence != 17 || h.BaseOffset != 1000 ||
			h.LastOffset() != 1004 || h.RecordCount != 2 || h.Compression() != codec {
			t.Fatalf("%s: header %+v", codec, h)
		}
		if binary.BigEndian.Uint32(out[offsetCRC:]) != Checksum(out) {
			t.Fatalf("%s: crc not recomputed", codec)
		}
	}
	if _, _, err := Filter(nil, []byte("short"), false, nil); !errors.Is(err, ErrLength) {
		t.Fatalf("short input: %v", err)
	}
}

// BenchmarkFilter: thinning a 1 000-record batch to every other record.
func BenchmarkFilter(b *testing.B) {
	for _, codec := range []Codec{CodecNone, CodecZstd} {
		b.Run(codec.String(), func(b *testing.B) {
			bld := NewBuilder(BuilderOptions{Codec: codec})
			for i := range 1000 {
				bld.Append(int64(i), []byte{byte(i), byte(i >> 8)}, bytes.Repeat([]byte{'v'}, 100), nil)
			}
			in, err := bld.Build(nil)
			if err != nil {
				b.Fatal(err)
			}
			var out []byte
			b.ReportAllocs()
			b.SetBytes(int64(len(in)))
			for b.Loop() {
				out, _, err = Filter(out[:0], in, false, func(offset, _ int64, _ *Record) bool { return offset%2 == 0 })
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
