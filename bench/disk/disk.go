// Package disk reruns Kafka's "linear vs random" disk experiment on the machine at hand,
// through ring/: sequential and random writes and reads, 4 KiB and 1 MiB blocks, buffered
// and O_DIRECT, with and without an fdatasync after every write, at queue depth 1 and 64.
//
// It owns one scratch file in the directory it is given and removes it when done. It must
// not be imported by the broker.
//
// Method, so a reader can check it:
//   - The file is preallocated and fully written once (sequential 1 MiB O_DIRECT writes,
//     then fdatasync) so every cell overwrites allocated blocks; no cell pays for extent
//     allocation or for reading holes.
//   - Each cell moves at most FileBytes bytes and runs at most CellTime; the table prints what
//     it moved. Random offsets are block-aligned and uniform over the whole file.
//   - Between cells the file is fdatasync'ed and its page cache dropped (POSIX_FADV_DONTNEED),
//     so a buffered read cell starts cold and a write cell does not inherit dirty pages.
//   - Queue depth 1 issues one synchronous op at a time through a ring.FileIO (the io_uring
//     reactor from the CLI). Queue depth 64 keeps 64 ops in flight through an Async backend
//     (ReactorAsync: 64 SQEs outstanding on one ring; or, without a reactor, 64 threads each
//     issuing synchronous syscalls); the table names the backend.
package disk

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ringlog/ringlog/bench"
	"github.com/ringlog/ringlog/ring"
)

// Block sizes and queue depths of the experiment.
const (
	smallBlockBytes = 4 << 10
	largeBlockBytes = 1 << 20
	deepQueueDepth  = 64
	alignBytes      = 4096 // O_DIRECT alignment used for offsets, lengths and buffers
	prefillBlock    = largeBlockBytes
	fileName        = "ringlog-bench-disk.dat"
)

// ErrDirectUnsupported means the filesystem refused O_DIRECT (tmpfs, some overlays).
var ErrDirectUnsupported = errors.New("O_DIRECT not supported here")

// Cell is one measurement of the matrix.
type Cell struct {
	Write      bool `json:"write"`
	Random     bool `json:"random"`
	BlockBytes int  `json:"block_bytes"`
	Direct     bool `json:"direct"`
	Sync       bool `json:"fdatasync"` // fdatasync after every write (writes only)
	QueueDepth int  `json:"queue_depth"`
}

// String is the cell's row label.
func (c Cell) String() string {
	op, pattern, mode, syncNote := "read", "seq", "buffered", ""
	if c.Write {
		op = "write"
	}
	if c.Random {
		pattern = "rand"
	}
	if c.Direct {
		mode = "direct"
	}
	if c.Sync {
		syncNote = "+fdatasync"
	}
	return fmt.Sprintf("%s %s %s %s%s qd%d", pattern, op, bench.FormatBytes(int64(c.BlockBytes)), mode, syncNote, c.QueueDepth)
}

// Matrix returns the cells the experiment runs, in order: writes before reads, qd1 first.
// fdatasync applies to writes at qd1 only; queue depth 64 is measured with O_DIRECT (buffered
// I/O at depth would measure the page cache, not the device).
func Matrix() []Cell {
	var cells []Cell
	for _, write := range []bool{true, false} {
		syncs := []bool{false}
		if write {
			syncs = []bool{false, true}
		}
		for _, direct := range []bool{false, true} {
			for _, syncEach := range syncs {
				for _, block := range []int{smallBlockBytes, largeBlockBytes} {
					for _, random := range []bool{false, true} {
						cells = append(cells, Cell{Write: write, Random: random, BlockBytes: block, Direct: direct, Sync: syncEach, QueueDepth: 1})
					}
				}
			}
		}
		for _, block := range []int{smallBlockBytes, largeBlockBytes} {
			for _, random := range []bool{false, true} {
				cells = append(cells, Cell{Write: write, Random: random, BlockBytes: block, Direct: true, QueueDepth: deepQueueDepth})
			}
		}
	}
	return cells
}

// Async keeps many ops in flight on one file. Implementations: threadAsync (goroutines doing
// synchronous syscalls) and the io_uring reactor backend.
type Async interface {
	Name() string
	// Run keeps up to len(buffers) ops in flight until next reports false. next is called from
	// a single goroutine or concurrently depending on the backend, so it must be safe for
	// concurrent use; slot identifies the buffer. Every completed op's latency (issue to
	// completion) goes into lat.
	Run(fd int, write, syncEach bool, buffers [][]byte, next func(slot int) (int64, bool), lat *bench.Latency) (ops int64, err error)
}

