package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ringlog/ringlog/engine/group"
	"github.com/ringlog/ringlog/netio/client"
	"github.com/ringlog/ringlog/netio/wire"
	"github.com/ringlog/ringlog/replication/cluster"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Consumer groups on a replicated cluster: __consumer_offsets is an RF=3 topic created
// through the controller, a group's coordinator is the leader of its partition, and
// committed offsets survive a kill -9 of that broker.

// groupRecord names a consumed record.
type groupRecord struct {
	partition int32
	offset    int64
}

// TestGroupCoordinatorFailover: 3 brokers; a group of the bundled client and a group of
// kgo (both coordinated by the same broker, the leader of their __consumer_offsets
// partitions) each read part of a 3-partition topic, commit and leave. kill -9 that
// broker: new members of both groups find the new coordinator (the new leader of the
// partition, which loaded the groups from its replica of the log) and read exactly the
// records after the committed offsets: none re-read, none skipped.
func TestGroupCoordinatorFailover(t *testing.T) {
	kafkaAddrs := []string{freeAddr(t), freeAddr(t), freeAddr(t)}
	tc := startClusterWith(t, 3, 0, func(id int) []string {
		return []string{"--kafka-listen", kafkaAddrs[id-1], "--group-min-session-timeout", "1s"}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const topic, perPartition = "events", 200
	if err := tc.c.CreateReplicatedTopic(ctx, topic, 3, 3, nil); err != nil {
		t.Fatalf("create topic: %v", err)
	}
	producer := newKgo(t, kafkaAddrs, kgo.RequiredAcks(kgo.AllISRAcks()), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	for round := range perPartition / 10 { // batches of 10 records: consumers read a few at a time
		var recs []*kgo.Record
		for p := range int32(3) {
			for i := range 10 {
				recs = append(recs, &kgo.Record{Topic: topic, Partition: p, Value: fmt.Appendf(nil, "p%d-%d", p, round*10+i)})
			}
		}
		if err := producer.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatalf("produce: %v", err)
		}
	}
	total := 3 * perPartition

	// The first lookup creates __consumer_offsets (8 partitions, RF min(3, live) = 3).
	for {
		var resp wire.FindCoordinatorResponse
		err := tc.c.Call(ctx, tc.brokers[0].addr, &wire.FindCoordinatorRequest{Group: "probe"}, &resp)
		if err == nil && resp.ErrorCode == wire.ErrNone {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("no coordinator for a probe group: %v %v", err, resp.ErrorCode)
		}
		time.Sleep(50 * time.Millisecond)
	}
	v := tc.waitFor("__consumer_offsets with a leader and a full ISR per partition", func(v *cluster.View) bool {
		ot := v.Metadata.Topics[group.OffsetsTopic]
		if ot == nil {
			return false
		}
		for _, p := range ot.Partitions {
			if p.Leader <= 0 || len(p.Replicas) != 3 || len(p.ISR) != 3 {
				return false
			}
		}
		return true
	}, tc.brokers[0])
	offsets := v.Metadata.Topics[group.OffsetsTopic]
	if len(offsets.Partitions) != 8 {
		t.Fatalf("__consumer_offsets has %d partitions, want 8", len(offsets.Partitions))
	}
	leaderOf := func(g string) int32 { return offsets.Partitions[group.PartitionFor(g, 8)].Leader }
	kgoGroup := "kgo-readers"
	coordinator := leaderOf(kgoGroup)
	sameCoordinator := func(prefix string) string {
		for i := 0; ; i++ {
			if g := fmt.Sprintf("%s-%d", prefix, i); leaderOf(g) == coordinator {
				return g
			}
		}
	}
	ringGroup, liveGroup := sameCoordinator("ringlog-readers"), sameCoordinator("ringlog-live")
	t.Logf("groups %q, %q and %q coordinated by node %d (partitions %d, %d and %d)", ringGroup, liveGroup, kgoGroup, coordinator,
		group.PartitionFor(ringGroup, 8), group.PartitionFor(liveGroup, 8), group.PartitionFor(kgoGroup, 8))

	var seeds []string
	for _, b := range tc.brokers {
		seeds = append(seeds, b.addr)
	}
	newGroupClient := func() *client.Client {
		c, err := client.New(ctx, client.Config{Broker: strings.Join(seeds, ","), ClientID: "e2e-group"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	newRingMember := func(c *client.Client, groupID string) *client.GroupConsumer {
		g, err := c.NewGroupConsumer(client.GroupConfig{Group: groupID, SessionTimeout: groupSession, AutoOffsetReset: "earliest",
			Consumer: client.ConsumerConfig{MaxWait: 50 * time.Millisecond, PartitionMaxBytes: 1}})
		if err != nil {
			t.Fatal(err)
		}
		g.Subscribe(topic)
		return g
	}
	newKgoMember := func() *kgo.Client {
		return newKgo(t, kafkaAddrs, kgo.ConsumerGroup(kgoGroup), kgo.ConsumeTopics(topic), kgo.DisableAutoCommit(),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.SessionTimeout(groupSession), kgo.HeartbeatInterval(groupSession/3), kgo.FetchMaxWait(100*time.Millisecond), kgo.FetchMaxPartitionBytes(1))
	}

	// Phase 1: each group reads at least a third of the records, commits what it read and
	// leaves.
	ringRead, kgoRead := map[groupRecord]bool{}, map[groupRecord]bool{}
	first := newRingMember(newGroupClient(), ringGroup)
	for len(ringRead) < total/3 {
		recs, err := first.Poll(ctx)
		if err != nil {
			t.Fatalf("bundled member: %v", err)
		}
		for _, r := range recs {
			ringRead[groupRecord{r.Partition, r.Offset}] = true
		}
	}
	if err := first.CommitSync(ctx); err != nil {
		t.Fatalf("bundled commit: %v", err)
	}
	if err := first.Close(ctx); err != nil {
		t.Fatalf("bundled close: %v", err)
	}
	kfirst := newKgoMember()
	for len(kgoRead) < total/3 {
		fs := kfirst.PollFetches(ctx)
		if err := fs.Err(); err != nil {
			t.Fatalf("kgo member: %v", err)
		}
		fs.EachRecord(func(r *kgo.Record) { kgoRead[groupRecord{r.Partition, r.Offset}] = true })
	}
	if err := kfirst.CommitUncommittedOffsets(ctx); err != nil {
		t.Fatalf("kgo commit: %v", err)
	}
	kfirst.Close() // leaves the group; auto-commit is off
	t.Logf("before the kill: the bundled group read %d records, the kgo group %d", len(ringRead), len(kgoRead))

	// A member that stays through the kill, committing after every poll.
	live := &liveMember{t: t, g: newRingMember(newGroupClient(), liveGroup), seen: map[groupRecord]bool{}, committed: map[int32]int64{}}
	defer live.g.Close(context.Background())
	for len(live.seen) < total/4 {
		live.poll(ctx)
	}
	_, liveGeneration := live.g.Member()

	// Every broker lists the groups it coordinates; the bundled client, at home on node 1,
	// asks them all.
	listGroups := func(when string, want ...string) {
		t.Helper()
		listing, err := newGroupClient().ListGroups(ctx)
		if err != nil {
			t.Fatalf("list groups %s: %v", when, err)
		}
		var names []string
		for _, l := range listing {
			names = append(names, l.Group)
		}
		for _, w := range want {
			if !slices.Contains(names, w) {
				t.Fatalf("list groups %s: %v, want %s among them", when, names, w)
			}
		}
	}
	listGroups("before the kill (coordinated by node "+fmt.Sprint(coordinator)+")", ringGroup, liveGroup, kgoGroup)

	// kill -9 the coordinator of both groups.
	killed := time.Now()
	tc.node(coordinator).kill()
	survivor := tc.brokers[coordinator%3]
	// The member that stayed polls and commits through the failover: it finds the new
	// coordinator and the partitions' new leaders, reads the rest, and its commits reach
	// the new coordinator.
	for deadline := time.Now().Add(90 * time.Second); len(live.seen) < total || !live.allCommitted(perPartition); {
		if time.Now().After(deadline) {
			t.Fatalf("member through the kill: read %d of %d, committed %v", len(live.seen), total, live.committed)
		}
		live.poll(ctx)
	}
	_, gen := live.g.Member()
	committed, err := newGroupClient().FetchCommitted(ctx, liveGroup)
	if err != nil {
		t.Fatalf("fetch committed offsets of %s: %v", liveGroup, err)
	}
	for _, co := range committed {
		if co.Offset != perPartition {
			t.Fatalf("committed offsets of %s after the kill: %+v, want %d each", liveGroup, committed, perPartition)
		}
	}
	if len(committed) != 3 {
		t.Fatalf("committed offsets of %s after the kill: %+v, want 3 partitions", liveGroup, committed)
	}
	t.Logf("member through the kill: all read and committed %.1f s after the kill; generation %d before, %d after; %d commits failed meanwhile; %d records re-read (all past the last commit)",
		time.Since(killed).Seconds(), liveGeneration, gen, live.failedCommits, live.reread)

	tc.waitFor("new leaders of the dead broker's __consumer_offsets partitions", func(v *cluster.View) bool {
		ot := v.Metadata.Topics[group.OffsetsTopic]
		for _, g := range []string{ringGroup, kgoGroup} {
			if l := ot.Partitions[group.PartitionFor(g, 8)].Leader; l <= 0 || l == coordinator {
				return false
			}
		}
		return true
	}, survivor)

	// The Kafka listener names the new leader.
	kcl := newKgo(t, kafkaAddrs)
	fc := kmsg.NewPtrFindCoordinatorRequest()
	fc.CoordinatorKey = kgoGroup
	for {
		resp, err := fc.RequestWith(ctx, kcl)
		if err == nil && resp.ErrorCode == 0 && resp.NodeID != coordinator {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("FindCoordinator after the kill: %v %+v", err, resp)
		}
		time.Sleep(50 * time.Millisecond)
	}

	// Phase 2: new members resume from the committed offsets.
	resume := func(name string, read map[groupRecord]bool, poll func() ([]groupRecord, error)) {
		t.Helper()
		again := map[groupRecord]bool{}
		deadline := time.Now().Add(90 * time.Second)
		for len(read)+len(again) < total {
			if time.Now().After(deadline) {
				t.Fatalf("%s group: read %d + %d of %d records after the kill", name, len(read), len(again), total)
			}
			recs, err := poll()
			if err != nil {
				t.Logf("%s member after the kill: %v", name, err)
				time.Sleep(100 * time.Millisecond)
				continue
			}
			for _, r := range recs {
				if read[r] || again[r] {
					t.Fatalf("%s group re-read partition %d offset %d, committed before the kill", name, r.partition, r.offset)
				}
				again[r] = true
			}
		}
		t.Logf("%s group: %d records after the kill, %d before: all %d, each once", name, len(again), len(read), total)
	}
	second := newRingMember(newGroupClient(), ringGroup)
	defer second.Close(context.Background())
	resume("bundled", ringRead, func() ([]groupRecord, error) {
		recs, err := second.Poll(ctx)
		var out []groupRecord
		for _, r := range recs {
			out = append(out, groupRecord{r.Partition, r.Offset})
		}
		return out, err
	})
	ksecond := newKgoMember()
	resume("kgo", kgoRead, func() ([]groupRecord, error) {
		pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
		defer pcancel()
		fs := ksecond.PollFetches(pctx)
		var out []groupRecord
		fs.EachRecord(func(r *kgo.Record) { out = append(out, groupRecord{r.Partition, r.Offset}) })
		if err := fs.Err(); err != nil && pctx.Err() == nil {
			return out, err
		}
		return out, nil
	})

	listGroups("after the kill", ringGroup, liveGroup, kgoGroup)
}

// liveMember is a bundled-client member that commits after every poll and checks that a
// record it reads again (after a rebalance) lies past its last successful commit.
type liveMember struct {
	t             *testing.T
	g             *client.GroupConsumer
	seen          map[groupRecord]bool
	committed     map[int32]int64 // by partition: the offset last committed successfully
	next          map[int32]int64 // by partition: after the last record read
	failedCommits int
	reread        int
}

func (m *liveMember) poll(ctx context.Context) {
	m.t.Helper()
	recs, err := m.g.Poll(ctx)
	if err != nil {
		m.t.Logf("member through the kill: poll: %v", err)
		time.Sleep(100 * time.Millisecond)
		return
	}
	if m.next == nil {
		m.next = map[int32]int64{}
	}
	for _, r := range recs {
		gr := groupRecord{r.Partition, r.Offset}
		if m.seen[gr] {
			if c, ok := m.committed[r.Partition]; ok && r.Offset < c {
				m.t.Fatalf("member through the kill re-read partition %d offset %d, below its commit %d", r.Partition, r.Offset, c)
			}
			m.reread++
		}
		m.seen[gr] = true
		m.next[r.Partition] = r.Offset + 1
	}
	if err := m.g.CommitSync(ctx); err != nil {
		m.failedCommits++
		return
	}
	for p, o := range m.next {
		m.committed[p] = o
	}
}

// allCommitted: every partition's commit reached n.
func (m *liveMember) allCommitted(n int64) bool {
	for p := range int32(3) {
		if m.committed[p] != n {
			return false
		}
	}
	return true
}
