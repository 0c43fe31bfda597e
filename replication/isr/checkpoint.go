package isr

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// The leader-epoch checkpoint file, one per partition replica (Kafka's
// leader-epoch-checkpoint), is text so that an operator can read it:
//
//	0            <- format version (checkpointVersion)
//	3            <- number of entries
//	0 0          <- epoch start-offset, one entry per line, strictly increasing in both
//	2 1500
//	5 9001
//
// Lines end with '\n'; fields are separated by one space; numbers are decimal without
// signs or leading zeros. The version and the layout are part of the on-disk format and must
// not change; a new layout takes a new version number.
//
// WriteCheckpoint writes the whole file to path.tmp, fsyncs it, renames it over the old one
// and fsyncs the directory, so that a crash leaves either the old file or the new one, never
// a torn one.

const (
	checkpointVersion = 0
	// checkpointEntriesMax bounds what ReadCheckpoint accepts, so that a corrupt count
	// cannot make it allocate without limit. A partition gets one entry per leader change;
	// a million leader changes is far beyond any real partition's life.
	checkpointEntriesMax = 1 << 20
	// checkpointBytesMax bounds the file size read: entriesMax lines of at most two
	// 20-digit numbers and two separators, plus the header.
	checkpointBytesMax = checkpointEntriesMax*42 + 64
)

// ErrCorruptCheckpoint is returned by ReadCheckpoint for a file that does not follow the
// format.
var ErrCorruptCheckpoint = errors.New("corrupt leader-epoch checkpoint")

// EncodeCheckpoint returns the checkpoint file's bytes for entries.
func EncodeCheckpoint(entries []EpochEntry) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%d\n%d\n", checkpointVersion, len(entries))
	for _, e := range entries {
		fmt.Fprintf(&b, "%d %d\n", e.Epoch, e.StartOffset)
	}
	return b.Bytes()
}

// DecodeCheckpoint parses a checkpoint file's bytes. Every deviation from the format is
// ErrCorruptCheckpoint.
func DecodeCheckpoint(data []byte) ([]EpochEntry, error) {
	if len(data) > checkpointBytesMax {
		return nil, fmt.Errorf("%d bytes over the %d-byte limit: %w", len(data), checkpointBytesMax, ErrCorruptCheckpoint)
	}
	if len(data) == 0 || data[len(data)-1] != '\n' {
		return nil, fmt.Errorf("missing final newline: %w", ErrCorruptCheckpoint)
	}
	lines := strings.Split(string(data[:len(data)-1]), "\n")
	if len(lines) < 2 {
		return nil, fmt.Errorf("%d lines, want a header of 2: %w", len(lines), ErrCorruptCheckpoint)
	}
	version, err := parseField(lines[0], 31)
	if err != nil || version != checkpointVersion {
		return nil, fmt.Errorf("version line %q: %w", lines[0], ErrCorruptCheckpoint)
	}
	count, err := parseField(lines[1], 31)
	if err != nil || count > checkpointEntriesMax || int(count) != len(lines)-2 {
		return nil, fmt.Errorf("count line %q with %d entry lines: %w", lines[1], len(lines)-2, ErrCorruptCheckpoint)
	}
	entries := make([]EpochEntry, 0, count)
	for i, line := range lines[2:] {
		epochText, offsetText, ok := strings.Cut(line, " ")
		if !ok {
			return nil, fmt.Errorf("entry %d %q: %w", i, line, ErrCorruptCheckpoint)
		}
		epoch, err1 := parseField(epochText, 31)
		offset, err2 := parseField(offsetText, 63)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("entry %d %q: %w", i, line, ErrCorruptCheckpoint)
		}
		entries = append(entries, EpochEntry{Epoch: int32(epoch), StartOffset: offset})
	}
	if err := validEntries(entries); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCorruptCheckpoint, err)
	}
	return entries, nil
}

// parseField parses a canonical non-negative decimal of at most bits bits.
func parseField(s string, bits int) (int64, error) {
	if s == "" || (len(s) > 1 && s[0] == '0') || s[0] == '+' || s[0] == '-' {
		return 0, strconv.ErrSyntax
	}
	v, err := strconv.ParseInt(s, 10, bits+1)
	if err != nil {
		return 0, err
	}
	return v, nil
}

// FileSyncer is the part of ring.FileIO the checkpoint writer uses, so that the broker can
// pass its own FileIO (and tests engine/faultio's CrashFS) without this package importing
// ring.
type FileSyncer interface {
	Pwrite(fd int, p []byte, off int64) (int, error)
	Fsync(fd int) error
}

// syscalls is the FileSyncer of plain system calls.
type syscalls struct{}

func (syscalls) Pwrite(fd int, p []byte, off int64) (int, error) {
	for {
		n, err := unix.Pwrite(fd, p, off)
		if err != unix.EINTR {
			return n, err
		}
	}
}

func (syscalls) Fsync(fd int) error {
	for {
		if err := unix.Fsync(fd); err != unix.EINTR {
			return err
		}
	}
}

// checkpointTmpSuffix names the temporary file of WriteCheckpoint; a crash may leave one,
// which the next write truncates and replaces.
const checkpointTmpSuffix = ".tmp"

// WriteCheckpoint replaces the checkpoint at path with entries, atomically and durably,
// with plain system calls (see WriteCheckpointFS).
func WriteCheckpoint(path string, entries []EpochEntry) error {
	return WriteCheckpointFS(syscalls{}, path, entries)
}

// WriteCheckpointFS replaces the checkpoint at path with entries so that after a crash the
// file holds either its old entries or the new ones, and the new ones once this returns
// nil: write path.tmp, fsync it, rename it over path, fsync the directory, the writes and
// fsyncs through fs.
func WriteCheckpointFS(fs FileSyncer, path string, entries []EpochEntry) error {
	if err := validEntries(entries); err != nil {
		return fmt.Errorf("write checkpoint %s: %w", path, err)
	}
	tmp := path + checkpointTmpSuffix
	fd, err := unix.Open(tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return fmt.Errorf("write checkpoint %s: %w", tmp, err)
	}
	data := EncodeCheckpoint(entries)
	var werr error
	for off := 0; off < len(data) && werr == nil; {
		var n int
		n, werr = fs.Pwrite(fd, data[off:], int64(off))
		if werr == nil && n == 0 {
			werr = io.ErrShortWrite
		}
		off += n
	}
	if werr == nil {
		werr = fs.Fsync(fd)
	}
	if err := errors.Join(werr, unix.Close(fd)); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write checkpoint %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("replace checkpoint %s: %w", path, err)
	}
	dir := filepath.Dir(path)
	dfd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open checkpoint directory %s: %w", dir, err)
	}
	err = fs.Fsync(dfd)
	unix.Close(dfd)
	if err != nil {
		return fmt.Errorf("fsync checkpoint directory %s: %w", dir, err)
	}
	return nil
}

// ReadCheckpoint reads the checkpoint at path. A missing file is an empty cache (a new
// replica); any other failure is an error, ErrCorruptCheckpoint for a malformed file.
func ReadCheckpoint(path string) ([]EpochEntry, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read checkpoint: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(bufio.NewReader(f), checkpointBytesMax+1))
	if err != nil {
		return nil, fmt.Errorf("read checkpoint %s: %w", path, err)
	}
	entries, err := DecodeCheckpoint(data)
	if err != nil {
		return nil, fmt.Errorf("read checkpoint %s: %w", path, err)
	}
	return entries, nil
}
