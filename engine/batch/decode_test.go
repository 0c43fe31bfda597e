package batch

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
)

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
func vi(v int64) []byte          { return appendVarint(nil, v) }

// record frames a record body with its length varint.
func record(body ...[]byte) []byte {
	b := cat(body...)
	return cat(vi(int64(len(b))), b)
}

// okBody is a record body with offsetDelta d: no key, value "v", no headers.
func okBody(d int64) []byte { return cat([]byte{0}, vi(0), vi(d), vi(-1), vi(1), []byte("v"), vi(0)) }

// bigBody is okBody with a 20-byte value, so few records still pass Validate's size floor.
func bigBody(d int64) []byte {
	return cat([]byte{0}, vi(0), vi(d), vi(-1), vi(20), bytes.Repeat([]byte("v"), 20), vi(0))
}

func TestDecodeRecordErrors(t *testing.T) {
	cases := []struct {
		name    string
		count   int32
		records []byte
		want    error
		detail  string
	}{
		{"valid two records", 2, cat(record(okBody(0)), record(okBody(1))), nil, ""},
		{"no records but count 1", 1, nil, ErrRecordCount, "cannot fit"},
		{"fewer records than count", 3, cat(record(bigBody(0)), record(bigBody(1))), ErrRecordCount, "declares 3 records, holds 2"},
		{"bytes after last record", 1, cat(record(okBody(0)), []byte{1, 2, 3, 4, 5, 6, 7}), ErrRecordCount, "7 bytes after its 1 records"},
		{"record length past end", 1, cat(vi(100), okBody(0)), ErrInvalidRecord, "length 100"},
		{"negative record length", 1, cat(vi(-3), okBody(0), []byte{0}), ErrInvalidRecord, "length -3"},
		{"record length varint too long", 1, cat([]byte{0x80, 0x80, 0x80, 0x80, 0x80, 0x01}, okBody(0)), ErrInvalidRecord, "record 0"},
		{"record length varint beyond int32", 1, cat([]byte{0xff, 0xff, 0xff, 0xff, 0x7f}, okBody(0)), ErrInvalidRecord, "record 0"},
		{"empty record body", 1, cat(vi(0), bytes.Repeat([]byte{0}, 7)), ErrInvalidRecord, "bad attributes"},
		{"timestampDelta varlong overflows", 1, record([]byte{0}, bytes.Repeat([]byte{0xff}, 10), []byte{0x01}, vi(0), vi(-1), vi(-1), vi(0)), ErrInvalidRecord, "bad timestampDelta"},
		{"offsetDelta not dense", 1, record(okBody(1)), ErrInvalidRecord, "offsetDelta 1, want 0"},
		{"second offsetDelta repeats", 2, cat(record(okBody(0)), record(okBody(0))), ErrInvalidRecord, "record 1: offsetDelta 0, want 1"},
		{"key length past record", 1, record([]byte{0}, vi(0), vi(0), vi(50), []byte("short")), ErrInvalidRecord, "bad key"},
		{"key length below -1", 1, record([]byte{0}, vi(0), vi(0), vi(-2), vi(-1), vi(0)), ErrInvalidRecord, "bad key"},
		{"value length past record", 1, record([]byte{0}, vi(0), vi(0), vi(-1), vi(9), []byte("v"), vi(0)), ErrInvalidRecord, "bad value"},
		{"header count missing", 2, cat(record([]byte{0}, vi(0), vi(0), vi(-1), vi(-1)), record(bigBody(1))), ErrInvalidRecord, "record 0: bad header count"},
		{"header count negative", 1, record([]byte{0}, vi(0), vi(0), vi(-1), vi(-1), vi(-1)), ErrInvalidRecord, "bad header count"},
		{"header count beyond bytes", 1, record([]byte{0}, vi(0), vi(0), vi(-1), vi(-1), vi(1<<30), []byte{0, 1}), ErrInvalidRecord, "bad header count"},
		{"header count beyond limit", 1, record([]byte{0}, vi(0), vi(0), vi(-1), vi(-1), vi(recordHeadersMax+1), bytes.Repeat([]byte{0, 1}, recordHeadersMax+1)), ErrInvalidRecord, "bad header count"},
		{"null header key", 1, record([]byte{0}, vi(0), vi(0), vi(-1), vi(-1), vi(1), vi(-1), vi(-1)), ErrInvalidRecord, "header key (null)"},
		{"header value past record", 1, record([]byte{0}, vi(0), vi(0), vi(-1), vi(-1), vi(1), vi(1), []byte("k"), vi(5), []byte("ab")), ErrInvalidRecord, "bad header value"},
		{"trailing bytes inside record", 1, record(okBody(0), []byte{9}), ErrInvalidRecord, "trailing bytes"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := wrapRecords(0, tc.count, tc.records)
			if _, err := Validate(b); err != nil && tc.want != ErrRecordCount {
				t.Fatalf("test batch does not pass Validate: %v", err)
			}
			err := Decode(b, func(int64, int64, *Record) error { return nil })
			// DecodeCRCChecked makes every check but the CRC's: the same verdict here.
			checkedErr := DecodeCRCChecked(b, func(int64, int64, *Record) error { return nil })
			if fmt.Sprint(err) != fmt.Sprint(checkedErr) {
				t.Fatalf("Decode: %v; DecodeCRCChecked: %v", err, checkedErr)
			}
			if tc.want == nil {
				if err != nil {
					t.Fatalf("Decode: %v", err)
				}
				return
			}
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.detail) {
				t.Fatalf("Decode error %q, want %v containing %q", err, tc.want, tc.detail)
			}
		})
	}
}

