package controller

import (
	"bytes"
	"errors"
	"io"
	"maps"
	"slices"
	"testing"
)

// fsmHarness drives an FSM directly with commands at increasing raft indexes.
type fsmHarness struct {
	t     *testing.T
	fsm   *FSM
	index uint64
	nowMs int64
}

const testSessionMs = 10_000

func newFSMHarness(t *testing.T) *fsmHarness {
	return &fsmHarness{t: t, fsm: NewFSM(testSessionMs), nowMs: 1_000_000}
}

func (h *fsmHarness) apply(c Command) Result {
	h.t.Helper()
	h.index++
	c.NowMs = h.nowMs
	return h.fsm.ApplyCommand(h.index, &c)
}

func (h *fsmHarness) must(c Command) Result {
	h.t.Helper()
	r := h.apply(c)
	if r.Err != nil {
		h.t.Fatalf("command %+v: %v", c, r.Err)
	}
	return r
}

func (h *fsmHarness) register(id int32, rack string) int64 {
	h.t.Helper()
	r := h.must(Command{Type: CmdRegisterBroker, Broker: &BrokerRegistration{ID: id, Address: "127.0.0.1:1", Rack: rack}})
	return r.Value.(int64)
}

func (h *fsmHarness) partition(topic string, i int32) Partition {
	h.t.Helper()
	m := h.fsm.Metadata()
	t, ok := m.Topics[topic]
	if !ok {
		h.t.Fatalf("no topic %s", topic)
	}
	return t.Partitions[i]
}

func (h *fsmHarness) heartbeatAll(except ...int32) {
	h.t.Helper()
	for id, b := range h.fsm.Metadata().Brokers {
		if !slices.Contains(except, id) && !b.Fenced {
			h.must(Command{Type: CmdHeartbeat, Broker: &BrokerRegistration{ID: id, SessionEpoch: b.SessionEpoch}})
		}
	}
}

func TestPlacementRackAware(t *testing.T) {
	h := newFSMHarness(t)
	racks := map[int32]string{1: "a", 2: "a", 3: "b", 4: "b", 5: "c", 6: "c"}
	for id := int32(1); id <= 6; id++ {
		h.register(id, racks[id])
	}
	h.must(Command{Type: CmdCreateTopic, Topic: &TopicRequest{Name: "t", Partitions: 12, ReplicationFactor: 3}})
	leaders := map[int32]int{}
	for i := range int32(12) {
		p := h.partition("t", i)
		if len(p.Replicas) != 3 {
			t.Fatalf("partition %d replicas %v", i, p.Replicas)
		}
		seen := map[string]bool{}
		for _, id := range p.Replicas {
			seen[racks[id]] = true
		}
		if len(seen) != 3 {
			t.Errorf("partition %d replicas %v span racks %v, want 3 racks", i, p.Replicas, seen)
		}
		if p.Leader != p.Replicas[0] || !slices.Equal(p.ISR, p.Replicas) || p.LeaderEpoch != 0 {
			t.Errorf("partition %d: leader %d isr %v epoch %d", i, p.Leader, p.ISR, p.LeaderEpoch)
		}
		leaders[p.Leader]++
	}
	for id := int32(1); id <= 6; id++ {
		if leaders[id] != 2 {
			t.Errorf("broker %d leads %d partitions, want 2 (%v)", id, leaders[id], leaders)
		}
	}
	// Without racks: distinct replicas, leaders spread.
	h2 := newFSMHarness(t)
	for id := int32(1); id <= 3; id++ {
		h2.register(id, "")
	}
	h2.must(Command{Type: CmdCreateTopic, Topic: &TopicRequest{Name: "u", Partitions: 3, ReplicationFactor: 3}})
	for i := range int32(3) {
		p := h2.partition("u", i)
		s := slices.Clone(p.Replicas)
		slices.Sort(s)
		if !slices.Equal(s, []int32{1, 2, 3}) {
			t.Errorf("partition %d replicas %v", i, p.Replicas)
		}
	}
	if r := h2.apply(Command{Type: CmdCreateTopic, Topic: &TopicRequest{Name: "v", Partitions: 1, ReplicationFactor: 4}}); !errors.Is(r.Err, ErrNotEnoughBrokers) {
		t.Errorf("RF 4 on 3 brokers: %v", r.Err)
	}
	if r := h2.apply(Command{Type: CmdCreateTopic, Topic: &TopicRequest{Name: "u", Partitions: 1, ReplicationFactor: 1}}); !errors.Is(r.Err, ErrTopicExists) {
		t.Errorf("create twice: %v", r.Err)
	}
	for _, bad := range []TopicRequest{{Name: "", Partitions: 1, ReplicationFactor: 1}, {Name: "x", Partitions: 0, ReplicationFactor: 1}, {Name: "x", Partitions: 1, ReplicationFactor: 0}} {
		if r := h2.apply(Command{Type: CmdCreateTopic, Topic: &bad}); !errors.Is(r.Err, ErrInvalidTopic) {
			t.Errorf("create %+v: %v", bad, r.Err)
		}
	}
}

