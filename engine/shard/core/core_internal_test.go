package core

import (
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
