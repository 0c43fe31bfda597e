package engine

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"
	"unsafe"

	"github.com/ringlog/ringlog/engine/batch"
	"github.com/ringlog/ringlog/engine/faultio"
	"github.com/ringlog/ringlog/ring"
	"golang.org/x/sys/unix"
)

// queuedWrites is an AsyncWriter whose writes reach the file only when the test completes
// them, in an order the test's generator picks: the device of a shard with many writes in
// flight, completing them out of order.
//
// It refuses (panics on) a write that overlaps one in flight on the same file: the device
// may apply two writes of one block in either order, so the log must never start both.
// queuedWrites applies each write when it completes, so an older write of a block that
// completed after a newer one would leave stale bytes on disk.
type queuedWrites struct {
	fio     ring.FileIO
	rng     *rand.Rand
	q       []queuedWrite
	cuts    int // StartFtruncate calls
	flushes int // StartFsync calls
	unlinks int // StartUnlink calls
}

// checkOverlap panics if [off, off+len(p)) on fd overlaps a write in flight, or a cut of
// fd is in flight (a roll cuts a sealed file only once its writes completed).
func (w *queuedWrites) checkOverlap(fd int, p []byte, off int64) {
	for _, x := range w.q {
		if x.fd == fd && x.cut {
			panic(fmt.Sprintf("write at %d to a file whose cut to %d is in flight", off, x.off))
		}
		if x.fd == fd && off < x.off+int64(len(x.p)) && x.off < off+int64(len(p)) {
			panic(fmt.Sprintf("write [%d, %d) overlaps [%d, %d), in flight on the same file", off, off+int64(len(p)), x.off, x.off+int64(len(x.p))))
		}
	}
}

type queuedWrite struct {
	fd    int
	p     []byte // the log's buffer; data is what it held when the write started
	off   int64
	done  func(int, error)
	index int // fixed-buffer slot, -1: none
	data  []byte
	cut   bool // an ftruncate of fd to off (StartFtruncate), not a write
	flush bool // an fsync of fd (StartFsync), not a write
	// rename, when set, is a rename of rename[0] to rename[1] (StartRename), not a write;
	// noReplace: with RENAME_NOREPLACE (StartRenameNoReplace).
	rename    *[2]string
	noReplace bool
	// open, when set, is an open of open.path (StartOpen); unlink, an unlink (StartUnlink).
	open   *queuedOpen
	unlink string
}

type queuedOpen struct {
	path  string
	flags int
	mode  uint32
}

// StartFsync queues an fsync of fd through w.fio (a CrashFS counts it as a sync when it
// completes), completed in random order with the writes like the ring's IORING_OP_FSYNC;
// in dieMidway it happened or not.
func (w *queuedWrites) StartFsync(fd int, _ bool, done func(int, error)) error {
	w.q = append(w.q, queuedWrite{fd: fd, done: done, index: -1, flush: true})
	w.flushes++
	return nil
}

// kind names x's op: "write", "cut", "fsync" or "rename".
func (x queuedWrite) kind() string {
	switch {
	case x.cut:
		return "cut"
	case x.flush:
		return "fsync"
	case x.rename != nil:
		return "rename"
	case x.open != nil:
		return "open"
	case x.unlink != "":
		return "unlink"
	}
	return "write"
}

// notWrite reports whether x changes no file's bytes (it cannot be applied in part).
func (x queuedWrite) notWrite() bool { return x.kind() != "write" }

// StartOpen queues an open, completed in random order with the writes like the ring's
// IORING_OP_OPENAT (done gets the descriptor); in dieMidway it happened or not (a
// descriptor it made is closed: the process died).
func (w *queuedWrites) StartOpen(path string, flags int, mode uint32, done func(int, error)) error {
	w.q = append(w.q, queuedWrite{fd: -1, done: done, index: -1, open: &queuedOpen{path, flags, mode}})
	return nil
}

// StartUnlink queues an unlink, completed in random order with the writes like the ring's
// IORING_OP_UNLINKAT; in dieMidway it happened or not.
func (w *queuedWrites) StartUnlink(path string, done func(int, error)) error {
	w.q = append(w.q, queuedWrite{fd: -1, done: done, index: -1, unlink: path})
	w.unlinks++
	return nil
}

// StartRename queues a rename, completed in random order with the writes like the ring's
// IORING_OP_RENAMEAT; in dieMidway it happened or not.
func (w *queuedWrites) StartRename(oldPath, newPath string, done func(int, error)) error {
	w.q = append(w.q, queuedWrite{fd: -1, done: done, index: -1, rename: &[2]string{oldPath, newPath}})
	return nil
}

// StartRenameNoReplace is StartRename with RENAME_NOREPLACE (a roll naming its new
// segment's files, rollasync.go).
func (w *queuedWrites) StartRenameNoReplace(oldPath, newPath string, done func(int, error)) error {
	w.q = append(w.q, queuedWrite{fd: -1, done: done, index: -1, rename: &[2]string{oldPath, newPath}, noReplace: true})
	return nil
}

// StartFtruncate queues a cut of fd to size, completed (or, in dieMidway, lost) in random
// order with the writes like the ring's IORING_OP_FTRUNCATE. No write of fd may be in
// flight: the log cuts a sealed file only after its last write completed.
func (w *queuedWrites) StartFtruncate(fd int, size int64, done func(int, error)) error {
	for _, x := range w.q {
		if x.fd == fd {
			panic(fmt.Sprintf("cut of a file to %d with its write at %d in flight", size, x.off))
		}
	}
	w.q = append(w.q, queuedWrite{fd: fd, off: size, done: done, index: -1, cut: true})
	w.cuts++
	return nil
}

