package netio

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/ringlog/ringlog/netio/wire"
)

// entriesOf counts the entries of a decoded request the way countEntries counts them on
// the raw payload.
func entriesOf(m wire.Message) int {
	n := 0
	switch r := m.(type) {
	case *wire.ProduceRequest:
		n += len(r.Topics)
		for _, t := range r.Topics {
			n += len(t.Partitions)
		}
	case *wire.FetchRequest:
		n += len(r.Topics)
		for _, t := range r.Topics {
			n += len(t.Partitions)
		}
	case *wire.ListOffsetsRequest:
		n += len(r.Topics)
		for _, t := range r.Topics {
			n += len(t.Partitions)
		}
	case *wire.MetadataRequest:
		n = len(r.Topics)
	case *wire.DescribeTopicsRequest:
		n = len(r.Topics)
	case *wire.DeleteTopicsRequest:
		n = len(r.Topics)
	case *wire.CreateTopicsRequest:
		n += len(r.Topics)
		for _, t := range r.Topics {
			n += len(t.Configs)
		}
	case *wire.DescribeConfigsRequest:
		n += len(r.Topics)
		for _, t := range r.Topics {
			n += len(t.Keys)
		}
	case *wire.AlterConfigsRequest:
		n += len(r.Topics)
		for _, t := range r.Topics {
			n += len(t.Configs)
		}
	case *wire.JoinGroupRequest:
		n = len(r.Protocols)
	case *wire.SyncGroupRequest:
		n = len(r.Assignments)
	case *wire.LeaveGroupRequest:
		n = len(r.Members)
	case *wire.OffsetCommitRequest:
		n += len(r.Topics)
		for _, t := range r.Topics {
			n += len(t.Partitions)
		}
	case *wire.OffsetFetchRequest:
		n += len(r.Topics)
		for _, t := range r.Topics {
			n += len(t.Partitions)
		}
	case *wire.ListGroupsRequest:
		n = len(r.States)
	case *wire.DescribeGroupsRequest:
		n = len(r.Groups)
	case *wire.DeleteGroupsRequest:
		n = len(r.Groups)
	case *wire.ReplicaFetchRequest:
		n += len(r.Topics)
		for _, t := range r.Topics {
			n += len(t.Partitions)
		}
	case *wire.OffsetsForLeaderEpochRequest:
		n += len(r.Topics)
		for _, t := range r.Topics {
			n += len(t.Partitions)
		}
	case *wire.DescribeUsersRequest:
		n = len(r.Users)
	case *wire.AlterUsersRequest:
		n = len(r.Upsertions) + len(r.Deletions)
	case *wire.CreateAclsRequest:
		n = len(r.ACLs)
	case *wire.DeleteAclsRequest:
		n = len(r.Filters)
	}
	return n
}