// Config is one run of the experiment.
type Config struct {
	Dir       string        // the scratch file goes here
	FileBytes int64         // file size: the span random offsets cover, and each cell's byte cap
	CellTime  time.Duration // time cap per cell
	Cells     []Cell        // nil means Matrix()
	IO        ring.FileIO   // queue depth 1 path; nil means ring.Syscalls{}
	IOName    string        // the qd1 backend's name in the table; "" = "syscalls"
	Async     Async         // queue depth > 1 path; nil means goroutines over IO
	Progress  func(done, total int, cell Cell)
	Seed      uint64 // random offsets; fixed so reruns touch the same blocks
}

// Result is one measured cell.
type Result struct {
	Cell    Cell          `json:"cell"`
	Name    string        `json:"name"`
	Backend string        `json:"backend"`
	Ops     int64         `json:"ops"`
	Bytes   int64         `json:"bytes"`
	Seconds float64       `json:"seconds"`
	MBps    float64       `json:"mb_per_s"` // 10^6 bytes per second
	IOPS    float64       `json:"iops"`
	Latency bench.Summary `json:"latency"`
	Skipped string        `json:"skipped,omitempty"`
}

// Report is a whole run.
type Report struct {
	Hardware     bench.Hardware `json:"hardware"`
	FileBytes    int64          `json:"file_bytes"`
	CellSeconds  float64        `json:"cell_seconds"`
	PrefillMBps  float64        `json:"prefill_mb_per_s"`
	DirectOK     bool           `json:"direct_ok"`
	Results      []Result       `json:"results"`
	Ratios       []Ratio        `json:"ratios"`
	Explanation  string         `json:"explanation"`
	KafkaClaimed float64        `json:"kafka_claimed_ratio"`
}

// Run executes the experiment.
func Run(cfg Config) (*Report, error) {
	if cfg.FileBytes < 2*largeBlockBytes || cfg.FileBytes%alignBytes != 0 {
		return nil, fmt.Errorf("disk bench: file size %d must be a multiple of %d and at least %d", cfg.FileBytes, alignBytes, 2*largeBlockBytes)
	}
	if cfg.CellTime <= 0 {
		return nil, fmt.Errorf("disk bench: cell time %v must be positive", cfg.CellTime)
	}
	if cfg.IO == nil {
		cfg.IO = ring.Syscalls{}
	}
	if cfg.IOName == "" {
		cfg.IOName = "syscalls"
	}
	if cfg.Async == nil {
		cfg.Async = threadAsync{io: cfg.IO}
	}
	cells := cfg.Cells
	if cells == nil {
		cells = Matrix()
	}
	if cfg.Seed == 0 {
		cfg.Seed = 0x5eed
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("disk bench: %w", err)
	}
	path := filepath.Join(cfg.Dir, fileName)
	defer os.Remove(path)
	report := &Report{
		Hardware:     bench.DetectHardware(cfg.Dir),
		FileBytes:    cfg.FileBytes,
		CellSeconds:  cfg.CellTime.Seconds(),
		KafkaClaimed: kafkaClaimedRatio,
	}
	prefill, direct, err := prepareFile(path, cfg.FileBytes, cfg.IO)
	if err != nil {
		return nil, err
	}
	report.PrefillMBps, report.DirectOK = prefill, direct
	for index, cell := range cells {
		if cfg.Progress != nil {
			cfg.Progress(index, len(cells), cell)
		}
		result, err := runCell(path, cell, cfg, direct)
		if err != nil {
			return nil, fmt.Errorf("disk bench: %s: %w", cell, err)
		}
		report.Results = append(report.Results, result)
	}
	report.Ratios = Ratios(report.Results)
	report.Explanation = Explain(report)
	return report, nil
}