// apply performs x on the file.
func (w *queuedWrites) apply(x queuedWrite, data []byte) (int, error) {
	if x.cut {
		return 0, unix.Ftruncate(x.fd, x.off)
	}
	if x.flush {
		return 0, w.fio.Fsync(x.fd)
	}
	if x.rename != nil && x.noReplace {
		return 0, unix.Renameat2(unix.AT_FDCWD, x.rename[0], unix.AT_FDCWD, x.rename[1], unix.RENAME_NOREPLACE)
	}
	if x.rename != nil {
		return 0, os.Rename(x.rename[0], x.rename[1])
	}
	if x.open != nil {
		fd, err := unix.Open(x.open.path, x.open.flags, x.open.mode)
		if err != nil {
			return -1, fmt.Errorf("open: %w", err)
		}
		return fd, nil
	}
	if x.unlink != "" {
		if err := unix.Unlink(x.unlink); err != nil {
			return 0, fmt.Errorf("unlink: %w", err)
		}
		return 0, nil
	}
	return pwriteAll(w.fio, x.fd, data, x.off)
}

// snapshot is a copy of p at an aligned address: what a device that reads the buffer at
// once would write. The log may go on filling the tail block past what it submitted; a
// write that reached the file late with older bytes than a later write of the same block
// would show.
func snapshot(p []byte) []byte {
	b := alignedBuffer(len(p))
	copy(b, p)
	return b
}

// fixedQueuedWrites adds a fixed-buffer table of a few slots (so some chunks are refused)
// and checks the log's use of it: a fixed write lies inside its slot's buffer, and a slot
// is never emptied while a write from it is queued.
type fixedQueuedWrites struct {
	*queuedWrites
	t     *testing.T
	slots [][]byte // nil: free
	used  int
}

func (w *fixedQueuedWrites) RegisterWriteBuffer(b []byte) (int, bool) {
	for i, s := range w.slots {
		if s == nil {
			w.slots[i] = b
			w.used++
			return i, true
		}
	}
	return -1, false
}

func (w *fixedQueuedWrites) UnregisterWriteBuffer(index int) {
	if w.slots[index] == nil {
		w.t.Fatalf("slot %d unregistered twice", index)
	}
	for _, x := range w.q {
		if x.index == index {
			w.t.Fatalf("slot %d unregistered with a write from it in flight", index)
		}
	}
	w.slots[index] = nil
}

func (w *fixedQueuedWrites) StartWriteFixed(fd int, p []byte, off int64, index int, done func(int, error)) error {
	b := w.slots[index]
	if b == nil || uintptr(unsafe.Pointer(&p[0])) < uintptr(unsafe.Pointer(&b[0])) ||
		uintptr(unsafe.Pointer(&p[len(p)-1])) > uintptr(unsafe.Pointer(&b[len(b)-1])) {
		w.t.Fatalf("fixed write of %d bytes outside slot %d", len(p), index)
	}
	w.checkOverlap(fd, p, off)
	w.q = append(w.q, queuedWrite{fd: fd, p: p, off: off, done: done, index: index, data: snapshot(p)})
	return nil
}

func (w *fixedQueuedWrites) registered() int {
	n := 0
	for _, s := range w.slots {
		if s != nil {
			n++
		}
	}
	return n
}

func (w *queuedWrites) StartWrite(fd int, p []byte, off int64, done func(int, error)) error {
	w.checkOverlap(fd, p, off)
	w.q = append(w.q, queuedWrite{fd: fd, p: p, off: off, done: done, index: -1, data: snapshot(p)})
	return nil
}

func (w *queuedWrites) AwaitWrites(cond func() bool) error {
	for !cond() {
		if len(w.q) == 0 {
			return errors.New("AwaitWrites with no write in flight")
		}
		w.completeOne()
	}
	return nil
}

// completeOne performs one queued write, chosen at random, and reports it.
func (w *queuedWrites) completeOne() {
	i := w.rng.IntN(len(w.q))
	x := w.q[i]
	w.q = append(w.q[:i], w.q[i+1:]...)
	x.done(w.apply(x, x.data))
}

// completeSome completes up to n queued writes.
func (w *queuedWrites) completeSome(n int) {
	for ; n > 0 && len(w.q) > 0; n-- {
		w.completeOne()
	}
}

// dieMidway is what a kill -9 or power loss leaves of the writes in flight: each one may
// have reached the file whole, in part (a prefix of whole blocks), or not at all. Nothing
// is reported.
func (w *queuedWrites) dieMidway() {
	for _, x := range w.q {
		switch w.rng.IntN(3) {
		case 0:
			if n, err := w.apply(x, x.data); x.open != nil && err == nil {
				unix.Close(n)
			}
		case 1:
			if x.notWrite() {
				break
			}
			blocks := len(x.data) / blockBytes
			pwriteAll(w.fio, x.fd, x.data[:w.rng.IntN(blocks+1)*blockBytes], x.off)
		}
	}
	w.q = nil
}

