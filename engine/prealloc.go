package engine

import (
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/ringlog/ringlog/ring"
	"golang.org/x/sys/unix"
)

// Zero-filled space ahead of the log's end (LogConfig.PreallocateBytes, topic config
// preallocate.bytes).
//
// On ext4 an append is not an overwrite: an fdatasync after a write that extends the file
// must also commit the new size and extents in the journal (≈ 60 µs more per durable 1 KiB
// record on the test machine), and an O_DIRECT write past the end of the file cannot run
// without blocking (IOCB_NOWAIT), so io_uring hands it to a worker that serializes on the
// inode lock. With preallocation the active segment's file is kept written, with zeros, up
// to PreallocateBytes past the logical end, so appends overwrite blocks that already exist:
//
//	file:   |batch|batch|batch|0000000000000000000000000|
//	                          ^ logical end (s.size)     ^ file end: at most s.size +
//	                            readers, index,            PreallocateBytes, never past
//	                            retention use this         SegmentBytes
//
// The zeros are written by a goroutine, never on the log's goroutine: once the logical end
// comes within half the window of what was asked for last, the log opens a new descriptor
// of the segment with O_APPEND (plus O_DIRECT in direct mode) and the goroutine appends
// zeros through it (see fill for the piece sizes) and fdatasyncs them (so the journal commit
// of the new size happens there, not in a producer's sync). O_APPEND is what makes this safe
// without any lock: the kernel places each zero write at the end of file under the inode
// lock, so it can only land past whatever the log has written, never on it.
//
// The zeros are never served: every reader stops at s.size. A roll cuts the sealed file back
// to its logical size (the goroutine does it if it is still writing: it then owns the cut,
// see zeroJob.handOffTrim), Close cuts the active one. Recovery reads a tail of zeros after
// the last valid batch of the active segment as the end of the log and keeps the zeros in
// place; a tail that is not all zeros (a torn write) is cut as before, so bytes past the
// logical end can never later continue the log (docs/storage.md).
//
// Cost: every appended byte is written twice (once as a zero); the zeros' CPU is one copy
// from a shared zero buffer into the page cache (none in direct mode). ZeroAheadStats
// counts them. Measured (docs/benchmarks.md, "Preallocated segment space"): a win for
// page-cache flush.always logs (their default), a loss for unsynced and direct-mode appends.

// zeroWriteBytes is the size of the shared zero buffer and of one direct-mode zero write
// (256 KiB); page-cache mode writes zeroPageCacheWriteBytes at a time.
const zeroWriteBytes = 256 << 10

// preallocateBytesMax bounds PreallocateBytes: 256 MiB of zeros per active segment.
const preallocateBytesMax = 256 << 20

// preallocateBytesFlushAlways is the default window of a page-cache flush.always log: 4 MiB,
// one zeroing job (and one journal commit of a new size) per 2 MiB appended, ≈ 2,000 durable
// 1 KiB records.
const preallocateBytesFlushAlways = 4 << 20

var zeroBuffer = sync.OnceValue(func() []byte { return alignedBuffer(zeroWriteBytes) })

// ZeroAheadCounters are process-wide counts of the background zeroing.
type ZeroAheadCounters struct {
	Jobs    int64 // zeroing goroutines started
	Bytes   int64 // zero bytes written
	Syncs   int64 // fdatasyncs of zeroed space
	Failed  int64 // jobs that stopped on an error (space, alignment, I/O)
	Trimmed int64 // sealed files the goroutine cut back because it was still running
}

var zeroStats struct{ jobs, bytes, syncs, failed, trimmed atomic.Int64 }

// ZeroAheadStats returns the process-wide zeroing counters.
func ZeroAheadStats() ZeroAheadCounters {
	return ZeroAheadCounters{zeroStats.jobs.Load(), zeroStats.bytes.Load(), zeroStats.syncs.Load(),
		zeroStats.failed.Load(), zeroStats.trimmed.Load()}
}

