package ring

import (
	"container/heap"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Reactor is one shard's event loop over its own Ring. It is created on, and afterwards
// used only from, one locked OS thread (see StartPinned), except Post and Stop, which any
// goroutine may call.
//
// Completions are dispatched to the callback given at submission, in the loop, never
// re-entrantly: a blocking FileIO call made from inside a callback queues every other
// completion it reaps into a backlog that the loop dispatches afterwards.
//
// User data layout (64 bits): bit 63 marks reactor-internal requests (wake-up read,
// blocking FileIO ops, ignored CQEs); otherwise bits 32..62 are the slot generation and
// bits 0..31 the slot index, so a stale completion for a reused slot is detected.
type Reactor struct {
	ring  Ring
	probe *Probe
	cfg   Config

	// Owned by the loop thread.
	slots     []opSlot
	freeSlots []uint32
	cqes      []CQE // reap batch for the loop
	syncCQEs  []CQE // reap batch for blocking FileIO waits
	backlog   []CQE // completions reaped during a blocking wait, dispatched by the loop
	// cqes[batchNext:batchLen] are the completions of the loop's reap batch still waiting
	// behind the one being dispatched (Waiting; AwaitWrites takes its writes from there).
	// int32s (a batch is at most reapBatch): the pair takes the 8 bytes of the one int it
	// replaced, so the fields below keep their offsets.
	batchNext, batchLen int32
	syncSeq             uint64
	syncPin             runtime.Pinner
	// syncPins pin Pwritev's buffers, pinnerRefsInline per Pinner: a Pinner holds that many
	// without allocating and allocates a fresh array for more on every use.
	syncPins    []runtime.Pinner
	iovs        []Iovec
	timers      timerHeap
	now         func() time.Time
	wakeArmed   bool
	running     bool
	scratch     *[8]byte // eventfd read target; heap, pinned for the reactor's life
	scratchP    runtime.Pinner
	unknownCQEs uint64 // completions whose user data matched no op (see dispatch)
	ownerTid    int    // thread that created the reactor (gettid)
	stats       loopStats
	worked      int          // completions and posts dispatched since the loop last decided to wait
	writeBufs   writeBuffers // the sparse fixed-buffer table of StartWriteFixed (writeasync.go)
	// fileOps counts the ops in flight whose completion goes to writeDone (StartWrite and
	// the other Start* file ops of writeasync.go): while it is above 0 the loop's waits are
	// bounded by fileOpWaitMax (see boundedWait).
	fileOps int

	// Shared with other goroutines.
	mailbox     mailbox
	wakeFd      int
	wakePending atomic.Bool
	// awake is true while the loop runs (callbacks, timers, mailbox, blocking FileIO) and
	// false from just before it checks the mailbox on its way to sleep until it wakes: a
	// Post while it is true needs no eventfd write, the loop drains the mailbox before it
	// sleeps. Both sides use sequentially consistent atomics (the poster publishes its
	// message, then reads awake; the loop clears awake, then reads the mailbox), so a
	// message is either seen by that check or followed by a wake-up.
	awake      atomic.Bool
	wakeWrites atomic.Uint64 // eventfd writes, for tests
	stopping   atomic.Bool
	closed     atomic.Bool
	posters    atomic.Int32  // Post/PostFrom/Stop calls in progress; Close waits for 0 before closing wakeFd
	foreignIO  atomic.Uint64 // FileIO calls made off the owning thread (served by plain syscalls)

	// Owned by the loop thread; last, so that the fields above keep their offsets (and Post
	// its machine code) with or without it. beforeWait, when set (tests only), runs on a
	// turn that is about to wait, after the loop cleared awake and found the mailbox empty:
	// a Post made from there lands in the window where a lost wake-up would hide
	// (wake_test.go).
	beforeWait func()
}

type opSlot struct {
	done func(res int32, flags uint32)
	// writeDone, when set, receives the completion instead of done (StartWrite's ops, which
	// AwaitWrites may dispatch while the owner waits; see writeasync.go).
	writeDone func(n int, err error)
	gen       uint32
	busy      bool
	pinned    bool
	pinner    runtime.Pinner
}

const (
	tokenInternal  = uint64(1) << 63
	tokenSync      = tokenInternal | uint64(1)<<62
	tokenWake      = tokenInternal | 1
	tokenIgnore    = tokenInternal | 2
	tokenMsgWake   = tokenInternal | 3
	slotGenMask    = 0x7fffffff
	reapBatch      = 256
	reapRoundsMax  = 16 // reap rounds per loop turn before giving timers/mailbox a go
	inflightDflt   = 65536
	mailboxDefault = 4096
)

// NewReactor creates a reactor with its ring (Open). Call it on the locked OS thread that
// will run the loop: with SingleIssuer/DeferTaskrun only that thread may submit and reap.
func NewReactor(cfg Config) (*Reactor, error) {
	cfg = cfg.withDefaults()
	if cfg.InflightMax <= 0 {
		cfg.InflightMax = inflightDflt
	}
	if cfg.MailboxEntries == 0 {
		cfg.MailboxEntries = mailboxDefault
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	rg, err := Open(cfg)
	if err != nil {
		return nil, err
	}
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		rg.Close()
		return nil, fmt.Errorf("ring: reactor wake eventfd: %w", err)
	}
	r := &Reactor{
		ring:     rg,
		probe:    hideOps(rg.Probe(), cfg.HideOps),
		cfg:      cfg,
		cqes:     make([]CQE, reapBatch),
		syncCQEs: make([]CQE, reapBatch),
		now:      cfg.Now,
		wakeFd:   efd,
		scratch:  new([8]byte),
	}
	r.scratchP.Pin(r.scratch)
	r.ownerTid = unix.Gettid()
	r.mailbox.init(roundPow2(cfg.MailboxEntries))
	return r, nil
}

// StartPinned starts a goroutine that locks its OS thread, pins it to cpu (cpu < 0: no
// pinning), creates a Reactor on it and calls fn(r). It returns once the reactor exists (or
// failed). The reactor is closed when fn returns; the thread is never unlocked, so it exits
// with the goroutine instead of returning to Go's pool with a narrowed affinity.
func StartPinned(cpu int, cfg Config, fn func(r *Reactor)) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if cpu >= 0 {
			var set unix.CPUSet
			set.Set(cpu)
			if err := unix.SchedSetaffinity(0, &set); err != nil {
				errc <- fmt.Errorf("ring: pin loop thread to cpu %d: %w", cpu, err)
				return
			}
		}
		r, err := NewReactor(cfg)
		errc <- err
		if err != nil {
			return
		}
		defer r.Close()
		fn(r)
	}()
	return <-errc
}

