package isr_test

import (
	"testing"
	"time"

	"github.com/ringlog/ringlog/replication/isr"
)

// BenchmarkLeaderProduceFetch is the leader's per-batch work on the hot path at RF=3: one
// append, one acks=all waiter, and both followers' fetches that move the high watermark
// and answer it.
func BenchmarkLeaderProduceFetch(b *testing.B) {
	epochs, _ := isr.NewEpochCache(nil)
	now := time.Unix(1_700_000_000, 0)
	l, err := isr.NewLeader(isr.LeaderConfig{
		Self: 1, Replicas: []isr.ReplicaID{1, 2, 3}, ISR: []isr.ReplicaID{1, 2, 3},
		MinInsync: 2, ReplicaLagMax: 30 * time.Second, Now: now,
	}, epochs)
	if err != nil {
		b.Fatal(err)
	}
	const recordsPerBatch = 100
	b.ReportAllocs()
	// No SetBytes: the state machine moves no record bytes, only offsets.
	var end int64
	for i := range b.N {
		now = now.Add(time.Millisecond)
		if err := l.CheckProduce(isr.AcksAll); err != nil {
			b.Fatal(err)
		}
		end += recordsPerBatch
		l.Appended(now, end)
		l.WaitAcksAll(uint64(i), end)
		l.Fetch(now, isr.FetchRequest{Replica: 2, FetchOffset: end})
		l.Fetch(now, isr.FetchRequest{Replica: 3, FetchOffset: end})
		l.Tick(now)
		if out := l.Outputs(); len(out) != 2 {
			b.Fatalf("outputs %v", out)
		}
	}
}
