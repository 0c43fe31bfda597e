package shard

import (
	"testing"
	"time"
)

// TestDrainAnswersParkedFetch: Drain answers a long-poll parked on an idle partition at
// once, and a fetch arriving after Drain does not park at all.
func TestDrainAnswersParkedFetch(t *testing.T) {
	b := openBroker(t, t.TempDir(), "syscall", 2)
	defer b.Close()
	if err := b.CreateTopic("idle", 2, nil); err != nil {
		t.Fatal(err)
	}
	longPoll := FetchRequest{
		Partitions: []FetchPartition{
			{TopicPartition: TopicPartition{"idle", 0}, MaxBytes: 1 << 20},
			{TopicPartition: TopicPartition{"idle", 1}, MaxBytes: 1 << 20},
		},
		MinBytes: 1,
		MaxWait:  time.Minute,
	}
	parked := make(chan []FetchResult, 1)
	b.Fetch(longPoll, func(r []FetchResult) { parked <- r })
	select {
	case <-parked:
		t.Fatal("a fetch of an idle partition answered before its wait or Drain")
	default:
	}
	b.Drain()
	select {
	case r := <-parked:
		for i := range r {
			if r[i].Err != nil || r[i].Records.Size != 0 {
				t.Errorf("drained fetch %s/%d: err %v, %d bytes; want an empty answer", r[i].Topic, r[i].Partition, r[i].Err, r[i].Records.Size)
			}
			r[i].Release()
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Drain did not answer the parked fetch")
	}
	// After Drain a long-poll answers at once (fetch fails the test after 10 s).
	for _, r := range fetch(t, b, longPoll) {
		r.Release()
	}
}
