package ring

import (
	"bytes"
	"errors"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestReactorFileIO(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		r := newReactor(t, backend, Config{Entries: 8, SingleIssuer: true, DeferTaskrun: true})
		if r.Backend() != map[string]string{"uring": BackendUring, "syscall": BackendSyscall}[backend] {
			t.Fatalf("backend %q", r.Backend())
		}
		f, path := tempFile(t)
		fd := int(f.Fd())
		var io FileIO = r

		if err := io.Fallocate(fd, 0, 0, 1<<16); err != nil {
			t.Fatalf("Fallocate: %v", err)
		}
		if st, _ := f.Stat(); st.Size() != 1<<16 {
			t.Fatalf("size after fallocate = %d", st.Size())
		}
		a := bytes.Repeat([]byte("a"), 4096)
		if n, err := io.Pwrite(fd, a, 0); err != nil || n != len(a) {
			t.Fatalf("Pwrite = %d, %v", n, err)
		}
		bufs := [][]byte{[]byte("hello "), {}, []byte("world")}
		if n, err := io.Pwritev(fd, bufs, 4096); err != nil || n != 11 {
			t.Fatalf("Pwritev = %d, %v", n, err)
		}
		if err := io.Fdatasync(fd); err != nil {
			t.Fatalf("Fdatasync: %v", err)
		}
		if err := io.Fsync(fd); err != nil {
			t.Fatalf("Fsync: %v", err)
		}
		got := make([]byte, 4096+11)
		if n, err := io.Pread(fd, got, 0); err != nil || n != len(got) {
			t.Fatalf("Pread = %d, %v", n, err)
		}
		if !bytes.Equal(got[:4096], a) || string(got[4096:]) != "hello world" {
			t.Fatalf("read back %q...", got[4090:])
		}
		disk, _ := os.ReadFile(path)
		if !bytes.Equal(disk[:4096+11], got) {
			t.Fatal("file content differs from what the ring read")
		}
		// Reading past EOF is a short read, not an error.
		if n, err := io.Pread(fd, got, 1<<16); err != nil || n != 0 {
			t.Fatalf("Pread at EOF = %d, %v", n, err)
		}
		// Errors come back as wrapped errnos.
		if _, err := io.Pwrite(-1, a, 0); !errors.Is(err, unix.EBADF) {
			t.Fatalf("Pwrite(-1) err = %v, want EBADF", err)
		}
		if err := io.Fdatasync(-1); !errors.Is(err, unix.EBADF) {
			t.Fatalf("Fdatasync(-1) err = %v, want EBADF", err)
		}
		// Many more ops than SQ entries: the SQ is flushed and indexes wrap.
		for i := 0; i < 100; i++ {
			if _, err := io.Pwrite(fd, a[:16], int64(i*16)); err != nil {
				t.Fatalf("Pwrite %d: %v", i, err)
			}
		}
	})
}

