package engine

import "fmt"

// Staged page-cache appends: one write per partition per loop turn.
//
// With staging on (SetStagedWrites), AppendBatchesStaged validates the batches, checks the
// idempotent producers, assigns offsets and notes index entries exactly as AppendBatches
// does, but leaves the bytes where the caller has them: it keeps their slices and returns.
// The owner calls WriteStaged once per loop turn, which writes everything staged since the
// last call with one pwritev (the append design's "every batch a partition receives in one
// loop turn goes out in one write"). The batch bytes must stay untouched until then.
//
// EndOffset stays at the end of what is written until WriteStaged, so readers, the high
// watermark and syncs (BeginSync covers only written bytes) never see a staged byte; the
// written hook tells the owner when EndOffset moved, as for asynchronous direct writes
// (asyncwrite.go), so the owner acknowledges the staged appends in offset order. Anything
// that needs the bytes in the file first writes them itself: a roll, Sync, truncation,
// Close, and any append that is not staged (AppendBatches, AppendReplicated). A failed
// write (EIO, ENOSPC) is rolled back like a failed AppendBatches: every append staged
// since the last write is undone (end, size, indexes, producers and the file as before
// the first of them), WriteStaged returns the error and TakeStagedError reports it to the
// owner, which fails those appends; the next append may succeed.

// stagedWrites is what a log has staged and not written: one contiguous range of the
// active segment.
type stagedWrites struct {
	seg    *segment
	pos    int64        // file position of the first staged byte
	before segmentState // seg before the first staged batch, restored when the write fails
	iov    [][]byte     // the staged batches, in order; the callers' slices
	err    error        // the last failed write, rolled back; for TakeStagedError
}

func (w *stagedWrites) pending() bool { return len(w.iov) > 0 }

// SetStagedWrites turns staging on for a page-cache log; written runs on the owner's
// goroutine each time EndOffset advances (or the log fails) because staged bytes were
// written, possibly from inside a Log method that wrote them first; it must not call the
// Log's mutating methods. It reports false, changing nothing, in direct mode. Call it
// before the first append.
func (l *Log) SetStagedWrites(written func()) bool {
	if l.mode == StorageDirect || l.active().direct != nil {
		return false
	}
	l.staging, l.onWritten = true, written
	return true
}

// AppendBatchesStaged is AppendBatches without the write when staging is on (see above):
// the bytes go to the file at the next WriteStaged. Without staging it is AppendBatches.
func (l *Log) AppendBatchesStaged(batches [][]byte) (AppendResult, error) {
	if !l.staging {
		return l.AppendBatches(batches)
	}
	l.stageNext = true
	res, err := l.appendBatches(batches, true)
	l.stageNext = false
	return res, err
}

// WriteStaged writes what AppendBatchesStaged staged, in one pwritev (several only past
// iovecsPerWriteMax batches), and runs the written hook. Nothing staged: it returns at once.
func (l *Log) WriteStaged() error {
	if !l.staged.pending() {
		return l.failed
	}
	err := l.writeStaged()
	if l.onWritten != nil {
		l.onWritten()
	}
	return err
}

// writeStaged writes the staged bytes without running the hook. A failed write is rolled
// back as a failed AppendBatches is: the segment, its file and the producers go back to
// what they were before the first staged batch, and TakeStagedError reports it once.
func (l *Log) writeStaged() error {
	w := &l.staged
	if !w.pending() {
		return nil
	}
	err := l.failed
	if err == nil && !l.closed {
		if err = pwritevFull(l.fio, w.seg.logFd(), w.iov, w.pos); err != nil {
			err = fmt.Errorf("write staged batches of segment %d at %d: %w", w.seg.baseOffset, w.pos, storageWriteError(l.dir, err))
			if terr := w.seg.log.Truncate(w.pos); terr != nil {
				l.cfg.Logger.Warn("truncate after failed write", "dir", l.dir, "err", terr)
			}
			l.releaseDisk(l.cfg.Disk != nil, w.iov)
			w.err = err
		}
	}
	if err != nil {
		// Nothing staged counts as appended: the segment and the producers go back to what
		// the file holds; the header window may hold staged bytes.
		w.seg.restore(w.before)
		l.headers.invalidate()
		if l.failed == nil {
			l.reloadProducers() // fails the log if it cannot
		}
	} else {
		l.noteWritten(w.seg, w.pos) // writeback.go
	}
	clear(w.iov)
	w.seg.staged = nil
	w.iov, w.seg = w.iov[:0], nil
	return err
}

// TakeStagedError returns, once, the error of the last write of staged batches that failed
// and was rolled back without failing the log (nil otherwise): the owner fails the appends
// that were waiting for it; later appends may succeed.
func (l *Log) TakeStagedError() error {
	err := l.staged.err
	l.staged.err = nil
	return err
}

// stage keeps batches, just noted in s (which was in state before them), for the next
// WriteStaged.
func (l *Log) stage(s *segment, batches [][]byte, before segmentState) {
	w := &l.staged
	if !w.pending() {
		w.seg, w.pos, w.before = s, before.size, before
		s.staged = w
		l.writtenNext = before.nextOffset // the end of what is in the file, until WriteStaged
	}
	w.iov = append(w.iov, batches...)
}

// copyOut fills p with the staged bytes at file position pos (a header lookup of the log
// reading past what is in the file). [pos, pos+len(p)) must lie within the staged range.
func (w *stagedWrites) copyOut(p []byte, pos int64) {
	at := w.pos
	for _, b := range w.iov {
		if len(p) == 0 {
			return
		}
		end := at + int64(len(b))
		if pos < end {
			n := copy(p, b[pos-at:])
			p, pos = p[n:], pos+int64(n)
		}
		at = end
	}
	if len(p) > 0 {
		panic(fmt.Sprintf("engine: staged read at %d past the staged range [%d,%d)", pos, w.pos, at))
	}
}
