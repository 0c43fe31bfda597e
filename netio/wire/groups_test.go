package wire

import "testing"

// Fuzz targets of the group APIs (seeds from sampleRequests and sampleResponses, committed
// under testdata/fuzz by TestWriteFuzzSeeds).

func FuzzFindCoordinatorRequest(f *testing.F) {
	fuzzMessage(f, func() Message { return new(FindCoordinatorRequest) }, sampleRequests())
}
func FuzzFindCoordinatorResponse(f *testing.F) {
	fuzzMessage(f, func() Message { return new(FindCoordinatorResponse) }, sampleResponses())
}
func FuzzJoinGroupRequest(f *testing.F) {
	fuzzMessage(f, func() Message { return new(JoinGroupRequest) }, sampleRequests())
}
func FuzzJoinGroupRequestV1(f *testing.F) {
	fuzzMessage(f, func() Message { return &JoinGroupRequest{Version: 1} }, sampleRequests())
}
func FuzzJoinGroupResponse(f *testing.F) {
	fuzzMessage(f, func() Message { return new(JoinGroupResponse) }, sampleResponses())
}
func FuzzSyncGroupRequest(f *testing.F) {
	fuzzMessage(f, func() Message { return new(SyncGroupRequest) }, sampleRequests())
}
func FuzzSyncGroupResponse(f *testing.F) {
	fuzzMessage(f, func() Message { return new(SyncGroupResponse) }, sampleResponses())
}
func FuzzHeartbeatRequest(f *testing.F) {
	fuzzMessage(f, func() Message { return new(HeartbeatRequest) }, sampleRequests())
}
func FuzzHeartbeatResponse(f *testing.F) {
	fuzzMessage(f, func() Message { return new(HeartbeatResponse) }, sampleResponses())
}
func FuzzLeaveGroupRequest(f *testing.F) {
	fuzzMessage(f, func() Message { return new(LeaveGroupRequest) }, sampleRequests())
}
func FuzzLeaveGroupResponse(f *testing.F) {
	fuzzMessage(f, func() Message { return new(LeaveGroupResponse) }, sampleResponses())
}
func FuzzOffsetCommitRequest(f *testing.F) {
	fuzzMessage(f, func() Message { return new(OffsetCommitRequest) }, sampleRequests())
}
func FuzzOffsetCommitResponse(f *testing.F) {
	fuzzMessage(f, func() Message { return new(OffsetCommitResponse) }, sampleResponses())
}
func FuzzOffsetFetchRequest(f *testing.F) {
	fuzzMessage(f, func() Message { return new(OffsetFetchRequest) }, sampleRequests())
}
func FuzzOffsetFetchResponse(f *testing.F) {
	fuzzMessage(f, func() Message { return new(OffsetFetchResponse) }, sampleResponses())
}
func FuzzListGroupsRequest(f *testing.F) {
	fuzzMessage(f, func() Message { return new(ListGroupsRequest) }, sampleRequests())
}
func FuzzListGroupsResponse(f *testing.F) {
	fuzzMessage(f, func() Message { return new(ListGroupsResponse) }, sampleResponses())
}
func FuzzDescribeGroupsRequest(f *testing.F) {
	fuzzMessage(f, func() Message { return new(DescribeGroupsRequest) }, sampleRequests())
}
func FuzzDescribeGroupsResponse(f *testing.F) {
	fuzzMessage(f, func() Message { return new(DescribeGroupsResponse) }, sampleResponses())
}
func FuzzDeleteGroupsRequest(f *testing.F) {
	fuzzMessage(f, func() Message { return new(DeleteGroupsRequest) }, sampleRequests())
}
func FuzzDeleteGroupsResponse(f *testing.F) {
	fuzzMessage(f, func() Message { return new(DeleteGroupsResponse) }, sampleResponses())
}
