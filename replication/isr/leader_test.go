package isr_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/ringlog/ringlog/replication/isr"
)

func newTestLeader(t *testing.T, replicas []isr.ReplicaID, minInsync int) (*isr.Leader, time.Time) {
	t.Helper()
	epochs, _ := isr.NewEpochCache(nil)
	now := time.Unix(1_700_000_000, 0)
	l, err := isr.NewLeader(isr.LeaderConfig{
		Self: replicas[0], Replicas: replicas, ISR: replicas, LeaderEpoch: 3, PartitionEpoch: 7,
		MinInsync: minInsync, ReplicaLagMax: 10 * time.Second, Now: now,
	}, epochs)
	if err != nil {
		t.Fatal(err)
	}
	return l, now
}

func TestNewLeaderRejects(t *testing.T) {
	epochs, _ := isr.NewEpochCache([]isr.EpochEntry{{Epoch: 5, StartOffset: 0}})
	now := time.Unix(0, 0)
	for _, cfg := range []isr.LeaderConfig{
		{Self: 9, Replicas: []isr.ReplicaID{1, 2}, ISR: []isr.ReplicaID{1}, MinInsync: 1, ReplicaLagMax: time.Second, LeaderEpoch: 6},
		{Self: 1, Replicas: []isr.ReplicaID{1, 2}, ISR: []isr.ReplicaID{1, 3}, MinInsync: 1, ReplicaLagMax: time.Second, LeaderEpoch: 6},
		{Self: 1, Replicas: []isr.ReplicaID{1}, ISR: []isr.ReplicaID{1}, MinInsync: 0, ReplicaLagMax: time.Second, LeaderEpoch: 6},
		{Self: 1, Replicas: []isr.ReplicaID{1}, ISR: []isr.ReplicaID{1}, MinInsync: 1, ReplicaLagMax: time.Second, LeaderEpoch: 6, LogEndOffset: 3, HighWatermark: 4},
		{Self: 1, Replicas: []isr.ReplicaID{1}, ISR: []isr.ReplicaID{1}, MinInsync: 1, ReplicaLagMax: time.Second, LeaderEpoch: 4}, // older than the log's epoch
	} {
		cfg.Now = now
		if _, err := isr.NewLeader(cfg, epochs); !errors.Is(err, isr.ErrBadConfig) {
			t.Errorf("NewLeader(%+v) = %v, want ErrBadConfig", cfg, err)
		}
	}
}

// TestLeaderReassignment: a reassignment adds replica 4 at the same leader epoch; it joins
// the ISR once it catches up, and when the controller drops replica 2 the leader forgets it.
func TestLeaderReassignment(t *testing.T) {
	l, now := newTestLeader(t, []isr.ReplicaID{1, 2, 3}, 2)
	l.Appended(now, 10)
	for _, f := range []isr.ReplicaID{2, 3} {
		l.Fetch(now, isr.FetchRequest{Replica: f, FetchOffset: 10, CurrentLeaderEpoch: 3})
	}
	if l.HighWatermark() != 10 {
		t.Fatalf("hwm %d", l.HighWatermark())
	}
	l.Outputs()
	if resp := l.Fetch(now, isr.FetchRequest{Replica: 4, FetchOffset: 0, CurrentLeaderEpoch: 3}); !errors.Is(resp.Err, isr.ErrNotReplica) {
		t.Fatalf("fetch from a non-replica: %v", resp.Err)
	}
	if err := l.MetadataChanged(now, []isr.ReplicaID{1, 2, 3, 4}, []isr.ReplicaID{1, 2, 3}, 8); err != nil {
		t.Fatal(err)
	}
	// An older change is ignored.
	if err := l.MetadataChanged(now, []isr.ReplicaID{1}, []isr.ReplicaID{1}, 8); err != nil || len(l.ISR()) != 3 {
		t.Fatalf("stale change applied: %v, isr %v", err, l.ISR())
	}
	l.Fetch(now, isr.FetchRequest{Replica: 4, FetchOffset: 0, CurrentLeaderEpoch: 3})
	if out := l.Outputs(); len(out) != 0 {
		t.Fatalf("replica 4 below the high watermark: outputs %v", out)
	}
	l.Fetch(now, isr.FetchRequest{Replica: 4, FetchOffset: 10, CurrentLeaderEpoch: 3})
	out := l.Outputs()
	want := isr.AlterISR{Leader: 1, LeaderEpoch: 3, PartitionEpoch: 8, ISR: []isr.ReplicaID{1, 2, 3, 4}}
	if len(out) != 1 || out[0].(isr.AlterISR).String() != want.String() {
		t.Fatalf("outputs %v, want %v", out, want)
	}
	l.ISRCommitted(now, want.ISR, 9)
	if err := l.MetadataChanged(now, []isr.ReplicaID{1, 3, 4}, []isr.ReplicaID{1, 3, 4}, 10); err != nil {
		t.Fatal(err)
	}
	if _, ok := l.FollowerLogEndOffset(2); ok || !slices.Equal(l.ISR(), []isr.ReplicaID{1, 3, 4}) {
		t.Errorf("after the move: isr %v, replica 2 still tracked %v", l.ISR(), ok)
	}
	if err := l.MetadataChanged(now, []isr.ReplicaID{3, 4}, []isr.ReplicaID{3, 4}, 11); !errors.Is(err, isr.ErrBadConfig) {
		t.Errorf("dropping the leader itself: %v", err)
	}
}