// zeroJob is one background extension of a segment file. The log's goroutine creates it and
// reads done; the zeroing goroutine owns f. mu guards finished and trimTo.
type zeroJob struct {
	f      *os.File
	fio    ring.FileIO
	target int64 // append zeros until the file is at least this long
	direct bool
	disk   *DiskSpace

	mu       sync.Mutex
	finished bool  // the goroutine wrote its last zero; it trims only if trimTo was set before
	trimTo   int64 // -1: none; else the goroutine cuts the file to this size when done
	reached  atomic.Int64
	done     chan struct{} // closed when the goroutine has returned
	err      error         // why filling stopped early; read after done
	trimErr  error         // the handed-off cut's failure; read after done
}

// zeroAhead starts extending the active segment's zeroed space when its logical end came
// within half the window of what was asked last. Called by the log's goroutine after appends.
func (l *Log) zeroAhead(s *segment) {
	window := l.cfg.PreallocateBytes
	if window <= 0 || s.size+window/2 <= s.zeroAsked {
		return
	}
	if j := s.zero; j != nil {
		select {
		case <-j.done:
			s.zero = nil
			if j.err != nil {
				l.cfg.Logger.Debug("zeroing ahead stopped", "dir", l.dir, "segment", s.baseOffset, "err", j.err)
				s.zeroAsked = max(s.size, j.reached.Load())
				return // tried again once the log grows by half a window
			}
		default:
			return // still running
		}
	}
	target := min(alignUp(s.size+window), l.cfg.SegmentBytes)
	if target <= s.size {
		return
	}
	flags := os.O_WRONLY | os.O_APPEND
	if s.direct != nil {
		flags |= unix.O_DIRECT
	}
	// Through /proc: a new open file description (its own O_APPEND) of this very inode.
	f, err := os.OpenFile("/proc/self/fd/"+strconv.Itoa(s.logFd()), flags, 0)
	if err != nil {
		l.cfg.Logger.Debug("zeroing ahead: open", "dir", l.dir, "segment", s.baseOffset, "err", err)
		s.zeroAsked = target
		return
	}
	fio := l.cfg.ZeroFileIO
	if fio == nil {
		fio = ring.Syscalls{}
	}
	j := &zeroJob{f: f, fio: fio, target: target, direct: s.direct != nil, disk: l.cfg.Disk, trimTo: -1, done: make(chan struct{})}
	s.zero, s.zeroAsked, s.zeroed = j, target, true
	zeroStats.jobs.Add(1)
	l.zeroJobs.Add(1)
	go func() {
		defer l.zeroJobs.Done()
		j.run()
	}()
}

func (j *zeroJob) run() {
	defer close(j.done)
	j.err = j.fill()
	if j.err != nil {
		zeroStats.failed.Add(1)
	}
	j.mu.Lock()
	j.finished = true
	trim := j.trimTo
	j.mu.Unlock()
	if trim >= 0 {
		if err := j.f.Truncate(trim); err != nil {
			j.trimErr = fmt.Errorf("cut segment to %d: %w", trim, err)
		}
		zeroStats.trimmed.Add(1)
	}
	j.f.Close() // written and synced above; a close error changes nothing on disk
}

// zeroPageCacheWriteBytes is one zero write in page-cache mode, each written back at once
// (sync_file_range) so that no more than this many dirty zero bytes ever wait for a
// flush.always fdatasync of the segment: 64 KiB, ≈ 0.1 ms of device time here.
const zeroPageCacheWriteBytes = 64 << 10

