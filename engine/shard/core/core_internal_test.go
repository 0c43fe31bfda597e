package core

import (
	"errors"
	"testing"
	"time"
)

type memLog struct{ end, synced int64 }

func (l *memLog) StartOffset() int64  { return 0 }
func (l *memLog) EndOffset() int64    { return l.end }
func (l *memLog) SyncedOffset() int64 { return l.synced }

type syncDriver struct{ started int }

func (d *syncDriver) ScheduleFlush()        {}
func (d *syncDriver) StartSync(*Partition)  { d.started++ }
func (d *syncDriver) Flush(*Partition)      {}
func (d *syncDriver) ArmTimer(at time.Time) {}

// Under a steady stream the ack queue never drains (produces for the next sync arrive while
// one is in flight); its backing array must stay proportional to what waits, not grow with
// everything ever acknowledged.
func TestAckQueueStaysBoundedWhenNeverDrained(t *testing.T) {
	d := &syncDriver{}
	c := New(d, nil)
	l := &memLog{}
	p := &Partition{Topic: "t", Log: l, MinInsync: 1}
	answered := 0
	done := func(r ProduceResult) {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		answered++
	}
	const perTurn, turns = 50, 2000
	for turn := 0; turn < turns; turn++ {
		for i := 0; i < perTurn; i++ {
			l.end++
			c.Appended(p, AcksAll, l.end, ProduceResult{BaseOffset: l.end - 1}, done)
		}
		c.EndTurn()
		if turn > 0 { // the sync started last turn ends, covering up to what it saw then
			l.synced = l.end - perTurn
			c.SyncDone(p, nil)
		}
		if p.Waiting() == 0 {
			t.Fatalf("turn %d: the queue drained; the test needs it never to", turn)
		}
	}
	if answered != perTurn*(turns-1) {
		t.Fatalf("%d answered, want %d", answered, perTurn*(turns-1))
	}
	if limit := 8 * perTurn; cap(p.acks) > limit {
		t.Fatalf("ack queue capacity %d after %d produces, want at most %d", cap(p.acks), perTurn*turns, limit)
	}
}

type onceWaiter struct {
	fired int
	cause WakeCause // the last Fire's
}

func (w *onceWaiter) Fire(_ uint64, cause WakeCause) { w.fired++; w.cause = cause }
func (w *onceWaiter) Fired(uint64) bool              { return w.fired > 0 }

// hwmReplicator holds the high watermark still: only the log end offset moves.
type hwmReplicator struct{ hwm int64 }

func (r *hwmReplicator) HighWatermark(*Partition) int64   { return r.hwm }
func (r *hwmReplicator) CommittedOffset(*Partition) int64 { return r.hwm }
func (r *hwmReplicator) InSyncReplicas(*Partition) int    { return 2 }

// A follower's fetch parks on the log end offset (WatchEnd): an append fires it although
// the high watermark has not moved, and a consumer's fetch at the same offset stays parked.
// Each is told what fired it (the owner counts the follower's parks by cause), and one
// parked past its deadline is fired by Tick.
func TestWatchEndFiresOnAppend(t *testing.T) {
	rep := &hwmReplicator{hwm: 5}
	c := New(&syncDriver{}, rep)
	l := &memLog{end: 5, synced: 5}
	p := &Partition{Topic: "t", Log: l, MinInsync: 1}
	if c.ReadyEnd(p, 5) || c.Ready(p, 5) {
		t.Fatal("ready at the log end")
	}
	follower, consumer := &onceWaiter{}, &onceWaiter{}
	deadline := time.Unix(100, 0)
	c.WatchEnd(c.Wait(follower, 0, deadline), p, 5)
	c.Watch(c.Wait(consumer, 0, deadline), p, 5)
	l.end = 6
	c.Appended(p, 1, 6, ProduceResult{BaseOffset: 5}, func(ProduceResult) {})
	if follower.fired != 1 || consumer.fired != 0 || follower.cause != WakeAppend {
		t.Fatalf("after an append below the HWM's move: follower fired %d (%v), consumer %d; want 1 (append), 0", follower.fired, follower.cause, consumer.fired)
	}
	rep.hwm = 6
	c.Moved(p)
	if consumer.fired != 1 || consumer.cause != WakeMoved {
		t.Fatalf("consumer fired %d (%v) after the HWM moved, want 1 (moved)", consumer.fired, consumer.cause)
	}
	late := &onceWaiter{}
	c.WatchEnd(c.Wait(late, 0, deadline), p, 6)
	c.Tick(deadline)
	if late.fired != 1 || late.cause != WakeDeadline {
		t.Fatalf("a fetch parked at the log end fired %d (%v) at its deadline, want 1 (deadline)", late.fired, late.cause)
	}
}

