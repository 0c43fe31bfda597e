package batch

import (
	"fmt"
	"sync"
)

// recordHeadersMax bounds the headers of one record. Each header takes at least 2 bytes on
// the wire but 40 bytes decoded, so without a bound a 64 MiB batch could make Decode
// allocate over a gigabyte. Kafka sets no limit; no real producer comes near this one.
const recordHeadersMax = 1 << 16

// RecordHeader is one record header. A nil Value is null on the wire.
type RecordHeader struct {
	Key   string
	Value []byte
}

// Record is one decoded record. Key and Value alias the batch (or its decompressed
// records) and are only valid during the Decode callback; nil means null on the wire.
type Record struct {
	Attributes     int8
	TimestampDelta int64
	OffsetDelta    int32
	Key, Value     []byte
	Headers        []RecordHeader

	// wire is the record as encoded (length varint included), aliasing the batch or its
	// decompressed records: Filter copies kept records through it without re-encoding.
	wire []byte
}

// decodeState is the per-call scratch Decode reuses through a pool: the Record handed to
// the callback (with its header slice) and the decompression buffer.
type decodeState struct {
	record       Record
	decompressed []byte
	filtered     []byte // Filter's kept records before compression
}

var decodeStatePool = sync.Pool{New: func() any { return new(decodeState) }}

// Decode validates b as one whole batch as stored (see ValidateStored) and calls fn for each record in
// order with its absolute offset (baseOffset + offsetDelta) and timestamp (baseTimestamp +
// timestampDelta, or maxTimestamp for log-append-time batches). The *Record and every
// slice in it are reused: they are valid only until fn returns. A compressed batch is
// decompressed into a pooled buffer, refusing more than MaxDecompressedBytes.
//
// Decode checks every record: lengths in bounds, varints well formed, offset deltas
// strictly increasing and at most lastOffsetDelta (so 0, 1, 2, ... in a batch as produced,
// with gaps in one that compaction thinned), exactly RecordCount records and no trailing
// bytes. ValidateProduce is the stricter check a broker applies to produced batches. fn may be nil to only check. If Decode fails part way, fn has already
// seen the records before the bad one. An error returned by fn is returned unchanged.
// Decode is safe for concurrent use; its scratch state comes from a pool.
func Decode(b []byte, fn func(offset int64, ts int64, r *Record) error) error {
	return decode(b, true, fn)
}

// DecodeCRCChecked is Decode for a batch whose CRC-32C the caller has already checked over
// these same bytes (CheckCRC, or a running crc32.Update with the Castagnoli table as the
// bytes arrived from a socket, while they were still in the CPU cache): every other check
// is Decode's. A caller that has not checked the CRC must use Decode.
func DecodeCRCChecked(b []byte, fn func(offset int64, ts int64, r *Record) error) error {
	return decode(b, false, fn)
}

func decode(b []byte, checkCRC bool, fn func(offset int64, ts int64, r *Record) error) error {
	h, err := validateStored(b, checkCRC)
	if err != nil {
		return err
	}
	state := decodeStatePool.Get().(*decodeState)
	defer putDecodeState(state)

	records, err := state.records(&h, b)
	if err != nil {
		return err
	}
	return decodeRecords(&h, records, &state.record, fn)
}

// records returns the uncompressed records section of the validated batch b (header h): the
// batch's own bytes, or a zstd batch decompressed into the state's buffer.
func (state *decodeState) records(h *Header, b []byte) ([]byte, error) {
	records := b[HeaderSize:]
	c := h.Compression()
	if c == CodecNone {
		return records, nil
	}
	out, err := decompress(c, state.decompressed, records)
	if cap(out) > cap(state.decompressed) && cap(out) <= decompressBufferBytesMax {
		state.decompressed = out[:0]
	}
	if err != nil {
		return nil, fmt.Errorf("batch at offset %d: %w", h.BaseOffset, err)
	}
	return out, nil
}

// Bounds on what a pooled decodeState keeps between calls, so one hostile batch (65 536
// headers, megabyte header keys) cannot pin its memory in the pool.
const (
	pooledHeadersMax    = 256
	internedKeyBytesMax = 256
)

// putDecodeState drops every reference into the caller's batch, keeps small header keys
// for interning, and returns state to the pool.
func putDecodeState(state *decodeState) {
	r := &state.record
	r.Key, r.Value, r.wire = nil, nil, nil
	if cap(state.filtered) > decompressBufferBytesMax {
		state.filtered = nil
	}
	headers := r.Headers[:cap(r.Headers)]
	if len(headers) > pooledHeadersMax {
		headers = nil
	}
	for i := range headers {
		headers[i].Value = nil
		if len(headers[i].Key) > internedKeyBytesMax {
			headers[i].Key = ""
		}
	}
	r.Headers = headers[:0]
	decodeStatePool.Put(state)
}