// setup registers brokers 1..3 without racks and creates topic t with one partition of
// RF 3 whose replicas are (1,2,3) in some order; it returns the partition.
func setup(t *testing.T, unclean bool) (*fsmHarness, Partition) {
	h := newFSMHarness(t)
	for id := int32(1); id <= 3; id++ {
		h.register(id, "")
	}
	h.must(Command{Type: CmdCreateTopic, Topic: &TopicRequest{Name: "t", Partitions: 1, ReplicationFactor: 3, UncleanLeaderElection: unclean}})
	return h, h.partition("t", 0)
}

func TestSessionExpiryElectsFromISR(t *testing.T) {
	h, p := setup(t, false)
	old := p.Leader
	// Every broker but the leader heartbeats; time passes beyond the session timeout.
	h.nowMs += testSessionMs + 1
	h.heartbeatAll(old)
	r := h.must(Command{Type: CmdExpireSessions})
	if got := r.Value.([]int32); !slices.Equal(got, []int32{old}) {
		t.Fatalf("expired %v, want [%d]", got, old)
	}
	q := h.partition("t", 0)
	if q.Leader == old || q.Leader == NoLeader || !slices.Contains(p.ISR, q.Leader) {
		t.Errorf("new leader %d (old %d, isr %v)", q.Leader, old, p.ISR)
	}
	if q.LeaderEpoch != p.LeaderEpoch+1 || q.PartitionEpoch <= p.PartitionEpoch || slices.Contains(q.ISR, old) {
		t.Errorf("after expiry: %+v (before %+v)", q, p)
	}
	// The new leader is the first live ISR member in assignment order.
	for _, id := range p.Replicas {
		if id != old {
			if q.Leader != id {
				t.Errorf("leader %d, want %d (first live in %v)", q.Leader, id, p.Replicas)
			}
			break
		}
	}
	// The fenced broker's heartbeats are refused until it registers again.
	b := h.fsm.Metadata().Brokers[old]
	if r := h.apply(Command{Type: CmdHeartbeat, Broker: &BrokerRegistration{ID: old, SessionEpoch: b.SessionEpoch}}); !errors.Is(r.Err, ErrStaleSession) {
		t.Errorf("fenced heartbeat: %v", r.Err)
	}
	epoch := h.register(old, "")
	if epoch != b.SessionEpoch+1 {
		t.Errorf("re-registration session epoch %d, want %d", epoch, b.SessionEpoch+1)
	}
	if r := h.apply(Command{Type: CmdHeartbeat, Broker: &BrokerRegistration{ID: old, SessionEpoch: b.SessionEpoch}}); !errors.Is(r.Err, ErrStaleSession) {
		t.Errorf("old session heartbeat after re-registration: %v", r.Err)
	}
	// It comes back as a follower outside the ISR: leadership does not move back.
	if q2 := h.partition("t", 0); q2.Leader != q.Leader || slices.Contains(q2.ISR, old) {
		t.Errorf("after return: %+v", q2)
	}
}

