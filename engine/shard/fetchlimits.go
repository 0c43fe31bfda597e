package shard

import (
	"fmt"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/ringlog/ringlog/engine"
)

// What one fetch may cost, enforced while it reads (issue 10):
//
//   - Bytes: FetchRequest.ResponseBytesMax bounds the records of the whole answer, Kafka's
//     fetch max_bytes. A partition reads first, bounded by min(its MaxBytes, what remains
//     now), and then charges the size it actually read with a compare-and-swap; nothing is
//     reserved while a read runs, so a partition read at the same moment on another shard
//     sees every byte not yet spent (an earlier design reserved the limit before reading,
//     and a partition with MaxBytes >= the budget left the others on other shards empty
//     while it read only a little). If others have charged so much meanwhile that the read
//     no longer fits, it reads again under the new remainder (each retry follows another
//     partition's charge: at most one per other partition of the fetch; the reads are
//     zero-copy, so a discarded one costs only its index and header walk). A partition
//     finding nothing left reads nothing. The first partition of the request to return
//     data may exceed its limit by its first batch (a consumer must always be able to
//     progress past a batch larger than its limits): it charges what remained and the
//     answer is over the bound by less than that batch; any later partition whose first
//     batch exceeds its limit is answered empty. Partitions on different shards read
//     concurrently, so "first" is whichever charges first, not the request order; a
//     partition with data comes back empty only when the bytes are spent by records
//     really in the answer, or for that first-batch rule.
//   - Descriptors: every file piece of a result holds a duplicated segment descriptor until
//     Release. Each is charged to the broker's quota (Config.FetchFilesMax) and to the
//     request's own quota (FetchRequest.Files, per connection in the server); a partition
//     that cannot get one is answered with ErrThrottled, retriable, and the live segment's
//     descriptors are never touched.

// FileQuota counts descriptors held by unsent fetch results. Implementations are safe for
// concurrent use.
type FileQuota interface {
	TryTake(n int64) bool
	Give(n int64)
}

// Quota is a FileQuota (or any count) with a fixed maximum; lock-free.
type Quota struct {
	held atomic.Int64
	max  int64
}

// NewQuota returns a quota of max units (max <= 0: unlimited).
func NewQuota(max int64) *Quota { return &Quota{max: max} }

// TryTake takes n units if they fit under the maximum.
func (q *Quota) TryTake(n int64) bool {
	for {
		held := q.held.Load()
		if q.max > 0 && held+n > q.max {
			return false
		}
		if q.held.CompareAndSwap(held, held+n) {
			return true
		}
	}
}

// Give returns n units.
func (q *Quota) Give(n int64) {
	if q.held.Add(-n) < 0 {
		panic(fmt.Sprintf("shard: quota given back %d units more than taken", -q.held.Load()))
	}
}

// Held is the number of units taken now.
func (q *Quota) Held() int64 { return q.held.Load() }

// Max is the quota's maximum (<= 0: unlimited).
func (q *Quota) Max() int64 { return q.max }

// fetchFilesMaxDefault derives the broker's descriptor quota for fetch results from the
// process's descriptor limit: a quarter of it, leaving the rest to segments, indexes,
// sockets and the rings. With the usual 1,048,576 hard limit (Go raises the soft limit to
// it) that is 262,144; under `ulimit -n 1024`, 256.
func fetchFilesMaxDefault() int64 {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil || lim.Cur == unix.RLIM_INFINITY {
		return 1 << 16
	}
	return max(int64(lim.Cur/4), 16)
}

// FilesHeld reports descriptors held by unsent fetch results, and the broker's maximum.
func (b *Broker) FilesHeld() (held, max int64) { return b.files.Held(), b.files.Max() }

// fetchLimits is one fetch's shared budget; every shard reading for the fetch charges it.
type fetchLimits struct {
	bytesMax  int64 // ResponseBytesMax; 0: no bound
	remaining atomic.Int64
	first     atomic.Bool // a partition has returned data (the first-batch allowance is used)
	files     FileQuota   // the request's own quota, or nil
	broker    *Quota
	replica   bool // FetchRequest.Replica: read up to the log end offset
}

