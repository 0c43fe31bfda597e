package batch

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// Wire constants. These are part of the Kafka RecordBatch v2 format that ringlog stores on
// disk and sends on the wire. They must not change.
const (
	// HeaderSize is the size in bytes of a batch header, up to and including the record count.
	HeaderSize = 61
	// MagicV2 is the only batch format version ringlog reads or writes.
	MagicV2 = 2
	// CRCStart is where the bytes a batch's CRC-32C covers begin (its attributes field);
	// they run to the end of the batch.
	CRCStart = offsetAttributes

	offsetBaseOffset      = 0
	offsetLength          = 8
	offsetLeaderEpoch     = 12
	offsetMagic           = 16
	offsetCRC             = 17
	offsetAttributes      = 21 // the CRC covers offsetAttributes..end of batch
	offsetLastOffsetDelta = 23
	offsetBaseTimestamp   = 27
	offsetMaxTimestamp    = 35
	offsetProducerID      = 43
	offsetProducerEpoch   = 51
	offsetBaseSequence    = 53
	offsetRecordCount     = 57

	// lengthFieldEnd is where the batchLength field ends: size = lengthFieldEnd + Length.
	lengthFieldEnd = 12
	// minLength is the smallest legal batchLength: a header with no record bytes.
	minLength = HeaderSize - lengthFieldEnd

	attributesCodecMask     = 0x07
	attributesLogAppendTime = 0x08
	attributesTransactional = 0x10
	attributesControl       = 0x20

	// recordBytesMin is the size of the smallest possible record: length, attributes,
	// timestampDelta, offsetDelta, keyLength, valueLength and headerCount, one byte each.
	recordBytesMin = 7
)

// Limits. These are ringlog policy, not wire format; raising them is safe, lowering them
// can make stored batches unreadable.
const (
	// MaxBatchBytes bounds the total size of one batch (12 + batchLength). Any length
	// field that claims more is rejected before a byte is allocated for it.
	MaxBatchBytes = 64 << 20
	// MaxDecompressedBytes bounds the decompressed records section of one compressed batch.
	MaxDecompressedBytes = 64 << 20
)

// Sentinel errors. Every error returned by this package wraps exactly one of them with
// detail; test with errors.Is.
var (
	// ErrCorrupt: the CRC-32C stored in the batch does not match its bytes.
	ErrCorrupt = errors.New("batch: crc mismatch")
	// ErrBadMagic: the magic byte is not 2 (not a RecordBatch v2).
	ErrBadMagic = errors.New("batch: unsupported magic")
	// ErrLength: the buffer is shorter than a header, the length field is out of bounds,
	// or the buffer does not hold exactly one batch of that length.
	ErrLength = errors.New("batch: length out of bounds")
	// ErrRecordCount: the record count disagrees with lastOffsetDelta or with the records
	// actually present.
	ErrRecordCount = errors.New("batch: record count mismatch")
	// ErrUnsupportedCodec: the attributes name a codec Kafka does not define (5-7).
	ErrUnsupportedCodec = errors.New("batch: unsupported compression codec")
	// ErrInvalidRecord: a record inside a batch with a good CRC is malformed (a varint
	// overflows, a length runs past its record, offset deltas are not increasing, or the
	// compressed records do not decompress within MaxDecompressedBytes).
	ErrInvalidRecord = errors.New("batch: invalid record")
)

// Codec is the compression codec in attribute bits 0-2.
type Codec int8

// Codec values, as Kafka numbers them. All five are supported (codecs.go, zstd.go).
const (
	CodecNone   Codec = 0
	CodecGzip   Codec = 1
	CodecSnappy Codec = 2
	CodecLZ4    Codec = 3
	CodecZstd   Codec = 4
)

func (c Codec) String() string {
	switch c {
	case CodecNone:
		return "none"
	case CodecGzip:
		return "gzip"
	case CodecSnappy:
		return "snappy"
	case CodecLZ4:
		return "lz4"
	case CodecZstd:
		return "zstd"
	}
	return fmt.Sprintf("codec(%d)", int8(c))
}

// Supported reports whether this package can compress and decompress c.
func (c Codec) Supported() bool { return c >= CodecNone && c <= CodecZstd }

