package ring

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

var backends = []string{"uring", "syscall"}

// uringUnavailable reports why io_uring cannot be used here ("" when it can).
func uringUnavailable() string {
	r, err := newUringRing(Config{}.withDefaults())
	if err != nil {
		if errors.Is(err, unix.EPERM) || errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EACCES) || errors.Is(err, ErrUnsupported) {
			return err.Error()
		}
		return ""
	}
	r.Close()
	return ""
}

// forEachBackend runs fn once per backend; the io_uring variant is skipped with the reason
// only when io_uring is unavailable on this machine.
func forEachBackend(t *testing.T, fn func(t *testing.T, backend string)) {
	t.Helper()
	for _, b := range backends {
		t.Run(b, func(t *testing.T) {
			if b == "uring" {
				if why := uringUnavailable(); why != "" {
					t.Skipf("io_uring unavailable on this machine, testing only the syscall backend: %s", why)
				}
			}
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			fn(t, b)
		})
	}
}

func openRing(t testing.TB, backend string, cfg Config) Ring {
	t.Helper()
	cfg.Backend = backend
	r, err := Open(cfg)
	if err != nil {
		t.Fatalf("Open(%s): %v", backend, err)
	}
	want := map[string]string{"uring": BackendUring, "syscall": BackendSyscall}[backend]
	if r.Backend() != want {
		t.Fatalf("Backend() = %q, want %q", r.Backend(), want)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func newReactor(t testing.TB, backend string, cfg Config) *Reactor {
	t.Helper()
	cfg.Backend = backend
	r, err := NewReactor(cfg)
	if err != nil {
		t.Fatalf("NewReactor(%s): %v", backend, err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func tempFile(t testing.TB) (*os.File, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "data")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f, path
}

// waitCQEs submits and reaps until n completions arrived (bounded by a 10 s deadline).
func waitCQEs(t testing.TB, r Ring, n int) []CQE {
	t.Helper()
	out := make([]CQE, 0, n)
	buf := make([]CQE, 64)
	moveStack(0)
	deadline := time.Now().Add(10 * time.Second)
	for len(out) < n {
		if time.Now().After(deadline) {
			t.Fatalf("got %d of %d completions before the deadline: %+v", len(out), n, out)
		}
		if _, err := r.SubmitAndWait(1, 100*time.Millisecond); err != nil {
			t.Fatalf("SubmitAndWait: %v", err)
		}
		k := r.PeekCQEs(buf)
		out = append(out, buf[:k]...)
	}
	return out
}

// byUserData indexes completions by user data, failing on duplicates.
func byUserData(t testing.TB, cqes []CQE) map[uint64]CQE {
	t.Helper()
	m := make(map[uint64]CQE, len(cqes))
	for _, c := range cqes {
		if _, dup := m[c.UserData]; dup {
			t.Fatalf("duplicate completion for user data %d", c.UserData)
		}
		m[c.UserData] = c
	}
	return m
}

func mustSQE(t testing.TB, r Ring) *SQE {
	t.Helper()
	sqe := r.GetSQE()
	if sqe == nil {
		t.Fatal("GetSQE: SQ full")
	}
	return sqe
}

func uintptrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(&b[0])) }

// postAttemptsMax bounds postAccepted's retries of a full mailbox.
const postAttemptsMax = 1_000_000

// postAccepted posts fn to r, retrying (with runtime.Gosched, so the loop can drain) while
// the mailbox is full. ErrMailboxFull means fn was not queued and will never run: a test
// that drops that error waits forever for fn, with the loop asleep in its wait (the hang
// TestReactorRunPostStop/syscall had under -race; TestPostRefusedByFullMailboxNeverRuns).
// Any goroutine may call it.
func postAccepted(r *Reactor, fn func()) error {
	for attempt := 1; ; attempt++ {
		err := r.Post(fn)
		if err == nil {
			return nil
		}
		if !errors.Is(err, ErrMailboxFull) || attempt == postAttemptsMax {
			return fmt.Errorf("Post (attempt %d): %w", attempt, err)
		}
		runtime.Gosched()
	}
}

// moveStack recurses through about 256 KiB of frames, so the calling goroutine's stack grows
// and is copied to a new place whenever it was smaller than that. A test that handed the
// kernel the address of a stack variable (the accept's peer address, a small buffer the
// compiler kept on the stack) then sees the kernel write into the old stack: waitCQEs calls
// it between the prep and the wait, which turns that bug into a deterministic failure.
//
//go:noinline
func moveStack(depth int) byte {
	var frame [4096]byte
	frame[depth%len(frame)] = byte(depth)
	if depth < 64 {
		return frame[(depth*7)%len(frame)] + moveStack(depth+1)
	}
	return frame[0]
}