// TestLeaderResign: waiting acks=all produces are answered with ErrNotLeader, and nothing
// is accepted afterwards.
func TestLeaderResign(t *testing.T) {
	l, now := newTestLeader(t, []isr.ReplicaID{1, 2}, 1)
	l.Appended(now, 5)
	l.WaitAcksAll(1, 5)
	l.Resign()
	out := l.Outputs()
	if len(out) != 1 || !errors.Is(out[0].(isr.Ack).Err, isr.ErrNotLeader) {
		t.Fatalf("outputs %v", out)
	}
	if err := l.CheckProduce(isr.AcksAll); !errors.Is(err, isr.ErrNotLeader) {
		t.Errorf("CheckProduce after Resign: %v", err)
	}
	if resp := l.Fetch(now, isr.FetchRequest{Replica: 2, FetchOffset: 5, CurrentLeaderEpoch: 3}); !errors.Is(resp.Err, isr.ErrNotLeader) {
		t.Errorf("Fetch after Resign: %v", resp.Err)
	}
	if _, err := l.OffsetsForLeaderEpoch(3, 3); !errors.Is(err, isr.ErrNotLeader) {
		t.Errorf("OffsetsForLeaderEpoch after Resign: %v", err)
	}
}

// TestLeaderLaggingByPreviousFetch: Kafka's caught-up rule credits a follower with the time
// of its previous fetch when this fetch reaches the leader's LEO as of that previous fetch,
// so a follower that keeps up with a steady stream (always one batch behind) stays in sync.
func TestLeaderLaggingByPreviousFetch(t *testing.T) {
	l, now := newTestLeader(t, []isr.ReplicaID{1, 2}, 1)
	var end int64
	for range 30 { // 30 s of one batch a second; the follower always fetches one behind
		now = now.Add(time.Second)
		l.Fetch(now, isr.FetchRequest{Replica: 2, FetchOffset: end, CurrentLeaderEpoch: 3})
		end += 10
		l.Appended(now, end)
		l.Tick(now)
	}
	if len(l.ISR()) != 2 {
		t.Fatalf("a follower one batch behind left the ISR: %v", l.Outputs())
	}
	// It stops fetching: out after replica.lag.time.max.
	now = now.Add(11 * time.Second)
	l.Tick(now)
	var alter []isr.AlterISR
	for _, o := range l.Outputs() {
		if a, ok := o.(isr.AlterISR); ok {
			alter = append(alter, a)
		}
	}
	if len(alter) != 1 || !slices.Equal(alter[0].ISR, []isr.ReplicaID{1}) {
		t.Fatalf("shrink proposals %v", alter)
	}
}

