package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"
)

// The floor: what a minimal Go server on this machine spends, in CPU-seconds per gigabyte,
// to move the bytes a broker moves, measured with the same /proc/PID/stat accounting as
// the broker figure of `ringlog bench run`. It is the reference the "CPU per GB"
// goals are judged against: a broker cannot ingest or serve for less than a server that
// does nothing but the unavoidable system calls.
//
//   - Ingest: clients send length-prefixed frames (a produce request's size, of 1 KiB-record
//     batches as far as the server cares: it never looks inside) over several connections;
//     the server reads each into one buffer, appends it with one pwrite to one of its files
//     in page cache (round-robin, as a request's batches go to partitions), and answers it
//     with 8 bytes (an acks=1 reply). A file that reaches its segment size is truncated and
//     written again from 0 (a log rolls; retention deletes), so the disk holds at most
//     files × segment bytes.
//   - Serve: clients ask for a chunk (4 bytes: its size; a fetch), and the server sends that
//     much of a page-cached file with sendfile(2) (Go's TCPConn.ReadFrom of an *os.File),
//     wrapping at the file's end.
//
// On loopback the receiving side's TCP work runs largely in the sender's context (softirq
// on the sending thread): the serve floor's server pays for much of its client's receive,
// and the ingest floor's server much less than a remote sender would leave it. The broker
// figure is charged the same way, so the ratio broker ÷ floor is fair on one machine;
// the absolute figures are loopback's.

// Limits of the floor: frames up to a produce request's usual maximum, files up to a
// partition count, and connections up to a producer count that makes sense on one host.
const (
	FloorFrameBytesMax = 16 << 20
	FloorFilesMax      = 1024
	FloorConnsMax      = 64
	floorWindowMax     = 1024
	floorAckBytes      = 8
	floorHeaderBytes   = 4
	// floorStretchMax bounds how long a measured window that has moved nothing yet runs past
	// its duration, waiting for its first frame or chunk: a 3 MiB chunk to a client at nice
	// 15 on a 2-core machine at load 15 took longer than a 100 ms window, and one frame per
	// 30 s is a server too slow to measure, not a slow machine.
	floorStretchMax = 30 * time.Second
)

// Floor modes.
const (
	FloorIngest = "ingest"
	FloorServe  = "serve"
)

// FloorConfig is one floor measurement's client side.
type FloorConfig struct {
	Mode       string // FloorIngest or FloorServe
	Conns      int    // client connections
	FrameBytes int    // ingest: payload bytes per frame; serve: bytes per chunk asked for
	Window     int    // ingest: frames in flight per connection (serve asks one chunk at a time)
	// Rate paces the clients to about this many bytes per second in total (0: as fast as
	// the server goes), so that the floor can be measured at the broker's own throughput:
	// CPU per GB depends on the rate (fewer bytes per wake-up at lower rates).
	Rate     int64
	Warmup   time.Duration
	Duration time.Duration
}

// Validate checks the bounds.
func (c FloorConfig) Validate() error {
	if c.Mode != FloorIngest && c.Mode != FloorServe {
		return fmt.Errorf("floor: mode %q, want %s or %s", c.Mode, FloorIngest, FloorServe)
	}
	if c.Conns < 1 || c.Conns > FloorConnsMax {
		return fmt.Errorf("floor: %d connections outside 1..%d", c.Conns, FloorConnsMax)
	}
	if c.FrameBytes < 1 || c.FrameBytes > FloorFrameBytesMax {
		return fmt.Errorf("floor: frame of %d bytes outside 1..%d", c.FrameBytes, FloorFrameBytesMax)
	}
	if c.Mode == FloorIngest && (c.Window < 1 || c.Window > floorWindowMax) {
		return fmt.Errorf("floor: window %d outside 1..%d", c.Window, floorWindowMax)
	}
	if c.Rate < 0 {
		return fmt.Errorf("floor: negative rate %d", c.Rate)
	}
	if c.Warmup < 0 || c.Duration <= 0 {
		return fmt.Errorf("floor: want warm-up ≥ 0 and a positive duration, got %v, %v", c.Warmup, c.Duration)
	}
	return nil
}

