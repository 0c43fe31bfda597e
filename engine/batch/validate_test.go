package batch

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"strings"
	"testing"
)

// sampleBatch is a valid 3-record uncompressed batch.
func sampleBatch(t testing.TB) []byte {
	t.Helper()
	b := NewBuilder(BuilderOptions{})
	b.Append(100, []byte("k0"), []byte("v0"), nil)
	b.Append(101, nil, []byte("v1"), []RecordHeader{{Key: "h", Value: []byte("x")}})
	b.Append(102, []byte("k2"), nil, nil)
	out, err := b.Build(nil)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// fixCRC recomputes the CRC so a test reaches the check after it.
func fixCRC(b []byte) []byte {
	binary.BigEndian.PutUint32(b[offsetCRC:], crc32.Checksum(b[offsetAttributes:], castagnoli))
	return b
}

func put32(b []byte, at int, v int32) []byte {
	binary.BigEndian.PutUint32(b[at:], uint32(v))
	return b
}

func TestValidateErrors(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(b []byte) []byte
		want   error // nil: valid
		detail string
	}{
		{"valid", func(b []byte) []byte { return b }, nil, ""},
		{"base offset and leader epoch are outside the crc", func(b []byte) []byte {
			SetBaseOffset(b, 1<<40)
			SetLeaderEpoch(b, 7)
			return b
		}, nil, ""},
		{"empty buffer", func(b []byte) []byte { return nil }, ErrLength, "header needs 61 bytes, have 0"},
		{"truncated header", func(b []byte) []byte { return b[:HeaderSize-1] }, ErrLength, "have 60"},
		{"bad magic 1", func(b []byte) []byte { b[offsetMagic] = 1; return b }, ErrBadMagic, "magic 1"},
		{"bad magic 3", func(b []byte) []byte { b[offsetMagic] = 3; return b }, ErrBadMagic, "magic 3"},
		{"length below header", func(b []byte) []byte { return put32(b, offsetLength, minLength-1) }, ErrLength, "batchLength 48"},
		{"negative length", func(b []byte) []byte { return put32(b, offsetLength, -1) }, ErrLength, "batchLength -1"},
		{"length above max", func(b []byte) []byte { return put32(b, offsetLength, MaxBatchBytes-11) }, ErrLength, "outside"},
		{"truncated batch", func(b []byte) []byte { return b[:len(b)-1] }, ErrLength, "buffer holds"},
		{"trailing byte", func(b []byte) []byte { return append(b, 0) }, ErrLength, "buffer holds"},
		{"crc field flipped", func(b []byte) []byte { b[offsetCRC] ^= 1; return b }, ErrCorrupt, "stores crc"},
		{"attributes flipped", func(b []byte) []byte { b[offsetAttributes+1] ^= 0x40; return b }, ErrCorrupt, ""},
		{"record byte flipped", func(b []byte) []byte { b[HeaderSize+3] ^= 0x80; return b }, ErrCorrupt, ""},
		{"last byte flipped", func(b []byte) []byte { b[len(b)-1] ^= 1; return b }, ErrCorrupt, ""},
		{"record count zero", func(b []byte) []byte {
			return fixCRC(put32(put32(b, offsetRecordCount, 0), offsetLastOffsetDelta, -1))
		}, ErrRecordCount, "record count 0"},
		{"record count negative", func(b []byte) []byte { return fixCRC(put32(b, offsetRecordCount, -5)) }, ErrRecordCount, "record count -5"},
		{"count disagrees with lastOffsetDelta", func(b []byte) []byte { return fixCRC(put32(b, offsetLastOffsetDelta, 5)) }, ErrRecordCount, "lastOffsetDelta 5"},
		{"count too large for bytes", func(b []byte) []byte {
			return fixCRC(put32(put32(b, offsetRecordCount, 1<<30), offsetLastOffsetDelta, 1<<30-1))
		}, ErrRecordCount, "cannot fit"},
		{"codec 5", codecMutation(5), ErrUnsupportedCodec, "codec(5)"},
		{"codec 6", codecMutation(6), ErrUnsupportedCodec, "codec(6)"},
		{"codec 7", codecMutation(7), ErrUnsupportedCodec, "codec(7)"},
	}
	sentinels := []error{ErrCorrupt, ErrBadMagic, ErrLength, ErrRecordCount, ErrUnsupportedCodec, ErrInvalidRecord}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := tc.mutate(sampleBatch(t))
			h, err := Validate(b)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				if h.Size() != len(b) || h.RecordCount != 3 || h.LastOffset() != h.BaseOffset+2 {
					t.Fatalf("header %+v", h)
				}
				return
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("Validate error %v, want %v", err, tc.want)
			}
			for _, s := range sentinels {
				if s != tc.want && errors.Is(err, s) {
					t.Fatalf("error %v also matches %v", err, s)
				}
			}
			if !strings.Contains(err.Error(), tc.detail) {
				t.Fatalf("error %q lacks detail %q", err, tc.detail)
			}
			// Decode must refuse the same bytes with the same sentinel and call nothing,
			// except a count below lastOffsetDelta+1: that is a batch compaction thinned,
			// which Decode (the stored rule) reads.
			calls := 0
			if tc.name == "count disagrees with lastOffsetDelta" {
				if err := Decode(b, func(int64, int64, *Record) error { calls++; return nil }); err != nil || calls != 3 {
					t.Fatalf("Decode of a thinned batch: %v after %d calls", err, calls)
				}
				return
			}
			if err := Decode(b, func(int64, int64, *Record) error { calls++; return nil }); !errors.Is(err, tc.want) || calls != 0 {
				t.Fatalf("Decode: %v after %d calls, want %v", err, calls, tc.want)
			}
		})
	}
}

func codecMutation(c Codec) func([]byte) []byte {
	return func(b []byte) []byte {
		attrs := binary.BigEndian.Uint16(b[offsetAttributes:])
		binary.BigEndian.PutUint16(b[offsetAttributes:], attrs&^attributesCodecMask|uint16(c))
		return fixCRC(b)
	}
}

func TestParseHeaderPartialBatch(t *testing.T) {
	b := sampleBatch(t)
	h, err := ParseHeader(b[:HeaderSize])
	if err != nil {
		t.Fatalf("ParseHeader on a header-only prefix: %v", err)
	}
	if h.Size() != len(b) || h.Magic != MagicV2 || h.LeaderEpoch != -1 || h.ProducerID != -1 ||
		h.BaseTimestamp != 100 || h.MaxTimestamp != 102 || h.Compression() != CodecNone {
		t.Fatalf("header %+v", h)
	}
	// Two batches back to back: ParseHeader reads the first; Size finds the second.
	two := append(append([]byte{}, b...), b...)
	h2, err := ParseHeader(two[h.Size():])
	if err != nil || h2.Size() != len(b) {
		t.Fatalf("second batch: %+v %v", h2, err)
	}
	// A corrupt CRC is not ParseHeader's business.
	b[offsetCRC] ^= 0xff
	if _, err := ParseHeader(b); err != nil {
		t.Fatalf("ParseHeader checked the crc: %v", err)
	}
}

func TestSetBaseOffsetAndEpochKeepCRC(t *testing.T) {
	b := sampleBatch(t)
	crc := binary.BigEndian.Uint32(b[offsetCRC:])
	SetBaseOffset(b, -1)
	SetLeaderEpoch(b, 1<<30)
	h, err := Validate(b)
	if err != nil {
		t.Fatal(err)
	}
	if h.BaseOffset != -1 || h.LeaderEpoch != 1<<30 || h.CRC != crc {
		t.Fatalf("header %+v", h)
	}
}
