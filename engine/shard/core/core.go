// Package core is the deterministic heart of the broker: for the partitions of one shard it
// owns the produce acknowledgements that wait for durability (or, later, replication), the
// pipelined group-commit sync schedule, and the long-poll fetch waiters. It is a state
// machine with no goroutines, no timers, no clock and no I/O of its own:
//
//	inputs (method calls)                       outputs (Driver calls, reply callbacks)
//	  Appended        an append completed         ScheduleFlush  call EndTurn after this turn
//	  EndTurn         the turn's inputs ended     StartSync      sync partition X's log
//	  SyncDone        a sync ended (error?)       Flush          apply X's flush policy now
//	  SyncNotStarted  no fdatasync was issued     ArmTimer       call Tick at time T
//	  Synced          a blocking sync covered X   ack.done       answer produce Y (result)
//	  Tick            the clock reached now       Waiter.Fire    answer fetch Y (final read)
//	  Moved           X's high watermark moved
//	  Wait/Watch      a fetch parks until data
//	  Remove          X is closed or deleted
//
// In production engine/shard drives it from the shard's reactor: ScheduleFlush and ArmTimer
// become reactor timers, StartSync submits the fdatasyncs of engine.Log.BeginSync on the
// ring and reports SyncDone from their completions. Tests drive it from scripts
// (testdata/*.txt) with a fake log and clock; see core_test.go.
//
// Rules it enforces:
//
//   - A produce that needs durability (acks=all, or any produce to a flush.always
//     partition) is answered once the Replicator's CommittedOffset reaches the end of its
//     records, and only while no sync is in flight on the partition: a sync in flight may
//     still fail, and a failed fdatasync may have dropped dirty pages that a later blocking
//     fsync then finds clean (Linux reports a writeback error once per open file
//     description). So a blocking sync on another path (Synced) acknowledges nothing while
//     an asynchronous one is in flight, and a failed sync fails the partition for good:
//     every acknowledgement it covered, and every later one, gets the error; Admit refuses
//     new produces with it.
//   - One sync in flight per partition (pipelined group commit): produces arriving
//     meanwhile wait for the next, which starts as soon as the one in flight ends.
//   - acks=all is refused with ErrNotEnoughReplicas while the Replicator reports fewer
//     in-sync replicas than min.insync.replicas.
//
// Seams: Replicator is what the core asks about replicas (high watermark, committed offset,
// ISR size). Local is the single-node implementation; replication/ will provide the real
// one (the ISR and follower fetch positions) and report high-watermark moves with Moved.
// The core never imports replication, netio or cmd.
//
// Threading: a Core and its Partitions belong to one goroutine (the shard's loop). Waiter
// implementations may be shared across shards and must make Fire idempotent.
package core

import (
	"container/heap"
	"errors"
	"fmt"
	"time"
)

// AcksAll is the protocol's acks=-1: the produce waits until the record is committed.
const AcksAll int16 = -1

// ErrNotEnoughReplicas refuses acks=all while the ISR is smaller than min.insync.replicas.
var ErrNotEnoughReplicas = errors.New("not enough in-sync replicas")

// AcksWaitingMax bounds the produces one partition holds for their acknowledgement
// (acks=all waiting for the high watermark, flush.always waiting for a sync). A produce
// answered REQUEST_TIMED_OUT stays queued until its records commit, so without a bound a
// client producing with short timeouts while the followers are stopped would grow the
// queue without limit. Back-of-the-envelope: one group commit answers every waiter at
// once, so at a 5 ms fdatasync 65,536 waiters are ~13M produces/s for one partition: the
// bound is never met in a healthy partition. Beyond it acks=all is refused as
// NOT_ENOUGH_REPLICAS (retriable) until the queue drains.
const AcksWaitingMax = 1 << 16

