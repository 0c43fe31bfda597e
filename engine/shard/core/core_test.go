package core_test

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/ringlog/ringlog/engine/shard/core"
)

// The scripted tests in testdata/*.txt drive one Core the way a shard's reactor does, with a
// fake log and a fake clock, and print every output (syncs started, flushes, timers armed,
// produces and fetches answered) in order. Regenerate the expected output with
//
//	go test ./engine/shard/core -rewrite
//
// Commands:
//
//	partition p=NAME [flush-always] [flush-ms] [min-insync=N] [replicas=N]
//	    a partition; replicas>1 puts it under the script's replicator, whose followers
//	    start at offset 0 and are all in sync
//	produce p=NAME acks=0|1|all [n=RECORDS]   append n records (default 1) and report it
//	end-turn                                  the loop turn's mailbox drain ended
//	sync-done p=NAME [err=TEXT]               the sync in flight on NAME completes
//	sync-not-started p=NAME err=TEXT          the sync asked for could not begin
//	blocking-sync p=NAME [err=TEXT]           another path syncs NAME's log (reconfigure)
//	fetch id=ID wait=DURATION p=NAME offset=N [p=NAME offset=N ...]
//	    a long-poll that read nothing parks
//	tick DURATION                             advance the clock; Tick when the timer is due
//	follower p=NAME offset=N                  a follower fetched up to N (replicas>1)
//	isr p=NAME n=N                            the ISR size changes
//	remove p=NAME                             the partition closes
//	recheck-unflushed                         the owner's flush-check timer fired
//	drain                                     the broker drains (every waiter fires)
//	state                                     each partition's offsets and waiting produces
func TestScripts(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		h := newHarness()
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			return h.run(t, d)
		})
	})
}

type fakeLog struct{ start, end, synced int64 }

func (l *fakeLog) StartOffset() int64  { return l.start }
func (l *fakeLog) EndOffset() int64    { return l.end }
func (l *fakeLog) SyncedOffset() int64 { return l.synced }

// scriptReplicator is Local for single-replica partitions and, for the others, a leader
// whose followers have fetched up to follower[p]: committed and visible below both the
// local synced offset and the followers'.
type scriptReplicator struct {
	replicas map[*core.Partition]int
	isr      map[*core.Partition]int
	follower map[*core.Partition]int64
}

func (r *scriptReplicator) HighWatermark(p *core.Partition) int64 {
	hw := core.Local{}.HighWatermark(p)
	if r.replicas[p] > 1 {
		hw = min(hw, r.follower[p])
	}
	return hw
}

func (r *scriptReplicator) CommittedOffset(p *core.Partition) int64 {
	c := core.Local{}.CommittedOffset(p)
	if r.replicas[p] > 1 {
		c = min(c, r.follower[p])
	}
	return c
}

func (r *scriptReplicator) InSyncReplicas(p *core.Partition) int {
	if n, ok := r.isr[p]; ok {
		return n
	}
	return max(r.replicas[p], 1)
}

type fetchWaiter struct {
	h     *harness
	id    string
	fired bool
}

func (w *fetchWaiter) Fire(uint64, core.WakeCause) {
	if w.fired {
		return
	}
	w.fired = true
	w.h.out("fetch %s answered", w.id)
}

func (w *fetchWaiter) Fired(uint64) bool { return w.fired }

type harness struct {
	c        *core.Core
	rep      *scriptReplicator
	parts    map[string]*core.Partition
	logs     map[string]*fakeLog
	syncing  map[string]int64 // partition -> end offset its sync in flight covers
	now      time.Time
	timer    time.Time // armed timer; zero: none
	produces int
	buf      strings.Builder
}

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func newHarness() *harness {
	h := &harness{
		rep:     &scriptReplicator{replicas: map[*core.Partition]int{}, isr: map[*core.Partition]int{}, follower: map[*core.Partition]int64{}},
		parts:   map[string]*core.Partition{},
		logs:    map[string]*fakeLog{},
		syncing: map[string]int64{},
		now:     epoch,
	}
	h.c = core.New((*scriptDriver)(h), h.rep)
	return h
}

func (h *harness) out(format string, args ...any) {
	fmt.Fprintf(&h.buf, format+"\n", args...)
}

// scriptDriver records the core's outputs.
type scriptDriver harness

func (d *scriptDriver) ScheduleFlush() { (*harness)(d).out("schedule-flush") }

func (d *scriptDriver) StartSync(p *core.Partition) {
	h := (*harness)(d)
	l := h.logs[p.Topic]
	h.syncing[p.Topic] = l.end
	h.out("start-sync %s covers [%d, %d)", p.Topic, l.synced, l.end)
}

func (d *scriptDriver) Flush(p *core.Partition) { (*harness)(d).out("flush %s", p.Topic) }

func (d *scriptDriver) ArmTimer(at time.Time) {
	h := (*harness)(d)
	h.timer = at
	h.out("arm-timer +%s", at.Sub(epoch))
}

func (h *harness) part(t *testing.T, d *datadriven.TestData) (*core.Partition, *fakeLog) {
	var name string
	d.ScanArgs(t, "p", &name)
	p := h.parts[name]
	if p == nil {
		t.Fatalf("%s: no partition %q", d.Pos, name)
	}
	return p, h.logs[name]
}

