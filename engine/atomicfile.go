package engine

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/ringlog/ringlog/ring"
	"golang.org/x/sys/unix"
)

// Durable namespace operations. A file's bytes are durable after an fsync of the file; its
// name is durable only after an fsync of the directory that holds it (creation, rename and
// unlink alike), and a directory's own name after an fsync of its parent. Every such fsync
// goes through the ring.FileIO the caller owns, so faultio can fail it and faultio.CrashFS
// can tell which entries a power loss may take back.

// tmpSuffix marks the temporary file of an atomic replace; OpenLog and the catalog sweep
// remove any a crash left behind.
const tmpSuffix = ".tmp"

// writeFileAtomic replaces dir/name with data so that after a crash the file holds either
// its old contents or data, never a mix, and so that it holds data once this returns nil:
//
//  1. write dir/name.tmp (created or truncated) through fio
//  2. fsync it
//  3. rename it over dir/name
//  4. fsync dir
//
// On error before the rename the temporary file is removed and dir/name is untouched; an
// error from step 4 leaves the rename done but perhaps not durable.
func writeFileAtomic(fio ring.FileIO, dir, name string, data []byte) error {
	if err := replaceFile(fio, dir, name, data); err != nil {
		return err
	}
	return syncDir(fio, dir)
}

// replaceFile is writeFileAtomic's steps 1–3: after a crash dir/name holds its old contents
// or data, never a mix, but the new name is durable only once a later fsync of dir
// completes (the recycle pool's maps: dirsync.go).
func replaceFile(fio ring.FileIO, dir, name string, data []byte) error {
	path := filepath.Join(dir, name)
	tmp := path + tmpSuffix
	fd, err := unix.Open(tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return fmt.Errorf("write %s: open: %w", tmp, err)
	}
	werr := pwriteFull(fio, fd, data, 0)
	var serr error
	if werr == nil {
		serr = fio.Fsync(fd)
	}
	cerr := unix.Close(fd)
	if err := errors.Join(werr, serr, cerr); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("replace %s: %w", path, err)
	}
	return nil
}

// syncDir fsyncs a directory through fio so that file creations, renames and removals in it
// are durable.
func syncDir(fio ring.FileIO, dir string) error {
	return syncOpened(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, "sync dir", fio.Fsync)
}

// syncFile fdatasyncs the file at path through fio (a retired .log entering the pool of
// recycled files: usually synced long ago, and then it costs a device cache flush).
func syncFile(fio ring.FileIO, path string) error {
	return syncOpened(path, unix.O_RDONLY|unix.O_CLOEXEC, "sync", fio.Fdatasync)
}

// syncOpened opens path with flags, syncs the descriptor with sync and closes it.
func syncOpened(path string, flags int, what string, sync func(fd int) error) error {
	fd, err := unix.Open(path, flags, 0)
	if err != nil {
		return fmt.Errorf("%s %s: open: %w", what, path, err)
	}
	err = sync(fd)
	unix.Close(fd)
	if err != nil {
		return fmt.Errorf("%s %s: %w", what, path, err)
	}
	return nil
}

// mkdirDurable creates dir (its parent must exist) and fsyncs the parent, so the directory
// survives a power loss; created is false when dir already existed, and then nothing is
// synced.
func mkdirDurable(fio ring.FileIO, dir string) (created bool, err error) {
	if err := os.Mkdir(dir, 0o755); err != nil {
		if errors.Is(err, os.ErrExist) {
			if fi, serr := os.Stat(dir); serr == nil && fi.IsDir() {
				return false, nil
			}
		}
		return false, fmt.Errorf("create dir: %w", err)
	}
	if err := syncDir(fio, filepath.Dir(dir)); err != nil {
		return true, err
	}
	return true, nil
}

// removeDirDurable removes dir and everything in it so that a power loss cannot bring any of
// it back: dir is first renamed to a name ending in deletingSuffix and the parent fsynced (the
// commit point: recovery and the catalog sweep finish removing such directories), then its
// contents are unlinked and the parent fsynced again. A missing dir is not an error.
func removeDirDurable(fio ring.FileIO, dir string) error {
	doomed := dir + deletingSuffix
	if err := os.Rename(dir, doomed); err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("remove %s: %w", dir, err)
		}
		if _, serr := os.Stat(doomed); serr != nil {
			return nil // neither exists: nothing to do
		}
	}
	parent := filepath.Dir(dir)
	if err := syncDir(fio, parent); err != nil {
		return fmt.Errorf("remove %s: %w", dir, err)
	}
	if err := os.RemoveAll(doomed); err != nil {
		return fmt.Errorf("remove %s: %w", doomed, err)
	}
	return syncDir(fio, parent)
}

// deletingSuffix marks a directory whose removal has been committed (removeDirDurable).
const deletingSuffix = ".deleting"
