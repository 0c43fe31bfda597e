package batch

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// Fuzz targets. Seeds live in testdata/fuzz/<Target>/ and run as ordinary tests with
// `go test`; `go test -run '^$' -fuzz FuzzDecode -fuzztime 30s ./engine/batch` explores.
// RINGLOG_WRITE_FUZZ_SEEDS=1 go test -run TestWriteFuzzSeeds ./engine/batch rewrites the
// committed seed files from fuzzSeeds below.

// FuzzValidate feeds raw bytes to Validate and, when they pass, to Decode: neither may
// panic, and a batch Validate accepts must report its own size.
func FuzzValidate(f *testing.F) {
	for _, s := range validateSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		h, err := Validate(data)
		if err != nil {
			if !isSentinel(err) {
				t.Fatalf("Validate returned an error without a sentinel: %v", err)
			}
			return
		}
		if h.Size() != len(data) || h.RecordCount < 1 {
			t.Fatalf("accepted header %+v for %d bytes", h, len(data))
		}
		if err := Decode(data, nil); err != nil && !isSentinel(err) {
			t.Fatalf("Decode returned an error without a sentinel: %v", err)
		}
	})
}

// FuzzDecode wraps a fuzzed records section in a header with a correct length and CRC, so
// the fuzzer reaches the record decoder instead of stopping at the CRC. Whatever Decode
// accepts must survive a re-encode with Builder and decode to the same records.
func FuzzDecode(f *testing.F) {
	for _, s := range decodeSeeds(f) {
		f.Add(s.attributes, s.count, s.records)
	}
	f.Fuzz(func(t *testing.T, attributes int16, count int32, records []byte) {
		b := wrapRecords(attributes, count, records)
		var got []decoded
		err := Decode(b, func(offset, ts int64, r *Record) error {
			if r.OffsetDelta != int32(len(got)) || offset != fuzzBaseOffset+int64(r.OffsetDelta) {
				t.Fatalf("record %d at offset %d delta %d", len(got), offset, r.OffsetDelta)
			}
			d := decoded{offset: offset, ts: fuzzBaseTimestamp + r.TimestampDelta, key: clone(r.Key), value: clone(r.Value)}
			for _, h := range r.Headers {
				d.headers = append(d.headers, RecordHeader{Key: h.Key, Value: clone(h.Value)})
			}
			got = append(got, d)
			return nil
		})
		// The broker's produce check must agree with Decode exactly: it refuses what a
		// consumer could not read and accepts everything a consumer can.
		if _, perr := ValidateProduce(b); (perr == nil) != (err == nil) {
			t.Fatalf("ValidateProduce says %v, Decode says %v", perr, err)
		}
		if err != nil {
			if !isSentinel(err) {
				t.Fatalf("Decode returned an error without a sentinel: %v", err)
			}
			return
		}
		if _, serr := CheckStoredRecords(b); serr != nil {
			t.Fatalf("CheckStoredRecords refuses a produced batch: %v", serr)
		}
		if len(got) != int(count) {
			t.Fatalf("Decode accepted %d records for count %d", len(got), count)
		}
		builder := NewBuilder(BuilderOptions{BaseTimestamp: fuzzBaseTimestamp})
		want := make([]testRecord, len(got))
		for i, d := range got {
			builder.Append(d.ts, d.key, d.value, d.headers)
			want[i] = testRecord{ts: d.ts, key: d.key, value: d.value, headers: d.headers}
		}
		again, err := builder.Build(nil)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		SetBaseOffset(again, fuzzBaseOffset)
		checkDecoded(t, "re-encoded", decodeAll(t, again), want, fuzzBaseOffset)
	})
}

// FuzzCheckStored feeds a records section with any record count and lastOffsetDelta (the
// shapes compaction leaves) to CheckStoredRecords: it must not panic, must return a
// sentinel, and what it accepts must decode record by record with increasing deltas.
func FuzzCheckStored(f *testing.F) {
	for _, s := range storedSeeds() {
		f.Add(s.attributes, s.count, s.lastOffsetDelta, s.records)
	}
	f.Fuzz(func(t *testing.T, attributes int16, count, lastOffsetDelta int32, records []byte) {
		b := wrapRecords(attributes, count, records)
		put32(b, offsetLastOffsetDelta, lastOffsetDelta)
		fixCRC(b)
		h, err := CheckStoredRecords(b)
		if err != nil {
			if !isSentinel(err) {
				t.Fatalf("CheckStoredRecords returned an error without a sentinel: %v", err)
			}
			return
		}
		if h.RecordCount < 1 || int64(h.RecordCount) > int64(h.LastOffsetDelta)+1 {
			t.Fatalf("accepted count %d with lastOffsetDelta %d", h.RecordCount, h.LastOffsetDelta)
		}
	})
}