// Ring returns the reactor's ring (owning thread only).
func (r *Reactor) Ring() Ring { return r.ring }

// Backend returns the ring's backend name.
func (r *Reactor) Backend() string { return r.ring.Backend() }

// hideOps returns p without ops (Config.HideOps); p itself when there are none.
func hideOps(p *Probe, ops []Opcode) *Probe {
	if len(ops) == 0 || p == nil {
		return p
	}
	masked := *p
	for _, op := range ops {
		if int(op) < len(masked.ops) {
			masked.ops[op] = false
		}
	}
	return &masked
}

// Probe returns the ring's op/feature probe (less Config.HideOps).
func (r *Reactor) Probe() *Probe { return r.probe }

// Op is a reserved submission: fill SQE() with a Prep helper, Pin any Go memory it points
// to, then Submit (or Abort). Zero allocations; an Op is a value and must not be reused.
type Op struct {
	r   *Reactor
	sqe *SQE
	idx uint32
}

// Reserve makes sure the next n SQEs fit in the SQ without an intermediate flush. Call it
// before preparing a linked chain (IOSQE_IO_LINK): a flush in the middle of a chain would end
// the chain there, and the kernel would run the rest unlinked.
func (r *Reactor) Reserve(n int) error {
	if n > int(r.cfg.Entries) {
		return fmt.Errorf("ring: Reserve(%d): the SQ has only %d entries: %w", n, r.cfg.Entries, ErrSQFull)
	}
	if r.ring.SQSpace() >= n {
		return nil
	}
	if _, err := r.ring.Submit(); err != nil {
		return fmt.Errorf("ring: Reserve(%d): flush: %w", n, err)
	}
	if r.ring.SQSpace() < n {
		return fmt.Errorf("ring: Reserve(%d): %w", n, ErrSQFull)
	}
	return nil
}

// Begin reserves an SQE and a completion slot for an async op whose CQEs go to done
// (multishot ops: once per CQE while CQEFMore is set). done may be nil.
func (r *Reactor) Begin(done func(res int32, flags uint32)) (Op, error) {
	if r.closed.Load() {
		return Op{}, ErrClosed
	}
	if invariantsEnabled && unix.Gettid() != r.ownerTid {
		return Op{}, fmt.Errorf("%w: Begin on thread %d, reactor owned by %d", ErrWrongThread, unix.Gettid(), r.ownerTid)
	}
	idx, err := r.allocSlot()
	if err != nil {
		return Op{}, err
	}
	sqe, err := r.getSQE()
	if err != nil {
		r.releaseSlot(idx)
		return Op{}, err
	}
	sqe.PrepNop()
	r.slots[idx].done = done
	return Op{r: r, sqe: sqe, idx: idx}, nil
}

// SQE is the entry to prepare.
func (o Op) SQE() *SQE { return o.sqe }

// Pin keeps Go heap memory that the SQE points to pinned until the op's final completion.
func (o Op) Pin(p any) {
	s := &o.r.slots[o.idx]
	s.pinner.Pin(p)
	s.pinned = true
}

// Submit queues the prepared op; the loop hands it to the kernel on its next turn. An op
// the backend does not support is turned into an ignored NOP and reported as
// ErrUnsupported naming the op and the kernel it needs.
func (o Op) Submit() error {
	r := o.r
	op := o.sqe.Opcode
	if !r.probe.Supported(op) {
		o.Abort()
		return fmt.Errorf("%w: op %s (needs Linux %s) on backend %s", ErrUnsupported, op, op.MinKernel(), r.ring.Backend())
	}
	o.sqe.UserData = uint64(r.slots[o.idx].gen)<<32 | uint64(o.idx)
	r.stats.submitted++
	return nil
}

