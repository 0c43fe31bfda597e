package kafka_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/ringlog/ringlog/netio/client"
	"github.com/ringlog/ringlog/netio/internal/brokertest"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// bundledMember is a bundled group consumer (ringlog protocol) of topic in group.
func bundledMember(t *testing.T, b *brokertest.Broker, group, topic string) *client.GroupConsumer {
	t.Helper()
	member, err := b.Client.NewGroupConsumer(client.GroupConfig{Group: group, SessionTimeout: 60 * time.Second,
		RebalanceTimeout: 60 * time.Second, HeartbeatInterval: 100 * time.Millisecond, Assignors: []string{"range"},
		AutoOffsetReset: "earliest", Consumer: client.ConsumerConfig{MaxWait: 100 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	member.Subscribe(topic)
	return member
}

func joinedMembers(resp *kmsg.JoinGroupResponse) []string {
	var ids []string
	for _, m := range resp.Members {
		ids = append(ids, m.MemberID)
	}
	slices.Sort(ids)
	return ids
}

// TestBundledMemberIDRequiredThenLeaves: the bundled client joins with JoinGroup v1, so
// its first join is answered MEMBER_ID_REQUIRED with its id (KIP-394) and it joins again
// under that id. Its Poll then gives up while the join phase waits for the leader; Close
// leaves under the id it was given, and the rebalance completes with the leader alone.
// Before, the member learned its id only from the join reply that never came: Close had
// no id to leave with, and the next generation included (and assigned partitions to) a
// member nobody ran until its session timeout.
func TestBundledMemberIDRequiredThenLeaves(t *testing.T) {
	b := startKafka(t, brokertest.Options{})
	admin := newClient(t, b)
	createTopic(t, admin, "mir-b", 2)
	ctx := testContext(t)
	hand := &handMember{ctx: ctx, t: t, cl: admin, group: "mir-b-g", topic: "mir-b"}
	leader := hand.leadGroup(0, 1)

	member := bundledMember(t, b, "mir-b-g", "mir-b")
	pollCtx, cancelPoll := context.WithCancel(ctx)
	polled := make(chan error, 1)
	go func() {
		_, err := member.Poll(pollCtx)
		polled <- err
	}()
	hand.waitState("PreparingRebalance") // the member joined under its id; the leader has not rejoined
	cancelPoll()
	if err := <-polled; err == nil {
		t.Fatal("Poll returned no error although its context ended in the join phase")
	}
	id, _ := member.Member()
	if id == "" {
		t.Fatal("the member does not know the id MEMBER_ID_REQUIRED gave it")
	}
	if err := member.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	second := hand.join(leader)
	if got := joinedMembers(second); !slices.Equal(got, []string{leader}) {
		t.Fatalf("generation %d has members %v; want only the leader %s (the bundled member %s left)", second.Generation, got, leader, id)
	}
}

// TestBundledMemberKeepsIDOnIllegalGeneration: a bundled member whose generation is old
// (it missed a join reply: its Poll gave up while the join phase waited) is answered
// ILLEGAL_GENERATION by its heartbeat. Like Kafka's consumer (AbstractCoordinator's
// heartbeat and SyncGroup handlers reset the member id on UNKNOWN_MEMBER_ID and
// FENCED_INSTANCE_ID but not on ILLEGAL_GENERATION), it keeps its member id and rejoins
// under it, so the next generation holds exactly the leader and it. Before, it dropped the
// id and joined as a new member: the old id stayed in the group, and the rebalance waited
// for it until its session timeout (60 s here, past the test's 30 s).
func TestBundledMemberKeepsIDOnIllegalGeneration(t *testing.T) {
	b := startKafka(t, brokertest.Options{})
	admin := newClient(t, b)
	createTopic(t, admin, "illgen", 2)
	produceN(t, admin, "illgen", 0, 10)
	ctx := testContext(t)
	hand := &handMember{ctx: ctx, t: t, cl: admin, group: "illgen-g", topic: "illgen"}
	leader := hand.leadGroup(0, 1)

	// The bundled member joins: generation 2 of the leader and it.
	member := bundledMember(t, b, "illgen-g", "illgen")
	defer member.Close(context.Background())
	polled := make(chan error, 1)
	go func() {
		_, err := member.Poll(ctx)
		polled <- err
	}()
	hand.waitState("PreparingRebalance")
	second := hand.join(leader)
	var id string
	for _, m := range second.Members {
		if m.MemberID != leader {
			id = m.MemberID
		}
	}
	hand.sync(leader, second.Generation, map[string][]int32{leader: {0}, id: {1}})
	if err := <-polled; err != nil {
		t.Fatal(err)
	}

	// It rejoins (a new subscription), and its Poll gives up while the join phase waits
	// for the leader; the leader's rejoin then completes generation 3 with the member in
	// it, whose reply nobody reads.
	member.Subscribe("illgen")
	pollCtx, cancelPoll := context.WithCancel(ctx)
	go func() {
		_, err := member.Poll(pollCtx)
		polled <- err
	}()
	hand.waitState("PreparingRebalance")
	cancelPoll()
	if err := <-polled; err == nil {
		t.Fatal("Poll returned no error although its context ended in the join phase")
	}
	third := hand.join(leader)
	if got := joinedMembers(third); len(got) != 2 {
		t.Fatalf("generation %d members %v, want the leader and %s", third.Generation, got, id)
	}
	// Its heartbeats name generation 2: ILLEGAL_GENERATION. It must keep its id.
	for {
		gotID, generation := member.Member()
		if generation < 0 {
			if gotID != id {
				t.Fatalf("after ILLEGAL_GENERATION the member has id %q, want %q kept", gotID, id)
			}
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the member's heartbeat never got ILLEGAL_GENERATION")
		}
		time.Sleep(10 * time.Millisecond)
	}

	// Its next Poll rejoins under the same id: the next generation is the leader and it.
	go func() {
		_, err := member.Poll(ctx)
		polled <- err
	}()
	hand.waitState("PreparingRebalance")
	fourth := hand.join(leader)
	if got, want := joinedMembers(fourth), joinedMembers(third); !slices.Equal(got, want) {
		t.Fatalf("generation %d members %v, want %v (no stray)", fourth.Generation, got, want)
	}
	hand.sync(leader, fourth.Generation, map[string][]int32{leader: {0}, id: {1}})
	if err := <-polled; err != nil {
		t.Fatal(err)
	}
	if got := member.Assignment(); len(got) != 1 || got[0].Partition != 1 {
		t.Fatalf("member owns %v, want illgen/1", got)
	}
}
