package controller

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

func (h *fsmHarness) registerRange(id int32, lo, hi uint16) error {
	h.t.Helper()
	return h.apply(Command{Type: CmdRegisterBroker, Broker: &BrokerRegistration{ID: id, Address: "127.0.0.1:1", ProtocolMin: lo, ProtocolMax: hi}}).Err
}

func (h *fsmHarness) finalize(v uint16) error {
	h.t.Helper()
	return h.apply(Command{Type: CmdFinalizeVersion, Finalize: &FinalizeRequest{Version: v}}).Err
}

// TestProtocolVersions: a new cluster finalizes its first broker's newest version; a
// broker whose range excludes the finalized version is refused and stays out of the
// metadata (no leadership, no ISR); FinalizeVersion needs every live broker to support
// the version and never goes down; the state survives a snapshot.
func TestProtocolVersions(t *testing.T) {
	h := newFSMHarness(t)
	if err := h.registerRange(1, 1, 2); err != nil {
		t.Fatal(err)
	}
	if f := h.fsm.Metadata().Finalized(); f != 2 {
		t.Fatalf("new cluster finalized at %d, want its first broker's newest, 2", f)
	}
	if err := h.registerRange(2, 1, 2); err != nil {
		t.Fatal(err)
	}
	err := h.registerRange(3, 1, 1)
	if !errors.Is(err, ErrUnsupportedProtocolVersion) {
		t.Fatalf("a [1,1] broker in a cluster finalized at 2: %v", err)
	}
	if checkErr := h.fsm.Metadata().CheckRegistration(&BrokerRegistration{ID: 3, ProtocolMax: 1, ProtocolMin: 1}); !errors.Is(checkErr, ErrUnsupportedProtocolVersion) {
		t.Fatalf("CheckRegistration: %v", checkErr)
	}
	t.Logf("refusal: %v", err)
	if _, ok := h.fsm.Metadata().Brokers[3]; ok {
		t.Fatal("the refused broker is in the metadata")
	}
	if err := h.registerRange(4, 2, 1); !errors.Is(err, ErrUnsupportedProtocolVersion) {
		t.Fatalf("an empty range: %v", err)
	}
	h.must(Command{Type: CmdCreateTopic, Topic: &TopicRequest{Name: "t", Partitions: 2, ReplicationFactor: 2}})
	for _, p := range h.fsm.Metadata().Topics["t"].Partitions {
		for _, id := range p.Replicas {
			if id == 3 {
				t.Fatalf("refused broker 3 placed: %+v", p)
			}
		}
	}
	if err := h.finalize(1); !errors.Is(err, ErrInvalidFinalizedVersion) {
		t.Fatalf("downgrade: %v", err)
	}
	if err := h.finalize(3); !errors.Is(err, ErrUnsupportedProtocolVersion) {
		t.Fatalf("finalize above every broker's range: %v", err)
	}
	if err := h.finalize(2); err != nil {
		t.Fatalf("finalize the current version again: %v", err)
	}
	restored := snapshotRoundTrip(t, h.fsm).Metadata()
	if restored.FinalizedVersion != 2 {
		t.Fatalf("restored finalized version %d", restored.FinalizedVersion)
	}
	if lo, hi := restored.Brokers[1].ProtocolRange(); lo != 1 || hi != 2 {
		t.Fatalf("restored range of broker 1: %d-%d", lo, hi)
	}
}

// TestProtocolVersionUpgrade: a cluster of brokers from before versions (registrations
// without a range) is finalized at 1; upgraded brokers register [1,2]; the finalize to 2
// is refused while a live broker still speaks only 1, accepted once every live broker
// speaks 2 (a fenced one does not count), and the old build is refused from then on.
func TestProtocolVersionUpgrade(t *testing.T) {
	h := newFSMHarness(t)
	for id := int32(1); id <= 3; id++ {
		h.register(id, "") // the previous release: no range
	}
	if f := h.fsm.Metadata().Finalized(); f != 1 {
		t.Fatalf("legacy cluster finalized at %d", f)
	}
	for id := int32(1); id <= 2; id++ { // rolled
		if err := h.registerRange(id, 1, 2); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.finalize(2); !errors.Is(err, ErrUnsupportedProtocolVersion) {
		t.Fatalf("finalize with broker 3 on the old build: %v", err)
	}
	h.nowMs += 2 * testSessionMs // broker 3 down: its session expires
	h.heartbeatAll(3)
	h.must(Command{Type: CmdExpireSessions})
	if !h.fsm.Metadata().Brokers[3].Fenced {
		t.Fatal("broker 3 not fenced")
	}
	if err := h.finalize(2); err != nil {
		t.Fatalf("finalize with every live broker on [1,2]: %v", err)
	}
	if err := h.registerRange(3, 0, 0); !errors.Is(err, ErrUnsupportedProtocolVersion) {
		t.Fatalf("broker 3 back on the old build: %v", err)
	}
	if err := h.registerRange(3, 1, 2); err != nil {
		t.Fatalf("broker 3 back on the new build: %v", err)
	}
}

// TestProtocolVersionOldSnapshot: a snapshot from before versions restores finalized at 1.
func TestProtocolVersionOldSnapshot(t *testing.T) {
	old := []byte(`{"Version":3,"SessionTimeoutMs":10000,"Brokers":{"1":{"ID":1,"Address":"a:1","SessionEpoch":1}},"Topics":{}}`)
	fsm := NewFSM(0)
	if err := fsm.Restore(io.NopCloser(bytes.NewReader(old))); err != nil {
		t.Fatal(err)
	}
	md := fsm.Metadata()
	if md.Finalized() != 1 {
		t.Fatalf("finalized %d", md.Finalized())
	}
	if lo, hi := md.Brokers[1].ProtocolRange(); lo != 1 || hi != 1 {
		t.Fatalf("old broker's range %d-%d", lo, hi)
	}
}