// Abort releases a reserved op; its SQE becomes a NOP whose completion is ignored.
func (o Op) Abort() {
	o.sqe.PrepNop()
	o.sqe.UserData = tokenIgnore
	o.r.releaseSlot(o.idx)
}

// Submit reserves an SQE, lets prep fill it, and queues it; done receives its completions
// (multishot: one call per CQE while CQEFMore is set). When the SQE points at Go heap
// memory, use Begin and Op.Pin instead, or the *Async helpers, so the memory stays pinned.
func (r *Reactor) Submit(prep func(sqe *SQE), done func(res int32, flags uint32)) error {
	op, err := r.Begin(done)
	if err != nil {
		return err
	}
	prep(op.sqe)
	return op.Submit()
}

// ReadAsync reads into b at off and calls done with the result; b is pinned until then.
func (r *Reactor) ReadAsync(fd int, b []byte, off int64, done func(res int32, flags uint32)) error {
	return r.bufOp(OpRead, fd, b, uint64(off), done)
}

// WriteAsync writes b at off and calls done with the result; b is pinned until then.
func (r *Reactor) WriteAsync(fd int, b []byte, off int64, done func(res int32, flags uint32)) error {
	return r.bufOp(OpWrite, fd, b, uint64(off), done)
}

// SendAsync sends b on a socket; b is pinned until done runs.
func (r *Reactor) SendAsync(fd int, b []byte, done func(res int32, flags uint32)) error {
	return r.bufOp(OpSend, fd, b, 0, done)
}

// SendZCAsync sends b with IORING_OP_SEND_ZC; b stays pinned until the notification. done
// runs twice: with the result (flags has CQEFMore), then with res 0 and CQEFNotif, after
// which b may be reused. If the result has no CQEFMore, no notification follows.
func (r *Reactor) SendZCAsync(fd int, b []byte, done func(res int32, flags uint32)) error {
	return r.bufOp(OpSendZC, fd, b, 0, done)
}

// RecvAsync receives into b from a socket; b is pinned until done runs.
func (r *Reactor) RecvAsync(fd int, b []byte, done func(res int32, flags uint32)) error {
	return r.bufOp(OpRecv, fd, b, 0, done)
}

func (r *Reactor) bufOp(code Opcode, fd int, b []byte, off uint64, done func(res int32, flags uint32)) error {
	op, err := r.Begin(done)
	if err != nil {
		return err
	}
	switch code {
	case OpRead:
		op.sqe.PrepRead(fd, b, off)
	case OpWrite:
		op.sqe.PrepWrite(fd, b, off)
	case OpSend:
		op.sqe.PrepSend(fd, b, 0)
	case OpSendZC:
		op.sqe.PrepSendZC(fd, b, 0)
	case OpRecv:
		op.sqe.PrepRecv(fd, b, 0)
	}
	if len(b) > 0 {
		op.Pin(&b[0])
	}
	return op.Submit()
}

func (r *Reactor) allocSlot() (uint32, error) {
	if n := len(r.freeSlots); n > 0 {
		idx := r.freeSlots[n-1]
		r.freeSlots = r.freeSlots[:n-1]
		r.slots[idx].busy = true
		return idx, nil
	}
	if len(r.slots) >= r.cfg.InflightMax {
		return 0, fmt.Errorf("%w (limit %d)", ErrTooManyInflight, r.cfg.InflightMax)
	}
	r.slots = append(r.slots, opSlot{busy: true})
	return uint32(len(r.slots) - 1), nil
}

func (r *Reactor) releaseSlot(idx uint32) {
	s := &r.slots[idx]
	if s.pinned {
		s.pinner.Unpin()
		s.pinned = false
	}
	if s.writeDone != nil {
		r.fileOps--
	}
	s.done, s.writeDone = nil, nil
	s.busy = false
	s.gen = (s.gen + 1) & slotGenMask
	r.freeSlots = append(r.freeSlots, idx)
}

// getSQE returns a free SQE, flushing the SQ to the kernel once if it is full.
func (r *Reactor) getSQE() (*SQE, error) {
	if sqe := r.ring.GetSQE(); sqe != nil {
		return sqe, nil
	}
	if _, err := r.ring.Submit(); err != nil {
		r.reapInto(&r.backlog)
		if _, err = r.ring.Submit(); err != nil {
			return nil, fmt.Errorf("ring: flush full SQ: %w", err)
		}
	}
	if sqe := r.ring.GetSQE(); sqe != nil {
		return sqe, nil
	}
	return nil, fmt.Errorf("%w (%s backend): reap completions and retry", ErrSQFull, r.ring.Backend())
}

// reapInto appends every available completion to dst.
func (r *Reactor) reapInto(dst *[]CQE) {
	for round := 0; round < reapRoundsMax; round++ {
		n := r.ring.PeekCQEs(r.syncCQEs)
		*dst = append(*dst, r.syncCQEs[:n]...)
		if n < len(r.syncCQEs) {
			return
		}
	}
}

