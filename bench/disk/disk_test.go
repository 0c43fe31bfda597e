package disk

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ringlog/ringlog/bench"
	"github.com/ringlog/ringlog/ring"
)

func TestMatrixCoversTheExperiment(t *testing.T) {
	cells := Matrix()
	seen := map[Cell]bool{}
	for _, c := range cells {
		if seen[c] {
			t.Fatalf("duplicate cell %s", c)
		}
		seen[c] = true
		if c.Sync && !c.Write {
			t.Fatalf("fdatasync on a read cell %s", c)
		}
	}
	for _, want := range []Cell{
		{Write: true, Random: true, BlockBytes: smallBlockBytes, Direct: true, QueueDepth: 1},
		{Write: true, BlockBytes: largeBlockBytes, Direct: true, QueueDepth: 1},
		{Write: true, Random: true, BlockBytes: smallBlockBytes, Direct: false, Sync: true, QueueDepth: 1},
		{Random: true, BlockBytes: smallBlockBytes, Direct: true, QueueDepth: deepQueueDepth},
		{Write: true, Random: true, BlockBytes: largeBlockBytes, Direct: true, QueueDepth: deepQueueDepth},
	} {
		if !seen[want] {
			t.Errorf("matrix misses %s", want)
		}
	}
	if len(cells) != 32 {
		t.Errorf("matrix has %d cells, want 32", len(cells))
	}
}

func TestOffsetsSequentialStopsAtFileSize(t *testing.T) {
	cell := Cell{BlockBytes: 4096, QueueDepth: 1}
	gen := newOffsets(cell, 10*4096, time.Now().Add(time.Hour), 1, 1)
	var got []int64
	for range 100 {
		off, ok := gen.next(0)
		if !ok {
			break
		}
		got = append(got, off)
	}
	if len(got) != 10 {
		t.Fatalf("issued %d ops over a 10-block file, want 10", len(got))
	}
	for i, off := range got {
		if off != int64(i)*4096 {
			t.Fatalf("op %d at %d, want %d", i, off, i*4096)
		}
	}
}

func TestOffsetsRandomAlignedAndInRange(t *testing.T) {
	const blocks = 64
	cell := Cell{Random: true, BlockBytes: 4096, QueueDepth: 2}
	gen := newOffsets(cell, blocks*4096, time.Now().Add(time.Hour), 2, 7)
	distinct := map[int64]bool{}
	for i := range blocks {
		off, ok := gen.next(i % 2)
		if !ok {
			t.Fatalf("stopped after %d of %d ops", i, blocks)
		}
		if off%4096 != 0 || off < 0 || off >= blocks*4096 {
			t.Fatalf("offset %d not an aligned block of the file", off)
		}
		distinct[off] = true
	}
	if len(distinct) < blocks/4 {
		t.Fatalf("only %d distinct offsets in %d random draws", len(distinct), blocks)
	}
	if _, ok := gen.next(0); ok {
		t.Fatal("random cell kept going past the file's size")
	}
}

func TestOffsetsStopAtDeadline(t *testing.T) {
	gen := newOffsets(Cell{BlockBytes: 4096, QueueDepth: 1}, 1<<30, time.Now().Add(-time.Second), 1, 1)
	if _, ok := gen.next(0); !ok {
		t.Fatal("the first op of a cell must be issued even past the deadline")
	}
	if _, ok := gen.next(0); ok {
		t.Fatal("issued a second op after the deadline")
	}
}

// TestRunSmallMatrix runs real I/O on a real file: one cell of each kind, tiny and short.
func TestRunSmallMatrix(t *testing.T) {
	dir := t.TempDir()
	cells := []Cell{
		{Write: true, BlockBytes: largeBlockBytes, Direct: true, QueueDepth: 1},
		{Write: true, Random: true, BlockBytes: smallBlockBytes, Direct: true, QueueDepth: 1},
		{Write: true, Random: true, BlockBytes: smallBlockBytes, Sync: true, QueueDepth: 1},
		{Write: true, BlockBytes: smallBlockBytes, Direct: true, QueueDepth: 1},
		{Random: true, BlockBytes: smallBlockBytes, QueueDepth: 1},
		{Random: true, BlockBytes: smallBlockBytes, Direct: true, QueueDepth: 8},
	}
	const fileBytes = 4 << 20
	report, err := Run(Config{Dir: dir, FileBytes: fileBytes, CellTime: 40 * time.Millisecond, Cells: cells})
	if err != nil {
		t.Fatal(err)
	}
	if len(report.Results) != len(cells) {
		t.Fatalf("%d results for %d cells", len(report.Results), len(cells))
	}
	for _, r := range report.Results {
		if r.Skipped != "" {
			if !report.DirectOK && r.Cell.Direct {
				continue
			}
			t.Fatalf("%s skipped: %s", r.Name, r.Skipped)
		}
		if r.Ops <= 0 || r.Bytes != r.Ops*int64(r.Cell.BlockBytes) || r.Bytes > fileBytes {
			t.Fatalf("%s: ops %d bytes %d (file %d)", r.Name, r.Ops, r.Bytes, fileBytes)
		}
		if r.Latency.Count != r.Ops || r.MBps <= 0 {
			t.Fatalf("%s: latency count %d for %d ops, %.1f MB/s", r.Name, r.Latency.Count, r.Ops, r.MBps)
		}
	}
	if report.Results[5].Backend != "threads" {
		t.Fatalf("qd8 cell ran on %q", report.Results[5].Backend)
	}
	if _, err := os.Stat(filepath.Join(dir, fileName)); !os.IsNotExist(err) {
		t.Fatalf("scratch file left behind: %v", err)
	}
	if report.DirectOK && (len(report.Ratios) == 0 || !report.Ratios[0].Headline) {
		t.Fatalf("headline ratio missing: %+v", report.Ratios)
	}
	var out strings.Builder
	if err := WriteTable(&out, report); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "6000×") || !strings.Contains(out.String(), "why:") {
		t.Fatalf("table lacks the Kafka comparison:\n%s", out.String())
	}
}