// TestDecodeCRCCheckedSkipsOnlyTheCRC: a batch whose stored CRC is wrong fails Decode and
// passes DecodeCRCChecked (whose caller vouches for the CRC), with the same records.
func TestDecodeCRCCheckedSkipsOnlyTheCRC(t *testing.T) {
	b := wrapRecords(0, 2, cat(record(okBody(0)), record(okBody(1))))
	var want, got []int64
	if err := Decode(b, func(offset, _ int64, _ *Record) error { want = append(want, offset); return nil }); err != nil || len(want) != 2 {
		t.Fatalf("Decode of the good batch: %d records, %v", len(want), err)
	}
	b[offsetCRC] ^= 0xff
	if err := Decode(b, nil); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Decode of a batch with a wrong CRC: %v, want ErrCorrupt", err)
	}
	err := DecodeCRCChecked(b, func(offset, _ int64, _ *Record) error {
		got = append(got, offset)
		return nil
	})
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("DecodeCRCChecked: offsets %v, err %v; want %v, nil", got, err, want)
	}
}

func TestDecodeCallbackErrorStops(t *testing.T) {
	stop := errors.New("stop")
	calls := 0
	err := Decode(sampleBatch(t), func(int64, int64, *Record) error {
		calls++
		if calls == 2 {
			return stop
		}
		return nil
	})
	if err != stop || calls != 2 {
		t.Fatalf("Decode returned %v after %d calls, want the callback's error after 2", err, calls)
	}
}

// zstdFrame returns a zstd frame: an optional declared content size, then rleBlocks RLE
// blocks of 128 KiB zeros each (4 bytes apiece on the wire), the last one marked last.
// It is built by hand so a test can make a tiny input that claims or yields a huge output.
func zstdFrame(declaredSize uint64, withSize bool, rleBlocks int) []byte {
	b := []byte{0x28, 0xb5, 0x2f, 0xfd}
	if withSize {
		// Frame header descriptor: FCS field 8 bytes (flag 3), single segment off, then a
		// window descriptor (window 8 MiB: exponent 13 -> 1<<23).
		b = append(b, 0xc0, (23-10)<<3)
		b = binary.LittleEndian.AppendUint64(b, declaredSize)
	} else {
		b = append(b, 0x00, (23-10)<<3) // no FCS, window 8 MiB
	}
	const blockBytes = 128 << 10
	for i := range rleBlocks {
		last := uint32(0)
		if i == rleBlocks-1 {
			last = 1
		}
		header := last | 1<<1 | blockBytes<<3 // type 1 = RLE, size = regenerated bytes
		b = append(b, byte(header), byte(header>>8), byte(header>>16), 0)
	}
	return b
}

func TestDecodeZstdBombRefused(t *testing.T) {
	// 520 blocks * 128 KiB = 65 MiB > MaxDecompressedBytes, from about 2 KiB of input.
	blocks := MaxDecompressedBytes/(128<<10) + 8
	b := wrapRecords(int16(CodecZstd), 1, zstdFrame(0, false, blocks))
	err := Decode(b, func(int64, int64, *Record) error { t.Fatal("callback on a bomb"); return nil })
	if !errors.Is(err, ErrInvalidRecord) || !strings.Contains(err.Error(), "decompress to more than") {
		t.Fatalf("Decode error %v, want ErrInvalidRecord over the limit", err)
	}
}