// dispatch delivers one completion to its callback.
func (r *Reactor) dispatch(c *CQE) {
	r.worked++
	tok := c.UserData
	if tok&tokenInternal != 0 {
		switch tok {
		case tokenWake:
			r.wakeArmed = false
			r.wakePending.Store(false)
		case tokenMsgWake:
			r.wakePending.Store(false)
		}
		return
	}
	idx, gen := uint32(tok), uint32(tok>>32)
	if int(idx) >= len(r.slots) || !r.slots[idx].busy || r.slots[idx].gen != gen {
		// Only an SQE queued behind the reactor's back (Ring().GetSQE with arbitrary user
		// data) gets here. Drop it, count it, say so once.
		r.unknownCQEs++
		if r.unknownCQEs == 1 {
			slog.Warn("ring: reactor dropped a completion it did not submit", "user_data", tok, "res", c.Res)
		}
		return
	}
	done, writeDone := r.slots[idx].done, r.slots[idx].writeDone
	r.stats.completed++
	if c.Flags&CQEFMore == 0 {
		r.releaseSlot(idx)
	}
	if writeDone != nil {
		writeDone(writeResult(c.Res))
		return
	}
	if done != nil {
		done(c.Res, c.Flags)
	}
}

// Post runs fn on the loop. Any goroutine may call it. It never blocks: a full mailbox
// returns ErrMailboxFull (back-pressure: the caller retries later or sheds load).
func (r *Reactor) Post(fn func()) error {
	r.posters.Add(1)
	defer r.posters.Add(-1)
	if r.closed.Load() {
		return ErrClosed
	}
	if !r.mailbox.push(fn) {
		return ErrMailboxFull
	}
	if !r.awake.Load() {
		r.wake()
	}
	return nil
}

// PostFrom is Post for code running on another reactor's loop (src, on src's thread): the
// wake-up travels as an IORING_OP_MSG_RING submitted with src's next loop turn instead of an
// eventfd write system call. It falls back to the eventfd when the backends differ or src
// lacks MSG_RING (Linux 5.18).
func (r *Reactor) PostFrom(src *Reactor, fn func()) error {
	r.posters.Add(1)
	defer r.posters.Add(-1)
	if r.closed.Load() {
		return ErrClosed
	}
	if !r.mailbox.push(fn) {
		return ErrMailboxFull
	}
	if !r.wakePending.CompareAndSwap(false, true) {
		return nil
	}
	if src != r && src.ring.Backend() == r.ring.Backend() && src.probe.Supported(OpMsgRing) {
		if sqe, err := src.getSQE(); err == nil {
			sqe.PrepMsgRing(r.ring.Fd(), 0, tokenMsgWake, 0)
			sqe.Flags |= SQECQESkipSuccess
			sqe.UserData = tokenIgnore
			return nil
		}
	}
	r.writeWakeFd()
	return nil
}

func (r *Reactor) writeWakeFd() {
	r.wakeWrites.Add(1)
	var one [8]byte
	one[0] = 1
	unix.Write(r.wakeFd, one[:])
}

// wake makes the loop return from its wait: one eventfd write per drain cycle.
func (r *Reactor) wake() {
	if r.wakePending.CompareAndSwap(false, true) {
		r.writeWakeFd()
	}
}

// Stop makes Run return after the current loop turn. Any goroutine may call it.
func (r *Reactor) Stop() {
	r.posters.Add(1)
	defer r.posters.Add(-1)
	r.stopping.Store(true)
	if r.closed.Load() {
		return
	}
	r.wakePending.Store(false)
	r.wake()
}

// Run runs the loop until Stop. Call it on the owning thread.
func (r *Reactor) Run() error {
	if r.closed.Load() {
		return ErrClosed
	}
	r.running = true
	if r.stats.started.IsZero() {
		r.stats.started = time.Now()
	}
	// The loop checks the mailbox before its first wait too: a Post during the first turn
	// needs no eventfd write either.
	r.awake.Store(true)
	defer func() { r.running = false; r.awake.Store(false) }()
	for !r.stopping.Load() {
		if err := r.RunOnce(true); err != nil {
			return err
		}
	}
	return nil
}

