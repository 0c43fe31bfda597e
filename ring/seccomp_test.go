package ring

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// TestFallbackUnderSeccomp runs a child process that blocks io_uring_setup with a seccomp
// filter returning EPERM — what Docker ≥ 25 and containerd 2.0 do by default — and checks
// that "auto" falls back to the syscall backend, says why in the log, and still does I/O.
func TestFallbackUnderSeccomp(t *testing.T) {
	if os.Getenv("RINGLOG_SECCOMP_CHILD") != "" {
		t.Skip("parent only")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestSeccompChild$", "-test.v")
	cmd.Env = append(os.Environ(), "RINGLOG_SECCOMP_CHILD="+t.TempDir(), EnvBackend+"=")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child failed: %v\n%s", err, out)
	}
	for _, want := range []string{
		"backend=syscall",
		`reason="io_uring unusable: ring: io_uring_setup`,
		"operation not permitted",
		"child: backend syscall, round trip ok",
	} {
		if !bytes.Contains(out, []byte(want)) {
			t.Fatalf("child output lacks %q:\n%s", want, out)
		}
	}
	if n := bytes.Count(out, []byte("I/O backend selected")); n != 1 {
		t.Fatalf("backend choice logged %d times, want once:\n%s", n, out)
	}
}

func TestSeccompChild(t *testing.T) {
	dir := os.Getenv("RINGLOG_SECCOMP_CHILD")
	if dir == "" {
		t.Skip("child of TestFallbackUnderSeccomp only")
	}
	runtime.LockOSThread()
	if err := denyIOUringSetup(); err != nil {
		t.Fatalf("install seccomp filter: %v", err)
	}
	// Two reactors: the choice is logged once, not per ring.
	for i := 0; i < 2; i++ {
		r, err := NewReactor(Config{SingleIssuer: true, DeferTaskrun: true})
		if err != nil {
			t.Fatalf("NewReactor under seccomp: %v", err)
		}
		f, err := os.Create(filepath.Join(dir, fmt.Sprint("f", i)))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.Pwrite(int(f.Fd()), []byte("fallback"), 0); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, 8)
		if _, err := r.Pread(int(f.Fd()), got, 0); err != nil || string(got) != "fallback" {
			t.Fatalf("read back %q %v", got, err)
		}
		fmt.Printf("child: backend %s, round trip ok\n", strings.TrimSpace(r.Backend()))
		f.Close()
		r.Close()
	}
}

// denyIOUringSetup installs, on every thread of the process, a seccomp filter that makes
// io_uring_setup fail with EPERM and allows everything else.
func denyIOUringSetup() error {
	const (
		bpfLdWAbs = 0x20 // BPF_LD | BPF_W | BPF_ABS
		bpfJeqK   = 0x15 // BPF_JMP | BPF_JEQ | BPF_K
		bpfRetK   = 0x06 // BPF_RET | BPF_K
	)
	prog := []unix.SockFilter{
		{Code: bpfLdWAbs, K: 0}, // seccomp_data.nr
		{Code: bpfJeqK, Jt: 0, Jf: 1, K: unix.SYS_IO_URING_SETUP},
		{Code: bpfRetK, K: unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)},
		{Code: bpfRetK, K: unix.SECCOMP_RET_ALLOW},
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	_, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&fprog)))
	if errno != 0 {
		return fmt.Errorf("seccomp: %w", errno)
	}
	return nil
}
