package engine

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/ringlog/ringlog/engine/batch"
	"github.com/ringlog/ringlog/ring"
	"golang.org/x/sys/unix"
)

// fileIOCase is one FileIO implementation every log test runs under.
type fileIOCase struct {
	name string
	fio  func(t testing.TB) ring.FileIO
}

func fileIOCases() []fileIOCase {
	return []fileIOCase{
		{"syscalls", func(testing.TB) ring.FileIO { return ring.Syscalls{} }},
		{"reactor", newTestReactor},
	}
}

// newTestReactor locks the calling goroutine (the test's) to its OS thread and returns an
// io_uring Reactor owned by it; the test is skipped where io_uring is unavailable.
func newTestReactor(t testing.TB) ring.FileIO {
	runtime.LockOSThread()
	r, err := ring.NewReactor(ring.Config{Backend: "uring", Entries: 64})
	if err != nil {
		runtime.UnlockOSThread()
		t.Skipf("io_uring reactor unavailable: %v", err)
	}
	t.Cleanup(func() {
		r.Close()
		runtime.UnlockOSThread()
	})
	return r
}

var storageModes = []StorageMode{StoragePageCache, StorageDirect}

// skipUnlessDirect is for a test whose log in dir asked for mode want. When the log came up
// in another mode it skips t if want is direct mode and dir's file system refuses O_DIRECT
// (a tmpfs before Linux 6.6, which CI's TMPDIR may be: the log falls back to page-cache
// mode and there is nothing direct to test), and fails t otherwise (then the fall-back is a
// bug). The test's own probe decides, not the engine's: a broken engine probe must fail
// the test, not skip it.
func skipUnlessDirect(t testing.TB, l *Log, dir string, want StorageMode) {
	t.Helper()
	if l.Mode() == want {
		return
	}
	if want == StorageDirect {
		err := directRefused(dir)
		if err != nil {
			t.Skipf("direct mode unavailable: the log came up in %s mode, and %v", l.Mode(), err)
		}
		t.Fatalf("mode %s, want %s: %s's file system takes O_DIRECT", l.Mode(), want, dir)
	}
	t.Fatalf("mode %s, want %s", l.Mode(), want)
}

// directRefused is nil when dir's file system takes an O_DIRECT open and an aligned write.
func directRefused(dir string) error {
	path := filepath.Join(dir, ".test-direct-probe")
	defer os.Remove(path)
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_TRUNC|unix.O_DIRECT|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("O_DIRECT open in %s: %w", dir, err)
	}
	defer unix.Close(fd)
	buf, err := unix.Mmap(-1, 0, blockBytes, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		return fmt.Errorf("mmap: %w", err)
	}
	defer unix.Munmap(buf)
	if _, err := unix.Pwrite(fd, buf, 0); err != nil {
		return fmt.Errorf("aligned O_DIRECT write in %s: %w", dir, err)
	}
	return nil
}

// forEachBackend runs fn for every (FileIO, storage mode) pair.
func forEachBackend(t *testing.T, fn func(t *testing.T, fio ring.FileIO, mode StorageMode)) {
	for _, fc := range fileIOCases() {
		for _, mode := range storageModes {
			t.Run(fc.name+"/"+string(mode), func(t *testing.T) {
				fn(t, fc.fio(t), mode)
			})
		}
	}
}

var quietLogger = slog.New(slog.NewTextHandler(io.Discard, nil))

// fakeClock is an injectable clock.
type fakeClock struct{ now time.Time }

func (c *fakeClock) Now() time.Time          { return c.now }
func (c *fakeClock) Advance(d time.Duration) { c.now = c.now.Add(d) }

func newFakeClock() *fakeClock { return &fakeClock{now: time.UnixMilli(1_700_000_000_000)} }

func testConfig(mode StorageMode) LogConfig {
	return LogConfig{Storage: mode, SegmentBytes: 64 << 10, IndexIntervalBytes: 512,
		DirectChunkBytes: 16 << 10, DirectCacheChunks: 2, Logger: quietLogger}
}

func openLog(t testing.TB, dir string, cfg LogConfig, fio ring.FileIO) (*Log, RecoveryReport) {
	t.Helper()
	l, rep, err := OpenLog(dir, cfg, fio)
	if err != nil {
		t.Fatalf("OpenLog(%s): %v", dir, err)
	}
	return l, rep
}

// recordValue is the deterministic value of record i of batch seq.
func recordValue(seq, i, size int) []byte {
	v := fmt.Appendf(nil, "batch-%d-record-%d|", seq, i)
	for len(v) < size {
		v = append(v, byte('a'+(seq+i+len(v))%26))
	}
	return v[:max(size, 1)]
}

// makeBatch builds an uncompressed v2 batch of n records with timestamps ts, ts+1, ...
func makeBatch(t testing.TB, seq, n, valueSize int, ts int64) []byte {
	t.Helper()
	b := batch.NewBuilder(batch.BuilderOptions{})
	for i := 0; i < n; i++ {
		b.Append(ts+int64(i), fmt.Appendf(nil, "k%d", i), recordValue(seq, i, valueSize), nil)
	}
	out, err := b.Build(nil)
	if err != nil {
		t.Fatalf("build batch: %v", err)
	}
	return out
}

// mustInvariants fails the test when the log's in-memory state is inconsistent.
func mustInvariants(t testing.TB, l *Log) {
	t.Helper()
	if err := l.checkInvariants(); err != nil {
		t.Fatal(err)
	}
}

// readAll reads the whole log from its start, batch stream by batch stream.
func readAll(t testing.TB, l *Log, maxBytes int) []byte {
	t.Helper()
	mustInvariants(t, l)
	var out []byte
	off := l.StartOffset()
	for steps := 0; off < l.EndOffset(); steps++ {
		if steps > 1_000_000 {
			t.Fatalf("readAll does not progress at %d", off)
		}
		res, err := l.Read(off, maxBytes)
		if err != nil {
			t.Fatalf("Read(%d): %v", off, err)
		}
		if res.Size == 0 || res.NextOffset <= off {
			t.Fatalf("Read(%d) returned no progress: %+v", off, res)
		}
		if out, err = res.AppendTo(out); err != nil {
			t.Fatalf("AppendTo: %v", err)
		}
		off = res.NextOffset
	}
	return out
}

// batchOffsets walks concatenated batches and returns their base offsets.
func batchOffsets(t testing.TB, b []byte) []int64 {
	t.Helper()
	var offs []int64
	for len(b) > 0 {
		h, err := validateFirst(b)
		if err != nil {
			t.Fatalf("batch %d invalid: %v", len(offs), err)
		}
		offs = append(offs, h.BaseOffset)
		b = b[batchSize(h):]
	}
	return offs
}

func segmentFile(dir string, base int64, suffix string) string {
	return filepath.Join(dir, fmt.Sprintf("%020d%s", base, suffix))
}

func mustEqualBytes(t testing.TB, what string, got, want []byte) {
	t.Helper()
	if !bytes.Equal(got, want) {
		n := 0
		for n < min(len(got), len(want)) && got[n] == want[n] {
			n++
		}
		t.Fatalf("%s: %d bytes, want %d; first difference at %d", what, len(got), len(want), n)
	}
}

// validateFirst validates the first batch in b (which may hold several).
func validateFirst(b []byte) (batch.Header, error) {
	h, err := batch.ParseHeader(b)
	if err != nil {
		return h, err
	}
	if h.Size() > len(b) {
		return h, fmt.Errorf("batch of %d bytes, %d left", h.Size(), len(b))
	}
	return batch.Validate(b[:h.Size()])
}