// manyGroups lets the logs set up after it keep up to n write groups in flight and start
// another beside the ones in flight from as few as 0–12 KiB staged (rng picks; the default
// waits for 1 MiB), so that small test appends keep several groups in flight, sharing
// their tail blocks; undo restores the defaults. Call it before SetAsyncWriter.
func manyGroups(rng *rand.Rand, n int) (undo func()) {
	v, m := DirectGroupMinBytes, DirectWriteGroupsMax
	DirectGroupMinBytes, DirectWriteGroupsMax = int64(rng.IntN(4))*4<<10, n
	return func() { DirectGroupMinBytes, DirectWriteGroupsMax = v, m }
}

// groupCounts are the write groups in flight per log the async tests run with: the
// default (1) and several.
var groupCounts = []int{1, 4}

// groupsSeen tracks the most write groups a log had in flight.
type groupsSeen int

func (g *groupsSeen) note(l *Log) { *g = max(*g, groupsSeen(l.groups.count)) }

func asyncSeed(t *testing.T) uint64 {
	seed := uint64(os.Getpid())
	if v, err := strconv.ParseUint(os.Getenv("RINGLOG_ASYNC_SEED"), 10, 64); err == nil {
		seed = v // replay a failed run
	}
	t.Logf("seed %d (RINGLOG_ASYNC_SEED replays it)", seed)
	return seed
}

// appendCounted appends 1–3 batches of records whose values encode their offsets
// (crashValue), some of them larger than a block.
func appendCounted(t *testing.T, l *Log, rng *rand.Rand) (AppendResult, error) {
	t.Helper()
	return appendCountedUpTo(t, l, rng, 3)
}

// appendCountedUpTo is appendCounted with 1 to batchesMax batches. One batch is at most 249
// records of at most 120 bytes, under 30 KiB.
func appendCountedUpTo(t *testing.T, l *Log, rng *rand.Rand, batchesMax int) (AppendResult, error) {
	t.Helper()
	b := batch.NewBuilder(batch.BuilderOptions{})
	next := l.StagedEndOffset()
	var batches [][]byte
	for g := 1 + rng.IntN(batchesMax); g > 0; g-- {
		n := 1 + rng.IntN(6)
		if rng.IntN(4) == 0 {
			n = 50 + rng.IntN(200)
		}
		batches = append(batches, crashBatch(t, b, &next, n))
	}
	return l.AppendBatches(batches)
}

// endSync finishes a pipelined sync as the shard does: meanwhile (more writes completing
// while the fdatasyncs run), then every descriptor's fdatasync through fio, then EndSync.
func endSync(t *testing.T, l *Log, tk SyncTicket, fio ring.FileIO, meanwhile func()) {
	t.Helper()
	meanwhile()
	var serr error
	for _, fd := range tk.Fds {
		serr = errors.Join(serr, fio.Fdatasync(fd))
	}
	if err := l.EndSync(tk, serr); err != nil {
		t.Fatal(err)
	}
}

// checkOnDisk reads the segment files with plain preads (not the log's memory) and fails
// unless every record below end is there, whole and valid.
func checkOnDisk(t *testing.T, l *Log, end int64) {
	t.Helper()
	next := l.segments[0].baseOffset
	for _, s := range l.segments {
		pos := int64(0)
		for next < end && pos < s.size {
			var hdr [batch.HeaderSize]byte
			if err := preadFull(ring.Syscalls{}, s.logFd(), hdr[:], pos); err != nil {
				t.Fatalf("offset %d (end %d): header at %d of segment %d: %v", next, end, pos, s.baseOffset, err)
			}
			h, err := batch.ParseHeader(hdr[:])
			if err != nil {
				t.Fatalf("offset %d (end %d): %v", next, end, err)
			}
			buf := make([]byte, h.Size())
			if err := preadFull(ring.Syscalls{}, s.logFd(), buf, pos); err != nil {
				t.Fatalf("offset %d (end %d): batch at %d: %v", next, end, pos, err)
			}
			if _, err := batch.ValidateStored(buf); err != nil {
				t.Fatalf("offset %d (end %d): batch at %d of segment %d on disk: %v", next, end, pos, s.baseOffset, err)
			}
			next = h.LastOffset() + 1
			pos += int64(h.Size())
		}
	}
	if next < end {
		t.Fatalf("records on disk end at %d, the log reported %d written", next, end)
	}
}

// TestAsyncDirectWritesAcknowledgeInOrder: with writes completing in random order, the
// written end (what the owner acknowledges) only moves forward, never past a byte that is
// not on disk, and catches up with every append; reads never see staged bytes.
func TestAsyncDirectWritesAcknowledgeInOrder(t *testing.T) {
	seed := asyncSeed(t)
	for _, n := range groupCounts {
		t.Run(fmt.Sprintf("groups=%d", n), func(t *testing.T) { testAsyncAcknowledgeInOrder(t, seed, n) })
	}
}