// FailWaiting answers the waiting acks=all produces and leaves the partition writable.
func TestFailWaiting(t *testing.T) {
	c := New(&syncDriver{}, &hwmReplicator{hwm: 0})
	l := &memLog{end: 1, synced: 1}
	p := &Partition{Topic: "t", Log: l, MinInsync: 1}
	var got error
	c.Appended(p, AcksAll, 1, ProduceResult{}, func(r ProduceResult) { got = r.Err })
	if p.Waiting() != 1 {
		t.Fatalf("waiting %d, want 1", p.Waiting())
	}
	errGone := errorString("not the leader")
	c.FailWaiting(p, errGone)
	if got != errGone || p.Waiting() != 0 || p.Err() != nil || c.Admit(p, AcksAll) != nil {
		t.Fatalf("answered %v, waiting %d, sticky %v, admit %v", got, p.Waiting(), p.Err(), c.Admit(p, AcksAll))
	}
}

// A partition whose acknowledgements cannot commit (followers stopped) refuses acks=all
// once AcksWaitingMax produces wait, instead of queueing without bound; acks=1 still goes.
func TestAcksWaitingBounded(t *testing.T) {
	c := New(&syncDriver{}, &hwmReplicator{hwm: 0})
	l := &memLog{end: 0, synced: 0}
	p := &Partition{Topic: "t", Log: l, MinInsync: 1}
	for i := range AcksWaitingMax {
		if err := c.Admit(p, AcksAll); err != nil {
			t.Fatalf("produce %d refused below the bound: %v", i, err)
		}
		l.end++
		c.Appended(p, AcksAll, l.end, ProduceResult{}, func(ProduceResult) {})
	}
	if err := c.Admit(p, AcksAll); !errors.Is(err, ErrNotEnoughReplicas) {
		t.Fatalf("acks=all with %d waiting: %v, want ErrNotEnoughReplicas", p.Waiting(), err)
	}
	if err := c.Admit(p, 1); err != nil {
		t.Fatalf("acks=1 with the ack queue full: %v", err)
	}
	c.FailWaiting(p, errorString("gone"))
	if err := c.Admit(p, AcksAll); err != nil {
		t.Fatalf("acks=all after the queue drained: %v", err)
	}
}

type errorString string

func (e errorString) Error() string { return string(e) }

// genWaiter is a pooled fetch's waiter: each use has a generation, and a waiter of a past
// use counts as fired.
type genWaiter struct {
	gen   uint64
	fired bool
	fires []uint64
}

func (w *genWaiter) Fire(gen uint64, _ WakeCause) {
	w.fires = append(w.fires, gen)
	if gen == w.gen && !w.fired {
		w.fired = true
	}
}
func (w *genWaiter) Fired(gen uint64) bool { return gen != w.gen || w.fired }

// A waiter reused for a new fetch (a new generation) while the core still holds its old
// use is never fired for the old one, and the core recycles its waiter records: parking,
// waking and expiring allocate nothing once warm.
func TestWaitersRecycledByGeneration(t *testing.T) {
	rep := &hwmReplicator{hwm: 5}
	c := New(&syncDriver{}, rep)
	p := &Partition{Topic: "t", Log: &memLog{end: 5, synced: 5}, MinInsync: 1}
	w := &genWaiter{gen: 1}
	now := time.Unix(100, 0)
	c.Watch(c.Wait(w, 1, now.Add(time.Second)), p, 5)
	w.gen = 2 // the fetch answered elsewhere; the op serves another fetch
	c.Watch(c.Wait(w, 2, now.Add(2*time.Second)), p, 5)
	rep.hwm = 6
	c.Moved(p)
	if len(w.fires) != 1 || w.fires[0] != 2 {
		t.Fatalf("fires %v, want only generation 2", w.fires)
	}
	c.Tick(now.Add(3 * time.Second))
	if len(w.fires) != 1 || c.Parked() != 0 {
		t.Fatalf("after the deadlines: fires %v, parked %d; want [2], 0", w.fires, c.Parked())
	}
	w.fires = make([]uint64, 0, 4)
	cycle := func() {
		w.gen++
		w.fired = false
		w.fires = w.fires[:0]
		offset := rep.hwm
		c.Watch(c.Wait(w, w.gen, now.Add(time.Second)), p, offset) // woken by the high watermark
		rep.hwm++
		c.Moved(p)
		w.gen++
		w.fired = false
		c.Watch(c.Wait(w, w.gen, now.Add(time.Second)), p, rep.hwm) // expires
		now = now.Add(2 * time.Second)
		c.Tick(now)
		if len(w.fires) != 2 {
			t.Fatalf("fires %v, want the two uses", w.fires)
		}
	}
	for range 10 {
		cycle()
	}
	if n := testing.AllocsPerRun(100, cycle); n != 0 {
		t.Errorf("%v allocations per park/wake/expire cycle, want 0", n)
	}
}
