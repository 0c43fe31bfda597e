package controller

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net"
	"testing"

	"github.com/hashicorp/raft"
)

// FuzzApply feeds arbitrary raft log entries to the state machine after a small set-up:
// whatever the bytes, Apply must not panic (a panic would stop the voter) and the metadata
// must keep its invariants.
func FuzzApply(f *testing.F) {
	seeds := []Command{
		{Type: CmdRegisterBroker, Broker: &BrokerRegistration{ID: 4, Address: "127.0.0.1:1", Rack: "x"}},
		{Type: CmdHeartbeat, Broker: &BrokerRegistration{ID: 1, SessionEpoch: 1}},
		{Type: CmdExpireSessions, NowMs: 1 << 60},
		{Type: CmdCreateTopic, Topic: &TopicRequest{Name: "u", Partitions: 3, ReplicationFactor: 2}},
		{Type: CmdDeleteTopic, Topic: &TopicRequest{Name: "t"}},
		{Type: CmdSetUnclean, Topic: &TopicRequest{Name: "t", UncleanLeaderElection: true}},
		{Type: CmdAlterISR, AlterISR: &AlterISRRequest{Topic: "t", Leader: 1, ISR: []int32{1}}},
		{Type: CmdReassign, Reassign: &ReassignRequest{Topic: "t", Replicas: []int32{3, 2}}},
		{Type: CmdElectPreferred, Reassign: &ReassignRequest{Topic: "t"}},
		{Type: CmdCreateTopic, Version: CommandVersion, Topic: &TopicRequest{Name: "v", ID: "00112233445566778899aabbccddeeff", Partitions: 1, ReplicationFactor: 1}},
		{Type: CmdDeleteTopic, Version: CommandVersion, Topic: &TopicRequest{Name: "t", ID: LegacyTopicID("t")}},
		{Type: CmdAlterConfig, Version: CommandVersion, Topic: &TopicRequest{Name: "t", Config: map[string]string{ConfigUnclean: "true"}, ConfigDeletes: []string{"retention.ms"}}},
		{Type: CmdAllocateProducerIDs, ProducerIDs: &ProducerIDsRequest{BrokerID: 2, MinID: 1 << 40}},
		{Type: CmdAllocateProducerIDs},
		{Type: CmdInitProducerName, ProducerName: &ProducerNameRequest{Name: "w", Current: ProducerIdentity{ID: -1, Epoch: -1}}},
		{Type: CmdInitProducerName, ProducerName: &ProducerNameRequest{Name: "w", Current: ProducerIdentity{ID: 5, Epoch: 2}, KeepEpoch: true}},
		{Type: CmdInitProducerName, ProducerName: &ProducerNameRequest{}},
		{Type: CmdInitProducerName},
		{Type: CmdFinalizeVersion, Finalize: &FinalizeRequest{Version: 2}},
		{Type: CmdFinalizeVersion, Finalize: &FinalizeRequest{Version: 65535}},
		{Type: CmdFinalizeVersion},
		{Type: CmdRegisterBroker, Broker: &BrokerRegistration{ID: 5, Address: "e:1", ProtocolMin: 2, ProtocolMax: 2}},
		{Type: CmdHeartbeat},
		{Type: CmdAlterISR},
		{Type: 200},
	}
	for _, c := range seeds {
		data, _ := json.Marshal(c)
		f.Add(data)
	}
	f.Add([]byte(`{"Type":8,"Reassign":{"Topic":"t","Partition":-1}}`))
	f.Add([]byte(`{"Type":4,"Topic":{"Name":"big","Partitions":2147483647,"ReplicationFactor":3}}`))
	f.Add([]byte("{"))
	f.Fuzz(func(t *testing.T, data []byte) {
		fsm := NewFSM(testSessionMs)
		for i, c := range []Command{
			{Type: CmdRegisterBroker, Broker: &BrokerRegistration{ID: 1, Address: "a:1"}},
			{Type: CmdRegisterBroker, Broker: &BrokerRegistration{ID: 2, Address: "b:1"}},
			{Type: CmdRegisterBroker, Broker: &BrokerRegistration{ID: 3, Address: "c:1"}},
			{Type: CmdCreateTopic, Topic: &TopicRequest{Name: "t", Partitions: 2, ReplicationFactor: 3}},
			{Type: CmdCreateTopic, Version: CommandVersion, Topic: &TopicRequest{Name: "w", ID: "ffeeddccbbaa99887766554433221100", Partitions: 1, ReplicationFactor: 2}},
			{Type: CmdDeleteTopic, Version: CommandVersion, Topic: &TopicRequest{Name: "w"}},
		} {
			fsm.ApplyCommand(uint64(i+1), &c)
		}
		fsm.Apply(&raft.Log{Index: 7, Type: raft.LogCommand, Data: data})
		checkInvariants(t, fsm.Metadata())
		// What applied also survives a snapshot.
		if !equalMetadata(fsm.Metadata(), snapshotRoundTrip(t, fsm).Metadata()) {
			t.Fatal("snapshot round trip changed the metadata")
		}
	})
}

