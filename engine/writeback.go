package engine

import (
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Writeback starts the kernel's write-back of page-cache appends early: once a log's
// active segment holds Every bytes written since its last request, the range is queued for
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
// Requests do not wake the goroutine one by one. A request is a send on a buffered
// channel; the goroutine waits on that channel only while it is idle, so the first request
// after a quiet spell wakes it (one thread wake-up, a futex call, on the appender's path).
// From then on it polls: every writebackPoll it takes everything queued, merges the
// contiguous ranges of each file into one call, and goes idle again after a poll that
// found nothing; a request that brings the queue to writebackKickQueued wakes it before
// its tick, so that small steps (--writeback-bytes 64 KiB at 800 MB/s fill 256 requests
// in 20 ms) are not dropped. A loaded broker thus pays at most one wake-up per
// writebackPoll (50 a second) or per writebackKickQueued requests, not one per request:
// at 550 MB/s over 16 partitions with 1 MiB steps, ≈ 420 requests a second had woken it
// ≈ 280 times a second, with about three futex calls each (docs/benchmarks.md,
// "Session 11"). The price: a range's write-back starts up to writebackPoll later,
// ≤ 12 MB at 600 MB/s, against the 30 s and hundreds of MiB the kernel would leave dirty.
//
// One Writeback serves every log of a process (LogConfig.Writeback); nil is off.
type Writeback struct {
	every int64
	reqs  chan writebackRequest
	kick  chan struct{} // a half-full queue asks a busy goroutine not to wait for its tick
	quit  chan struct{}
	wg    sync.WaitGroup
	once  sync.Once

	// poll returns a channel that delivers once writebackPoll from now; only the
	// goroutine calls it. Tests inject their own ticks.
	poll func() <-chan time.Time
	// served and idle, when set (tests), run on the goroutine after each batch of
	// requests and before each idle wait.
	served, idle func()

	// started: sync_file_range calls; dropped: requests that found the queue full;
	// wakeups: requests that woke the goroutine (found it idle, or kicked it).
	started, dropped, wakeups atomic.Uint64
}

type writebackRequest struct {
	f      *os.File
	off, n int64
}

// WritebackBytesDefault is ringlogd's --writeback-bytes default.
const WritebackBytesDefault = 1 << 20

// writebackQueue bounds the requests waiting for the goroutine: 256 × Every bytes of
// dirty data at most are queued; beyond that, requests are dropped. A poll interval at
// 600 MB/s with 1 MiB steps queues about 12.
const writebackQueue = 256

// writebackKickQueued is the queue length at which a request wakes a busy goroutine
// before its poll tick: half the queue, so the other half absorbs the time it takes to
// be scheduled.
const writebackKickQueued = writebackQueue / 2

// writebackPoll is how often a busy Writeback takes its queue: at most 1 / writebackPoll
// thread wake-ups a second for the process (50), and a range waits at most this long
// before its write-back starts.
const writebackPoll = 20 * time.Millisecond

// NewWriteback starts a Writeback that asks for write-back every `every` bytes appended to
// a segment. every <= 0 returns nil (off).
func NewWriteback(every int64) *Writeback {
	if every <= 0 {
		return nil
	}
	timer := time.NewTimer(writebackPoll)
	timer.Stop()
	w := newWriteback(every, func() <-chan time.Time {
		timer.Reset(writebackPoll) // the goroutine received the last tick, or never armed it
		return timer.C
	})
	w.start()
	return w
}

// newWriteback returns a Writeback whose goroutine is not started.
func newWriteback(every int64, poll func() <-chan time.Time) *Writeback {
	return &Writeback{every: every, reqs: make(chan writebackRequest, writebackQueue),
		kick: make(chan struct{}, 1), quit: make(chan struct{}), poll: poll}
}

func (w *Writeback) start() {
	w.wg.Add(1)
	go w.run()
}

// Every is the write-back step in bytes (0 for a nil Writeback).
func (w *Writeback) Every() int64 {
	if w == nil {
		return 0
	}
	return w.every
}

// Stats returns the sync_file_range calls issued to the kernel (each covers one or more
// contiguous requests of a file) and the requests dropped on a full queue.
func (w *Writeback) Stats() (started, dropped uint64) {
	if w == nil {
		return 0, 0
	}
	return w.started.Load(), w.dropped.Load()
}

// Wakeups returns how many requests woke the goroutine (found it idle, or filled half
// its queue): while appends keep coming, at most one per writebackPoll or per
// writebackKickQueued requests, never one per request.
func (w *Writeback) Wakeups() uint64 {
	if w == nil {
		return 0
	}
	return w.wakeups.Load()
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

// run alternates between idle (blocked on the queue: the next request wakes it) and busy
// (serving what is queued at every poll tick or kick, until a tick finds nothing).
func (w *Writeback) run() {
	defer w.wg.Done()
	batch := make([]writebackRequest, 0, writebackQueue)
	for {
		if w.idle != nil {
			w.idle()
		}
		select {
		case <-w.quit:
			return
		case r := <-w.reqs:
			w.wakeups.Add(1)
			batch = append(batch[:0], r)
		}
		for len(batch) > 0 {
			w.serve(w.take(batch))
			select {
			case <-w.quit:
				return
			case <-w.poll():
			case <-w.kick:
				w.wakeups.Add(1)
			}
			batch = w.take(batch[:0])
		}
	}
}

// take appends every queued request to batch without waiting (at most writebackQueue
// more: the senders do not outrun one drain by more than the channel holds).
func (w *Writeback) take(batch []writebackRequest) []writebackRequest {
	for range writebackQueue {
		select {
		case r := <-w.reqs:
			batch = append(batch, r)
		default:
			return batch
		}
	}
	return batch
}

// serve merges each request into an earlier one of the batch that it continues (same
// file, starting where that one ends: a log's requests are contiguous and in order) and
// starts the write-back of each merged range.
func (w *Writeback) serve(batch []writebackRequest) {
	merged := batch[:0]
	for _, r := range batch {
		joined := false
		for i := range merged {
			if m := &merged[i]; m.f == r.f && m.off+m.n == r.off {
				m.n += r.n
				joined = true
				break
			}
		}
		if !joined {
			merged = append(merged, r)
		}
	}
	for _, r := range merged {
		if conn, err := r.f.SyscallConn(); err == nil {
			_ = conn.Control(func(fd uintptr) {
				_ = unix.SyncFileRange(int(fd), r.off, r.n, unix.SYNC_FILE_RANGE_WRITE)
			})
			w.started.Add(1)
		}
	}
	clear(batch) // drop the *os.File references until the next batch
	if w.served != nil {
		w.served()
	}
}

// request queues a range; it never blocks, and wakes the goroutine only when it is idle
// or when the queue holds writebackKickQueued requests.
func (w *Writeback) request(f *os.File, off, n int64) {
	select {
	case w.reqs <- writebackRequest{f: f, off: off, n: n}:
	default:
		w.dropped.Add(1)
		return
	}
	if len(w.reqs) >= writebackKickQueued { // >=: senders on other threads may step past it
		select {
		case w.kick <- struct{}{}:
		default: // a kick is pending
		}
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