func TestDecodeZstdDeclaredSizeDoesNotAllocate(t *testing.T) {
	cases := []struct {
		name     string
		declared uint64
	}{
		{"declared above limit", 1 << 40},
		{"declared just under limit", MaxDecompressedBytes - 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := wrapRecords(int16(CodecZstd), 1, zstdFrame(tc.declared, true, 1))
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			err := Decode(b, nil)
			runtime.ReadMemStats(&after)
			if !errors.Is(err, ErrInvalidRecord) {
				t.Fatalf("Decode error %v, want ErrInvalidRecord", err)
			}
			// One 128 KiB block really decodes; the declared size must not be trusted.
			if grown := after.TotalAlloc - before.TotalAlloc; grown > 8<<20 {
				t.Fatalf("Decode allocated %d bytes for a %d-byte batch declaring %d", grown, len(b), tc.declared)
			}
		})
	}
}

func TestZstdFrameHelperIsRealZstd(t *testing.T) {
	dec, err := zstd.NewReader(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer dec.Close()
	out, err := dec.DecodeAll(zstdFrame(0, false, 3), nil)
	if err != nil || len(out) != 3*128<<10 {
		t.Fatalf("hand-built frame: %d bytes, %v", len(out), err)
	}
}

func TestBuilderAndDecodeDoNotAllocate(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("allocation counts need a normal build")
	}
	for _, codec := range []Codec{CodecNone, CodecZstd} {
		value := bytes.Repeat([]byte("0123456789abcdef"), 64)
		headers := []RecordHeader{{Key: "trace-id", Value: []byte("abc")}}
		builder := NewBuilder(BuilderOptions{Codec: codec})
		dst := make([]byte, 0, 64<<10)
		build := func() {
			builder.Reset()
			for i := range 16 {
				builder.Append(int64(1000+i), []byte("key"), value, headers)
			}
			var err error
			if dst, err = builder.Build(dst[:0]); err != nil {
				t.Fatal(err)
			}
		}
		if allocs := testing.AllocsPerRun(50, build); allocs != 0 {
			t.Errorf("%s: Builder allocates %.1f times per 16-record batch", codec, allocs)
		}
		count := 0
		fn := func(offset, ts int64, r *Record) error { count++; return nil }
		decode := func() {
			if err := Decode(dst, fn); err != nil {
				t.Fatal(err)
			}
		}
		if allocs := testing.AllocsPerRun(50, decode); allocs != 0 {
			t.Errorf("%s: Decode allocates %.1f times per 16-record batch", codec, allocs)
		}
		if count == 0 {
			t.Fatal("callback never ran")
		}
	}
}

func TestBuilderReuseAndLimits(t *testing.T) {
	b := NewBuilder(BuilderOptions{})
	if _, err := b.Build(nil); !errors.Is(err, ErrRecordCount) {
		t.Fatalf("empty Build: %v", err)
	}
	b.Append(5, nil, []byte("a"), nil)
	if b.Count() != 1 || b.Len() != HeaderSize+len(record(okBody(0))) {
		t.Fatalf("Count %d Len %d", b.Count(), b.Len())
	}
	first, err := b.Build([]byte("prefix"))
	if err != nil || string(first[:6]) != "prefix" {
		t.Fatalf("Build must append to dst: %q %v", first[:6], err)
	}
	if _, err := Validate(first[6:]); err != nil {
		t.Fatal(err)
	}
	b.Reset()
	b.Append(9, nil, []byte("b"), nil)
	second, err := b.Build(nil)
	if err != nil {
		t.Fatal(err)
	}
	h, _ := Validate(second)
	if h.RecordCount != 1 || h.BaseTimestamp != 9 {
		t.Fatalf("after Reset: %+v (base timestamp must follow the new first record)", h)
	}

	b.ResetWith(BuilderOptions{ProducerID: 77, ProducerEpoch: 2, BaseSequence: 100})
	b.Append(11, nil, []byte("c"), nil)
	third, err := b.Build(nil)
	if err != nil {
		t.Fatal(err)
	}
	if h, _ := Validate(third); h.ProducerID != 77 || h.ProducerEpoch != 2 || h.BaseSequence != 100 || h.RecordCount != 1 {
		t.Fatalf("after ResetWith: %+v", h)
	}

	huge := NewBuilder(BuilderOptions{})
	huge.Append(0, nil, make([]byte, MaxBatchBytes), nil)
	if _, err := huge.Build(nil); !errors.Is(err, ErrLength) {
		t.Fatalf("oversized Build: %v", err)
	}
	if _, err := NewBuilder(BuilderOptions{Codec: Codec(5)}).appendOne().Build(nil); !errors.Is(err, ErrUnsupportedCodec) {
		t.Fatalf("codec 5 Build: %v", err)
	}
}