// FuzzRestore: a corrupt snapshot is an error, never a panic.
func FuzzRestore(f *testing.F) {
	f.Add([]byte(`{"Version":3,"SessionTimeoutMs":5,"Brokers":{"1":{"ID":1}},"Topics":{}}`))
	f.Add([]byte(`{"Topics":{"t":null}}`))
	f.Add([]byte(`null`))
	f.Add([]byte(`{"Version":3,"Brokers":{},"Topics":{},"NextProducerID":-5}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		fsm := NewFSM(0)
		_ = fsm.Restore(io.NopCloser(bytes.NewReader(data)))
		_ = fsm.Metadata()
	})
}

func checkInvariants(t *testing.T, m *Metadata) {
	t.Helper()
	if err := m.validate(); err != nil {
		t.Fatalf("metadata breaks its invariants: %v", err)
	}
	for name, topic := range m.Topics {
		for i, p := range topic.Partitions {
			if p.Leader != NoLeader && !containsID(p.ISR, p.Leader) {
				t.Fatalf("%s/%d: leader %d not in ISR %v", name, i, p.Leader, p.ISR)
			}
			if len(p.ISR) == 0 {
				t.Fatalf("%s/%d: empty ISR", name, i)
			}
			for _, id := range p.ISR {
				if !containsID(p.Replicas, id) {
					t.Fatalf("%s/%d: ISR member %d not a replica %v", name, i, id, p.Replicas)
				}
			}
		}
	}
}

func containsID(ids []int32, id int32) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

// snapshotRoundTrip snapshots fsm and restores the snapshot into a new FSM.
func snapshotRoundTrip(t *testing.T, fsm *FSM) *FSM {
	t.Helper()
	snap, err := fsm.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var sink sinkBuffer
	if err := snap.Persist(&sink); err != nil {
		t.Fatal(err)
	}
	restored := NewFSM(0)
	if err := restored.Restore(io.NopCloser(bytes.NewReader(sink.Bytes()))); err != nil {
		t.Fatal(err)
	}
	return restored
}

// FuzzParseVoters: --controller-voters parses to 1, 3 or 5 voters with distinct positive
// ids and distinct addresses that raft can dial, or to ErrBadVoters.
func FuzzParseVoters(f *testing.F) {
	for _, s := range []string{"1@a:1", "1@a:1,2@b:2,3@c:3", "1@a:1,1@b:2,3@c:3", "1@[::1]:9093", "0@a:1", "1@:1", "1@a:0", "1@a:65536", " 1@a:1 , ", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		voters, err := ParseVoters(s)
		if err != nil {
			if !errors.Is(err, ErrBadVoters) {
				t.Fatalf("error not ErrBadVoters: %v", err)
			}
			return
		}
		if !votersAllowed[len(voters)] {
			t.Fatalf("%q: %d voters", s, len(voters))
		}
		ids, addrs := map[int32]bool{}, map[string]bool{}
		for _, v := range voters {
			host, _, err := net.SplitHostPort(v.Addr)
			if v.ID < 1 || ids[v.ID] || addrs[v.Addr] || err != nil || host == "" {
				t.Fatalf("%q: voter %+v", s, v)
			}
			ids[v.ID], addrs[v.Addr] = true, true
		}
	})
}