type storedSeed struct {
	attributes             int16
	count, lastOffsetDelta int32
	records                []byte
}

func storedSeeds() []storedSeed {
	return []storedSeed{
		{0, 2, 5, withDeltas(1, 4)},
		{0, 1, 9, withDeltas(9)},
		{0, 2, 5, withDeltas(3, 3)},
		{0, 2, 5, withDeltas(1, 6)},
		{0, 3, 1, withDeltas(0, 1, 2)},
		{int16(CodecZstd), 2, 7, zstdRecords(withDeltas(2, 7))},
		{int16(CodecZstd), 1_000_000_000, 1_000_000_000, zstdRecords(withDeltas(0))},
		{0, 1, 0, nil},
	}
}

const (
	fuzzBaseOffset    = 1 << 32
	fuzzBaseTimestamp = 1_700_000_000_000
)

// wrapRecords builds a batch around a records section with a correct length and CRC.
func wrapRecords(attributes int16, count int32, records []byte) []byte {
	b := make([]byte, HeaderSize, HeaderSize+len(records))
	h := Header{
		BaseOffset: fuzzBaseOffset, Length: int32(minLength + len(records)), LeaderEpoch: 3,
		Magic: MagicV2, Attributes: attributes, LastOffsetDelta: count - 1,
		BaseTimestamp: fuzzBaseTimestamp, MaxTimestamp: fuzzBaseTimestamp + 10,
		ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1, RecordCount: count,
	}
	putHeader(b, &h)
	return fixCRC(append(b, records...))
}

func isSentinel(err error) bool {
	for _, s := range []error{ErrCorrupt, ErrBadMagic, ErrLength, ErrRecordCount, ErrUnsupportedCodec, ErrInvalidRecord} {
		if errors.Is(err, s) {
			return true
		}
	}
	return false
}

func validateSeeds(t testing.TB) [][]byte {
	plain := sampleBatch(t)
	zstdBatch := func() []byte {
		b := NewBuilder(BuilderOptions{Codec: CodecZstd})
		for i := range 8 {
			b.Append(int64(i), []byte("key"), bytes.Repeat([]byte{'v'}, 100), []RecordHeader{{Key: "h", Value: nil}})
		}
		out, err := b.Build(nil)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}()
	headerOnly := append([]byte{}, plain[:HeaderSize]...)
	hugeLength := put32(append([]byte{}, plain...), offsetLength, 1<<31-1)
	return [][]byte{
		plain,
		zstdBatch,
		{},
		make([]byte, HeaderSize),
		headerOnly,
		plain[:len(plain)-1],
		append(append([]byte{}, plain...), plain...),
		hugeLength,
	}
}

type decodeSeed struct {
	name       string
	attributes int16
	count      int32
	records    []byte
}

