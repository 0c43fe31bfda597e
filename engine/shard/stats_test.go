package shard

import (
	"errors"
	"testing"
	"time"

	"github.com/ringlog/ringlog/engine"
	"github.com/ringlog/ringlog/engine/batch"
	"github.com/ringlog/ringlog/engine/shard/core"
)

// TestStatsCountProduceFetchFsync produces (acks=1 and acks=all), fetches and fails on
// purpose, then checks that Stats counts exactly that.
func TestStatsCountProduceFetchFsync(t *testing.T) {
	b, err := Open(Config{DataDir: t.TempDir(), Shards: 2, ErrorCode: func(err error) int {
		if errors.Is(err, ErrUnknownTopicOrPartition) {
			return 3
		}
		if errors.Is(err, engine.ErrOffsetOutOfRange) {
			return 4
		}
		return ErrorCodeUnknown
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.CreateTopic("s", 2, nil); err != nil {
		t.Fatal(err)
	}
	tp0 := TopicPartition{"s", 0}
	batch := buildBatch(t, "v", 3)
	var bytes uint64
	for range 4 {
		if r := produce(t, b, tp0, AcksLeader, batch); r.Err != nil {
			t.Fatal(r.Err)
		}
		bytes += uint64(len(batch))
	}
	if r := produce(t, b, tp0, AcksAll, batch); r.Err != nil {
		t.Fatal(r.Err)
	}
	bytes += uint64(len(batch))
	if r := produce(t, b, TopicPartition{"nope", 0}, AcksLeader, batch); r.Err == nil {
		t.Fatal("produce to a missing topic succeeded")
	}
	res := fetch(t, b, FetchRequest{Partitions: []FetchPartition{{tp0, 0, 1 << 20}}})
	fetched := uint64(res[0].Records.Size)
	res[0].Release()
	res = fetch(t, b, FetchRequest{Partitions: []FetchPartition{{tp0, 1000, 1 << 20}}})
	if !errors.Is(res[0].Err, engine.ErrOffsetOutOfRange) {
		t.Fatalf("fetch past the end: %v", res[0].Err)
	}

	stats, err := b.Stats()
	if err != nil {
		t.Fatal(err)
	}
	var produce, fetchStats OpStats
	var fsync Histogram
	parts := map[TopicPartition]PartitionState{}
	for _, s := range stats {
		produce.Add(&s.Produce)
		fetchStats.Add(&s.Fetch)
		fsync.Add(&s.Fsync)
		for _, p := range s.Partitions {
			if p.Topic == "s" { // not the broker's internal topics
				parts[TopicPartition{p.Topic, p.Partition}] = p
			}
		}
		if s.Ring.Running <= 0 || s.Ring.Wait > s.Ring.Running {
			t.Errorf("shard %d ring times: running %v wait %v", s.Shard, s.Ring.Running, s.Ring.Wait)
		}
	}
	if produce.Requests != 5 || produce.Bytes != bytes {
		t.Errorf("produce requests %d bytes %d, want 5 and %d (the refused one never reached a shard)", produce.Requests, produce.Bytes, bytes)
	}
	if produce.Errors[3] != 1 || produce.Latency.Count != 5 {
		t.Errorf("produce errors[3] %d latency count %d, want 1 and 5", produce.Errors[3], produce.Latency.Count)
	}
	if fetchStats.Requests != 2 || fetchStats.Bytes != fetched || fetchStats.Errors[4] != 1 || fetchStats.Latency.Count != 2 {
		t.Errorf("fetch %+v, want 2 requests, %d bytes, 1 OFFSET_OUT_OF_RANGE", fetchStats, fetched)
	}
	if fsync.Count < 1 {
		t.Errorf("acks=all produced without a counted fdatasync")
	}
	p := parts[tp0]
	if p.LogEndOffset != 15 || p.HighWatermark != 15 || p.LogStartOffset != 0 || p.Segments != 1 || p.SizeBytes != int64(bytes) || p.InSyncReplicas != 1 {
		t.Errorf("partition state %+v, want end 15, size %d, one segment, ISR 1", p, bytes)
	}
	if len(parts) != 2 {
		t.Errorf("%d partitions in the stats, want 2", len(parts))
	}
}

// TestStatsRecordNoAllocs: counting a produce answer, a fetch answer and a latency costs
// no allocation.
func TestStatsRecordNoAllocs(t *testing.T) {
	b := &Broker{cfg: Config{ErrorCode: func(error) int { return 3 }}}
	s := &Shard{b: b}
	op := &fetchOp{results: make([]FetchResult, 4)}
	op.results[1].Err = ErrThrottled
	failed := core.ProduceResult{Err: ErrThrottled, Received: monotonic()}
	ok := core.ProduceResult{Received: monotonic()}
	allocs := testing.AllocsPerRun(1000, func() {
		s.produceAnswered(ok)
		s.produceAnswered(failed)
		s.fetchAnswered(op)
		s.counters.fsync.Observe(3 * time.Millisecond)
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per counted answer, want 0", allocs)
	}
}

// BenchmarkStatsHotPath measures what counting adds to one produce: the request and byte
// counters, a clock read and one histogram observation.
func BenchmarkStatsHotPath(b *testing.B) {
	s := &Shard{b: &Broker{}}
	batches := [][]byte{make([]byte, 1024)}
	b.ReportAllocs()
	for b.Loop() {
		received := monotonic()
		s.counters.produce.Requests++
		for _, p := range batches {
			s.counters.produce.Bytes += uint64(len(p))
		}
		s.produceAnswered(core.ProduceResult{Received: received})
	}
}

// TestBatchTimes reads the timestamps of the batches holding given offsets.
func TestBatchTimes(t *testing.T) {
	b := openBroker(t, t.TempDir(), "auto", 2)
	defer b.Close()
	if err := b.CreateTopic("bt", 2, nil); err != nil {
		t.Fatal(err)
	}
	tp := TopicPartition{"bt", 1}
	for _, ts := range []int64{1000, 5000} {
		bl := batch.NewBuilder(batch.BuilderOptions{})
		bl.Append(ts, nil, []byte("a"), nil)
		bl.Append(ts+7, nil, []byte("b"), nil)
		raw, err := bl.Build(nil)
		if err != nil {
			t.Fatal(err)
		}
		if r := produce(t, b, tp, AcksLeader, raw); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	q := []BatchTimesQuery{{TopicPartition: tp, Offset: 1}, {TopicPartition: tp, Offset: 2}, {TopicPartition: tp, Offset: 4},
		{TopicPartition: TopicPartition{"bt", 0}, Offset: 0}, {TopicPartition: TopicPartition{"none", 0}}}
	if err := b.BatchTimes(q); err != nil {
		t.Fatal(err)
	}
	want := [][2]int64{{1000, 1007}, {5000, 5007}, {-1, -1}, {-1, -1}, {-1, -1}}
	for i, w := range want {
		if q[i].BaseTimestamp != w[0] || q[i].MaxTimestamp != w[1] {
			t.Errorf("query %d (%s/%d @%d): %d..%d, want %d..%d", i, q[i].Topic, q[i].Partition, q[i].Offset, q[i].BaseTimestamp, q[i].MaxTimestamp, w[0], w[1])
		}
	}
}
