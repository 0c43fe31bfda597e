package assign

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"testing/quick"
	"time"
)

var seedFlag = flag.Uint64("seed", 0, "seed of the randomized assignor tests (0 = from the clock; the seed is printed)")

// seed returns the random seed of a test and prints it, so a failure can be replayed with
// go test ./engine/group/assign -run NAME -seed N.
func seed(t *testing.T) uint64 {
	s := *seedFlag
	if s == 0 {
		s = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (rerun with -seed %d)", s, s)
	return s
}

// randomGroup makes 1..membersMax members over 1..3 topics of 0..partitionsMax partitions.
// With same, every member subscribes to every topic.
func randomGroup(rng *rand.Rand, membersMax, partitionsMax int, same bool) ([]Member, map[string]int32) {
	topics := []string{"a", "b", "c"}[:1+rng.IntN(3)]
	partitions := map[string]int32{}
	for _, t := range topics {
		partitions[t] = int32(rng.IntN(partitionsMax + 1))
	}
	members := make([]Member, 1+rng.IntN(membersMax))
	for i := range members {
		members[i] = Member{ID: fmt.Sprintf("m%02d", rng.IntN(1000)*100+i), Generation: -1}
		if rng.IntN(3) == 0 {
			members[i].InstanceID = fmt.Sprintf("i%02d", i)
		}
		for _, t := range topics {
			if same || rng.IntN(2) == 0 {
				members[i].Topics = append(members[i].Topics, t)
			}
		}
	}
	return members, partitions
}

// checkExactlyOnce fails unless every partition of a subscribed topic is assigned to
// exactly one member that subscribes to its topic, and nothing else is assigned.
func checkExactlyOnce(t *testing.T, name string, members []Member, partitions map[string]int32, plan Plan) {
	t.Helper()
	if len(plan) != len(members) {
		t.Fatalf("%s: plan has %d members, want %d", name, len(plan), len(members))
	}
	seen := map[TopicPartition]string{}
	for i := range members {
		m := &members[i]
		for _, tp := range plan[m.ID] {
			if !subscribes(m, tp.Topic) {
				t.Fatalf("%s: %s got %v without subscribing to %s", name, m.ID, tp, tp.Topic)
			}
			if tp.Partition < 0 || tp.Partition >= partitions[tp.Topic] {
				t.Fatalf("%s: %s got nonexistent %v", name, m.ID, tp)
			}
			if prev, dup := seen[tp]; dup {
				t.Fatalf("%s: %v assigned to %s and %s", name, tp, prev, m.ID)
			}
			seen[tp] = m.ID
		}
	}
	for _, topic := range subscribedTopics(members, partitions) {
		for p := range partitions[topic] {
			if _, ok := seen[TopicPartition{topic, p}]; !ok {
				t.Fatalf("%s: %s/%d not assigned", name, topic, p)
			}
		}
	}
}

func spread(plan Plan, members []Member, topic string) (lo, hi int) {
	lo = int(^uint(0) >> 1)
	for i := range members {
		n := 0
		for _, tp := range plan[members[i].ID] {
			if topic == "" || tp.Topic == topic {
				n++
			}
		}
		lo, hi = min(lo, n), max(hi, n)
	}
	return lo, hi
}

func TestAssignorsExactlyOnceAndBalanced(t *testing.T) {
	rng := rand.New(rand.NewPCG(seed(t), 1))
	for iter := range 2000 {
		same := iter%2 == 0
		members, partitions := randomGroup(rng, 8, 20, same)
		for _, a := range []Assignor{RangeAssignor{}, RoundRobinAssignor{}, StickyAssignor{}} {
			plan := a.Assign(members, partitions)
			name := fmt.Sprintf("iter %d %s", iter, a.Name())
			checkExactlyOnce(t, name, members, partitions, plan)
			if !same {
				continue
			}
			switch a.Name() {
			case Range: // balanced per topic only
				for topic := range partitions {
					if lo, hi := spread(plan, members, topic); hi-lo > 1 {
						t.Fatalf("%s: topic %s spread %d..%d", name, topic, lo, hi)
					}
				}
			default:
				if lo, hi := spread(plan, members, ""); hi-lo > 1 {
					t.Fatalf("%s: spread %d..%d: %v", name, lo, hi, plan)
				}
			}
		}
	}
}

// With differing subscriptions the sticky assignor leaves no member able to take a
// partition from one holding two more.
func TestStickyHeterogeneousLocallyBalanced(t *testing.T) {
	rng := rand.New(rand.NewPCG(seed(t), 2))
	for iter := range 1000 {
		members, partitions := randomGroup(rng, 6, 12, false)
		withOwned(rng, members, partitions)
		plan := StickyAssignor{}.Assign(members, partitions)
		checkExactlyOnce(t, fmt.Sprint("iter ", iter), members, partitions, plan)
		for i := range members {
			for _, tp := range plan[members[i].ID] {
				for j := range members {
					if subscribes(&members[j], tp.Topic) && len(plan[members[j].ID])+1 < len(plan[members[i].ID]) {
						t.Fatalf("iter %d: %s (%d) could take %v from %s (%d)", iter, members[j].ID,
							len(plan[members[j].ID]), tp, members[i].ID, len(plan[members[i].ID]))
					}
				}
			}
		}
	}
}

// withOwned gives members a random, valid previous ownership (each partition at most one
// owner among subscribers, or none).
func withOwned(rng *rand.Rand, members []Member, partitions map[string]int32) {
	for topic, n := range partitions {
		for p := range n {
			i := rng.IntN(len(members) + 1)
			if i < len(members) && subscribes(&members[i], topic) {
				members[i].Owned = append(members[i].Owned, TopicPartition{topic, p})
			}
		}
	}
	for i := range members {
		members[i].Generation = 3
	}
}

// minimalMoves is the reference lower bound on movement for identical subscriptions: a
// balanced assignment gives n mod m members ceil(n/m) partitions and the rest floor(n/m);
// member i can keep at most min(owned_i, its quota), best when the ceil quotas go to the
// members owning most. Everything else a surviving member owned must move.
func minimalMoves(owned []int, total, members int) int {
	counts := slices.Clone(owned)
	slices.Sort(counts)
	slices.Reverse(counts)
	floor, ceilSlots := total/members, total%members
	moves := 0
	for i, c := range counts {
		quota := floor
		if i < ceilSlots {
			quota++
		}
		moves += max(0, c-quota)
	}
	return moves
}

// Sticky moves exactly the minimum when a member joins or leaves, starting from a balanced
// assignment or from an arbitrary one, and keeps every partition whose owner survives
// where balance allows.
func TestStickyMinimalMovement(t *testing.T) {
	rng := rand.New(rand.NewPCG(seed(t), 3))
	for iter := range 1000 {
		members, partitions := randomGroup(rng, 8, 24, true)
		previous := StickyAssignor{}.Assign(members, partitions)
		next := slices.Clone(members)
		join := rng.IntN(2) == 0 || len(next) == 1
		if join {
			next = append(next, Member{ID: "new", Topics: slices.Clone(members[0].Topics)})
		} else {
			drop := rng.IntN(len(next))
			next = slices.Delete(next, drop, drop+1)
		}
		var owned []int
		total := 0
		for _, n := range partitions {
			total += int(n)
		}
		for i := range next {
			next[i].Owned = previous[next[i].ID]
			next[i].Generation = 1
		}
		if iter%3 == 0 { // an arbitrary, unbalanced ownership instead of a balanced one
			for i := range next {
				next[i].Owned = nil
			}
			withOwned(rng, next, partitions)
		}
		for i := range next {
			owned = append(owned, len(next[i].Owned))
		}
		plan := StickyAssignor{}.Assign(next, partitions)
		checkExactlyOnce(t, fmt.Sprint("iter ", iter), next, partitions, plan)
		moved := 0
		for i := range next {
			for _, tp := range next[i].Owned {
				if !slices.Contains(plan[next[i].ID], tp) {
					moved++
				}
			}
		}
		if want := minimalMoves(owned, total, len(next)); moved != want {
			t.Fatalf("iter %d (join=%v): moved %d partitions, minimum is %d\nbefore %v\nafter %v",
				iter, join, moved, want, previous, plan)
		}
	}
}

// The cooperative plan never gives a partition to a member while another live member owns
// it, keeps every partition that stays, and after the owners revoke what they lost the
// follow-up round reaches the same exactly-once, balanced state as sticky would.
func TestCooperativeTwoRounds(t *testing.T) {
	rng := rand.New(rand.NewPCG(seed(t), 4))
	for iter := range 500 {
		members, partitions := randomGroup(rng, 8, 24, true)
		withOwned(rng, members, partitions)
		if rng.IntN(2) == 0 {
			members = append(members, Member{ID: "new", Topics: slices.Clone(members[0].Topics), Generation: -1})
		}
		first := CooperativeStickyAssignor{}.Assign(members, partitions)
		sticky := StickyAssignor{}.Assign(members, partitions)
		owner := validOwners(members, partitions)
		for i := range members {
			m := &members[i]
			for _, tp := range first[m.ID] {
				if prev, ok := owner[tp]; ok && prev != m.ID {
					t.Fatalf("iter %d: %v given to %s while %s owns it", iter, tp, m.ID, prev)
				}
			}
			for _, tp := range sticky[m.ID] {
				if owner[tp] == m.ID && !slices.Contains(first[m.ID], tp) {
					t.Fatalf("iter %d: %s loses %v that it keeps", iter, m.ID, tp)
				}
			}
		}
		// Round two: every member owns what round one gave it (revocations done).
		for i := range members {
			members[i].Owned = first[members[i].ID]
			members[i].Generation = 4
		}
		second := CooperativeStickyAssignor{}.Assign(members, partitions)
		checkExactlyOnce(t, fmt.Sprint("iter ", iter, " round 2"), members, partitions, second)
		if lo, hi := spread(second, members, ""); hi-lo > 1 {
			t.Fatalf("iter %d: round 2 spread %d..%d", iter, lo, hi)
		}
		for i := range members {
			for _, tp := range first[members[i].ID] {
				if !slices.Contains(second[members[i].ID], tp) {
					t.Fatalf("iter %d: round 2 took %v from %s", iter, tp, members[i].ID)
				}
			}
		}
	}
}

// Two members claiming one partition in the same generation both lose it; a member of an
// older generation keeps nothing.
func TestStickyOwnershipConflicts(t *testing.T) {
	partitions := map[string]int32{"t": 2}
	members := []Member{
		{ID: "a", Topics: []string{"t"}, Owned: []TopicPartition{{"t", 0}, {"t", 1}}, Generation: 5},
		{ID: "b", Topics: []string{"t"}, Owned: []TopicPartition{{"t", 1}}, Generation: 5},
		{ID: "c", Topics: []string{"t"}, Owned: []TopicPartition{{"t", 0}}, Generation: 4},
	}
	owner := validOwners(members, partitions)
	if len(owner) != 1 || owner[TopicPartition{"t", 0}] != "a" {
		t.Fatalf("owners %v, want only t/0 -> a", owner)
	}
}

// The reference range assignor: member i (in Kafka's order) owns partition p when p falls
// in [start(i), start(i+1)), with start(i) = i*floor(n/m) + min(i, n mod m).
func referenceRange(members []Member, topic string, n int32) map[int32]string {
	ordered := sortedMembers(members)
	var subs []*Member
	for _, m := range ordered {
		if subscribes(m, topic) {
			subs = append(subs, m)
		}
	}
	out := map[int32]string{}
	if len(subs) == 0 {
		return out
	}
	m := int32(len(subs))
	start := func(i int32) int32 { return i*(n/m) + min(i, n%m) }
	for p := range n {
		for i := range m {
			if p >= start(i) && p < start(i+1) {
				out[p] = subs[i].ID
			}
		}
	}
	return out
}

// quickGroup is a testing/quick input: member count, partition counts and subscription bits.
type quickGroup struct {
	Members    uint8
	Partitions [3]uint8
	Subs       [16]uint8
}

func (q quickGroup) build() ([]Member, map[string]int32) {
	topics := []string{"a", "b", "c"}
	partitions := map[string]int32{}
	for i, t := range topics {
		partitions[t] = int32(q.Partitions[i] % 40)
	}
	members := make([]Member, 1+int(q.Members)%16)
	for i := range members {
		members[i].ID = fmt.Sprintf("m%02d", (i*7)%16)
		for j, t := range topics {
			if q.Subs[i]&(1<<j) != 0 || j == 0 {
				members[i].Topics = append(members[i].Topics, t)
			}
		}
	}
	return members, partitions
}

func TestRangeMatchesReference(t *testing.T) {
	f := func(q quickGroup) bool {
		members, partitions := q.build()
		plan := RangeAssignor{}.Assign(members, partitions)
		for topic, n := range partitions {
			want := referenceRange(members, topic, n)
			got := map[int32]string{}
			for id, tps := range plan {
				for _, tp := range tps {
					if tp.Topic == topic {
						got[tp.Partition] = id
					}
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Logf("topic %s: got %v want %v", topic, got, want)
				return false
			}
		}
		return true
	}
	if err := quick.Check(f, &quick.Config{MaxCount: 2000}); err != nil {
		t.Fatal(err)
	}
}

// The reference round-robin for identical subscriptions: the k-th partition in (topic,
// partition) order goes to member k mod m.
func TestRoundRobinMatchesReference(t *testing.T) {
	f := func(q quickGroup) bool {
		members, partitions := q.build()
		for i := range members {
			members[i].Topics = []string{"a", "b", "c"}
		}
		plan := RoundRobinAssignor{}.Assign(members, partitions)
		ordered := sortedMembers(members)
		k := 0
		for _, topic := range []string{"a", "b", "c"} {
			for p := range partitions[topic] {
				id := ordered[k%len(ordered)].ID
				if !slices.Contains(plan[id], TopicPartition{topic, p}) {
					t.Logf("%s/%d not with %s: %v", topic, p, id, plan)
					return false
				}
				k++
			}
		}
		return true
	}
	if err := quick.Check(f, &quick.Config{MaxCount: 2000}); err != nil {
		t.Fatal(err)
	}
}

// Kafka's member order puts static members first, by instance id, so a restarted static
// member (new member id) keeps its range.
func TestRangeStaticMemberKeepsRange(t *testing.T) {
	partitions := map[string]int32{"t": 6}
	before := []Member{{ID: "z-1", InstanceID: "i1", Topics: []string{"t"}}, {ID: "a-1", InstanceID: "i2", Topics: []string{"t"}}}
	after := []Member{{ID: "a-9", InstanceID: "i1", Topics: []string{"t"}}, {ID: "a-1", InstanceID: "i2", Topics: []string{"t"}}}
	p1 := RangeAssignor{}.Assign(before, partitions)
	p2 := RangeAssignor{}.Assign(after, partitions)
	if !slices.Equal(p1["z-1"], p2["a-9"]) || !slices.Equal(p1["a-1"], p2["a-1"]) {
		t.Fatalf("static member moved: %v then %v", p1, p2)
	}
}

func TestByName(t *testing.T) {
	for _, name := range []string{Range, RoundRobin, Sticky, CooperativeSticky} {
		a, ok := ByName(name)
		if !ok || a.Name() != name {
			t.Fatalf("ByName(%q) = %v, %v", name, a, ok)
		}
	}
	if _, ok := ByName("nope"); ok {
		t.Fatal("ByName(nope) found an assignor")
	}
	if !Cooperative(CooperativeSticky) || Cooperative(Sticky) {
		t.Fatal("Cooperative")
	}
}

func BenchmarkStickyAssign(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 1))
	members := make([]Member, 100)
	partitions := map[string]int32{"a": 500, "b": 500}
	for i := range members {
		members[i] = Member{ID: fmt.Sprintf("m%03d", i), Topics: []string{"a", "b"}, Generation: 1}
	}
	withOwned(rng, members, partitions)
	b.ReportAllocs()
	for b.Loop() {
		StickyAssignor{}.Assign(members, partitions)
	}
}
