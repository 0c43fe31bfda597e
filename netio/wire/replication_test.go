package wire

import "testing"

func FuzzReplicaFetchRequest(f *testing.F) {
	fuzzMessage(f, func() Message { return new(ReplicaFetchRequest) }, sampleRequests())
}
func FuzzReplicaFetchResponse(f *testing.F) {
	fuzzMessage(f, func() Message { return new(ReplicaFetchResponse) }, sampleResponses())
}
func FuzzOffsetsForLeaderEpochRequest(f *testing.F) {
	fuzzMessage(f, func() Message { return new(OffsetsForLeaderEpochRequest) }, sampleRequests())
}
func FuzzOffsetsForLeaderEpochResponse(f *testing.F) {
	fuzzMessage(f, func() Message { return new(OffsetsForLeaderEpochResponse) }, sampleResponses())
}
func FuzzControllerRequest(f *testing.F) {
	fuzzMessage(f, func() Message { return new(ControllerRequest) }, sampleRequests())
}
func FuzzControllerResponse(f *testing.F) {
	fuzzMessage(f, func() Message { return new(ControllerResponse) }, sampleResponses())
}

// Version 1 of ReplicaFetch and Controller: the trailing inter-broker protocol version.
func FuzzReplicaFetchRequestV1(f *testing.F) {
	fuzzMessage(f, func() Message {
		m := &ReplicaFetchRequest{ProtocolVersion: 2}
		m.SetWireVersion(1)
		return m
	}, sampleRequests())
}
func FuzzControllerRequestV1(f *testing.F) {
	fuzzMessage(f, func() Message {
		m := &ControllerRequest{ProtocolVersion: 2}
		m.SetWireVersion(1)
		return m
	}, sampleRequests())
}

// TestProtocolVersionTrailing: version 1 is version 0 with the protocol version appended,
// so a version 0 decoder of the same bytes sees trailing data (an error, not a misread),
// and version 1 refuses a protocol version of 0.
func TestProtocolVersionTrailing(t *testing.T) {
	for _, m := range []Message{
		&ReplicaFetchRequest{ReplicaID: 2, ProtocolVersion: 2, Topics: []ReplicaFetchTopic{{Topic: "t", Partitions: []ReplicaFetchPartition{{Partition: 1}}}}},
		&ControllerRequest{Op: ControllerSubmit, Body: []byte("{}"), ProtocolVersion: 2},
	} {
		if WireVersionOf(m) != 1 {
			t.Fatalf("%s: wire version %d, want 1", m.API(), WireVersionOf(m))
		}
		enc := m.AppendTo(nil)
		v0 := NewRequest(m.API())
		if err := v0.ReadFrom(enc); err == nil {
			t.Fatalf("%s: version 0 decoder accepted a version 1 body", m.API())
		}
		v1 := NewRequest(m.API())
		SetWireVersion(v1, 1)
		if err := v1.ReadFrom(enc); err != nil {
			t.Fatalf("%s: %v", m.API(), err)
		}
		if WireVersionOf(v1) != 1 {
			t.Fatalf("%s decoded at wire version %d", m.API(), WireVersionOf(v1))
		}
		zero := append(enc[:len(enc)-2:len(enc)-2], 0, 0)
		bad := NewRequest(m.API())
		SetWireVersion(bad, 1)
		if err := bad.ReadFrom(zero); err == nil {
			t.Fatalf("%s: version 1 with protocol version 0 accepted", m.API())
		}
	}
}