// decodeRecords walks the uncompressed records section of a validated batch.
func decodeRecords(h *Header, records []byte, rec *Record, fn func(int64, int64, *Record) error) error {
	rest := records
	dense := int64(h.RecordCount) == int64(h.LastOffsetDelta)+1 // as produced: deltas 0, 1, 2, ...
	previousDelta := int32(-1)
	for index := int32(0); index < h.RecordCount; index++ {
		if len(rest) == 0 {
			return fmt.Errorf("%w: batch at offset %d declares %d records, holds %d",
				ErrRecordCount, h.BaseOffset, h.RecordCount, index)
		}
		lengthReader := reader{src: rest}
		length := lengthReader.varint32("record length")
		if !lengthReader.ok() || length < 0 || int64(length) > int64(len(lengthReader.src)) {
			return fmt.Errorf("%w: batch at offset %d record %d: length %d with %d bytes left",
				ErrInvalidRecord, h.BaseOffset, index, length, len(lengthReader.src))
		}
		body := lengthReader.src[:length]
		rec.wire = rest[:len(rest)-len(lengthReader.src)+int(length)]
		rest = lengthReader.src[length:]

		if field := readRecord(reader{src: body}, rec); field != "" {
			return fmt.Errorf("%w: batch at offset %d record %d: bad %s",
				ErrInvalidRecord, h.BaseOffset, index, field)
		}
		// In a dense batch increasing deltas can only be 0, 1, 2, ...: say so directly.
		if dense && rec.OffsetDelta != index {
			return fmt.Errorf("%w: batch at offset %d record %d: offsetDelta %d, want %d",
				ErrInvalidRecord, h.BaseOffset, index, rec.OffsetDelta, index)
		}
		if rec.OffsetDelta <= previousDelta || rec.OffsetDelta > h.LastOffsetDelta {
			return fmt.Errorf("%w: batch at offset %d record %d: offsetDelta %d after %d (lastOffsetDelta %d)",
				ErrInvalidRecord, h.BaseOffset, index, rec.OffsetDelta, previousDelta, h.LastOffsetDelta)
		}
		previousDelta = rec.OffsetDelta
		if fn == nil {
			continue
		}
		ts := h.BaseTimestamp + rec.TimestampDelta
		if h.LogAppendTime() {
			ts = h.MaxTimestamp
		}
		if err := fn(h.BaseOffset+int64(rec.OffsetDelta), ts, rec); err != nil {
			return err
		}
	}
	if len(rest) != 0 {
		return fmt.Errorf("%w: batch at offset %d has %d bytes after its %d records",
			ErrRecordCount, h.BaseOffset, len(rest), h.RecordCount)
	}
	return nil
}

// readRecord decodes one record body (everything after the length varint) into rec and
// returns "" or the name of the first field that is malformed.
func readRecord(r reader, rec *Record) string {
	rec.Attributes = r.int8("attributes")
	rec.TimestampDelta = r.varint64("timestampDelta")
	rec.OffsetDelta = r.varint32("offsetDelta")
	rec.Key = r.nullableBytes("key")
	rec.Value = r.nullableBytes("value")
	count := r.varint32("header count")
	if !r.ok() {
		return r.failed
	}
	// Each header is at least 2 bytes (two one-byte lengths): check before sizing a slice.
	if count < 0 || count > recordHeadersMax || int64(count)*2 > int64(len(r.src)) {
		return "header count"
	}
	headers := rec.Headers[:cap(rec.Headers)]
	if len(headers) < int(count) {
		headers = append(headers, make([]RecordHeader, int(count)-len(headers))...)
	}
	headers = headers[:count]
	for i := range headers {
		key := r.nullableBytes("header key")
		value := r.nullableBytes("header value")
		if !r.ok() {
			return r.failed
		}
		if key == nil {
			return "header key (null)"
		}
		// The slot usually holds the same key from the previous record: comparing does
		// not allocate, so repeated header keys cost no string allocation.
		if string(key) != headers[i].Key {
			headers[i].Key = string(key)
		}
		headers[i].Value = value
	}
	rec.Headers = headers
	if len(r.src) != 0 {
		return "record length (trailing bytes)"
	}
	return ""
}