// ProduceResult is the outcome of one partition's produce.
type ProduceResult struct {
	BaseOffset     int64
	LogStartOffset int64
	Err            error
	// Received is when the produce reached its shard, on the driver's clock; the core
	// carries it unchanged to the answer so the driver can measure the produce's latency
	// (AnswerObserver) without allocating per produce.
	Received time.Duration
}

// AnswerObserver is implemented by a Driver that wants to see every produce answer the
// core gives (latency and error accounting): Answered runs just before the produce's done
// callback, on the loop, and must not block or allocate.
type AnswerObserver interface {
	Answered(p *Partition, res ProduceResult)
}

// Log is the view of a partition log the core needs. *engine.Log implements it.
type Log interface {
	StartOffset() int64
	EndOffset() int64
	SyncedOffset() int64 // offsets below it are on stable storage
}

// Replicator is what the core asks about a partition's replicas. Its methods run on the
// partition's shard loop and must not block; an implementation shared by several shards
// must be safe for concurrent use by them.
type Replicator interface {
	// HighWatermark is the offset below which consumers may read.
	HighWatermark(p *Partition) int64
	// CommittedOffset is the offset below which a produce that waits for durability or
	// replication (acks=all, flush.always) is acknowledged.
	CommittedOffset(p *Partition) int64
	// InSyncReplicas is the size of p's in-sync replica set, the leader included.
	InSyncReplicas(p *Partition) int
}

// Local is the single-node Replicator: one replica (this broker), committed means on its
// disk, and the high watermark is the log end offset, or the synced offset for
// flush.always partitions so that a consumer never reads what a crash could take back.
type Local struct{}

// HighWatermark implements Replicator.
func (Local) HighWatermark(p *Partition) int64 {
	if p.FlushAlways {
		return p.Log.SyncedOffset()
	}
	return p.Log.EndOffset()
}

// CommittedOffset implements Replicator.
func (Local) CommittedOffset(p *Partition) int64 { return p.Log.SyncedOffset() }

// InSyncReplicas implements Replicator.
func (Local) InSyncReplicas(*Partition) int { return 1 }

// Driver carries out the core's outputs. Calls come synchronously from inside the input
// methods, on the core's goroutine.
type Driver interface {
	// ScheduleFlush asks for one EndTurn call after the inputs of the current loop turn
	// (the turn's mailbox drain), so that every produce of the turn shares its syncs.
	ScheduleFlush()
	// StartSync asks for an asynchronous sync of everything appended to p.Log so far; the
	// driver reports its end with SyncDone exactly once, possibly from inside StartSync.
	StartSync(p *Partition)
	// Flush asks the driver to apply p's flush policy (flush.messages, flush.ms) now. No
	// acknowledgement depends on it.
	Flush(p *Partition)
	// ArmTimer asks for a Tick at or after at; it replaces the previous request.
	ArmTimer(at time.Time)
}

// Waiter is a parked long-poll fetch. Fire starts its final read; it may be called more
// than once (by several shards) and must act only the first time. Fired reports whether it
// has been fired anywhere, so that the core can drop it early. gen is the value given to
// Wait: a pooled waiter reused for another fetch meanwhile treats an older gen as fired
// (the core may call a waiter long after its fetch was answered, until its deadline).
type Waiter interface {
	Fire(gen uint64, cause WakeCause)
	Fired(gen uint64) bool
}

// WakeCause says what fired a waiter (counted by the owner: which event ends the
// long-polls, and which ones end late).
type WakeCause uint8

const (
	WakeReady    WakeCause = iota // the data was there when the fetch parked (the owner's own check)
	WakeAppend                    // an append to the partition (Appended)
	WakeMoved                     // Moved from outside the core: the replicator (a follower's fetch, an ISR change, the leader's tick), a replicated append
	WakeSync                      // a sync ended (SyncDone, Synced)
	WakeDeadline                  // the long-poll's deadline (Tick)
	WakeRemoved                   // the partition failed or left service, or WakeAll
	WakeCauses                    // the number of causes
)

