package batch

import (
	"fmt"
	"hash/crc32"
	"sync"
)

// Record-level validation: what a broker checks before it accepts a batch, so that it never
// acknowledges bytes a consumer cannot read (a "poison pill").
//
// Two rule sets exist because Kafka has two kinds of batch:
//
//   - A produced batch (ValidateProduce): the producer's rule, record count ==
//     lastOffsetDelta+1 and offset deltas exactly 0, 1, 2, ...
//   - A stored batch (ValidateStored): what the log may legitimately hold once compaction
//     has removed records from a batch: 1 <= record count <= lastOffsetDelta+1 and offset
//     deltas strictly increasing, none above lastOffsetDelta. Recovery and the scrubber use
//     this rule, so that they never reject a compacted batch as corrupt.

// recordsPerBatchMax bounds the record count a batch may declare. Each record takes at
// least recordBytesMin (7) bytes decompressed, so no batch whose records fit in
// MaxDecompressedBytes can hold more: a compressed batch claiming more is refused before a
// byte is decompressed (a 100-byte zstd batch claiming 10^9 records costs nothing).
const recordsPerBatchMax = MaxDecompressedBytes / recordBytesMin

// validateState is the pooled decompression buffer of ValidateProduce.
type validateState struct{ decompressed []byte }

var validateStatePool = sync.Pool{New: func() any { return new(validateState) }}

// ValidateProduce checks b as one batch a producer sent: everything Validate checks, then
// every record (framing, varints, lengths within the record, offset deltas 0, 1, 2, ...,
// header keys not null, exactly RecordCount records and no trailing bytes). A compressed batch
// (gzip, snappy, lz4 or zstd) is
// decompressed into a pooled buffer, refusing output above MaxDecompressedBytes and any
// declared count that could not fit in it. It allocates nothing for an uncompressed batch.
//
// A batch ValidateProduce accepts is one Decode accepts. Errors wrap this package's
// sentinels, as Validate's do.
func ValidateProduce(b []byte) (Header, error) {
	h, err := Validate(b)
	if err != nil {
		return h, err
	}
	return h, checkRecords(&h, b, true)
}

// ValidateStored checks b as one batch read back from a log: header, size, CRC-32C and
// codec as Validate, but the record count rule is the stored one (1 <= count <=
// lastOffsetDelta+1), so that batches thinned by compaction pass. It does not walk the
// records; CheckStoredRecords does.
func ValidateStored(b []byte) (Header, error) { return validateStored(b, true) }

// validateStored is ValidateStored; checkCRC false skips the CRC-32C (DecodeCRCChecked).
func validateStored(b []byte, checkCRC bool) (Header, error) {
	h, err := ParseHeader(b)
	if err != nil {
		return h, err
	}
	if len(b) != h.Size() {
		return h, fmt.Errorf("%w: batch at offset %d has size %d, buffer holds %d bytes",
			ErrLength, h.BaseOffset, h.Size(), len(b))
	}
	if checkCRC {
		if err := CheckCRC(b, h); err != nil {
			return h, err
		}
	}
	if h.RecordCount < 1 || h.LastOffsetDelta < 0 || int64(h.RecordCount) > int64(h.LastOffsetDelta)+1 {
		return h, fmt.Errorf("%w: record count %d with lastOffsetDelta %d in batch at offset %d",
			ErrRecordCount, h.RecordCount, h.LastOffsetDelta, h.BaseOffset)
	}
	if c := h.Compression(); !c.Supported() {
		return h, fmt.Errorf("%w: %s in batch at offset %d", ErrUnsupportedCodec, c, h.BaseOffset)
	}
	if h.Compression() == CodecNone && int64(h.RecordCount)*recordBytesMin > int64(h.Size()-HeaderSize) {
		return h, fmt.Errorf("%w: %d records cannot fit in %d record bytes (batch at offset %d)",
			ErrRecordCount, h.RecordCount, h.Size()-HeaderSize, h.BaseOffset)
	}
	return h, nil
}

// CheckStoredRecords is ValidateStored followed by a walk of every record under the stored
// rule (offset deltas strictly increasing, none above lastOffsetDelta).
func CheckStoredRecords(b []byte) (Header, error) {
	h, err := ValidateStored(b)
	if err != nil {
		return h, err
	}
	return h, checkRecords(&h, b, false)
}

// CheckCRC compares the CRC-32C stored in h with the one computed over b (a whole batch
// whose header h is).
func CheckCRC(b []byte, h Header) error {
	if sum := Checksum(b); sum != h.CRC {
		return fmt.Errorf("%w: batch at offset %d stores crc %#08x, computed %#08x",
			ErrCorrupt, h.BaseOffset, h.CRC, sum)
	}
	return nil
}

