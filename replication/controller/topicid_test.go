package controller

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
)

// createV1 creates a topic with a command of the current format, the ID drawn as
// Controller.Submit draws it.
func (h *fsmHarness) createV1(name string, partitions, rf int32) *Topic {
	h.t.Helper()
	r := h.must(Command{Type: CmdCreateTopic, Version: CommandVersion,
		Topic: &TopicRequest{Name: name, ID: NewTopicID(), Partitions: partitions, ReplicationFactor: rf}})
	return r.Value.(*Topic)
}

func TestTopicIDDeleteRecreate(t *testing.T) {
	h := newFSMHarness(t)
	for id := int32(1); id <= 3; id++ {
		h.register(id, "")
	}
	first := h.createV1("orders", 2, 3)
	if !validTopicID(first.ID) || first.CreatedVersion != h.index || first.Partitions[0].LeaderEpoch != 0 {
		t.Fatalf("created %+v at index %d", first, h.index)
	}
	beforeDelete := h.fsm.Metadata()
	// Move a leader epoch up, so that the floor has something to rise above.
	leader := first.Partitions[1].Leader
	h.nowMs += testSessionMs + 1
	h.heartbeatAll(leader)
	h.must(Command{Type: CmdExpireSessions})
	h.register(leader, "")
	epochs := h.partition("orders", 1).LeaderEpoch
	if epochs < 1 {
		t.Fatalf("leader epoch %d after a failover", epochs)
	}

	if r := h.apply(Command{Type: CmdDeleteTopic, Version: CommandVersion, Topic: &TopicRequest{Name: "orders", ID: NewTopicID()}}); !errors.Is(r.Err, ErrTopicIDMismatch) {
		t.Fatalf("delete naming another incarnation: %v", r.Err)
	}
	r := h.must(Command{Type: CmdDeleteTopic, Version: CommandVersion, Topic: &TopicRequest{Name: "orders", ID: first.ID}})
	tomb := r.Value.(*DeletedTopic)
	if tomb.ID != first.ID || tomb.DeletedVersion != h.index || tomb.CreatedVersion != first.CreatedVersion {
		t.Fatalf("tombstone %+v", tomb)
	}
	afterDelete := h.fsm.Metadata()
	if afterDelete.LeaderEpochFloor != epochs+1 {
		t.Fatalf("leader epoch floor %d, want %d", afterDelete.LeaderEpochFloor, epochs+1)
	}
	// A create reusing a deleted ID is refused; one without an ID at the current format too.
	if r := h.apply(Command{Type: CmdCreateTopic, Version: CommandVersion, Topic: &TopicRequest{Name: "orders", ID: first.ID, Partitions: 1, ReplicationFactor: 1}}); !errors.Is(r.Err, ErrInvalidTopic) {
		t.Fatalf("create with a tombstoned id: %v", r.Err)
	}
	if r := h.apply(Command{Type: CmdCreateTopic, Version: CommandVersion, Topic: &TopicRequest{Name: "orders", Partitions: 1, ReplicationFactor: 1}}); !errors.Is(r.Err, ErrInvalidTopic) {
		t.Fatalf("create without an id: %v", r.Err)
	}
	second := h.createV1("orders", 1, 3)
	if second.ID == first.ID || second.Partitions[0].LeaderEpoch != epochs+1 {
		t.Fatalf("recreated %+v: want a new id and leader epoch %d", second, epochs+1)
	}
	afterRecreate := h.fsm.Metadata()

	// What each view proves about the first incarnation.
	for _, c := range []struct {
		view    string
		md      *Metadata
		deleted bool
	}{
		{"before the delete", beforeDelete, false},
		{"after the delete", afterDelete, true},
		{"after the recreate", afterRecreate, true},
		{"empty (a voter before its snapshot)", newMetadata(0), false},
	} {
		if got := c.md.TopicDeleted("orders", first.ID, first.CreatedVersion); got != c.deleted {
			t.Errorf("%s: TopicDeleted(first) = %v", c.view, got)
		}
	}
	// The second incarnation is never deleted by a view that predates it.
	for _, md := range []*Metadata{beforeDelete, afterDelete, newMetadata(0)} {
		if md.TopicDeleted("orders", second.ID, second.CreatedVersion) {
			t.Errorf("a view at version %d deletes the incarnation created at %d", md.Version, second.CreatedVersion)
		}
	}
	if afterRecreate.TopicDeleted("orders", second.ID, second.CreatedVersion) {
		t.Error("the current incarnation counts as deleted")
	}
}