// String names the cause (a metric label).
func (c WakeCause) String() string {
	switch c {
	case WakeReady:
		return "ready"
	case WakeAppend:
		return "append"
	case WakeMoved:
		return "moved"
	case WakeSync:
		return "sync"
	case WakeDeadline:
		return "deadline"
	case WakeRemoved:
		return "removed"
	}
	return "unknown"
}

// Partition is the core's state of one partition. The owner sets the exported fields
// (Log may be replaced when the log is reopened); the rest is the core's.
type Partition struct {
	Topic       string
	Index       int32
	Log         Log
	FlushAlways bool
	// FlushTimed: the partition's flush policy has a time limit (flush.ms). Only then does a
	// turn that leaves unsynced records put it on RecheckUnflushed's list: without one no
	// time passing makes its policy due (the message limit is checked at every EndTurn that
	// follows an append), and every partition ever written would be visited per check.
	FlushTimed bool
	MinInsync  int

	acks  []ack // waiting for CommittedOffset, in offset order; acks[head:] are live
	head  int
	dirty bool // in Core.dirty
	// unflushed: in Core.unflushed (a turn left records its flush policy has not synced yet)
	unflushed bool
	syncing   bool  // a StartSync has not been answered by SyncDone yet
	removed   bool  // Remove was called
	failed    error // sticky: a sync failed
	watches   []watch
}

func (p *Partition) String() string { return fmt.Sprintf("%s/%d", p.Topic, p.Index) }

// Err is the partition's sticky failure, if a sync failed.
func (p *Partition) Err() error { return p.failed }

// Waiting is the number of produces waiting for their acknowledgement.
func (p *Partition) Waiting() int { return len(p.acks) - p.head }

// Syncing reports whether a sync is in flight.
func (p *Partition) Syncing() bool { return p.syncing }

type ack struct {
	end  int64 // log end offset after the produce's records
	res  ProduceResult
	done func(ProduceResult)
}

type watch struct {
	w      *waiter
	offset int64 // the fetch offset: fire once the high watermark passes it
	end    bool  // a follower's fetch: fire once the log end offset passes offset instead
}

// waiter is one Waiter parked on one shard (on one or more of its partitions). Waiters are
// recycled through Core.freeWaiters once neither the deadline heap nor a watch refers to
// them (refs), so a parked long-poll allocates nothing once the list is warm.
type waiter struct {
	w        Waiter
	gen      uint64
	deadline time.Time
	index    int  // in Core.deadlines; -1 when not there
	done     bool // fired or expired here
	refs     int  // the deadline heap's entry + one per watch
}

func (w *waiter) fired() bool { return w.w.Fired(w.gen) }

// Core is the state machine of one shard's partitions.
type Core struct {
	d        Driver
	observer AnswerObserver // d, when it observes answers; nil otherwise
	rep      Replicator

	dirty []*Partition // partitions with inputs since the last EndTurn
	spare []*Partition
	// unflushed holds the partitions with a flush.ms policy (FlushTimed) an EndTurn left
	// with unsynced records; the owner's periodic RecheckUnflushed re-applies their flush
	// policy until they are synced, so the check costs nothing for partitions with nothing
	// to flush or no time limit to flush by.
	unflushed      []*Partition
	flushScheduled bool
	syncing        int // partitions with a sync in flight

	deadlines   waiterHeap
	armed       time.Time // the timer requested from the driver; zero: none
	freeWaiters []*waiter // waiters no heap entry or watch refers to any more
	fireSpare   []*waiter // Moved's list of waiters to fire, reused
}

// freeWaitersMax bounds the recycled waiters a core keeps (about 80 bytes each).
const freeWaitersMax = 1024

// unref drops one reference to w; the last puts it on the free list.
func (c *Core) unref(w *waiter) {
	if w.refs--; w.refs > 0 {
		return
	}
	if w.refs < 0 {
		panic("core: waiter released more often than referenced")
	}
	*w = waiter{index: -1}
	if len(c.freeWaiters) < freeWaitersMax {
		c.freeWaiters = append(c.freeWaiters, w)
	}
}

