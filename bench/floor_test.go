package bench

import (
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// startFloor runs a floor server of this process on 127.0.0.1 until the test ends.
func startFloor(t *testing.T, serve func(net.Listener) error) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- serve(ln) }()
	t.Cleanup(func() {
		ln.Close()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return ln.Addr().String()
}

// The measured windows below only bound how long the test runs; nothing is asserted about
// speed. RunFloor stretches a window that saw no whole frame (a 3 MiB chunk to a test at
// nice 15 on a loaded 2-core machine takes longer than 100 ms), so the tests wait for
// progress, not for time, and fail only when no frame moves for floorStretchMax.
var floorTestConfig = FloorConfig{Conns: 2, FrameBytes: 64 << 10, Window: 4, Warmup: 0, Duration: 100 * time.Millisecond}

func TestFloorIngestAppendsEveryFrame(t *testing.T) {
	dir := t.TempDir()
	s, err := NewFloorIngestServer(dir, 3, FloorFrameBytesMax)
	if err != nil {
		t.Fatal(err)
	}
	addr := startFloor(t, s.Serve)
	cfg := floorTestConfig
	cfg.Mode = FloorIngest
	res, err := RunFloor(context.Background(), addr, os.Getpid(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Bytes <= 0 || res.Bytes%int64(cfg.FrameBytes) != 0 || res.Mode != FloorIngest || res.ServerPID != os.Getpid() {
		t.Fatalf("result %+v", res)
	}
	// The files hold whole frames and never more than a segment (they may have rolled).
	var held int64
	for _, f := range s.files {
		info, err := f.f.Stat()
		if err != nil {
			t.Fatal(err)
		}
		if info.Size()%int64(cfg.FrameBytes) != 0 || info.Size() > FloorFrameBytesMax {
			t.Fatalf("%s holds %d bytes", info.Name(), info.Size())
		}
		held += info.Size()
	}
	if held == 0 {
		t.Fatal("no bytes in the files")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "*")); len(left) != 0 {
		t.Fatalf("Close left %v", left)
	}
}

func TestFloorFileRollsAtSegment(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ff := &floorFile{f: f}
	for i, want := range []int64{4, 8, 4, 8, 4} { // segment 10: the third append rolls
		if err := ff.append([]byte("abcd"), 10); err != nil {
			t.Fatal(err)
		}
		info, err := f.Stat()
		if err != nil {
			t.Fatal(err)
		}
		if ff.size != want || info.Size() != want {
			t.Fatalf("append %d: size %d, file %d, want %d", i, ff.size, info.Size(), want)
		}
	}
}

func TestFloorServeSendsChunks(t *testing.T) {
	dir := t.TempDir()
	s, err := NewFloorServeServer(dir, FloorFrameBytesMax)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	addr := startFloor(t, s.Serve)
	cfg := floorTestConfig
	cfg.Mode, cfg.FrameBytes = FloorServe, 3<<20 // does not divide the file: the offset wraps
	res, err := RunFloor(context.Background(), addr, os.Getpid(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Bytes <= 0 || res.Bytes%int64(cfg.FrameBytes) != 0 || res.Mode != FloorServe {
		t.Fatalf("result %+v", res)
	}
}

func TestFloorRejectsConfigs(t *testing.T) {
	good := floorTestConfig
	good.Mode = FloorIngest
	for name, mutate := range map[string]func(*FloorConfig){
		"mode":          func(c *FloorConfig) { c.Mode = "both" },
		"no conns":      func(c *FloorConfig) { c.Conns = 0 },
		"many conns":    func(c *FloorConfig) { c.Conns = FloorConnsMax + 1 },
		"huge frame":    func(c *FloorConfig) { c.FrameBytes = FloorFrameBytesMax + 1 },
		"no window":     func(c *FloorConfig) { c.Window = 0 },
		"no duration":   func(c *FloorConfig) { c.Duration = 0 },
		"negative warm": func(c *FloorConfig) { c.Warmup = -time.Second },
		"negative rate": func(c *FloorConfig) { c.Rate = -1 },
	} {
		c := good
		mutate(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%s: accepted %+v", name, c)
		}
	}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	if _, err := NewFloorIngestServer(t.TempDir(), 0, FloorFrameBytesMax); err == nil {
		t.Error("0 files accepted")
	}
	if _, err := NewFloorServeServer(t.TempDir(), 1); err == nil {
		t.Error("a 1-byte served file accepted")
	}
}

// BenchmarkFloorIngestFrame is one 256 KiB frame through the ingest floor (receive,
// pwrite, answer), client and server in this process.
func BenchmarkFloorIngestFrame(b *testing.B) {
	s, err := NewFloorIngestServer(b.TempDir(), 16, 64<<20)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go s.Serve(ln)
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	const size = 256 << 10
	sent := make(chan struct{}, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go floorSendFrames(ctx, c, size, sent, nil)
	var ack [floorAckBytes]byte
	b.SetBytes(size)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := io.ReadFull(c, ack[:]); err != nil {
			b.Fatal(err)
		}
		<-sent
	}
}

func TestFloorPacerSpacing(t *testing.T) {
	if p := newFloorPacer(0, 1<<10); p != nil {
		t.Fatalf("rate 0 paces: %+v", p)
	}
	if p := newFloorPacer(1e6, 1000); p.every != time.Millisecond {
		t.Fatalf("1000-byte frames at 1 MB/s every %v, want 1ms", p.every)
	}
	var p *floorPacer
	p.wait() // a nil pacer does not wait
}
