package batch

import (
	"runtime"
	"sync"

	"github.com/klauspost/compress/zstd"
)

// zstd state is created once per process and shared: EncodeAll and DecodeAll are safe for
// concurrent use and keep one internal encoder/decoder per concurrent caller (up to
// GOMAXPROCS, i.e. one per shard), so no batch ever creates an encoder or decoder.
//
// Encoder: default level. On 1 KiB JSON-like records it compresses ~4-6x at several
// hundred MB/s per core, which is the trade Kafka users pick zstd for. The encoder writes
// the frame content size, so a decoder can size its output once.
//
// Decoder: DecodeAll refuses output above MaxDecompressedBytes, checks a declared frame
// content size against that bound before allocating, and never allocates more than the
// remaining input could decode to.
var (
	zstdOnce    sync.Once
	zstdEncoder *zstd.Encoder
	zstdDecoder *zstd.Decoder
)

func zstdCodecs() (*zstd.Encoder, *zstd.Decoder) {
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
	return zstdEncoder, zstdDecoder
}

// decompressBufferBytesMax bounds the decompression buffers Decode keeps pooled: a batch that
// decompresses to more gets a one-off buffer, so one big batch cannot pin 64 MiB per P.
const decompressBufferBytesMax = 4 << 20
