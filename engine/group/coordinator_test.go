package group

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/ringlog/ringlog/engine"
)

var t0 = time.UnixMilli(1_700_000_000_000)

// fixture is a Coordinator serving every partition, with helpers that send one request and
// return its reply, completing appends (ok or failed) on the way.
type fixture struct {
	t        *testing.T
	c        *Coordinator
	now      time.Time
	req      uint64
	failNext error
	appends  []Append
}

func newFixture(t *testing.T, cfg Config) *fixture {
	if cfg.OffsetsPartitions == 0 {
		cfg.OffsetsPartitions = 1
	}
	f := &fixture{t: t, c: New(cfg), now: t0}
	for p := range cfg.OffsetsPartitions {
		if err := f.c.Load(f.now, p, NewReplayer().Snapshot()); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

// do sends r and returns every reply it led to, keyed by request id.
func (f *fixture) do(r Request) map[uint64]Response {
	f.c.Handle(f.now, r)
	return f.drain()
}

func (f *fixture) drain() map[uint64]Response {
	replies := map[uint64]Response{}
	for range 100 {
		outs := f.c.Ready()
		if len(outs) == 0 {
			return replies
		}
		for _, o := range outs {
			switch o := o.(type) {
			case Reply:
				if _, dup := replies[o.ReqID]; dup {
					f.t.Fatalf("two replies to request %d", o.ReqID)
				}
				replies[o.ReqID] = o.Response
			case Append:
				f.appends = append(f.appends, o)
				err := f.failNext
				f.failNext = nil
				f.c.AppendDone(f.now, o.ID, err)
			}
		}
	}
	f.t.Fatal("outputs did not stop")
	return nil
}

func (f *fixture) next() uint64 { f.req++; return f.req }

func (f *fixture) join(group, member, instance string, protocols ...string) (uint64, JoinGroup) {
	if len(protocols) == 0 {
		protocols = []string{"range"}
	}
	r := JoinGroup{ReqID: f.next(), Group: group, MemberID: member, InstanceID: instance, ClientID: "c",
		SessionTimeout: 10 * time.Second, RebalanceTimeout: 20 * time.Second, ProtocolType: "consumer"}
	for _, p := range protocols {
		r.Protocols = append(r.Protocols, Protocol{Name: p, Metadata: []byte(p)})
	}
	return r.ReqID, r
}

// stableGroup forms a Stable group of n dynamic members and returns their ids.
func (f *fixture) stableGroup(group string, n int) []string {
	var ids []string
	for range n {
		id, r := f.join(group, "", "")
		f.do(r)
		_ = id
	}
	// The first join completed a generation of one; the others wait in the join phase
	// for the first member to rejoin. Rejoin everyone until a generation holds them all.
	desc := f.describe(group)
	for _, m := range desc.Members {
		_, r := f.join(group, m.MemberID, "")
		f.do(r)
		ids = append(ids, m.MemberID)
	}
	desc = f.describe(group)
	if desc.State != CompletingRebalance || len(desc.Members) != n {
		f.t.Fatalf("want CompletingRebalance with %d members, got %+v", n, desc)
	}
	f.do(SyncGroup{ReqID: f.next(), Group: group, MemberID: desc.Leader, Generation: desc.Generation})
	for _, id := range ids {
		f.do(SyncGroup{ReqID: f.next(), Group: group, MemberID: id, Generation: desc.Generation})
	}
	if d := f.describe(group); d.State != Stable {
		f.t.Fatalf("not stable: %+v", d)
	}
	return ids
}

func (f *fixture) describe(group string) DescribedGroup {
	id := f.next()
	return f.do(DescribeGroups{ReqID: id, Groups: []string{group}})[id].(DescribeGroupsResponse).Groups[0]
}

func (f *fixture) heartbeat(group, member string, generation int32) Code {
	id := f.next()
	return f.do(Heartbeat{ReqID: id, Group: group, MemberID: member, Generation: generation})[id].(HeartbeatResponse).Err
}

func TestJoinValidation(t *testing.T) {
	f := newFixture(t, Config{})
	ids := f.stableGroup("g", 2)
	tests := []struct {
		name   string
		modify func(*JoinGroup)
		want   Code
	}{
		{"empty group id", func(r *JoinGroup) { r.Group = "" }, CodeInvalidGroupID},
		{"session too short", func(r *JoinGroup) { r.SessionTimeout = time.Second }, CodeInvalidSessionTimeout},
		{"session too long", func(r *JoinGroup) { r.SessionTimeout = time.Hour }, CodeInvalidSessionTimeout},
		{"no protocols", func(r *JoinGroup) { r.Protocols = nil }, CodeInconsistentGroupProtocol},
		{"other protocol type", func(r *JoinGroup) { r.ProtocolType = "connect" }, CodeInconsistentGroupProtocol},
		{"no common protocol", func(r *JoinGroup) { r.Protocols = []Protocol{{Name: "roundrobin"}} }, CodeInconsistentGroupProtocol},
		{"protocol without a name", func(r *JoinGroup) { r.Protocols = append(r.Protocols, Protocol{Name: ""}) }, CodeInconsistentGroupProtocol},
		{"new group, only a nameless protocol", func(r *JoinGroup) { r.Group, r.Protocols = "nameless", []Protocol{{Name: ""}} }, CodeInconsistentGroupProtocol},
		{"unknown member", func(r *JoinGroup) { r.MemberID = "nobody" }, CodeUnknownMemberID},
		{"unknown member of a new group", func(r *JoinGroup) { r.Group, r.MemberID = "new", "x" }, CodeUnknownMemberID},
	}
	for _, tt := range tests {
		id, r := f.join("g", "", "")
		tt.modify(&r)
		got := f.do(r)[id].(JoinGroupResponse).Err
		if got != tt.want {
			t.Errorf("%s: %s, want %s", tt.name, got, tt.want)
		}
	}
	if d := f.describe("g"); d.State != Stable || len(d.Members) != len(ids) {
		t.Fatalf("refused joins changed the group: %+v", d)
	}
}

func TestGroupMaxSize(t *testing.T) {
	f := newFixture(t, Config{GroupMembersMax: 2})
	f.stableGroup("g", 2)
	id, r := f.join("g", "", "")
	if got := f.do(r)[id].(JoinGroupResponse).Err; got != CodeGroupMaxSizeReached {
		t.Fatalf("third member: %s", got)
	}
}

// Heartbeat answers by state, member and generation (Kafka's order of checks).
func TestHeartbeatCodes(t *testing.T) {
	f := newFixture(t, Config{})
	ids := f.stableGroup("g", 2)
	gen := f.describe("g").Generation
	if got := f.heartbeat("g", ids[0], gen); got != CodeNone {
		t.Fatalf("stable: %s", got)
	}
	if got := f.heartbeat("g", ids[0], gen-1); got != CodeIllegalGeneration {
		t.Fatalf("old generation: %s", got)
	}
	if got := f.heartbeat("g", "ghost", gen); got != CodeUnknownMemberID {
		t.Fatalf("unknown member: %s", got)
	}
	if got := f.heartbeat("nogroup", ids[0], gen); got != CodeUnknownMemberID {
		t.Fatalf("unknown group: %s", got)
	}
	_, r := f.join("g", "", "") // a third member: the group prepares a rebalance
	f.do(r)
	if got := f.heartbeat("g", ids[0], gen); got != CodeRebalanceInProgress {
		t.Fatalf("preparing: %s", got)
	}
	for _, id := range ids {
		_, r := f.join("g", id, "")
		f.do(r)
	}
	d := f.describe("g")
	if d.State != CompletingRebalance {
		t.Fatalf("state %s", d.State)
	}
	if got := f.heartbeat("g", ids[1], d.Generation); got != CodeNone {
		t.Fatalf("completing: %s", got)
	}
	if got := f.heartbeat("g", ids[1], gen); got != CodeIllegalGeneration {
		t.Fatalf("completing, old generation: %s", got)
	}
}

func TestNotCoordinatorAndLoading(t *testing.T) {
	f := newFixture(t, Config{OffsetsPartitions: 4})
	group := "g" // partition 3 of 4
	if p := PartitionFor(group, 4); p != 3 {
		t.Fatalf("placement of g: %d", p)
	}
	f.c.Unload(f.now, 3)
	if got := f.heartbeat(group, "m", 1); got != CodeNotCoordinator {
		t.Fatalf("unloaded partition: %s", got)
	}
	f.c.BeginLoad(3)
	id, r := f.join(group, "", "")
	if got := f.do(r)[id].(JoinGroupResponse).Err; got != CodeCoordinatorLoadInProgress {
		t.Fatalf("loading: %s", got)
	}
	lid := f.next()
	if got := f.do(ListGroups{ReqID: lid})[lid].(ListGroupsResponse).Err; got != CodeCoordinatorLoadInProgress {
		t.Fatalf("list while loading: %s", got)
	}
	snap := NewReplayer().Snapshot()
	snap.Groups["h"] = &LoadedGroup{Offsets: map[TopicPartition]OffsetValue{}} // h is not in partition 3
	if p := PartitionFor("h", 4); p == 3 {
		t.Fatal("test needs a group outside partition 3")
	}
	if err := f.c.Load(f.now, 3, snap); !errors.Is(err, ErrWrongPartition) {
		t.Fatalf("Load with a foreign group: %v", err)
	}
}

// Unloading a partition answers everything waiting on its groups, once.
func TestUnloadAnswersWaiters(t *testing.T) {
	f := newFixture(t, Config{InitialRebalanceDelay: 3 * time.Second})
	id1, r1 := f.join("g", "", "")
	id2, r2 := f.join("g", "", "")
	f.do(r1)
	f.do(r2)
	f.c.Unload(f.now, 0)
	replies := f.drain()
	for _, id := range []uint64{id1, id2} {
		if got := replies[id].(JoinGroupResponse).Err; got != CodeNotCoordinator {
			t.Fatalf("join %d: %s", id, got)
		}
	}
	if d, ok := f.c.NextDeadline(); ok {
		t.Fatalf("deadline left after unload: %v", d)
	}
}

// The initial delay extends with each new member, but never past the rebalance timeout.
func TestInitialRebalanceDelay(t *testing.T) {
	f := newFixture(t, Config{InitialRebalanceDelay: 3 * time.Second})
	for i := range 10 {
		_, r := f.join("g", "", "")
		f.do(r)
		f.now = t0.Add(time.Duration(i+1) * 2 * time.Second) // a member every 2 s
		f.c.Tick(f.now)
		f.drain()
	}
	// 10 members at 2 s intervals keep extending the 3 s delay; the cap is the 20 s
	// rebalance timeout from the first join.
	if d := f.describe("g"); d.State != CompletingRebalance || d.Generation != 1 || len(d.Members) != 10 {
		t.Fatalf("after 20 s: %+v", d)
	}
}

// A leader that heartbeats but never sends SyncGroup (stuck before assigning) is removed
// after the rebalance timeout.
func TestSyncTimeout(t *testing.T) {
	f := newFixture(t, Config{})
	jid, r := f.join("g", "", "")
	joined := f.do(r)[jid].(JoinGroupResponse)
	if d := f.describe("g"); d.State != CompletingRebalance {
		t.Fatalf("state %s", d.State)
	}
	for range 3 {
		f.now = f.now.Add(5 * time.Second)
		if code := f.heartbeat("g", joined.MemberID, joined.Generation); code != CodeNone {
			t.Fatalf("heartbeat: %s", code)
		}
		f.c.Tick(f.now)
		f.drain()
	}
	next, ok := f.c.NextDeadline()
	if !ok || next != t0.Add(20*time.Second) {
		t.Fatalf("next deadline %v %v, want the 20 s rebalance timeout", next.Sub(t0), ok)
	}
	f.now = next
	f.c.Tick(f.now)
	f.drain()
	if d := f.describe("g"); d.State != Empty || len(d.Members) != 0 {
		t.Fatalf("after sync timeout: %+v", d)
	}
}

// A failed append of the assignment fails the waiting syncs and restarts the rebalance.
func TestAssignmentAppendFails(t *testing.T) {
	f := newFixture(t, Config{})
	jid, r := f.join("g", "", "")
	member := f.do(r)[jid].(JoinGroupResponse)
	f.failNext = fmt.Errorf("disk: %w", engine.ErrLogFailed)
	sid := f.next()
	got := f.do(SyncGroup{ReqID: sid, Group: "g", MemberID: member.MemberID, Generation: member.Generation})
	if code := got[sid].(SyncGroupResponse).Err; code != CodeCoordinatorNotAvailable {
		t.Fatalf("sync after failed append: %s", code)
	}
	if d := f.describe("g"); d.State != PreparingRebalance {
		t.Fatalf("state %s", d.State)
	}
	if appendCode(fmt.Errorf("x: %w", engine.ErrBatchTooLarge)) != CodeInvalidCommitOffsetSize {
		t.Fatal("a too-large batch must be INVALID_COMMIT_OFFSET_SIZE")
	}
}

func TestCommitMetadataTooLargeAndFetch(t *testing.T) {
	f := newFixture(t, Config{OffsetMetadataBytesMax: 4})
	ids := f.stableGroup("g", 1)
	gen := f.describe("g").Generation
	id := f.next()
	resp := f.do(OffsetCommit{ReqID: id, Group: "g", MemberID: ids[0], Generation: gen, Offsets: []CommitOffset{
		{Topic: "t", Partition: 0, Offset: 5, Metadata: "ok"},
		{Topic: "t", Partition: 1, Offset: 6, Metadata: "too long"},
	}})[id].(OffsetCommitResponse)
	if resp.Partitions[0].Err != CodeNone || resp.Partitions[1].Err != CodeOffsetMetadataTooLarge {
		t.Fatalf("commit: %+v", resp)
	}
	fid := f.next()
	fetched := f.do(OffsetFetch{ReqID: fid, Group: "g", Partitions: []TopicPartition{{"t", 0}, {"t", 1}}})[fid].(OffsetFetchResponse)
	if fetched.Partitions[0].Offset != 5 || fetched.Partitions[0].Metadata != "ok" || fetched.Partitions[1].Offset != -1 {
		t.Fatalf("fetch: %+v", fetched)
	}
}

// Offsets of an Empty group expire a retention after it became empty; then the group goes.
func TestOffsetsRetention(t *testing.T) {
	f := newFixture(t, Config{OffsetsRetention: time.Hour})
	ids := f.stableGroup("g", 1)
	gen := f.describe("g").Generation
	f.do(OffsetCommit{ReqID: f.next(), Group: "g", MemberID: ids[0], Generation: gen, Offsets: []CommitOffset{{Topic: "t", Offset: 5}}})
	f.now = f.now.Add(2 * time.Hour) // the commit is old, but the group is not empty yet
	for _, id := range ids {
		f.heartbeat("g", id, gen)
	}
	f.c.Tick(f.now)
	f.drain()
	lid := f.next()
	f.do(LeaveGroup{ReqID: lid, Group: "g", Members: []LeavingMember{{MemberID: ids[0]}}})
	if d := f.describe("g"); d.State != Empty {
		t.Fatalf("state %s", d.State)
	}
	f.now = f.now.Add(59 * time.Minute)
	f.c.Tick(f.now)
	f.drain()
	if d := f.describe("g"); d.State != Empty {
		t.Fatalf("expired too early: %+v", d)
	}
	before := len(f.appends)
	f.now = f.now.Add(time.Minute)
	f.c.Tick(f.now)
	f.drain()
	if d := f.describe("g"); d.State != Dead {
		t.Fatalf("not expired: %+v", d)
	}
	last := f.appends[len(f.appends)-1]
	if len(f.appends) != before+1 || len(last.Records) != 2 || last.Records[0].Value != nil || last.Records[1].Value != nil {
		t.Fatalf("want one append of two tombstones, got %+v", f.appends[before:])
	}
}

// A static member's old id is fenced everywhere once a restarted instance replaced it.
func TestStaticMemberFencing(t *testing.T) {
	f := newFixture(t, Config{})
	jid, r := f.join("g", "", "i1")
	first := f.do(r)[jid].(JoinGroupResponse)
	f.do(SyncGroup{ReqID: f.next(), Group: "g", MemberID: first.MemberID, InstanceID: "i1", Generation: first.Generation})
	jid, r = f.join("g", "", "i1") // the restarted process
	second := f.do(r)[jid].(JoinGroupResponse)
	if second.Err != CodeNone || second.Generation != first.Generation || second.MemberID == first.MemberID {
		t.Fatalf("static rejoin: %+v (first %+v)", second, first)
	}
	id := f.next()
	code := f.do(Heartbeat{ReqID: id, Group: "g", MemberID: first.MemberID, InstanceID: "i1", Generation: first.Generation})[id].(HeartbeatResponse).Err
	if code != CodeFencedInstanceID {
		t.Fatalf("old id heartbeat: %s", code)
	}
	jid, r = f.join("g", first.MemberID, "i1")
	if code := f.do(r)[jid].(JoinGroupResponse).Err; code != CodeFencedInstanceID {
		t.Fatalf("old id join: %s", code)
	}
	lid := f.next()
	left := f.do(LeaveGroup{ReqID: lid, Group: "g", Members: []LeavingMember{{MemberID: first.MemberID, InstanceID: "i1"}}})[lid].(LeaveGroupResponse)
	if left.Members[0].Err != CodeFencedInstanceID {
		t.Fatalf("old id leave: %+v", left)
	}
	sid := f.next()
	sync := f.do(SyncGroup{ReqID: sid, Group: "g", MemberID: second.MemberID, InstanceID: "i1", Generation: second.Generation})[sid].(SyncGroupResponse)
	if sync.Err != CodeNone {
		t.Fatalf("new id sync: %+v", sync)
	}
}

// Random traffic from a handful of members: every request gets exactly one reply, the
// generation never goes down, and Stable groups have a leader among their members.
func TestRandomTrafficInvariants(t *testing.T) {
	rng := rand.New(rand.NewPCG(seed(t), 11))
	for iter := range 200 {
		f := newFixture(t, Config{OffsetsPartitions: 2, InitialRebalanceDelay: time.Duration(rng.IntN(2)) * time.Second})
		known := []string{""}
		pending := map[uint64]bool{}
		lastGen := map[string]int32{}
		for step := range 300 {
			group := []string{"a", "b"}[rng.IntN(2)]
			member := known[rng.IntN(len(known))]
			gen := int32(rng.IntN(6)) - 1
			id := f.next()
			var r Request
			switch rng.IntN(9) {
			case 0, 1:
				_, j := f.join(group, member, []string{"", "i1", "i2"}[rng.IntN(3)], []string{"range", "sticky"}[:1+rng.IntN(2)]...)
				j.ReqID, j.RequireKnownMemberID = id, rng.IntN(2) == 0
				r = j
			case 2, 3:
				r = SyncGroup{ReqID: id, Group: group, MemberID: member, Generation: gen,
					Assignments: []MemberAssignment{{MemberID: member, Assignment: []byte{1}}}}
			case 4:
				r = Heartbeat{ReqID: id, Group: group, MemberID: member, Generation: gen}
			case 5:
				r = OffsetCommit{ReqID: id, Group: group, MemberID: member, Generation: gen, Offsets: []CommitOffset{{Topic: "t", Offset: int64(step)}}}
			case 6:
				r = LeaveGroup{ReqID: id, Group: group, Members: []LeavingMember{{MemberID: member}}}
			case 7:
				r = DeleteGroups{ReqID: id, Groups: []string{group}}
			default:
				f.now = f.now.Add(time.Duration(rng.IntN(15)) * time.Second)
				f.c.Tick(f.now)
				r = OffsetFetch{ReqID: id, Group: group}
			}
			pending[id] = true
			if rng.IntN(10) == 0 {
				f.failNext = errors.New("injected")
			}
			for rid, resp := range f.do(r) {
				if !pending[rid] {
					t.Fatalf("iter %d step %d: reply to %d which is not pending (twice?)", iter, step, rid)
				}
				delete(pending, rid)
				if j, ok := resp.(JoinGroupResponse); ok && j.MemberID != "" && !slices.Contains(known, j.MemberID) {
					known = append(known, j.MemberID)
				}
			}
			f.c.checkInvariants()
			f.c.checkPendingInvariants()
			for _, g := range []string{"a", "b"} {
				d := f.describe(g)
				if d.State == Dead {
					lastGen[g] = 0
					continue
				}
				if d.Generation < lastGen[g] {
					t.Fatalf("iter %d step %d: group %s generation went from %d to %d", iter, step, g, lastGen[g], d.Generation)
				}
				lastGen[g] = d.Generation
				if d.State == Stable && (len(d.Members) == 0 || !slices.ContainsFunc(d.Members, func(m DescribedMember) bool { return m.MemberID == d.Leader })) {
					t.Fatalf("iter %d step %d: stable group %s without a leader among members: %+v", iter, step, g, d)
				}
			}
		}
		for p := range int32(2) {
			f.c.Unload(f.now, p)
		}
		for rid := range f.drain() {
			delete(pending, rid)
		}
		if len(pending) != 0 {
			t.Fatalf("iter %d: requests never answered: %v", iter, slices.Sorted(maps.Keys(pending)))
		}
	}
}

// TestFirstCommitSurvivesTickBeforeAppendDone: a commit that creates a group (no members)
// keeps it alive while its append is in flight; a Tick meanwhile (the broker's timer
// fires before the acks=all append completes) must not drop the group and lose the commit.
func TestFirstCommitSurvivesTickBeforeAppendDone(t *testing.T) {
	c := New(Config{OffsetsPartitions: 1})
	if err := c.Load(t0, 0, NewReplayer().Snapshot()); err != nil {
		t.Fatal(err)
	}
	c.Handle(t0, OffsetCommit{ReqID: 1, Group: "ops", Generation: -1, Offsets: []CommitOffset{{Topic: "orders", Partition: 1, Offset: 5, LeaderEpoch: -1}}})
	var appendID uint64
	for _, o := range c.Ready() {
		if a, ok := o.(Append); ok {
			appendID = a.ID
		}
	}
	if at, ok := c.NextDeadline(); ok {
		c.Tick(at)
	}
	c.Tick(t0.Add(time.Second))
	c.AppendDone(t0.Add(time.Second), appendID, nil)
	c.Ready()
	c.Handle(t0.Add(time.Second), OffsetFetch{ReqID: 2, Group: "ops"})
	for _, o := range c.Ready() {
		r, ok := o.(Reply)
		if !ok || r.ReqID != 2 {
			continue
		}
		fr := r.Response.(OffsetFetchResponse)
		if len(fr.Partitions) != 1 || fr.Partitions[0].Offset != 5 {
			t.Fatalf("offsets after a tick during the first commit: %+v", fr)
		}
		return
	}
	t.Fatal("no OffsetFetch reply")
}

func BenchmarkOffsetCommit(b *testing.B) {
	c := New(Config{OffsetsPartitions: 1})
	if err := c.Load(t0, 0, NewReplayer().Snapshot()); err != nil {
		b.Fatal(err)
	}
	offsets := []CommitOffset{{Topic: "orders", Partition: 3, Offset: 1, LeaderEpoch: -1}}
	b.ReportAllocs()
	var id uint64
	for b.Loop() {
		id++
		offsets[0].Offset = int64(id)
		c.Handle(t0, OffsetCommit{ReqID: id, Group: "g", Generation: -1, Offsets: offsets})
		for _, o := range c.Ready() {
			if a, ok := o.(Append); ok {
				c.AppendDone(t0, a.ID, nil)
			}
		}
		c.Ready()
	}
}

// BenchmarkTick measures one Tick and NextDeadline over many groups with nothing due: with
// the timer heap it does not grow with the number of groups (a scan did: 7.6 ms at 10 000).
func BenchmarkTick(b *testing.B) {
	for _, groups := range []int{100, 10_000} {
		b.Run(fmt.Sprintf("groups=%d", groups), func(b *testing.B) {
			c := New(Config{OffsetsPartitions: 1})
			if err := c.Load(t0, 0, NewReplayer().Snapshot()); err != nil {
				b.Fatal(err)
			}
			for i := range groups {
				g := fmt.Sprintf("g%d", i)
				for m := range 3 {
					c.Handle(t0, JoinGroup{ReqID: uint64(i*10 + m + 1), Group: g, ClientID: "c", SessionTimeout: time.Minute,
						RebalanceTimeout: time.Minute, ProtocolType: "consumer", Protocols: []Protocol{{Name: "range"}}})
				}
			}
			c.Ready()
			b.ReportAllocs()
			for b.Loop() {
				c.Tick(t0.Add(time.Second))
				c.NextDeadline()
			}
		})
	}
}

// TestLeaderSyncWhileOlderAssignmentAppends: the leader's assignment of generation 1 is
// still being appended (acks=all on a real broker takes an fdatasync) when a member joins
// and generation 2 forms; the leader's SyncGroup for generation 2 must be stored, not
// mistaken for the pending one (the group stayed in CompletingRebalance until the sync
// timeout).
func TestLeaderSyncWhileOlderAssignmentAppends(t *testing.T) {
	c := New(Config{OffsetsPartitions: 1})
	if err := c.Load(t0, 0, NewReplayer().Snapshot()); err != nil {
		t.Fatal(err)
	}
	var held []Append
	replies := map[uint64]Response{}
	take := func() {
		for _, o := range c.Ready() {
			switch o := o.(type) {
			case Reply:
				replies[o.ReqID] = o.Response
			case Append:
				held = append(held, o)
			}
		}
	}
	join := func(id uint64, member string) {
		c.Handle(t0, JoinGroup{ReqID: id, Group: "g", MemberID: member, SessionTimeout: 10 * time.Second, RebalanceTimeout: time.Minute,
			ProtocolType: "consumer", Protocols: []Protocol{{Name: "range"}}})
		take()
	}
	join(1, "")
	leader := replies[1].(JoinGroupResponse)
	c.Handle(t0, SyncGroup{ReqID: 2, Group: "g", MemberID: leader.MemberID, Generation: leader.Generation,
		Assignments: []MemberAssignment{{MemberID: leader.MemberID, Assignment: []byte{1}}}})
	take()
	if len(held) != 1 {
		t.Fatalf("generation 1 assignment: %d appends", len(held))
	}
	join(3, "")              // a second member: rebalance
	join(4, leader.MemberID) // the leader rejoins: generation 2 forms
	second, first := replies[3].(JoinGroupResponse), replies[4].(JoinGroupResponse)
	if first.Generation != 2 || first.Leader != leader.MemberID {
		t.Fatalf("rejoin: %+v", first)
	}
	c.Handle(t0, SyncGroup{ReqID: 5, Group: "g", MemberID: second.MemberID, Generation: 2})
	c.Handle(t0, SyncGroup{ReqID: 6, Group: "g", MemberID: leader.MemberID, Generation: 2,
		Assignments: []MemberAssignment{{MemberID: leader.MemberID, Assignment: []byte{1}}, {MemberID: second.MemberID, Assignment: []byte{2}}}})
	take()
	for len(held) > 0 { // complete every append, the old generation's first
		a := held[0]
		held = held[1:]
		c.AppendDone(t0, a.ID, nil)
		take()
	}
	if r, ok := replies[5].(SyncGroupResponse); !ok || r.Err != CodeNone || string(r.Assignment) != "\x02" {
		t.Fatalf("member's sync of generation 2: %+v (present %v)", replies[5], ok)
	}
	c.Handle(t0, DescribeGroups{ReqID: 7, Groups: []string{"g"}})
	take()
	if d := replies[7].(DescribeGroupsResponse).Groups[0]; d.State != Stable || d.Generation != 2 {
		t.Fatalf("group: %v generation %d, want Stable 2", d.State, d.Generation)
	}
}