func entrySamples() []wire.Message {
	return []wire.Message{
		&wire.ProduceRequest{Acks: 1, Topics: []wire.ProduceTopic{{Topic: "a", Partitions: []wire.ProducePartition{{Partition: 0, Records: []byte("xyz")}, {Partition: 1}}}, {Topic: "b"}}},
		&wire.FetchRequest{MaxBytes: 5, Topics: []wire.FetchTopic{{Topic: "a", Partitions: []wire.FetchPartition{{Partition: 0}, {Partition: 1}, {Partition: 2}}}}},
		&wire.ListOffsetsRequest{Topics: []wire.ListOffsetsTopic{{Topic: "a", Partitions: []wire.ListOffsetsPartition{{Partition: 3}}}}},
		&wire.MetadataRequest{Topics: []string{"a", "", "ccc"}},
		&wire.MetadataRequest{},
		&wire.DescribeTopicsRequest{Topics: []string{"x"}},
		&wire.DeleteTopicsRequest{TimeoutMs: 5, Topics: []string{"x", "y"}},
		&wire.CreateTopicsRequest{Topics: []wire.CreateTopic{{Topic: "n", Partitions: 3, Configs: []wire.ConfigEntry{{Key: "k", Value: "v"}}}, {Topic: "m"}}},
		&wire.DescribeConfigsRequest{Topics: []wire.DescribeConfigsTopic{{Topic: "t", Keys: []string{"a", "b"}}, {Topic: "u"}}},
		&wire.AlterConfigsRequest{Topics: []wire.AlterConfigsTopic{{Topic: "t", Configs: []wire.AlterConfig{{Key: "k", Value: "v"}}}}},
		&wire.APIVersionsRequest{ClientID: "c"},
		&wire.JoinGroupRequest{Group: "g", ClientID: "c", Protocols: []wire.GroupProtocol{{Name: "range"}, {Name: "sticky", Metadata: []byte{1}}}},
		&wire.SyncGroupRequest{Group: "g", Assignments: []wire.SyncGroupAssignment{{MemberID: "m"}}},
		&wire.LeaveGroupRequest{Group: "g", Members: []wire.GroupMemberRef{{MemberID: "a"}, {InstanceID: "b"}}},
		&wire.OffsetCommitRequest{Group: "g", Topics: []wire.OffsetCommitTopic{{Topic: "t", Partitions: []wire.OffsetCommitPartition{{Partition: 1, Metadata: "x"}, {Partition: 2}}}}},
		&wire.OffsetFetchRequest{Group: "g", Topics: []wire.OffsetFetchTopic{{Topic: "t", Partitions: []int32{0, 1}}, {Topic: "u"}}},
		&wire.OffsetFetchRequest{Group: "g"},
		&wire.ListGroupsRequest{States: []string{"Stable"}},
		&wire.DescribeGroupsRequest{Groups: []string{"a", "b"}},
		&wire.DeleteGroupsRequest{Groups: []string{"a"}},
		&wire.ReplicaFetchRequest{ReplicaID: 2, Topics: []wire.ReplicaFetchTopic{{Topic: "a", Partitions: []wire.ReplicaFetchPartition{{Partition: 0}, {Partition: 1}}}}},
		&wire.OffsetsForLeaderEpochRequest{Topics: []wire.OffsetsForLeaderEpochTopic{{Topic: "a", Partitions: []wire.OffsetsForLeaderEpochPartition{{Partition: 2}}}, {Topic: "b"}}},
		&wire.ControllerRequest{Body: []byte("{}")},
		&wire.DescribeUsersRequest{Users: []string{"a", "b"}},
		&wire.AlterUsersRequest{Upsertions: []wire.UserUpsertion{{User: "a", Salt: []byte("s")}}, Deletions: []wire.UserDeletion{{User: "b"}, {User: "c"}}},
		&wire.CreateAclsRequest{ACLs: []wire.ACLBinding{{Principal: "User:a"}, {ResourceName: "t"}}},
		&wire.DeleteAclsRequest{Filters: []wire.ACLBinding{{}}},
		&wire.SaslAuthenticateRequest{AuthBytes: []byte("n,,n=a,r=b")},
	}
}

// payloadOf encodes m and returns its API and payload (the frame without its header).
func payloadOf(m wire.Message) (wire.APIKey, []byte) {
	frame := wire.AppendRequest(nil, 1, m)
	return m.API(), frame[wire.RequestHeaderBytes:]
}

func TestCountEntriesMatchesDecoder(t *testing.T) {
	for _, m := range entrySamples() {
		api, payload := payloadOf(m)
		t.Run(fmt.Sprintf("%s", api), func(t *testing.T) {
			if got, want := countEntries(api, payload, 1<<30), entriesOf(m); got != want {
				t.Errorf("countEntries = %d, decoded request has %d", got, want)
			}
			if want := entriesOf(m); want > 0 {
				if got := countEntries(api, payload, want-1); got <= want-1 {
					t.Errorf("with limit %d: count %d does not pass the limit", want-1, got)
				}
			}
		})
	}
}

