package kafka_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ringlog/ringlog/netio/client"
	"github.com/ringlog/ringlog/netio/internal/brokertest"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// groupMember is a kgo group consumer that records what it polls, by partition and offset.
type groupMember struct {
	cl   *kgo.Client
	mu   sync.Mutex
	seen map[string]int // "partition/offset" -> times seen
}

func newGroupMember(t *testing.T, b *brokertest.Broker, group, topic string, opts ...kgo.Opt) *groupMember {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(b.KafkaAddr), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100 * time.Millisecond),
		kgo.SessionTimeout(6 * time.Second), kgo.HeartbeatInterval(200 * time.Millisecond), kgo.RebalanceTimeout(10 * time.Second),
		kgo.DisableAutoCommit()}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return &groupMember{cl: cl, seen: map[string]int{}}
}

// pollUntil polls (at most 10 records at a time) and commits what it got until done says
// stop or ctx ends.
func (m *groupMember) pollUntil(ctx context.Context, t *testing.T, done func() bool) {
	for !done() && ctx.Err() == nil {
		pollCtx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		fetches := m.cl.PollRecords(pollCtx, 10)
		cancel()
		fetches.EachError(func(topic string, p int32, err error) {
			if ctx.Err() == nil && pollCtx.Err() == nil {
				t.Errorf("fetch %s/%d: %v", topic, p, err)
			}
		})
		m.mu.Lock()
		fetches.EachRecord(func(r *kgo.Record) { m.seen[fmt.Sprintf("%d/%d", r.Partition, r.Offset)]++ })
		m.mu.Unlock()
		if err := m.cl.CommitUncommittedOffsets(ctx); err != nil && ctx.Err() == nil {
			t.Logf("commit: %v (a rebalance may have taken the partitions)", err)
		}
	}
}

func (m *groupMember) count() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.seen)
}

