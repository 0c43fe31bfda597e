package engine

import (
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

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
		dupTargets := map[int]string{}
		for _, fd := range tk.Fds {
			dupTargets[fd], _ = os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd))
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
			if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); errors.Is(err, unix.EBADF) {
				continue
			}
			// The number was reused: EndSync's index writes open index files lazily.
			if now, _ := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd)); now == dupTargets[fd] {
				t.Fatalf("fd %d (%s) still open after EndSync", fd, now)
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

// A roll leaves the directory entry of the new segment to the next sync: the ticket carries
// the directory's descriptor until a sync has covered every roll.
func TestBeginSyncCoversTheDirectoryAfterARoll(t *testing.T) {
	cfg := testConfig(StoragePageCache)
	cfg.SegmentBytes = 4 << 10
	l, _ := openLog(t, t.TempDir(), cfg, ring.Syscalls{})
	defer l.Close()
	if _, err := l.Append(makeBatch(t, 1, 1, 100, 1000)); err != nil {
		t.Fatal(err)
	}
	tk, _, _ := l.BeginSync()
	if len(tk.Fds) != 1 || tk.dirGen != 0 {
		t.Fatalf("no roll yet: %d fds, dirGen %d; want the segment only", len(tk.Fds), tk.dirGen)
	}
	if err := l.EndSync(tk, fdatasyncAll(tk)); err != nil {
		t.Fatal(err)
	}
	for i := 0; l.SegmentCount() < 2; i++ { // fill past segment.bytes: a roll
		if _, err := l.Append(makeBatch(t, i, 4, 400, 2000)); err != nil {
			t.Fatal(err)
		}
	}
	tk, ok, err := l.BeginSync()
	if !ok || err != nil || tk.dirGen == 0 {
		t.Fatalf("after a roll: ok=%v err=%v dirGen=%d, want the directory in the ticket", ok, err, tk.dirGen)
	}
	var st unix.Stat_t
	if err := unix.Fstat(tk.Fds[len(tk.Fds)-1], &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
		t.Fatalf("last ticket fd is not the directory (mode %o, err %v)", st.Mode, err)
	}
	if err := l.EndSync(tk, fdatasyncAll(tk)); err != nil {
		t.Fatal(err)
	}
	if l.dirSyncedGen != l.dirGen {
		t.Fatalf("dirSyncedGen %d after EndSync, dirGen %d", l.dirSyncedGen, l.dirGen)
	}
	if _, ok, _ := l.BeginSync(); ok {
		t.Fatal("BeginSync with nothing unsynced and the directory synced returned a ticket")
	}
}

// Retention renames deleted segments to *.deleted and unlinks them off the owner's thread;
// OpenLog sweeps any a crash left behind.
func TestRetentionRetiresSegmentsAndOpenSweepsLeftovers(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(StoragePageCache)
	cfg.SegmentBytes = 4 << 10
	cfg.RetentionBytes = 4 << 10
	l, _ := openLog(t, dir, cfg, ring.Syscalls{})
	for i := 0; l.SegmentCount() < 4; i++ {
		if _, err := l.Append(makeBatch(t, i, 4, 400, 2000)); err != nil {
			t.Fatal(err)
		}
	}
	deleted, err := l.EnforceRetention(time.UnixMilli(3000))
	if err != nil || deleted == 0 {
		t.Fatalf("retention deleted %d segments (err %v)", deleted, err)
	}
	if _, err := os.Stat(segmentFile(dir, 0, logSuffix)); !os.IsNotExist(err) {
		t.Fatalf("segment 0 still under its name after retention: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	leftover := segmentFile(dir, 0, logSuffix) + retiredSuffix
	if err := os.WriteFile(leftover, []byte("crash leftover"), 0o644); err != nil {
		t.Fatal(err)
	}
	l, _ = openLog(t, dir, cfg, ring.Syscalls{})
	defer l.Close()
	if _, err := os.Stat(leftover); !os.IsNotExist(err) {
		t.Fatalf("OpenLog left %s behind: %v", leftover, err)
	}
	if l.StartOffset() == 0 {
		t.Fatal("log start offset did not move past the retired segments")
	}
}