// RunOnce runs one loop turn: dispatch queued completions, mailbox messages, due timers and
// what they posted, submit, wait (when block is set and nothing is runnable) until a completion, wake-up or
// the next timer, then dispatch what arrived. Tests with an injected clock call it with
// block=false.
//
// A turn that starts by dispatching completions reaped outside the loop (the backlog a
// blocking FileIO call or AwaitWrites made between turns fills) does not wait: those are
// the completions a caller of RunOnce(true) waits for, and the kernel has nothing left to
// wake it for them. Before session 15 it waited, until the next timer or for ever
// (docs/ring.md, "Bounded waits").
func (r *Reactor) RunOnce(block bool) error {
	reaped := len(r.backlog) > 0 // completions taken from the kernel before this turn
	r.dispatchBacklog()
	r.drainMailbox()
	r.runTimers()
	// What the timers posted runs now, before the submit below: a reply a timer completed
	// (engine/shard's staged write answering a produce) leaves by send(2) before this
	// turn's io_uring_enter, and does not turn a sleeping enter into a second one
	// (docs/benchmarks.md, "session 8").
	r.drainMailbox()
	if !r.wakeArmed {
		if err := r.armWake(); err != nil {
			return err
		}
	}
	var err error
	expired := false // the wait below ran to fileOpWaitMax
	if reaped && block {
		r.stats.backlogTurns++
	}
	sleep := block && !reaped && len(r.backlog) == 0 && !r.stopping.Load()
	if sleep {
		r.awake.Store(false) // from here a Post wakes the loop (see awake)
		if sleep = r.mailbox.empty(); !sleep {
			r.awake.Store(true)
		}
	}
	if sleep {
		if r.beforeWait != nil {
			r.beforeWait()
		}
		if invariantsEnabled {
			moveStack()
		}
		spin := r.cfg.SpinBeforeWait > 0 && r.worked > 0
		r.worked = 0
		if spin {
			if _, err = r.ring.Submit(); err != nil && !errors.Is(err, unix.EBUSY) && !errors.Is(err, unix.EAGAIN) {
				return fmt.Errorf("ring: reactor submit: %w", err)
			}
		}
		var waited time.Duration
		if !spin || !r.spin() {
			expired, waited, err = r.boundedWait(r.untilNextTimer(), r.fileOps > 0)
			r.stats.waitNanos += uint64(waited)
		}
		r.awake.Store(true)
	} else {
		_, err = r.ring.Submit()
	}
	if err != nil && !errors.Is(err, unix.EBUSY) && !errors.Is(err, unix.EAGAIN) {
		return fmt.Errorf("ring: reactor submit: %w", err)
	}
	for round := 0; round < reapRoundsMax; round++ {
		n := r.ring.PeekCQEs(r.cqes)
		if round == 0 {
			r.noteBoundedWait(expired, n > 0)
		}
		r.dispatchBatch(n)
		if n < len(r.cqes) {
			break
		}
	}
	r.dispatchBacklog()
	r.drainMailbox()
	return nil
}

// dispatchBatch dispatches the first n completions of cqes, in order. A callback that
// waits for its writes (AwaitWrites) takes the write completions still behind it in the
// batch: they are out of the kernel's queue already.
func (r *Reactor) dispatchBatch(n int) {
	r.batchNext, r.batchLen = 0, int32(n)
	for r.batchNext < r.batchLen {
		c := r.cqes[r.batchNext]
		r.batchNext++
		r.dispatch(&c)
	}
	r.batchNext, r.batchLen = 0, 0
}

// spin polls the completion queue, the mailbox and the stop flag for up to
// SpinBeforeWait (or until the next timer is due), dispatching the completions it finds.
// It reports whether anything arrived; if not, the loop sleeps in the kernel. The thread
// stays on its CPU meanwhile (no Gosched: a locked thread that yields sleeps and must be
// woken, the cost the spin is there to avoid).
func (r *Reactor) spin() bool {
	start := time.Now()
	limit := r.cfg.SpinBeforeWait
	if len(r.timers) > 0 {
		limit = min(limit, r.untilNextTimer())
	}
	defer func() { r.stats.spinNanos += uint64(time.Since(start)) }()
	for i := 0; ; i++ {
		if n := r.ring.PeekCQEs(r.cqes); n > 0 {
			r.dispatchBatch(n)
			return true
		}
		if !r.mailbox.empty() || r.stopping.Load() {
			return true
		}
		if i%16 == 15 && time.Since(start) >= limit {
			return false
		}
	}
}

// Quiet is for a loop callback about to block its thread on a system call that only it
// waits for (engine/shard's inline fdatasync): it submits the operations queued so far, so
// the kernel works on them meanwhile, and reports whether the loop has nothing else to
// run — no completion waiting (in the completion queue or the backlog), no mailbox
// message, no timer due and no stop asked. Work that arrives during the blocking call
// waits for it; that is the caller's trade-off. Loop thread only.
func (r *Reactor) Quiet() bool {
	if r.stopping.Load() || len(r.timers) > 0 && !r.timers[0].when.After(r.now()) {
		return false
	}
	if _, err := r.ring.Submit(); err != nil && !errors.Is(err, unix.EBUSY) && !errors.Is(err, unix.EAGAIN) {
		return false // the loop's own submit reports it
	}
	return !r.Waiting()
}

// Waiting reports whether work from outside the loop waits for it: a completion (in the
// completion queue, the backlog, or the reap batch being dispatched) or a mailbox message. Its own timers do not count.
// Loop thread only.
func (r *Reactor) Waiting() bool {
	if r.batchNext < r.batchLen || len(r.backlog) > 0 || !r.mailbox.empty() {
		return true
	}
	ready, ok := r.ring.(interface{ completionWaiting() bool })
	return !ok || ready.completionWaiting()
}

func (r *Reactor) dispatchBacklog() {
	for i := 0; i < len(r.backlog); i++ {
		c := r.backlog[i]
		r.dispatch(&c)
	}
	r.backlog = r.backlog[:0]
}