func testAsyncAcknowledgeInOrder(t *testing.T, seed uint64, groupsMax int) {
	rng := rand.New(rand.NewPCG(seed, 1))
	defer manyGroups(rng, groupsMax)()
	dir := t.TempDir()
	cfg := LogConfig{Storage: StorageDirect, SegmentBytes: 64 << 10, IndexIntervalBytes: 512,
		DirectChunkBytes: 8 << 10, DirectCacheChunks: 2, Logger: quietLogger}
	l, _ := openLog(t, dir, cfg, ring.Syscalls{})
	skipUnlessDirect(t, l, dir, StorageDirect)
	qw := &queuedWrites{fio: ring.Syscalls{}, rng: rng}
	fw := &fixedQueuedWrites{queuedWrites: qw, t: t, slots: make([][]byte, 3)}
	last, hooks := int64(0), 0
	if !l.SetAsyncWriter(fw, func() {
		hooks++
		end := l.EndOffset()
		if end < last {
			t.Fatalf("written end went back from %d to %d", last, end)
		}
		last = end
		checkOnDisk(t, l, end)
	}) {
		t.Fatal("SetAsyncWriter refused a direct-mode log")
	}
	inFlightSeen := false
	defer func(v int64) { directStagedMax = v }(directStagedMax)
	directStagedMax = 16 << 10 // appends that complete nothing soon wait for the device
	var groups groupsSeen
	for i := 0; i < 300; i++ {
		res, err := appendCounted(t, l, rng)
		if err != nil {
			t.Fatal(err)
		}
		groups.note(l)
		if res.LastOffset >= l.EndOffset() {
			inFlightSeen = true
			if rr, err := l.Read(l.StartOffset(), 1<<30); err != nil {
				t.Fatal(err)
			} else if rr.NextOffset > l.EndOffset() {
				t.Fatalf("a read reached %d, past the written end %d", rr.NextOffset, l.EndOffset())
			}
		}
		switch rng.IntN(10) {
		case 0:
			if err := l.Sync(); err != nil { // waits for the writes first
				t.Fatal(err)
			}
			if l.SyncedOffset() != l.StagedEndOffset() || l.EndOffset() != l.StagedEndOffset() {
				t.Fatalf("after Sync: synced %d, end %d, staged end %d", l.SyncedOffset(), l.EndOffset(), l.StagedEndOffset())
			}
		case 1:
			tk, ok, err := l.BeginSync() // covers only completed writes
			if err != nil {
				t.Fatal(err)
			}
			if ok {
				if tk.Offset > l.EndOffset() {
					t.Fatalf("a sync covers %d, past the written end %d", tk.Offset, l.EndOffset())
				}
				endSync(t, l, tk, ring.Syscalls{}, func() { qw.completeSome(rng.IntN(3)) })
				if l.SyncedOffset() > l.EndOffset() {
					t.Fatalf("synced %d, past the written end %d", l.SyncedOffset(), l.EndOffset())
				}
			}
		case 2, 3, 4:
			// nothing completes: the staged bytes pile up until makeRoom waits
		default:
			qw.completeSome(rng.IntN(4))
		}
	}
	if !inFlightSeen || groupsMax > 1 && groups < 2 {
		t.Fatalf("appends left in flight: %v, most write groups in flight: %d; the test tested nothing", inFlightSeen, groups)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if fw.used == 0 || fw.registered() != 0 {
		t.Fatalf("fixed buffers: %d registrations, %d still registered after Close", fw.used, fw.registered())
	}
	if last == 0 || hooks == 0 {
		t.Fatalf("written hook ran %d times, last end %d", hooks, last)
	}
	verifyPowerLoss(t, dir, cfg, 0, last, 0, false)
}

// TestAsyncDirectWriteFailureAcknowledgesNothingAfter: one failed write op fails the log;
// the written end stays below the group it belonged to even when the group's other ops,
// and later offsets, reached the disk; no append is accepted afterwards.
func TestAsyncDirectWriteFailureAcknowledgesNothingAfter(t *testing.T) {
	seed := asyncSeed(t)
	for round := 0; round < 8; round++ {
		rng := rand.New(rand.NewPCG(seed, uint64(round)))
		dir := t.TempDir()
		cfg := LogConfig{Storage: StorageDirect, SegmentBytes: 1 << 20, DirectChunkBytes: 8 << 10, Logger: quietLogger}
		l, _ := openLog(t, dir, cfg, ring.Syscalls{})
		skipUnlessDirect(t, l, dir, StorageDirect)
		fio := faultio.New(ring.Syscalls{})
		fio.Inject(faultio.Rule{Op: faultio.OpPwrite, Errno: unix.EIO, After: 5 + rng.IntN(20), Times: 1})
		qw := &queuedWrites{fio: fio, rng: rng}
		undo := manyGroups(rng, groupCounts[round%len(groupCounts)])
		var failedAt int64 = -1
		l.SetAsyncWriter(qw, func() {
			if l.Err() != nil && failedAt < 0 {
				failedAt = l.EndOffset()
			}
			if failedAt >= 0 && l.EndOffset() != failedAt {
				t.Fatalf("round %d: written end moved from %d to %d after the failure", round, failedAt, l.EndOffset())
			}
		})
		for i := 0; i < 200 && l.Err() == nil; i++ {
			if _, err := appendCounted(t, l, rng); err != nil {
				if !errors.Is(err, ErrLogFailed) {
					t.Fatalf("round %d: append: %v", round, err)
				}
				break
			}
			qw.completeSome(rng.IntN(3))
		}
		qw.completeSome(len(qw.q))
		undo()
		if l.Err() == nil || !errors.Is(l.Err(), unix.EIO) {
			t.Fatalf("round %d: log error %v, want EIO", round, l.Err())
		}
		if failedAt < 0 || l.EndOffset() != failedAt {
			t.Fatalf("round %d: written end %d, %d when the failure was reported", round, l.EndOffset(), failedAt)
		}
		if l.EndOffset() >= l.StagedEndOffset() {
			t.Fatalf("round %d: the failed write's records count as written (end %d, staged %d)", round, l.EndOffset(), l.StagedEndOffset())
		}
		checkOnDisk(t, l, l.EndOffset())
		if _, err := appendCounted(t, l, rng); !errors.Is(err, ErrLogFailed) {
			t.Fatalf("round %d: append after the failure: %v", round, err)
		}
		if err := l.Close(); err != nil && !errors.Is(err, ErrLogFailed) {
			t.Fatalf("round %d: close: %v", round, err)
		}
		verifyPowerLoss(t, dir, cfg, round, failedAt, 0, true)
	}
}

// TestAsyncDirectCrashWithWritesInFlight: the process dies (kill -9: the file keeps what
// reached it) or the machine loses power (faultio.CrashFS also takes back unsynced writes)
// while write groups are in flight, some of them torn. Recovery must keep every record the
// log reported written (kill -9) or synced (power loss), intact, and serve no torn bytes.
// The "+recycle" variants run retention and reuse retired segment files (RecycleSegments),
// so writes in flight land over an old segment's valid batches, which a lost or torn write
// leaves in place.
func TestAsyncDirectCrashWithWritesInFlight(t *testing.T) {
	seed := asyncSeed(t)
	for i, variant := range []struct{ powerLoss, prealloc, recycle bool }{{false, false, false}, {true, false, false},
		{false, true, false}, {true, true, false}, {false, false, true}, {true, false, true},
		{false, false, false}, {true, false, false}, {false, false, true}, {true, false, true}} {
		groupsMax := 1
		if i >= 6 { // the last four: several write groups in flight
			groupsMax = 4
		}
		powerLoss := variant.powerLoss
		name := fmt.Sprintf("powerloss=%v", powerLoss)
		if variant.prealloc {
			name += "+prealloc" // zero-filled space ahead (PreallocateBytes), written through fs too
		}
		if variant.recycle {
			name += "+recycle"
		}
		name += fmt.Sprintf("+groups=%d", groupsMax)
		t.Run(name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 7))
			dir := t.TempDir()
			cfg := LogConfig{Storage: StorageDirect, SegmentBytes: 32 << 10, IndexIntervalBytes: 512,
				DirectChunkBytes: 8 << 10, Logger: quietLogger}
			if variant.prealloc {
				cfg.PreallocateBytes = 16 << 10
			}
			cfg.RecycleSegments = -1
			if variant.recycle {
				cfg.RecycleSegments, cfg.RetentionBytes = 2, 1<<10
			}
			// rollTorn counts crashes with a sealed segment's writes still in flight (a roll
			// that did not wait for them) or its cut to size in flight.
			// retentionTorn counts crashes with a retention pass's checkpoint flushes in flight
			// or its segments not yet retired (retention.go).
			var lostTorn, staleTorn, rollTorn, retentionTorn int
			var groups groupsSeen
			defer manyGroups(rng, groupsMax)()
			// 10 rounds, and up to 100 while no crash has yet hit what the variant is about
			// (a write in flight; a retention pass; a roll's seal): each round hits those by
			// chance, and 10 misses in a row happened once in CI (seed 5546 under -race). A
			// crash with a write in flight over a recycled file is not left to chance: in the
			// recycle variant every third round ends with one (recycledWriteInFlight), and the
			// pool's background preparations are collected after every step (settlePool), so
			// that a seed replays the same rounds (whether a retired file was in the pool at a
			// roll was a race with its preparation goroutine; 40 rounds without such a crash at
			// 9cf3b9d, seed 26282, -tags invariants).
			untested := func() bool {
				return lostTorn == 0 || groupsMax > 1 && groups < 2 || variant.recycle && retentionTorn == 0 ||
					!variant.prealloc && rollTorn == 0
			}
			for round := 0; round < 10 || untested() && round < 100; round++ {
				fs := faultio.NewCrashFS(ring.Syscalls{})
				if err := fs.TrackDir(dir); err != nil {
					t.Fatal(err)
				}
				live := cfg
				live.ZeroFileIO = fs // zeroing (prealloc) and pool preparation (recycle) sync through it
				l, _ := openLog(t, dir, live, fs)
				skipUnlessDirect(t, l, dir, StorageDirect)
				start := l.EndOffset()
				qw := &queuedWrites{fio: fs, rng: rng}
				l.SetAsyncWriter(qw, func() {})
				l.SetAsyncRetention(qw, func() {})
				for i, n := 0, 5+rng.IntN(40); i < n; i++ {
					if _, err := appendCounted(t, l, rng); err != nil {
						t.Fatal(err)
					}
					groups.note(l)
					switch rng.IntN(8) {
					case 0:
						if err := l.Sync(); err != nil {
							t.Fatal(err)
						}
					case 1:
						// The shard's pipelined sync: it covers only completed writes,
						// while more complete during its fdatasyncs.
						tk, ok, err := l.BeginSync()
						if err != nil {
							t.Fatal(err)
						}
						if ok {
							endSync(t, l, tk, fs, func() { qw.completeSome(rng.IntN(3)) })
						}
					case 2, 3:
						qw.completeSome(1 + rng.IntN(3))
					case 4:
						if variant.recycle {
							if _, err := l.EnforceRetention(time.Now()); err != nil {
								t.Fatal(err)
							}
						}
					}
					l.settlePool()
				}
				if variant.recycle && round%3 == 2 {
					recycledWriteInFlight(t, l, qw, rng)
				}
				written, synced, staged := l.EndOffset(), l.SyncedOffset(), l.StagedEndOffset()
				logStart := l.StartOffset()
				if l.RetentionPending() {
					retentionTorn++
					logStart = l.retention.target // a durable checkpoint moves the start there
				}
				if len(qw.q) > 0 {
					lostTorn++
					if l.active().stale {
						staleTorn++
					}
					if len(l.sealing) > 0 || l.sealsInFlight > 0 {
						rollTorn++
					}
				}
				got := crashAndVerify(t, l, qw, fs, powerLoss, cfg, round, written, synced, logStart, start)
				if got > staged {
					t.Fatalf("round %d: recovered up to %d, only %d were ever appended", round, got, staged)
				}
			}
			if lostTorn == 0 || groupsMax > 1 && groups < 2 {
				t.Fatalf("crashes that hit a write in flight: %d, most write groups in flight: %d; the test tested nothing", lostTorn, groups)
			}
			if variant.recycle && staleTorn == 0 { // recycledWriteInFlight made some
				t.Fatal("no crash hit a write in flight over a recycled file: the variant tested nothing")
			}
			if variant.recycle && retentionTorn == 0 {
				t.Fatal("no crash hit a retention pass in flight: the variant tested nothing")
			}
			// With preallocation a roll waits while the zeroing job runs (it owns the cut).
			if !variant.prealloc && rollTorn == 0 {
				t.Fatal("no crash hit a roll with the sealed segment's writes or cut in flight: the roll case tested nothing")
			}
			t.Logf("crashes with writes in flight %d, over a recycled file %d, with a roll's seal in flight %d, with a retention pass in flight %d", lostTorn, staleTorn, rollTorn, retentionTorn)
		})
	}
}