func TestFollowerEdges(t *testing.T) {
	epochs, _ := isr.NewEpochCache(nil)
	f := isr.NewFollower(2, 1, 4, 0, 0, epochs)
	if f.Phase() != isr.Fetching {
		t.Fatalf("an empty replica starts %v, want fetching", f.Phase())
	}
	if err := f.Appended([]isr.BatchEpoch{{Epoch: 3, BaseOffset: 0, EndOffset: 4}, {Epoch: 4, BaseOffset: 4, EndOffset: 6}}); err != nil {
		t.Fatal(err)
	}
	if err := f.Appended([]isr.BatchEpoch{{Epoch: 4, BaseOffset: 7, EndOffset: 8}}); !errors.Is(err, isr.ErrBatchOutOfOrder) {
		t.Errorf("gap: %v", err)
	}
	if err := f.Appended([]isr.BatchEpoch{{Epoch: 2, BaseOffset: 6, EndOffset: 7}}); !errors.Is(err, isr.ErrBatchOutOfOrder) {
		t.Errorf("older epoch: %v", err)
	}
	if err := f.Fetched(isr.FetchResponse{HighWatermark: 9, LogEndOffset: 9}); err != nil || f.HighWatermark() != 6 {
		t.Errorf("high watermark %d (err %v), want capped at the log end 6", f.HighWatermark(), err)
	}
	// The leader's log is now shorter than ours (it was cut by an unclean election): the
	// follower finds the divergence again.
	if err := f.Fetched(isr.FetchResponse{Err: isr.ErrOffsetOutOfRange}); !errors.Is(err, isr.ErrOffsetOutOfRange) || f.Phase() != isr.Truncating {
		t.Fatalf("after out of range: %v, phase %v", err, f.Phase())
	}
	if req := f.EpochRequest(); req.Epoch != 4 || req.CurrentLeaderEpoch != 4 {
		t.Errorf("epoch request %+v", req)
	}
	if to := f.EpochAnswered(isr.EpochEndOffset{Epoch: 3, EndOffset: 3}); to != 3 || f.LogEndOffset() != 3 || f.HighWatermark() != 3 {
		t.Errorf("truncated to %d, leo %d hwm %d; want 3", to, f.LogEndOffset(), f.HighWatermark())
	}
	if got := epochs.Entries(); !slices.Equal(got, []isr.EpochEntry{{Epoch: 3, StartOffset: 0}}) {
		t.Errorf("epoch cache after truncation %v", got)
	}
}

// TestInSyncNow: members of the committed ISR that stopped catching up stop counting once
// the lag limit passes, before the controller has committed their removal.
func TestInSyncNow(t *testing.T) {
	l, now := newTestLeader(t, []isr.ReplicaID{1, 2, 3}, 2)
	l.Appended(now, 10)
	if got := l.InSyncNow(now); got != 3 {
		t.Fatalf("at the start: %d in sync, want 3 (one lag period of grace)", got)
	}
	later := now.Add(5 * time.Second)
	l.Fetch(later, isr.FetchRequest{Replica: 2, FetchOffset: 10, CurrentLeaderEpoch: 3})
	late := now.Add(11 * time.Second)
	if got := l.InSyncNow(late); got != 2 {
		t.Fatalf("replica 3 silent past the lag: %d in sync, want 2", got)
	}
	if got := l.InSyncReplicas(); got != 3 {
		t.Fatalf("committed ISR %d, want 3 until the controller commits a change", got)
	}
	if got := l.InSyncNow(now.Add(16 * time.Second)); got != 1 {
		t.Fatalf("both silent: %d, want 1 (the leader)", got)
	}
}

