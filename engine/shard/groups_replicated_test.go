package shard

import (
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/ringlog/ringlog/engine/batch"
	"github.com/ringlog/ringlog/engine/group"
	"github.com/ringlog/ringlog/ring"
)

// Consumer groups of a broker in a replicated cluster (GroupsConfig.Replicated): the
// groups of a __consumer_offsets partition are loaded from its log when the broker becomes
// its leader (Groups.Lead) and dropped when it stops (Groups.Resign).

func openReplicatedGroupsBroker(t *testing.T) *Broker {
	t.Helper()
	b, err := Open(Config{DataDir: t.TempDir(), Shards: 2, Ring: ring.Config{Backend: "syscall"},
		Groups: GroupsConfig{OffsetsPartitions: 4, Replicated: true}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// replicatedGroupBatch encodes group records as the batch a follower copies from its
// leader at base offset base.
func replicatedGroupBatch(t *testing.T, base int64, recs ...group.Record) []byte {
	t.Helper()
	raw, err := group.EncodeBatch(nil, batch.NewBuilder(batch.BuilderOptions{}), recs, time.Now().UnixMilli())
	if err != nil {
		t.Fatal(err)
	}
	binary.BigEndian.PutUint64(raw[0:8], uint64(base)) // the base offset is outside the CRC
	return raw
}

func fetchOffsets(t *testing.T, b *Broker, groupID string) group.OffsetFetchResponse {
	t.Helper()
	return handle(t, b, group.OffsetFetch{Group: groupID}).(group.OffsetFetchResponse)
}

// committedOffset is the offset fr holds for topic/partition, -1 when none.
func committedOffset(fr group.OffsetFetchResponse, topic string, partition int32) int64 {
	for _, p := range fr.Partitions {
		if p.Topic == topic && p.Partition == partition {
			return p.Offset
		}
	}
	return -1
}

// TestGroupsReplicatedLoadOnLead: a follower's copy of an offsets partition (records
// appended as the fetcher appends them) serves nothing; Lead answers
// COORDINATOR_LOAD_IN_PROGRESS to the request queued behind it, then serves the groups the
// log holds, newest commit per key; the coordinator's own commits go to that log;
// Resign drops the groups (NOT_COORDINATOR) and a later Lead reloads them, own commits
// included; a Resign right after a Lead cancels its replay.
func TestGroupsReplicatedLoadOnLead(t *testing.T) {
	b := openReplicatedGroupsBroker(t)
	if b.Topic(group.OffsetsTopic) != nil {
		t.Fatal("a replicated broker created __consumer_offsets at Open; the controller creates it")
	}
	if err := b.CreateTopicIdentified(group.OffsetsTopic, 4, OffsetsTopicConfig(), "offsets-id", 7); err != nil {
		t.Fatal(err)
	}
	if err := b.Groups().SetOffsetsPartitions(4); err != nil {
		t.Fatal(err)
	}
	const g = "billing"
	p := group.PartitionFor(g, 4)
	tp := TopicPartition{group.OffsetsTopic, p}
	if fr := fetchOffsets(t, b, g); fr.Err != group.CodeNotCoordinator {
		t.Fatalf("offset fetch on a follower: %+v, want NOT_COORDINATOR", fr)
	}

	// The follower copies two batches of the leader's commits (recent: offsets of an Empty
	// group expire after OffsetsRetention).
	nowMs := time.Now().UnixMilli()
	first := replicatedGroupBatch(t, 0,
		group.OffsetRecord(g, "orders", 0, group.OffsetValue{Offset: 10, LeaderEpoch: -1, CommitTimestampMs: nowMs}),
		group.GroupRecord(g, group.GroupValue{ProtocolType: "consumer", Generation: 3, StateTimestampMs: nowMs}))
	second := replicatedGroupBatch(t, 2,
		group.OffsetRecord(g, "orders", 0, group.OffsetValue{Offset: 42, LeaderEpoch: -1, CommitTimestampMs: nowMs}),
		group.OffsetRecord(g, "orders", 1, group.OffsetValue{Offset: 7, LeaderEpoch: -1, CommitTimestampMs: nowMs}))
	if end, err := b.AppendReplicated(tp, [][]byte{first, second}); err != nil || end != 4 {
		t.Fatalf("append replicated: end %d, %v", end, err)
	}
	if fr := fetchOffsets(t, b, g); fr.Err != group.CodeNotCoordinator {
		t.Fatalf("offset fetch on a follower holding records: %+v, want NOT_COORDINATOR", fr)
	}

	// Leadership arrives: what runs on the shard right behind Lead sees the partition
	// loading (the replay is posted behind it). The shard's loop is held while both are
	// posted, so the order does not depend on timing (a request racing the loop saw the
	// groups already loaded under -race). The coordinator's own tests show that a loading
	// partition answers COORDINATOR_LOAD_IN_PROGRESS.
	si, err := b.ShardOf(tp)
	if err != nil {
		t.Fatal(err)
	}
	s := b.shards[si]
	release, loadingSeen := make(chan struct{}), make(chan [2]bool, 1)
	if err := s.r.Post(func() { <-release }); err != nil {
		t.Fatal(err)
	}
	if err := b.Groups().Lead(p); err != nil {
		close(release)
		t.Fatal(err)
	}
	if err := s.r.Post(func() {
		serving, known := s.groups.coord.Loaded(p)
		loadingSeen <- [2]bool{serving, known}
	}); err != nil {
		close(release)
		t.Fatal(err)
	}
	close(release)
	if st := <-loadingSeen; st[0] || !st[1] {
		t.Fatalf("right behind Lead: serving %v, known %v; want the partition loading", st[0], st[1])
	}
	fr := fetchOffsets(t, b, g)
	if fr.Err != group.CodeNone || committedOffset(fr, "orders", 0) != 42 || committedOffset(fr, "orders", 1) != 7 {
		t.Fatalf("offsets loaded from the log: %+v, want orders/0=42 orders/1=7", fr)
	}
	dr := handle(t, b, group.DescribeGroups{Groups: []string{g}}).(group.DescribeGroupsResponse)
	if dr.Groups[0].Err != group.CodeNone || dr.Groups[0].State != group.Empty {
		t.Fatalf("describe after load: %+v", dr)
	}

	// The coordinator commits into the partition (a group without members takes commits
	// from outside, generation -1).
	cr := handle(t, b, group.OffsetCommit{Group: g, Generation: -1,
		Offsets: []group.CommitOffset{{Topic: "orders", Partition: 0, Offset: 50, LeaderEpoch: -1}}}).(group.OffsetCommitResponse)
	if len(cr.Partitions) != 1 || cr.Partitions[0].Err != group.CodeNone {
		t.Fatalf("commit as leader: %+v", cr)
	}
	if _, end, err := b.LogOffsets(tp); err != nil || end != 5 {
		t.Fatalf("offsets partition end after the commit: %d, %v; want 5", end, err)
	}

	// Leadership leaves: the groups are dropped.
	if err := b.Groups().Resign(p); err != nil {
		t.Fatal(err)
	}
	if fr := fetchOffsets(t, b, g); fr.Err != group.CodeNotCoordinator {
		t.Fatalf("offset fetch after Resign: %+v, want NOT_COORDINATOR", fr)
	}
	// ... and returns: the reload includes the commit made as leader.
	if err := b.Groups().Lead(p); err != nil {
		t.Fatal(err)
	}
	for fr = fetchOffsets(t, b, g); fr.Err == group.CodeCoordinatorLoadInProgress; fr = fetchOffsets(t, b, g) {
	}
	if fr.Err != group.CodeNone || committedOffset(fr, "orders", 0) != 50 || committedOffset(fr, "orders", 1) != 7 {
		t.Fatalf("offsets after leading again: %+v, want orders/0=50 orders/1=7", fr)
	}

	// A Resign queued right behind a Lead cancels its replay.
	if err := b.Groups().Resign(p); err != nil {
		t.Fatal(err)
	}
	if err := b.Groups().Lead(p); err != nil {
		t.Fatal(err)
	}
	if err := b.Groups().Resign(p); err != nil {
		t.Fatal(err)
	}
	for range 3 { // past the cancelled replay's turn
		if fr := fetchOffsets(t, b, g); fr.Err != group.CodeNotCoordinator {
			t.Fatalf("offset fetch after Lead+Resign: %+v, want NOT_COORDINATOR", fr)
		}
	}
}

// TestGroupsReplicatedPartitionCount: the controller's partition count replaces the
// configured one (it decides where groups live); Lead and Resign are refused on a single
// broker; the internal topic is deleted only by replication.
func TestGroupsReplicatedPartitionCount(t *testing.T) {
	b := openReplicatedGroupsBroker(t)
	if err := b.CreateTopicIdentified(group.OffsetsTopic, 6, OffsetsTopicConfig(), "offsets-id", 7); err != nil {
		t.Fatal(err)
	}
	if err := b.Groups().SetOffsetsPartitions(6); err != nil {
		t.Fatal(err)
	}
	if n := b.Groups().OffsetsPartitions(); n != 6 {
		t.Fatalf("offsets partitions %d, want 6", n)
	}
	const g = "audit"
	p := group.PartitionFor(g, 6)
	if err := b.Groups().Lead(p); err != nil {
		t.Fatal(err)
	}
	fr := fetchOffsets(t, b, g)
	for fr.Err == group.CodeCoordinatorLoadInProgress {
		fr = fetchOffsets(t, b, g)
	}
	if fr.Err != group.CodeNone {
		t.Fatalf("offset fetch of a group of a led partition: %+v", fr)
	}
	if err := b.Groups().SetOffsetsPartitions(0); err == nil {
		t.Fatal("0 offsets partitions accepted")
	}
	if err := b.DeleteTopic(group.OffsetsTopic); !errors.Is(err, ErrInternalTopic) {
		t.Fatalf("client delete of __consumer_offsets: %v, want ErrInternalTopic", err)
	}
	if err := b.DeleteReplicatedTopic(group.OffsetsTopic); err != nil {
		t.Fatalf("replication's delete of __consumer_offsets: %v", err)
	}
	if fr := fetchOffsets(t, b, g); fr.Err == group.CodeNone {
		t.Fatalf("offset fetch after the topic was deleted: %+v", fr)
	}

	single := openGroupsBroker(t, t.TempDir(), nil)
	defer single.Close()
	if err := single.Groups().Lead(0); !errors.Is(err, ErrNotReplicatedGroups) {
		t.Fatalf("Lead on a single broker: %v, want ErrNotReplicatedGroups", err)
	}
}