// Checksum is the CRC-32C a whole batch b should store (over b[21:]). b must hold a header.
func Checksum(b []byte) uint32 {
	mustHoldHeader(b, "Checksum")
	return crc32.Checksum(b[offsetAttributes:], castagnoli)
}

// checkRecords walks the records section of a header-validated batch without decoding
// into a Record. strict selects the produce rule for offset deltas.
func checkRecords(h *Header, b []byte, strict bool) error {
	if int64(h.RecordCount) > recordsPerBatchMax {
		return fmt.Errorf("%w: batch at offset %d declares %d records, more than %d can fit in %d decompressed bytes",
			ErrRecordCount, h.BaseOffset, h.RecordCount, recordsPerBatchMax, MaxDecompressedBytes)
	}
	records := b[HeaderSize:]
	if h.Compression() == CodecNone {
		return walkRecords(h, records, strict)
	}
	state := validateStatePool.Get().(*validateState)
	defer validateStatePool.Put(state)
	out, err := decompress(h.Compression(), state.decompressed, records)
	if cap(out) <= decompressBufferBytesMax && cap(out) > cap(state.decompressed) {
		state.decompressed = out[:0]
	}
	if err != nil {
		return fmt.Errorf("batch at offset %d: %w", h.BaseOffset, err)
	}
	if int64(h.RecordCount)*recordBytesMin > int64(len(out)) {
		return fmt.Errorf("%w: %d records cannot fit in %d decompressed bytes (batch at offset %d)",
			ErrRecordCount, h.RecordCount, len(out), h.BaseOffset)
	}
	return walkRecords(h, out, strict)
}

// walkRecords checks the framing of RecordCount records in records.
func walkRecords(h *Header, records []byte, strict bool) error {
	rest := records
	previousDelta := int32(-1)
	for index := int32(0); index < h.RecordCount; index++ {
		r := reader{src: rest}
		length := r.varint32("record length")
		if !r.ok() || length < 0 || int64(length) > int64(len(r.src)) {
			if len(rest) == 0 {
				return fmt.Errorf("%w: batch at offset %d declares %d records, holds %d",
					ErrRecordCount, h.BaseOffset, h.RecordCount, index)
			}
			return fmt.Errorf("%w: batch at offset %d record %d: length %d with %d bytes left",
				ErrInvalidRecord, h.BaseOffset, index, length, len(r.src))
		}
		body := reader{src: r.src[:length]}
		rest = r.src[length:]
		delta, field := skipRecord(&body)
		if field != "" {
			return fmt.Errorf("%w: batch at offset %d record %d: bad %s",
				ErrInvalidRecord, h.BaseOffset, index, field)
		}
		if strict && delta != index {
			return fmt.Errorf("%w: batch at offset %d record %d: offsetDelta %d, want %d",
				ErrInvalidRecord, h.BaseOffset, index, delta, index)
		}
		if !strict && (delta <= previousDelta || delta > h.LastOffsetDelta) {
			return fmt.Errorf("%w: batch at offset %d record %d: offsetDelta %d after %d (lastOffsetDelta %d)",
				ErrInvalidRecord, h.BaseOffset, index, delta, previousDelta, h.LastOffsetDelta)
		}
		previousDelta = delta
	}
	if len(rest) != 0 {
		return fmt.Errorf("%w: batch at offset %d has %d bytes after its %d records",
			ErrRecordCount, h.BaseOffset, len(rest), h.RecordCount)
	}
	return nil
}

// skipRecord reads one record body the way readRecord does, keeping nothing but the
// offset delta. It returns "" or the name of the first malformed field.
func skipRecord(r *reader) (offsetDelta int32, failed string) {
	r.int8("attributes")
	r.varint64("timestampDelta")
	offsetDelta = r.varint32("offsetDelta")
	r.nullableBytes("key")
	r.nullableBytes("value")
	count := r.varint32("header count")
	if !r.ok() {
		return 0, r.failed
	}
	if count < 0 || count > recordHeadersMax || int64(count)*2 > int64(len(r.src)) {
		return 0, "header count"
	}
	for range count {
		key := r.nullableBytes("header key")
		r.nullableBytes("header value")
		if !r.ok() {
			return 0, r.failed
		}
		if key == nil {
			return 0, "header key (null)"
		}
	}
	if len(r.src) != 0 {
		return 0, "record length (trailing bytes)"
	}
	return offsetDelta, ""
}