// recycledWriteInFlight drives l, which recycles retired segments, until an append's write
// over a recycled file (the active segment is a pool file: stale) is queued on qw: it
// completes qw's ops one at a time, completes retention passes, collects the pool's
// preparations, appends (rolls take a pool file when one is ready) and enforces retention
// (which retires segments into the pool). Bounded.
func recycledWriteInFlight(t *testing.T, l *Log, qw *queuedWrites, rng *rand.Rand) {
	t.Helper()
	const stepsMax = 400 // a few rolls of 32 KiB segments, each op completed one at a time
	for step := 0; !l.active().stale || len(qw.q) == 0; step++ {
		if step == stepsMax {
			t.Fatalf("no write over a recycled file in flight after %d steps (pool %d, preparing %d)", step, len(l.recyclePool), l.recyclePreparing)
		}
		var err error
		switch {
		case len(qw.q) > 0 && !l.active().stale:
			qw.completeOne()
		case step%4 == 0:
			_, err = l.EnforceRetention(time.Now())
		default:
			_, err = appendCounted(t, l, rng)
		}
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.CompleteRetention(); err != nil {
			t.Fatal(err)
		}
		l.settlePool()
	}
}

// crashAndVerify ends a crash round of l (opened in its directory at end offset start,
// through fs): the ops queued on qw die midway, the process dies (kill -9), and with
// powerLoss the machine too (fs takes back what was not synced); the reopened log must hold
// every record from logStart up to written (kill -9) or synced (power loss). It returns the
// recovered end offset.
func crashAndVerify(t *testing.T, l *Log, qw *queuedWrites, fs *faultio.CrashFS, powerLoss bool, cfg LogConfig, round int, written, synced, logStart, start int64) int64 {
	t.Helper()
	qw.dieMidway()
	l.closeFiles()
	want := written
	if powerLoss {
		if err := fs.Crash(qw.rng); err != nil {
			t.Fatal(err)
		}
		want = synced
	}
	return verifyPowerLoss(t, l.dir, cfg, round, want, logStart, synced > start)
}