// New returns a core with driver d; rep nil means Local.
func New(d Driver, rep Replicator) *Core {
	if rep == nil {
		rep = Local{}
	}
	c := &Core{d: d, rep: rep}
	c.observer, _ = d.(AnswerObserver)
	return c
}

// answer gives a produce its result, telling the observer first.
func (c *Core) answer(p *Partition, res ProduceResult, done func(ProduceResult)) {
	if c.observer != nil {
		c.observer.Answered(p, res)
	}
	done(res)
}

// Replicator returns the core's replicator.
func (c *Core) Replicator() Replicator { return c.rep }

// HighWatermark is p's high watermark.
func (c *Core) HighWatermark(p *Partition) int64 { return c.rep.HighWatermark(p) }

// Syncing is the number of partitions with a sync in flight.
func (c *Core) Syncing() int { return c.syncing }

// Admit checks whether a produce with acks may append to p: not after a failed sync, and
// acks=all only while the ISR holds at least min.insync.replicas.
func (c *Core) Admit(p *Partition, acks int16) error {
	if p.failed != nil {
		return p.failed
	}
	if (acks == AcksAll || p.FlushAlways) && p.Waiting() >= AcksWaitingMax {
		return fmt.Errorf("%w: %s has %d produces waiting for replication or a sync (limit %d)", ErrNotEnoughReplicas, p, p.Waiting(), AcksWaitingMax)
	}
	if acks == AcksAll && p.MinInsync > 1 {
		if isr := c.rep.InSyncReplicas(p); isr < p.MinInsync {
			return fmt.Errorf("%w: %s has min.insync.replicas=%d, %d in sync", ErrNotEnoughReplicas, p, p.MinInsync, isr)
		}
	}
	return nil
}

// Appended records a completed append of one produce to p: res is its answer, end the log
// end offset after its records. A produce that needs durability (acks=all, flush.always)
// waits for it; any other is answered now. Waiters the new high watermark passes fire.
func (c *Core) Appended(p *Partition, acks int16, end int64, res ProduceResult, done func(ProduceResult)) {
	c.MarkDirty(p)
	if acks == AcksAll || p.FlushAlways {
		if n := len(p.acks); n > p.head && p.acks[n-1].end > end {
			panic(fmt.Sprintf("core: %s: append ending at %d after one ending at %d", p, end, p.acks[n-1].end))
		}
		p.acks = append(p.acks, ack{end: end, res: res, done: done})
	} else {
		c.answer(p, res, done)
	}
	c.moved(p, WakeAppend) // the high watermark may be the log end (core.Local without flush.always)
}

// MarkDirty queues p for EndTurn: a sync when acknowledgements wait for one, otherwise its
// flush policy.
func (c *Core) MarkDirty(p *Partition) {
	if !p.dirty {
		p.dirty = true
		c.dirty = append(c.dirty, p)
	}
	if !c.flushScheduled {
		c.flushScheduled = true
		c.d.ScheduleFlush()
	}
}

// EndTurn ends a loop turn: every partition dirtied in it starts a sync (when produces wait
// for one and none is in flight) or applies its flush policy. The syncs of all partitions
// start together so the driver can submit them at once.
func (c *Core) EndTurn() {
	c.flushScheduled = false
	dirty := c.dirty
	c.dirty = c.spare[:0]
	for _, p := range dirty {
		p.dirty = false
		if p.removed {
			continue
		}
		c.release(p)
		switch {
		case c.needsSync(p):
			c.startSync(p)
		case p.syncing:
			// the flush policy is met by the sync in flight
		case p.failed == nil:
			c.d.Flush(p)
		}
		if p.FlushTimed && !p.unflushed && p.failed == nil && p.Log.SyncedOffset() < p.Log.EndOffset() {
			p.unflushed = true
			c.unflushed = append(c.unflushed, p)
		}
	}
	clear(dirty)
	c.spare = dirty[:0]
}

