package group

import (
	"testing"
	"time"
)

// joinNew sends a new dynamic member's JoinGroup v4+ (RequireKnownMemberID) and returns
// the member id MEMBER_ID_REQUIRED handed out.
func (f *fixture) joinNew(group string) string {
	f.t.Helper()
	id, r := f.join(group, "", "")
	r.RequireKnownMemberID = true
	resp := f.do(r)[id].(JoinGroupResponse)
	if resp.Err != CodeMemberIDRequired || resp.MemberID == "" {
		f.t.Fatalf("new member's first join: %s, member %q; want MEMBER_ID_REQUIRED with an id", resp.Err, resp.MemberID)
	}
	return resp.MemberID
}

// TestMemberIDRequired: a new member's first JoinGroup (v4+) adds nothing — no member, no
// rebalance — and hands out an id; joining with that id adds it; an id never used expires
// after the session timeout, and then the group it created is gone too.
func TestMemberIDRequired(t *testing.T) {
	f := newFixture(t, Config{})
	ids := f.stableGroup("g", 2)
	gen := f.describe("g").Generation
	newID := f.joinNew("g")
	if d := f.describe("g"); d.State != Stable || len(d.Members) != 2 || d.Generation != gen {
		t.Fatalf("after MEMBER_ID_REQUIRED the group changed: %+v", d)
	}
	if got := f.heartbeat("g", newID, gen); got != CodeUnknownMemberID {
		t.Fatalf("heartbeat of a pending id: %s, want UNKNOWN_MEMBER_ID (not a member yet)", got)
	}
	_, r := f.join("g", newID, "")
	f.do(r)
	if d := f.describe("g"); d.State != PreparingRebalance || len(d.Members) != 3 {
		t.Fatalf("after joining with its id: %+v", d)
	}
	for _, id := range ids {
		_, r := f.join("g", id, "")
		f.do(r)
	}
	if d := f.describe("g"); d.State != CompletingRebalance || len(d.Members) != 3 {
		t.Fatalf("rebalance with the new member: %+v", d)
	}

	// Abandoned: the first join's caller gave up. Nothing joins; the id expires.
	stray := f.joinNew("lonely")
	if d := f.describe("lonely"); d.State != Empty || len(d.Members) != 0 {
		t.Fatalf("a pending id made a member: %+v", d)
	}
	if at, ok := f.c.NextDeadline(); !ok || at.After(f.now.Add(10*time.Second)) {
		t.Fatalf("next deadline %v %v, want the pending id's expiry within its session timeout", at, ok)
	}
	f.now = f.now.Add(10 * time.Second)
	f.c.Tick(f.now)
	id, r := f.join("lonely", stray, "")
	if got := f.do(r)[id].(JoinGroupResponse).Err; got != CodeUnknownMemberID {
		t.Fatalf("join with an expired pending id: %s", got)
	}
	if d := f.describe("lonely"); d.State != Dead {
		t.Fatalf("the group the stray created outlived it: %+v", d)
	}
	if f.c.pendingIDs != 0 {
		t.Fatalf("%d pending ids counted after expiry", f.c.pendingIDs)
	}
}

// TestPendingJoinWait: a join phase waits briefly for a member just told
// MEMBER_ID_REQUIRED (a fleet starting together forms one generation), but not for a stray
// whose wait has passed (Kafka would wait for it until its session timeout).
func TestPendingJoinWait(t *testing.T) {
	f := newFixture(t, Config{})
	a, b := f.joinNew("fleet"), f.joinNew("fleet")
	_, r := f.join("fleet", a, "")
	f.do(r)
	if d := f.describe("fleet"); d.State != PreparingRebalance || len(d.Members) != 1 {
		t.Fatalf("join phase did not wait for the other pending member: %+v", d)
	}
	_, r = f.join("fleet", b, "")
	f.do(r)
	if d := f.describe("fleet"); d.State != CompletingRebalance || len(d.Members) != 2 || d.Generation != 1 {
		t.Fatalf("want one generation of both: %+v", d)
	}

	// A stray's pending id; later a real member joins the Stable group: the rebalance does
	// not wait for the stray.
	g := newFixture(t, Config{})
	ids := g.stableGroup("s", 1)
	g.joinNew("s") // never comes back
	g.now = g.now.Add(2 * time.Second)
	g.c.Tick(g.now)
	late := g.joinNew("s")
	_, r = g.join("s", late, "")
	g.do(r)
	g.now = g.now.Add(2 * time.Second) // the late member's own wait passes too
	g.c.Tick(g.now)
	_, r = g.join("s", ids[0], "")
	g.do(r)
	if d := g.describe("s"); d.State != CompletingRebalance || len(d.Members) != 2 {
		t.Fatalf("the rebalance waited for a stray pending id: %+v", d)
	}

	// A pending member that leaves ends the wait at once.
	h := newFixture(t, Config{})
	a, b = h.joinNew("l"), h.joinNew("l")
	_, r = h.join("l", a, "")
	h.do(r)
	id := h.next()
	left := h.do(LeaveGroup{ReqID: id, Group: "l", Members: []LeavingMember{{MemberID: b}}})[id].(LeaveGroupResponse)
	if len(left.Members) != 1 || left.Members[0].Err != CodeNone {
		t.Fatalf("leave of a pending id: %+v", left)
	}
	if d := h.describe("l"); d.State != CompletingRebalance || len(d.Members) != 1 {
		t.Fatalf("join phase still waits after the pending member left: %+v", d)
	}
}

// TestPendingBounds: pending ids are bounded per group (the oldest dropped) and per
// coordinator (COORDINATOR_NOT_AVAILABLE, retriable).
func TestPendingBounds(t *testing.T) {
	f := newFixture(t, Config{GroupMembersMax: 2, PendingMembersMax: 3})
	first := f.joinNew("g")
	f.joinNew("g")
	f.joinNew("g") // drops first
	id, r := f.join("g", first, "")
	if got := f.do(r)[id].(JoinGroupResponse).Err; got != CodeUnknownMemberID {
		t.Fatalf("the group's oldest pending id past its bound: %s, want UNKNOWN_MEMBER_ID", got)
	}
	f.joinNew("h")
	id, r = f.join("i", "", "")
	r.RequireKnownMemberID = true
	if got := f.do(r)[id].(JoinGroupResponse).Err; got != CodeCoordinatorNotAvailable {
		t.Fatalf("past the coordinator's pending bound: %s", got)
	}
	// Static members never wait for an id.
	id, r = f.join("i", "", "host-1")
	r.RequireKnownMemberID = true
	if got := f.do(r)[id].(JoinGroupResponse); got.Err != CodeNone || got.MemberID == "" {
		t.Fatalf("static member's first join: %+v", got)
	}
}