func TestExpiryGraceAfterControllerFailover(t *testing.T) {
	h, p := setup(t, false)
	// Nobody heartbeats for longer than a session, but a new controller leader took over
	// half a session ago: nobody is fenced yet.
	h.nowMs += 2 * testSessionMs
	r := h.must(Command{Type: CmdExpireSessions, GraceFromMs: h.nowMs - testSessionMs/2})
	if got := r.Value.([]int32); len(got) != 0 {
		t.Fatalf("expired %v within the grace period", got)
	}
	h.nowMs += testSessionMs
	r = h.must(Command{Type: CmdExpireSessions, GraceFromMs: h.nowMs - testSessionMs*3/2})
	if got := r.Value.([]int32); len(got) != 3 {
		t.Fatalf("expired %v after the grace period, want all 3", got)
	}
	// Fenced in id order, broker 3 stays as the partition's last ISR member, offline.
	if q := h.partition("t", 0); q.Leader != NoLeader || !slices.Equal(q.ISR, []int32{3}) || q.LeaderEpoch <= p.LeaderEpoch {
		t.Errorf("all brokers fenced: %+v", q)
	}
}

func TestOfflineAndUnclean(t *testing.T) {
	for _, unclean := range []bool{false, true} {
		h, p := setup(t, false)
		// Shrink the ISR to the leader alone, then the leader dies.
		h.must(Command{Type: CmdAlterISR, AlterISR: &AlterISRRequest{Topic: "t", Leader: p.Leader, LeaderEpoch: p.LeaderEpoch, PartitionEpoch: p.PartitionEpoch, ISR: []int32{p.Leader}}})
		h.nowMs += testSessionMs + 1
		h.heartbeatAll(p.Leader)
		h.must(Command{Type: CmdExpireSessions})
		q := h.partition("t", 0)
		if q.Leader != NoLeader || !slices.Equal(q.ISR, []int32{p.Leader}) {
			t.Fatalf("no live ISR member: %+v, want offline with ISR [%d]", q, p.Leader)
		}
		if unclean {
			h.must(Command{Type: CmdSetUnclean, Topic: &TopicRequest{Name: "t", UncleanLeaderElection: true}})
			q = h.partition("t", 0)
			if q.Leader == NoLeader || q.Leader == p.Leader || !slices.Equal(q.ISR, []int32{q.Leader}) {
				t.Errorf("unclean election: %+v", q)
			}
			continue
		}
		// The last ISR member returns: it is elected again.
		h.register(p.Leader, "")
		if q = h.partition("t", 0); q.Leader != p.Leader {
			t.Errorf("after the ISR member returned: %+v", q)
		}
	}
}

func TestAlterISRFencing(t *testing.T) {
	h, p := setup(t, false)
	follower := p.Replicas[1]
	shrunk := slices.DeleteFunc(slices.Clone(p.ISR), func(id int32) bool { return id == follower })
	tests := []struct {
		name string
		req  AlterISRRequest
		want error
	}{
		{"not the leader", AlterISRRequest{Leader: follower, LeaderEpoch: p.LeaderEpoch, PartitionEpoch: p.PartitionEpoch, ISR: p.ISR}, ErrNotPartitionLeader},
		{"stale leader epoch", AlterISRRequest{Leader: p.Leader, LeaderEpoch: p.LeaderEpoch - 1, PartitionEpoch: p.PartitionEpoch, ISR: shrunk}, ErrStaleLeaderEpoch},
		{"stale partition epoch", AlterISRRequest{Leader: p.Leader, LeaderEpoch: p.LeaderEpoch, PartitionEpoch: p.PartitionEpoch + 1, ISR: shrunk}, ErrStalePartitionEpoch},
		{"leader left out", AlterISRRequest{Leader: p.Leader, LeaderEpoch: p.LeaderEpoch, PartitionEpoch: p.PartitionEpoch, ISR: []int32{follower}}, ErrInvalidISR},
		{"not a replica", AlterISRRequest{Leader: p.Leader, LeaderEpoch: p.LeaderEpoch, PartitionEpoch: p.PartitionEpoch, ISR: []int32{p.Leader, 9}}, ErrInvalidISR},
		{"repeated", AlterISRRequest{Leader: p.Leader, LeaderEpoch: p.LeaderEpoch, PartitionEpoch: p.PartitionEpoch, ISR: []int32{p.Leader, p.Leader}}, ErrInvalidISR},
		{"unknown partition", AlterISRRequest{Partition: 7, Leader: p.Leader}, ErrUnknownTopic},
		{"accepted", AlterISRRequest{Leader: p.Leader, LeaderEpoch: p.LeaderEpoch, PartitionEpoch: p.PartitionEpoch, ISR: shrunk}, nil},
		{"the same request again is stale", AlterISRRequest{Leader: p.Leader, LeaderEpoch: p.LeaderEpoch, PartitionEpoch: p.PartitionEpoch, ISR: shrunk}, ErrStalePartitionEpoch},
	}
	for _, tt := range tests {
		tt.req.Topic = "t"
		r := h.apply(Command{Type: CmdAlterISR, AlterISR: &tt.req})
		if !errors.Is(r.Err, tt.want) {
			t.Errorf("%s: %v, want %v", tt.name, r.Err, tt.want)
		}
	}
	q := h.partition("t", 0)
	if !slices.Equal(q.ISR, sorted(shrunk)) || q.PartitionEpoch != p.PartitionEpoch+1 || q.LeaderEpoch != p.LeaderEpoch {
		t.Errorf("after the shrink: %+v", q)
	}
	// A fenced broker may not be added back.
	h.nowMs += testSessionMs + 1
	h.heartbeatAll(follower)
	h.must(Command{Type: CmdExpireSessions})
	q = h.partition("t", 0)
	r := h.apply(Command{Type: CmdAlterISR, AlterISR: &AlterISRRequest{Topic: "t", Leader: q.Leader, LeaderEpoch: q.LeaderEpoch, PartitionEpoch: q.PartitionEpoch, ISR: append(slices.Clone(q.ISR), follower)}})
	if !errors.Is(r.Err, ErrInvalidISR) {
		t.Errorf("adding a fenced broker: %v", r.Err)
	}
}