func decodeSeeds(t testing.TB) []decodeSeed {
	plain := sampleBatch(t)
	z := NewBuilder(BuilderOptions{Codec: CodecZstd})
	z.Append(1, []byte("k"), []byte("value value value value"), []RecordHeader{{Key: "trace", Value: []byte("1")}})
	z.Append(2, nil, nil, nil)
	zstdBatch, err := z.Build(nil)
	if err != nil {
		t.Fatal(err)
	}
	varint := func(v int64) []byte { return appendVarint(nil, v) }
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	// A minimal record body: attributes, tsDelta 0, offsetDelta 0, null key, null value.
	minimal := cat([]byte{0}, varint(0), varint(0), varint(-1), varint(-1))
	withHeaders := func(n int64) []byte { return cat(minimal, varint(n)) }
	return []decodeSeed{
		{"plain", 0, 3, plain[HeaderSize:]},
		{"zstd", int16(CodecZstd), 2, zstdBatch[HeaderSize:]},
		{"empty", 0, 1, nil},
		{"minimal record", 0, 1, cat(varint(7-1), withHeaders(0))},
		{"record length past end", 0, 1, cat(varint(1<<30), withHeaders(0))},
		{"negative record length", 0, 1, cat(varint(-2), withHeaders(0))},
		{"overlong varint", 0, 1, cat(varint(6), []byte{0, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01})},
		{"key length past end", 0, 1, cat(varint(4), []byte{0, 0, 0}, varint(1<<20))},
		{"huge header count", 0, 1, cat(varint(int64(len(withHeaders(1<<30)))), withHeaders(1<<30))},
		{"null header key", 0, 1, cat(varint(int64(len(withHeaders(1))+2)), withHeaders(1), varint(-1), varint(-1))},
		{"garbage zstd", int16(CodecZstd), 1, []byte{0x28, 0xb5, 0x2f, 0xfd, 0xff, 0xff, 0xff}},
		{"log append time", 0x08, 3, plain[HeaderSize:]},
		{"zstd claiming 10^9 records", int16(CodecZstd), 1_000_000_000, zstdRecords(withDeltas(0))},
		{"zstd zeros", int16(CodecZstd), 1, zstdFrame(0, false, 2)},
		{"offset delta gap", 0, 2, withDeltas(0, 2)},
		{"gzip", int16(CodecGzip), 2, compress(CodecGzip, nil, withDeltas(0, 1))},
		{"snappy raw", int16(CodecSnappy), 2, compress(CodecSnappy, nil, withDeltas(0, 1))},
		{"snappy xerial", int16(CodecSnappy), 2, xerialFrame(withDeltas(0), withDeltas(1))},
		{"lz4", int16(CodecLZ4), 2, compress(CodecLZ4, nil, withDeltas(0, 1))},
		{"garbage gzip", int16(CodecGzip), 1, []byte{0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff, 0xff}},
		{"snappy declaring 2^31 bytes", int16(CodecSnappy), 1, []byte{0x80, 0x80, 0x80, 0x80, 0x08, 0}},
		{"xerial chunk past end", int16(CodecSnappy), 1, append(xerialFrame(), 0x7f, 0xff, 0xff, 0xff, 1)},
		{"garbage lz4", int16(CodecLZ4), 1, []byte{0x04, 0x22, 0x4d, 0x18, 0x64, 0x40, 0xa7, 0xff, 0xff, 0xff, 0xff}},
	}
}

// TestWriteFuzzSeeds regenerates testdata/fuzz from the seed lists above. It runs only
// with RINGLOG_WRITE_FUZZ_SEEDS=1; otherwise it checks the committed files exist.
func TestWriteFuzzSeeds(t *testing.T) {
	files := map[string]string{}
	for i, s := range validateSeeds(t) {
		files[filepath.Join("FuzzValidate", fmt.Sprintf("seed-%02d", i))] =
			"go test fuzz v1\n[]byte(" + strconv.Quote(string(s)) + ")\n"
	}
	for i, s := range decodeSeeds(t) {
		files[filepath.Join("FuzzDecode", fmt.Sprintf("seed-%02d", i))] = fmt.Sprintf(
			"go test fuzz v1\nint16(%d)\nint32(%d)\n[]byte(%s)\n", s.attributes, s.count, strconv.Quote(string(s.records)))
	}
	for i, s := range storedSeeds() {
		files[filepath.Join("FuzzCheckStored", fmt.Sprintf("seed-%02d", i))] = fmt.Sprintf(
			"go test fuzz v1\nint16(%d)\nint32(%d)\nint32(%d)\n[]byte(%s)\n", s.attributes, s.count, s.lastOffsetDelta, strconv.Quote(string(s.records)))
	}
	for i, s := range filterSeeds(t) {
		files[filepath.Join("FuzzFilter", fmt.Sprintf("seed-%02d", i))] = fmt.Sprintf(
			"go test fuzz v1\nint16(%d)\nint32(%d)\nint32(%d)\nuint64(%d)\nbool(%v)\n[]byte(%s)\n",
			s.attributes, s.count, s.lastOffsetDelta, s.mask, s.keepOne, strconv.Quote(string(s.records)))
	}
	write := os.Getenv("RINGLOG_WRITE_FUZZ_SEEDS") == "1"
	for name, content := range files {
		path := filepath.Join("testdata", "fuzz", name)
		if write {
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if _, err := os.Stat(path); err != nil {
			t.Errorf("committed fuzz seed missing (run with RINGLOG_WRITE_FUZZ_SEEDS=1): %v", err)
		}
	}
}
