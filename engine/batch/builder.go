package batch

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"
)

// noPartitionLeaderEpoch is what producers write in partitionLeaderEpoch; the broker
// overwrites it with SetLeaderEpoch.
const noPartitionLeaderEpoch = -1

// BuilderOptions configure a Builder.
type BuilderOptions struct {
	// Codec compresses the records section: any codec that Supported reports.
	Codec Codec
	// ProducerID, ProducerEpoch and BaseSequence identify an idempotent producer's batch.
	// When Idempotent is false and all three are zero, they are written as -1, -1, -1
	// (Kafka's "no producer"). Set Idempotent to write producer id 0, epoch 0, sequence 0.
	ProducerID    int64
	ProducerEpoch int16
	BaseSequence  int32
	Idempotent    bool
	// BaseTimestamp is the batch's base timestamp in milliseconds. When zero, the first
	// appended record's timestamp is used (as Kafka producers do).
	BaseTimestamp int64
}

// Builder accumulates records and encodes them as one RecordBatch v2. It is reusable:
// after Reset it keeps its buffers, so a steady stream of batches allocates nothing per
// record and nothing per batch. A Builder is owned by one goroutine.
type Builder struct {
	opts          BuilderOptions
	records       []byte // encoded, uncompressed records
	count         int    // records appended since Reset
	baseTimestamp int64
	maxTimestamp  int64
}

// NewBuilder returns an empty Builder.
func NewBuilder(opts BuilderOptions) *Builder {
	b := &Builder{}
	b.ResetWith(opts)
	return b
}

// ResetWith drops the appended records, keeps the buffers and replaces the options. An
// idempotent producer uses it to move BaseSequence on from one batch to the next.
func (b *Builder) ResetWith(opts BuilderOptions) {
	if !opts.Idempotent && opts.ProducerID == 0 && opts.ProducerEpoch == 0 && opts.BaseSequence == 0 {
		opts.ProducerID, opts.ProducerEpoch, opts.BaseSequence = -1, -1, -1
	}
	b.opts = opts
	b.Reset()
}

// Reset drops the appended records and keeps the buffers and options.
func (b *Builder) Reset() {
	b.records = b.records[:0]
	b.count = 0
	b.baseTimestamp = b.opts.BaseTimestamp
	b.maxTimestamp = math.MinInt64
}

// Count is the number of records appended since the last Reset.
func (b *Builder) Count() int { return b.count }

// Len is the size in bytes the batch would have uncompressed: HeaderSize plus the encoded
// records. Callers use it to decide when a batch is full.
func (b *Builder) Len() int { return HeaderSize + len(b.records) }

// Append adds one record with timestamp ts (milliseconds). A nil key or value is encoded
// as null (length -1); an empty non-nil one as length 0; a nil header value as null. The
// bytes are copied. Limits are checked by Build.
func (b *Builder) Append(ts int64, key, value []byte, headers []RecordHeader) {
	if b.count == 0 && b.opts.BaseTimestamp == 0 {
		b.baseTimestamp = ts
	}
	b.maxTimestamp = max(b.maxTimestamp, ts)
	timestampDelta := ts - b.baseTimestamp
	offsetDelta := int64(b.count)

	bodyLen := 1 + varintLen(timestampDelta) + varintLen(offsetDelta) +
		nullableLen(key) + nullableLen(value) + varintLen(int64(len(headers)))
	for i := range headers {
		bodyLen += varintLen(int64(len(headers[i].Key))) + len(headers[i].Key) + nullableLen(headers[i].Value)
	}

	r := b.records
	r = appendVarint(r, int64(bodyLen))
	r = append(r, 0) // record attributes: unused
	r = appendVarint(r, timestampDelta)
	r = appendVarint(r, offsetDelta)
	r = appendNullable(r, key)
	r = appendNullable(r, value)
	r = appendVarint(r, int64(len(headers)))
	for i := range headers {
		r = appendVarint(r, int64(len(headers[i].Key)))
		r = append(r, headers[i].Key...)
		r = appendNullable(r, headers[i].Value)
	}
	b.records = r
	b.count++
}

func nullableLen(p []byte) int {
	if p == nil {
		return 1
	}
	return varintLen(int64(len(p))) + len(p)
}

func appendNullable(dst, p []byte) []byte {
	if p == nil {
		return appendVarint(dst, -1)
	}
	dst = appendVarint(dst, int64(len(p)))
	return append(dst, p...)
}

// Build appends the finished batch to dst and returns the extended slice. Base offset is
// 0 and partition leader epoch -1 (the broker sets both); the CRC is computed. The builder
// is left unchanged: call Reset to start the next batch. Build fails with ErrRecordCount
// when no record was appended, with ErrLength when the batch would exceed MaxBatchBytes,
// and with ErrUnsupportedCodec for a codec outside none, gzip, snappy, lz4 and zstd.
func (b *Builder) Build(dst []byte) ([]byte, error) {
	if b.count == 0 {
		return dst, fmt.Errorf("build: %w: no records appended", ErrRecordCount)
	}
	if b.count > math.MaxInt32 || b.Len() > MaxBatchBytes {
		return dst, fmt.Errorf("build: %w: %d records in %d bytes exceed %d bytes",
			ErrLength, b.count, b.Len(), MaxBatchBytes)
	}
	if !b.opts.Codec.Supported() {
		return dst, fmt.Errorf("build: %w: %s", ErrUnsupportedCodec, b.opts.Codec)
	}

	start := len(dst)
	dst = append(dst, make([]byte, HeaderSize)...) // no allocation when cap suffices
	switch b.opts.Codec {
	case CodecNone:
		dst = append(dst, b.records...)
	default:
		dst = compress(b.opts.Codec, dst, b.records)
	}
	size := len(dst) - start
	if size > MaxBatchBytes {
		return dst[:start], fmt.Errorf("build: %w: compressed batch of %d bytes exceeds %d bytes",
			ErrLength, size, MaxBatchBytes)
	}

	h := Header{
		BaseOffset:      0,
		Length:          int32(size - lengthFieldEnd),
		LeaderEpoch:     noPartitionLeaderEpoch,
		Magic:           MagicV2,
		Attributes:      int16(b.opts.Codec),
		LastOffsetDelta: int32(b.count - 1),
		BaseTimestamp:   b.baseTimestamp,
		MaxTimestamp:    b.maxTimestamp,
		ProducerID:      b.opts.ProducerID,
		ProducerEpoch:   b.opts.ProducerEpoch,
		BaseSequence:    b.opts.BaseSequence,
		RecordCount:     int32(b.count),
	}
	out := dst[start:]
	putHeader(out, &h)
	binary.BigEndian.PutUint32(out[offsetCRC:], crc32.Checksum(out[offsetAttributes:], castagnoli))
	if invariantsEnabled {
		if err := Decode(out, nil); err != nil {
			panic(fmt.Sprintf("batch: Build wrote a batch its own decoder rejects: %v", err))
		}
	}
	return dst, nil
}
