package engine

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/ringlog/ringlog/engine/batch"
	"github.com/ringlog/ringlog/ring"
	"golang.org/x/sys/unix"
)

// Benchmarks. Data goes to RINGLOG_BENCH_DIR when set (put it on the disk you want to
// measure), else to the test's temp dir. Disk use is bounded: logs keep at most
// benchRetentionBytes, raw writes wrap at benchRawFileBytes.
//
//	go test ./engine -run '^$' -bench 'Append|RawWrite' -benchtime 2s
//	RINGLOG_BENCH_RECOVERY_BYTES=1073741824 go test ./engine -run '^$' -bench Recovery -benchtime 3x
const (
	benchRecordBytes    = 1 << 10
	benchSegmentBytes   = 128 << 20
	benchRetentionBytes = 512 << 20
	benchRawFileBytes   = 512 << 20
	benchRecoveryBytes  = 64 << 20 // default; RINGLOG_BENCH_RECOVERY_BYTES overrides
)

var benchBatchSizes = []struct {
	name    string
	records int
}{{"16KiB", 16}, {"1MiB", 1024}}

func benchDir(b *testing.B) string {
	if d := os.Getenv("RINGLOG_BENCH_DIR"); d != "" {
		dir, err := os.MkdirTemp(d, "engine-bench-")
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { os.RemoveAll(dir) })
		return dir
	}
	return b.TempDir()
}

// benchBatch is one batch of n records of benchRecordBytes values (~n KiB).
func benchBatch(b *testing.B, n int) []byte {
	bld := batch.NewBuilder(batch.BuilderOptions{})
	value := make([]byte, benchRecordBytes)
	for i := range value {
		value[i] = byte(i * 7)
	}
	for i := 0; i < n; i++ {
		bld.Append(1_700_000_000_000+int64(i), nil, value, nil)
	}
	out, err := bld.Build(nil)
	if err != nil {
		b.Fatal(err)
	}
	return out
}

// BenchmarkAppend: 1 KiB records in 16 KiB and 1 MiB batches, both modes, no fdatasync
// (flush policy "none"); compare with BenchmarkRawWrite of the same sizes in the same run.
func BenchmarkAppend(b *testing.B) {
	for _, mode := range storageModes {
		for _, size := range benchBatchSizes {
			b.Run(string(mode)+"/"+size.name, func(b *testing.B) {
				benchAppend(b, mode, size.records, false)
			})
		}
	}
}

// BenchmarkAppendFlushAlways: the same with fdatasync after every append (flush=always,
// one batch per group commit: the worst case for durability cost).
func BenchmarkAppendFlushAlways(b *testing.B) {
	for _, mode := range storageModes {
		for _, size := range benchBatchSizes {
			b.Run(string(mode)+"/"+size.name, func(b *testing.B) {
				benchAppend(b, mode, size.records, true)
			})
		}
	}
}

// BenchmarkAppendPrealloc: preallocated segment space (prealloc.go) off and on (4 MiB), in
// both modes: one 1 KiB record per append with flush=always (what a lone durable producer
// does) and 1 MiB batches without syncs (throughput). Besides ns/op it reports zero-B/B (zero
// bytes written per byte appended) and cpu-s/GB: the process's user+system CPU, the zeroing
// goroutines included, per 10^9 bytes appended.
func BenchmarkAppendPrealloc(b *testing.B) {
	for _, mode := range storageModes {
		for _, load := range []struct {
			name        string
			records     int
			flushAlways bool
		}{{"flush-always-1KiB", 1, true}, {"none-1MiB", 1024, false}} {
			for _, prealloc := range []int64{-1, 4 << 20} {
				b.Run(fmt.Sprintf("%s/%s/prealloc=%dMiB", mode, load.name, max(prealloc, 0)>>20), func(b *testing.B) {
					benchAppendConfig(b, mode, load.records, load.flushAlways, prealloc)
				})
			}
		}
	}
}

func benchAppend(b *testing.B, mode StorageMode, records int, flushAlways bool) {
	benchAppendConfig(b, mode, records, flushAlways, 0) // the default: on for page-cache flush.always
}

