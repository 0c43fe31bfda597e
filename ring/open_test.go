package ring

import (
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestOpenChoosesBackend(t *testing.T) {
	t.Setenv(EnvBackend, "syscall")
	r, err := Open(Config{})
	if err != nil || r.Backend() != BackendSyscall {
		t.Fatalf("RINGLOG_IO=syscall: %v %v", r, err)
	}
	r.Close()
	if why := uringUnavailable(); why == "" {
		// An explicit Backend wins over the environment.
		r, err = Open(Config{Backend: "uring"})
		if err != nil || r.Backend() != BackendUring {
			t.Fatalf("explicit uring under RINGLOG_IO=syscall: %v", err)
		}
		r.Close()
	}
	t.Setenv(EnvBackend, "bogus")
	if _, err := Open(Config{}); err == nil {
		t.Fatal("RINGLOG_IO=bogus accepted")
	}
	t.Setenv(EnvBackend, "")
	if _, err := Open(Config{Backend: "epoll"}); err == nil {
		t.Fatal("Backend=epoll accepted")
	}
}

// withSetup replaces io_uring setup for one test.
func withSetup(t *testing.T, fn func(cfg Config) (*uringRing, error)) {
	t.Setenv(EnvBackend, "") // these tests exercise "auto"
	old := uringSetup
	uringSetup = fn
	t.Cleanup(func() { uringSetup = old })
}

func TestOpenFallsBackOnEPERM(t *testing.T) {
	for _, errno := range []unix.Errno{unix.EPERM, unix.ENOSYS, unix.EACCES} {
		withSetup(t, func(Config) (*uringRing, error) {
			return nil, fmt.Errorf("ring: io_uring_setup: %w", errno)
		})
		r, err := Open(Config{})
		if err != nil || r.Backend() != BackendSyscall {
			t.Fatalf("%v: auto gave %v, %v; want syscall backend", errno, r, err)
		}
		r.Close()
		if _, err := Open(Config{Backend: "uring"}); !errors.Is(err, errno) {
			t.Fatalf("%v: Backend=uring must fail with the cause, got %v", errno, err)
		}
	}
	// Other errors (ENOMEM: memlock) are reported, not papered over.
	withSetup(t, func(Config) (*uringRing, error) { return nil, unix.ENOMEM })
	if _, err := Open(Config{}); !errors.Is(err, unix.ENOMEM) {
		t.Fatalf("ENOMEM: %v", err)
	}
}

func TestOpenRetriesWithFewerFlags(t *testing.T) {
	if why := uringUnavailable(); why != "" {
		t.Skipf("io_uring unavailable: %s", why)
	}
	var tried []string
	withSetup(t, func(cfg Config) (*uringRing, error) {
		tried = append(tried, fmt.Sprintf("defer=%v single=%v", cfg.DeferTaskrun, cfg.SingleIssuer))
		if cfg.DeferTaskrun || cfg.SingleIssuer {
			return nil, unix.EINVAL // an "old kernel"
		}
		return newUringRing(cfg)
	})
	r, err := Open(Config{SingleIssuer: true, DeferTaskrun: true})
	if err != nil || r.Backend() != BackendUring {
		t.Fatalf("Open: %v", err)
	}
	r.Close()
	if len(tried) != 3 {
		t.Fatalf("attempts %v, want defer+single, single, none", tried)
	}
}

func TestOpenRequireOps(t *testing.T) {
	// The syscall backend has no FUTEX_WAIT: "syscall" fails naming it.
	_, err := Open(Config{Backend: "syscall", RequireOps: []Opcode{OpRead}})
	if err != nil {
		t.Fatal(err)
	}
	r, err := Open(Config{Backend: "uring", RequireOps: []Opcode{Opcode(200)}})
	if uringUnavailable() == "" && (!errors.Is(err, ErrUnsupported) || r != nil) {
		t.Fatalf("uring with an impossible op: %v", err)
	}
	p := &Probe{Backend: "x"}
	p.ops[OpRead] = true
	if err := p.Require(OpRead, OpSplice); err == nil || err.Error() != "ring: unsupported: op SPLICE (needs Linux 5.7) on backend x" {
		t.Fatalf("Require message: %v", err)
	}
}

func TestUringProbeAndFeatures(t *testing.T) {
	if why := uringUnavailable(); why != "" {
		t.Skipf("io_uring unavailable: %s", why)
	}
	r := openRing(t, "uring", Config{})
	p := r.Probe()
	// Every op the running kernel's release has must be in the probe (CI's kernel may be
	// older than this VM's 6.x: MSG_RING needs 5.18); backports may add more.
	for _, op := range []Opcode{OpNop, OpRead, OpWrite, OpWritev, OpFsync, OpSplice, OpMsgRing, OpAccept, OpSend} {
		if !p.Supported(op) && kernelAtLeast(t, op.MinKernel()) {
			t.Errorf("probe says %s unsupported on Linux %s (it has been in the kernel since %s)", op, kernelRelease(t), op.MinKernel())
		}
	}
	if !p.HasFeature(FeatSingleMmap | FeatNoDrop | FeatExtArg) {
		t.Errorf("features %#x", p.Features)
	}
	if p.Supported(Opcode(255)) {
		t.Error("op 255 supported")
	}
}

func TestSQPoll(t *testing.T) {
	if why := uringUnavailable(); why != "" {
		t.Skipf("io_uring unavailable: %s", why)
	}
	r := openRing(t, "uring", Config{Entries: 8, SQPoll: true, SQPollIdle: 10 * time.Millisecond})
	f, _ := tempFile(t)
	for i := 0; i < 20; i++ {
		sqe := mustSQE(t, r)
		sqe.PrepWrite(int(f.Fd()), pinnedBytes(t, "sqpoll"), uint64(6*i))
		sqe.UserData = uint64(i)
		if c := waitCQEs(t, r, 1)[0]; c.Res != 6 {
			t.Fatalf("write %d: %+v", i, c)
		}
	}
	if st, _ := f.Stat(); st.Size() != 120 {
		t.Fatalf("size %d", st.Size())
	}
}

func TestRegisterEventfdAndUpdateFiles(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		r := openRing(t, backend, Config{Entries: 8})
		efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(efd)
		if err := r.RegisterEventfd(efd); err != nil {
			t.Fatalf("RegisterEventfd: %v", err)
		}
		mustSQE(t, r).PrepNop()
		waitCQEs(t, r, 1)
		var v [8]byte
		if n, err := unix.Read(efd, v[:]); n != 8 || err != nil || v[0] == 0 {
			t.Fatalf("eventfd not signalled: %d %v %v", n, err, v)
		}
		if err := r.UnregisterEventfd(); err != nil {
			t.Fatal(err)
		}

		f, _ := tempFile(t)
		g, _ := tempFile(t)
		if err := r.RegisterFiles([]int32{int32(f.Fd()), -1}); err != nil {
			t.Fatal(err)
		}
		if err := r.UpdateFiles(1, []int32{int32(g.Fd())}); err != nil {
			t.Fatalf("UpdateFiles: %v", err)
		}
		sqe := mustSQE(t, r)
		sqe.PrepWrite(1, pinnedBytes(t, "to g"), 0)
		sqe.SetFixedFile()
		sqe.UserData = 9
		if c := waitCQEs(t, r, 1)[0]; c.Res != 4 {
			t.Fatalf("write via updated slot: %+v", c)
		}
		if b, _ := os.ReadFile(g.Name()); string(b) != "to g" {
			t.Fatalf("g holds %q", b)
		}
		sqe = mustSQE(t, r)
		sqe.PrepWrite(7, pinnedBytes(t, "x"), 0)
		sqe.SetFixedFile()
		sqe.UserData = 10
		if c := waitCQEs(t, r, 1)[0]; c.Res != -int32(unix.EBADF) {
			t.Fatalf("write via bad fixed index: %+v", c)
		}
	})
}