func sorted(s []int32) []int32 {
	c := slices.Clone(s)
	slices.Sort(c)
	return c
}

func TestReassignAndPreferredLeader(t *testing.T) {
	h := newFSMHarness(t)
	for id := int32(1); id <= 4; id++ {
		h.register(id, "")
	}
	h.must(Command{Type: CmdCreateTopic, Topic: &TopicRequest{Name: "t", Partitions: 1, ReplicationFactor: 2}})
	p := h.partition("t", 0)
	var target []int32
	for id := int32(1); id <= 4; id++ {
		if !slices.Contains(p.Replicas, id) {
			target = append(target, id)
		}
	}
	r := h.must(Command{Type: CmdReassign, Reassign: &ReassignRequest{Topic: "t", Replicas: target}})
	q := *r.Value.(*Partition)
	if !slices.Equal(q.TargetReplicas, target) || len(q.Replicas) != 4 || q.Leader != p.Leader {
		t.Fatalf("reassignment started: %+v", q)
	}
	if r := h.apply(Command{Type: CmdReassign, Reassign: &ReassignRequest{Topic: "t", Replicas: []int32{1, 1}}}); !errors.Is(r.Err, ErrInvalidReplicas) {
		t.Errorf("repeated replica: %v", r.Err)
	}
	// The leader adds the new replicas to the ISR as they catch up; the move completes, the
	// old replicas leave and leadership moves to the target's first.
	isr := slices.Clone(q.ISR)
	for _, id := range target {
		isr = append(isr, id)
		q = h.partition("t", 0)
		h.must(Command{Type: CmdAlterISR, AlterISR: &AlterISRRequest{Topic: "t", Leader: q.Leader, LeaderEpoch: q.LeaderEpoch, PartitionEpoch: q.PartitionEpoch, ISR: isr}})
	}
	q = h.partition("t", 0)
	if !slices.Equal(q.Replicas, target) || q.TargetReplicas != nil || !slices.Equal(q.ISR, sorted(target)) || q.Leader != target[0] || q.LeaderEpoch != p.LeaderEpoch+1 {
		t.Fatalf("after the move: %+v", q)
	}
	// Preferred-leader election: make the second replica lead (the first's session expires
	// and it returns), then move leadership back.
	first := q.Replicas[0]
	h.nowMs += testSessionMs + 1
	h.heartbeatAll(first)
	h.must(Command{Type: CmdExpireSessions})
	if r := h.apply(Command{Type: CmdElectPreferred, Reassign: &ReassignRequest{Topic: "t"}}); !errors.Is(r.Err, ErrPreferredNotEligible) {
		t.Errorf("preferred while fenced: %v", r.Err)
	}
	h.register(first, "")
	q = h.partition("t", 0)
	h.must(Command{Type: CmdAlterISR, AlterISR: &AlterISRRequest{Topic: "t", Leader: q.Leader, LeaderEpoch: q.LeaderEpoch, PartitionEpoch: q.PartitionEpoch, ISR: sorted(target)}})
	r = h.must(Command{Type: CmdElectPreferred, Reassign: &ReassignRequest{Topic: "t"}})
	if got := r.Value.(*Partition); got.Leader != first || got.LeaderEpoch != q.LeaderEpoch+1 {
		t.Errorf("preferred election: %+v", got)
	}
}

