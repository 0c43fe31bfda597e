package faultio

import (
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/ringlog/ringlog/ring"
	"golang.org/x/sys/unix"
)

func openTemp(t *testing.T) (*os.File, string) {
	path := filepath.Join(t.TempDir(), "f")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f, path
}

func TestRuleAfterAndTimes(t *testing.T) {
	f, _ := openTemp(t)
	fio := New(ring.Syscalls{})
	fio.Inject(Rule{Op: OpPwrite, Errno: unix.ENOSPC, After: 2, Times: 2})
	var got []bool
	for i := 0; i < 6; i++ {
		_, err := fio.Pwrite(int(f.Fd()), []byte("x"), int64(i))
		if err != nil && !errors.Is(err, unix.ENOSPC) {
			t.Fatal(err)
		}
		got = append(got, err != nil)
	}
	want := []bool{false, false, true, true, false, false}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("failures %v, want %v", got, want)
		}
	}
	if fio.Calls(OpPwrite) != 6 || fio.Injected(OpPwrite) != 2 {
		t.Fatalf("calls %d injected %d", fio.Calls(OpPwrite), fio.Injected(OpPwrite))
	}
	fio.Inject(Rule{Op: OpFdatasync, Errno: unix.EIO})
	if err := fio.Fdatasync(int(f.Fd())); !errors.Is(err, unix.EIO) {
		t.Fatalf("fdatasync: %v", err)
	}
	fio.Clear()
	if err := fio.Fdatasync(int(f.Fd())); err != nil {
		t.Fatalf("after Clear: %v", err)
	}
}

func TestShortWrites(t *testing.T) {
	f, _ := openTemp(t)
	fio := New(ring.Syscalls{})
	fio.ShortWriteBytes = 3
	n, err := fio.Pwritev(int(f.Fd()), [][]byte{[]byte("ab"), []byte("cdef")}, 0)
	if err != nil || n != 3 {
		t.Fatalf("pwritev wrote %d, %v; want 3", n, err)
	}
}

// TestCrashUndoesOnlyUnsyncedWrites: synced bytes always survive a Crash; over many seeds
// unsynced writes are sometimes kept, sometimes lost, sometimes torn.
func TestCrashUndoesOnlyUnsyncedWrites(t *testing.T) {
	outcomes := map[string]bool{}
	for seed := uint64(0); seed < 40; seed++ {
		f, path := openTemp(t)
		c := NewCrashFS(ring.Syscalls{})
		fd := int(f.Fd())
		if _, err := c.Pwrite(fd, []byte("synced-"), 0); err != nil {
			t.Fatal(err)
		}
		if err := c.Fdatasync(fd); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Pwritev(fd, [][]byte{[]byte("unsynced")}, 7); err != nil {
			t.Fatal(err)
		}
		if c.Pending() != 1 {
			t.Fatalf("pending %d", c.Pending())
		}
		f.Close()
		if err := c.Crash(rand.New(rand.NewPCG(seed, 1))); err != nil {
			t.Fatal(err)
		}
		b, _ := os.ReadFile(path)
		if len(b) < 7 || string(b[:7]) != "synced-" {
			t.Fatalf("synced bytes damaged: %q", b)
		}
		switch rest := string(b[7:]); {
		case rest == "unsynced":
			outcomes["kept"] = true
		case rest == "":
			outcomes["lost"] = true
		case rest == "unsynced"[:len(rest)]:
			outcomes["torn"] = true
		default:
			t.Fatalf("crash left %q", b)
		}
	}
	if len(outcomes) != 3 {
		t.Fatalf("outcomes %v, want kept, lost and torn", outcomes)
	}
	if _, err := NewCrashFS(ring.Syscalls{}).Pwrite(-1, nil, 0); err == nil {
		t.Fatal("write to a bad fd succeeded")
	}
}

// TestCrashTearingTearsWhereTold: CrashTearing keeps exactly the leading bytes Tear asks for
// of each unsynced write (the old bytes come back after them), and sees the file's current
// name although the file was renamed after its first write.
func TestCrashTearingTearsWhereTold(t *testing.T) {
	f, path := openTemp(t)
	c := NewCrashFS(ring.Syscalls{})
	fd := int(f.Fd())
	if _, err := c.Pwrite(fd, []byte("old-old-old-"), 0); err != nil {
		t.Fatal(err)
	}
	if err := c.Fdatasync(fd); err != nil {
		t.Fatal(err)
	}
	renamed := path + ".renamed"
	if err := os.Rename(path, renamed); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Pwrite(fd, []byte("NEW-NEW-"), 2); err != nil {
		t.Fatal(err)
	}
	f.Close()
	var seen string
	err := c.CrashTearing(func(p string, off int64, n int) int {
		seen = p
		if off != 2 || n != 8 {
			t.Errorf("write at %d of %d bytes, want 2 and 8", off, n)
		}
		return 5
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if seen != renamed {
		t.Fatalf("Tear saw %q, want %q", seen, renamed)
	}
	if b, _ := os.ReadFile(renamed); string(b) != "olNEW-N-old-" {
		t.Fatalf("file %q after the tear", b)
	}
}