// fill appends zeros until the file reaches target or the log asked for a trim, then
// fdatasyncs what it wrote (committing the new size in the journal here, not in a producer's
// sync).
//
// Page-cache mode writes the zeros buffered, 64 KiB at a time, each piece written back at
// once: measured, zeros left dirty until the job's fdatasync made the next flush.always
// fdatasyncs write them back (p99 of durable produces ×7), and zeros written with O_DIRECT
// would hold the inode lock (which the log's buffered writes take too) for the device
// write and leave no pages in the cache, so that every partial-page append into them would
// first read its block. Buffered, the zero pages stay cached and clean. Direct mode writes
// them with O_DIRECT, 256 KiB at a time.
func (j *zeroJob) fill() error {
	zeros, fd := zeroBuffer(), int(j.f.Fd())
	if !j.direct {
		zeros = zeros[:zeroPageCacheWriteBytes]
	}
	wrote := false
	for {
		j.mu.Lock()
		stop := j.trimTo >= 0
		j.mu.Unlock()
		if stop {
			break
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return fmt.Errorf("fstat: %w", err)
		}
		j.reached.Store(st.Size)
		if st.Size >= j.target {
			break
		}
		if j.direct && st.Size%blockBytes != 0 {
			return fmt.Errorf("file end %d is not block-aligned", st.Size) // the next direct write aligns it
		}
		n := min(int64(len(zeros)), alignUp(j.target-st.Size))
		if j.disk != nil {
			if err := j.disk.Reserve(n); err != nil {
				return err
			}
		}
		// O_APPEND: the kernel writes at the end of file, whatever offset says (pwrite(2),
		// BUGS); st.Size is only the FileIO's hint (faultio.CrashFS records the range).
		w, err := j.fio.Pwrite(fd, zeros[:n], st.Size)
		if err != nil {
			if j.disk != nil {
				j.disk.Release(n)
			}
			return err
		}
		wrote = true
		zeroStats.bytes.Add(int64(w))
		if !j.direct {
			// Where the zeros went unless the log extended the file in between (then a piece
			// stays dirty until the job's fdatasync). Never to the end of file: that would
			// also write back, and wait for, what the log appended past the zeros (measured:
			// half the throughput of unsynced 1 MiB appends).
			flags := unix.SYNC_FILE_RANGE_WAIT_BEFORE | unix.SYNC_FILE_RANGE_WRITE | unix.SYNC_FILE_RANGE_WAIT_AFTER
			if err := retryEINTR(func() error { return unix.SyncFileRange(fd, st.Size, n, flags) }); err != nil {
				return fmt.Errorf("write back zeros at %d: %w", st.Size, err)
			}
		}
	}
	if !wrote {
		return nil
	}
	// Plain fdatasync, not the FileIO's: the log's own syncs decide what counts as durable.
	if err := retryEINTR(func() error { return unix.Fdatasync(fd) }); err != nil {
		return fmt.Errorf("fdatasync zeros: %w", err)
	}
	zeroStats.syncs.Add(1)
	return nil
}

func retryEINTR(f func() error) error {
	for {
		if err := f(); err != unix.EINTR {
			return err
		}
	}
}

// handOffTrim asks a job that is still writing to cut the file to size when it is done and
// reports true; false means the job is finished and the caller cuts the file itself.
func (j *zeroJob) handOffTrim(size int64) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.finished {
		return false
	}
	j.trimTo = size
	return true
}

// cancelTrim withdraws a trim handed off by handOffTrim (a truncation made the sealed segment
// active again: the zeros past its new end are harmless, a late cut of new appends is not).
// It waits for the job only when the job has already taken the trim.
func (j *zeroJob) cancelTrim() {
	j.mu.Lock()
	taken := j.finished && j.trimTo >= 0
	if !j.finished {
		j.trimTo = -1
	}
	j.mu.Unlock()
	if taken {
		<-j.done
	}
}

// trimZeros cuts s's file back to its logical size when zeros, direct-mode padding or a
// recycled file's stale bytes (recycle.go) may lie past it: at a roll, and at Close. A zeroing job still running is handed the cut
// instead, so the log's goroutine never waits for it.
func (s *segment) trimZeros(wait bool) error {
	if j := s.zero; j != nil {
		if wait {
			if j.handOffTrim(s.size) {
				<-j.done
				s.zero = nil
				s.zeroed = false
				return j.trimErr
			}
		} else if j.handOffTrim(s.size) {
			return nil
		}
		s.zero = nil
	}
	if !s.zeroed && !s.stale && s.direct == nil {
		return nil
	}
	if err := s.log.Truncate(s.size); err != nil {
		return fmt.Errorf("segment %d: cut to %d: %w", s.baseOffset, s.size, err)
	}
	s.zeroed, s.stale = false, false
	return nil
}

// reclaimZeroJob makes s (about to take appends again after a truncation) safe from a cut
// handed to its last zeroing job.
func (s *segment) reclaimZeroJob() {
	if j := s.zero; j != nil {
		j.cancelTrim()
	}
}
