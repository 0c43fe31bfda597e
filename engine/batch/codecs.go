package batch

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"sync"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/snappy"
	"github.com/pierrec/lz4/v4"
)

// The codecs Kafka clients use by default besides zstd (zstd.go). Each decompressor stops at
// MaxDecompressedBytes and fails with ErrInvalidRecord past it, so a hostile batch costs at
// most that much memory whatever it claims:
//
//   - gzip (RFC 1952, klauspost/compress/gzip): streamed through a reader capped at
//     MaxDecompressedBytes+1; concatenated members are read as one stream, as Kafka does.
//   - snappy (klauspost/compress/snappy): either one raw block (librdkafka, franz-go) or the
//     "xerial" framing the Java client writes (magic "\x82SNAPPY\x00", two version words,
//     then u32 length + raw block chunks). A raw block's declared length is checked against
//     the limit before anything is allocated.
//   - lz4 (github.com/pierrec/lz4/v4): the LZ4 frame format (magic 0x184D2204), which is
//     what Kafka's magic-2 batches carry; streamed through the same capped reader.
//
// Compression for the builder uses the same libraries: gzip at the default level, snappy as
// one raw block (what franz-go writes), lz4 frames with default options.

// xerialMagic opens a snappy blob in the xerial framing.
var xerialMagic = []byte{0x82, 'S', 'N', 'A', 'P', 'P', 'Y', 0}

// xerialHeaderBytes is magic (8) + version (4) + compatible version (4).
const xerialHeaderBytes = 16

// Pools of stream state, so that no batch builds a gzip or lz4 reader or writer of its own.
var (
	gzipReaders sync.Pool // *gzip.Reader
	gzipWriters = sync.Pool{New: func() any { return gzip.NewWriter(nil) }}
	lz4Readers  = sync.Pool{New: func() any { return lz4.NewReader(nil) }}
	lz4Writers  = sync.Pool{New: func() any { return lz4.NewWriter(nil) }}
)

// compress appends src compressed with c to dst. c must be Supported and not CodecNone.
func compress(c Codec, dst, src []byte) []byte {
	switch c {
	case CodecZstd:
		return compressZstd(dst, src)
	case CodecSnappy:
		n := len(dst)
		dst = append(dst, make([]byte, snappy.MaxEncodedLen(len(src)))...)
		return dst[:n+len(snappy.Encode(dst[n:], src))]
	case CodecGzip:
		return compressStream(&gzipWriters, dst, src, c)
	case CodecLZ4:
		return compressStream(&lz4Writers, dst, src, c)
	}
	panic(fmt.Sprintf("batch: compress called with %s", c))
}

// streamWriter is a pooled gzip or lz4 writer.
type streamWriter interface {
	io.WriteCloser
	Reset(io.Writer)
}

// compressStream appends src compressed by a writer from pool to dst; writing into a
// bytes.Buffer cannot fail.
func compressStream(pool *sync.Pool, dst, src []byte, c Codec) []byte {
	buf := bytes.NewBuffer(dst)
	w := pool.Get().(streamWriter)
	w.Reset(buf)
	if _, err := w.Write(src); err != nil {
		panic(fmt.Sprintf("batch: %s into memory: %v", c, err))
	}
	if err := w.Close(); err != nil {
		panic(fmt.Sprintf("batch: %s close into memory: %v", c, err))
	}
	pool.Put(w)
	return buf.Bytes()
}

