package shard

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
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
// the reference keeps in flight; RINGLOG_BENCH_WINDOW_BYTES sets its bytes and
// RINGLOG_BENCH_WINDOW caps the produces.
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
// RINGLOG_BENCH_CHURN_SEGMENT_BYTES sets their segment size (32 MiB unless set; session 13):
// a roll's costs (seal, retirement, pool preparation, checkpoint: several device cache
// flushes) are paid per segment, which a broker's 1 GiB default pays 32 times less often.
//
// The -4groups modes (async-4groups, churn-recycle-4groups) keep up to 4 write groups in
// flight per partition (engine.DirectWriteGroupsMax = 4) against the default of one, for
// the A/B of session 9 (RINGLOG_BENCH_GROUPS and RINGLOG_BENCH_GROUP_MIN set the count and
// engine.DirectGroupMinBytes in every mode).
func BenchmarkDirectAppend(b *testing.B) {
	for _, spec := range rawDirectRefs {
		b.Run(spec.name, func(b *testing.B) { benchRawDirect(b, spec) })
	}
	for _, mode := range []string{"async", "sync", "async-unregistered", "async-prealloc", "churn-fresh", "churn-recycle", "async-4groups", "churn-recycle-4groups"} {
		for _, size := range []int{16 << 10, 64 << 10, 1 << 20} {
			b.Run(fmt.Sprintf("mode=%s/batch=%dKiB", mode, size>>10), func(b *testing.B) {
				topic := map[string]string{engine.ConfigStorageMode: string(engine.StorageDirect),
					engine.ConfigRecycleSegments: "-1"}
				warmupBytes := 0
				switch mode {
				case "async-prealloc":
					topic[engine.ConfigPreallocateBytes] = strconv.Itoa(benchPreallocBytes())
				case "churn-fresh", "churn-recycle", "churn-recycle-4groups":
					segmentBytes := benchChurnSegmentBytes()
					topic[engine.ConfigSegmentBytes] = strconv.Itoa(segmentBytes)
					topic[engine.ConfigRetentionBytes] = strconv.Itoa(1 << 20)
					warmupBytes = (2*segmentBytes + 4<<20) * benchPartitions
					if mode != "churn-fresh" {
						delete(topic, engine.ConfigRecycleSegments) // the default
					}
				}
				defer func(n int, m int64) { engine.DirectWriteGroupsMax, engine.DirectGroupMinBytes = n, m }(engine.DirectWriteGroupsMax, engine.DirectGroupMinBytes)
				if v, err := strconv.Atoi(os.Getenv("RINGLOG_BENCH_GROUPS")); err == nil {
					engine.DirectWriteGroupsMax = v
				}
				if v, err := strconv.ParseInt(os.Getenv("RINGLOG_BENCH_GROUP_MIN"), 10, 64); err == nil {
					engine.DirectGroupMinBytes = v
				}
				if strings.HasSuffix(mode, "-4groups") { // up to 4 write groups in flight per partition
					engine.DirectWriteGroupsMax = 4
				}
				benchDirectAppend(b, size, topic, warmupBytes, &testHooks{syncDirectWrites: mode == "sync", unregisteredDirectWrites: mode == "async-unregistered"})
			})
		}
	}
}

// benchChurnSegmentBytes is the segment size of the churn modes: 32 MiB, or
// RINGLOG_BENCH_CHURN_SEGMENT_BYTES (session 13: the per-roll costs against the segment's
// bytes; the warm-up grows with it, 2 segments and 4 MiB per partition).
func benchChurnSegmentBytes() int {
	if v, err := strconv.Atoi(os.Getenv("RINGLOG_BENCH_CHURN_SEGMENT_BYTES")); err == nil && v >= 1<<20 {
		return v
	}
	return 32 << 20
}

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
	window := min(benchWindowMax(), max(benchWindowBytes()/batchBytes, 1))
	if b.N == 1 {
		warmupBytes = 0 // the probe run: its figure is not reported
	}
	zeros, recycled, seals := engine.ZeroAheadStats().Bytes, engine.RecycleStats().Reused, engine.SealStats()
	benchProduceWindowWarm(b, br, window, records, func(i int) TopicPartition {
		return TopicPartition{"bench", int32(i % benchPartitions)}
	}, AcksLeader, warmupBytes/batchBytes, &benchProbe{bytesPerOp: int64(batchBytes)})
	if z := engine.ZeroAheadStats().Bytes - zeros; z > 0 {
		b.ReportMetric(float64(z)/float64(b.N), "zero-B/op") // preallocated zeros written per produce
	}
	if warmupBytes > 0 { // segments that took a retired file, warm-up included
		b.ReportMetric(float64(engine.RecycleStats().Reused-recycled), "recycled")
		// Rolls that left the sealed segment's writes in flight, and those that waited for
		// them (engine/asyncwrite.go, "Rolls"), warm-up included.
		now := engine.SealStats()
		b.ReportMetric(float64(now.InFlight-seals.InFlight), "rolls-inflight")
		b.ReportMetric(float64(now.Waited-seals.Waited), "rolls-waited")
	}
}

