package shard

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ringlog/ringlog/engine/group"
	"github.com/ringlog/ringlog/engine/group/assign"
	"github.com/ringlog/ringlog/ring"
)

func openGroupsBroker(t *testing.T, dir string, clock *fakeClock) *Broker {
	t.Helper()
	cfg := Config{DataDir: dir, Shards: 2, Ring: ring.Config{Backend: "syscall"}, Groups: GroupsConfig{OffsetsPartitions: 4}}
	if clock != nil {
		cfg.Ring.Now = clock.Now
	}
	b, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func handle(t *testing.T, b *Broker, req group.Request) group.Response {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := b.Groups().Handle(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// joinAlone joins a one-member group with the range assignor and syncs its assignment of
// topic's partitions; it returns the member id and generation.
func joinAlone(t *testing.T, b *Broker, groupID, instance, topic string, partitions int32) (string, int32) {
	t.Helper()
	sub := assign.EncodeSubscription(nil, assign.Subscription{Topics: []string{topic}, Generation: -1})
	jr := handle(t, b, group.JoinGroup{Group: groupID, InstanceID: instance, ClientID: "c", SessionTimeout: 10 * time.Second,
		RebalanceTimeout: 10 * time.Second, ProtocolType: assign.ProtocolType, Protocols: []group.Protocol{{Name: assign.Range, Metadata: sub}}}).(group.JoinGroupResponse)
	if jr.Err != group.CodeNone || jr.Leader != jr.MemberID {
		t.Fatalf("join: %+v", jr)
	}
	var tps []assign.TopicPartition
	for p := range partitions {
		tps = append(tps, assign.TopicPartition{Topic: topic, Partition: p})
	}
	a := assign.EncodeAssignment(nil, assign.Assignment{Partitions: tps})
	sr := handle(t, b, group.SyncGroup{Group: groupID, MemberID: jr.MemberID, InstanceID: instance, Generation: jr.Generation,
		Assignments: []group.MemberAssignment{{MemberID: jr.MemberID, Assignment: a}}}).(group.SyncGroupResponse)
	if sr.Err != group.CodeNone {
		t.Fatalf("sync: %+v", sr)
	}
	return jr.MemberID, jr.Generation
}

// TestGroupsOnBroker: the broker creates __consumer_offsets, serves a group on the shard
// owning its partition, and a restart brings back committed offsets and group metadata
// from the topic's records.
func TestGroupsOnBroker(t *testing.T) {
	dir := t.TempDir()
	b := openGroupsBroker(t, dir, nil)
	if tpc := b.Topic(group.OffsetsTopic); tpc == nil || len(tpc.Partitions) != 4 || tpc.Config["retention.ms"] != "-1" {
		t.Fatalf("__consumer_offsets: %+v", tpc)
	}
	if err := b.CreateTopic("orders", 3, nil); err != nil {
		t.Fatal(err)
	}
	member, gen := joinAlone(t, b, "billing", "", "orders", 3)
	cr := handle(t, b, group.OffsetCommit{Group: "billing", MemberID: member, Generation: gen,
		Offsets: []group.CommitOffset{{Topic: "orders", Partition: 1, Offset: 42, LeaderEpoch: -1, Metadata: "m"}}}).(group.OffsetCommitResponse)
	if len(cr.Partitions) != 1 || cr.Partitions[0].Err != group.CodeNone {
		t.Fatalf("commit: %+v", cr)
	}
	stale := handle(t, b, group.OffsetCommit{Group: "billing", MemberID: member, Generation: gen - 1,
		Offsets: []group.CommitOffset{{Topic: "orders", Partition: 1, Offset: 7}}}).(group.OffsetCommitResponse)
	if stale.Partitions[0].Err != group.CodeIllegalGeneration {
		t.Fatalf("commit of an old generation: %+v", stale)
	}
	// A second group on (probably) another partition; list sees both.
	joinAlone(t, b, "audit", "", "orders", 3)
	lr := handle(t, b, group.ListGroups{}).(group.ListGroupsResponse)
	if lr.Err != group.CodeNone || len(lr.Groups) != 2 || lr.Groups[0].Group != "audit" || lr.Groups[1].Group != "billing" {
		t.Fatalf("list: %+v", lr)
	}
	b.Close()

	b = openGroupsBroker(t, dir, nil)
	defer b.Close()
	fr := handle(t, b, group.OffsetFetch{Group: "billing"}).(group.OffsetFetchResponse)
	if fr.Err != group.CodeNone || len(fr.Partitions) != 1 || fr.Partitions[0].Offset != 42 || fr.Partitions[0].Metadata != "m" {
		t.Fatalf("offsets after restart: %+v", fr)
	}
	dr := handle(t, b, group.DescribeGroups{Groups: []string{"billing", "nobody", "audit"}}).(group.DescribeGroupsResponse)
	if len(dr.Groups) != 3 || dr.Groups[0].Group != "billing" || dr.Groups[0].State != group.Stable || dr.Groups[0].Generation != gen ||
		len(dr.Groups[0].Members) != 1 || dr.Groups[0].Members[0].MemberID != member || dr.Groups[1].State != group.Dead || dr.Groups[2].Group != "audit" {
		t.Fatalf("describe after restart: %+v", dr)
	}
	// The member's session continues: its heartbeat of the stored generation is accepted.
	if hr := handle(t, b, group.Heartbeat{Group: "billing", MemberID: member, Generation: gen}).(group.HeartbeatResponse); hr.Err != group.CodeNone {
		t.Fatalf("heartbeat after restart: %+v", hr)
	}
}

// TestOffsetsTopicIsInternal: clients cannot produce to or delete __consumer_offsets.
func TestOffsetsTopicIsInternal(t *testing.T) {
	b := openGroupsBroker(t, t.TempDir(), nil)
	defer b.Close()
	if r := produce(t, b, TopicPartition{group.OffsetsTopic, 0}, AcksAll, buildBatch(t, "x", 1)); !errors.Is(r.Err, ErrInternalTopic) {
		t.Fatalf("produce to __consumer_offsets: %v, want ErrInternalTopic", r.Err)
	}
	if err := b.DeleteTopic(group.OffsetsTopic); !errors.Is(err, ErrInternalTopic) {
		t.Fatalf("delete __consumer_offsets: %v, want ErrInternalTopic", err)
	}
}

// TestGroupSessionTimeoutOnShardClock: the shard's clock (injected) drives the session
// timer: a member that stops heartbeating is removed once its session timeout passes on
// that clock, and no earlier.
func TestGroupSessionTimeoutOnShardClock(t *testing.T) {
	clock := &fakeClock{}
	clock.Advance(time.Duration(1_800_000_000) * time.Second)
	b := openGroupsBroker(t, t.TempDir(), clock)
	defer b.Close()
	if err := b.CreateTopic("orders", 2, nil); err != nil {
		t.Fatal(err)
	}
	joinAlone(t, b, "g", "", "orders", 2)
	state := func() group.State {
		// A round trip through every shard runs their due timers first.
		for i := range b.Shards() {
			if err := b.Exec(i, func(*ring.Reactor) error { return nil }); err != nil {
				t.Fatal(err)
			}
		}
		return handle(t, b, group.DescribeGroups{Groups: []string{"g"}}).(group.DescribeGroupsResponse).Groups[0].State
	}
	clock.Advance(9 * time.Second)
	if s := state(); s != group.Stable {
		t.Fatalf("9 s into a 10 s session: %v, want Stable", s)
	}
	clock.Advance(2 * time.Second)
	deadline := time.Now().Add(10 * time.Second)
	// Without members or offsets the group is gone (Dead) as soon as it is Empty.
	for s := state(); s != group.Empty && s != group.Dead; s = state() {
		if time.Now().After(deadline) {
			t.Fatal("member not removed after its session timeout on the shard clock")
		}
		time.Sleep(time.Millisecond) // the loop's timer runs on its next turn
	}
}

// TestDrainAnswersParkedJoins: a JoinGroup waiting for a join phase is answered at once
// (NOT_COORDINATOR) when the broker drains for shutdown, instead of holding the shutdown
// for the group's rebalance timeout.
func TestDrainAnswersParkedJoins(t *testing.T) {
	b := openGroupsBroker(t, t.TempDir(), nil)
	defer b.Close()
	if err := b.CreateTopic("orders", 2, nil); err != nil {
		t.Fatal(err)
	}
	joinAlone(t, b, "g", "", "orders", 2) // a member that will not rejoin
	sub := assign.EncodeSubscription(nil, assign.Subscription{Topics: []string{"orders"}, Generation: -1})
	answer := make(chan group.Response, 1)
	b.Groups().Do(CallerNone, group.JoinGroup{Group: "g", ClientID: "c", SessionTimeout: 10 * time.Second, RebalanceTimeout: time.Minute,
		ProtocolType: assign.ProtocolType, Protocols: []group.Protocol{{Name: assign.Range, Metadata: sub}}}, func(r group.Response) { answer <- r })
	// The join phase waits for the first member to rejoin: the new member's join is parked.
	if d := handle(t, b, group.DescribeGroups{Groups: []string{"g"}}).(group.DescribeGroupsResponse).Groups[0]; d.State != group.PreparingRebalance {
		t.Fatalf("before the drain: %v, want PreparingRebalance", d.State)
	}
	b.Drain()
	select {
	case r := <-answer:
		if jr := r.(group.JoinGroupResponse); jr.Err != group.CodeNotCoordinator {
			t.Fatalf("parked join after the drain: %+v", jr)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("parked join not answered by the drain")
	}
}
