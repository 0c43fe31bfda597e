package engine

import "testing"

// BenchmarkAppendFileIO: page-cache appends of 16 KiB batches through each FileIO in the
// same run — plain syscalls on the owner's thread vs the io_uring reactor (where a buffered
// write the kernel cannot complete inline would be punted to an io-wq worker). Measured
// 2026-11-29 on the 2-core reference VM: 52–58 µs per 16 KiB append either way (load 16),
// so shards keep every data write on their ring.
func BenchmarkAppendFileIO(b *testing.B) {
	for _, fc := range fileIOCases() {
		b.Run(fc.name, func(b *testing.B) {
			cfg := LogConfig{Storage: StoragePageCache, SegmentBytes: benchSegmentBytes, RetentionBytes: benchRetentionBytes, Logger: quietLogger}
			l, _ := openLog(b, benchDir(b), cfg, fc.fio(b))
			defer l.Close()
			data := benchBatch(b, 16)
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := l.Append(data); err != nil {
					b.Fatal(err)
				}
				if i%256 == 255 {
					if _, err := l.EnforceRetention(l.cfg.Clock()); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}