// rawDirect is one raw O_DIRECT reference: sequential writes of blockBytes, depth in
// flight on each of files files (fileBytes each), through one shard's ring.
type rawDirect struct {
	name       string
	blockBytes int
	files      int
	depth      int   // writes in flight per file
	fileBytes  int64 // per file; overwrites wrap around it
	overwrite  bool  // prefill and fdatasync the files, then overwrite them round and round
	// fallocate gives new files their whole length first (fallocate mode 0: unwritten
	// extents inside the file size), which the writes then fill once: neither extending
	// nor overwriting written blocks.
	fallocate bool
	// bigEnv names the environment variable that sets fileBytes (a file larger than a
	// host could cache; its prefill takes as long as its writes).
	bigEnv string
	read   bool // after the prefill, read the files (O_DIRECT) instead of writing
	// fsyncEvery, when set, runs beside the timed writes a goroutine that appends 4 KiB to
	// a file of its own and fdatasyncs it, one after the other, pausing fsyncEvery between
	// them (RINGLOG_BENCH_FSYNC_EVERY, a Go duration, sets it): the device cache flushes a
	// log at its retention limit issues per roll, without the log.
	fsyncEvery time.Duration
}

// rawDirectRefs are the raw references of BenchmarkDirectAppend. raw-seq-1MiB-qd64 is the
// goal's reference (`ringlog bench disk`'s "seq write 1MiB direct qd64": one prefilled
// 512 MiB file overwritten 64 deep) and raw-append-1MiB-qd64 the same writes extending a
// new file. The ref-* variants take the log's pattern apart, to tell which difference from
// the reference costs what: queue depth alone (ref-seq-1MiB-qd16), a file too big for a
// host's cache to hold (ref-seq-1MiB-qd64-4GiB), and the log's own shape, 16 files (one
// per partition) overwritten at 1 or 4 writes in flight each (the log keeps one write group
// per partition in flight), at 1 MiB, 64 KiB and 16 KiB, and 16 new files extended one
// write at a time each (a fresh segment). Session 12 added: 16 new files extended 4 deep;
// 16 new files fallocate'd first (mode 0: the writes land in unwritten extents inside the
// file size, which ext4 issues without blocking, unlike extending ones) at 1 and 4 deep;
// one file of RINGLOG_BENCH_BIG_BYTES (16 GiB unless set) overwritten 64 deep; and
// ref-read-seq-1MiB-qd64, the reference's file read back with 64 O_DIRECT preads in
// flight (a rate above any device's says the host serves it from its cache).
// Session 13 added the log's shape over a 12 GiB footprint (16 files of 768 MiB overwritten
// 4 and 1 deep: ref-16files-1MiB-qd4-768MiB, -qd1-768MiB), to tell a host cache holding
// the 1 GiB set from the shape itself.
var rawDirectRefs = []rawDirect{
	{name: "raw-seq-1MiB-qd64", blockBytes: 1 << 20, files: 1, depth: 64, fileBytes: 512 << 20, overwrite: true},
	{name: "raw-append-1MiB-qd64", blockBytes: 1 << 20, files: 1, depth: 64},
	{name: "ref-seq-1MiB-qd16", blockBytes: 1 << 20, files: 1, depth: 16, fileBytes: 512 << 20, overwrite: true},
	{name: "ref-seq-1MiB-qd64-4GiB", blockBytes: 1 << 20, files: 1, depth: 64, fileBytes: 4 << 30, overwrite: true},
	{name: "ref-16files-1MiB-qd1", blockBytes: 1 << 20, files: 16, depth: 1, fileBytes: 64 << 20, overwrite: true},
	{name: "ref-16files-1MiB-qd4", blockBytes: 1 << 20, files: 16, depth: 4, fileBytes: 64 << 20, overwrite: true},
	{name: "ref-16files-1MiB-qd4-768MiB", blockBytes: 1 << 20, files: 16, depth: 4, fileBytes: 768 << 20, overwrite: true},
	{name: "ref-16files-1MiB-qd1-768MiB", blockBytes: 1 << 20, files: 16, depth: 1, fileBytes: 768 << 20, overwrite: true},
	{name: "ref-16files-64KiB-qd4", blockBytes: 64 << 10, files: 16, depth: 4, fileBytes: 64 << 20, overwrite: true},
	{name: "ref-16files-16KiB-qd4", blockBytes: 16 << 10, files: 16, depth: 4, fileBytes: 64 << 20, overwrite: true},
	{name: "ref-16files-append-1MiB-qd1", blockBytes: 1 << 20, files: 16, depth: 1},
	// Session 12 (docs/benchmarks.md, "Direct mode on the new VM").
	{name: "ref-16files-append-1MiB-qd4", blockBytes: 1 << 20, files: 16, depth: 4},
	{name: "ref-16files-falloc-1MiB-qd1", blockBytes: 1 << 20, files: 16, depth: 1, fallocate: true},
	{name: "ref-16files-falloc-1MiB-qd4", blockBytes: 1 << 20, files: 16, depth: 4, fallocate: true},
	{name: "ref-seq-1MiB-qd64-big", blockBytes: 1 << 20, files: 1, depth: 64, fileBytes: 16 << 30, overwrite: true, bigEnv: "RINGLOG_BENCH_BIG_BYTES"},
	{name: "ref-read-seq-1MiB-qd64", blockBytes: 1 << 20, files: 1, depth: 64, fileBytes: 512 << 20, overwrite: true, read: true},
	// Session 13 (docs/benchmarks.md, "Session 13: recycled segments"): ref-16files-1MiB-qd4
	// with fdatasyncs of another file beside it (10 ms apart unless RINGLOG_BENCH_FSYNC_EVERY
	// says otherwise).
	{name: "ref-16files-1MiB-qd4-fsync", blockBytes: 1 << 20, files: 16, depth: 4, fileBytes: 64 << 20, overwrite: true, fsyncEvery: 10 * time.Millisecond},
}