// prepareFile creates the file at full size with real data and reports the prefill rate and
// whether O_DIRECT works here.
func prepareFile(path string, size int64, io ring.FileIO) (mbps float64, direct bool, err error) {
	flags := unix.O_RDWR | unix.O_CREAT | unix.O_TRUNC | unix.O_CLOEXEC
	fd, err := unix.Open(path, flags|unix.O_DIRECT, 0o644)
	direct = err == nil
	if errors.Is(err, unix.EINVAL) {
		fd, err = unix.Open(path, flags, 0o644)
	}
	if err != nil {
		return 0, false, fmt.Errorf("disk bench: open %s: %w", path, err)
	}
	defer unix.Close(fd)
	if err := io.Fallocate(fd, 0, 0, size); err != nil && !errors.Is(err, unix.EOPNOTSUPP) {
		return 0, false, fmt.Errorf("disk bench: preallocate %s: %w", path, err)
	}
	buffers, free, err := alignedBuffers(1, prefillBlock)
	if err != nil {
		return 0, false, err
	}
	defer free()
	start := time.Now()
	for off := int64(0); off < size; off += prefillBlock {
		chunk := buffers[0][:min(int64(prefillBlock), size-off)]
		if err := writeFull(io, fd, chunk, off); err != nil {
			return 0, false, fmt.Errorf("disk bench: prefill: %w", err)
		}
	}
	if err := io.Fdatasync(fd); err != nil {
		return 0, false, fmt.Errorf("disk bench: prefill: %w", err)
	}
	elapsed := time.Since(start)
	return float64(size) / elapsed.Seconds() / 1e6, direct, nil
}

func writeFull(io ring.FileIO, fd int, p []byte, off int64) error {
	n, err := io.Pwrite(fd, p, off)
	if err != nil {
		return err
	}
	if n != len(p) {
		return fmt.Errorf("short write at %d: %d of %d bytes", off, n, len(p))
	}
	return nil
}

func readFull(io ring.FileIO, fd int, p []byte, off int64) error {
	n, err := io.Pread(fd, p, off)
	if err != nil {
		return err
	}
	if n != len(p) {
		return fmt.Errorf("short read at %d: %d of %d bytes", off, n, len(p))
	}
	return nil
}