func TestRingFileOps(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		r := openRing(t, backend, Config{Entries: 16})
		dir := t.TempDir()
		path := CString(dir + "/ops")
		pinForTest(t, path)

		sqe := mustSQE(t, r)
		sqe.PrepOpenat(unix.AT_FDCWD, path, unix.O_RDWR|unix.O_CREAT|unix.O_CLOEXEC, 0o600)
		sqe.UserData = 1
		c := waitCQEs(t, r, 1)[0]
		if c.UserData != 1 || c.Res < 0 {
			t.Fatalf("openat: %+v", c)
		}
		fd := int(c.Res)

		arena, err := NewArena(4096, 2)
		if err != nil {
			t.Fatal(err)
		}
		defer arena.Release()
		if err := r.RegisterBuffers(arena.Buffers()); err != nil {
			t.Fatalf("RegisterBuffers: %v", err)
		}
		wbuf, widx, _ := arena.Get()
		copy(wbuf, bytes.Repeat([]byte("F"), 4096))
		rbuf, ridx, _ := arena.Get()

		// write (linked) -> fsync, then writev, fallocate, statx.
		hdr := pinnedBytes(t, "HEAD")
		iov := []Iovec{{Base: &hdr[0]}, {Base: &wbuf[0]}}
		pinForTest(t, &iov[0])
		iov[0].SetLen(len(hdr))
		iov[1].SetLen(100)
		sqe = mustSQE(t, r)
		sqe.PrepWriteFixed(fd, wbuf, 8192, uint16(widx))
		sqe.SetLink()
		sqe.UserData = 2
		sqe = mustSQE(t, r)
		sqe.PrepFsync(fd, true)
		sqe.UserData = 3
		sqe = mustSQE(t, r)
		sqe.PrepWritev(fd, iov, 0)
		sqe.UserData = 4
		sqe = mustSQE(t, r)
		sqe.PrepFallocate(fd, 0, 0, 1<<20)
		sqe.UserData = 5
		m := byUserData(t, waitCQEs(t, r, 4))
		if m[2].Res != 4096 || m[3].Res != 0 || m[4].Res != 104 || m[5].Res != 0 {
			t.Fatalf("write/fsync/writev/fallocate: %+v", m)
		}

		var st Statx
		sqe = mustSQE(t, r)
		sqe.PrepStatx(unix.AT_FDCWD, path, 0, unix.STATX_SIZE, &st)
		sqe.UserData = 6
		if c := waitCQEs(t, r, 1)[0]; c.Res != 0 || st.Size != 1<<20 {
			t.Fatalf("statx: %+v size %d", c, st.Size)
		}

		// read_fixed, readv, read.
		small := make([]byte, 4)
		rest := make([]byte, 100)
		riov := []Iovec{{Base: &small[0]}, {Base: &rest[0]}}
		pinForTest(t, &riov[0])
		riov[0].SetLen(4)
		riov[1].SetLen(100)
		plain := make([]byte, 10)
		sqe = mustSQE(t, r)
		sqe.PrepReadFixed(fd, rbuf, 8192, uint16(ridx))
		sqe.UserData = 7
		sqe = mustSQE(t, r)
		sqe.PrepReadv(fd, riov, 0)
		sqe.UserData = 8
		sqe = mustSQE(t, r)
		sqe.PrepRead(fd, plain, 4)
		sqe.UserData = 9
		m = byUserData(t, waitCQEs(t, r, 3))
		if m[7].Res != 4096 || !bytes.Equal(rbuf, wbuf) {
			t.Fatalf("read_fixed: %+v", m[7])
		}
		if m[8].Res != 104 || string(small) != "HEAD" || !bytes.Equal(rest, wbuf[:100]) {
			t.Fatalf("readv: %+v %q", m[8], small)
		}
		if m[9].Res != 10 || string(plain) != "FFFFFFFFFF" {
			t.Fatalf("read: %+v %q", m[9], plain)
		}

		// A fixed-buffer op outside the registered buffer fails cleanly.
		other := make([]byte, 64)
		sqe = mustSQE(t, r)
		sqe.PrepReadFixed(fd, other, 0, uint16(ridx))
		sqe.UserData = 10
		if c := waitCQEs(t, r, 1)[0]; c.Res != -int32(unix.EFAULT) {
			t.Fatalf("read_fixed outside buffer: res %d, want -EFAULT", c.Res)
		}

		// Registered files: write through a fixed-file index.
		if err := r.RegisterFiles([]int32{-1, int32(fd)}); err != nil {
			t.Fatalf("RegisterFiles: %v", err)
		}
		sqe = mustSQE(t, r)
		sqe.PrepWrite(1, pinnedBytes(t, "fixedfile"), 0)
		sqe.SetFixedFile()
		sqe.UserData = 11
		if c := waitCQEs(t, r, 1)[0]; c.Res != 9 {
			t.Fatalf("fixed-file write: %+v", c)
		}
		if err := r.UnregisterFiles(); err != nil {
			t.Fatalf("UnregisterFiles: %v", err)
		}
		if err := r.UnregisterBuffers(); err != nil {
			t.Fatalf("UnregisterBuffers: %v", err)
		}
		arena.Put(wbuf)
		arena.Put(rbuf)

		sqe = mustSQE(t, r)
		sqe.PrepClose(fd)
		sqe.UserData = 12
		if c := waitCQEs(t, r, 1)[0]; c.Res != 0 {
			t.Fatalf("close: %+v", c)
		}
		disk, _ := os.ReadFile(dir + "/ops")
		if string(disk[:13]) != "fixedfileFFFF" || len(disk) != 1<<20 {
			t.Fatalf("file content %q len %d", disk[:13], len(disk))
		}
	})
}

// TestLinkBreaksOnShortWrite checks IOSQE_IO_LINK semantics: a failed head cancels the
// rest of the chain, a hardlink does not.
func TestLinkSemantics(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		r := openRing(t, backend, Config{Entries: 8})
		f, _ := tempFile(t)
		buf := pinnedBytes(t, "x")
		sqe := mustSQE(t, r)
		sqe.PrepWrite(-1, buf, 0) // EBADF
		sqe.SetLink()
		sqe.UserData = 1
		sqe = mustSQE(t, r)
		sqe.PrepWrite(int(f.Fd()), buf, 0)
		sqe.UserData = 2
		sqe = mustSQE(t, r)
		sqe.PrepWrite(-1, buf, 0)
		sqe.SetHardlink()
		sqe.UserData = 3
		sqe = mustSQE(t, r)
		sqe.PrepWrite(int(f.Fd()), buf, 1)
		sqe.UserData = 4
		sqe = mustSQE(t, r)
		sqe.PrepNop()
		sqe.SetDrain()
		sqe.UserData = 5
		m := byUserData(t, waitCQEs(t, r, 5))
		if m[1].Res != -int32(unix.EBADF) || m[2].Res != -int32(unix.ECANCELED) {
			t.Fatalf("link: %+v %+v", m[1], m[2])
		}
		if m[3].Res != -int32(unix.EBADF) || m[4].Res != 1 || m[5].Res != 0 {
			t.Fatalf("hardlink/drain: %+v %+v %+v", m[3], m[4], m[5])
		}
	})
}

