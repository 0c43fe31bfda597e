package engine

import (
	"os"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// Writeback starts the kernel's write-back of page-cache appends early: once a log's
// active segment holds Every bytes written since its last request, the range is handed to
// a goroutine that calls sync_file_range(SYNC_FILE_RANGE_WRITE) on it (RocksDB's
// bytes_per_sync). Without it a follower's catch-up copy (and every page-cache append that
// no fdatasync covers) stays dirty until the kernel's flushers take it 30 s later
// (vm.dirty_expire_centisecs), hundreds of MiB at once, and the leaders' group-commit
// fdatasyncs on the same disk then wait behind that burst in writeback throttling (wbt).
//
// It is a hint and nothing else: no append waits for it, its errors are ignored (an I/O
// error shows in the next fdatasync, which alone decides what is durable), and a request
// that finds the queue full is dropped (its pages stay dirty for the kernel). The system
// call runs on the Writeback's own goroutine, never on a log owner's thread: it submits
// the I/O on its caller's thread and can block for a second in wbt (docs/storage.md, the
// sealed-segment hint that was removed for stalling a shard loop). A segment file closed
// meanwhile is safe: the call holds the *os.File's descriptor through RawConn.Control, so
// a close waits for it, and a request for a closed file does nothing.
//
// One Writeback serves every log of a process (LogConfig.Writeback); nil is off.
type Writeback struct {
	every int64
	reqs  chan writebackRequest
	quit  chan struct{}
	wg    sync.WaitGroup
	once  sync.Once

	started, dropped atomic.Uint64
}

type writebackRequest struct {
	f      *os.File
	off, n int64
}

// WritebackBytesDefault is ringlogd's --writeback-bytes default.
const WritebackBytesDefault = 1 << 20

// writebackQueue bounds the requests waiting for the goroutine: 256 × Every bytes of
// dirty data at most are queued; beyond that, requests are dropped.
const writebackQueue = 256

// NewWriteback starts a Writeback that asks for write-back every `every` bytes appended to
// a segment. every <= 0 returns nil (off).
func NewWriteback(every int64) *Writeback {
	if every <= 0 {
		return nil
	}
	w := &Writeback{every: every, reqs: make(chan writebackRequest, writebackQueue), quit: make(chan struct{})}
	w.wg.Add(1)
	go w.run()
	return w
}

// Every is the write-back step in bytes (0 for a nil Writeback).
func (w *Writeback) Every() int64 {
	if w == nil {
		return 0
	}
	return w.every
}

// Stats returns the requests issued to the kernel and those dropped on a full queue.
func (w *Writeback) Stats() (started, dropped uint64) {
	if w == nil {
		return 0, 0
	}
	return w.started.Load(), w.dropped.Load()
}

// Close stops the goroutine; queued requests are dropped (they are hints). A log may
// still append afterwards: its requests then wait in the queue, or are dropped, unserved.
func (w *Writeback) Close() {
	if w == nil {
		return
	}
	w.once.Do(func() { close(w.quit) })
	w.wg.Wait()
}

func (w *Writeback) run() {
	defer w.wg.Done()
	for {
		select {
		case <-w.quit:
			return
		case r := <-w.reqs:
			if conn, err := r.f.SyscallConn(); err == nil {
				_ = conn.Control(func(fd uintptr) {
					_ = unix.SyncFileRange(int(fd), r.off, r.n, unix.SYNC_FILE_RANGE_WRITE)
				})
				w.started.Add(1)
			}
		}
	}
}

func (w *Writeback) request(f *os.File, off, n int64) {
	select {
	case w.reqs <- writebackRequest{f: f, off: off, n: n}:
	default:
		w.dropped.Add(1)
	}
}

// writebackCursor is a log's position in its active segment up to which write-back has
// been requested.
type writebackCursor struct {
	seg  *segment
	from int64
}

// noteWritten is called after bytes [before, s.size) of page-cache segment s were written:
// it requests write-back once Every bytes have gathered since the last request.
func (l *Log) noteWritten(s *segment, before int64) {
	w := l.cfg.Writeback
	if w == nil || s.direct != nil || l.closed {
		return
	}
	c := &l.writeback
	if c.seg != s || c.from > before { // a new segment, or the log was truncated below it
		c.seg, c.from = s, before
	}
	if n := s.size - c.from; n >= w.every {
		w.request(s.log, c.from, n)
		c.from = s.size
	}
}