// decompress decodes the records section compressed with c into scratch[:0] (or a larger
// buffer) and returns the output. It fails with ErrInvalidRecord on bad data or when the
// output would exceed MaxDecompressedBytes.
func decompress(c Codec, scratch, src []byte) ([]byte, error) {
	switch c {
	case CodecZstd:
		return decompressZstd(scratch, src)
	case CodecSnappy:
		return decompressSnappy(scratch, src)
	case CodecGzip:
		r, _ := gzipReaders.Get().(*gzip.Reader)
		var err error
		if r == nil {
			r, err = gzip.NewReader(bytes.NewReader(src))
		} else {
			err = r.Reset(bytes.NewReader(src))
		}
		if err != nil {
			return scratch[:0], fmt.Errorf("%w: gzip: %v", ErrInvalidRecord, err)
		}
		out, err := readCapped(scratch, r, "gzip")
		gzipReaders.Put(r)
		return out, err
	case CodecLZ4:
		r := lz4Readers.Get().(*lz4.Reader)
		r.Reset(bytes.NewReader(src))
		out, err := readCapped(scratch, r, "lz4")
		r.Reset(nil)
		lz4Readers.Put(r)
		return out, err
	}
	return scratch[:0], fmt.Errorf("%w: %s", ErrUnsupportedCodec, c)
}

// readCapped reads r to its end into scratch[:0], refusing more than MaxDecompressedBytes.
func readCapped(scratch []byte, r io.Reader, name string) ([]byte, error) {
	buf := bytes.NewBuffer(scratch[:0])
	n, err := buf.ReadFrom(io.LimitReader(r, MaxDecompressedBytes+1))
	if err != nil {
		return buf.Bytes(), fmt.Errorf("%w: %s: %v", ErrInvalidRecord, name, err)
	}
	if n > MaxDecompressedBytes {
		return buf.Bytes(), fmt.Errorf("%w: %s records decompress to more than %d bytes", ErrInvalidRecord, name, MaxDecompressedBytes)
	}
	return buf.Bytes(), nil
}

// decompressSnappy decodes a raw snappy block or a xerial-framed sequence of blocks.
func decompressSnappy(scratch, src []byte) ([]byte, error) {
	if !bytes.HasPrefix(src, xerialMagic) {
		return snappyBlock(scratch[:0], src)
	}
	if len(src) < xerialHeaderBytes {
		return scratch[:0], fmt.Errorf("%w: snappy: xerial header cut at %d bytes", ErrInvalidRecord, len(src))
	}
	out := scratch[:0]
	for rest := src[xerialHeaderBytes:]; len(rest) > 0; {
		if len(rest) < 4 {
			return out, fmt.Errorf("%w: snappy: xerial chunk length cut at %d bytes", ErrInvalidRecord, len(rest))
		}
		size := binary.BigEndian.Uint32(rest)
		rest = rest[4:]
		if uint64(size) > uint64(len(rest)) {
			return out, fmt.Errorf("%w: snappy: xerial chunk of %d bytes, %d remain", ErrInvalidRecord, size, len(rest))
		}
		var err error
		if out, err = snappyBlock(out, rest[:size]); err != nil {
			return out, err
		}
		rest = rest[size:]
	}
	return out, nil
}

// snappyBlock appends one raw snappy block's output to dst, checking the declared length
// against MaxDecompressedBytes before allocating.
func snappyBlock(dst, block []byte) ([]byte, error) {
	n, err := snappy.DecodedLen(block)
	if err != nil {
		return dst, fmt.Errorf("%w: snappy: %v", ErrInvalidRecord, err)
	}
	if n > MaxDecompressedBytes-len(dst) {
		return dst, fmt.Errorf("%w: snappy records decompress to more than %d bytes", ErrInvalidRecord, MaxDecompressedBytes)
	}
	start := len(dst)
	if cap(dst)-start < n {
		grown := make([]byte, start, start+n)
		copy(grown, dst)
		dst = grown
	}
	dst = dst[:start+n]
	out, err := snappy.Decode(dst[start:], block)
	if err != nil {
		return dst[:start], fmt.Errorf("%w: snappy: %v", ErrInvalidRecord, err)
	}
	if len(out) != n || (n > 0 && &out[0] != &dst[start]) {
		panic(fmt.Sprintf("batch: snappy decoded %d bytes outside the %d-byte buffer it was given", len(out), n))
	}
	return dst, nil
}
