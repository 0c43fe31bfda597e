package wire

import (
	"encoding/binary"
	"fmt"
)

// Primitive wire types (all big-endian), shared by every message schema:
//
//	int8, int16, int32, int64   two's complement
//	string                      int16 length N, then N bytes of UTF-8; N = -1 is null (decodes to "")
//	bytes                       int32 length N, then N bytes; N = -1 is null (decodes to nil)
//	array of T                  int32 count N, then N elements; N = -1 is null (nil slice)
//
// These are part of the wire format and must not change.

// reader is a sticky-error decoder over one message payload: every accessor returns a zero
// value once an error happened, and the caller checks once with done. It never allocates
// from a length it has not bounded by the remaining bytes first.
type reader struct {
	buf []byte
	err error
}

func (r *reader) fail(err error) {
	if r.err == nil {
		r.err = err
	}
	r.buf = nil
}

func (r *reader) take(n int) []byte {
	if r.err != nil {
		return nil
	}
	if n > len(r.buf) {
		r.fail(ErrShortBuffer)
		return nil
	}
	b := r.buf[:n:n]
	r.buf = r.buf[n:]
	return b
}

func (r *reader) int8() int8 {
	b := r.take(1)
	if b == nil {
		return 0
	}
	return int8(b[0])
}

func (r *reader) bool() bool { return r.int8() != 0 }

func (r *reader) int16() int16 {
	b := r.take(2)
	if b == nil {
		return 0
	}
	return int16(binary.BigEndian.Uint16(b))
}

func (r *reader) int32() int32 {
	b := r.take(4)
	if b == nil {
		return 0
	}
	return int32(binary.BigEndian.Uint32(b))
}

func (r *reader) int64() int64 {
	b := r.take(8)
	if b == nil {
		return 0
	}
	return int64(binary.BigEndian.Uint64(b))
}

// nullableString returns the string and whether it was non-null.
func (r *reader) nullableString() (string, bool) {
	n := r.int16()
	if r.err != nil {
		return "", false
	}
	if n == -1 {
		return "", false
	}
	if n < 0 {
		r.fail(ErrBadLength)
		return "", false
	}
	return string(r.take(int(n))), r.err == nil
}

// stringReusing is string, returning prev itself when it holds the same bytes: a decoder
// that decodes into the same message again keeps its strings without allocating.
func (r *reader) stringReusing(prev string) string {
	n := r.int16()
	if r.err != nil || n == -1 {
		return ""
	}
	if n < 0 {
		r.fail(ErrBadLength)
		return ""
	}
	b := r.take(int(n))
	if r.err != nil {
		return ""
	}
	if string(b) == prev { // compared without a conversion
		return prev
	}
	return string(b)
}

func (r *reader) string() string {
	s, _ := r.nullableString()
	return s
}

// bytes returns a sub-slice of the payload (no copy): it is valid as long as the payload is.
func (r *reader) bytes() []byte {
	n := r.int32()
	if r.err != nil || n == -1 {
		return nil
	}
	if n < 0 {
		r.fail(ErrBadLength)
		return nil
	}
	b := r.take(int(n))
	if b == nil {
		return nil
	}
	return b
}

// arrayLen reads an array count and checks that count elements of at least elemBytesMin
// bytes each fit in what remains, so that make([]T, count) is bounded by the payload size.
// It returns -1 for a null array and 0 after an error.
func (r *reader) arrayLen(elemBytesMin int) int {
	n := r.int32()
	if r.err != nil {
		return 0
	}
	if n == -1 {
		return -1
	}
	if n < 0 || int64(n)*int64(elemBytesMin) > int64(len(r.buf)) {
		r.fail(ErrBadLength)
		return 0
	}
	return int(n)
}

// done returns the first error, or ErrTrailingBytes if bytes remain.
func (r *reader) done(what string) error {
	if r.err != nil {
		return fmt.Errorf("decode %s: %w", what, r.err)
	}
	if len(r.buf) != 0 {
		return fmt.Errorf("decode %s: %d bytes left: %w", what, len(r.buf), ErrTrailingBytes)
	}
	return nil
}

// Append helpers, one per primitive type.

func appendInt8(dst []byte, v int8) []byte { return append(dst, byte(v)) }

func appendBool(dst []byte, v bool) []byte {
	if v {
		return append(dst, 1)
	}
	return append(dst, 0)
}

func appendInt16(dst []byte, v int16) []byte { return binary.BigEndian.AppendUint16(dst, uint16(v)) }
func appendInt32(dst []byte, v int32) []byte { return binary.BigEndian.AppendUint32(dst, uint32(v)) }
func appendInt64(dst []byte, v int64) []byte { return binary.BigEndian.AppendUint64(dst, uint64(v)) }

// appendString writes s; strings longer than stringBytesMax are a programming error
// (topic names and config values are validated long before encoding).
func appendString(dst []byte, s string) []byte {
	if len(s) > stringBytesMax {
		panic(fmt.Sprintf("netio: string of %d bytes exceeds the %d-byte wire limit", len(s), stringBytesMax))
	}
	dst = appendInt16(dst, int16(len(s)))
	return append(dst, s...)
}

func appendNullableString(dst []byte, s string, present bool) []byte {
	if !present {
		return appendInt16(dst, -1)
	}
	return appendString(dst, s)
}

func appendBytes(dst []byte, b []byte) []byte {
	if b == nil {
		return appendInt32(dst, -1)
	}
	dst = appendInt32(dst, int32(len(b)))
	return append(dst, b...)
}

// appendArrayLen writes the count of a slice; a nil slice is written as null (-1) only when
// nullable is true, otherwise as 0.
func appendArrayLen(dst []byte, n int, isNil, nullable bool) []byte {
	if isNil && nullable {
		return appendInt32(dst, -1)
	}
	return appendInt32(dst, int32(n))
}

// stringBytesMax is the largest string the int16 length prefix can carry.
const stringBytesMax = 1<<15 - 1
