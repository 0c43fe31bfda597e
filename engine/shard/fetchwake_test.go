package shard

import (
	"testing"
	"time"

	"github.com/ringlog/ringlog/engine/shard/core"
)

// TestFetchWake: a follower's fetch parked with a FetchWake is answered, without records,
// when Wake is called (counted as a wake-up from outside the core, WakeMoved); a Wake that
// comes before the fetch parks makes it answer as soon as its first read ends; a Wake
// after the answer does nothing to the op's next use.
func TestFetchWake(t *testing.T) {
	b := openBroker(t, t.TempDir(), "syscall", 1)
	defer b.Close()
	if err := b.CreateTopic("t", 1, nil); err != nil {
		t.Fatal(err)
	}
	tp := TopicPartition{"t", 0}
	fetch := func(w *FetchWake) chan []FetchResult {
		ch := make(chan []FetchResult, 1)
		b.Fetch(FetchRequest{Partitions: []FetchPartition{{tp, 0, 1 << 20}}, MinBytes: 1, MaxWait: time.Hour, Replica: true, Wake: w},
			func(r []FetchResult) { ch <- r })
		return ch
	}
	answered := func(ch chan []FetchResult, what string) {
		t.Helper()
		select {
		case r := <-ch:
			if r[0].Err != nil || r[0].Records.Size != 0 {
				t.Fatalf("%s: answered %+v, want no error and no records", what, r[0])
			}
		case <-time.After(time.Minute): // a hang guard: the long-poll is an hour
			t.Fatalf("%s: not answered", what)
		}
	}

	parked := &FetchWake{}
	ch := fetch(parked)
	loopTurns(t, b, 3) // parked
	if !parked.Wake() {
		t.Fatal("Wake did not find the fetch parked")
	}
	answered(ch, "a parked fetch woken")

	early := &FetchWake{}
	early.Wake() // before the fetch: it answers once its first read ends
	answered(fetch(early), "a fetch woken before it parked")

	if parked.Wake() { // the op has been answered (and may be reused)
		t.Fatal("a second Wake found the answered fetch parked")
	}
	ch = fetch(nil)
	loopTurns(t, b, 3)
	parked.Wake()
	produce(t, b, tp, AcksLeader, buildBatch(t, "w", 1))
	select {
	case r := <-ch:
		if r[0].Records.Size == 0 {
			t.Fatalf("the fetch after a stale Wake answered without the record: %+v", r[0])
		}
		r[0].Release()
	case <-time.After(time.Minute):
		t.Fatal("the fetch after a stale Wake was not answered by the produce")
	}

	st, err := b.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if moved := st[0].ReplicaWakes[core.WakeMoved]; moved < 1 {
		t.Fatalf("replica wakes by cause %v, want the woken park counted as moved", st[0].ReplicaWakes)
	}
}