func (b *Builder) appendOne() *Builder { b.Append(0, nil, nil, nil); return b }

// TestDecodeZstdStreamingFrames reads zstd the way other Kafka clients write it: the Java
// producer compresses with a streaming encoder (no frame content size, many blocks), and
// the format allows several concatenated frames. Decode must not depend on our encoder.
func TestDecodeZstdStreamingFrames(t *testing.T) {
	const count = 300
	builder := NewBuilder(BuilderOptions{BaseTimestamp: fuzzBaseTimestamp})
	value := bytes.Repeat([]byte("0123456789abcdef"), 64)
	for i := range count {
		builder.Append(fuzzBaseTimestamp+int64(i), fmt.Appendf(nil, "key-%d", i), value, nil)
	}
	plain, err := builder.Build(nil)
	if err != nil {
		t.Fatal(err)
	}
	raw := plain[HeaderSize:] // ~310 KiB: several 128 KiB blocks

	var streamed bytes.Buffer
	w, err := zstd.NewWriter(&streamed, zstd.WithEncoderConcurrency(1))
	if err != nil {
		t.Fatal(err)
	}
	for chunk := range slices.Chunk(raw, 10_000) {
		if _, err := w.Write(chunk); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	var frameHeader zstd.Header
	if err := frameHeader.Decode(streamed.Bytes()); err != nil || frameHeader.HasFCS {
		t.Fatalf("streamed frame should carry no content size: %+v %v", frameHeader, err)
	}

	twoFrames := compressZstd(compressZstd(nil, raw[:len(raw)/3]), raw[len(raw)/3:])

	for name, section := range map[string][]byte{"streamed": streamed.Bytes(), "two frames": twoFrames} {
		b := wrapRecords(int16(CodecZstd), count, section)
		n := 0
		err := Decode(b, func(offset, ts int64, r *Record) error {
			if offset != fuzzBaseOffset+int64(n) || ts != fuzzBaseTimestamp+int64(n) ||
				string(r.Key) != fmt.Sprintf("key-%d", n) || !bytes.Equal(r.Value, value) {
				return fmt.Errorf("record %d: offset %d ts %d key %q", n, offset, ts, r.Key)
			}
			n++
			return nil
		})
		if err != nil || n != count {
			t.Fatalf("%s: decoded %d of %d records: %v", name, n, count, err)
		}
	}
}

// TestDecodeHeaderKeysAcrossRecordsAndCalls checks header key interning: keys that repeat,
// swap places, shrink in count, or exceed the pooled bounds still decode exactly.
func TestDecodeHeaderKeysAcrossRecordsAndCalls(t *testing.T) {
	long := strings.Repeat("k", internedKeyBytesMax+1)
	many := make([]RecordHeader, pooledHeadersMax+1)
	for i := range many {
		many[i] = RecordHeader{Key: fmt.Sprintf("h%d", i), Value: []byte{byte(i)}}
	}
	batches := [][]testRecord{
		{
			{ts: 1, headers: []RecordHeader{{Key: "a", Value: []byte("1")}, {Key: "b"}}},
			{ts: 2, headers: []RecordHeader{{Key: "b", Value: []byte("2")}, {Key: "a"}}},
			{ts: 3, headers: []RecordHeader{{Key: long, Value: []byte{}}}},
			{ts: 4},
		},
		{{ts: 5, headers: many}},
		{{ts: 6, headers: []RecordHeader{{Key: "a", Value: []byte("x")}}}, {ts: 7, headers: []RecordHeader{{Key: long}}}},
	}
	for i, records := range batches {
		tb := testBatch{name: fmt.Sprintf("batch %d", i), records: records}
		for range 2 { // the second pass runs on pooled state left by the first
			checkDecoded(t, tb.name, decodeAll(t, buildOurs(t, tb)), records, 0)
		}
	}
}
