package e2e

import (
	"context"
	"fmt"
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
	var ringGroup string
	for i := 0; ringGroup == ""; i++ {
		if g := fmt.Sprintf("ringlog-readers-%d", i); leaderOf(g) == coordinator {
			ringGroup = g
		}
	}
	t.Logf("groups %q and %q coordinated by node %d (partitions %d and %d)", ringGroup, kgoGroup, coordinator,
		group.PartitionFor(ringGroup, 8), group.PartitionFor(kgoGroup, 8))

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
	newRingMember := func(c *client.Client) *client.GroupConsumer {
		g, err := c.NewGroupConsumer(client.GroupConfig{Group: ringGroup, SessionTimeout: groupSession, AutoOffsetReset: "earliest",
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
	first := newRingMember(newGroupClient())
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

	// kill -9 the coordinator of both groups.
	killed := time.Now()
	tc.node(coordinator).kill()
	live := tc.brokers[coordinator%3]
	tc.waitFor("new leaders of the dead broker's __consumer_offsets partitions", func(v *cluster.View) bool {
		ot := v.Metadata.Topics[group.OffsetsTopic]
		for _, g := range []string{ringGroup, kgoGroup} {
			if l := ot.Partitions[group.PartitionFor(g, 8)].Leader; l <= 0 || l == coordinator {
				return false
			}
		}
		return true
	}, live)
	t.Logf("new coordinator %d s after the kill", int(time.Since(killed).Seconds()))

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
	second := newRingMember(newGroupClient())
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
}