// fileOpWaitMax bounds every wait in the kernel while file operations are in flight: the
// loop's wait with StartWrite-family ops outstanding, AwaitWrites and the blocking FileIO
// calls. A wait whose wake-up is lost (docs/ring.md, "Bounded waits") then costs at most
// this much instead of a hang (AwaitWrites, a blocking call) or the shard's next timer
// (50 ms). 10 ms: a 4 KiB O_DIRECT write completes in 0.15–9 ms (p50–p99) on this VM
// under load (docs/benchmarks.md, session 15), so most waits are woken before it; a wait
// that does run to it costs one more io_uring_enter (≈2 µs), at most 100 a second per
// waiting shard.
const fileOpWaitMax = 10 * time.Millisecond

// boundedWait submits and waits in the kernel for one completion, up to timeout (0: none);
// with bound set, never longer than fileOpWaitMax. expired reports that the wait ran to
// that bound (rather than to the caller's own timeout); the caller then tells
// noteBoundedWait whether it found completions.
func (r *Reactor) boundedWait(timeout time.Duration, bound bool) (expired bool, waited time.Duration, err error) {
	bounded := bound && (timeout <= 0 || timeout > fileOpWaitMax)
	if bounded {
		timeout = fileOpWaitMax
	}
	start := time.Now()
	_, err = r.ring.SubmitAndWait(1, timeout)
	waited = time.Since(start)
	return bounded && err == nil && waited >= fileOpWaitMax, waited, err
}

// noteBoundedWait counts a wait that ran to fileOpWaitMax, and, when it found completions
// (found), a lost wake-up: the kernel had work for the waiter and did not wake it. It is an
// upper bound: a completion that arrived within the thread's scheduling delay before the
// bound counts too.
func (r *Reactor) noteBoundedWait(expired, found bool) {
	if !expired {
		return
	}
	r.stats.waitsExpired++
	if found {
		r.stats.lostWakeups++
	}
}

func (r *Reactor) armWake() error {
	sqe, err := r.getSQE()
	if err != nil {
		return err
	}
	sqe.PrepRead(r.wakeFd, r.scratch[:], noOffset)
	sqe.UserData = tokenWake
	r.wakeArmed = true
	return nil
}

func (r *Reactor) drainMailbox() {
	for i := 0; i < len(r.mailbox.slots); i++ {
		fn := r.mailbox.pop()
		if fn == nil {
			return
		}
		r.worked++
		fn()
	}
}

// Close cancels every in-flight op, waits (up to closeWaitMax) until the kernel has
// released their memory, then closes the ring and the wake-up fd. Callbacks of cancelled
// ops are not called. Call it on the owning thread, after Run returned.
func (r *Reactor) Close() error {
	if r.closed.Swap(true) {
		return nil
	}
	r.cancelInflight()
	err := r.ring.Close()
	// A Post that saw closed == false may still write the eventfd: wait for it, so the fd
	// number is not reused under its feet. Posts are a few instructions; the loop is bounded.
	for i := 0; r.posters.Load() != 0 && i < 1_000_000; i++ {
		runtime.Gosched()
	}
	unix.Close(r.wakeFd)
	for i := range r.slots {
		if r.slots[i].pinned {
			r.slots[i].pinner.Unpin()
		}
	}
	r.scratchP.Unpin()
	return err
}

const closeWaitMax = time.Second

// cancelInflight cancels every op the kernel may still be working on and reaps until they
// are all gone, so that no completion writes into memory that Close unpins.
func (r *Reactor) cancelInflight() {
	busy := func() int {
		n := 0
		for i := range r.slots {
			if r.slots[i].busy {
				n++
			}
		}
		if r.wakeArmed {
			n++
		}
		return n
	}
	if busy() == 0 {
		return
	}
	if sqe, err := r.getSQE(); err == nil {
		sqe.PrepCancel(0, CancelAny|CancelAll)
		sqe.UserData = tokenIgnore
	}
	deadline := time.Now().Add(closeWaitMax)
	for busy() > 0 && time.Now().Before(deadline) {
		if _, err := r.ring.SubmitAndWait(1, 10*time.Millisecond); err != nil {
			break
		}
		for {
			n := r.ring.PeekCQEs(r.syncCQEs)
			r.backlog = append(r.backlog, r.syncCQEs[:n]...)
			if n < len(r.syncCQEs) {
				break
			}
		}
		for _, c := range r.backlog {
			r.retire(c)
		}
		r.backlog = r.backlog[:0]
	}
}

// retire releases the slot of a completion without calling its callback.
func (r *Reactor) retire(c CQE) {
	tok := c.UserData
	if tok == tokenWake {
		r.wakeArmed = false
		return
	}
	if tok&tokenInternal != 0 {
		return
	}
	idx, gen := uint32(tok), uint32(tok>>32)
	if int(idx) < len(r.slots) && r.slots[idx].busy && r.slots[idx].gen == gen && c.Flags&CQEFMore == 0 {
		r.releaseSlot(idx)
	}
}

// ---- FileIO: blocking ops on the owning thread ----

var _ FileIO = (*Reactor)(nil)

