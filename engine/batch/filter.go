package batch

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
)

// Record-level filtering: what log compaction does to a stored batch.
//
// Filter keeps the records a predicate selects and rewrites the batch around them as Kafka's
// cleaner does, so that the result is still a valid stored RecordBatch v2 (ValidateStored and
// CheckStoredRecords accept it):
//
//   - Every header field stays as it was except batchLength, recordCount and the CRC:
//     baseOffset and lastOffsetDelta (so the batch still spans the same offsets, and the
//     next batch still starts where it did), baseTimestamp and maxTimestamp (each kept
//     record's timestampDelta stays valid, and maxTimestamp is still an upper bound),
//     attributes (codec, timestamp type), producer id, epoch and base sequence (so the
//     producer state rebuilt from the headers is the same).
//   - Kept records are copied byte for byte: their offset and timestamp deltas are relative
//     to the unchanged base, so the offsets a consumer sees do not change (gaps are fine in
//     the stored rule).
//   - A compressed batch is decompressed, filtered and compressed again with the same codec.
//
// A batch needs at least one record (the stored rule). When the predicate keeps none, Filter
// drops the batch, unless the caller asks to keep one: then the batch keeps its last record
// (the newest), which preserves the batch and its header for callers that must not lose
// them (the last batch of a segment, a batch an idempotent producer's state still points at).

// FilterResult says what Filter did with one batch.
type FilterResult struct {
	Header  Header // the input batch's header
	Kept    int    // records in the output; 0 when the batch was dropped
	Removed int    // records left out
	// Unchanged: every record was kept and the batch was copied as it was.
	Unchanged bool
}

// Filter appends to dst the stored batch b with only the records keep selects (see the
// comment above). keep sees each record with its absolute offset and timestamp; the
// Record is valid only during the call. With keepOne, a batch whose records are all left out
// keeps its last one. b is validated as Decode validates it; on error dst is returned
// unchanged. Control batches must not be given to it by callers that want them kept whole.
func Filter(dst, b []byte, keepOne bool, keep func(offset, ts int64, r *Record) bool) ([]byte, FilterResult, error) {
	var res FilterResult
	h, err := ValidateStored(b)
	res.Header = h
	if err != nil {
		return dst, res, err
	}
	state := decodeStatePool.Get().(*decodeState)
	defer putDecodeState(state)

	records, err := state.records(&h, b)
	if err != nil {
		return dst, res, err
	}
	kept := state.filtered[:0]
	var last []byte
	err = decodeRecords(&h, records, &state.record, func(offset, ts int64, r *Record) error {
		last = r.wire
		if keep(offset, ts, r) {
			kept = append(kept, r.wire...)
			res.Kept++
		}
		return nil
	})
	state.filtered = kept[:0]
	if err != nil {
		return dst, FilterResult{Header: h}, err
	}
	res.Removed = int(h.RecordCount) - res.Kept
	if res.Kept == 0 && keepOne {
		// The last record stays; when it is the batch's only one, nothing was left out and
		// the batch is copied as it was (not rebuilt, which would recompress it).
		kept = append(kept[:0], last...)
		state.filtered = kept[:0]
		res.Kept, res.Removed = 1, res.Removed-1
	}
	switch {
	case res.Removed == 0:
		res.Unchanged = true
		return append(dst, b...), res, nil
	case res.Kept == 0:
		return dst, res, nil
	}
	start := len(dst)
	dst = append(dst, b[:HeaderSize]...)
	if c := h.Compression(); c != CodecNone {
		dst = compress(c, dst, kept) // the batch's own codec, as it was produced
	} else {
		dst = append(dst, kept...)
	}
	out := dst[start:]
	if len(out) > MaxBatchBytes {
		return dst[:start], FilterResult{Header: h}, fmt.Errorf("%w: filtered batch at offset %d is %d bytes", ErrLength, h.BaseOffset, len(out))
	}
	binary.BigEndian.PutUint32(out[offsetLength:], uint32(len(out)-lengthFieldEnd))
	binary.BigEndian.PutUint32(out[offsetRecordCount:], uint32(res.Kept))
	binary.BigEndian.PutUint32(out[offsetCRC:], crc32.Checksum(out[offsetAttributes:], castagnoli))
	if invariantsEnabled {
		if _, err := CheckStoredRecords(out); err != nil {
			panic(fmt.Sprintf("batch: Filter wrote a batch the stored rule rejects: %v", err))
		}
	}
	return dst, res, nil
}
