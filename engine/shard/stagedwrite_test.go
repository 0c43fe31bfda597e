package shard

import (
	"errors"
	"testing"

	"github.com/ringlog/ringlog/engine/faultio"
	"github.com/ringlog/ringlog/ring"
	"golang.org/x/sys/unix"
)

// TestStagedAppendsOneWritePerPartitionAndTurn: produces that reach a partition in one loop
// turn (here: from one Exec, as several connections' requests served in one turn would)
// go to its file in one pwritev, are answered only after it, in offset order, and are all
// read back. With WriteEachAppend each produce writes on its own.
func TestStagedAppendsOneWritePerPartitionAndTurn(t *testing.T) {
	for _, each := range []bool{false, true} {
		b, fios := faultBroker(t, t.TempDir(), 1)
		fio := fios[0]
		b.cfg.WriteEachAppend = each // read when the partitions open, on the shard
		if err := b.CreateTopic("t", 2, nil); err != nil {
			t.Fatal(err)
		}
		const produces = 5
		results := make(chan ProduceResult, 2*produces)
		var writes int
		err := b.Exec(0, func(*ring.Reactor) error {
			before := fio.Calls(faultio.OpPwritev)
			for i := 0; i < produces; i++ {
				for p := int32(0); p < 2; p++ {
					b.ProduceFrom(0, TopicPartition{"t", p}, [][]byte{buildBatch(t, "v", 3)}, AcksLeader, func(r ProduceResult) { results <- r })
				}
			}
			if !each && len(results) != 0 {
				t.Errorf("%d produces answered before their staged write", len(results))
			}
			writes = -before
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		seen := map[int64]int{}
		for i := 0; i < 2*produces; i++ {
			r := <-results
			if r.Err != nil {
				t.Fatalf("each=%v: produce: %v", each, r.Err)
			}
			seen[r.BaseOffset]++
		}
		for off := int64(0); off < 3*produces; off += 3 {
			if seen[off] != 2 {
				t.Errorf("each=%v: %d produces answered with base offset %d, want one per partition", each, seen[off], off)
			}
		}
		loopTurns(t, b, 1)
		if err := b.Exec(0, func(*ring.Reactor) error { writes += fio.Calls(faultio.OpPwritev); return nil }); err != nil {
			t.Fatal(err)
		}
		want := 2 // one per partition
		if each {
			want = 2 * produces
		}
		if writes != want {
			t.Errorf("each=%v: %d pwritev calls for %d produces to 2 partitions, want %d", each, writes, 2*produces, want)
		}
		for p := int32(0); p < 2; p++ {
			res := fetch(t, b, FetchRequest{Partitions: []FetchPartition{{TopicPartition{"t", p}, 0, 1 << 20}}})
			if got := values(t, &res[0]); len(got) != 3*produces || res[0].HighWatermark != 3*produces {
				t.Errorf("each=%v: partition %d: %d records read, high watermark %d, want %d", each, p, len(got), res[0].HighWatermark, 3*produces)
			}
		}
		b.Close()
	}
}

// TestStagedWriteFailureFailsItsProducesOnly: when a turn's staged write fails (EIO), the
// produces staged in that turn get the error; the partition takes the next produce at the
// same offsets.
func TestStagedWriteFailureFailsItsProducesOnly(t *testing.T) {
	b, fios := faultBroker(t, t.TempDir(), 1)
	defer b.Close()
	fio := fios[0]
	if err := b.CreateTopic("t", 1, nil); err != nil {
		t.Fatal(err)
	}
	tp := TopicPartition{"t", 0}
	if r := produce(t, b, tp, AcksLeader, buildBatch(t, "a", 2)); r.Err != nil || r.BaseOffset != 0 {
		t.Fatalf("first produce: %+v", r)
	}
	results := make(chan ProduceResult, 3)
	err := b.Exec(0, func(*ring.Reactor) error {
		fio.Inject(faultio.Rule{Op: faultio.OpPwritev, Errno: unix.EIO, Times: 1})
		for i := 0; i < 3; i++ {
			b.ProduceFrom(0, tp, [][]byte{buildBatch(t, "b", 1)}, AcksLeader, func(r ProduceResult) { results <- r })
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if r := <-results; !errors.Is(r.Err, unix.EIO) {
			t.Fatalf("produce %d of the failed turn: %+v, want EIO", i, r)
		}
	}
	if r := produce(t, b, tp, AcksLeader, buildBatch(t, "c", 2)); r.Err != nil || r.BaseOffset != 2 {
		t.Fatalf("produce after the failed write: %+v, want base offset 2", r)
	}
}
