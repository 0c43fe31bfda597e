package kafka

import (
	"bytes"

	"github.com/ringlog/ringlog/engine/group"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// SyncGroup (key 14), v0-v5: the leader hands in the assignment; every member gets its own.
var syncGroupAPI = api{
	key: keySyncGroup, min: 0, max: 5,
	serve: func(s *Server, p *pending, req kmsg.Request) {
		r := req.(*kmsg.SyncGroupRequest)
		sg := group.SyncGroup{Group: r.Group, MemberID: r.MemberID, InstanceID: deref(r.InstanceID), Generation: r.Generation,
			ProtocolType: deref(r.ProtocolType), Protocol: deref(r.Protocol)}
		for _, a := range r.GroupAssignment {
			sg.Assignments = append(sg.Assignments, group.MemberAssignment{MemberID: a.MemberID, Assignment: bytes.Clone(a.MemberAssignment)})
		}
		s.groupDo(p, sg, func(resp group.Response) kmsg.Response {
			g := resp.(group.SyncGroupResponse)
			out := r.ResponseKind().(*kmsg.SyncGroupResponse)
			out.ErrorCode, out.MemberAssignment = int16(g.Err), g.Assignment
			out.ProtocolType, out.Protocol = nullable(g.ProtocolType), nullable(g.Protocol)
			if out.MemberAssignment == nil {
				out.MemberAssignment = []byte{}
			}
			return out
		})
	},
	fail: func(req kmsg.Request, code int16, _ string) kmsg.Response {
		out := req.ResponseKind().(*kmsg.SyncGroupResponse)
		out.ErrorCode, out.MemberAssignment = code, []byte{}
		return out
	},
	entries: func(req kmsg.Request) int { return 1 + len(req.(*kmsg.SyncGroupRequest).GroupAssignment) },
}