// RecheckUnflushed marks dirty again every FlushTimed partition an earlier turn left with
// unsynced records (so its flush policy runs in the next EndTurn) and forgets the ones since
// synced, removed, failed or no longer FlushTimed. The owner calls it on a timer (the flush.ms granularity).
func (c *Core) RecheckUnflushed() {
	keep := c.unflushed[:0]
	for _, p := range c.unflushed {
		if p.removed || p.failed != nil || !p.FlushTimed || p.Log.SyncedOffset() >= p.Log.EndOffset() {
			p.unflushed = false
			continue
		}
		keep = append(keep, p)
	}
	clear(c.unflushed[len(keep):])
	c.unflushed = keep
	for _, p := range keep {
		c.MarkDirty(p)
	}
}

// Unflushed is the number of partitions RecheckUnflushed watches.
func (c *Core) Unflushed() int { return len(c.unflushed) }

// needsSync: produces wait for records not yet on disk.
func (c *Core) needsSync(p *Partition) bool {
	n := len(p.acks)
	return p.failed == nil && n > p.head && p.acks[n-1].end > p.Log.SyncedOffset()
}

func (c *Core) startSync(p *Partition) {
	if p.syncing {
		return // SyncDone starts the next one
	}
	p.syncing = true
	c.syncing++
	c.d.StartSync(p)
}

// SyncDone reports the end of the sync StartSync began on p; err is its first failure. A
// failure fails p for good (see the package doc). Otherwise the produces it made committed
// are answered, waiters see the new high watermark, and the next sync starts at once when
// produces still wait for one.
func (c *Core) SyncDone(p *Partition, err error) {
	if !p.syncing {
		panic(fmt.Sprintf("core: SyncDone on %s with no sync in flight", p))
	}
	p.syncing = false
	c.syncing--
	if p.removed {
		return
	}
	if err != nil {
		c.Fail(p, err)
		return
	}
	c.release(p)
	c.moved(p, WakeSync)
	if c.needsSync(p) {
		c.startSync(p)
	}
}

// SyncNotStarted reports that the sync StartSync asked for could not begin, and no
// fdatasync was issued (descriptors exhausted, the log already failed): the produces
// waiting for a sync get err, but nothing written was lost, so p stays writable and later
// produces start a new sync.
func (c *Core) SyncNotStarted(p *Partition, err error) {
	if !p.syncing {
		panic(fmt.Sprintf("core: SyncNotStarted on %s with no sync in flight", p))
	}
	p.syncing = false
	c.syncing--
	if p.removed {
		return
	}
	c.release(p)
	c.answerAll(p, err)
}

// Synced reports that a blocking sync on another path (a reconfiguration, shutdown) made
// p.Log durable. It answers the produces now committed unless an asynchronous sync is in
// flight, whose outcome decides them (see the package doc).
func (c *Core) Synced(p *Partition) {
	if p.removed || p.failed != nil {
		return
	}
	c.release(p)
	c.moved(p, WakeSync)
}

// Fail fails p for good with err (a sync failed): every waiting produce gets err, Admit
// refuses new ones, and waiters fire so consumers see the partition's state.
func (c *Core) Fail(p *Partition, err error) {
	if p.failed == nil {
		p.failed = err
	}
	c.answerAll(p, err)
	c.wakeAll(p)
}

// Remove takes p out of service (closed, deleted, moved): waiting produces get err and its
// waiters fire. A sync still in flight may report SyncDone later; it changes nothing.
func (c *Core) Remove(p *Partition, err error) {
	p.removed = true
	c.answerAll(p, err)
	c.wakeAll(p)
}