// alignedBuffers maps count page-aligned buffers of size bytes, filled with random bytes so
// no layer below can compress or deduplicate them.
func alignedBuffers(count, size int) ([][]byte, func(), error) {
	arena, err := ring.NewArena(size, count)
	if err != nil {
		return nil, nil, fmt.Errorf("disk bench: map %d buffers of %d bytes: %w", count, size, err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	buffers := arena.Buffers()
	for _, buffer := range buffers {
		for i := 0; i+8 <= len(buffer); i += 8 {
			v := rng.Uint64()
			for b := range 8 {
				buffer[i+b] = byte(v >> (8 * b))
			}
		}
	}
	return buffers, func() { _ = arena.Release() }, nil
}

// offsets hands out the next block offset to any slot until the byte cap or deadline. The
// first op is always handed out, so a cell whose workers start late (a loaded machine) still
// measures one op instead of reporting none.
type offsets struct {
	random     bool
	blockBytes int64
	blockCount int64
	opsMax     int64
	deadline   time.Time
	issued     atomic.Int64
	mu         sync.Mutex // guards rngs; random draws are cheap next to an I/O
	rngs       []*rand.Rand
}

func newOffsets(cell Cell, fileBytes int64, deadline time.Time, slots int, seed uint64) *offsets {
	o := &offsets{
		random:     cell.Random,
		blockBytes: int64(cell.BlockBytes),
		blockCount: fileBytes / int64(cell.BlockBytes),
		deadline:   deadline,
	}
	o.opsMax = o.blockCount // each cell moves at most the file's size
	for slot := range slots {
		o.rngs = append(o.rngs, rand.New(rand.NewPCG(seed, uint64(slot))))
	}
	return o
}

func (o *offsets) next(slot int) (int64, bool) {
	n := o.issued.Add(1)
	if n > o.opsMax || (n > 1 && time.Now().After(o.deadline)) {
		return 0, false
	}
	if !o.random {
		return (n - 1) * o.blockBytes, true
	}
	o.mu.Lock()
	block := o.rngs[slot].Int64N(o.blockCount)
	o.mu.Unlock()
	return block * o.blockBytes, true
}

func runCell(path string, cell Cell, cfg Config, directOK bool) (Result, error) {
	result := Result{Cell: cell, Name: cell.String(), Backend: cfg.IOName}
	if cell.Direct && !directOK {
		result.Skipped = ErrDirectUnsupported.Error()
		return result, nil
	}
	if cell.BlockBytes%alignBytes != 0 || cell.QueueDepth < 1 {
		return result, fmt.Errorf("cell needs an aligned block and a queue depth >= 1")
	}
	flags := unix.O_RDWR | unix.O_CLOEXEC
	if cell.Direct {
		flags |= unix.O_DIRECT
	}
	fd, err := unix.Open(path, flags, 0)
	if err != nil {
		return result, fmt.Errorf("open %s: %w", path, err)
	}
	defer unix.Close(fd)
	if err := settle(fd, cfg.IO); err != nil {
		return result, err
	}
	buffers, free, err := alignedBuffers(cell.QueueDepth, cell.BlockBytes)
	if err != nil {
		return result, err
	}
	defer free()
	lat := bench.NewLatency()
	start := time.Now()
	gen := newOffsets(cell, cfg.FileBytes, start.Add(cfg.CellTime), cell.QueueDepth, cfg.Seed)
	var ops int64
	if cell.QueueDepth == 1 {
		ops, err = runSync(fd, cell, cfg.IO, buffers[0], gen, lat)
	} else {
		result.Backend = cfg.Async.Name()
		ops, err = cfg.Async.Run(fd, cell.Write, cell.Sync, buffers, gen.next, lat)
	}
	elapsed := time.Since(start)
	if err != nil {
		return result, err
	}
	if cell.Write {
		// Writes left in the page cache are not on the disk; the time to get them there is
		// not part of a no-sync cell, but it must not leak into the next one.
		if err := cfg.IO.Fdatasync(fd); err != nil {
			return result, err
		}
	}
	result.Ops = ops
	result.Bytes = ops * int64(cell.BlockBytes)
	result.Seconds = elapsed.Seconds()
	result.MBps = float64(result.Bytes) / elapsed.Seconds() / 1e6
	result.IOPS = float64(ops) / elapsed.Seconds()
	result.Latency = lat.Summarize()
	result.Latency.Curve = nil
	return result, nil
}

// settle flushes dirty pages and drops the file's page cache so the next cell starts cold.
func settle(fd int, io ring.FileIO) error {
	if err := io.Fdatasync(fd); err != nil {
		return err
	}
	if err := unix.Fadvise(fd, 0, 0, unix.FADV_DONTNEED); err != nil {
		return fmt.Errorf("drop page cache: %w", err)
	}
	return nil
}

func runSync(fd int, cell Cell, io ring.FileIO, buffer []byte, gen *offsets, lat *bench.Latency) (int64, error) {
	var ops int64
	for {
		off, ok := gen.next(0)
		if !ok {
			return ops, nil
		}
		opStart := time.Now()
		var err error
		if cell.Write {
			err = writeFull(io, fd, buffer, off)
			if err == nil && cell.Sync {
				err = io.Fdatasync(fd)
			}
		} else {
			err = readFull(io, fd, buffer, off)
		}
		if err != nil {
			return ops, err
		}
		lat.Record(time.Since(opStart))
		ops++
	}
}

// threadAsync keeps len(buffers) ops in flight with one goroutine per slot, each issuing
// synchronous calls; the Go runtime gives every blocked goroutine its own OS thread, so the
// device sees that many outstanding requests.
type threadAsync struct{ io ring.FileIO }

func (threadAsync) Name() string { return "threads" }

func (t threadAsync) Run(fd int, write, syncEach bool, buffers [][]byte, next func(int) (int64, bool), lat *bench.Latency) (int64, error) {
	var (
		wg       sync.WaitGroup
		total    atomic.Int64
		firstErr error
		errOnce  sync.Once
		hists    = make([]*bench.Latency, len(buffers))
	)
	for slot := range buffers {
		hists[slot] = bench.NewLatency()
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				off, ok := next(slot)
				if !ok {
					return
				}
				opStart := time.Now()
				var err error
				if write {
					err = writeFull(t.io, fd, buffers[slot], off)
					if err == nil && syncEach {
						err = t.io.Fdatasync(fd)
					}
				} else {
					err = readFull(t.io, fd, buffers[slot], off)
				}
				if err != nil {
					errOnce.Do(func() { firstErr = err })
					return
				}
				hists[slot].Record(time.Since(opStart))
				total.Add(1)
			}
		}()
	}
	wg.Wait()
	for _, h := range hists {
		lat.Merge(h)
	}
	return total.Load(), firstErr
}