// offThread reports whether a FileIO call comes from a thread other than the owner's. Such
// a call must not touch the ring: two threads would race on the SQ, and the owner's loop
// would reap (and drop) the completion the caller waits for, hanging it forever. It is
// served with plain system calls instead and logged once per reactor (a caller bug worth
// fixing: the data structure behind the fd belongs to the owning shard). One gettid per
// FileIO call (≈0.1 µs on bare metal, ≈0.6 µs on this VM) buys that safety.
func (r *Reactor) offThread() bool {
	if unix.Gettid() == r.ownerTid {
		return false
	}
	if r.foreignIO.Add(1) == 1 {
		slog.Error("ring: FileIO called off the reactor's owning thread; served with plain syscalls",
			"owner_tid", r.ownerTid, "caller_tid", unix.Gettid(), "backend", r.ring.Backend())
	}
	return true
}

// ForeignFileIO counts FileIO calls made off the owning thread (see offThread).
func (r *Reactor) ForeignFileIO() uint64 { return r.foreignIO.Load() }

// syncSQE reserves an SQE for a blocking op.
func (r *Reactor) syncSQE() (*SQE, uint64, error) {
	if r.closed.Load() {
		return nil, 0, ErrClosed
	}
	sqe, err := r.getSQE()
	if err != nil {
		return nil, 0, err
	}
	r.syncSeq++
	r.stats.submitted++
	return sqe, tokenSync | (r.syncSeq & (1<<62 - 1)), nil
}

// syncWait submits and waits for the completion tagged tok; other completions reaped on
// the way go to the backlog. Its waits are bounded by fileOpWaitMax (boundedWait).
func (r *Reactor) syncWait(tok uint64) (int32, error) {
	if invariantsEnabled {
		moveStack()
	}
	for {
		expired, _, err := r.boundedWait(0, true)
		if err != nil && !errors.Is(err, unix.EBUSY) && !errors.Is(err, unix.EAGAIN) {
			return 0, err
		}
		for round := 0; round < reapRoundsMax; round++ {
			n := r.ring.PeekCQEs(r.syncCQEs)
			if round == 0 {
				r.noteBoundedWait(expired, n > 0)
			}
			found, res := false, int32(0)
			for i := 0; i < n; i++ {
				if r.syncCQEs[i].UserData == tok {
					found, res = true, r.syncCQEs[i].Res
					continue
				}
				r.backlog = append(r.backlog, r.syncCQEs[i])
			}
			if found {
				r.stats.completed++
				return res, nil
			}
			if n < len(r.syncCQEs) {
				break
			}
		}
	}
}

func resErr(res int32) error {
	if res < 0 {
		return unix.Errno(-res)
	}
	return nil
}

func (r *Reactor) Pread(fd int, p []byte, off int64) (int, error) {
	return r.syncRW(OpRead, fd, p, off)
}

func (r *Reactor) Pwrite(fd int, p []byte, off int64) (int, error) {
	return r.syncRW(OpWrite, fd, p, off)
}

func (r *Reactor) syncRW(code Opcode, fd int, p []byte, off int64) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if r.cfg.InlineFileIO || r.offThread() {
		if code == OpRead {
			return Syscalls{}.Pread(fd, p, off)
		}
		return Syscalls{}.Pwrite(fd, p, off)
	}
	sqe, tok, err := r.syncSQE()
	if err != nil {
		return 0, fmt.Errorf("%s fd %d off %d: %w", code, fd, off, err)
	}
	if code == OpRead {
		sqe.PrepRead(fd, p, uint64(off))
	} else {
		sqe.PrepWrite(fd, p, uint64(off))
	}
	sqe.UserData = tok
	r.syncPin.Pin(&p[0])
	res, err := r.syncWait(tok)
	r.syncPin.Unpin()
	if err == nil {
		err = resErr(res)
	}
	if err != nil {
		name := "pwrite"
		if code == OpRead {
			name = "pread"
		}
		return 0, fmt.Errorf("%s fd %d off %d: %w", name, fd, off, err)
	}
	return int(res), nil
}

func (r *Reactor) Pwritev(fd int, bufs [][]byte, off int64) (int, error) {
	if r.cfg.InlineFileIO || r.offThread() {
		return Syscalls{}.Pwritev(fd, bufs, off)
	}
	r.iovs = r.iovs[:0]
	for _, b := range bufs {
		if len(b) == 0 {
			continue
		}
		var v Iovec
		v.Base = (*byte)(unsafe.Pointer(&b[0]))
		v.SetLen(len(b))
		r.pinSync(len(r.iovs), &b[0])
		r.iovs = append(r.iovs, v)
	}
	if len(r.iovs) == 0 {
		return 0, nil
	}
	if len(r.iovs) > iovMax {
		r.unpinSync()
		return 0, fmt.Errorf("pwritev fd %d off %d: %d buffers (max %d): %w", fd, off, len(r.iovs), iovMax, unix.EINVAL)
	}
	sqe, tok, err := r.syncSQE()
	if err != nil {
		r.unpinSync()
		return 0, fmt.Errorf("pwritev fd %d off %d: %w", fd, off, err)
	}
	sqe.PrepWritev(fd, r.iovs, uint64(off))
	sqe.UserData = tok
	res, err := r.syncWait(tok)
	r.unpinSync()
	if err == nil {
		err = resErr(res)
	}
	if err != nil {
		return 0, fmt.Errorf("pwritev fd %d off %d: %w", fd, off, err)
	}
	return int(res), nil
}

