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