// TestAsyncDirectRollDoesNotWait: a roll leaves the sealed segment's writes in flight (no
// AwaitWrites) and sends its staged bytes at once; the new segment's writes start beside
// them; the written end and BeginSync never cross into the new segment while the old one
// is not wholly written, even when the new segment's writes complete first; reads of the
// old segment's tail are served from memory meanwhile; when its last write completes the
// old file is cut to its logical length (no padding past it); a crash at any point
// recovers every record reported written.
func TestAsyncDirectRollDoesNotWait(t *testing.T) {
	seed := asyncSeed(t)
	memReads := 0
	defer func() {
		if memReads == 0 && !t.Failed() && !t.Skipped() {
			t.Error("no round read a partly written sealing segment: that case tested nothing")
		}
	}()
	for round := 0; round < 20; round++ {
		rng := rand.New(rand.NewPCG(seed, uint64(100+round)))
		dir := t.TempDir()
		cfg := LogConfig{Storage: StorageDirect, SegmentBytes: 32 << 10, IndexIntervalBytes: 512,
			DirectChunkBytes: 8 << 10, Logger: quietLogger, RecycleSegments: -1}
		l, _ := openLog(t, dir, cfg, ring.Syscalls{})
		skipUnlessDirect(t, l, dir, StorageDirect)
		qw := &countingWrites{queuedWrites: &queuedWrites{fio: ring.Syscalls{}, rng: rng}}
		last := int64(0)
		l.SetAsyncWriter(qw, func() {
			if l.EndOffset() < last {
				t.Fatalf("round %d: written end went back from %d to %d", round, last, l.EndOffset())
			}
			last = l.EndOffset()
			checkOnDisk(t, l, last)
		})
		before := SealStats()
		// Fill the first segment and roll without completing anything.
		for l.SegmentCount() < 2 {
			if _, err := appendCounted(t, l, rng); err != nil {
				t.Fatal(err)
			}
		}
		if qw.awaits != 0 {
			t.Fatalf("round %d: the roll waited for writes (%d AwaitWrites)", round, qw.awaits)
		}
		old := l.segments[0]
		if !old.sealing || old.direct == nil || len(l.sealing) == 0 || l.sealing[0] != old {
			t.Fatalf("round %d: old segment sealing %v, writer %v, %d sealing", round, old.sealing, old.direct != nil, len(l.sealing))
		}
		if SealStats().InFlight == before.InFlight {
			t.Fatalf("round %d: the roll was not counted as one with writes in flight", round)
		}
		// Every byte of the old segment is submitted: its writes cover its whole length.
		var submitted int64
		for _, x := range qw.q {
			if x.fd == old.direct.fd() {
				submitted = max(submitted, x.off+int64(len(x.p)))
			}
		}
		if submitted < old.size {
			t.Fatalf("round %d: old segment's writes reach %d of its %d bytes", round, submitted, old.size)
		}
		if end := l.EndOffset(); end >= old.nextOffset {
			t.Fatalf("round %d: written end %d reached the new segment (old ends at %d) with nothing completed", round, end, old.nextOffset)
		}
		// Complete the old segment's writes in order until part of it is written; what is
		// written reads back (its tail from the writer's chunks), nothing past it.
		oldFd := old.direct.fd()
		for l.EndOffset() <= old.baseOffset && old.sealing && len(qw.q) > 0 {
			x := qw.q[0]
			qw.q = qw.q[1:]
			x.done(qw.apply(x, x.data))
		}
		if old.direct != nil && l.EndOffset() > old.baseOffset {
			memReads++
			rr, err := l.Read(old.baseOffset, 1<<20)
			if err != nil || rr.NextOffset != l.EndOffset() {
				t.Fatalf("round %d: read of the sealing segment: next %d (written end %d), %v", round, rr.NextOffset, l.EndOffset(), err)
			}
			var data []byte
			for _, p := range rr.Pieces {
				if p.Data == nil {
					t.Fatalf("round %d: a sealing segment's tail was read from its file", round)
				}
				data = append(data, p.Data...)
			}
			for next := old.baseOffset; len(data) > 0; {
				h, err := validateFirst(data)
				if err != nil || h.BaseOffset != next {
					t.Fatalf("round %d: batch at %d from memory: base %d, %v", round, next, h.BaseOffset, err)
				}
				next = h.LastOffset() + 1
				data = data[h.Size():]
			}
		}
		// A few more appends in the new segment; complete the new segment's writes first.
		for i := 0; i < 3 && l.SegmentCount() == 2; i++ {
			if _, err := appendCounted(t, l, rng); err != nil {
				t.Fatal(err)
			}
		}
		for i := 0; i < len(qw.q); {
			if x := qw.q[i]; x.fd != oldFd && !x.cut {
				qw.q = append(qw.q[:i], qw.q[i+1:]...)
				x.done(qw.apply(x, x.data))
				continue
			}
			i++
		}
		if old.direct != nil && l.EndOffset() > old.nextOffset {
			t.Fatalf("round %d: written end %d passed the unwritten old segment (ends at %d)", round, l.EndOffset(), old.nextOffset)
		}
		oldPending := old.direct != nil
		tk, ok, err := l.BeginSync()
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			if tk.Offset > l.EndOffset() {
				t.Fatalf("round %d: a sync covers %d past the written end %d", round, tk.Offset, l.EndOffset())
			}
			endSync(t, l, tk, ring.Syscalls{}, func() {})
			if l.SyncedOffset() > l.EndOffset() || oldPending && l.active().syncedNextOffset > l.active().baseOffset {
				t.Fatalf("round %d: synced %d (active segment's mark %d), written end %d", round, l.SyncedOffset(), l.active().syncedNextOffset, l.EndOffset())
			}
		}
		if rng.IntN(3) == 0 { // a crash now: kill -9 with the old segment torn
			written := l.EndOffset()
			qw.dieMidway()
			l.closeFiles()
			verifyPowerLoss(t, dir, cfg, round, written, 0, false)
			continue
		}
		qw.completeSome(len(qw.q))
		qw.completeSome(len(qw.q)) // the cut, started by the last write's completion
		if old.sealing || old.direct != nil || len(l.sealing) != 0 || l.sealsInFlight != 0 {
			t.Fatalf("round %d: after every completion: sealing %v, writer %v, %d sealing, %d cuts in flight",
				round, old.sealing, old.direct != nil, len(l.sealing), l.sealsInFlight)
		}
		if fi, err := old.log.Stat(); err != nil || fi.Size() != old.size {
			t.Fatalf("round %d: sealed file is %d bytes, logical %d (%v)", round, fi.Size(), old.size, err)
		}
		if l.EndOffset() != l.StagedEndOffset() {
			t.Fatalf("round %d: written end %d, appended %d", round, l.EndOffset(), l.StagedEndOffset())
		}
		if err := l.Sync(); err != nil {
			t.Fatal(err)
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		verifyPowerLoss(t, dir, cfg, round, last, 0, false) // closed cleanly
	}
}

