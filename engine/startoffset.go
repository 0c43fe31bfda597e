package engine

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// The log start offset checkpoint: DeleteRecordsBefore can move the start offset into the
// middle of a segment, which the segment files alone cannot express. It is one line of text,
// replaced atomically (temp file, fsync, rename, fsync dir):
//
//	v1 <start offset>\n
//
// It is only written when the start offset is above the first segment's base; on open it is
// used when it lies within the recovered log, and ignored (with a log line) otherwise.
const (
	startOffsetFileName = "log-start-offset"
	startOffsetFileMax  = 64 // bytes; far more than "v1 " + 19 digits + "\n"
)

var errStartOffsetCorrupt = errors.New("log start offset checkpoint corrupt")

func decodeStartOffset(b []byte) (int64, error) {
	if len(b) > startOffsetFileMax {
		return 0, fmt.Errorf("%w: %d bytes", errStartOffsetCorrupt, len(b))
	}
	rest, ok := strings.CutPrefix(string(b), "v1 ")
	if !ok {
		return 0, fmt.Errorf("%w: no v1 prefix", errStartOffsetCorrupt)
	}
	rest, ok = strings.CutSuffix(rest, "\n")
	if !ok {
		return 0, fmt.Errorf("%w: no newline", errStartOffsetCorrupt)
	}
	n, err := strconv.ParseInt(rest, 10, 64)
	if err != nil || n < 0 || strconv.FormatInt(n, 10) != rest {
		return 0, fmt.Errorf("%w: offset %q", errStartOffsetCorrupt, rest)
	}
	return n, nil
}

func encodeStartOffset(offset int64) []byte {
	return fmt.Appendf(nil, "v1 %d\n", offset)
}

// writeStartOffset persists offset atomically.
func writeStartOffset(dir string, offset int64) error {
	path := filepath.Join(dir, startOffsetFileName)
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("write start offset: %w", err)
	}
	_, werr := f.Write(encodeStartOffset(offset))
	serr := f.Sync()
	cerr := f.Close()
	if err := errors.Join(werr, serr, cerr); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write start offset: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write start offset: %w", err)
	}
	return syncDir(dir)
}

// loadStartOffset applies the checkpoint to a recovered log.
func (l *Log) loadStartOffset() error {
	b, err := os.ReadFile(filepath.Join(l.dir, startOffsetFileName))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read start offset: %w", err)
	}
	off, err := decodeStartOffset(b)
	if err != nil {
		l.cfg.Logger.Warn("ignoring log start offset checkpoint", "dir", l.dir, "err", err)
		return nil
	}
	first := l.segments[0].baseOffset
	if off <= first {
		return nil // retention has since deleted past it
	}
	if off > l.EndOffset() {
		l.cfg.Logger.Warn("ignoring log start offset checkpoint outside the log", "dir", l.dir,
			"checkpoint", off, "first", first, "end", l.EndOffset())
		return nil
	}
	l.startOffset = off
	return nil
}
