package batch

import (
	"errors"
	"fmt"
	"runtime"
	"sync"

	"github.com/klauspost/compress/zstd"
)

// zstd state is created once per process and shared: EncodeAll and DecodeAll are safe for
// concurrent use and keep one internal encoder/decoder per concurrent caller (up to
// GOMAXPROCS, i.e. one per shard), so no batch ever creates an encoder or decoder.
//
// Encoder: default level. On 1 KiB JSON-like records it compresses ~4-5x, which is the
// trade Kafka users pick zstd for. It writes the frame content size, so a decoder can
// size its output once.
//
// Decoder: refuses output above MaxDecompressedBytes. For a frame that declares its
// content size (our encoder, franz-go, librdkafka) the library checks the declared size
// against the limit and never allocates more than the rest of the input could decode to.
// A frame without one (streaming encoders such as the Java client's) grows the output as
// blocks decode, so memory follows real output, up to the limit.
//
// Considered and rejected: WithDecodeAllCapLimit plus retrying with a 4x larger buffer
// would cut the allocation churn of a decompression bomb (~5x the output today, from
// append growth), but in v1.20 an outgrown buffer can surface as a generic "output bigger
// than max block size" error that cannot be told apart from corrupt input.
var (
	zstdOnce    sync.Once
	zstdEncoder *zstd.Encoder
	zstdDecoder *zstd.Decoder
)

// decompressBufferBytesMax bounds the decompression buffers Decode keeps pooled: a batch
// that decompresses to more gets a one-off buffer, so one big batch cannot pin 64 MiB per P.
const decompressBufferBytesMax = 4 << 20

func zstdInit() {
	zstdOnce.Do(func() {
		procs := runtime.GOMAXPROCS(0)
		enc, err := zstd.NewWriter(nil,
			zstd.WithEncoderConcurrency(procs),
			zstd.WithEncoderLevel(zstd.SpeedDefault),
			zstd.WithZeroFrames(true))
		if err != nil {
			panic("batch: zstd encoder options rejected: " + err.Error())
		}
		dec, err := zstd.NewReader(nil,
			zstd.WithDecoderConcurrency(procs),
			zstd.WithDecoderMaxMemory(MaxDecompressedBytes),
			zstd.WithDecoderMaxWindow(MaxDecompressedBytes))
		if err != nil {
			panic("batch: zstd decoder options rejected: " + err.Error())
		}
		zstdEncoder, zstdDecoder = enc, dec
	})
}

// compressZstd appends one zstd frame holding src to dst.
func compressZstd(dst, src []byte) []byte {
	zstdInit()
	return zstdEncoder.EncodeAll(src, dst)
}

// decompressZstd decodes the zstd frames in src into scratch[:0] (or a larger buffer when
// scratch is too small) and returns the output. It fails with ErrInvalidRecord on bad
// data or when the output would exceed MaxDecompressedBytes.
func decompressZstd(scratch, src []byte) ([]byte, error) {
	zstdInit()
	out, err := zstdDecoder.DecodeAll(src, scratch[:0])
	return out, zstdError(err)
}

func zstdError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, zstd.ErrDecoderSizeExceeded):
		return fmt.Errorf("%w: zstd records decompress to more than %d bytes", ErrInvalidRecord, MaxDecompressedBytes)
	default:
		return fmt.Errorf("%w: zstd: %v", ErrInvalidRecord, err)
	}
}