func TestRunRejectsBadConfig(t *testing.T) {
	for _, cfg := range []Config{
		{Dir: t.TempDir(), FileBytes: 1 << 20, CellTime: time.Second},
		{Dir: t.TempDir(), FileBytes: 4<<20 + 1, CellTime: time.Second},
		{Dir: t.TempDir(), FileBytes: 4 << 20},
	} {
		if _, err := Run(cfg); err == nil {
			t.Errorf("Run(%+v) accepted a bad config", cfg)
		}
	}
}

func result(cell Cell, mbps, p50Us float64) Result {
	return Result{Cell: cell, Name: cell.String(), MBps: mbps, Latency: bench.Summary{P50Us: p50Us}}
}

func TestRatiosAndExplanation(t *testing.T) {
	seq := Cell{Write: true, BlockBytes: largeBlockBytes, Direct: true, QueueDepth: 1}
	rnd := Cell{Write: true, Random: true, BlockBytes: smallBlockBytes, Direct: true, QueueDepth: 1}
	seqSmall := Cell{Write: true, BlockBytes: smallBlockBytes, Direct: true, QueueDepth: 1}
	flash := &Report{Results: []Result{result(seq, 1500, 600), result(rnd, 30, 100), result(seqSmall, 45, 80)}}
	flash.Ratios = Ratios(flash.Results)
	if len(flash.Ratios) != 2 || !flash.Ratios[0].Headline || flash.Ratios[0].Value != 50 || flash.Ratios[1].Value != 1.5 {
		t.Fatalf("ratios %+v", flash.Ratios)
	}
	if flash.Ratios[0].ByMedian != (float64(largeBlockBytes)/600)/(float64(smallBlockBytes)/100) {
		t.Fatalf("by-median ratio %v", flash.Ratios[0].ByMedian)
	}
	if why := Explain(flash); !strings.Contains(why, "50×") || !strings.Contains(why, "no moving head") || !strings.Contains(why, "1.5×") {
		t.Fatalf("flash explanation: %s", why)
	}
	spinning := &Report{Results: []Result{result(seq, 600, 2000), result(rnd, 0.1, 8000)}}
	spinning.Ratios = Ratios(spinning.Results)
	if why := Explain(spinning); !strings.Contains(why, "seeking disk") || !strings.Contains(why, "6000×") {
		t.Fatalf("spinning explanation: %s", why)
	}
	if why := Explain(&Report{}); !strings.Contains(why, "did not run") {
		t.Fatalf("empty explanation: %s", why)
	}
}

// TestRunOnReactor drives both queue depths through a real ring.Reactor (io_uring where the
// kernel allows it, ring's syscall backend otherwise) on this test's locked thread.
func TestRunOnReactor(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	reactor, err := ring.NewReactor(ring.Config{Entries: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer reactor.Close()
	cells := []Cell{
		{Write: true, Random: true, BlockBytes: smallBlockBytes, Direct: true, QueueDepth: 1},
		{Write: true, Random: true, BlockBytes: smallBlockBytes, Direct: true, QueueDepth: 16},
		{Write: true, BlockBytes: smallBlockBytes, Sync: true, QueueDepth: 4},
		{Random: true, BlockBytes: smallBlockBytes, Direct: true, QueueDepth: 16},
	}
	const fileBytes = 4 << 20
	report, err := Run(Config{
		Dir: t.TempDir(), FileBytes: fileBytes, CellTime: 40 * time.Millisecond, Cells: cells,
		IO: reactor, IOName: reactor.Backend(), Async: ReactorAsync{Reactor: reactor},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range report.Results {
		if r.Skipped != "" {
			continue
		}
		if r.Backend != reactor.Backend() || r.Ops <= 0 || r.Latency.Count != r.Ops || r.Bytes > fileBytes {
			t.Fatalf("%s on %s: ops %d latency count %d bytes %d", r.Name, r.Backend, r.Ops, r.Latency.Count, r.Bytes)
		}
	}
}

func BenchmarkReactorRandomRead4KiBQD16(b *testing.B) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	reactor, err := ring.NewReactor(ring.Config{Entries: 64})
	if err != nil {
		b.Fatal(err)
	}
	defer reactor.Close()
	path := filepath.Join(b.TempDir(), "f")
	if err := os.WriteFile(path, make([]byte, 8<<20), 0o644); err != nil {
		b.Fatal(err)
	}
	fd, err := unix.Open(path, unix.O_RDONLY, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer unix.Close(fd)
	buffers, free, err := alignedBuffers(16, smallBlockBytes)
	if err != nil {
		b.Fatal(err)
	}
	defer free()
	gen := newOffsets(Cell{Random: true, BlockBytes: smallBlockBytes}, 8<<20, time.Now().Add(time.Hour), 16, 1)
	gen.opsMax = int64(b.N)
	b.ReportAllocs()
	b.SetBytes(smallBlockBytes)
	b.ResetTimer()
	ops, err := ReactorAsync{Reactor: reactor}.Run(fd, false, false, buffers, gen.next, bench.NewLatency())
	if err != nil || ops != int64(b.N) {
		b.Fatalf("ops %d of %d: %v", ops, b.N, err)
	}
}
