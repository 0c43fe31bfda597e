package controller

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/ringlog/ringlog/replication/isr"
)

// TestLeaderAgainstFSM joins the two pieces: an isr.Leader built from the controller's
// partition state, its AlterISR outputs applied to the controller's state machine and the
// answers fed back, then a leader change that makes the old leader's pending AlterISR stale.
func TestLeaderAgainstFSM(t *testing.T) {
	h, p := setup(t, false)
	ids := func(in []int32) []isr.ReplicaID {
		out := make([]isr.ReplicaID, len(in))
		for i, id := range in {
			out[i] = isr.ReplicaID(id)
		}
		return out
	}
	now := time.UnixMilli(h.nowMs)
	epochs, _ := isr.NewEpochCache(nil)
	l, err := isr.NewLeader(isr.LeaderConfig{
		Self: isr.ReplicaID(p.Leader), Replicas: ids(p.Replicas), ISR: ids(p.ISR),
		LeaderEpoch: p.LeaderEpoch, PartitionEpoch: p.PartitionEpoch,
		MinInsync: 2, ReplicaLagMax: 10 * time.Second, Now: now,
	}, epochs)
	if err != nil {
		t.Fatal(err)
	}
	// deliver applies the leader's AlterISR outputs to the state machine and answers them.
	deliver := func() (accepted, rejected int) {
		for _, o := range l.Outputs() {
			a, ok := o.(isr.AlterISR)
			if !ok {
				continue
			}
			req := &AlterISRRequest{Topic: "t", Leader: int32(a.Leader), LeaderEpoch: a.LeaderEpoch, PartitionEpoch: a.PartitionEpoch}
			for _, id := range a.ISR {
				req.ISR = append(req.ISR, int32(id))
			}
			r := h.apply(Command{Type: CmdAlterISR, AlterISR: req})
			if r.Err != nil {
				l.ISRRejected(a)
				rejected++
				continue
			}
			q := r.Value.(*Partition)
			l.ISRCommitted(now, ids(q.ISR), q.PartitionEpoch)
			accepted++
		}
		return accepted, rejected
	}
	follower, stalled := isr.ReplicaID(p.Replicas[1]), isr.ReplicaID(p.Replicas[2])
	l.Appended(now, 5)
	l.Fetch(now, isr.FetchRequest{Replica: follower, FetchOffset: 5, CurrentLeaderEpoch: p.LeaderEpoch})
	// The third replica stalls past replica.lag.time.max: the shrink goes through the
	// controller, and only then does the high watermark move.
	now = now.Add(11 * time.Second)
	l.Fetch(now, isr.FetchRequest{Replica: follower, FetchOffset: 5, CurrentLeaderEpoch: p.LeaderEpoch})
	l.Tick(now)
	if l.HighWatermark() != 0 {
		t.Fatalf("high watermark %d before the controller agreed", l.HighWatermark())
	}
	if a, r := deliver(); a != 1 || r != 0 {
		t.Fatalf("accepted %d rejected %d", a, r)
	}
	q := h.partition("t", 0)
	if slices.Contains(q.ISR, int32(stalled)) || l.HighWatermark() != 5 || l.PartitionEpoch() != q.PartitionEpoch {
		t.Fatalf("after the shrink: controller %+v, leader isr %v hwm %d", q, l.ISR(), l.HighWatermark())
	}
	// The stalled replica catches up and asks to rejoin, but the leader's session expires
	// before the controller hears it: the controller elects the follower, and the old
	// leader's AlterISR is refused as stale.
	l.Fetch(now, isr.FetchRequest{Replica: stalled, FetchOffset: 5, CurrentLeaderEpoch: p.LeaderEpoch})
	h.nowMs = now.UnixMilli() + testSessionMs + 1
	h.heartbeatAll(p.Leader)
	h.must(Command{Type: CmdExpireSessions})
	if q = h.partition("t", 0); q.Leader != int32(follower) || q.LeaderEpoch != p.LeaderEpoch+1 {
		t.Fatalf("after the leader's session expired: %+v", q)
	}
	if a, r := deliver(); a != 0 || r != 1 {
		t.Fatalf("stale AlterISR: accepted %d rejected %d", a, r)
	}
	// The old leader, told of the new epoch, resigns; fetches at the new epoch are unknown
	// to it.
	l.Resign()
	if resp := l.Fetch(now, isr.FetchRequest{Replica: follower, FetchOffset: 5, CurrentLeaderEpoch: q.LeaderEpoch}); !errors.Is(resp.Err, isr.ErrNotLeader) {
		t.Errorf("fetch from a resigned leader: %v", resp.Err)
	}
}