func TestReactorPostFromAndLimits(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		src := newReactor(t, backend, Config{Entries: 8, SingleIssuer: true, DeferTaskrun: true})
		dst := newReactor(t, backend, Config{Entries: 8, SingleIssuer: true, DeferTaskrun: true})
		dst.RunOnce(false) // arm dst's wake-up read
		ran := false
		if err := dst.PostFrom(src, func() { ran = true }); err != nil {
			t.Fatal(err)
		}
		if err := src.RunOnce(false); err != nil { // submits the MSG_RING
			t.Fatal(err)
		}
		if err := dst.RunOnce(true); err != nil { // must wake: no eventfd was written
			t.Fatal(err)
		}
		if !ran {
			t.Fatal("posted closure did not run")
		}
		var cnt [8]byte
		if n, _ := unix.Read(dst.wakeFd, cnt[:]); n == 8 {
			t.Fatal("PostFrom wrote the eventfd instead of using MSG_RING")
		}

		lim := newReactor(t, backend, Config{Entries: 4, InflightMax: 2})
		lfd, _ := listenLoopback(t)
		buf := make([]byte, 1)
		for i := 0; i < 2; i++ {
			op, err := lim.Begin(nil)
			if err != nil {
				t.Fatal(err)
			}
			op.SQE().PrepPollAdd(lfd, unix.POLLIN)
			op.Submit()
		}
		if _, err := lim.Begin(nil); !errors.Is(err, ErrTooManyInflight) {
			t.Fatalf("third op: %v, want ErrTooManyInflight", err)
		}
		lim.Close()
		if _, err := lim.Pread(0, buf, 0); !errors.Is(err, ErrClosed) {
			t.Fatalf("Pread after Close: %v", err)
		}
		if err := lim.Run(); !errors.Is(err, ErrClosed) {
			t.Fatalf("Run after Close: %v", err)
		}
	})
}

func TestInlineFileIO(t *testing.T) {
	r := newReactor(t, "auto", Config{InlineFileIO: true})
	f, _ := tempFile(t)
	if n, err := r.Pwrite(int(f.Fd()), []byte("inline"), 0); n != 6 || err != nil {
		t.Fatal(n, err)
	}
	if n, err := r.Pwritev(int(f.Fd()), [][]byte{[]byte("ab"), []byte("cd")}, 6); n != 4 || err != nil {
		t.Fatal(n, err)
	}
	if err := r.Fdatasync(int(f.Fd())); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 10)
	if n, err := r.Pread(int(f.Fd()), got, 0); n != 10 || string(got) != "inlineabcd" || err != nil {
		t.Fatal(n, err, string(got))
	}
	if _, err := r.Pwrite(-1, got, 0); !errors.Is(err, unix.EBADF) {
		t.Fatal(err)
	}
}