func TestWrapAround(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		r := openRing(t, backend, Config{Entries: 4, CQEntries: 8})
		f, _ := tempFile(t)
		const total = 5000
		seen := make([]bool, total)
		written := make([]byte, total) // byte i is written at offset i; reachable until the end
		for i := range written {
			written[i] = byte(i)
		}
		buf := make([]CQE, 3)
		next, done := 0, 0
		for rounds := 0; done < total; rounds++ {
			if rounds > 100*total {
				t.Fatalf("no progress: %d of %d done", done, total)
			}
			for next < total && r.SQSpace() > 0 {
				sqe := mustSQE(t, r)
				if next%2 == 0 {
					sqe.PrepNop()
				} else {
					sqe.PrepWrite(int(f.Fd()), written[next:next+1], uint64(next))
				}
				sqe.UserData = uint64(next)
				next++
			}
			if next < total && r.GetSQE() != nil {
				t.Fatal("GetSQE returned an entry although SQSpace is 0")
			}
			if _, err := r.SubmitAndWait(1, 0); err != nil {
				t.Fatal(err)
			}
			n := r.PeekCQEs(buf)
			for _, c := range buf[:n] {
				if seen[c.UserData] {
					t.Fatalf("duplicate completion %d", c.UserData)
				}
				want := int32(0)
				if c.UserData%2 == 1 {
					want = 1
				}
				if c.Res != want {
					t.Fatalf("op %d res %d", c.UserData, c.Res)
				}
				seen[c.UserData] = true
				done++
			}
		}
	})
}

// TestCQOverflow submits far more ops than the CQ holds without reaping; every completion
// must still arrive exactly once (kernel NODROP overflow list / syscall overflow list).
func TestCQOverflow(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		r := openRing(t, backend, Config{Entries: 8, CQEntries: 8})
		const total = 200
		for i := 0; i < total; {
			sqe := r.GetSQE()
			if sqe == nil {
				if _, err := r.Submit(); err != nil {
					t.Fatalf("Submit with overflowed CQ: %v", err)
				}
				continue
			}
			sqe.PrepNop()
			sqe.UserData = uint64(i)
			i++
		}
		if _, err := r.Submit(); err != nil {
			t.Fatal(err)
		}
		// Reap with PeekCQEs alone: it must notice the overflow flag and flush the kernel's
		// overflow list itself (NODROP), 8 completions at a time.
		var all []CQE
		buf := make([]CQE, 8)
		for rounds := 0; len(all) < total && rounds < 10*total; rounds++ {
			n := r.PeekCQEs(buf)
			all = append(all, buf[:n]...)
		}
		got := byUserData(t, all)
		for i := 0; i < total; i++ {
			if _, ok := got[uint64(i)]; !ok {
				t.Fatalf("completion %d lost", i)
			}
		}
		if n := r.PeekCQEs(make([]CQE, 4)); n != 0 {
			t.Fatalf("%d extra completions", n)
		}
	})
}

func TestBadUse(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		r := openRing(t, backend, Config{Entries: 2})
		// Full SQ: nil, not a panic or a block.
		mustSQE(t, r).PrepNop()
		mustSQE(t, r).PrepNop()
		if r.GetSQE() != nil {
			t.Fatal("GetSQE on a full SQ returned an entry")
		}
		waitCQEs(t, r, 2)

		// Unsupported op through the raw ring: a -EINVAL completion, not a hang.
		sqe := mustSQE(t, r)
		*sqe = SQE{Opcode: Opcode(250), UserData: 7}
		if c := waitCQEs(t, r, 1)[0]; c.Res != -int32(unix.EINVAL) {
			t.Fatalf("unknown opcode: %+v", c)
		}

		// Through the reactor: a clear ErrUnsupported naming the op.
		re := newReactor(t, backend, Config{Entries: 2})
		err := re.Submit(func(s *SQE) { *s = SQE{Opcode: OpFutexWaitv} }, nil)
		if !errors.Is(err, ErrUnsupported) && backend == "syscall" {
			t.Fatalf("unsupported op via reactor: %v", err)
		}
		err = re.Submit(func(s *SQE) { *s = SQE{Opcode: Opcode(250)} }, nil)
		if !errors.Is(err, ErrUnsupported) {
			t.Fatalf("unknown op via reactor: %v", err)
		}
		if err := re.Ring().Probe().Require(OpRead, Opcode(250)); !errors.Is(err, ErrUnsupported) {
			t.Fatalf("Probe.Require: %v", err)
		}
		// A reactor with more ops queued than SQ entries flushes instead of failing.
		for i := 0; i < 10; i++ {
			if err := re.Submit(func(s *SQE) { s.PrepNop() }, func(int32, uint32) {}); err != nil {
				t.Fatalf("Submit %d: %v", i, err)
			}
		}
		if err := re.RunOnce(false); err != nil {
			t.Fatal(err)
		}
	})
}

