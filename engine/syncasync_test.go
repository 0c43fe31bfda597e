package engine

import (
	"errors"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ringlog/ringlog/ring"
)

// fdatasyncAll syncs a ticket's descriptors the way a shard does it on its ring.
func fdatasyncAll(t SyncTicket) error {
	for _, fd := range t.Fds {
		if err := (ring.Syscalls{}).Fdatasync(fd); err != nil {
			return err
		}
	}
	return nil
}

func TestBeginEndSyncCoversOnlyWhatWasAppended(t *testing.T) {
	forEachBackend(t, func(t *testing.T, fio ring.FileIO, mode StorageMode) {
		dir := t.TempDir()
		cfg := testConfig(mode)
		cfg.SegmentBytes = 8 << 10 // several rolls: sealed segments join the ticket
		l, _ := openLog(t, dir, cfg, fio)
		defer l.Close()
		if _, ok, err := l.BeginSync(); ok || err != nil {
			t.Fatalf("BeginSync on an empty log: ok=%v err=%v", ok, err)
		}
		for i := 0; i < 20; i++ {
			if _, err := l.Append(makeBatch(t, i, 4, 200, 1000)); err != nil {
				t.Fatal(err)
			}
		}
		tk, ok, err := l.BeginSync()
		if !ok || err != nil {
			t.Fatalf("BeginSync: ok=%v err=%v", ok, err)
		}
		if tk.Offset != 80 || len(tk.Fds) < 2 {
			t.Fatalf("ticket covers %d with %d fds, want offset 80 and the sealed segments too", tk.Offset, len(tk.Fds))
		}
		// Appends after BeginSync are not covered.
		if _, err := l.Append(makeBatch(t, 99, 4, 200, 2000)); err != nil {
			t.Fatal(err)
		}
		if err := l.EndSync(tk, fdatasyncAll(tk)); err != nil {
			t.Fatal(err)
		}
		if got := l.SyncedOffset(); got != 80 {
			t.Fatalf("SyncedOffset after EndSync = %d, want 80 (84 appended)", got)
		}
		mustInvariants(t, l)
		for _, fd := range tk.Fds { // EndSync closed the duplicates
			if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); !errors.Is(err, unix.EBADF) {
				t.Fatalf("fd %d still open after EndSync", fd)
			}
		}
		tk, ok, err = l.BeginSync()
		if !ok || err != nil || tk.Offset != 84 {
			t.Fatalf("second BeginSync: %+v ok=%v err=%v", tk.Offset, ok, err)
		}
		if err := l.EndSync(tk, fdatasyncAll(tk)); err != nil || l.SyncedOffset() != 84 {
			t.Fatalf("second EndSync: %v, synced %d", err, l.SyncedOffset())
		}
	})
}

func TestEndSyncErrorFailsTheLog(t *testing.T) {
	l, _ := openLog(t, t.TempDir(), testConfig(StoragePageCache), ring.Syscalls{})
	defer l.Close()
	if _, err := l.Append(makeBatch(t, 1, 2, 100, 1000)); err != nil {
		t.Fatal(err)
	}
	tk, _, _ := l.BeginSync()
	err := l.EndSync(tk, unix.EIO)
	if !errors.Is(err, ErrLogFailed) || !errors.Is(err, unix.EIO) {
		t.Fatalf("EndSync(EIO) = %v, want ErrLogFailed wrapping EIO", err)
	}
	if _, err := l.Append(makeBatch(t, 2, 2, 100, 1000)); !errors.Is(err, ErrLogFailed) {
		t.Fatalf("append after a failed sync: %v, want ErrLogFailed", err)
	}
	if l.SyncedOffset() != 0 {
		t.Fatalf("a failed sync advanced SyncedOffset to %d", l.SyncedOffset())
	}
}
