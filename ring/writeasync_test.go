package ring

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// TestStartWriteAwaitWrites: writes from heap memory and from a buffer registered in the
// sparse table (WRITE_FIXED) complete through their callbacks; AwaitWrites dispatches
// exactly those and leaves every other completion, and the mailbox, to the loop; a slot
// emptied by UnregisterWriteBuffer no longer writes.
func TestStartWriteAwaitWrites(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		r := newReactor(t, backend, Config{})
		a, err := NewArena(8192, 2)
		if err != nil {
			t.Fatal(err)
		}
		f, _ := tempFile(t)
		fixed, _, _ := a.Get()
		copy(fixed, bytes.Repeat([]byte("F"), 4096))
		slot, ok := r.RegisterWriteBuffer(fixed)
		if !ok {
			if backend == "uring" {
				t.Skip("no sparse fixed-buffer table on this kernel (5.19+)")
			}
			t.Fatal("RegisterWriteBuffer refused on the syscall backend")
		}
		heap := bytes.Repeat([]byte("H"), 4096)

		var got []int
		var errs []error
		done := func(n int, err error) { got, errs = append(got, n), append(errs, err) }
		nopRan, posted := false, false
		if err := r.Submit(func(s *SQE) { s.PrepNop() }, func(int32, uint32) { nopRan = true }); err != nil {
			t.Fatal(err)
		}
		if err := r.Post(func() { posted = true }); err != nil {
			t.Fatal(err)
		}
		if err := r.StartWriteFixed(int(f.Fd()), fixed[:4096], 0, slot, done); err != nil {
			t.Fatal(err)
		}
		if err := r.StartWrite(int(f.Fd()), heap, 4096, done); err != nil {
			t.Fatal(err)
		}
		if len(got) != 0 {
			t.Fatal("a write completed inside StartWrite")
		}
		if err := r.AwaitWrites(func() bool { return len(got) == 2 }); err != nil {
			t.Fatal(err)
		}
		if got[0] != 4096 || got[1] != 4096 || errs[0] != nil || errs[1] != nil {
			t.Fatalf("write results %v %v", got, errs)
		}
		if nopRan || posted {
			t.Fatalf("AwaitWrites ran another op's callback (%v) or the mailbox (%v)", nopRan, posted)
		}
		for i := 0; !(nopRan && posted) && i < 100; i++ {
			if err := r.RunOnce(false); err != nil {
				t.Fatal(err)
			}
		}
		if !nopRan || !posted {
			t.Fatal("the loop never ran what AwaitWrites left to it")
		}
		data, err := os.ReadFile(f.Name())
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(data, append(bytes.Repeat([]byte("F"), 4096), heap...)) {
			t.Fatal("file does not hold the two writes")
		}
		if st := r.Stats(); st.WritesStarted != 2 || st.WritesFixed != 1 {
			t.Fatalf("WritesStarted = %d, WritesFixed = %d", st.WritesStarted, st.WritesFixed)
		}
		r.UnregisterWriteBuffer(slot)
		var ferr error
		if err := r.StartWriteFixed(int(f.Fd()), fixed[:4096], 0, slot, func(_ int, err error) { ferr = err; got = append(got, 0) }); err != nil {
			t.Fatal(err)
		}
		if err := r.AwaitWrites(func() bool { return len(got) == 3 }); err != nil {
			t.Fatal(err)
		}
		if ferr == nil {
			t.Fatal("a write from an emptied slot succeeded")
		}
		if again, ok := r.RegisterWriteBuffer(fixed); !ok || again != slot {
			t.Fatalf("re-register: slot %d ok %v, want the freed slot %d", again, ok, slot)
		}
		// A failing write reports its errno.
		var werr error
		if err := r.StartWrite(-1, heap, 0, func(_ int, err error) { werr = err }); err != nil {
			t.Fatal(err)
		}
		if err := r.AwaitWrites(func() bool { return werr != nil }); err != nil {
			t.Fatal(err)
		}
		a.Put(fixed)
		if err := r.Ring().UnregisterBuffers(); err != nil {
			t.Fatal(err)
		}
		if err := a.Release(); err != nil {
			t.Fatal(err)
		}
	})
}

