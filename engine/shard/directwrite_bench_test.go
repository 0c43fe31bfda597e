package shard

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ringlog/ringlog/engine"
	"github.com/ringlog/ringlog/ring"
)

// BenchmarkDirectAppend: acks=1 produces of 16 KiB, 64 KiB and 1 MiB batches (1 KiB
// records) spread over 16 direct-mode partitions, with 64 MiB of produces (at most 4,096)
// waiting for their answer, against raw-seq-1MiB-qd64: the device's ceiling measured in
// the same run through the same ring, sequential 1 MiB O_DIRECT overwrites with 64 in flight
// (the cell `ringlog bench disk` calls "seq write 1 MiB direct qd64"). The goal of issue 14
// is ≥ 70 % of it from 16 KiB up. raw-append-1MiB-qd64 is the same writes extending a new
// file, as a log does (on ext4 an O_DIRECT write past the end of the file or into
// unwritten blocks cannot run without blocking, so io_uring hands it to its worker threads).
// mode=async is the broker's path (asynchronous, from chunks registered as fixed buffers:
// WRITE_FIXED), mode=sync the synchronous direct path (one pwritev per produce, the loop
// waiting for the device) and mode=async-unregistered the asynchronous one with plain
// WRITEs, for the A/Bs. The produce window is 64 MiB (at most 4,096 produces), the bytes
// the reference keeps in flight; RINGLOG_BENCH_WINDOW caps the produces instead.
// mode=async-prealloc is mode=async on a topic with preallocate.bytes (zero-filled space
// ahead of each partition's end, engine/prealloc.go), RINGLOG_BENCH_PREALLOC bytes (4 MiB
// unless set).
//
// mode=churn-fresh and mode=churn-recycle are mode=async in the steady state of a log at
// its retention limit: 32 MiB segments, retention.bytes 1 MiB (a sealed segment is retired
// at the first retention check after the roll: the I/O pattern of a log at any retention
// limit, on 1/16 of the disk), retention checked every 50 ms, and 68 MiB per partition
// produced before the timer starts (1.1 GiB; skipped in the b.N = 1 probe run, whose figure
// is not reported), so the active segment at the start and every roll in the timed part
// follow a retirement. churn-fresh creates each new segment as an empty file
// (recycle.segments -1), churn-recycle renames a retired one into place (the default,
// engine/recycle.go) so appends overwrite written blocks, as raw-seq does.
func BenchmarkDirectAppend(b *testing.B) {
	b.Run("raw-seq-1MiB-qd64", func(b *testing.B) { benchRawDirect(b, true) })
	b.Run("raw-append-1MiB-qd64", func(b *testing.B) { benchRawDirect(b, false) })
	for _, mode := range []string{"async", "sync", "async-unregistered", "async-prealloc", "churn-fresh", "churn-recycle"} {
		for _, size := range []int{16 << 10, 64 << 10, 1 << 20} {
			b.Run(fmt.Sprintf("mode=%s/batch=%dKiB", mode, size>>10), func(b *testing.B) {
				topic := map[string]string{engine.ConfigStorageMode: string(engine.StorageDirect),
					engine.ConfigRecycleSegments: "-1"}
				warmupBytes := 0
				switch mode {
				case "async-prealloc":
					topic[engine.ConfigPreallocateBytes] = strconv.Itoa(benchPreallocBytes())
				case "churn-fresh", "churn-recycle":
					topic[engine.ConfigSegmentBytes] = strconv.Itoa(benchChurnSegmentBytes)
					topic[engine.ConfigRetentionBytes] = strconv.Itoa(1 << 20)
					warmupBytes = (2*benchChurnSegmentBytes + 4<<20) * benchPartitions
					if mode == "churn-recycle" {
						delete(topic, engine.ConfigRecycleSegments) // the default
					}
				}
				benchDirectAppend(b, size, topic, warmupBytes, &testHooks{syncDirectWrites: mode == "sync", unregisteredDirectWrites: mode == "async-unregistered"})
			})
		}
	}
}

// benchChurnSegmentBytes is the segment size of the churn modes: 32 MiB.
const benchChurnSegmentBytes = 32 << 20

func benchPreallocBytes() int {
	if v, err := strconv.Atoi(os.Getenv("RINGLOG_BENCH_PREALLOC")); err == nil && v >= 0 {
		return v
	}
	return 4 << 20
}

const benchPartitions = 16

