package engine

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Storage write failures. A full disk is an operating condition, not a failure of the log:
// the write that met it is undone (the segment is cut back to where it was), nothing
// acknowledged is touched, reads go on, and the next append simply tries again, so writes
// resume by themselves once retention or an operator frees space.
var (
	// ErrDiskFull: an append was refused because the data disk is full (ENOSPC, EDQUOT) or
	// its free space is below the configured threshold (DiskSpace.FreeMinBytes). The error
	// text names the directory, its mount point and the free bytes.
	ErrDiskFull = errors.New("data disk full")
	// ErrStorageWrite: a segment write failed with an I/O error other than a full disk
	// (EIO, EROFS, ...). The write was undone; the log stays writable.
	ErrStorageWrite = errors.New("segment write failed")
)

// storageWriteError classifies a failed segment write or segment creation in dir.
func storageWriteError(dir string, err error) error {
	if errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT) {
		return fmt.Errorf("%w: %s on %s: %w", ErrDiskFull, dir, mountPoint(dir), err)
	}
	return fmt.Errorf("%w: %s: %w", ErrStorageWrite, dir, err)
}

// Disk-space check defaults.
const (
	// diskRecheckIntervalDefault bounds how stale the statfs figure a DiskSpace acts on can
	// be. Between checks the bytes appended are subtracted from it, so a burst cannot run
	// past the threshold unseen; at most one statfs (a few microseconds) per interval per
	// data directory, whatever the append rate.
	diskRecheckIntervalDefault = 100 * time.Millisecond
)

// DiskSpace refuses appends while the file system holding a data directory has fewer than
// FreeMinBytes free (Kafka has no such knob; brokers that fill a disk to the last byte
// fail their log directory). One DiskSpace serves every log of a data directory and is safe
// for concurrent use by all shards: the figure is an atomic, refreshed with statfs at most
// once per recheck interval and lowered by every reservation in between.
type DiskSpace struct {
	dir          string
	mount        string
	freeMinBytes int64
	recheck      time.Duration
	clock        func() time.Time

	free      atomic.Int64 // estimated free bytes: last statfs minus reservations since
	checkedAt atomic.Int64 // clock time of the last statfs, unix nanoseconds
	mu        sync.Mutex   // serialises statfs refreshes; never held on the fast path, never waited for by Reserve
}

// NewDiskSpace returns the free-space guard for dir, refusing appends that would leave
// fewer than freeMinBytes free (0: refuse only when the disk is actually full). clock nil
// means time.Now.
func NewDiskSpace(dir string, freeMinBytes int64, clock func() time.Time) (*DiskSpace, error) {
	if freeMinBytes < 0 {
		return nil, fmt.Errorf("disk free minimum %d bytes is negative", freeMinBytes)
	}
	if clock == nil {
		clock = time.Now
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("disk space of %s: %w", dir, err)
	}
	d := &DiskSpace{dir: dir, mount: mountPoint(dir), freeMinBytes: freeMinBytes,
		recheck: diskRecheckIntervalDefault, clock: clock}
	if err := d.refresh(); err != nil {
		return nil, err
	}
	return d, nil
}

// FreeMinBytes is the threshold below which appends are refused.
func (d *DiskSpace) FreeMinBytes() int64 { return d.freeMinBytes }

// FreeBytes is the current estimate of free bytes available to the broker.
func (d *DiskSpace) FreeBytes() int64 { return d.free.Load() }

// Mount is the mount point of the file system holding the data directory.
func (d *DiskSpace) Mount() string { return d.mount }

// Reserve accounts for an append of n bytes, or refuses it with ErrDiskFull when the
// estimate (re-read from the file system when stale, or when it says no) would fall below
// FreeMinBytes. A refusal re-reads statfs at most once per recheck interval, so appends
// resume within that interval of space coming back.
func (d *DiskSpace) Reserve(n int64) error {
	now := d.clock().UnixNano()
	if now-d.checkedAt.Load() >= int64(d.recheck) {
		if err := d.refreshUnlessBusy(); err != nil {
			return err
		}
	}
	if d.free.Add(-n) >= d.freeMinBytes {
		return nil
	}
	d.free.Add(n)
	return fmt.Errorf("%w: %s on %s has %d bytes free, an append of %d bytes would go below disk free minimum %d bytes",
		ErrDiskFull, d.dir, d.mount, d.free.Load(), n, d.freeMinBytes)
}

// Release gives back a reservation whose write failed.
func (d *DiskSpace) Release(n int64) { d.free.Add(n) }

// refreshUnlessBusy is refresh for Reserve: when another goroutine is refreshing already
// (another shard, a zeroing job), the caller goes on with the estimate it has instead of
// waiting for that statfs. A shard loop must not wait on a mutex: its thread is locked, so
// the runtime parks it, hands its P to another thread and must wake it again
// (docs/benchmarks.md, "Session 12: what parks the shard threads"). The estimate is at most
// one recheck interval old and still lowered by every reservation.
func (d *DiskSpace) refreshUnlessBusy() error {
	if !d.mu.TryLock() {
		return nil
	}
	defer d.mu.Unlock()
	if d.clock().UnixNano()-d.checkedAt.Load() < int64(d.recheck) {
		return nil // refreshed by another goroutine since the caller looked
	}
	return d.refreshLocked()
}

// refresh reads statfs and replaces the estimate.
func (d *DiskSpace) refresh() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.refreshLocked()
}

func (d *DiskSpace) refreshLocked() error {
	var st unix.Statfs_t
	if err := unix.Statfs(d.dir, &st); err != nil {
		return fmt.Errorf("%w: statfs %s: %w", ErrStorageWrite, d.dir, err)
	}
	d.free.Store(int64(st.Bavail) * int64(st.Bsize))
	d.checkedAt.Store(d.clock().UnixNano())
	return nil
}

// mountPoint walks up from dir to the last ancestor on the same device: the mount point an
// operator recognises ("/var/lib/ringlog"), for error messages. It falls back to dir.
func mountPoint(dir string) string {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return dir
	}
	device := func(path string) (uint64, bool) {
		info, err := os.Stat(path)
		if err != nil {
			return 0, false
		}
		st, ok := info.Sys().(*syscall.Stat_t)
		if !ok {
			return 0, false
		}
		return uint64(st.Dev), true
	}
	dev, ok := device(abs)
	for ok {
		parent := filepath.Dir(abs)
		if parent == abs {
			break
		}
		parentDev, parentOK := device(parent)
		if !parentOK || parentDev != dev {
			break
		}
		abs = parent
	}
	return abs
}