// TestStartFtruncate: IORING_OP_FTRUNCATE (and the syscall backend's inline ftruncate) cuts
// the file, completes through its callback like a write (AwaitWrites waits for it, nothing
// runs inside StartFtruncate) and reports a failure's errno.
func TestStartFtruncate(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		r := newReactor(t, backend, Config{})
		f, path := tempFile(t)
		if _, err := f.WriteAt(bytes.Repeat([]byte("x"), 8192), 0); err != nil {
			t.Fatal(err)
		}
		calls := 0
		var gotErr error
		err := r.StartFtruncate(int(f.Fd()), 5000, func(n int, err error) { calls, gotErr = calls+1, err })
		if errors.Is(err, ErrUnsupported) && backend == "uring" {
			t.Skip("IORING_OP_FTRUNCATE needs Linux 6.9")
		}
		if err != nil {
			t.Fatal(err)
		}
		if calls != 0 {
			t.Fatal("the cut completed inside StartFtruncate")
		}
		if err := r.AwaitWrites(func() bool { return calls == 1 }); err != nil {
			t.Fatal(err)
		}
		if gotErr != nil {
			t.Fatal(gotErr)
		}
		if fi, err := os.Stat(path); err != nil || fi.Size() != 5000 {
			t.Fatalf("size after the cut: %v, %v; want 5000", fi.Size(), err)
		}
		if err := r.StartFtruncate(-1, 0, func(n int, err error) { calls, gotErr = calls+1, err }); err != nil {
			t.Fatal(err)
		}
		if err := r.AwaitWrites(func() bool { return calls == 2 }); err != nil {
			t.Fatal(err)
		}
		if gotErr == nil {
			t.Fatal("a cut of fd -1 succeeded")
		}
		if err := r.StartFtruncate(int(f.Fd()), -1, nil); err == nil {
			t.Fatal("a negative size was accepted")
		}
	})
}

// TestStartFsync: the flush completes through the write path (never inside StartFsync;
// AwaitWrites waits for it), both as fsync and fdatasync, and a flush of a bad descriptor
// reports its error there.
func TestStartFsync(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		r := newReactor(t, backend, Config{})
		f, _ := tempFile(t)
		if _, err := f.WriteAt([]byte("checkpoint"), 0); err != nil {
			t.Fatal(err)
		}
		calls := 0
		var gotErr error
		done := func(n int, err error) { calls, gotErr = calls+1, err }
		for i, datasync := range []bool{false, true} {
			if err := r.StartFsync(int(f.Fd()), datasync, done); err != nil {
				t.Fatal(err)
			}
			if calls != i {
				t.Fatal("the flush completed inside StartFsync")
			}
			if err := r.AwaitWrites(func() bool { return calls == i+1 }); err != nil {
				t.Fatal(err)
			}
			if gotErr != nil {
				t.Fatalf("datasync=%v: %v", datasync, gotErr)
			}
		}
		if err := r.StartFsync(-1, false, done); err != nil {
			t.Fatal(err)
		}
		if err := r.AwaitWrites(func() bool { return calls == 3 }); err != nil {
			t.Fatal(err)
		}
		if gotErr == nil {
			t.Fatal("a flush of fd -1 succeeded")
		}
		if err := r.StartFsync(int(f.Fd()), false, nil); err == nil {
			t.Fatal("a flush with no completion was accepted")
		}
	})
}

