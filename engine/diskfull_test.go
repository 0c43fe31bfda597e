package engine

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ringlog/ringlog/ring"
	"golang.org/x/sys/unix"
)

// smallFS mounts a size-limited file system of sizeBytes on a fresh directory and
// unmounts it at cleanup: kind "tmpfs" (size=) or "ext4" (a loop-mounted image made with
// mkfs.ext4). It skips the test, saying why, where mounting is not permitted (not root, no
// CAP_SYS_ADMIN, no loop devices, no mkfs.ext4).
func smallFS(t *testing.T, kind string, sizeBytes int64) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "mnt")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	switch kind {
	case "tmpfs":
		if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size="+strconv.FormatInt(sizeBytes, 10)); err != nil {
			t.Skipf("cannot mount a %d-byte tmpfs here (%v): the full-disk test needs root or CAP_SYS_ADMIN", sizeBytes, err)
		}
	case "ext4":
		mkfs, err := exec.LookPath("mkfs.ext4")
		if err != nil {
			t.Skipf("mkfs.ext4 not installed (e2fsprogs): %v", err)
		}
		image := filepath.Join(t.TempDir(), "disk.img")
		if err := os.WriteFile(image, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(image, sizeBytes); err != nil {
			t.Fatal(err)
		}
		// No reserved blocks and no journal: the test is about free space, and a small
		// journal would take most of a few-MiB image.
		if out, err := exec.Command(mkfs, "-q", "-F", "-m", "0", "-O", "^has_journal", image).CombinedOutput(); err != nil {
			t.Skipf("mkfs.ext4 failed: %v: %s", err, out)
		}
		if out, err := exec.Command("mount", "-o", "loop", image, dir).CombinedOutput(); err != nil {
			t.Skipf("cannot loop-mount an ext4 image here (%v: %s): the full-disk test needs root and loop devices", err, strings.TrimSpace(string(out)))
		}
	default:
		t.Fatalf("unknown file system kind %q", kind)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

// fillFile writes a file of n bytes in dir: space an operator can later free.
func fillFile(t *testing.T, dir string, n int) string {
	t.Helper()
	path := filepath.Join(dir, "filler")
	if err := os.WriteFile(path, bytes.Repeat([]byte{0xaa}, n), 0o644); err != nil {
		t.Fatalf("filler: %v", err)
	}
	return path
}

// TestDiskFullIsAnOperatingCondition fills a real small file system through the log: the
// append that meets ENOSPC fails with ErrDiskFull naming the mount, the log does not fail,
// everything appended before stays readable (also after a reopen), and appends resume by
// themselves once space is freed.
func TestDiskFullIsAnOperatingCondition(t *testing.T) {
	for _, kind := range []string{"tmpfs", "ext4"} {
		t.Run(kind, func(t *testing.T) {
			mount := smallFS(t, kind, 8<<20)
			filler := fillFile(t, mount, 2<<20)
			dir := filepath.Join(mount, "topic-0")
			cfg := testConfig(StoragePageCache)
			cfg.SegmentBytes = 1 << 20
			l, _ := openLog(t, dir, cfg, ring.Syscalls{})
			defer l.Close()

			var appended [][]byte
			var full error
			for i := 0; i < 1000; i++ { // 1000 x 64 KiB is far more than the disk holds
				b := makeBatch(t, i, 4, 16<<10, int64(i))
				if _, err := l.Append(b); err != nil {
					full = err
					break
				}
				appended = append(appended, b)
				if err := l.Flush(); err != nil {
					t.Fatalf("flush: %v", err)
				}
			}
			if !errors.Is(full, ErrDiskFull) {
				t.Fatalf("append on a full disk: %v, want ErrDiskFull", full)
			}
			t.Logf("refused: %v", full)
			if !strings.Contains(full.Error(), mount) {
				t.Errorf("error %q does not name the disk %s", full, mount)
			}
			if l.Err() != nil {
				t.Fatalf("a full disk failed the log: %v", l.Err())
			}
			if err := l.Sync(); err != nil {
				t.Fatalf("sync after a full disk: %v", err)
			}
			end := l.EndOffset()
			checkBatches(t, readAll(t, l, 1<<20), appended)

			// The operator frees space: the very next append goes through.
			if err := os.Remove(filler); err != nil {
				t.Fatal(err)
			}
			more := makeBatch(t, 5000, 4, 16<<10, 5000)
			if _, err := l.Append(more); err != nil {
				t.Fatalf("append after space came back: %v", err)
			}
			if l.EndOffset() != end+4 {
				t.Fatalf("end offset %d, want %d", l.EndOffset(), end+4)
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			reopened, _ := openLog(t, dir, cfg, ring.Syscalls{})
			defer reopened.Close()
			checkBatches(t, readAll(t, reopened, 1<<20), append(appended, more))
		})
	}
}

// checkBatches compares the records section of every batch read back with what was
// appended (base offsets differ: the log assigned them).
func checkBatches(t *testing.T, got []byte, want [][]byte) {
	t.Helper()
	for i, w := range want {
		if len(got) < len(w) {
			t.Fatalf("read back %d of %d batches", i, len(want))
		}
		if !bytes.Equal(got[12:len(w)], w[12:]) { // from the length field on
			t.Fatalf("batch %d differs after a full disk", i)
		}
		got = got[len(w):]
	}
	if len(got) != 0 {
		t.Fatalf("%d bytes read beyond the appended batches", len(got))
	}
}

// TestDiskFreeMinimumRefusesEarly: with a free-space threshold, appends are refused while
// the disk still has that much free, and resume on their own (within the recheck interval
// of an injected clock) once space returns.
func TestDiskFreeMinimumRefusesEarly(t *testing.T) {
	mount := smallFS(t, "tmpfs", 8<<20)
	now := time.Unix(1_700_000_000, 0)
	clock := func() time.Time { return now }
	const freeMin = 3 << 20
	disk, err := NewDiskSpace(mount, freeMin, clock)
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(StoragePageCache)
	cfg.SegmentBytes = 1 << 20
	cfg.Disk = disk
	l, _ := openLog(t, filepath.Join(mount, "topic-0"), cfg, ring.Syscalls{})
	defer l.Close()
	filler := fillFile(t, mount, 2<<20)
	now = now.Add(time.Second) // let the guard see the filler

	var refused error
	appended := 0
	for i := 0; i < 200; i++ {
		if _, refused = l.Append(makeBatch(t, i, 4, 16<<10, int64(i))); refused != nil {
			break
		}
		appended++
	}
	if !errors.Is(refused, ErrDiskFull) || !strings.Contains(refused.Error(), "disk free minimum") || !strings.Contains(refused.Error(), mount) {
		t.Fatalf("append below the threshold: %v", refused)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(mount, &st); err != nil {
		t.Fatal(err)
	}
	if free := int64(st.Bavail) * int64(st.Bsize); free < freeMin-(128<<10) {
		t.Fatalf("refused only at %d bytes free, threshold %d", free, freeMin)
	}
	if appended == 0 || l.Err() != nil {
		t.Fatalf("appended %d batches, log error %v", appended, l.Err())
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	// Within the recheck interval the guard still acts on its old figure...
	if _, err := l.Append(makeBatch(t, 900, 4, 16<<10, 900)); !errors.Is(err, ErrDiskFull) {
		t.Fatalf("append within the recheck interval: %v", err)
	}
	// ...and after it, sees the space and lets writes through without anyone's help.
	now = now.Add(diskRecheckIntervalDefault)
	if _, err := l.Append(makeBatch(t, 901, 4, 16<<10, 901)); err != nil {
		t.Fatalf("append after space came back: %v", err)
	}
}

func TestStorageWriteErrorClassifies(t *testing.T) {
	cases := []struct {
		err  error
		want error
	}{
		{unix.ENOSPC, ErrDiskFull},
		{unix.EDQUOT, ErrDiskFull},
		{&os.PathError{Op: "write", Path: "x", Err: unix.ENOSPC}, ErrDiskFull},
		{unix.EIO, ErrStorageWrite},
		{unix.EROFS, ErrStorageWrite},
	}
	for _, tc := range cases {
		got := storageWriteError(t.TempDir(), tc.err)
		if !errors.Is(got, tc.want) || !errors.Is(got, tc.err) {
			t.Errorf("%v classified as %v, want %v", tc.err, got, tc.want)
		}
	}
}
