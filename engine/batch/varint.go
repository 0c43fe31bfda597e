package batch

import (
	"math"
	"math/bits"
)

// Zig-zag varints as Kafka (and protobuf sint32/sint64) encode them. A value that fits in
// int32 has the same bytes whether encoded as a 32- or 64-bit zig-zag varint, so one
// encoder serves both.

const (
	varint32BytesMax = 5
	varint64BytesMax = 10
)

func zigzag(v int64) uint64 { return uint64(v<<1) ^ uint64(v>>63) }

// appendVarint appends v as a zig-zag varint.
func appendVarint(dst []byte, v int64) []byte {
	u := zigzag(v)
	for u >= 0x80 {
		dst = append(dst, byte(u)|0x80)
		u >>= 7
	}
	return append(dst, byte(u))
}

// varintLen is the number of bytes appendVarint writes for v.
func varintLen(v int64) int {
	return (bits.Len64(zigzag(v)|1) + 6) / 7
}

// reader is a sticky-error reader over one record (franz-go style): read every field,
// check ok once at the end. A failed read returns zero values and leaves ok false; the
// first failure's field name is kept for the error message. Nothing is allocated.
type reader struct {
	src    []byte
	failed string // name of the first field that did not decode, "" while ok
}

func (r *reader) ok() bool { return r.failed == "" }

func (r *reader) fail(field string) {
	if r.failed == "" {
		r.failed = field
	}
	r.src = nil
}

// uvarint reads an unsigned varint of at most bytesMax bytes.
func (r *reader) uvarint(bytesMax int, field string) uint64 {
	var value uint64
	var shift uint
	for i := 0; i < len(r.src) && i < bytesMax; i++ {
		c := r.src[i]
		if i == varint64BytesMax-1 && c > 1 {
			break // would overflow 64 bits
		}
		value |= uint64(c&0x7f) << shift
		if c < 0x80 {
			r.src = r.src[i+1:]
			return value
		}
		shift += 7
	}
	r.fail(field)
	return 0
}

// varint32 reads a zig-zag varint that must fit in int32.
func (r *reader) varint32(field string) int32 {
	if len(r.src) > 0 && r.src[0] < 0x80 { // one-byte fast path
		u := uint32(r.src[0])
		r.src = r.src[1:]
		return int32(u>>1) ^ -int32(u&1)
	}
	u := r.uvarint(varint32BytesMax, field)
	if u > math.MaxUint32 {
		r.fail(field)
		return 0
	}
	return int32(uint32(u)>>1) ^ -int32(uint32(u)&1)
}

// varint64 reads a zig-zag varint (Kafka's varlong).
func (r *reader) varint64(field string) int64 {
	if len(r.src) > 0 && r.src[0] < 0x80 {
		u := uint64(r.src[0])
		r.src = r.src[1:]
		return int64(u>>1) ^ -int64(u&1)
	}
	u := r.uvarint(varint64BytesMax, field)
	return int64(u>>1) ^ -int64(u&1)
}

func (r *reader) int8(field string) int8 {
	if len(r.src) < 1 {
		r.fail(field)
		return 0
	}
	v := int8(r.src[0])
	r.src = r.src[1:]
	return v
}

// nullableBytes reads a varint length then that many bytes; -1 is null. The length is
// checked against the remaining bytes before slicing: nothing is allocated. The result
// aliases the source with its capacity clipped, so appending to it cannot clobber what
// follows.
func (r *reader) nullableBytes(field string) []byte {
	n := r.varint32(field)
	if n == -1 {
		return nil
	}
	if n < -1 || int64(n) > int64(len(r.src)) {
		r.fail(field)
		return nil
	}
	b := r.src[:n:n]
	r.src = r.src[n:]
	return b
}
