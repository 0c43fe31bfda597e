package batch

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

// zstdRecords compresses an uncompressed records section the way Builder does.
func zstdRecords(records []byte) []byte { return compressZstd(nil, records) }

// withDeltas builds records with the given offset deltas (bigBody each).
func withDeltas(deltas ...int64) []byte {
	var out []byte
	for _, d := range deltas {
		out = append(out, record(bigBody(d))...)
	}
	return out
}

// wrapStored is wrapRecords with a lastOffsetDelta that may exceed count-1 (a batch thinned
// by compaction).
func wrapStored(count, lastOffsetDelta int32, records []byte) []byte {
	b := wrapRecords(0, count, records)
	put32(b, offsetLastOffsetDelta, lastOffsetDelta)
	return fixCRC(b)
}

// TestValidateProducePoisonPills: batches with a good CRC that no consumer could read are
// refused on the way in, each with the sentinel a broker maps to CORRUPT_MESSAGE.
func TestValidateProducePoisonPills(t *testing.T) {
	garbage := bytes.Repeat([]byte{0xfe, 0x03, 0x41}, 40)
	cases := []struct {
		name   string
		batch  []byte
		want   error // nil: accepted
		detail string
	}{
		{"valid plain", sampleBatch(t), nil, ""},
		{"valid zstd", wrapRecords(int16(CodecZstd), 2, zstdRecords(withDeltas(0, 1))), nil, ""},
		{"garbage records, good crc", wrapRecords(0, 3, garbage), ErrInvalidRecord, "record 0"},
		{"garbage zstd, good crc", wrapRecords(int16(CodecZstd), 1, garbage), ErrInvalidRecord, "zstd"},
		{"100-byte zstd batch claiming 10^9 records", wrapRecords(int16(CodecZstd), 1_000_000_000, zstdRecords(withDeltas(0))), ErrRecordCount, "declares 1000000000 records"},
		{"zstd claiming more records than it holds", wrapRecords(int16(CodecZstd), 3, zstdRecords(withDeltas(0, 1))), ErrRecordCount, "declares 3 records, holds 2"},
		{"zstd count beyond decompressed bytes", wrapRecords(int16(CodecZstd), 1000, zstdRecords(withDeltas(0, 1))), ErrRecordCount, "cannot fit"},
		{"zstd bomb", wrapRecords(int16(CodecZstd), 1, zstdFrame(0, false, MaxDecompressedBytes/(128<<10)+8)), ErrInvalidRecord, "decompress to more than"},
		{"zstd zeros", wrapRecords(int16(CodecZstd), 1, zstdFrame(0, false, 2)), ErrInvalidRecord, "record 0"},
		{"zstd records with trailing bytes", wrapRecords(int16(CodecZstd), 1, zstdRecords(append(withDeltas(0), 1, 2, 3))), ErrRecordCount, "bytes after"},
		{"offset deltas with a gap", wrapRecords(0, 2, withDeltas(0, 2)), ErrInvalidRecord, "offsetDelta 2, want 1"},
		{"compacted shape is not a produce", wrapStored(2, 5, withDeltas(1, 4)), ErrRecordCount, "lastOffsetDelta 5"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h, err := ValidateProduce(tc.batch)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("ValidateProduce: %v", err)
				}
				if h.Size() != len(tc.batch) {
					t.Fatalf("header size %d for %d bytes", h.Size(), len(tc.batch))
				}
				if err := Decode(tc.batch, nil); err != nil {
					t.Fatalf("accepted by ValidateProduce, refused by Decode: %v", err)
				}
				return
			}
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.detail) {
				t.Fatalf("ValidateProduce error %v, want %v containing %q", err, tc.want, tc.detail)
			}
			// Decode reads stored batches, so it accepts what compaction leaves; every other
			// poison pill is unreadable for a consumer too.
			if compacted := strings.HasPrefix(tc.name, "compacted"); (Decode(tc.batch, nil) == nil) != compacted {
				t.Fatalf("Decode accepts = %v, want %v", !compacted, compacted)
			}
		})
	}
}

// TestValidateStoredAcceptsCompactedBatches: the stored rule lets through what compaction
// legitimately leaves (fewer records than lastOffsetDelta+1, gaps in the deltas) and still
// refuses what no log can hold.
func TestValidateStoredAcceptsCompactedBatches(t *testing.T) {
	cases := []struct {
		name   string
		batch  []byte
		want   error
		detail string
	}{
		{"produced batch", sampleBatch(t), nil, ""},
		{"compacted: 2 of 6 records", wrapStored(2, 5, withDeltas(1, 4)), nil, ""},
		{"compacted: last record only", wrapStored(1, 9, withDeltas(9)), nil, ""},
		{"count above lastOffsetDelta+1", wrapStored(3, 1, withDeltas(0, 1, 2)), ErrRecordCount, "record count 3 with lastOffsetDelta 1"},
		{"negative lastOffsetDelta", wrapStored(1, -1, withDeltas(0)), ErrRecordCount, "lastOffsetDelta -1"},
		{"deltas not increasing", wrapStored(2, 5, withDeltas(3, 3)), ErrInvalidRecord, "offsetDelta 3 after 3"},
		{"delta above lastOffsetDelta", wrapStored(2, 5, withDeltas(1, 6)), ErrInvalidRecord, "offsetDelta 6 after 1"},
		{"crc flipped", func() []byte { b := sampleBatch(t); b[len(b)-1] ^= 1; return b }(), ErrCorrupt, "stores crc"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := CheckStoredRecords(tc.batch)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("CheckStoredRecords: %v", err)
				}
				if _, err := ValidateStored(tc.batch); err != nil {
					t.Fatalf("ValidateStored: %v", err)
				}
				return
			}
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.detail) {
				t.Fatalf("CheckStoredRecords error %v, want %v containing %q", err, tc.want, tc.detail)
			}
		})
	}
}

func TestValidateProduceDoesNotAllocate(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("allocation counts need a normal build")
	}
	plain := sampleBatch(t)
	compressed := wrapRecords(int16(CodecZstd), 2, zstdRecords(withDeltas(0, 1)))
	for name, b := range map[string][]byte{"plain": plain, "zstd": compressed} {
		if _, err := ValidateProduce(b); err != nil { // warm the pools
			t.Fatal(err)
		}
		if allocs := testing.AllocsPerRun(100, func() { _, _ = ValidateProduce(b) }); allocs > 0 {
			t.Errorf("%s: ValidateProduce allocates %.1f times per batch", name, allocs)
		}
	}
}

// TestDecodeReadsCompactedBatches: a consumer decodes a batch compaction thinned, with the
// offsets of the records that remain.
func TestDecodeReadsCompactedBatches(t *testing.T) {
	b := wrapStored(2, 5, withDeltas(1, 4))
	var offsets []int64
	if err := Decode(b, func(offset, _ int64, _ *Record) error { offsets = append(offsets, offset); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(offsets) != 2 || offsets[0] != fuzzBaseOffset+1 || offsets[1] != fuzzBaseOffset+4 {
		t.Fatalf("offsets %v, want base+1 and base+4", offsets)
	}
}