// castagnoli is the CRC-32C table; crc32 uses the SSE4.2/ARMv8 instruction when present.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Header is the decoded 61-byte batch header. Field names follow the wire layout in the
// package comment.
type Header struct {
	BaseOffset      int64
	Length          int32 // batchLength: bytes after this field
	LeaderEpoch     int32
	Magic           int8
	CRC             uint32
	Attributes      int16
	LastOffsetDelta int32
	BaseTimestamp   int64
	MaxTimestamp    int64
	ProducerID      int64
	ProducerEpoch   int16
	BaseSequence    int32
	RecordCount     int32
}

// Size is the total size in bytes of the batch: 12 + Length.
func (h Header) Size() int { return lengthFieldEnd + int(h.Length) }

// Compression is the codec named by attribute bits 0-2.
func (h Header) Compression() Codec { return Codec(h.Attributes & attributesCodecMask) }

// LastOffset is the offset of the last record in the batch: BaseOffset + LastOffsetDelta.
func (h Header) LastOffset() int64 { return h.BaseOffset + int64(h.LastOffsetDelta) }

// LogAppendTime reports whether the batch's timestamps are broker append time
// (attribute bit 3), in which case every record's timestamp is MaxTimestamp.
func (h Header) LogAppendTime() bool { return h.Attributes&attributesLogAppendTime != 0 }

// Transactional reports attribute bit 4.
func (h Header) Transactional() bool { return h.Attributes&attributesTransactional != 0 }

// Control reports attribute bit 5 (a transaction marker batch).
func (h Header) Control() bool { return h.Attributes&attributesControl != 0 }

// ParseHeader decodes the header at the start of b. It checks that b holds a whole header,
// that the magic is 2, and that Length is within [HeaderSize-12, MaxBatchBytes-12]. It does
// not look past the header and does not check the CRC: b may hold a partial batch (use
// Size to learn how many bytes the whole batch needs) or several batches. On error the
// returned Header holds the fields read so far (zero if b is shorter than a header), which
// is enough to log what was found.
func ParseHeader(b []byte) (Header, error) {
	if len(b) < HeaderSize {
		return Header{}, fmt.Errorf("%w: header needs %d bytes, have %d", ErrLength, HeaderSize, len(b))
	}
	h := Header{
		BaseOffset:      int64(binary.BigEndian.Uint64(b[offsetBaseOffset:])),
		Length:          int32(binary.BigEndian.Uint32(b[offsetLength:])),
		LeaderEpoch:     int32(binary.BigEndian.Uint32(b[offsetLeaderEpoch:])),
		Magic:           int8(b[offsetMagic]),
		CRC:             binary.BigEndian.Uint32(b[offsetCRC:]),
		Attributes:      int16(binary.BigEndian.Uint16(b[offsetAttributes:])),
		LastOffsetDelta: int32(binary.BigEndian.Uint32(b[offsetLastOffsetDelta:])),
		BaseTimestamp:   int64(binary.BigEndian.Uint64(b[offsetBaseTimestamp:])),
		MaxTimestamp:    int64(binary.BigEndian.Uint64(b[offsetMaxTimestamp:])),
		ProducerID:      int64(binary.BigEndian.Uint64(b[offsetProducerID:])),
		ProducerEpoch:   int16(binary.BigEndian.Uint16(b[offsetProducerEpoch:])),
		BaseSequence:    int32(binary.BigEndian.Uint32(b[offsetBaseSequence:])),
		RecordCount:     int32(binary.BigEndian.Uint32(b[offsetRecordCount:])),
	}
	if h.Magic != MagicV2 {
		return h, fmt.Errorf("%w: magic %d at offset %d, want %d", ErrBadMagic, h.Magic, h.BaseOffset, MagicV2)
	}
	if h.Length < minLength || int64(h.Length) > MaxBatchBytes-lengthFieldEnd {
		return h, fmt.Errorf("%w: batchLength %d at offset %d outside [%d, %d]",
			ErrLength, h.Length, h.BaseOffset, minLength, MaxBatchBytes-lengthFieldEnd)
	}
	return h, nil
}

