package client

import (
	"bytes"
	"net"
	"testing"

	"github.com/ringlog/ringlog/netio/wire"
)

// A JoinGroup response's member metadata stays intact while the connection reads the next
// response: before session 11 it aliased the connection's frame buffer, into which the
// next frame was read at once, so a leader decoding its members' subscriptions after a
// heartbeat or metadata answer on the same connection read the other frame's bytes
// ("malformed consumer protocol data", seen once in netio.TestGroupFetchQuota).
func TestGroupResponseBytesSurviveNextFrame(t *testing.T) {
	answer := func(h wire.RequestHeader, fill byte) []byte {
		return wire.AppendResponse(nil, h, &wire.JoinGroupResponse{Generation: 1, MemberID: "m", Leader: "m",
			Members: []wire.JoinGroupMember{{MemberID: "m", Metadata: bytes.Repeat([]byte{fill}, 64)}}})
	}
	addr := oneConnServer(t, func(nc net.Conn) {
		first, err := readRequest(nc)
		if err != nil {
			return
		}
		second, err := readRequest(nc)
		if err != nil {
			return
		}
		nc.Write(append(answer(first, 'A'), answer(second, 'B')...))
		readRequest(nc) // until the client closes
	})
	c := testConn(t, addr)
	got := make(chan error, 2)
	done := func(_ wire.Message, err error) { got <- err }
	var a, b wire.JoinGroupResponse
	c.send(&wire.JoinGroupRequest{Group: "g"}, &a, done)
	c.send(&wire.JoinGroupRequest{Group: "g"}, &b, done)
	for range 2 {
		if err := <-got; err != nil {
			t.Fatal(err)
		}
	}
	if len(a.Members) != 1 || !bytes.Equal(a.Members[0].Metadata, bytes.Repeat([]byte{'A'}, 64)) {
		t.Fatalf("first response's metadata after the second frame was read: %q", a.Members[0].Metadata)
	}
	if !bytes.Equal(b.Members[0].Metadata, bytes.Repeat([]byte{'B'}, 64)) {
		t.Fatalf("second response's metadata: %q", b.Members[0].Metadata)
	}
}