func (h *harness) run(t *testing.T, d *datadriven.TestData) string {
	h.buf.Reset()
	switch d.Cmd {
	case "partition":
		var name string
		d.ScanArgs(t, "p", &name)
		l := &fakeLog{}
		p := &core.Partition{Topic: name, Log: l, FlushAlways: d.HasArg("flush-always"), FlushTimed: d.HasArg("flush-ms"), MinInsync: 1}
		d.MaybeScanArgs(t, "min-insync", &p.MinInsync)
		replicas := 1
		d.MaybeScanArgs(t, "replicas", &replicas)
		h.rep.replicas[p] = replicas
		h.parts[name], h.logs[name] = p, l
	case "produce":
		p, l := h.part(t, d)
		var acksArg string
		d.ScanArgs(t, "acks", &acksArg)
		acks := map[string]int16{"0": 0, "1": 1, "all": core.AcksAll}[acksArg]
		n := int64(1)
		d.MaybeScanArgs(t, "n", &n)
		h.produces++
		id := h.produces
		if err := h.c.Admit(p, acks); err != nil {
			h.out("produce #%d refused: %v", id, err)
			break
		}
		base := l.end
		l.end += n
		h.out("produce #%d appended [%d, %d)", id, base, l.end)
		h.c.Appended(p, acks, l.end, core.ProduceResult{BaseOffset: base}, func(r core.ProduceResult) {
			if r.Err != nil {
				h.out("produce #%d failed: %v", id, r.Err)
				return
			}
			h.out("produce #%d acknowledged base=%d", id, r.BaseOffset)
		})
	case "end-turn":
		h.c.EndTurn()
	case "sync-done":
		p, l := h.part(t, d)
		covers, ok := h.syncing[p.Topic]
		if !ok {
			t.Fatalf("%s: no sync in flight on %s", d.Pos, p.Topic)
		}
		delete(h.syncing, p.Topic)
		var err error
		if d.HasArg("err") {
			var msg string
			d.ScanArgs(t, "err", &msg)
			err = errors.New(msg)
		} else {
			l.synced = max(l.synced, covers)
		}
		h.c.SyncDone(p, err)
	case "sync-not-started":
		p, _ := h.part(t, d)
		if _, ok := h.syncing[p.Topic]; !ok {
			t.Fatalf("%s: no sync asked for on %s", d.Pos, p.Topic)
		}
		delete(h.syncing, p.Topic)
		var msg string
		d.ScanArgs(t, "err", &msg)
		h.c.SyncNotStarted(p, errors.New(msg))
	case "blocking-sync":
		p, l := h.part(t, d)
		if d.HasArg("err") {
			var msg string
			d.ScanArgs(t, "err", &msg)
			h.c.Fail(p, errors.New(msg))
			break
		}
		l.synced = l.end
		h.c.Synced(p)
	case "fetch":
		h.fetch(t, d)
	case "tick":
		if len(d.CmdArgs) != 1 {
			t.Fatalf("%s: tick DURATION", d.Pos)
		}
		step, err := time.ParseDuration(d.CmdArgs[0].Key)
		if err != nil {
			t.Fatalf("%s: %v", d.Pos, err)
		}
		h.now = h.now.Add(step)
		h.out("now +%s", h.now.Sub(epoch))
		if !h.timer.IsZero() && !h.timer.After(h.now) {
			h.timer = time.Time{}
			h.c.Tick(h.now)
		}
	case "follower":
		p, _ := h.part(t, d)
		var off int64
		d.ScanArgs(t, "offset", &off)
		h.rep.follower[p] = off
		h.c.Moved(p)
	case "isr":
		p, _ := h.part(t, d)
		var n int
		d.ScanArgs(t, "n", &n)
		h.rep.isr[p] = n
	case "remove":
		p, _ := h.part(t, d)
		h.c.Remove(p, errors.New("partition closed"))
	case "recheck-unflushed":
		h.c.RecheckUnflushed()
		h.out("unflushed %d", h.c.Unflushed())
	case "drain":
		h.c.WakeAll()
	case "state":
		h.state()
	default:
		t.Fatalf("%s: unknown command %q", d.Pos, d.Cmd)
	}
	if h.buf.Len() == 0 {
		return "ok\n"
	}
	return h.buf.String()
}

func (h *harness) fetch(t *testing.T, d *datadriven.TestData) {
	var id, wait string
	d.ScanArgs(t, "id", &id)
	d.ScanArgs(t, "wait", &wait)
	maxWait, err := time.ParseDuration(wait)
	if err != nil {
		t.Fatalf("%s: %v", d.Pos, err)
	}
	type target struct {
		p      *core.Partition
		offset int64
	}
	var targets []target
	var names []string
	for _, a := range d.CmdArgs {
		switch a.Key {
		case "p":
			names = append(names, a.Vals...)
		case "offset":
			for i, v := range a.Vals {
				var off int64
				fmt.Sscan(v, &off)
				if i >= len(names) {
					t.Fatalf("%s: more offsets than partitions", d.Pos)
				}
				targets = append(targets, target{h.parts[names[i]], off})
			}
		}
	}
	w := &fetchWaiter{h: h, id: id}
	for _, tg := range targets {
		if h.c.Ready(tg.p, tg.offset) {
			h.out("fetch %s has data on %s", id, tg.p.Topic)
			w.Fire(0, core.WakeReady)
			return
		}
	}
	hd := h.c.Wait(w, 0, h.now.Add(maxWait))
	for _, tg := range targets {
		h.c.Watch(hd, tg.p, tg.offset)
	}
	h.out("fetch %s parked", id)
}

func (h *harness) state() {
	names := make([]string, 0, len(h.parts))
	for n := range h.parts {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		p, l := h.parts[n], h.logs[n]
		status := "ok"
		if p.Err() != nil {
			status = "failed: " + p.Err().Error()
		}
		h.out("%s: end=%d synced=%d hw=%d waiting=%d syncing=%t %s", n, l.end, l.synced, h.c.HighWatermark(p), p.Waiting(), p.Syncing(), status)
	}
	h.out("parked=%d syncs-in-flight=%d", h.c.Parked(), h.c.Syncing())
}
