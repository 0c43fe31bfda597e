package faultio

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"

	"github.com/ringlog/ringlog/ring"
	"golang.org/x/sys/unix"
)

// CrashFS simulates a power loss. It wraps a FileIO and remembers, for every write that no
// fdatasync or fsync of its file has covered yet, the bytes it overwrote. Crash then undoes a
// random subset of those writes — wholly, or torn at a random byte — in any order, as a disk
// with a volatile cache may: synced data stays, unsynced data may survive, vanish, or be cut.
//
// Files are tracked by inode and reopened by path at Crash, so the caller closes its own
// descriptors first (the process "died"). Writes made outside the FileIO (ftruncate) are not
// undone. Not safe for concurrent use.
type CrashFS struct {
	inner   ring.FileIO
	files   map[fileKey]*crashFile
	crashed bool
}

type fileKey struct{ dev, ino uint64 }

type crashFile struct {
	path     string
	reader   *os.File // buffered descriptor for reading overwritten bytes (the writer may be O_DIRECT)
	baseSize int64    // size when the first unsynced write arrived
	undo     []undoRecord
}

type undoRecord struct {
	off     int64
	old     []byte // previous bytes of [off, off+len(old)), up to the old end of file
	newLen  int
	oldSize int64
}

var _ ring.FileIO = (*CrashFS)(nil)

// NewCrashFS wraps inner.
func NewCrashFS(inner ring.FileIO) *CrashFS {
	return &CrashFS{inner: inner, files: map[fileKey]*crashFile{}}
}

var errCrashed = errors.New("faultio: CrashFS used after Crash")

func (c *CrashFS) key(fd int) (fileKey, int64, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fileKey{}, 0, fmt.Errorf("faultio: fstat fd %d: %w", fd, err)
	}
	return fileKey{uint64(st.Dev), st.Ino}, st.Size, nil
}

// remember records what a write of n bytes at off is about to overwrite.
func (c *CrashFS) remember(fd int, off int64, n int) error {
	if c.crashed {
		return errCrashed
	}
	k, size, err := c.key(fd)
	if err != nil {
		return err
	}
	f := c.files[k]
	if f == nil {
		path, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
		if err != nil {
			return fmt.Errorf("faultio: path of fd %d: %w", fd, err)
		}
		r, err := os.Open(path)
		if err != nil {
			return fmt.Errorf("faultio: reopen %s: %w", path, err)
		}
		f = &crashFile{path: path, reader: r, baseSize: size}
		c.files[k] = f
	}
	if len(f.undo) == 0 {
		f.baseSize = size
	}
	oldLen := max(0, min(int64(n), size-off))
	old := make([]byte, oldLen)
	if oldLen > 0 {
		if _, err := f.reader.ReadAt(old, off); err != nil {
			return fmt.Errorf("faultio: save %s [%d,%d): %w", f.path, off, off+oldLen, err)
		}
	}
	f.undo = append(f.undo, undoRecord{off: off, old: old, newLen: n, oldSize: size})
	return nil
}

func (c *CrashFS) synced(fd int) {
	if k, _, err := c.key(fd); err == nil {
		if f := c.files[k]; f != nil {
			f.undo = nil
		}
	}
}

// Pending is the number of writes a Crash could still undo.
func (c *CrashFS) Pending() int {
	n := 0
	for _, f := range c.files {
		n += len(f.undo)
	}
	return n
}

func (c *CrashFS) Pread(fd int, p []byte, off int64) (int, error) { return c.inner.Pread(fd, p, off) }

func (c *CrashFS) Pwrite(fd int, p []byte, off int64) (int, error) {
	if err := c.remember(fd, off, len(p)); err != nil {
		return 0, err
	}
	return c.inner.Pwrite(fd, p, off)
}

func (c *CrashFS) Pwritev(fd int, bufs [][]byte, off int64) (int, error) {
	n := 0
	for _, b := range bufs {
		n += len(b)
	}
	if err := c.remember(fd, off, n); err != nil {
		return 0, err
	}
	return c.inner.Pwritev(fd, bufs, off)
}

func (c *CrashFS) Fdatasync(fd int) error {
	if err := c.inner.Fdatasync(fd); err != nil {
		return err
	}
	c.synced(fd)
	return nil
}

func (c *CrashFS) Fsync(fd int) error {
	if err := c.inner.Fsync(fd); err != nil {
		return err
	}
	c.synced(fd)
	return nil
}

func (c *CrashFS) Fallocate(fd int, mode uint32, off, size int64) error {
	return c.inner.Fallocate(fd, mode, off, size)
}

// Crash undoes a random subset of unsynced writes: each is kept (p=1/3), lost (1/3) or torn
// at a random byte (1/3); lost bytes below the old end of file get their old contents back,
// lost bytes past it become zeros, and the file ends after the last byte that survived (or
// at its size before the first unsynced write). Files that no longer exist are skipped.
func (c *CrashFS) Crash(rng *rand.Rand) error {
	c.crashed = true
	var errs []error
	for _, f := range c.files {
		errs = append(errs, f.crash(rng))
		f.reader.Close()
	}
	return errors.Join(errs...)
}

func (f *crashFile) crash(rng *rand.Rand) error {
	if len(f.undo) == 0 {
		return nil
	}
	w, err := os.OpenFile(f.path, os.O_RDWR, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("faultio: crash %s: %w", f.path, err)
	}
	defer w.Close()
	end := f.baseSize
	for i := len(f.undo) - 1; i >= 0; i-- {
		u := f.undo[i]
		keep := u.newLen
		switch rng.IntN(3) {
		case 1:
			keep = 0
		case 2:
			keep = rng.IntN(u.newLen + 1)
		}
		if keep > 0 {
			end = max(end, u.off+int64(keep))
		}
		lost := u.newLen - keep
		if lost == 0 {
			continue
		}
		restore := make([]byte, lost)
		from := u.off + int64(keep)
		if oldStart := int64(keep); oldStart < int64(len(u.old)) {
			copy(restore, u.old[oldStart:])
		}
		if _, err := w.WriteAt(restore, from); err != nil {
			return fmt.Errorf("faultio: crash %s: %w", f.path, err)
		}
	}
	if err := w.Truncate(end); err != nil {
		return fmt.Errorf("faultio: crash %s: %w", f.path, err)
	}
	return nil
}