// FloorResult is one floor measurement: the bytes moved in the measured window and the
// server process's CPU over it (user + system from /proc/PID/stat).
type FloorResult struct {
	Mode             string  `json:"mode"`
	Conns            int     `json:"conns"`
	FrameBytes       int     `json:"frame_bytes"`
	Rate             int64   `json:"rate,omitempty"`
	Bytes            int64   `json:"bytes"`
	Seconds          float64 `json:"seconds"`
	MBPerSec         float64 `json:"mb_per_s"`
	ServerPID        int     `json:"server_pid"`
	ServerCPUSeconds float64 `json:"server_cpu_seconds"`
	ClientCPUSeconds float64 `json:"client_cpu_seconds"`
	CPUPerGB         float64 `json:"cpu_per_gb"` // server CPU-seconds per 10^9 bytes
}

// RunFloor drives a floor server at addr (running as serverPID, whose CPU it samples)
// with cfg.Conns connections: cfg.Warmup unmeasured, then cfg.Duration measured. A
// measured window in which no whole frame (or chunk) has arrived runs on until one does,
// for at most floorStretchMax more, so that a slow machine gets a figure over a longer
// window (the result's Seconds) rather than none; after that, RunFloor fails.
func RunFloor(ctx context.Context, addr string, serverPID int, cfg FloorConfig) (FloorResult, error) {
	if err := cfg.Validate(); err != nil {
		return FloorResult{}, err
	}
	conns := make([]net.Conn, 0, cfg.Conns)
	closeAll := func() {
		for _, c := range conns {
			c.Close()
		}
	}
	for range cfg.Conns {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			closeAll()
			return FloorResult{}, fmt.Errorf("floor: %w", err)
		}
		conns = append(conns, c)
	}
	runCtx, cancel := context.WithCancel(ctx)
	var moved atomic.Int64
	progress := make(chan struct{}, 1) // a token after bytes moved; see floorMoved
	var wg sync.WaitGroup
	errs := make(chan error, 2*cfg.Conns)
	for _, c := range conns {
		pace := newFloorPacer(cfg.Rate/int64(cfg.Conns), cfg.FrameBytes)
		if cfg.Mode == FloorIngest {
			wg.Add(2)
			sent := make(chan struct{}, cfg.Window)
			go func() { defer wg.Done(); errs <- floorSendFrames(runCtx, c, cfg.FrameBytes, sent, pace) }()
			go func() { defer wg.Done(); errs <- floorReadAcks(c, cfg.FrameBytes, sent, &moved, progress) }()
		} else {
			wg.Add(1)
			go func() { defer wg.Done(); errs <- floorFetch(runCtx, c, cfg.FrameBytes, &moved, progress, pace) }()
		}
	}
	stop := func() {
		cancel()
		closeAll()
		wg.Wait()
	}
	// wait returns after d, or early (with false) when progress has a token.
	wait := func(d time.Duration, progress <-chan struct{}) (bool, error) {
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case err := <-errs:
			if err == nil {
				err = errors.New("a connection ended early")
			}
			return false, fmt.Errorf("floor: %w", err)
		case <-progress:
			return false, nil
		case <-time.After(d):
			return true, nil
		}
	}
	if _, err := wait(cfg.Warmup, nil); err != nil {
		stop()
		return FloorResult{}, err
	}
	window := startCPU(serverPID)
	if !window.ok {
		stop()
		return FloorResult{}, fmt.Errorf("floor: cannot read the CPU of server pid %d", serverPID)
	}
	bytes0, start := moved.Load(), time.Now()
	if _, err := wait(cfg.Duration, nil); err != nil {
		stop()
		return FloorResult{}, err
	}
	// Stretch a window that has moved nothing until the first frame lands (a token in
	// progress may predate the window: the loop checks the count again).
	for stretchEnd := time.Now().Add(floorStretchMax); moved.Load() == bytes0; {
		timedOut, err := wait(time.Until(stretchEnd), progress)
		if err != nil {
			stop()
			return FloorResult{}, err
		}
		if timedOut {
			stop()
			return FloorResult{}, fmt.Errorf("floor: no whole %d-byte frame moved in %v: %w",
				cfg.FrameBytes, cfg.Duration+floorStretchMax, io.ErrUnexpectedEOF)
		}
	}
	bytes, elapsed := moved.Load()-bytes0, time.Since(start)
	cpu := window.finish(serverPID, "floor server", bytes, 0)
	stop()
	return FloorResult{
		Mode: cfg.Mode, Conns: cfg.Conns, FrameBytes: cfg.FrameBytes, Rate: cfg.Rate,
		Bytes: bytes, Seconds: elapsed.Seconds(), MBPerSec: float64(bytes) / elapsed.Seconds() / 1e6,
		ServerPID: serverPID, ServerCPUSeconds: cpu.BrokerSeconds, ClientCPUSeconds: cpu.BenchSeconds,
		CPUPerGB: cpu.PerGBIngested,
	}, nil
}