// TestTombstonesBounded: tombstones beyond deletedTopicsMax are dropped oldest first, and
// a topic created with an ID is still known deleted through the metadata version.
func TestTombstonesBounded(t *testing.T) {
	h := newFSMHarness(t)
	h.register(1, "")
	var first *Topic
	for i := range deletedTopicsMax + 3 {
		tp := h.createV1(fmt.Sprintf("t%d", i), 1, 1)
		if i == 0 {
			first = tp
		}
		h.must(Command{Type: CmdDeleteTopic, Version: CommandVersion, Topic: &TopicRequest{Name: tp.Name}})
	}
	md := h.fsm.Metadata()
	if len(md.DeletedTopics) != deletedTopicsMax || md.DeletedTopics[0].Name != "t3" {
		t.Fatalf("%d tombstones, oldest %+v", len(md.DeletedTopics), md.DeletedTopics[0])
	}
	if !md.TopicDeleted("t0", first.ID, first.CreatedVersion) {
		t.Error("a deleted topic whose tombstone was dropped counts as alive")
	}
	if md.TopicDeleted("t0", LegacyTopicID("t0"), 0) {
		t.Error("a legacy topic without a tombstone counts as deleted")
	}
}

// TestLegacyTopicsCompatible: a create of the format before topic IDs (version 0) and a
// snapshot written before topic IDs give the same legacy ID, so replay and restore agree;
// a legacy topic is known deleted only by its tombstone or a later incarnation.
func TestLegacyTopicsCompatible(t *testing.T) {
	h := newFSMHarness(t)
	h.register(1, "")
	h.must(Command{Type: CmdCreateTopic, Topic: &TopicRequest{Name: "old", Partitions: 1, ReplicationFactor: 1}})
	tp := h.fsm.Metadata().Topics["old"]
	if tp.ID != LegacyTopicID("old") || tp.CreatedVersion != 0 {
		t.Fatalf("legacy create: %+v", tp)
	}
	// The snapshot an older controller wrote: no ID fields.
	old := `{"Version":2,"SessionTimeoutMs":10000,"Brokers":{"1":{"ID":1,"Address":"127.0.0.1:1","SessionEpoch":1,"LastHeartbeatMs":1000000}},` +
		`"Topics":{"old":{"Name":"old","Partitions":[{"Index":0,"Replicas":[1],"Leader":1,"LeaderEpoch":0,"PartitionEpoch":0,"ISR":[1]}]}}}`
	restored := NewFSM(0)
	if err := restored.Restore(io.NopCloser(strings.NewReader(old))); err != nil {
		t.Fatal(err)
	}
	if !equalMetadata(h.fsm.Metadata(), restored.Metadata()) {
		t.Fatalf("restored %+v, replayed %+v", restored.Metadata().Topics["old"], tp)
	}
	if h.fsm.Metadata().TopicDeleted("old", LegacyTopicID("old"), 0) {
		t.Fatal("a live legacy topic counts as deleted")
	}
	h.must(Command{Type: CmdDeleteTopic, Version: CommandVersion, Topic: &TopicRequest{Name: "old"}})
	if !h.fsm.Metadata().TopicDeleted("old", LegacyTopicID("old"), 0) {
		t.Fatal("a tombstoned legacy topic counts as alive")
	}
	// Snapshots of the current format round-trip the new fields.
	if !equalMetadata(h.fsm.Metadata(), snapshotRoundTrip(t, h.fsm).Metadata()) {
		t.Fatal("snapshot round trip lost tombstones or ids")
	}
	if r := h.apply(Command{Type: CmdHeartbeat, Version: CommandVersion + 1, Broker: &BrokerRegistration{ID: 1, SessionEpoch: 1}}); !errors.Is(r.Err, ErrUnknownCommand) {
		t.Fatalf("a command of a newer format: %v", r.Err)
	}
}

func TestAlterConfig(t *testing.T) {
	h, p := setup(t, false)
	id := h.fsm.Metadata().Topics["t"].ID
	set := map[string]string{"retention.ms": "1000", ConfigUnclean: "true"}
	r := h.must(Command{Type: CmdAlterConfig, Version: CommandVersion, Topic: &TopicRequest{Name: "t", ID: id, Config: set}})
	tp := r.Value.(*Topic)
	if tp.Config["retention.ms"] != "1000" || !tp.UncleanLeaderElection {
		t.Fatalf("after set: %+v", tp)
	}
	h.must(Command{Type: CmdAlterConfig, Version: CommandVersion, Topic: &TopicRequest{Name: "t", ConfigDeletes: []string{ConfigUnclean}}})
	tp = h.fsm.Metadata().Topics["t"]
	if tp.Config["retention.ms"] != "1000" || tp.UncleanLeaderElection || len(tp.Config) != 1 {
		t.Fatalf("after delete: %+v", tp)
	}
	for _, c := range []struct {
		req  TopicRequest
		want error
	}{
		{TopicRequest{Name: "t", ID: NewTopicID(), Config: set}, ErrTopicIDMismatch},
		{TopicRequest{Name: "nope", Config: set}, ErrUnknownTopic},
		{TopicRequest{Name: "t", Config: map[string]string{ConfigUnclean: "maybe"}}, ErrInvalidTopic},
	} {
		if r := h.apply(Command{Type: CmdAlterConfig, Version: CommandVersion, Topic: &c.req}); !errors.Is(r.Err, c.want) {
			t.Errorf("alter %+v: %v, want %v", c.req, r.Err, c.want)
		}
	}
	if q := h.partition("t", 0); q.LeaderEpoch != p.LeaderEpoch {
		t.Errorf("a config change moved the leader: %+v", q)
	}
}
