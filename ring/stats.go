package ring

import "time"

// loopStats are the reactor's own counters. Owned by the loop thread: plain fields, no
// atomics, so counting costs an increment; Stats copies them on the loop.
type loopStats struct {
	submitted uint64    // ops queued for the kernel (async ops and blocking FileIO ops)
	completed uint64    // completions delivered to their op (async callbacks and blocking waits)
	waitNanos uint64    // time Run spent blocked waiting for a completion, wake-up or timer
	spinNanos uint64    // time Run spent polling before a wait (Config.SpinBeforeWait)
	started   time.Time // when Run first started; zero before
	// writesStarted counts StartWrite ops; awaits the times AwaitWrites had to wait for the
	// ring (the owner blocked on its own writes).
	writesStarted, awaits uint64
	writesFixed           uint64 // StartWrite ops sent as WRITE_FIXED
	writeBufferFailures   uint64 // RegisterWriteBuffer updates the kernel refused
	// waitsExpired counts bounded waits (fileOpWaitMax) that ran to the bound; lostWakeups
	// those of them that found completions (see noteBoundedWait).
	waitsExpired, lostWakeups uint64
	backlogTurns              uint64 // blocking turns that began with reaped completions (RunOnce)
}

// Stats is a point-in-time copy of a reactor's counters (see Reactor.Stats).
type Stats struct {
	// Submitted and Completed count ops handed to the ring and completions delivered to
	// them, since the reactor started (a multishot op completes more than once).
	Submitted, Completed uint64
	// InFlight is the number of async ops submitted and not yet finally completed: the
	// reactor's queue depth at the kernel.
	InFlight int
	// Wait is the time the loop spent blocked waiting for work; Running is the time since
	// Run started. Running - Wait is the time the loop was busy (dispatching callbacks,
	// running mailbox messages and timers, blocking file I/O).
	Wait, Running time.Duration
	// Spin is the part of the busy time spent polling for work before waiting
	// (Config.SpinBeforeWait): CPU the loop burned to skip a sleep and wake-up.
	Spin time.Duration
	// WritesStarted counts StartWrite ops (direct-mode segment writes); Awaits counts the
	// times AwaitWrites blocked the loop for them (a roll, truncation or close waiting).
	WritesStarted, Awaits uint64
	// WritesFixed counts those sent from registered buffers (WRITE_FIXED).
	WritesFixed uint64
	// WaitsExpired counts the waits in the kernel that ran to their bound (10 ms) while
	// file operations were in flight (docs/ring.md, "Bounded waits"); LostWakeups counts
	// those of them that then found completions waiting: the kernel had work for the loop
	// and did not wake it (an upper bound: a completion that came within the thread's
	// scheduling delay before the bound counts too).
	WaitsExpired, LostWakeups uint64
	// BacklogTurns counts the blocking loop turns that began by dispatching completions
	// reaped outside the loop (by a blocking FileIO call or AwaitWrites); before session 15
	// each of them then waited in the kernel for nothing, until the next timer.
	BacklogTurns uint64
}

// Stats returns the reactor's counters. Call it on the loop thread (from a Post).
func (r *Reactor) Stats() Stats {
	st := Stats{
		Submitted: r.stats.submitted,
		Completed: r.stats.completed,
		InFlight:  len(r.slots) - len(r.freeSlots),
		Wait:      time.Duration(r.stats.waitNanos),
		Spin:      time.Duration(r.stats.spinNanos),

		WritesStarted: r.stats.writesStarted,
		Awaits:        r.stats.awaits,
		WritesFixed:   r.stats.writesFixed,
		WaitsExpired:  r.stats.waitsExpired,
		LostWakeups:   r.stats.lostWakeups,
		BacklogTurns:  r.stats.backlogTurns,
	}
	if !r.stats.started.IsZero() {
		st.Running = time.Since(r.stats.started)
	}
	return st
}

// MailboxDepth is the number of messages posted and not yet run. Any goroutine; the value
// is a snapshot that producers and the loop move on from at once.
func (r *Reactor) MailboxDepth() int {
	tail, head := r.mailbox.tail.Load(), r.mailbox.head.Load()
	if tail < head { // read across a pop: head moved after tail was read
		return 0
	}
	return int(tail - head)
}