// release answers, in order, the waiting produces below the committed offset, unless a
// sync is in flight.
func (c *Core) release(p *Partition) {
	if p.syncing || p.head == len(p.acks) {
		return
	}
	committed := c.rep.CommittedOffset(p)
	for p.head < len(p.acks) && p.acks[p.head].end <= committed {
		a := p.acks[p.head]
		p.acks[p.head] = ack{}
		p.head++
		a.res.LogStartOffset = p.Log.StartOffset()
		c.answer(p, a.res, a.done)
	}
	c.compactAcks(p)
}

func (c *Core) answerAll(p *Partition, err error) {
	for p.head < len(p.acks) {
		a := p.acks[p.head]
		p.acks[p.head] = ack{}
		p.head++
		a.res.Err, a.res.BaseOffset = err, -1
		a.res.LogStartOffset = p.Log.StartOffset()
		c.answer(p, a.res, a.done)
	}
	c.compactAcks(p)
}

// compactAcks reuses the front of p.acks. Under a steady stream of produces the queue may
// never drain (the next sync's produces arrive while one is in flight), so the answered
// prefix is also reclaimed once it is half the queue: each entry is copied at most once
// more, and the slice stays within twice the produces waiting.
func (c *Core) compactAcks(p *Partition) {
	switch n := len(p.acks); {
	case p.head == n:
		p.acks, p.head = p.acks[:0], 0
	case p.head >= acksCompactMin && p.head*2 >= n:
		live := copy(p.acks, p.acks[p.head:])
		clear(p.acks[live:])
		p.acks, p.head = p.acks[:live], 0
	}
}

// acksCompactMin is the answered prefix (entries) below which compactAcks does not copy.
const acksCompactMin = 32

// ---- long-poll waiters ----

// Ready reports whether a fetch of p at offset need not wait: the high watermark is past
// it, or p is out of service. A failed partition still parks fetches (they end at their
// deadline): answering them at once would make a consumer at its end poll in a tight loop.
func (c *Core) Ready(p *Partition, offset int64) bool {
	return p.removed || c.rep.HighWatermark(p) > offset
}

// ReadyEnd is Ready for a follower's fetch, which reads up to the log end offset: it need
// not wait once the log end offset is past offset.
func (c *Core) ReadyEnd(p *Partition, offset int64) bool {
	return p.removed || p.Log.EndOffset() > offset
}

// Handle is a Waiter parked on this core (see Wait).
type Handle struct{ w *waiter }

// Wait parks w until deadline; Watch then names the partitions whose high watermark
// moving past an offset fires it. At the deadline Tick fires it.
func (c *Core) Wait(w Waiter, gen uint64, deadline time.Time) Handle {
	c.pruneDeadlines()
	var pw *waiter
	if n := len(c.freeWaiters); n > 0 {
		pw = c.freeWaiters[n-1]
		c.freeWaiters[n-1] = nil
		c.freeWaiters = c.freeWaiters[:n-1]
	} else {
		pw = &waiter{}
	}
	*pw = waiter{w: w, gen: gen, deadline: deadline, index: -1, refs: 1}
	heap.Push(&c.deadlines, pw)
	if c.armed.IsZero() || deadline.Before(c.armed) {
		c.armed = deadline
		c.d.ArmTimer(deadline)
	}
	return Handle{pw}
}

// Watch makes h fire when p's high watermark passes offset. Call it only after Ready
// reported false for (p, offset).
func (c *Core) Watch(h Handle, p *Partition, offset int64) {
	live := p.watches[:0]
	for _, w := range p.watches {
		if !w.w.done && !w.w.fired() {
			live = append(live, w)
		} else {
			c.unref(w.w)
		}
	}
	clear(p.watches[len(live):])
	h.w.refs++
	p.watches = append(live, watch{w: h.w, offset: offset})
}

// WatchEnd makes h fire when p's log end offset passes offset (a follower's fetch). Call
// it only after ReadyEnd reported false for (p, offset).
func (c *Core) WatchEnd(h Handle, p *Partition, offset int64) {
	c.Watch(h, p, offset)
	p.watches[len(p.watches)-1].end = true
}

