package group

import (
	"bytes"
	"testing"
)

// TestStateBytesMax: what members keep (protocol names and metadata, assignments) is
// bounded per coordinator, with the committed offsets (TestStateBytesMaxOffsets). A
// JoinGroup or a leader's SyncGroup that would go past the bound is answered
// COORDINATOR_NOT_AVAILABLE and changes nothing; a rejoin that keeps no more passes, and
// what leaving members kept is free again. (Without the bound every JoinGroup kept its
// metadata, up to a 64 MiB frame, for its session timeout.)
func TestStateBytesMax(t *testing.T) {
	const max = 200
	f := newFixture(t, Config{StateBytesMax: max})
	join := func(group, member string, metadataBytes int) JoinGroupResponse {
		id, r := f.join(group, member, "")
		r.Protocols = []Protocol{{Name: "range", Metadata: bytes.Repeat([]byte("m"), metadataBytes)}}
		return f.do(r)[id].(JoinGroupResponse)
	}
	a := join("a", "", 120) // keeps 125 bytes
	if a.Err != CodeNone {
		t.Fatalf("first join: %s", a.Err)
	}
	if got := join("b", "", 100).Err; got != CodeCoordinatorNotAvailable {
		t.Fatalf("a join past the bound: %s, want COORDINATOR_NOT_AVAILABLE", got)
	}
	if d := f.describe("b"); d.State != Dead {
		t.Fatalf("the refused join made group b: %+v", d)
	}
	if got := join("a", a.MemberID, 120).Err; got != CodeNone {
		t.Fatalf("a rejoin keeping the same bytes: %s", got)
	}
	if got := join("a", a.MemberID, 200).Err; got != CodeCoordinatorNotAvailable {
		t.Fatalf("a rejoin growing past the bound: %s", got)
	}
	// The leader's assignment counts too.
	gen := f.describe("a").Generation
	sync := func(assignmentBytes int) Code {
		id := f.next()
		r := SyncGroup{ReqID: id, Group: "a", MemberID: a.MemberID, Generation: gen,
			Assignments: []MemberAssignment{{MemberID: a.MemberID, Assignment: bytes.Repeat([]byte("a"), assignmentBytes)}}}
		return f.do(r)[id].(SyncGroupResponse).Err
	}
	if got := sync(100); got != CodeCoordinatorNotAvailable {
		t.Fatalf("an assignment past the bound: %s", got)
	}
	if got := sync(50); got != CodeNone {
		t.Fatalf("an assignment within the bound: %s", got)
	}
	if f.c.stateBytes != 125+50 {
		t.Fatalf("coordinator counts %d bytes kept, want 175", f.c.stateBytes)
	}
	// Leaving frees them.
	id := f.next()
	if resp := f.do(LeaveGroup{ReqID: id, Group: "a", Members: []LeavingMember{{MemberID: a.MemberID}}})[id].(LeaveGroupResponse); resp.Err != CodeNone {
		t.Fatalf("leave: %+v", resp)
	}
	if got := join("b", "", 190).Err; got != CodeNone {
		t.Fatalf("a join after the member left: %s", got)
	}
	f.c.checkInvariants()
}

// TestStateBytesMaxOffsets: committed offsets count against the same bound. A commit that
// would pass it is refused whole (COORDINATOR_NOT_AVAILABLE) before anything is written; one
// that replaces offsets already kept passes; deleting a group frees its offsets. (Without
// the bound every OffsetCommit kept up to 10,000 offsets of 4 KiB metadata, for the offsets'
// retention of 7 days.)
func TestStateBytesMaxOffsets(t *testing.T) {
	each := offsetBytes(TopicPartition{Topic: "t"}, OffsetValue{Metadata: "meta"})
	f := newFixture(t, Config{StateBytesMax: 7 * each})
	commit := func(group string, n int) Code {
		id := f.next()
		r := OffsetCommit{ReqID: id, Group: group, Generation: -1}
		for p := range n {
			r.Offsets = append(r.Offsets, CommitOffset{Topic: "t", Partition: int32(p), Offset: 9, LeaderEpoch: -1, Metadata: "meta"})
		}
		resp := f.do(r)[id].(OffsetCommitResponse)
		for _, p := range resp.Partitions {
			if p.Err != resp.Partitions[0].Err {
				t.Fatalf("commit answered %+v: not one code", resp.Partitions)
			}
		}
		return resp.Partitions[0].Err
	}
	if got := commit("a", 5); got != CodeNone {
		t.Fatalf("first commit: %s", got)
	}
	appends := len(f.appends)
	if got := commit("b", 5); got != CodeCoordinatorNotAvailable {
		t.Fatalf("a commit past the bound: %s, want COORDINATOR_NOT_AVAILABLE", got)
	}
	if len(f.appends) != appends {
		t.Fatal("the refused commit was written")
	}
	if d := f.describe("b"); d.State != Dead {
		t.Fatalf("the refused commit made group b: %+v", d)
	}
	if got := commit("a", 5); got != CodeNone {
		t.Fatalf("a commit replacing kept offsets: %s", got)
	}
	if f.c.stateBytes != 5*each {
		t.Fatalf("coordinator counts %d bytes kept, want %d", f.c.stateBytes, 5*each)
	}
	id := f.next()
	if res := f.do(DeleteGroups{ReqID: id, Groups: []string{"a"}})[id].(DeleteGroupsResponse).Results; res[0].Err != CodeNone {
		t.Fatalf("delete: %+v", res)
	}
	if got := commit("b", 5); got != CodeNone {
		t.Fatalf("a commit after the group was deleted: %s", got)
	}
	f.c.checkInvariants()
}