// init sets l up for req (l is reused from fetch to fetch with its op).
func (l *fetchLimits) init(b *Broker, req *FetchRequest) {
	l.bytesMax, l.files, l.broker, l.replica = req.ResponseBytesMax, req.Files, b.files, req.Replica
	l.reset()
}

// reset starts a new read pass (a long-poll's final read follows a released first one).
func (l *fetchLimits) reset() {
	l.remaining.Store(l.bytesMax)
	l.first.Store(false)
}

// limit is what a partition may read now: min(partMax, what remains); false when nothing
// is left. partMax <= 0 means no partition limit. Nothing is taken: charge does that.
func (l *fetchLimits) limit(partMax int32) (int64, bool) {
	want := int64(partMax)
	if want <= 0 {
		want = 1<<31 - 1
	}
	if l.bytesMax <= 0 {
		return want, true
	}
	left := l.remaining.Load()
	return min(want, left), left > 0
}

// charge takes a read of used bytes, made under limit, from the remaining bytes. keep: the
// records are answered. retry: other partitions' charges have left less than used since
// limit was taken; read again under a fresh limit. A read larger than its limit (its first
// batch alone is larger) is kept only as the fetch's first data, charging what remains.
func (l *fetchLimits) charge(limit, used int64) (keep, retry bool) {
	if used == 0 {
		return true, false
	}
	if used > limit && !l.first.CompareAndSwap(false, true) {
		return false, false // the first-batch allowance is used: answered empty
	}
	l.first.Store(true)
	if l.bytesMax <= 0 {
		return true, false
	}
	for {
		left := l.remaining.Load()
		take := used
		if used > limit {
			take = min(used, max(left, 0)) // the first-batch rule: over by less than one batch, once
		} else if used > left {
			return false, true
		}
		if l.remaining.CompareAndSwap(left, left-take) {
			return true, false
		}
	}
}

// holdFiles makes out answer rr, its file pieces pointing at the shard's shared duplicates
// of the segment descriptors (fetchfiles.go), charging the quotas. On any failure it gives
// back what it took, leaves out without records and returns the error.
func (l *fetchLimits) holdFiles(out *FetchResult, rr engine.ReadResult, table sharedFiles) error {
	files := int64(0)
	for _, p := range rr.Pieces {
		if p.File != nil {
			files++
		}
	}
	if files > 0 {
		if l.files != nil && !l.files.TryTake(files) {
			return fmt.Errorf("%w: this connection holds its limit of segment descriptors in unsent fetch responses; read them first", ErrThrottled)
		}
		if !l.broker.TryTake(files) {
			if l.files != nil {
				l.files.Give(files)
			}
			return fmt.Errorf("%w: the broker holds its limit of %d segment descriptors in unsent fetch responses", ErrThrottled, l.broker.Max())
		}
	}
	out.held.n, out.held.conn, out.held.broker = files, l.files, l.broker
	for i := range rr.Pieces {
		f := rr.Pieces[i].File
		if f == nil {
			continue
		}
		sf, err := table.take(f)
		if err != nil {
			// Pieces [0, i) point at shared duplicates; [i, n) still at the segment's own file.
			out.Records = engine.ReadResult{}
			out.held.release()
			return fmt.Errorf("%w: dup segment fd: %w", ErrThrottled, err)
		}
		out.held.shared = append(out.held.shared, sf)
		rr.Pieces[i].File = sf.file
	}
	out.Records = rr
	return nil
}

// dupFile duplicates a segment descriptor (close-on-exec); a variable so that tests can
// make it fail as EMFILE does.
var dupFile = func(fd uintptr) (int, error) { return unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0) }

// heldFiles is what a FetchResult gives back on Release: quota units and references to
// shared descriptors (its array is kept for the next use of the result).
type heldFiles struct {
	n            int64
	conn, broker FileQuota
	shared       []*sharedFile
}

func (h *heldFiles) release() {
	for i, sf := range h.shared {
		sf.unref()
		h.shared[i] = nil
	}
	h.shared = h.shared[:0]
	if h.n == 0 {
		return
	}
	if h.conn != nil {
		h.conn.Give(h.n)
	}
	h.broker.Give(h.n)
	h.n, h.conn, h.broker = 0, nil, nil
}