// TestStartRename: the rename completes through the write path (never inside StartRename;
// AwaitWrites waits for it), replaces the target, and reports a failure's errno there.
func TestStartRename(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		r := newReactor(t, backend, Config{})
		dir := t.TempDir()
		from, to := filepath.Join(dir, "new.tmp"), filepath.Join(dir, "current")
		for name, data := range map[string]string{from: "new", to: "old"} {
			if err := os.WriteFile(name, []byte(data), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		calls := 0
		var gotErr error
		done := func(n int, err error) { calls, gotErr = calls+1, err }
		err := r.StartRename(from, to, done)
		if errors.Is(err, ErrUnsupported) && backend == "uring" {
			t.Skip("IORING_OP_RENAMEAT needs Linux 5.11")
		}
		if err != nil {
			t.Fatal(err)
		}
		if calls != 0 {
			t.Fatal("the rename completed inside StartRename")
		}
		forceStackMove()
		if err := r.AwaitWrites(func() bool { return calls == 1 }); err != nil {
			t.Fatal(err)
		}
		if b, err := os.ReadFile(to); gotErr != nil || err != nil || string(b) != "new" {
			t.Fatalf("after the rename: %q, %v, %v", b, err, gotErr)
		}
		if _, err := os.Stat(from); !os.IsNotExist(err) {
			t.Fatalf("the old name is still there: %v", err)
		}
		if err := r.StartRename(from, to, done); err != nil {
			t.Fatal(err)
		}
		if err := r.AwaitWrites(func() bool { return calls == 2 }); err != nil {
			t.Fatal(err)
		}
		if !errors.Is(gotErr, unix.ENOENT) {
			t.Fatalf("a rename of a missing file: %v, want ENOENT", gotErr)
		}
	})
}

// TestStartRenameNoReplace: the rename completes through the write path and renames onto a
// free name; onto an existing name it fails with EEXIST and leaves both files as they were.
func TestStartRenameNoReplace(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		r := newReactor(t, backend, Config{})
		dir := t.TempDir()
		from, free, taken := filepath.Join(dir, "spare.tmp"), filepath.Join(dir, "free"), filepath.Join(dir, "taken")
		for name, data := range map[string]string{from: "new", taken: "old"} {
			if err := os.WriteFile(name, []byte(data), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		calls := 0
		var gotErr error
		done := func(n int, err error) { calls, gotErr = calls+1, err }
		err := r.StartRenameNoReplace(from, taken, done)
		if errors.Is(err, ErrUnsupported) && backend == "uring" {
			t.Skip("IORING_OP_RENAMEAT needs Linux 5.11")
		}
		if err != nil {
			t.Fatal(err)
		}
		if calls != 0 {
			t.Fatal("the rename completed inside StartRenameNoReplace")
		}
		forceStackMove()
		if err := r.AwaitWrites(func() bool { return calls == 1 }); err != nil {
			t.Fatal(err)
		}
		if !errors.Is(gotErr, unix.EEXIST) {
			t.Fatalf("a rename onto an existing name: %v, want EEXIST", gotErr)
		}
		for name, want := range map[string]string{from: "new", taken: "old"} {
			if b, err := os.ReadFile(name); err != nil || string(b) != want {
				t.Fatalf("%s after the refused rename: %q, %v; want %q", name, b, err, want)
			}
		}
		if err := r.StartRenameNoReplace(from, free, done); err != nil {
			t.Fatal(err)
		}
		if err := r.AwaitWrites(func() bool { return calls == 2 }); err != nil {
			t.Fatal(err)
		}
		if b, err := os.ReadFile(free); gotErr != nil || err != nil || string(b) != "new" {
			t.Fatalf("after the rename: %q, %v, %v", b, err, gotErr)
		}
	})
}

