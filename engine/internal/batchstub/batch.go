// Package batchstub is a temporary, minimal stand-in for engine/batch (uncompressed Kafka v2
// batches only) used until the real codec lands on main. Nothing outside engine tests and the
// engine's header checks uses it; it is deleted once engine/batch exists.
package batchstub

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

const HeaderSize = 61

const MaxBatchBytes = 64 << 20

var (
	ErrCorrupt  = errors.New("batch: corrupt (crc mismatch)")
	ErrBadMagic = errors.New("batch: bad magic")
	ErrLength   = errors.New("batch: length out of bounds")
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

type Header struct {
	BaseOffset      int64
	Length          int32
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

func (h Header) Size() int64      { return 12 + int64(h.Length) }
func (h Header) LastOffset() int64 { return h.BaseOffset + int64(h.LastOffsetDelta) }

func ParseHeader(b []byte) (Header, error) {
	if len(b) < HeaderSize {
		return Header{}, fmt.Errorf("%w: %d bytes", ErrLength, len(b))
	}
	h := Header{
		BaseOffset:      int64(binary.BigEndian.Uint64(b[0:])),
		Length:          int32(binary.BigEndian.Uint32(b[8:])),
		LeaderEpoch:     int32(binary.BigEndian.Uint32(b[12:])),
		Magic:           int8(b[16]),
		CRC:             binary.BigEndian.Uint32(b[17:]),
		Attributes:      int16(binary.BigEndian.Uint16(b[21:])),
		LastOffsetDelta: int32(binary.BigEndian.Uint32(b[23:])),
		BaseTimestamp:   int64(binary.BigEndian.Uint64(b[27:])),
		MaxTimestamp:    int64(binary.BigEndian.Uint64(b[35:])),
		ProducerID:      int64(binary.BigEndian.Uint64(b[43:])),
		ProducerEpoch:   int16(binary.BigEndian.Uint16(b[51:])),
		BaseSequence:    int32(binary.BigEndian.Uint32(b[53:])),
		RecordCount:     int32(binary.BigEndian.Uint32(b[57:])),
	}
	if h.Magic != 2 {
		return h, ErrBadMagic
	}
	if h.Length < HeaderSize-12 || h.Length > MaxBatchBytes {
		return h, fmt.Errorf("%w: length %d", ErrLength, h.Length)
	}
	return h, nil
}

func Validate(b []byte) (Header, error) {
	h, err := ParseHeader(b)
	if err != nil {
		return h, err
	}
	if int64(len(b)) < h.Size() {
		return h, fmt.Errorf("%w: have %d of %d", ErrLength, len(b), h.Size())
	}
	if crc32.Checksum(b[21:h.Size()], castagnoli) != h.CRC {
		return h, ErrCorrupt
	}
	return h, nil
}

func SetBaseOffset(b []byte, off int64)   { binary.BigEndian.PutUint64(b[0:], uint64(off)) }
func SetLeaderEpoch(b []byte, epoch int32) { binary.BigEndian.PutUint32(b[12:], uint32(epoch)) }

type RecordHeader struct{ Key, Value []byte }

type Record struct {
	Key, Value []byte
}

type BuilderOptions struct{}

type rec struct {
	ts         int64
	key, value []byte
}

type Builder struct{ recs []rec }

func NewBuilder(BuilderOptions) *Builder { return &Builder{} }

func (b *Builder) Reset() { b.recs = b.recs[:0] }

func (b *Builder) Append(ts int64, key, value []byte, _ []RecordHeader) {
	b.recs = append(b.recs, rec{ts, key, value})
}

func (b *Builder) Build(dst []byte) ([]byte, error) {
	start := len(dst)
	dst = append(dst, make([]byte, HeaderSize)...)
	var baseTS, maxTS int64 = -1, -1
	for i, r := range b.recs {
		if i == 0 {
			baseTS = r.ts
		}
		if r.ts > maxTS {
			maxTS = r.ts
		}
	}
	for i, r := range b.recs {
		var body []byte
		body = append(body, 0)
		body = binary.AppendVarint(body, r.ts-baseTS)
		body = binary.AppendVarint(body, int64(i))
		body = appendBytes(body, r.key)
		body = appendBytes(body, r.value)
		body = binary.AppendVarint(body, 0)
		dst = binary.AppendVarint(dst, int64(len(body)))
		dst = append(dst, body...)
	}
	h := dst[start:]
	binary.BigEndian.PutUint64(h[0:], 0)
	binary.BigEndian.PutUint32(h[8:], uint32(len(h)-12))
	binary.BigEndian.PutUint32(h[12:], 0xffffffff)
	h[16] = 2
	binary.BigEndian.PutUint16(h[21:], 0)
	binary.BigEndian.PutUint32(h[23:], uint32(len(b.recs)-1))
	binary.BigEndian.PutUint64(h[27:], uint64(baseTS))
	binary.BigEndian.PutUint64(h[35:], uint64(maxTS))
	binary.BigEndian.PutUint64(h[43:], ^uint64(0))
	binary.BigEndian.PutUint16(h[51:], 0xffff)
	binary.BigEndian.PutUint32(h[53:], 0xffffffff)
	binary.BigEndian.PutUint32(h[57:], uint32(len(b.recs)))
	binary.BigEndian.PutUint32(h[17:], crc32.Checksum(h[21:], castagnoli))
	return dst, nil
}

func appendBytes(dst, p []byte) []byte {
	if p == nil {
		return binary.AppendVarint(dst, -1)
	}
	dst = binary.AppendVarint(dst, int64(len(p)))
	return append(dst, p...)
}

func Decode(b []byte, fn func(offset, ts int64, r *Record) error) error {
	h, err := Validate(b)
	if err != nil {
		return err
	}
	p := b[HeaderSize:h.Size()]
	for i := int32(0); i < h.RecordCount; i++ {
		n, k := binary.Varint(p)
		if k <= 0 || n < 0 || int64(len(p)-k) < n {
			return ErrCorrupt
		}
		body := p[k : k+int(n)]
		p = p[k+int(n):]
		body = body[1:]
		tsDelta, k := binary.Varint(body)
		body = body[k:]
		offDelta, k := binary.Varint(body)
		body = body[k:]
		var r Record
		r.Key, body = readBytes(body)
		r.Value, _ = readBytes(body)
		if err := fn(h.BaseOffset+offDelta, h.BaseTimestamp+tsDelta, &r); err != nil {
			return err
		}
	}
	return nil
}

func readBytes(p []byte) ([]byte, []byte) {
	n, k := binary.Varint(p)
	if n < 0 {
		return nil, p[k:]
	}
	return p[k : k+int(n)], p[k+int(n):]
}
