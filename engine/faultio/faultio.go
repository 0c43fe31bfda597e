// Package faultio wraps a ring.FileIO to break it on purpose, the seam that engine's fault
// and crash tests use: FileIO injects errors and short writes (Pebble's errorfs, for
// FileIO); CrashFS simulates a power loss, losing unsynced file data and directory entries
// (Pebble's crashable vfs). It owns nothing on disk but CrashFS's shadow directory, and must
// not be used outside tests and fault drills.
//
// A FileIO is not safe for concurrent use, like the engine log that calls it; CrashFS is.
package faultio

import (
	"fmt"

	"github.com/ringlog/ringlog/ring"
	"golang.org/x/sys/unix"
)

// Op names one FileIO method.
type Op int

const (
	OpPread Op = iota
	OpPwrite
	OpPwritev
	OpFdatasync
	OpFsync
	OpFallocate
	opCount
)

var opNames = [...]string{"pread", "pwrite", "pwritev", "fdatasync", "fsync", "fallocate"}

func (o Op) String() string {
	if o < 0 || o >= opCount {
		return fmt.Sprintf("op(%d)", int(o))
	}
	return opNames[o]
}

// Rule fails calls of Op with Errno: it skips the first After matching calls, then fails the
// next Times calls (Times <= 0: every later call).
type Rule struct {
	Op     Op
	Errno  unix.Errno
	After  int
	Times  int
	seen   int
	failed int
}

// FileIO is the error-injecting wrapper.
type FileIO struct {
	inner ring.FileIO
	rules []*Rule
	// ShortWriteBytes, when > 0, caps every Pwrite/Pwritev at this many bytes so callers'
	// short-write loops run. Use a multiple of the block size for O_DIRECT files.
	ShortWriteBytes int
	// SkipSyncs makes Fdatasync and Fsync succeed without syncing (fast tests that do not
	// test durability; crash tests must leave it off).
	SkipSyncs bool
	calls     [opCount]int
	injected  [opCount]int
}

var _ ring.FileIO = (*FileIO)(nil)

// New wraps inner.
func New(inner ring.FileIO) *FileIO { return &FileIO{inner: inner} }

// Inject adds a rule and returns it.
func (f *FileIO) Inject(r Rule) *Rule {
	f.rules = append(f.rules, &r)
	return f.rules[len(f.rules)-1]
}

// Clear removes every rule.
func (f *FileIO) Clear() { f.rules = nil }

// Calls is how many times op was called (injected failures included).
func (f *FileIO) Calls(op Op) int { return f.calls[op] }

// Injected is how many calls of op failed by injection.
func (f *FileIO) Injected(op Op) int { return f.injected[op] }

func (f *FileIO) check(op Op, fd int) error {
	f.calls[op]++
	for _, r := range f.rules {
		if r.Op != op {
			continue
		}
		r.seen++
		if r.seen <= r.After || (r.Times > 0 && r.failed >= r.Times) {
			continue
		}
		r.failed++
		f.injected[op]++
		return fmt.Errorf("%s fd %d (injected): %w", op, fd, r.Errno)
	}
	return nil
}

func (f *FileIO) Pread(fd int, p []byte, off int64) (int, error) {
	if err := f.check(OpPread, fd); err != nil {
		return 0, err
	}
	return f.inner.Pread(fd, p, off)
}

func (f *FileIO) Pwrite(fd int, p []byte, off int64) (int, error) {
	if err := f.check(OpPwrite, fd); err != nil {
		return 0, err
	}
	if f.ShortWriteBytes > 0 && len(p) > f.ShortWriteBytes {
		p = p[:f.ShortWriteBytes]
	}
	return f.inner.Pwrite(fd, p, off)
}

func (f *FileIO) Pwritev(fd int, bufs [][]byte, off int64) (int, error) {
	if err := f.check(OpPwritev, fd); err != nil {
		return 0, err
	}
	if f.ShortWriteBytes > 0 {
		var capped [][]byte
		left := f.ShortWriteBytes
		for _, b := range bufs {
			if left == 0 {
				break
			}
			n := min(len(b), left)
			capped = append(capped, b[:n])
			left -= n
		}
		bufs = capped
	}
	return f.inner.Pwritev(fd, bufs, off)
}

func (f *FileIO) Fdatasync(fd int) error {
	if err := f.check(OpFdatasync, fd); err != nil {
		return err
	}
	if f.SkipSyncs {
		return nil
	}
	return f.inner.Fdatasync(fd)
}

func (f *FileIO) Fsync(fd int) error {
	if err := f.check(OpFsync, fd); err != nil {
		return err
	}
	if f.SkipSyncs {
		return nil
	}
	return f.inner.Fsync(fd)
}

func (f *FileIO) Fallocate(fd int, mode uint32, off, size int64) error {
	if err := f.check(OpFallocate, fd); err != nil {
		return err
	}
	return f.inner.Fallocate(fd, mode, off, size)
}
