package shard

import (
	"testing"
	"time"
)

// flush.ms syncs a partition once its oldest unsynced record is that old (the periodic flush
// check re-applies the policy), and a partition without a time limit stays off the check's
// list (core.Partition.FlushTimed): 1,000 partitions written once and never synced were
// otherwise all visited every FlushCheckInterval, for good (docs/benchmarks.md, "Partition
// scaling (issue 14, session 6)").
func TestFlushCheckVisitsOnlyTimedPartitions(t *testing.T) {
	b, err := Open(Config{DataDir: t.TempDir(), Shards: 1, FlushCheckInterval: time.Millisecond,
		RetentionCheckInterval: time.Hour, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.CreateTopic("timed", 1, map[string]string{"flush.ms": "1"}); err != nil {
		t.Fatal(err)
	}
	if err := b.CreateTopic("untimed", 1, nil); err != nil {
		t.Fatal(err)
	}
	timed, untimed := TopicPartition{"timed", 0}, TopicPartition{"untimed", 0}
	for _, tp := range []TopicPartition{timed, untimed} {
		if r := produce(t, b, tp, AcksLeader, buildBatch(t, "v", 3)); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	s, err := b.shardFor(timed)
	if err != nil {
		t.Fatal(err)
	}
	type view struct {
		timedSynced, untimedSynced int64
		watched                    int
	}
	look := func() view {
		ch := make(chan view, 1)
		if err := s.r.Post(func() {
			ch <- view{s.parts[timed].log.SyncedOffset(), s.parts[untimed].log.SyncedOffset(), s.core.Unflushed()}
		}); err != nil {
			t.Fatal(err)
		}
		return <-ch
	}
	// The flush check runs every millisecond: wait (bounded) for it to sync "timed" and then
	// forget it. This waits for events, it asserts no speed. Were "untimed" watched, the
	// list would never empty.
	deadline := time.Now().Add(10 * time.Second)
	v := look()
	for v.timedSynced < 3 || v.watched != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("want the flush.ms=1 partition synced and no partition left watched: %+v", v)
		}
		v = look()
	}
	if v.untimedSynced != 0 {
		t.Fatalf("the partition without flush.ms was synced: %+v", v)
	}
}