// Validate checks that b is exactly one whole batch: the header parses, len(b) == Size(),
// the CRC-32C over b[21:] matches, the record count is at least 1 and equals
// lastOffsetDelta+1 (Kafka's rule for batches a client produces), and the codec is
// supported. It does not decompress or walk the records; Decode does.
func Validate(b []byte) (Header, error) {
	h, err := ParseHeader(b)
	if err != nil {
		return h, err
	}
	if len(b) != h.Size() {
		return h, fmt.Errorf("%w: batch at offset %d has size %d, buffer holds %d bytes",
			ErrLength, h.BaseOffset, h.Size(), len(b))
	}
	if sum := crc32.Checksum(b[offsetAttributes:], castagnoli); sum != h.CRC {
		return h, fmt.Errorf("%w: batch at offset %d stores crc %#08x, computed %#08x",
			ErrCorrupt, h.BaseOffset, h.CRC, sum)
	}
	if err := checkCount(h); err != nil {
		return h, err
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

func checkCount(h Header) error {
	if h.RecordCount < 1 {
		return fmt.Errorf("%w: record count %d in batch at offset %d", ErrRecordCount, h.RecordCount, h.BaseOffset)
	}
	if int64(h.LastOffsetDelta) != int64(h.RecordCount)-1 {
		return fmt.Errorf("%w: record count %d but lastOffsetDelta %d in batch at offset %d",
			ErrRecordCount, h.RecordCount, h.LastOffsetDelta, h.BaseOffset)
	}
	return nil
}

// SetBaseOffset rewrites the baseOffset field of the batch at the start of b. The field is
// outside the CRC. b must hold at least a header.
func SetBaseOffset(b []byte, off int64) {
	mustHoldHeader(b, "SetBaseOffset")
	binary.BigEndian.PutUint64(b[offsetBaseOffset:offsetBaseOffset+8], uint64(off))
}

// SetLeaderEpoch rewrites the partitionLeaderEpoch field of the batch at the start of b.
// The field is outside the CRC. b must hold at least a header.
func SetLeaderEpoch(b []byte, epoch int32) {
	mustHoldHeader(b, "SetLeaderEpoch")
	binary.BigEndian.PutUint32(b[offsetLeaderEpoch:offsetLeaderEpoch+4], uint32(epoch))
}

// mustHoldHeader panics when a caller hands a rewrite function less than a header: that
// is a bug in the caller (it must have validated the batch), not bad input.
func mustHoldHeader(b []byte, function string) {
	if len(b) < HeaderSize {
		panic(fmt.Sprintf("batch: %s on %d bytes, need at least a %d-byte header", function, len(b), HeaderSize))
	}
}

// putHeader writes h into b[:HeaderSize] with the CRC field as given in h.
func putHeader(b []byte, h *Header) {
	_ = b[HeaderSize-1]
	binary.BigEndian.PutUint64(b[offsetBaseOffset:], uint64(h.BaseOffset))
	binary.BigEndian.PutUint32(b[offsetLength:], uint32(h.Length))
	binary.BigEndian.PutUint32(b[offsetLeaderEpoch:], uint32(h.LeaderEpoch))
	b[offsetMagic] = byte(h.Magic)
	binary.BigEndian.PutUint32(b[offsetCRC:], h.CRC)
	binary.BigEndian.PutUint16(b[offsetAttributes:], uint16(h.Attributes))
	binary.BigEndian.PutUint32(b[offsetLastOffsetDelta:], uint32(h.LastOffsetDelta))
	binary.BigEndian.PutUint64(b[offsetBaseTimestamp:], uint64(h.BaseTimestamp))
	binary.BigEndian.PutUint64(b[offsetMaxTimestamp:], uint64(h.MaxTimestamp))
	binary.BigEndian.PutUint64(b[offsetProducerID:], uint64(h.ProducerID))
	binary.BigEndian.PutUint16(b[offsetProducerEpoch:], uint16(h.ProducerEpoch))
	binary.BigEndian.PutUint32(b[offsetBaseSequence:], uint32(h.BaseSequence))
	binary.BigEndian.PutUint32(b[offsetRecordCount:], uint32(h.RecordCount))
}

// ParseCodec maps a codec name as String prints it (none, gzip, snappy, lz4, zstd) to its
// Codec: the one parser behind every --compression flag and workload file.
func ParseCodec(name string) (Codec, error) {
	for c := CodecNone; c <= CodecZstd; c++ {
		if c.String() == name {
			return c, nil
		}
	}
	return CodecNone, fmt.Errorf("%w: %q (want none, gzip, snappy, lz4 or zstd)", ErrUnsupportedCodec, name)
}