func TestRegisterAgainFencesOldSession(t *testing.T) {
	h, p := setup(t, false)
	h.register(p.Leader, "") // restarted within its session
	q := h.partition("t", 0)
	if q.Leader == p.Leader || slices.Contains(q.ISR, p.Leader) || q.LeaderEpoch != p.LeaderEpoch+1 {
		t.Errorf("a restarted leader keeps leading: %+v", q)
	}
}

func TestDeleteTopicAndVersion(t *testing.T) {
	h, _ := setup(t, false)
	v := h.fsm.Version()
	ch := h.fsm.Changed(v)
	select {
	case <-ch:
		t.Fatal("Changed fired before a change")
	default:
	}
	h.must(Command{Type: CmdDeleteTopic, Topic: &TopicRequest{Name: "t"}})
	select {
	case <-ch:
	default:
		t.Fatal("Changed did not fire")
	}
	if h.fsm.Version() != v+1 {
		t.Errorf("version %d, want %d", h.fsm.Version(), v+1)
	}
	if r := h.apply(Command{Type: CmdDeleteTopic, Topic: &TopicRequest{Name: "t"}}); !errors.Is(r.Err, ErrUnknownTopic) {
		t.Errorf("delete twice: %v", r.Err)
	}
	if r := h.apply(Command{Type: 99}); !errors.Is(r.Err, ErrUnknownCommand) {
		t.Errorf("unknown command: %v", r.Err)
	}
}

type sinkBuffer struct{ bytes.Buffer }

func (s *sinkBuffer) ID() string    { return "test" }
func (s *sinkBuffer) Cancel() error { return nil }
func (s *sinkBuffer) Close() error  { return nil }

func TestSnapshotRestore(t *testing.T) {
	h := newFSMHarness(t)
	for id := int32(1); id <= 3; id++ {
		h.register(id, string(rune('a'+id)))
	}
	h.must(Command{Type: CmdCreateTopic, Topic: &TopicRequest{Name: "t", Partitions: 4, ReplicationFactor: 2, UncleanLeaderElection: true}})
	snap, err := h.fsm.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var sink sinkBuffer
	if err := snap.Persist(&sink); err != nil {
		t.Fatal(err)
	}
	restored := NewFSM(testSessionMs)
	if err := restored.Restore(io.NopCloser(bytes.NewReader(sink.Bytes()))); err != nil {
		t.Fatal(err)
	}
	want, got := h.fsm.Metadata(), restored.Metadata()
	if !equalMetadata(want, got) {
		t.Errorf("restored %+v, want %+v", got, want)
	}
	if err := restored.Restore(io.NopCloser(bytes.NewReader([]byte("{")))); err == nil {
		t.Error("restoring garbage succeeded")
	}
}

func equalMetadata(a, b *Metadata) bool {
	if a.Version != b.Version || a.SessionTimeoutMs != b.SessionTimeoutMs || len(a.Brokers) != len(b.Brokers) || len(a.Topics) != len(b.Topics) ||
		!slices.Equal(a.DeletedTopics, b.DeletedTopics) || a.LeaderEpochFloor != b.LeaderEpochFloor ||
		a.NextProducerID != b.NextProducerID {
		return false
	}
	for id, x := range a.Brokers {
		if y, ok := b.Brokers[id]; !ok || *x != *y {
			return false
		}
	}
	for name, x := range a.Topics {
		y, ok := b.Topics[name]
		if !ok || x.UncleanLeaderElection != y.UncleanLeaderElection || len(x.Partitions) != len(y.Partitions) ||
			x.ID != y.ID || x.CreatedVersion != y.CreatedVersion || !maps.Equal(x.Config, y.Config) {
			return false
		}
		for i := range x.Partitions {
			p, q := x.Partitions[i], y.Partitions[i]
			if p.Index != q.Index || p.Leader != q.Leader || p.LeaderEpoch != q.LeaderEpoch || p.PartitionEpoch != q.PartitionEpoch ||
				!slices.Equal(p.Replicas, q.Replicas) || !slices.Equal(p.ISR, q.ISR) || !slices.Equal(p.TargetReplicas, q.TargetReplicas) {
				return false
			}
		}
	}
	return true
}