func benchDirectAppend(b *testing.B, batchBytes int, topicConfig map[string]string, warmupBytes int, hooks *testHooks) {
	cfg := Config{DataDir: b.TempDir(), Ring: ring.Config{Backend: "auto"}, hooks: hooks}
	if warmupBytes > 0 {
		cfg.RetentionCheckInterval = 50 * time.Millisecond
	}
	br, err := Open(cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer br.Close()
	if err := br.CreateTopic("bench", benchPartitions, topicConfig); err != nil {
		b.Fatal(err)
	}
	if _, states, err := br.DescribeTopic("bench"); err != nil || states[0].Storage != string(engine.StorageDirect) {
		b.Skipf("direct mode unavailable here: %v %+v", err, states)
	}
	records := max(batchBytes/1100, 1) // ~1 KiB values plus record overhead fill the batch
	window := min(benchWindowMax(), (64<<20)/batchBytes)
	if b.N == 1 {
		warmupBytes = 0 // the probe run: its figure is not reported
	}
	zeros, recycled := engine.ZeroAheadStats().Bytes, engine.RecycleStats().Reused
	benchProduceWindowWarm(b, br, window, records, func(i int) TopicPartition {
		return TopicPartition{"bench", int32(i % benchPartitions)}
	}, AcksLeader, warmupBytes/batchBytes)
	if z := engine.ZeroAheadStats().Bytes - zeros; z > 0 {
		b.ReportMetric(float64(z)/float64(b.N), "zero-B/op") // preallocated zeros written per produce
	}
	if warmupBytes > 0 { // segments that took a retired file, warm-up included
		b.ReportMetric(float64(engine.RecycleStats().Reused-recycled), "recycled")
	}
}

// benchRawDirect writes sequential 1 MiB O_DIRECT blocks, 64 in flight on a shard's ring
// (StartWrite, completions through AwaitWrites): over a prefilled 512 MiB file again and
// again (overwrite), or extending a new file.
func benchRawDirect(b *testing.B, overwrite bool) {
	const block, depth = 1 << 20, 64
	fileBytes := int64(512 << 20)
	br, err := Open(Config{DataDir: b.TempDir(), Shards: 1, Ring: ring.Config{Backend: "auto"}})
	if err != nil {
		b.Fatal(err)
	}
	defer br.Close()
	path := filepath.Join(b.TempDir(), "raw")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_DIRECT, 0o600)
	if err != nil {
		b.Skipf("O_DIRECT unavailable: %v", err)
	}
	defer f.Close()
	fd := int(f.Fd())
	bufs := make([][]byte, depth)
	for i := range bufs {
		bufs[i] = alignedBlock(block)
	}
	if !overwrite {
		fileBytes = int64(b.N+depth) * block // never wraps: every write extends the file
	}
	run := func(n int) error {
		return br.Exec(0, func(r *ring.Reactor) error {
			issued, done, off := 0, 0, int64(0)
			var werr error
			var start func(slot int)
			start = func(slot int) {
				if issued >= n || werr != nil {
					return
				}
				issued++
				o := off
				off = (off + block) % fileBytes
				if err := r.StartWrite(fd, bufs[slot], o, func(k int, err error) {
					done++
					if err == nil && k != block {
						err = fmt.Errorf("short write %d", k)
					}
					if err != nil && werr == nil {
						werr = err
					}
					start(slot)
				}); err != nil && werr == nil {
					werr = err
				}
			}
			for slot := 0; slot < depth; slot++ {
				start(slot)
			}
			if err := r.AwaitWrites(func() bool { return done == issued && (issued == n || werr != nil) }); err != nil {
				return err
			}
			return werr
		})
	}
	if overwrite {
		if err := run(int(fileBytes / block)); err != nil { // prefill: later writes overwrite written blocks
			b.Fatal(err)
		}
		if err := unix.Fdatasync(fd); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(block)
	b.ReportAllocs()
	b.ResetTimer()
	if err := run(b.N); err != nil {
		b.Fatal(err)
	}
}

// alignedBlock is n bytes of non-zero data at a page-aligned address (anonymous mmap).
func alignedBlock(n int) []byte {
	p, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		panic(err)
	}
	for i := range p {
		p[i] = byte(i)
	}
	return p
}

func benchWindowMax() int {
	if v, err := strconv.Atoi(os.Getenv("RINGLOG_BENCH_WINDOW")); err == nil && v > 0 {
		return v
	}
	return 4096
}
