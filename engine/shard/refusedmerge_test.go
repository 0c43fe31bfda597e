package shard

import (
	"errors"
	"testing"
)

// TestRefusedMerge puts refused partitions back at their request positions, between the
// fetched ones, with their error and no offsets.
func TestRefusedMerge(t *testing.T) {
	notLeader := errors.New("not leader")
	fetched := []FetchResult{
		{TopicPartition: TopicPartition{Topic: "a", Partition: 1}, HighWatermark: 10},
		{TopicPartition: TopicPartition{Topic: "b", Partition: 0}, HighWatermark: 20},
	}
	requested := []TopicPartition{{"a", 0}, {"a", 1}, {"a", 2}, {"b", 0}}
	m := RefusedMerge{Results: fetched, Refused: []error{notLeader, nil, notLeader, nil}}
	for _, tp := range requested {
		m.Add(tp)
	}
	if len(m.Out) != len(requested) {
		t.Fatalf("%d results, want %d", len(m.Out), len(requested))
	}
	for i, r := range m.Out {
		if r.TopicPartition != requested[i] {
			t.Fatalf("result %d is %v, want %v", i, r.TopicPartition, requested[i])
		}
		refused := i == 0 || i == 2
		if refused != (r.Err != nil) || (refused && (r.HighWatermark != -1 || r.LogStartOffset != -1)) {
			t.Fatalf("result %d: err %v, hwm %d, log start %d", i, r.Err, r.HighWatermark, r.LogStartOffset)
		}
	}
	if m.Out[1].HighWatermark != 10 || m.Out[3].HighWatermark != 20 {
		t.Fatalf("fetched results out of place: %+v", m.Out)
	}
}