func TestParseVoters(t *testing.T) {
	good := map[string]int{
		"1@127.0.0.1:9093": 1,
		"1@127.0.0.1:9093,2@127.0.0.1:9094,3@127.0.0.1:9095": 3,
		"1@a:1,2@b:1,3@c:1,4@d:1,5@e:1":                      5,
		" 1@[::1]:9093 , 2@localhost:9094, 3@host:9095":      3,
	}
	for s, n := range good {
		v, err := ParseVoters(s)
		if err != nil || len(v) != n {
			t.Errorf("ParseVoters(%q) = %v, %v; want %d voters", s, v, err, n)
		}
	}
	for _, s := range []string{
		"", "1", "1@", "@127.0.0.1:1", "0@127.0.0.1:1", "-1@127.0.0.1:1", "x@127.0.0.1:1",
		"1@127.0.0.1", "1@127.0.0.1:0", "1@127.0.0.1:70000", "1@:9093",
		"1@a:1,2@b:1", // two voters
		"1@a:1,1@b:1,3@c:1",
		"1@a:1,2@a:1,3@c:1",
		"1@a:1,2@b:1,3@c:1,4@d:1",
		"1@a:1,2@b:1,3@c:1,4@d:1,5@e:1,6@f:1,7@g:1",
	} {
		if _, err := ParseVoters(s); !errors.Is(err, ErrBadVoters) {
			t.Errorf("ParseVoters(%q) = %v, want ErrBadVoters", s, err)
		}
	}
}

// TestBrokerKafkaAddress: a registration's Kafka address is kept, survives a snapshot, and
// a snapshot written before the field existed restores with it empty.
func TestBrokerKafkaAddress(t *testing.T) {
	h := newFSMHarness(t)
	h.must(Command{Type: CmdRegisterBroker, Broker: &BrokerRegistration{ID: 1, Address: "127.0.0.1:1", KafkaAddress: "127.0.0.1:9092"}})
	h.register(2, "")
	md := h.fsm.Metadata()
	if got := md.Brokers[1].KafkaAddress; got != "127.0.0.1:9092" {
		t.Fatalf("broker 1's Kafka address %q, want 127.0.0.1:9092", got)
	}
	if got := md.Brokers[2].KafkaAddress; got != "" {
		t.Fatalf("broker 2 registered without a Kafka address has %q", got)
	}
	snap, err := h.fsm.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var sink sinkBuffer
	if err := snap.Persist(&sink); err != nil {
		t.Fatal(err)
	}
	restored := NewFSM(testSessionMs)
	if err := restored.Restore(io.NopCloser(bytes.NewReader(sink.Bytes()))); err != nil {
		t.Fatal(err)
	}
	if got := restored.Metadata().Brokers[1].KafkaAddress; got != "127.0.0.1:9092" {
		t.Fatalf("restored Kafka address %q", got)
	}
	// The snapshot format of session 3, before KafkaAddress.
	old := `{"Version":7,"SessionTimeoutMs":10000,"Brokers":{"1":{"ID":1,"Address":"127.0.0.1:1","Rack":"","SessionEpoch":1,"LastHeartbeatMs":5,"Fenced":false}},"Topics":{}}`
	if err := restored.Restore(io.NopCloser(bytes.NewReader([]byte(old)))); err != nil {
		t.Fatalf("restore an old snapshot: %v", err)
	}
	if b := restored.Metadata().Brokers[1]; b == nil || b.Address != "127.0.0.1:1" || b.KafkaAddress != "" {
		t.Fatalf("old snapshot restored as %+v", b)
	}
}