// TestSubmitAndWaitTimeout: waiting with nothing in flight returns after the timeout with no
// error and no completions (ENTER_EXT_ARG on io_uring, epoll timeout on the syscall backend).
func TestSubmitAndWaitTimeout(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		r := openRing(t, backend, Config{Entries: 4})
		const wait = 20 * time.Millisecond
		start := time.Now()
		if _, err := r.SubmitAndWait(1, wait); err != nil {
			t.Fatalf("SubmitAndWait: %v", err)
		}
		if el := time.Since(start); el < wait-time.Millisecond || el > 5*time.Second {
			t.Fatalf("returned after %v, want about %v", el, wait)
		}
		if n := r.PeekCQEs(make([]CQE, 4)); n != 0 {
			t.Fatalf("%d completions from nowhere", n)
		}
	})
}

// TestSyscallRingUint32Wrap starts the syscall backend's free-running indexes just below
// 2^32 so they overflow mid-test (the kernel's io_uring indexes start at 0 and cannot be
// moved, so only the mask wrap is tested there, by TestWrapAround).
func TestSyscallRingUint32Wrap(t *testing.T) {
	r, err := newSysRing(Config{Entries: 4, CQEntries: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	const start = ^uint32(0) - 5
	r.sqHead, r.sqTail, r.cqHead, r.cqTail = start, start, start, start
	seen := map[uint64]bool{}
	buf := make([]CQE, 3)
	for i := 0; i < 40; i++ {
		sqe := r.GetSQE()
		if sqe == nil {
			t.Fatalf("op %d: SQ full", i)
		}
		sqe.PrepNop()
		sqe.UserData = uint64(i)
		if i%3 == 2 {
			if _, err := r.Submit(); err != nil {
				t.Fatal(err)
			}
			for n := r.PeekCQEs(buf); n > 0; n = r.PeekCQEs(buf) {
				for _, c := range buf[:n] {
					seen[c.UserData] = true
				}
			}
		}
	}
	r.Submit()
	for n := r.PeekCQEs(buf); n > 0; n = r.PeekCQEs(buf) {
		for _, c := range buf[:n] {
			seen[c.UserData] = true
		}
	}
	if len(seen) != 40 {
		t.Fatalf("saw %d of 40 completions", len(seen))
	}
	if want := uint32(40 - 6); r.sqHead != want || r.sqHead >= start || r.cqHead != r.cqTail {
		t.Fatalf("indexes did not wrap as expected: sqHead %d cqHead %d cqTail %d", r.sqHead, r.cqHead, r.cqTail)
	}
}

func TestRegisterBadArguments(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		r := openRing(t, backend, Config{Entries: 4})
		if err := r.RegisterBuffers(nil); err == nil {
			t.Error("RegisterBuffers(nil) accepted")
		}
		if err := r.RegisterBuffers([][]byte{make([]byte, 8), {}}); err == nil {
			t.Error("RegisterBuffers with an empty buffer accepted")
		}
		if err := r.RegisterFiles(nil); err == nil {
			t.Error("RegisterFiles(nil) accepted")
		}
		if err := r.UnregisterFiles(); err == nil {
			t.Error("UnregisterFiles without files succeeded")
		}
		if err := r.UnregisterEventfd(); err == nil {
			t.Error("UnregisterEventfd without one succeeded")
		}
	})
	// A buffer longer than one kernel transfer becomes a capped length, not a wrapped one.
	if got := bufLen(make([]byte, 10)); got != 10 {
		t.Fatalf("bufLen(10) = %d", got)
	}
	big, err := unix.Mmap(-1, 0, 3<<30, unix.PROT_READ, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
	if err != nil {
		t.Skipf("cannot reserve 3 GiB of address space: %v", err)
	}
	defer unix.Munmap(big)
	var s SQE
	s.PrepWrite(1, big, 0)
	if s.Len != rwBytesMax {
		t.Fatalf("3 GiB write prepared with Len %d, want %d", s.Len, rwBytesMax)
	}
}
