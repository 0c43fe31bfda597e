package shard

import (
	"fmt"
	"strings"
	"testing"

	"github.com/ringlog/ringlog/engine"
	"github.com/ringlog/ringlog/engine/batch"
	"github.com/ringlog/ringlog/ring"
)

// TestCleanerCompactsOnTheOwningShard: a topic created with cleanup.policy=compact (through
// the topic config API, as __consumer_offsets will be) is cleaned by its shard's cleaner;
// a fetch from offset 0 reads through the cleaned segments with growing offsets and finds the
// newest value of every key; describe-configs shows the policy.
func TestCleanerCompactsOnTheOwningShard(t *testing.T) {
	b, err := Open(Config{DataDir: t.TempDir(), Shards: 1, Ring: ring.Config{Backend: "syscall"}, ScrubBytesPerSecond: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.CreateTopic("compacted", 1, map[string]string{engine.ConfigCleanupPolicy: "compact",
		engine.ConfigSegmentBytes: "2048", engine.ConfigMinCleanableDirtyRatio: "0.01"}); err != nil {
		t.Fatal(err)
	}
	if got := b.EffectiveConfig(b.Topic("compacted"))[engine.ConfigCleanupPolicy]; got != "compact" {
		t.Fatalf("cleanup.policy = %q", got)
	}
	tp := TopicPartition{"compacted", 0}
	for i := 0; i < 60; i++ { // keys k0 and k1 in every batch
		if r := produce(t, b, tp, AcksAll, buildBatch(t, fmt.Sprintf("round%02d", i)+strings.Repeat("v", 60), 2)); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	_, before, _ := b.DescribeTopic("compacted")
	s := b.shards[0]
	for range 1000 {
		busy := false
		if err := onShard(s, func() error { busy = s.cleanerTick(1 << 20); return nil }); err != nil {
			t.Fatal(err)
		}
		if !busy {
			break
		}
	}
	_, after, _ := b.DescribeTopic("compacted")
	if after[0].SizeBytes >= before[0].SizeBytes/2 || after[0].LogEndOffset != before[0].LogEndOffset {
		t.Fatalf("size %d -> %d, end %d -> %d", before[0].SizeBytes, after[0].SizeBytes, before[0].LogEndOffset, after[0].LogEndOffset)
	}
	prev, newest := int64(-1), map[string]string{}
	for next := int64(0); next < after[0].LogEndOffset; {
		res := fetch(t, b, FetchRequest{Partitions: []FetchPartition{{tp, next, 1 << 20}}})
		data, err := res[0].AppendTo(nil)
		res[0].Release()
		if err != nil || res[0].Err != nil || res[0].Records.NextOffset <= next {
			t.Fatalf("fetch at %d: %v %v, next %d", next, err, res[0].Err, res[0].Records.NextOffset)
		}
		next = res[0].Records.NextOffset
		for len(data) > 0 {
			h, err := batch.ParseHeader(data)
			if err != nil {
				t.Fatal(err)
			}
			if err := batch.Decode(data[:h.Size()], func(off, _ int64, r *batch.Record) error {
				if off <= prev {
					t.Fatalf("offset %d after %d", off, prev)
				}
				prev = off
				newest[string(r.Key)] = string(r.Value)
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			data = data[h.Size():]
		}
	}
	if !strings.HasPrefix(newest["k0"], "round59") || !strings.HasPrefix(newest["k1"], "round59") {
		t.Fatalf("newest values %v", newest)
	}
}