// TestStartUnlink: the unlink completes through the write path (never inside StartUnlink;
// AwaitWrites waits for it), removes the name and nothing else, and reports a failure's
// errno there (a missing file, a directory). The path is the caller's string, copied and
// pinned by the reactor: the stack moves and the caller's copy is gone before the kernel
// (or the syscall backend, at the loop's next submit) reads it.
func TestStartUnlink(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		r := newReactor(t, backend, Config{})
		dir := t.TempDir()
		doomed, kept := filepath.Join(dir, "00000000000000000000.log"), filepath.Join(dir, "00000000000000000100.log")
		for _, name := range []string{doomed, kept} {
			if err := os.WriteFile(name, []byte("segment"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		calls := 0
		var gotErr error
		done := func(n int, err error) { calls, gotErr = calls+1, err }
		err := r.StartUnlink(string([]byte(doomed)), done)
		if errors.Is(err, ErrUnsupported) && backend == "uring" {
			t.Skip("IORING_OP_UNLINKAT needs Linux 5.11")
		}
		if err != nil {
			t.Fatal(err)
		}
		if calls != 0 {
			t.Fatal("the unlink completed inside StartUnlink")
		}
		if _, err := os.Stat(doomed); err != nil {
			t.Fatalf("the file went before the loop submitted its unlink: %v", err)
		}
		forceStackMove()
		runtime.GC()
		if err := r.AwaitWrites(func() bool { return calls == 1 }); err != nil {
			t.Fatal(err)
		}
		if gotErr != nil {
			t.Fatal(gotErr)
		}
		if _, err := os.Stat(doomed); !os.IsNotExist(err) {
			t.Fatalf("the file is still there: %v", err)
		}
		if _, err := os.Stat(kept); err != nil {
			t.Fatalf("the other file went too: %v", err)
		}
		for i, c := range []struct {
			path string
			want error
		}{{doomed, unix.ENOENT}, {dir, unix.EISDIR}} {
			if err := r.StartUnlink(c.path, done); err != nil {
				t.Fatal(err)
			}
			if err := r.AwaitWrites(func() bool { return calls == i+2 }); err != nil {
				t.Fatal(err)
			}
			if !errors.Is(gotErr, c.want) {
				t.Fatalf("unlink of %s: %v, want %v", c.path, gotErr, c.want)
			}
		}
		if err := r.StartUnlink(kept, nil); err == nil {
			t.Fatal("an unlink with no completion was accepted")
		}
		if err := r.StartUnlink("a\x00b", done); err == nil {
			t.Fatal("a path with a NUL byte was accepted")
		}
	})
}

// TestStartOpen: the open completes through the write path (never inside StartOpen;
// AwaitWrites waits for it) with a descriptor that is the caller's (O_CREAT|O_TRUNC
// creates and empties, as open(2) does; the descriptor writes), and reports a failure's
// errno there (O_EXCL on an existing file, a missing directory).
func TestStartOpen(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		r := newReactor(t, backend, Config{})
		dir := t.TempDir()
		path := filepath.Join(dir, "log-start-offset.tmp")
		if err := os.WriteFile(path, []byte("an older, longer temporary file"), 0o600); err != nil {
			t.Fatal(err)
		}
		calls, fd := 0, -1
		var gotErr error
		done := func(n int, err error) { calls, fd, gotErr = calls+1, n, err }
		if err := r.StartOpen(string([]byte(path)), unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC|unix.O_CLOEXEC, 0o644, done); err != nil {
			t.Fatal(err)
		}
		if calls != 0 {
			t.Fatal("the open completed inside StartOpen")
		}
		forceStackMove()
		runtime.GC()
		if err := r.AwaitWrites(func() bool { return calls == 1 }); err != nil {
			t.Fatal(err)
		}
		if gotErr != nil || fd < 0 {
			t.Fatalf("open: fd %d, %v", fd, gotErr)
		}
		if _, err := unix.Write(fd, []byte("42")); err != nil {
			t.Fatal(err)
		}
		flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
		if err != nil || flags&unix.FD_CLOEXEC == 0 {
			t.Fatalf("descriptor flags %#x, %v: O_CLOEXEC lost", flags, err)
		}
		unix.Close(fd)
		if b, err := os.ReadFile(path); err != nil || string(b) != "42" {
			t.Fatalf("after open, write: %q, %v (O_TRUNC not applied?)", b, err)
		}
		for i, c := range []struct {
			path  string
			flags int
			want  error
		}{
			{path, unix.O_WRONLY | unix.O_CREAT | unix.O_EXCL | unix.O_CLOEXEC, unix.EEXIST},
			{filepath.Join(dir, "missing", "x.tmp"), unix.O_WRONLY | unix.O_CREAT | unix.O_CLOEXEC, unix.ENOENT},
		} {
			if err := r.StartOpen(c.path, c.flags, 0o644, done); err != nil {
				t.Fatal(err)
			}
			if err := r.AwaitWrites(func() bool { return calls == i+2 }); err != nil {
				t.Fatal(err)
			}
			if !errors.Is(gotErr, c.want) {
				t.Fatalf("open of %s: fd %d, %v, want %v", c.path, fd, gotErr, c.want)
			}
		}
		if err := r.StartOpen(path, unix.O_RDONLY, 0, nil); err == nil {
			t.Fatal("an open with no completion was accepted")
		}
	})
}