// benchRawDirect writes sequential O_DIRECT blocks as spec says, on a shard's ring
// (StartWrite, completions through AwaitWrites): over prefilled files again and again
// (overwrite), or extending new files.
func benchRawDirect(b *testing.B, spec rawDirect) {
	block := int64(spec.blockBytes)
	br, err := Open(Config{DataDir: b.TempDir(), Shards: 1, Ring: ring.Config{Backend: "auto"}})
	if err != nil {
		b.Fatal(err)
	}
	defer br.Close()
	dir := b.TempDir()
	fds := make([]int, spec.files)
	for i := range fds {
		f, err := os.OpenFile(filepath.Join(dir, fmt.Sprintf("raw%d", i)), os.O_RDWR|os.O_CREATE|unix.O_DIRECT, 0o600)
		if err != nil {
			b.Skipf("O_DIRECT unavailable: %v", err)
		}
		defer f.Close()
		fds[i] = int(f.Fd())
	}
	slots := spec.files * spec.depth
	bufs := make([][]byte, slots)
	for i := range bufs {
		bufs[i] = alignedBlock(spec.blockBytes)
	}
	fileBytes := spec.fileBytes
	if v, err := strconv.ParseInt(os.Getenv(spec.bigEnv), 10, 64); spec.bigEnv != "" && err == nil && v >= block {
		fileBytes = v / block * block
	}
	if !spec.overwrite {
		fileBytes = int64(b.N/spec.files+slots+1) * block // never wraps: every write extends its file
	}
	if spec.fallocate {
		for _, fd := range fds {
			if err := unix.Fallocate(fd, 0, 0, fileBytes); err != nil {
				b.Skipf("fallocate: %v", err)
			}
		}
	}
	startOp := (*ring.Reactor).StartWrite
	run := func(n int) error {
		return br.Exec(0, func(r *ring.Reactor) error {
			issued, done := 0, 0
			offs := make([]int64, spec.files)
			var werr error
			var start func(slot int)
			start = func(slot int) {
				if issued >= n || werr != nil {
					return
				}
				issued++
				file := slot % spec.files
				o := offs[file]
				offs[file] = (o + block) % fileBytes
				if err := startOp(r, fds[file], bufs[slot], o, func(k int, err error) {
					done++
					if err == nil && int64(k) != block {
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
			for slot := 0; slot < slots; slot++ {
				start(slot)
			}
			if err := r.AwaitWrites(func() bool { return done == issued && (issued == n || werr != nil) }); err != nil {
				return err
			}
			return werr
		})
	}
	if spec.overwrite {
		if err := run(int(fileBytes/block) * spec.files); err != nil { // prefill: later writes overwrite written blocks
			b.Fatal(err)
		}
		for _, fd := range fds {
			if err := unix.Fdatasync(fd); err != nil {
				b.Fatal(err)
			}
		}
	}
	if spec.read {
		b.SetBytes(block)
		b.ResetTimer()
		if err := readParallel(fds[0], bufs, fileBytes, b.N); err != nil {
			b.Fatal(err)
		}
		return
	}
	b.SetBytes(block)
	b.ReportAllocs()
	stop := startFsyncs(b, dir, spec.fsyncEvery)
	b.ResetTimer()
	err = run(b.N)
	b.StopTimer()
	if syncs := stop(); syncs > 0 {
		b.ReportMetric(float64(syncs), "fsyncs")
	}
	if err != nil {
		b.Fatal(err)
	}
}

// startFsyncs starts the fdatasync loop of rawDirect.fsyncEvery (none when every is 0);
// stop ends it and returns the fdatasyncs done.
func startFsyncs(b *testing.B, dir string, every time.Duration) (stop func() int) {
	if v, err := time.ParseDuration(os.Getenv("RINGLOG_BENCH_FSYNC_EVERY")); err == nil && every > 0 {
		every = v
	}
	if every <= 0 {
		return func() int { return 0 }
	}
	f, err := os.OpenFile(filepath.Join(dir, "fsyncs"), os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		b.Fatal(err)
	}
	quit, done := make(chan struct{}), make(chan int)
	go func() {
		defer f.Close()
		page, syncs := make([]byte, 4096), 0
		for {
			select {
			case <-quit:
				done <- syncs
				return
			case <-time.After(every):
			}
			if _, err := f.Write(page); err == nil && unix.Fdatasync(int(f.Fd())) == nil {
				syncs++
			}
		}
	}()
	return func() int { close(quit); return <-done }
}

// readParallel reads n blocks of len(bufs[0]) bytes sequentially from fd round and round
// over fileBytes, one goroutine per buffer, each block read by the next free goroutine
// (pread on the O_DIRECT descriptor: a read rate far above the device's says the host holds
// the file in its cache).
func readParallel(fd int, bufs [][]byte, fileBytes int64, n int) error {
	var next atomic.Int64
	errs := make(chan error, len(bufs))
	block := int64(len(bufs[0]))
	for _, buf := range bufs {
		go func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(n) {
					errs <- nil
					return
				}
				if k, err := unix.Pread(fd, buf, i*block%fileBytes); err != nil || int64(k) != block {
					errs <- fmt.Errorf("read %d at %d: %d, %v", block, i*block%fileBytes, k, err)
					return
				}
			}
		}()
	}
	var first error
	for range bufs {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
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

// benchWindowMax caps the produces in flight: RINGLOG_BENCH_WINDOW, else the window's
// bytes in 16 KiB produces (4,096 at the default 64 MiB).
func benchWindowMax() int {
	if v, err := strconv.Atoi(os.Getenv("RINGLOG_BENCH_WINDOW")); err == nil && v > 0 {
		return v
	}
	return benchWindowBytes() / (16 << 10)
}

// benchWindowBytes is the produce window in bytes: RINGLOG_BENCH_WINDOW_BYTES, else 64 MiB
// (the reference's 64 writes of 1 MiB).
func benchWindowBytes() int {
	if v, err := strconv.Atoi(os.Getenv("RINGLOG_BENCH_WINDOW_BYTES")); err == nil && v > 0 {
		return v
	}
	return 64 << 20
}