// pinnerRefsInline is how many pointers a runtime.Pinner pins without allocating
// (runtime's pinnerRefStoreSize on 64-bit platforms).
const pinnerRefsInline = 5

// pinSync pins p as Pwritev's i-th buffer.
func (r *Reactor) pinSync(i int, p *byte) {
	k := i / pinnerRefsInline
	for len(r.syncPins) <= k {
		r.syncPins = append(r.syncPins, runtime.Pinner{})
	}
	r.syncPins[k].Pin(p)
}

// unpinSync releases every buffer pinSync pinned.
func (r *Reactor) unpinSync() {
	for i := range r.syncPins {
		r.syncPins[i].Unpin()
	}
}

const iovMax = 1024 // IOV_MAX

func (r *Reactor) Fdatasync(fd int) error { return r.syncFsync(fd, true) }
func (r *Reactor) Fsync(fd int) error     { return r.syncFsync(fd, false) }

func (r *Reactor) syncFsync(fd int, datasync bool) error {
	if r.cfg.InlineFileIO || r.offThread() {
		if datasync {
			return Syscalls{}.Fdatasync(fd)
		}
		return Syscalls{}.Fsync(fd)
	}
	name := "fsync"
	if datasync {
		name = "fdatasync"
	}
	sqe, tok, err := r.syncSQE()
	if err != nil {
		return fmt.Errorf("%s fd %d: %w", name, fd, err)
	}
	sqe.PrepFsync(fd, datasync)
	sqe.UserData = tok
	res, err := r.syncWait(tok)
	if err == nil {
		err = resErr(res)
	}
	if err != nil {
		return fmt.Errorf("%s fd %d: %w", name, fd, err)
	}
	return nil
}

func (r *Reactor) Fallocate(fd int, mode uint32, off, size int64) error {
	if r.cfg.InlineFileIO || r.offThread() {
		return Syscalls{}.Fallocate(fd, mode, off, size)
	}
	sqe, tok, err := r.syncSQE()
	if err != nil {
		return fmt.Errorf("fallocate fd %d: %w", fd, err)
	}
	sqe.PrepFallocate(fd, mode, off, size)
	sqe.UserData = tok
	res, err := r.syncWait(tok)
	if err == nil {
		err = resErr(res)
	}
	if err != nil {
		return fmt.Errorf("fallocate fd %d off %d size %d: %w", fd, off, size, err)
	}
	return nil
}

// ---- timers ----

// Timer is a callback scheduled on the loop by AfterFunc.
type Timer struct {
	r     *Reactor
	when  time.Time
	fn    func()
	index int // in the heap, -1 when not scheduled
}

// AfterFunc runs fn on the loop once d has elapsed on the reactor's clock. Loop thread only.
func (r *Reactor) AfterFunc(d time.Duration, fn func()) *Timer {
	t := &Timer{r: r, when: r.now().Add(d), fn: fn, index: -1}
	heap.Push(&r.timers, t)
	return t
}

// Stop cancels the timer; it reports whether the timer was still pending. Loop thread only.
func (t *Timer) Stop() bool {
	if t.index < 0 {
		return false
	}
	heap.Remove(&t.r.timers, t.index)
	return true
}

// Reset reschedules the timer to fire d from now (whether or not it was pending), reusing
// it without allocating. Loop thread only.
func (t *Timer) Reset(d time.Duration) {
	t.when = t.r.now().Add(d)
	if t.index >= 0 {
		heap.Fix(&t.r.timers, t.index)
		return
	}
	heap.Push(&t.r.timers, t)
}

// Now is the reactor's clock (Config.Now, default time.Now).
func (r *Reactor) Now() time.Time { return r.now() }

func (r *Reactor) runTimers() {
	if len(r.timers) == 0 {
		return
	}
	now := r.now()
	for len(r.timers) > 0 && !r.timers[0].when.After(now) {
		t := heap.Pop(&r.timers).(*Timer)
		t.fn()
	}
}

// untilNextTimer is the wait timeout: 0 (none) without timers, else at least 1µs.
func (r *Reactor) untilNextTimer() time.Duration {
	if len(r.timers) == 0 {
		return 0
	}
	d := r.timers[0].when.Sub(r.now())
	if d < time.Microsecond {
		d = time.Microsecond
	}
	return d
}

type timerHeap []*Timer

func (h timerHeap) Len() int           { return len(h) }
func (h timerHeap) Less(i, j int) bool { return h[i].when.Before(h[j].when) }
func (h timerHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index = i
	h[j].index = j
}
func (h *timerHeap) Push(x any) {
	t := x.(*Timer)
	t.index = len(*h)
	*h = append(*h, t)
}
func (h *timerHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	old[len(old)-1] = nil
	t.index = -1
	*h = old[:len(old)-1]
	return t
}

// OnOwnerThread reports whether the caller runs on the reactor's owning thread (one gettid
// system call): how a caller that was told it runs on this loop can make sure before doing
// the loop's work inline.
func (r *Reactor) OnOwnerThread() bool { return unix.Gettid() == r.ownerTid }