// TestNoReexpansionOfSilentFollower: a follower removed for lagging whose last fetch left
// it at the high watermark (it stopped right after catching up, and nothing was appended
// since) is not proposed back when the controller commits its removal: it has not caught
// up within the lag limit. (Seen with a SIGSTOPped follower in e2e: it was re-added within
// 100 ms of its removal and then elected leader.)
func TestNoReexpansionOfSilentFollower(t *testing.T) {
	l, now := newTestLeader(t, []isr.ReplicaID{1, 2, 3}, 2)
	l.Appended(now, 10)
	for _, f := range []isr.ReplicaID{2, 3} {
		l.Fetch(now, isr.FetchRequest{Replica: f, FetchOffset: 10, CurrentLeaderEpoch: 3})
	}
	l.Outputs()
	later := now.Add(11 * time.Second)
	l.Fetch(later, isr.FetchRequest{Replica: 3, FetchOffset: 10, CurrentLeaderEpoch: 3})
	l.Tick(later)
	a, ok := l.PendingISR()
	if !ok || !slices.Equal(a.ISR, []isr.ReplicaID{1, 3}) {
		t.Fatalf("pending ISR %v %v, want (1,3)", a.ISR, ok)
	}
	l.ISRCommitted(later, a.ISR, a.PartitionEpoch+1)
	if a, ok := l.PendingISR(); ok {
		t.Fatalf("silent replica 2 proposed back: %v", a)
	}
	// Once it fetches again it rejoins.
	l.Fetch(later.Add(time.Second), isr.FetchRequest{Replica: 2, FetchOffset: 10, CurrentLeaderEpoch: 3})
	if a, ok := l.PendingISR(); !ok || !slices.Equal(a.ISR, []isr.ReplicaID{1, 2, 3}) {
		t.Fatalf("after fetching again: pending %v %v, want (1,2,3)", a.ISR, ok)
	}
}

// TestLeaderStallNotHeldAgainstFollowers: a leader that gets no input for longer than
// StallMin (it did not run: SIGSTOP, a starved process) does not, on waking, find its
// fetching followers lagging: the gap is not held against them. A follower that stays
// silent afterwards leaves a lag period later; without StallMin the stall shrinks the ISR.
func TestLeaderStallNotHeldAgainstFollowers(t *testing.T) {
	for _, stallMin := range []time.Duration{0, 500 * time.Millisecond} {
		epochs, _ := isr.NewEpochCache(nil)
		now := time.Unix(1_700_000_000, 0)
		l, err := isr.NewLeader(isr.LeaderConfig{
			Self: 1, Replicas: []isr.ReplicaID{1, 2, 3}, ISR: []isr.ReplicaID{1, 2, 3}, LeaderEpoch: 3,
			MinInsync: 2, ReplicaLagMax: 2 * time.Second, StallMin: stallMin, Now: now,
		}, epochs)
		if err != nil {
			t.Fatal(err)
		}
		var end int64
		for range 20 { // ticks every 100 ms; both followers fetch up to the end each time
			now = now.Add(100 * time.Millisecond)
			end += 10
			l.Appended(now, end)
			for _, id := range []isr.ReplicaID{2, 3} {
				l.Fetch(now, isr.FetchRequest{Replica: id, FetchOffset: end, CurrentLeaderEpoch: 3})
			}
			l.Tick(now)
		}
		l.Outputs()
		now = now.Add(4 * time.Second) // the leader stopped; its first input on waking is a tick
		l.Tick(now)
		shrinks := len(l.Outputs())
		if stallMin == 0 {
			if shrinks != 1 || l.InSyncNow(now) != 1 {
				t.Fatalf("without StallMin: %d proposals and %d in sync after the stall, want the ISR shrunk to the leader", shrinks, l.InSyncNow(now))
			}
			continue
		}
		if shrinks != 0 || l.InSyncNow(now) != 3 {
			t.Fatalf("a 4 s stall of the leader: %d ISR proposals and %d in sync, want none and 3", shrinks, l.InSyncNow(now))
		}
		// Follower 2 fetches again; 3 stays silent and leaves after the lag time, counted
		// from the wake-up.
		for i := range 25 {
			now = now.Add(100 * time.Millisecond)
			l.Fetch(now, isr.FetchRequest{Replica: 2, FetchOffset: end, CurrentLeaderEpoch: 3})
			l.Tick(now)
			if out := l.Outputs(); len(out) > 0 {
				a, ok := out[0].(isr.AlterISR)
				if !ok || !slices.Equal(a.ISR, []isr.ReplicaID{1, 2}) || i < 19 {
					t.Fatalf("%v after the wake-up: %+v, want follower 3 out after the 2 s lag", time.Duration(i+1)*100*time.Millisecond, out)
				}
				return
			}
		}
		t.Fatal("the silent follower never left the ISR")
	}
}
