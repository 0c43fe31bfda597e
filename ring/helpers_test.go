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
	if _, benchmark := t.(*testing.B); !benchmark {
		// Every wait of a test's reactor first moves the loop's stack (forceStackMove):
		// memory the test handed the kernel from its stack then fails the test at once.
		r.beforeWait = forceStackMove
	}
	return r
}

// forceStackMove moves the calling goroutine's stack, and checks that a local's address
// changed: a collection shrinks a stack that is mostly unused, and growStack then grows it
// again, to a new place; when the collection left the stack alone, it recurses twice as deep
// (the stack is at most that big). Kernel memory that lived on the stack is left behind
// (see moveStack).
func forceStackMove() {
	var local byte
	before := uintptr(unsafe.Pointer(&local))
	frames := stackMoveFrames
	for attempt := 0; attempt < stackMoveAttemptsMax; attempt++ {
		runtime.GC()
		growStack(0, frames)
		if uintptr(unsafe.Pointer(&local)) != before {
			return
		}
		frames *= 2
	}
	panic(fmt.Sprintf("forceStackMove: the stack did not move in %d attempts (%d frames)", stackMoveAttemptsMax, frames))
}

// stackMoveAttemptsMax bounds forceStackMove's collections; its last recursion is 2^7
// times moveStack's (32 MiB of stack).
const stackMoveAttemptsMax = 8

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
	// Move the stack between prep and wait, after a collection: memory the test handed the
	// kernel that is neither on the heap for good nor reachable (pinForTest) is then moved
	// or freed before Submit. Session 10 ran this without the collection for a while:
	// TestSlowPeerDoesNotBlock lost an accept about 1 run in 50 under -race because
	// listenLoopback's sockaddr was freed here (zeros = AF_UNSPEC, a connect with res 0 to
	// nothing); listenLoopback pins it now.
	forceStackMove()
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

// pinForTest pins each pointer (to heap memory a test hands the kernel through a raw Ring)
// until the test ends. The SQE holds only an address, which keeps nothing alive: memory
// the test does not use again after the prep (a literal, an iovec array, a msghdr) could
// be collected and reused before the kernel reads it, all the more as waitCQEs collects
// garbage before it submits (forceStackMove).
func pinForTest(t testing.TB, pointers ...any) {
	var pin runtime.Pinner
	for _, p := range pointers {
		pin.Pin(p)
	}
	t.Cleanup(pin.Unpin)
}

// pinnedBytes returns a copy of s on the Go heap, pinned until the test ends (pinForTest).
func pinnedBytes(t testing.TB, s string) []byte {
	b := []byte(s)
	pinForTest(t, &b[0])
	return b
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

// kernelRelease is the running kernel's release (uname -r).
func kernelRelease(t testing.TB) string {
	t.Helper()
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		t.Fatal(err)
	}
	return unix.ByteSliceToString(u.Release[:])
}

// kernelAtLeast reports whether the running kernel's release is at least version
// ("major.minor", as Opcode.MinKernel gives it; "?" is never reached).
func kernelAtLeast(t testing.TB, version string) bool {
	t.Helper()
	var wantMajor, wantMinor, major, minor int
	if _, err := fmt.Sscanf(version, "%d.%d", &wantMajor, &wantMinor); err != nil {
		return false
	}
	if _, err := fmt.Sscanf(kernelRelease(t), "%d.%d", &major, &minor); err != nil {
		t.Fatalf("kernel release %q: %v", kernelRelease(t), err)
	}
	return major > wantMajor || major == wantMajor && minor >= wantMinor
}