func cpuTime() time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func benchAppendConfig(b *testing.B, mode StorageMode, records int, flushAlways bool, prealloc int64) {
	cfg := LogConfig{Storage: mode, SegmentBytes: benchSegmentBytes, RetentionBytes: benchRetentionBytes,
		FlushAlways: flushAlways, PreallocateBytes: prealloc, Logger: quietLogger}
	l, _ := openLog(b, benchDir(b), cfg, ring.Syscalls{})
	defer l.Close()
	if l.Mode() != mode {
		b.Skipf("storage mode %s unavailable here", mode)
	}
	data := benchBatch(b, records)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	zeros, cpu := ZeroAheadStats().Bytes, cpuTime()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := l.Append(data); err != nil {
			b.Fatal(err)
		}
		if err := l.Flush(); err != nil {
			b.Fatal(err)
		}
		if i%256 == 255 {
			if _, err := l.EnforceRetention(l.cfg.Clock()); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.StopTimer()
	l.zeroJobs.Wait() // the zeroing the appends started is part of their cost
	appended := float64(b.N) * float64(len(data))
	b.ReportMetric(float64(ZeroAheadStats().Bytes-zeros)/appended, "zero-B/B")
	b.ReportMetric((cpuTime()-cpu).Seconds()/(appended/1e9), "cpu-s/GB")
}

// BenchmarkRawWrite: sequential pwrite of the same sizes to a plain file, buffered and
// O_DIRECT (aligned buffer), wrapping at benchRawFileBytes: the ceiling for BenchmarkAppend.
func BenchmarkRawWrite(b *testing.B) {
	for _, direct := range []bool{false, true} {
		for _, size := range benchBatchSizes {
			name := "buffered"
			if direct {
				name = "direct"
			}
			b.Run(name+"/"+size.name, func(b *testing.B) {
				n := len(benchBatch(b, size.records))
				if direct {
					n = int(alignUp(int64(n)))
				}
				benchRawWrite(b, direct, n)
			})
		}
	}
}

func benchRawWrite(b *testing.B, direct bool, n int) {
	flags := unix.O_RDWR | unix.O_CREAT | unix.O_TRUNC | unix.O_CLOEXEC
	if direct {
		flags |= unix.O_DIRECT
	}
	dir := benchDir(b)
	if direct && probeDirect(dir) != nil {
		b.Skip("O_DIRECT unavailable here")
	}
	// Like the log: extend a fresh file, and start a new one (dropping the old) every
	// benchRawFileBytes, as segment rolls plus retention do.
	path := dir + "/raw"
	fd, err := unix.Open(path, flags, 0o644)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { unix.Close(fd) }()
	buf := alignedBuffer(n)
	for i := range buf {
		buf[i] = byte(i)
	}
	fio := ring.Syscalls{}
	b.SetBytes(int64(n))
	b.ReportAllocs()
	b.ResetTimer()
	pos := int64(0)
	for i := 0; i < b.N; i++ {
		if err := pwriteFull(fio, fd, buf, pos); err != nil {
			b.Fatal(err)
		}
		pos += int64(n)
		if pos+int64(n) > benchRawFileBytes {
			unix.Close(fd)
			unix.Unlink(path)
			if fd, err = unix.Open(path, flags, 0o644); err != nil {
				b.Fatal(err)
			}
			pos = 0
		}
	}
}

// BenchmarkRead: random offsets, up to 1 MiB per read, copied out (AppendTo), from a 64 MiB
// log of 16 KiB batches. Reads mostly hit the page cache (or direct mode's chunk cache for
// the tail); this measures lookup plus copy, not the disk.
func BenchmarkRead(b *testing.B) {
	for _, mode := range storageModes {
		b.Run(string(mode), func(b *testing.B) {
			l, _ := openLog(b, benchDir(b), LogConfig{Storage: mode, SegmentBytes: 16 << 20, Logger: quietLogger}, ring.Syscalls{})
			defer l.Close()
			data := benchBatch(b, 16)
			for l.Size() < 64<<20 {
				if _, err := l.Append(data); err != nil {
					b.Fatal(err)
				}
			}
			rng := rand.New(rand.NewPCG(1, 2))
			end := l.EndOffset()
			buf := make([]byte, 0, 2<<20)
			var total int64
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				res, err := l.Read(rng.Int64N(end), 1<<20)
				if err != nil {
					b.Fatal(err)
				}
				if buf, err = res.AppendTo(buf[:0]); err != nil {
					b.Fatal(err)
				}
				total += res.Size
			}
			b.SetBytes(total / int64(max(b.N, 1)))
		})
	}
}

// BenchmarkReadLookup: the offset lookup alone (segment bisect, index bisect, header scan),
// returning file ranges without copying — the sendfile path.
func BenchmarkReadLookup(b *testing.B) {
	l, _ := openLog(b, benchDir(b), LogConfig{SegmentBytes: 16 << 20, Logger: quietLogger}, ring.Syscalls{})
	defer l.Close()
	data := benchBatch(b, 1)
	for l.Size() < 32<<20 {
		if _, err := l.Append(data); err != nil {
			b.Fatal(err)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	end := l.EndOffset()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := l.Read(rng.Int64N(end), 64<<10); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRecovery: reopen a log whose active segment lost its index (an unclean shutdown
// before any index entry was persisted), so recovery re-reads and CRC-checks every byte.
// Size: RINGLOG_BENCH_RECOVERY_BYTES (default 64 MiB; 1 GiB for the headline number). The
// file is usually in the page cache; drop caches first to measure the disk.
func BenchmarkRecovery(b *testing.B) {
	size := int64(benchRecoveryBytes)
	if s := os.Getenv("RINGLOG_BENCH_RECOVERY_BYTES"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n <= 0 {
			b.Fatalf("RINGLOG_BENCH_RECOVERY_BYTES=%q", s)
		}
		size = n
	}
	dir := benchDir(b)
	cfg := LogConfig{SegmentBytes: min(max(size+(1<<20), segmentBytesMin), segmentBytesMax), Logger: quietLogger}
	l, _ := openLog(b, dir, cfg, ring.Syscalls{})
	data := benchBatch(b, 16)
	for l.Size() < size {
		if _, err := l.Append(data); err != nil {
			b.Fatal(err)
		}
	}
	base := l.active().baseOffset
	logBytes := l.Size()
	if err := l.Close(); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(logBytes)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		for _, suffix := range []string{indexSuffix, timeIndexSuffix} {
			if err := os.Remove(segmentFile(dir, base, suffix)); err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
		l, rep, err := OpenLog(dir, cfg, ring.Syscalls{})
		if err != nil {
			b.Fatal(err)
		}
		if rep.ScannedBytes < logBytes-int64(len(data)) {
			b.Fatalf("recovery scanned %d of %d bytes", rep.ScannedBytes, logBytes)
		}
		b.StopTimer()
		l.closeFiles()
		b.StartTimer()
	}
}