func produceN(t *testing.T, cl *kgo.Client, topic string, from, n int) {
	t.Helper()
	ctx := testContext(t)
	for i := from; i < from+n; i++ {
		cl.Produce(ctx, &kgo.Record{Topic: topic, Key: fmt.Appendf(nil, "k%d", i), Value: fmt.Appendf(nil, "%d", i)}, nil)
	}
	if err := cl.Flush(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestKgoGroupRebalanceCommitResume: two kgo members share a group's partitions after a
// rebalance, every record is consumed, the offsets they commit are the group's, and a new
// member after both leave resumes from them (sees only records produced later).
func TestKgoGroupRebalanceCommitResume(t *testing.T) {
	b := startKafka(t, brokertest.Options{})
	admin := newClient(t, b)
	createTopic(t, admin, "grouped", 4)
	produceN(t, admin, "grouped", 0, 400)
	ctx := testContext(t)

	first := newGroupMember(t, b, "g1", "grouped")
	defer first.cl.Close()
	first.pollUntil(ctx, t, func() bool { return first.count() >= 50 })
	// The second member joins while the first is idle (its heartbeats still run): the
	// rebalance gives the second some partitions before either consumes further.
	second := newGroupMember(t, b, "g1", "grouped")
	defer second.cl.Close()
	second.pollUntil(ctx, t, func() bool { return second.count() > 0 })
	var wg sync.WaitGroup
	all := func() bool { return first.count()+second.count() >= 400 }
	wg.Add(2)
	go func() { defer wg.Done(); first.pollUntil(ctx, t, all) }()
	go func() { defer wg.Done(); second.pollUntil(ctx, t, all) }()
	wg.Wait()
	if ctx.Err() != nil {
		t.Fatalf("consumed %d + %d of 400 records before the deadline", first.count(), second.count())
	}
	if second.count() == 0 {
		t.Fatal("the second member got no partition after the rebalance")
	}
	union := map[string]bool{}
	for _, m := range []*groupMember{first, second} {
		for k := range m.seen {
			union[k] = true
		}
	}
	if len(union) != 400 {
		t.Fatalf("the group consumed %d distinct records, want 400", len(union))
	}
	// Both commit what they have and leave.
	for _, m := range []*groupMember{first, second} {
		if err := m.cl.CommitUncommittedOffsets(ctx); err != nil {
			t.Logf("final commit: %v", err)
		}
		m.cl.LeaveGroup()
		m.cl.Close()
	}
	// The ringlog protocol sees the offsets the Kafka members committed.
	committed, err := b.Client.FetchCommitted(ctx, "g1")
	if err != nil {
		t.Fatal(err)
	}
	var sum int64
	for _, c := range committed {
		sum += c.Offset
	}
	if sum != 400 {
		t.Fatalf("committed offsets over the ringlog protocol: %+v (sum %d, want 400)", committed, sum)
	}
	// A new member resumes after the committed offsets.
	produceN(t, admin, "grouped", 400, 20)
	third := newGroupMember(t, b, "g1", "grouped")
	defer third.cl.Close()
	third.pollUntil(ctx, t, func() bool { return third.count() >= 20 })
	if third.count() != 20 {
		t.Fatalf("resumed member consumed %d records, want the 20 new ones", third.count())
	}
}

// TestMixedGroupProtocols: a kgo member (Kafka protocol) and a bundled-client member
// (ringlog protocol) in one group, both with the range assignor and the Kafka consumer
// protocol's subscription format: the partitions are split between them and every record
// is consumed.
func TestMixedGroupProtocols(t *testing.T) {
	b := startKafka(t, brokertest.Options{})
	admin := newClient(t, b)
	createTopic(t, admin, "mixed", 4)
	produceN(t, admin, "mixed", 0, 200)
	ctx := testContext(t)

	// The kgo member joins and reads a little; then the bundled member joins while the kgo
	// member is idle, and reads once the rebalance gave it partitions; then both finish.
	kafkaMember := newGroupMember(t, b, "mixed-g", "mixed", kgo.Balancers(kgo.RangeBalancer()))
	defer kafkaMember.cl.Close()
	kafkaMember.pollUntil(ctx, t, func() bool { return kafkaMember.count() > 0 })
	ringlogMember, err := b.Client.NewGroupConsumer(client.GroupConfig{Group: "mixed-g", SessionTimeout: 6 * time.Second,
		HeartbeatInterval: 200 * time.Millisecond, Assignors: []string{"range"}, AutoOffsetReset: "earliest",
		Consumer: client.ConsumerConfig{MaxWait: 100 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	defer ringlogMember.Close(context.Background())
	ringlogMember.Subscribe("mixed")
	var mu sync.Mutex
	ringlogSeen := map[string]int{}
	ringlogCount := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(ringlogSeen)
	}
	pollRinglog := func(done func() bool) {
		for !done() && ctx.Err() == nil {
			pollCtx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			records, err := ringlogMember.Poll(pollCtx)
			cancel()
			if err != nil && ctx.Err() == nil && pollCtx.Err() == nil {
				t.Errorf("bundled member poll: %v", err)
				return
			}
			mu.Lock()
			for _, r := range records {
				ringlogSeen[fmt.Sprintf("%d/%d", r.Partition, r.Offset)]++
			}
			mu.Unlock()
			if err := ringlogMember.CommitSync(ctx); err != nil && ctx.Err() == nil {
				t.Logf("bundled commit: %v", err)
			}
		}
	}
	pollRinglog(func() bool { return ringlogCount() > 0 })
	all := func() bool { return kafkaMember.count()+ringlogCount() >= 200 }
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); kafkaMember.pollUntil(ctx, t, all) }()
	go func() { defer wg.Done(); pollRinglog(all) }()
	wg.Wait()
	if ctx.Err() != nil {
		t.Fatalf("consumed %d (kgo) + %d (bundled) of 200 before the deadline", kafkaMember.count(), len(ringlogSeen))
	}
	if kafkaMember.count() == 0 || len(ringlogSeen) == 0 {
		t.Fatalf("one member got nothing: kgo %d, bundled %d", kafkaMember.count(), len(ringlogSeen))
	}
	union := map[string]bool{}
	for k := range ringlogSeen {
		union[k] = true
		if kafkaMember.seen[k] > 0 { // at-least-once allows it around a rebalance; none is expected here
			t.Logf("record %s consumed by both members", k)
		}
	}
	for k := range kafkaMember.seen {
		union[k] = true
	}
	if len(union) != 200 {
		t.Fatalf("the mixed group consumed %d distinct records, want 200", len(union))
	}
}

// TestJoinGroupEmptyProtocolName: a JoinGroup naming only the protocol "" is refused with
// INCONSISTENT_GROUP_PROTOCOL (FuzzServeFrame found that it made the coordinator panic).
func TestJoinGroupEmptyProtocolName(t *testing.T) {
	b := startKafka(t, brokertest.Options{})
	cl := newClient(t, b)
	req := kmsg.NewPtrJoinGroupRequest()
	req.Group, req.ProtocolType, req.SessionTimeoutMillis, req.RebalanceTimeoutMillis = "empty-name", "consumer", 10000, 1000
	req.Protocols = []kmsg.JoinGroupRequestProtocol{{Name: ""}}
	resp, err := req.RequestWith(testContext(t), cl)
	if err != nil || resp.ErrorCode != kerr.InconsistentGroupProtocol.Code {
		t.Fatalf("JoinGroup with protocol \"\": %v, code %d", err, resp.ErrorCode)
	}
	if err := cl.Ping(testContext(t)); err != nil {
		t.Fatalf("broker after the refused join: %v", err)
	}
}

// TestBundledMemberPollTimesOutInSync: a bundled member whose Poll context ends while its
// SyncGroup waits for the leader's assignment must not think itself done: the leader (here
// a hand-driven Kafka member) then stores an assignment giving it a partition, and the
// member's next Poll has to fetch that assignment. With a 300 ms Poll, as
// TestMixedGroupProtocols uses, a loaded machine makes the SyncGroup outlast the Poll; the
// member kept its member id and generation, heartbeats of that generation are answered
// OK in the Stable group, so nothing ever made it rejoin and its partitions went unread
// until the next rebalance.
func TestBundledMemberPollTimesOutInSync(t *testing.T) {
	// Failed every time before GroupConsumer.ensureActive called needRejoin (rejoin, keep
	// the member id) on a join round that returned an error.
	b := startKafka(t, brokertest.Options{})
	admin := newClient(t, b)
	createTopic(t, admin, "stall", 2)
	produceN(t, admin, "stall", 0, 20)
	ctx := testContext(t)

	// The leader: a Kafka member driven by hand, so that it syncs when the test says.
	hand := &handMember{ctx: ctx, t: t, cl: admin, group: "stall-g", topic: "stall"}
	join, sync := hand.join, hand.sync
	leader := hand.leadGroup(0, 1)

	member, err := b.Client.NewGroupConsumer(client.GroupConfig{Group: "stall-g", SessionTimeout: 60 * time.Second,
		HeartbeatInterval: 200 * time.Millisecond, Assignors: []string{"range"}, AutoOffsetReset: "earliest",
		Consumer: client.ConsumerConfig{MaxWait: 100 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	defer member.Close(context.Background())
	member.Subscribe("stall")
	pollCtx, cancelPoll := context.WithCancel(ctx)
	polled := make(chan error, 1)
	go func() {
		_, err := member.Poll(pollCtx)
		polled <- err
	}()
	// The member's JoinGroup started a join phase; the leader's rejoin completes it.
	for groupState(ctx, t, admin, "stall-g") != "PreparingRebalance" {
		if ctx.Err() != nil {
			t.Fatal("the bundled member's JoinGroup never started a rebalance")
		}
		time.Sleep(10 * time.Millisecond)
	}
	second := join(leader)
	var memberID string
	for _, m := range second.Members {
		if m.MemberID != leader {
			memberID = m.MemberID
		}
	}
	// The member has its join reply (its id and generation); its SyncGroup waits for the
	// leader, and its Poll gives up meanwhile.
	for {
		if id, generation := member.Member(); id == memberID && generation == second.Generation {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the bundled member never got its join reply")
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancelPoll()
	if err := <-polled; err == nil {
		t.Fatal("Poll returned no error although its context ended before the assignment came")
	}
	sync(leader, second.Generation, map[string][]int32{leader: {0}, memberID: {1}})

	// The group is Stable with partition 1 assigned to a member that does not know it. Its
	// next Poll must join again (its subscription now names its generation, so the
	// coordinator starts a rebalance, which the leader completes) rather than return with
	// nothing owned while the coordinator counts partition 1 as read.
	go func() {
		_, err := member.Poll(ctx)
		polled <- err
	}()
	for state := ""; state != "PreparingRebalance"; state = groupState(ctx, t, admin, "stall-g") {
		select {
		case err := <-polled:
			t.Fatalf("Poll returned (err %v) owning %v without joining again; the group is %s with stall/1 assigned to the member",
				err, member.Assignment(), groupState(ctx, t, admin, "stall-g"))
		default:
		}
		if ctx.Err() != nil {
			t.Fatal("the group never started the rebalance")
		}
		time.Sleep(10 * time.Millisecond)
	}
	third := join(leader)
	sync(leader, third.Generation, map[string][]int32{leader: {0}, memberID: {1}})
	if err := <-polled; err != nil {
		t.Fatal(err)
	}
	if got := member.Assignment(); len(got) != 1 || got[0].Topic != "stall" || got[0].Partition != 1 {
		t.Fatalf("after the rebalance the member owns %v, want stall/1", got)
	}
}

// handMember is a Kafka group member driven by hand (kmsg requests), so that a test
// decides when it joins and syncs; it consumes topic with the range assignor.
type handMember struct {
	ctx          context.Context
	t            *testing.T
	cl           *kgo.Client
	group, topic string
}

// join sends JoinGroup as member ("" for a new one, then again with the id
// MEMBER_ID_REQUIRED hands out) and returns the answer, which must be a success.
func (h *handMember) join(member string) *kmsg.JoinGroupResponse {
	h.t.Helper()
	meta := kmsg.NewConsumerMemberMetadata()
	meta.Topics = []string{h.topic}
	req := kmsg.NewPtrJoinGroupRequest()
	req.Group, req.MemberID, req.ProtocolType = h.group, member, "consumer"
	req.SessionTimeoutMillis, req.RebalanceTimeoutMillis = 60000, 60000
	req.Protocols = []kmsg.JoinGroupRequestProtocol{{Name: "range", Metadata: meta.AppendTo(nil)}}
	resp, err := req.RequestWith(h.ctx, h.cl)
	if err == nil && resp.ErrorCode == kerr.MemberIDRequired.Code && member == "" {
		req.MemberID = resp.MemberID // KIP-394: join again with the id handed out
		resp, err = req.RequestWith(h.ctx, h.cl)
	}
	if err != nil || resp.ErrorCode != 0 {
		h.t.Fatalf("hand-driven JoinGroup: %v, code %d", err, resp.ErrorCode)
	}
	return resp
}

// sync sends the leader's SyncGroup with assignments (member id -> partitions of topic).
func (h *handMember) sync(member string, generation int32, assignments map[string][]int32) {
	h.t.Helper()
	req := kmsg.NewPtrSyncGroupRequest()
	req.Group, req.MemberID, req.Generation = h.group, member, generation
	for id, partitions := range assignments {
		a := kmsg.NewConsumerMemberAssignment()
		a.Topics = []kmsg.ConsumerMemberAssignmentTopic{{Topic: h.topic, Partitions: partitions}}
		req.GroupAssignment = append(req.GroupAssignment, kmsg.SyncGroupRequestGroupAssignment{MemberID: id, MemberAssignment: a.AppendTo(nil)})
	}
	resp, err := req.RequestWith(h.ctx, h.cl)
	if err != nil || resp.ErrorCode != 0 {
		h.t.Fatalf("hand-driven SyncGroup: %v, code %d", err, resp.ErrorCode)
	}
}

// leadGroup makes h the only member and leader of its (new) group, owning partitions of
// its topic, and returns its member id.
func (h *handMember) leadGroup(partitions ...int32) string {
	h.t.Helper()
	first := h.join("")
	h.sync(first.MemberID, first.Generation, map[string][]int32{first.MemberID: partitions})
	return first.MemberID
}

// waitState waits until the group is in state.
func (h *handMember) waitState(state string) {
	h.t.Helper()
	for groupState(h.ctx, h.t, h.cl, h.group) != state {
		if h.ctx.Err() != nil {
			h.t.Fatalf("group %s never reached %s", h.group, state)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func groupState(ctx context.Context, t *testing.T, admin *kgo.Client, group string) string {
	t.Helper()
	req := kmsg.NewPtrDescribeGroupsRequest()
	req.Groups = []string{group}
	resp, err := req.RequestWith(ctx, admin)
	if err != nil || len(resp.Groups) != 1 {
		t.Fatalf("DescribeGroups: %v", err)
	}
	return resp.Groups[0].State
}