// countingWrites counts the owner's waits.
type countingWrites struct {
	*queuedWrites
	awaits int
}

func (w *countingWrites) AwaitWrites(cond func() bool) error {
	w.awaits++
	return w.queuedWrites.AwaitWrites(cond)
}

// TestDirectRollReusesChunks: a roll hands the sealed segment's chunks (registrations
// kept) to the next segment's writer, so a log that rolls often registers (and allocates)
// a bounded number of chunks, not a fresh set per segment; a chunk a reader holds is never
// handed on.
func TestDirectRollReusesChunks(t *testing.T) {
	rng := rand.New(rand.NewPCG(asyncSeed(t), 3))
	dir := t.TempDir()
	cfg := LogConfig{Storage: StorageDirect, SegmentBytes: 64 << 10, DirectChunkBytes: 8 << 10,
		DirectCacheChunks: 2, Logger: quietLogger}
	l, _ := openLog(t, dir, cfg, ring.Syscalls{})
	skipUnlessDirect(t, l, dir, StorageDirect)
	qw := &queuedWrites{fio: ring.Syscalls{}, rng: rng}
	fw := &fixedQueuedWrites{queuedWrites: qw, t: t, slots: make([][]byte, 64)}
	l.SetAsyncWriter(fw, func() {})
	var held []Piece
	var heldCopies [][]byte
	for i := 0; i < 400; i++ {
		if _, err := appendCounted(t, l, rng); err != nil {
			t.Fatal(err)
		}
		// The device keeps up on average: a roll finds the sealed segment's writes done or
		// soon done, and its chunks come back to the pool for the new writer.
		if rng.IntN(2) == 0 {
			qw.completeSome(len(qw.q))
		} else {
			qw.completeSome(rng.IntN(4))
		}
		if i%50 == 0 { // a reader keeps a slice of a cached chunk
			rr, err := l.Read(max(l.EndOffset()-1, l.StartOffset()), 1<<20)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range rr.Pieces {
				if p.Data != nil {
					held = append(held, p)
					heldCopies = append(heldCopies, bytes.Clone(p.Data))
				}
			}
		}
	}
	segments := len(l.segments)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	// Each segment's writer needs up to cache + active + the staged and in-flight chunks;
	// without the hand-off every one of the segments registered its own. (A device that
	// falls behind the rolls for good makes each roll allocate what the new writer needs
	// while the sealing one still holds its chunks: measured with completions this rare
	// every 4th append, ≈ 0.7 registrations per segment; here, ≈ 20 over 275 segments.)
	if segments < 10 || fw.used > 3*directFreeChunksMax+len(held) {
		t.Fatalf("%d chunk registrations over %d segments (%d held by readers)", fw.used, segments, len(held))
	}
	if len(held) == 0 {
		t.Fatal("no read was served from memory: the reader case tested nothing")
	}
	for i, p := range held { // the held slices still hold what the log wrote
		if !bytes.Equal(p.Data, heldCopies[i]) {
			t.Fatalf("a held piece at %d changed under its reader", p.Position)
		}
	}
}

