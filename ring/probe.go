package ring

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"time"

	"golang.org/x/sys/unix"
)

// FileIOProbe is what ProbeFileIO measured: the median time of one append written through
// the ring (submit and wait, as `--file-io ring` does) and inline (pwritev on the calling
// thread, as `--file-io inline` does), and which one it picked.
type FileIOProbe struct {
	Backend        string        // the ring's backend ("io_uring" or the syscall fallback)
	Direct         bool          // the scratch file was opened O_DIRECT
	WriteBytes     int           // bytes per append
	Writes         int           // appends timed per mode
	Ring, Inline   time.Duration // median per append
	InlineIsFaster bool          // the choice: inline unless the ring was faster
}

func (p FileIOProbe) String() string {
	choice := "ring"
	if p.InlineIsFaster {
		choice = "inline"
	}
	mode := "buffered"
	if p.Direct {
		mode = "O_DIRECT"
	}
	return fmt.Sprintf("%s (%s %d-byte appends, median of %d each: inline %v, ring %v; backend %s)",
		choice, mode, p.WriteBytes, p.Writes, p.Inline, p.Ring, p.Backend)
}

// Probe shape: appends of 4 × 4 KiB buffers (a batch of records plus headers is several
// buffers), rounds alternating between the two modes so a burst of noise on a shared
// machine hits both; each round appends to a fresh file so block allocation is paid as the
// shard pays it.
const (
	probeBufs        = 4
	probeBufBytes    = 4096
	probeWritesRound = 128
	probeRounds      = 4
)

// ProbeFileIO decides between inline and ring file I/O for a data directory by measuring
// both on a scratch file in dir (removed afterwards). It runs on the calling goroutine with
// its OS thread locked, creating its own reactor from cfg; with the syscall backend both
// modes are the same system call and inline is chosen without timing the ring.
func ProbeFileIO(dir string, cfg Config, direct bool) (FileIOProbe, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	cfg.InlineFileIO = false
	cfg.Entries = 64
	r, err := NewReactor(cfg)
	if err != nil {
		return FileIOProbe{}, fmt.Errorf("file-io probe: %w", err)
	}
	defer r.Close()
	probe := FileIOProbe{Backend: r.Backend(), Direct: direct, WriteBytes: probeBufs * probeBufBytes, Writes: probeWritesRound * probeRounds / 2}
	arena, err := NewArena(probeBufBytes, probeBufs)
	if err != nil {
		return probe, fmt.Errorf("file-io probe: %w", err)
	}
	defer func() { _ = arena.Release() }()
	bufs := arena.Buffers()
	for i, b := range bufs {
		for j := range b {
			b[j] = byte(i + j)
		}
	}
	path := filepath.Join(dir, fmt.Sprintf(".file-io-probe-%d", os.Getpid()))
	defer os.Remove(path)
	var ringTimes, inlineTimes []time.Duration
	for round := range probeRounds {
		var io FileIO = Syscalls{}
		viaRing := round%2 == 0
		if viaRing {
			if probe.Backend != BackendUring {
				continue
			}
			io = r
		}
		times, err := probeRound(path, io, bufs, direct)
		if err != nil {
			return probe, err
		}
		if viaRing {
			ringTimes = append(ringTimes, times...)
		} else {
			inlineTimes = append(inlineTimes, times...)
		}
	}
	probe.Inline = median(inlineTimes)
	probe.InlineIsFaster = true
	if len(ringTimes) > 0 {
		probe.Ring = median(ringTimes)
		probe.InlineIsFaster = probe.Inline <= probe.Ring
	}
	return probe, nil
}

// probeRound appends probeWritesRound times to a fresh file and returns each append's time.
func probeRound(path string, io FileIO, bufs [][]byte, direct bool) ([]time.Duration, error) {
	flags := unix.O_RDWR | unix.O_CREAT | unix.O_TRUNC | unix.O_CLOEXEC
	if direct {
		flags |= unix.O_DIRECT
	}
	fd, err := unix.Open(path, flags, 0o600)
	if err != nil {
		return nil, fmt.Errorf("file-io probe: open %s: %w", path, err)
	}
	defer unix.Close(fd)
	times := make([]time.Duration, 0, probeWritesRound)
	var off int64
	for range probeWritesRound {
		start := time.Now()
		n, err := io.Pwritev(fd, bufs, off)
		times = append(times, time.Since(start))
		if err != nil {
			return nil, fmt.Errorf("file-io probe: %w", err)
		}
		off += int64(n)
	}
	return times, nil
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	sorted := slices.Clone(ds)
	slices.Sort(sorted)
	return sorted[len(sorted)/2]
}