// FuzzCountEntries: the payload scanner never panics, and on every payload the decoder
// accepts it counts exactly the decoded entries.
func FuzzCountEntries(f *testing.F) {
	for _, m := range entrySamples() {
		api, payload := payloadOf(m)
		f.Add(uint16(api), payload)
	}
	f.Add(uint16(wire.APIMetadata), []byte{0x7f, 0xff, 0xff, 0xff})
	f.Add(uint16(wire.APIFetch), []byte{})
	f.Fuzz(func(t *testing.T, api uint16, payload []byte) {
		key := wire.APIKey(api % uint16(wire.APIKeyCount+2)) // and two unknown keys
		got := countEntries(key, payload, 1<<30)
		if got < 0 {
			t.Fatalf("negative count %d", got)
		}
		m := wire.NewRequest(key)
		if m == nil || m.ReadFrom(payload) != nil {
			return
		}
		if want := entriesOf(m); got != want {
			t.Fatalf("%s: countEntries %d, decoded %d", key, got, want)
		}
	})
}

func TestCheckEntries(t *testing.T) {
	many := func(n int, dupAt int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprintf("t%d", i)
		}
		if dupAt > 0 {
			out[dupAt] = out[0]
		}
		return out
	}
	for _, tc := range []struct {
		name string
		m    wire.Message
		want string // "" = accepted
	}{
		{"one fetch partition", &wire.FetchRequest{Topics: []wire.FetchTopic{{Topic: "a", Partitions: []wire.FetchPartition{{}}}}}, ""},
		{"fetch partition twice", &wire.FetchRequest{Topics: []wire.FetchTopic{{Topic: "a", Partitions: []wire.FetchPartition{{}, {}}}}}, "partition a/0 named twice"},
		{"fetch topic split in two", &wire.FetchRequest{Topics: []wire.FetchTopic{{Topic: "a", Partitions: []wire.FetchPartition{{Partition: 1}}}, {Topic: "a", Partitions: []wire.FetchPartition{{Partition: 1}}}}}, "partition a/1 named twice"},
		{"same partition of two topics", &wire.ProduceRequest{Topics: []wire.ProduceTopic{{Topic: "a", Partitions: []wire.ProducePartition{{}}}, {Topic: "b", Partitions: []wire.ProducePartition{{}}}}}, ""},
		{"produce partition twice", &wire.ProduceRequest{Topics: []wire.ProduceTopic{{Topic: "a", Partitions: []wire.ProducePartition{{Partition: 2}, {Partition: 2}}}}}, "partition a/2 named twice"},
		{"list offsets twice", &wire.ListOffsetsRequest{Topics: []wire.ListOffsetsTopic{{Topic: "a", Partitions: []wire.ListOffsetsPartition{{}, {}}}}}, "named twice"},
		{"metadata names distinct (map path)", &wire.MetadataRequest{Topics: many(100, 0)}, ""},
		{"metadata name twice (map path)", &wire.MetadataRequest{Topics: many(100, 77)}, `topic "t0" named twice`},
		{"metadata all topics", &wire.MetadataRequest{}, ""},
		{"delete twice", &wire.DeleteTopicsRequest{Topics: []string{"x", "x"}}, "named twice"},
		{"describe twice", &wire.DescribeTopicsRequest{Topics: []string{"x", "x"}}, "named twice"},
		{"create twice", &wire.CreateTopicsRequest{Topics: []wire.CreateTopic{{Topic: "n"}, {Topic: "n"}}}, "named twice"},
		{"describe configs twice", &wire.DescribeConfigsRequest{Topics: []wire.DescribeConfigsTopic{{Topic: "n"}, {Topic: "n"}}}, "named twice"},
		{"alter configs twice", &wire.AlterConfigsRequest{Topics: []wire.AlterConfigsTopic{{Topic: "n"}, {Topic: "n"}}}, "named twice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkEntries(tc.m)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestBudget(t *testing.T) {
	b := newBudget(100)
	if !b.tryAcquire(60) || b.tryAcquire(50) || !b.tryAcquire(40) {
		t.Fatal("tryAcquire does not fill to the maximum exactly")
	}
	got := make(chan bool)
	go func() { got <- b.acquire(30, nil) }()
	b.release(40) // 60 held: 30 fits, the waiter must wake
	if !<-got {
		t.Fatal("acquire after release failed")
	}
	b.release(90)
	if !b.tryAcquire(500) {
		t.Fatal("a charge larger than the maximum is refused when nothing is held")
	}
	b.force(10)
	if b.usedNow() != 510 {
		t.Fatalf("used %d, want 510", b.usedNow())
	}
	stop := make(chan struct{})
	go func() { got <- b.acquire(1, stop) }()
	close(stop)
	if <-got {
		t.Fatal("acquire succeeded after stop")
	}
	go func() { got <- b.acquire(1, nil) }()
	b.abort()
	if <-got {
		t.Fatal("acquire succeeded after abort")
	}
}

// Many goroutines hammering one budget never exceed it (the race detector checks the rest).
func TestBudgetConcurrent(t *testing.T) {
	b := newBudget(1000)
	var wg sync.WaitGroup
	var over sync.Once
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 2000 {
				if !b.acquire(100, nil) {
					t.Error("acquire failed")
					return
				}
				if b.usedNow() > 1000 {
					over.Do(func() { t.Errorf("budget holds %d of 1000", b.usedNow()) })
				}
				b.release(100)
			}
		}()
	}
	wg.Wait()
	if b.usedNow() != 0 {
		t.Fatalf("%d bytes left held", b.usedNow())
	}
}

