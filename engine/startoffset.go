package engine

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/ringlog/ringlog/ring"
)

// The log start offset checkpoint: DeleteRecordsBefore can move the start offset into the
// middle of a segment, which the segment files alone cannot express. It is one line of text,
// replaced atomically (writeFileAtomic: temp file, fsync, rename, fsync dir):
//
//	v1 <start offset>\n
//
// DeleteRecordsBefore writes it before moving the start offset, and retention before it
// retires segments (the new first segment's base). On open, segments wholly below it are
// removed first (a power loss may have undone their retirement), then it is used when it lies
// within the recovered log; one past the log's end (the records up to it were lost) is
// removed, durably, with a log line.
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

// writeStartOffset persists offset atomically through fio (writeFileAtomic).
func writeStartOffset(fio ring.FileIO, dir string, offset int64) error {
	noteSyncs(syncCheckpointFile, 1)
	noteSyncs(syncCheckpointDir, 1)
	if err := writeFileAtomic(fio, dir, startOffsetFileName, encodeStartOffset(offset)); err != nil {
		return fmt.Errorf("write start offset: %w", err)
	}
	return nil
}

// readStartOffset reads the checkpoint; ok is false when there is none or it is unreadable
// (logged).
func (l *Log) readStartOffset() (offset int64, ok bool) {
	b, err := os.ReadFile(filepath.Join(l.dir, startOffsetFileName))
	if errors.Is(err, os.ErrNotExist) {
		return 0, false
	}
	if err == nil {
		offset, err = decodeStartOffset(b)
	}
	if err != nil {
		l.cfg.Logger.Warn("ignoring log start offset checkpoint", "dir", l.dir, "err", err)
		return 0, false
	}
	return offset, true
}

// loadStartOffset applies the checkpoint to a recovered log.
func (l *Log) loadStartOffset() error {
	off, ok := l.readStartOffset()
	if !ok {
		return nil
	}
	first := l.segments[0].baseOffset
	if off <= first {
		return nil // retention has since deleted past it
	}
	if off > l.EndOffset() {
		// The records up to it were lost (DeleteRecordsBefore may name unsynced offsets).
		// The checkpoint goes for good: left in place, it would come back into range once
		// new records reach it and hide them on a later open.
		l.cfg.Logger.Warn("dropping log start offset checkpoint outside the log", "dir", l.dir,
			"checkpoint", off, "first", first, "end", l.EndOffset())
		if err := os.Remove(filepath.Join(l.dir, startOffsetFileName)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("drop start offset checkpoint: %w", err)
		}
		return syncDir(l.fio, l.dir)
	}
	l.startOffset = off
	return nil
}