// floorSendFrames writes frames back to back while the window has room. Errors after
// runCtx ended are the measurement's end, not failures.
func floorSendFrames(runCtx context.Context, c net.Conn, size int, sent chan<- struct{}, pace *floorPacer) error {
	frame := make([]byte, floorHeaderBytes+size)
	binary.BigEndian.PutUint32(frame, uint32(size))
	for i := floorHeaderBytes; i < len(frame); i++ {
		frame[i] = byte(i * 7) // not all zeros, though nothing reads it
	}
	for {
		select {
		case sent <- struct{}{}:
		case <-runCtx.Done():
			return nil
		}
		pace.wait()
		if _, err := c.Write(frame); err != nil {
			return quietAfter(runCtx, err)
		}
	}
}

// floorMoved counts size bytes as moved and leaves a token in progress (never blocking: one
// token waiting is enough for RunFloor to look at the count).
func floorMoved(moved *atomic.Int64, progress chan<- struct{}, size int) {
	moved.Add(int64(size))
	select {
	case progress <- struct{}{}:
	default:
	}
}

// floorReadAcks counts a frame's payload as moved when its 8-byte answer arrives.
func floorReadAcks(c net.Conn, size int, sent <-chan struct{}, moved *atomic.Int64, progress chan<- struct{}) error {
	var ack [floorAckBytes]byte
	for {
		if _, err := io.ReadFull(c, ack[:]); err != nil {
			return nil // closed at the end (a server failure shows as no bytes moved)
		}
		floorMoved(moved, progress, size)
		<-sent
	}
}

// floorFetch asks for size bytes at a time and reads them.
func floorFetch(runCtx context.Context, c net.Conn, size int, moved *atomic.Int64, progress chan<- struct{}, pace *floorPacer) error {
	buf := make([]byte, size)
	var req [floorHeaderBytes]byte
	binary.BigEndian.PutUint32(req[:], uint32(size))
	for runCtx.Err() == nil {
		pace.wait()
		if _, err := c.Write(req[:]); err != nil {
			return quietAfter(runCtx, err)
		}
		if _, err := io.ReadFull(c, buf); err != nil {
			return quietAfter(runCtx, err)
		}
		floorMoved(moved, progress, size)
	}
	return nil
}

// floorPacer spaces one connection's frames (or requests) to a byte rate; nil does not wait.
type floorPacer struct {
	every time.Duration
	next  time.Time
}

func newFloorPacer(bytesPerSecond int64, frameBytes int) *floorPacer {
	if bytesPerSecond <= 0 {
		return nil
	}
	return &floorPacer{every: time.Duration(float64(frameBytes) / float64(bytesPerSecond) * float64(time.Second))}
}

// wait sleeps until the next frame is due. A pacer that fell behind (the server was
// slower) does not burst to catch up.
func (p *floorPacer) wait() {
	if p == nil {
		return
	}
	now := time.Now()
	if p.next.After(now) {
		time.Sleep(p.next.Sub(now))
	} else {
		p.next = now
	}
	p.next = p.next.Add(p.every)
}

func quietAfter(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// ---------------------------------------------------------------------------------------
// Servers

// FloorIngestServer appends received frames to its files (see the top of this file).
type FloorIngestServer struct {
	files   []*floorFile
	segment int64
	next    atomic.Uint64 // round-robin over files, shared by all connections
}

type floorFile struct {
	mu   sync.Mutex
	f    *os.File
	size int64
}

// NewFloorIngestServer creates files scratch files under dir, each rolled at segment bytes.
func NewFloorIngestServer(dir string, files int, segment int64) (*FloorIngestServer, error) {
	if files < 1 || files > FloorFilesMax || segment < FloorFrameBytesMax {
		return nil, fmt.Errorf("floor: want 1..%d files and segments of at least %d bytes", FloorFilesMax, FloorFrameBytesMax)
	}
	s := &FloorIngestServer{segment: segment}
	for i := range files {
		f, err := os.OpenFile(filepath.Join(dir, fmt.Sprintf("floor-%d-%03d.log", os.Getpid(), i)), os.O_CREATE|os.O_RDWR|os.O_TRUNC, 0o644)
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("floor: %w", err)
		}
		s.files = append(s.files, &floorFile{f: f})
	}
	return s, nil
}