func TestAddressTable(t *testing.T) {
	cfg := Config{ConnectionsMax: 8, ConnectionsPerAddressMax: 2}
	cfg.setDefaults()
	var tab addressTable
	a1, a2 := tab.admit("10.0.0.1", &cfg), tab.admit("10.0.0.1", &cfg)
	if a1 == nil || a1 != a2 {
		t.Fatal("two connections from one address do not share its entry")
	}
	if tab.admit("10.0.0.1", &cfg) != nil {
		t.Fatal("third connection from one address admitted, limit 2")
	}
	if tab.admit("10.0.0.2", &cfg) == nil {
		t.Fatal("another address refused")
	}
	tab.leave(a1)
	if tab.admit("10.0.0.1", &cfg) == nil {
		t.Fatal("a connection that left did not free its slot")
	}
	if remoteIP("127.0.0.2:4567") != "127.0.0.2" || remoteIP("[::1]:80") != "::1" {
		t.Fatal("remoteIP keeps the port")
	}
}

func TestCharges(t *testing.T) {
	addr := NewCounter(3)
	c1 := &Charges{conn: NewCounter(2), addr: addr}
	c2 := &Charges{conn: NewCounter(2), addr: addr}
	if !c1.TryTake(2) || c1.TryTake(1) {
		t.Fatal("connection counter not enforced")
	}
	if !c2.TryTake(1) || c2.TryTake(1) {
		t.Fatal("address counter not enforced across connections")
	}
	if c2.conn.Load() != 1 {
		t.Fatalf("a refused take left %d units on the connection", c2.conn.Load())
	}
	c1.Give(2)
	if !c2.TryTake(1) {
		t.Fatal("units given back are not available")
	}
}

func TestCheckEntriesSmallRequestsDoNotAllocate(t *testing.T) {
	produce := &wire.ProduceRequest{Topics: []wire.ProduceTopic{{Topic: "a", Partitions: []wire.ProducePartition{{Partition: 0}, {Partition: 1}}}}}
	fetch := &wire.FetchRequest{Topics: []wire.FetchTopic{{Topic: "a", Partitions: []wire.FetchPartition{{Partition: 0}, {Partition: 1}}}}}
	meta := &wire.MetadataRequest{Topics: []string{"a", "b"}}
	if n := testing.AllocsPerRun(100, func() {
		_ = checkEntries(produce)
		_ = checkEntries(fetch)
		_ = checkEntries(meta)
	}); n != 0 {
		t.Fatalf("checkEntries allocates %v times on small requests", n)
	}
}

func TestCountEntriesDoesNotAllocate(t *testing.T) {
	var payloads [][]byte
	var apis []wire.APIKey
	for _, m := range entrySamples() {
		api, p := payloadOf(m)
		apis, payloads = append(apis, api), append(payloads, p)
	}
	if n := testing.AllocsPerRun(100, func() {
		for i := range payloads {
			countEntries(apis[i], payloads[i], 1000)
		}
	}); n != 0 {
		t.Fatalf("countEntries allocates %v times", n)
	}
}
