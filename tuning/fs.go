package tuning

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// Roots says where the kernel's /sys and /proc trees are. Every path the package reads or
// writes is a logical path beginning with /sys or /proc (as shown to operators, and as kept in
// a plan) and is mapped onto these roots, so tests and `--sys-root`/`--proc-root` can point at a
// fixture tree.
type Roots struct {
	Sys  string `json:"sys"`
	Proc string `json:"proc"`
}

// DefaultRoots are the live kernel trees.
func DefaultRoots() Roots { return Roots{Sys: "/sys", Proc: "/proc"} }

// Live reports whether either root is the live kernel tree.
// A root that is a symlink to the live tree counts as live.
func (r Roots) Live() bool {
	return isLiveTree(r.Sys, "/sys") || isLiveTree(r.Proc, "/proc")
}

func isLiveTree(root, live string) bool {
	if filepath.Clean(root) == live {
		return true
	}
	resolved, err := filepath.EvalSymlinks(root)
	return err == nil && resolved == live
}

// ErrBadPath reports a logical path outside /sys and /proc, or one that climbs out of them.
var ErrBadPath = errors.New("path outside /sys and /proc")

// Resolve maps a logical path ("/sys/block/vda/queue/scheduler") onto the roots.
func (r Roots) Resolve(logical string) (string, error) {
	if err := checkLogical(logical); err != nil {
		return "", err
	}
	if rest, ok := strings.CutPrefix(logical, "/sys"); ok {
		return filepath.Join(r.Sys, filepath.FromSlash(rest)), nil
	}
	rest, _ := strings.CutPrefix(logical, "/proc")
	return filepath.Join(r.Proc, filepath.FromSlash(rest)), nil
}

func checkLogical(logical string) error {
	if path.Clean(logical) != logical || strings.Contains(logical, "\x00") {
		return fmt.Errorf("%w: %q is not a clean absolute path", ErrBadPath, logical)
	}
	if logical != "/sys" && logical != "/proc" &&
		!strings.HasPrefix(logical, "/sys/") && !strings.HasPrefix(logical, "/proc/") {
		return fmt.Errorf("%w: %q", ErrBadPath, logical)
	}
	return nil
}

// FileSystem is what discovery reads through. The default is the operating system; tests wrap
// it to inject faults (unreadable files) the way Pebble's errorfs does.
type FileSystem interface {
	ReadFile(name string) ([]byte, error)
	ReadDir(name string) ([]fs.DirEntry, error)
	Lstat(name string) (fs.FileInfo, error)
	Readlink(name string) (string, error)
}

type osFS struct{}

// ReadFile reads at most fileBytesMax+1 bytes, so a huge file in a fake tree cannot make
// discovery allocate without bound; the caller reports the overflow.
func (osFS) ReadFile(name string) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, fileBytesMax+1))
	if err != nil {
		return nil, &fs.PathError{Op: "read", Path: name, Err: err}
	}
	return data, nil
}

func (osFS) ReadDir(name string) ([]fs.DirEntry, error) { return os.ReadDir(name) }
func (osFS) Lstat(name string) (fs.FileInfo, error)     { return os.Lstat(name) }
func (osFS) Readlink(name string) (string, error)       { return os.Readlink(name) }

// fileBytesMax bounds any single sysfs/procfs file we read. /proc/interrupts on a 256-CPU
// host with a few hundred IRQs is ~1 MiB; 16 MiB leaves room without trusting the file.
const fileBytesMax = 16 << 20

// symlinkHopsMax bounds symlink chains while resolving a device path (the kernel's own limit
// is 40).
const symlinkHopsMax = 40

// reader reads logical paths through a FileSystem and, when rec is set, records what it read
// so that Snapshot can write a fixture tree holding exactly the files discovery needs.
type reader struct {
	roots Roots
	fsys  FileSystem
	rec   *recorder
}

func (r *reader) resolve(logical string) (string, error) { return r.roots.Resolve(logical) }

// readFile reads a whole file. Errors name the logical path.
func (r *reader) readFile(logical string) ([]byte, error) {
	real, err := r.resolve(logical)
	if err != nil {
		return nil, err
	}
	data, err := r.fsys.ReadFile(real)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", logical, err)
	}
	if len(data) > fileBytesMax {
		return nil, fmt.Errorf("read %s: %d bytes, more than %d", logical, len(data), fileBytesMax)
	}
	r.rec.file(logical, data)
	return data, nil
}

// readString reads a file and trims surrounding white space.
func (r *reader) readString(logical string) (string, error) {
	data, err := r.readFile(logical)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(data)), nil
}

// readOptional is readString for files that may legitimately be absent (or, like xps_cpus
// on a single-queue NIC, refuse to be read with ENOENT). ok is false when the file is absent.
func (r *reader) readOptional(logical string) (value string, ok bool, err error) {
	value, err = r.readString(logical)
	if errors.Is(err, fs.ErrNotExist) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	return value, true, nil
}

func (r *reader) readDir(logical string) ([]fs.DirEntry, error) {
	real, err := r.resolve(logical)
	if err != nil {
		return nil, err
	}
	entries, err := r.fsys.ReadDir(real)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", logical, err)
	}
	r.rec.dir(logical)
	return entries, nil
}

func (r *reader) exists(logical string) bool {
	real, err := r.resolve(logical)
	if err != nil {
		return false
	}
	_, err = r.fsys.Lstat(real)
	return err == nil
}

// resolveLinks follows symlinks in the last path element (as in /sys/class/net/eth0 or
// /sys/block/nvme0n1, whose targets are relative links into /sys/devices) and returns the
// logical path of the device directory. The result must stay inside the same root.
func (r *reader) resolveLinks(logical string) (string, error) {
	current := logical
	for range symlinkHopsMax {
		if strings.HasPrefix(current, "/sys/devices/virtual/") {
			return current, nil // callers skip virtual devices; a snapshot does not copy them
		}
		real, err := r.resolve(current)
		if err != nil {
			return "", err
		}
		info, err := r.fsys.Lstat(real)
		if err != nil {
			return "", fmt.Errorf("resolve %s: %w", logical, err)
		}
		if info.Mode()&fs.ModeSymlink == 0 {
			return current, nil
		}
		target, err := r.fsys.Readlink(real)
		if err != nil {
			return "", fmt.Errorf("resolve %s: %w", logical, err)
		}
		r.rec.link(current, target)
		next := target
		if !path.IsAbs(target) {
			next = path.Join(path.Dir(current), target)
		}
		if err := checkLogical(next); err != nil {
			return "", fmt.Errorf("resolve %s: link %q leaves the tree: %w", logical, target, err)
		}
		current = next
	}
	return "", fmt.Errorf("resolve %s: more than %d symlinks", logical, symlinkHopsMax)
}

// recorder remembers files, directories and links read during discovery. A nil recorder
// records nothing.
type recorder struct {
	files map[string][]byte
	dirs  map[string]bool
	links map[string]string
}

func newRecorder() *recorder {
	return &recorder{files: map[string][]byte{}, dirs: map[string]bool{}, links: map[string]string{}}
}

func (rec *recorder) file(logical string, data []byte) {
	if rec != nil {
		rec.files[logical] = append([]byte(nil), data...)
	}
}

func (rec *recorder) dir(logical string) {
	if rec != nil {
		rec.dirs[logical] = true
	}
}

func (rec *recorder) link(logical, target string) {
	if rec != nil {
		rec.links[logical] = target
	}
}