// alignedBatch builds a batch of exactly blockBytes (one record, its value sized to fit),
// so that the log's end lands on a block boundary.
func alignedBatch(t *testing.T, next *int64) []byte {
	t.Helper()
	for v := blockBytes - 200; v < blockBytes; v++ {
		b := batch.NewBuilder(batch.BuilderOptions{})
		b.Append(1, nil, make([]byte, v), nil)
		out, err := b.Build(nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(out) == blockBytes {
			*next++
			return out
		}
	}
	t.Fatal("no value size makes a batch of one block")
	return nil
}

// TestAsyncDirectGroupAfterFinishedGroup: a group that finished before the one ahead of it
// (it shares no block with that one) has written its last block; the group started after
// it shares that block and must write it at once, not wait for a finish that already
// happened (that wait never ended: the loop spun in awaitWrites).
func TestAsyncDirectGroupAfterFinishedGroup(t *testing.T) {
	dir := t.TempDir()
	cfg := LogConfig{Storage: StorageDirect, SegmentBytes: 1 << 20, DirectChunkBytes: 64 << 10, Logger: quietLogger}
	l, _ := openLog(t, dir, cfg, ring.Syscalls{})
	skipUnlessDirect(t, l, dir, StorageDirect)
	rng := rand.New(rand.NewPCG(1, 1))
	defer manyGroups(rng, 4)()
	DirectGroupMinBytes = 0
	qw := &queuedWrites{fio: ring.Syscalls{}, rng: rng}
	l.SetAsyncWriter(qw, func() {})
	next := int64(0)
	bb := batch.NewBuilder(batch.BuilderOptions{})
	appendOne := func(b []byte) {
		t.Helper()
		if _, err := l.AppendBatches([][]byte{b}); err != nil {
			t.Fatal(err)
		}
	}
	appendOne(alignedBatch(t, &next))      // group 1: [0, 4096), ends on a block boundary
	appendOne(crashBatch(t, bb, &next, 3)) // group 2: [4096, 8192), shares no block
	if len(qw.q) != 2 || qw.q[1].off != blockBytes {
		t.Fatalf("%d writes in flight, want group 1's and group 2's (at %d)", len(qw.q), blockBytes)
	}
	qw.q[1].done(pwriteAll(qw.fio, qw.q[1].fd, qw.q[1].data, qw.q[1].off)) // group 2 finishes first
	qw.q = qw.q[:1]
	appendOne(crashBatch(t, bb, &next, 3)) // group 3 starts in group 2's last block
	if len(qw.q) != 2 || qw.q[1].off != blockBytes {
		t.Fatalf("%d writes in flight: group 3 must write the block group 2 wrote (at %d), at once", len(qw.q), blockBytes)
	}
	qw.completeSome(len(qw.q))
	if l.EndOffset() != next || l.WritesPending() {
		t.Fatalf("written end %d, appended %d, writes pending %v", l.EndOffset(), next, l.WritesPending())
	}
	checkOnDisk(t, l, next)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
}