// TestAwaitWritesBehindCallerInBatch: a callback that calls AwaitWrites (engine's direct
// mode rolling a segment inside a produce handled on the connection's own loop) may run
// from a reap batch that already holds, behind it, the completion of the very write it
// waits for. That completion is out of the kernel's queue; AwaitWrites must take it from
// the batch instead of waiting in the kernel for a completion that never comes again (the
// shard hung: TestKill9FlushAlways/direct-small-segments).
func TestAwaitWritesBehindCallerInBatch(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		r := newReactor(t, backend, Config{})
		f, _ := tempFile(t)
		buf := bytes.Repeat([]byte("W"), 4096)
		writes, gaveUp, ran := 0, false, false
		callerRan := func(int32, uint32) {
			ran = true
			if writes != 0 {
				t.Fatal("set-up: the write completed before the waiting callback ran")
			}
			evals := 0
			err := r.AwaitWrites(func() bool {
				if writes > 0 {
					return true
				}
				if evals++; evals == 1 {
					// Before the fix AwaitWrites waited in the kernel here for ever: this
					// no-op's completion ends that wait, and the next call gives up.
					if err := r.Submit(func(s *SQE) { s.PrepNop() }, nil); err != nil {
						t.Error(err)
					}
					return false
				}
				gaveUp = true
				return true
			})
			if err != nil {
				t.Error(err)
			}
		}
		if err := r.Submit(func(s *SQE) { s.PrepNop() }, callerRan); err != nil {
			t.Fatal(err)
		}
		// The no-op's completion is posted before the write is submitted: in one submission
		// a kernel without DEFER_TASKRUN may post a write punted to its workers ahead of the
		// no-op's completion, which waits in the submitter's batch (CI's kernel did).
		for i := 0; i < 100; i++ { // bounded: a signal may end a wait early
			if _, err := r.Ring().SubmitAndWait(1, 0); err != nil {
				t.Fatal(err)
			}
		}
		if err := r.StartWrite(int(f.Fd()), buf, 0, func(n int, err error) {
			if n != len(buf) || err != nil {
				t.Errorf("write: %d, %v", n, err)
			}
			writes++
		}); err != nil {
			t.Fatal(err)
		}
		// Both completions wait in the queue: the loop's next turn reaps them as one batch,
		// the no-op first.
		for i := 0; i < 100; i++ {
			if _, err := r.Ring().SubmitAndWait(2, 0); err != nil {
				t.Fatal(err)
			}
		}
		for i := 0; !ran && i < 100; i++ {
			if err := r.RunOnce(false); err != nil {
				t.Fatal(err)
			}
		}
		if !ran {
			t.Fatal("the no-op's callback never ran")
		}
		if gaveUp || writes != 1 {
			t.Fatalf("AwaitWrites in a callback did not see the write completion behind it in the reap batch (writes dispatched: %d, gave up: %v)", writes, gaveUp)
		}
		for range 10 { // the loop must not dispatch that completion a second time
			if err := r.RunOnce(false); err != nil {
				t.Fatal(err)
			}
		}
		if writes != 1 {
			t.Fatalf("write completion dispatched %d times", writes)
		}
	})
}