// Serve answers connections accepted on ln until ln is closed.
func (s *FloorIngestServer) Serve(ln net.Listener) error {
	return floorAccept(ln, s.serveConn)
}

func (s *FloorIngestServer) serveConn(c net.Conn) {
	defer c.Close()
	var hdr [floorHeaderBytes]byte
	var ack [floorAckBytes]byte
	var buf []byte
	for seq := uint64(0); ; seq++ {
		if _, err := io.ReadFull(c, hdr[:]); err != nil {
			return
		}
		n := int(binary.BigEndian.Uint32(hdr[:]))
		if n < 1 || n > FloorFrameBytesMax {
			return
		}
		if cap(buf) < n {
			buf = make([]byte, n)
		}
		if _, err := io.ReadFull(c, buf[:n]); err != nil {
			return
		}
		if err := s.files[s.next.Add(1)%uint64(len(s.files))].append(buf[:n], s.segment); err != nil {
			return
		}
		binary.BigEndian.PutUint64(ack[:], seq)
		if _, err := c.Write(ack[:]); err != nil {
			return
		}
	}
}

// append writes b at the file's end with one pwrite, rolling the file first when b would
// take it past segment bytes.
func (f *floorFile) append(b []byte, segment int64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.size+int64(len(b)) > segment {
		if err := f.f.Truncate(0); err != nil {
			return err
		}
		f.size = 0
	}
	if _, err := f.f.WriteAt(b, f.size); err != nil {
		return err
	}
	f.size += int64(len(b))
	return nil
}

// Close closes and removes the files.
func (s *FloorIngestServer) Close() error {
	var first error
	for _, f := range s.files {
		if err := f.f.Close(); err != nil && first == nil {
			first = err
		}
		if err := os.Remove(f.f.Name()); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// FloorServeServer sends chunks of one page-cached file (see the top of this file).
type FloorServeServer struct {
	path string
	size int64
}

// NewFloorServeServer writes a scratch file of size bytes under dir; writing it leaves it
// in the page cache.
func NewFloorServeServer(dir string, size int64) (*FloorServeServer, error) {
	if size < FloorFrameBytesMax || size > 64<<30 {
		return nil, fmt.Errorf("floor: served file of %d bytes outside %d..64GiB", size, FloorFrameBytesMax)
	}
	f, err := os.CreateTemp(dir, "floor-serve-*.log")
	if err != nil {
		return nil, fmt.Errorf("floor: %w", err)
	}
	s := &FloorServeServer{path: f.Name(), size: size}
	block := make([]byte, 1<<20)
	for i := range block {
		block[i] = byte(i * 7)
	}
	for written := int64(0); written < size; {
		n, err := f.Write(block[:min(int64(len(block)), size-written)])
		if err != nil {
			f.Close()
			s.Close()
			return nil, fmt.Errorf("floor: %w", err)
		}
		written += int64(n)
	}
	if err := f.Close(); err != nil {
		s.Close()
		return nil, fmt.Errorf("floor: %w", err)
	}
	return s, nil
}

// Serve answers connections accepted on ln until ln is closed.
func (s *FloorServeServer) Serve(ln net.Listener) error {
	return floorAccept(ln, s.serveConn)
}

func (s *FloorServeServer) serveConn(c net.Conn) {
	defer c.Close()
	f, err := os.Open(s.path) // a descriptor per connection: each has its own offset
	if err != nil {
		return
	}
	defer f.Close()
	var req [floorHeaderBytes]byte
	off := int64(0)
	for {
		if _, err := io.ReadFull(c, req[:]); err != nil {
			return
		}
		n := int64(binary.BigEndian.Uint32(req[:]))
		if n < 1 || n > FloorFrameBytesMax {
			return
		}
		if off+n > s.size {
			off = 0
		}
		if _, err := f.Seek(off, io.SeekStart); err != nil {
			return
		}
		// An *io.LimitedReader of an *os.File: TCPConn.ReadFrom sends it with sendfile(2).
		if sent, err := c.(io.ReaderFrom).ReadFrom(&io.LimitedReader{R: f, N: n}); err != nil || sent != n {
			return
		}
		off += n
	}
}

// Close removes the file.
func (s *FloorServeServer) Close() error { return os.Remove(s.path) }

// floorAccept runs serve on every connection ln accepts until ln is closed, then waits for
// them to end.
func floorAccept(ln net.Listener, serve func(net.Conn)) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
		wg.Go(func() { serve(c) })
	}
}