// FailWaiting answers every produce waiting on p with err and leaves p writable: the
// replicator's view ended (this broker stopped leading p), so what they wait for may never
// come from here.
func (c *Core) FailWaiting(p *Partition, err error) {
	c.answerAll(p, err)
}

// Moved reports that p's high watermark may have moved (an append, a sync, a follower's
// fetch): the produces now committed are answered and every waiter whose offset it passed
// fires.
func (c *Core) Moved(p *Partition) { c.moved(p, WakeMoved) }

func (c *Core) moved(p *Partition, cause WakeCause) {
	c.release(p)
	if len(p.watches) == 0 {
		return
	}
	hw, end := c.rep.HighWatermark(p), p.Log.EndOffset()
	ws := p.watches
	live := ws[:0]
	fire := c.fireSpare[:0]
	c.fireSpare = nil // a Fire that re-entered Moved would use a list of its own
	for _, w := range ws {
		switch {
		case w.w.done || w.w.fired():
			c.unref(w.w)
		case hw > w.offset, w.end && end > w.offset:
			fire = append(fire, w.w)
		default:
			live = append(live, w)
		}
	}
	clear(ws[len(live):])
	p.watches = live
	for _, w := range fire {
		c.fire(w, cause)
		c.unref(w) // its watch on p is gone
	}
	clear(fire)
	c.fireSpare = fire[:0]
}

// Tick tells the core the clock reached now: waiters whose deadline passed fire, and the
// next deadline is armed.
func (c *Core) Tick(now time.Time) {
	c.armed = time.Time{}
	for len(c.deadlines) > 0 && !c.deadlines[0].deadline.After(now) {
		c.fire(c.deadlines[0], WakeDeadline)
	}
	c.pruneDeadlines()
	if len(c.deadlines) > 0 {
		c.armed = c.deadlines[0].deadline
		c.d.ArmTimer(c.armed)
	}
}

// WakeAll fires every parked waiter (a broker draining for shutdown).
func (c *Core) WakeAll() {
	for len(c.deadlines) > 0 {
		c.fire(c.deadlines[0], WakeRemoved)
	}
}

// Parked is the number of waiters parked with a deadline.
func (c *Core) Parked() int { return len(c.deadlines) }

func (c *Core) wakeAll(p *Partition) {
	ws := p.watches
	p.watches = nil
	for _, w := range ws {
		c.fire(w.w, WakeRemoved)
		c.unref(w.w)
	}
}

// fire fires w here (once) and takes it off the deadline heap; the caller holds a
// reference to w (a watch or the heap entry itself), so w is not recycled under it.
func (c *Core) fire(w *waiter, cause WakeCause) {
	w.refs++
	if w.index >= 0 {
		heap.Remove(&c.deadlines, w.index)
		c.unref(w)
	}
	if !w.done {
		w.done = true
		w.w.Fire(w.gen, cause)
	}
	c.unref(w)
}

// pruneDeadlines drops waiters fired elsewhere from the top of the deadline heap.
func (c *Core) pruneDeadlines() {
	for len(c.deadlines) > 0 && c.deadlines[0].fired() {
		w := heap.Pop(&c.deadlines).(*waiter)
		w.done = true
		c.unref(w)
	}
}

type waiterHeap []*waiter

func (h waiterHeap) Len() int           { return len(h) }
func (h waiterHeap) Less(i, j int) bool { return h[i].deadline.Before(h[j].deadline) }
func (h waiterHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index = i
	h[j].index = j
}
func (h *waiterHeap) Push(x any) {
	w := x.(*waiter)
	w.index = len(*h)
	*h = append(*h, w)
}
func (h *waiterHeap) Pop() any {
	old := *h
	w := old[len(old)-1]
	old[len(old)-1] = nil
	w.index = -1
	*h = old[:len(old)-1]
	return w
}
