package kafka

import (
	"github.com/ringlog/ringlog/engine/group"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// LeaveGroup (key 13), v0-v5: one member (v0-v2) or a batch by member or instance id (v3+).
var leaveGroupAPI = api{
	key: keyLeaveGroup, min: 0, max: 5,
	serve: func(s *Server, p *pending, req kmsg.Request) {
		r := req.(*kmsg.LeaveGroupRequest)
		lg := group.LeaveGroup{Group: r.Group}
		if r.Version < 3 {
			lg.Members = []group.LeavingMember{{MemberID: r.MemberID}}
		}
		for _, m := range r.Members {
			lg.Members = append(lg.Members, group.LeavingMember{MemberID: m.MemberID, InstanceID: deref(m.InstanceID)})
		}
		s.groupDo(p, lg, func(resp group.Response) kmsg.Response {
			g := resp.(group.LeaveGroupResponse)
			out := r.ResponseKind().(*kmsg.LeaveGroupResponse)
			out.ErrorCode = int16(g.Err)
			if r.Version < 3 && out.ErrorCode == 0 && len(g.Members) == 1 {
				out.ErrorCode = int16(g.Members[0].Err) // v0-v2 have no per-member answer
			}
			if r.Version >= 3 {
				for _, m := range g.Members {
					lm := kmsg.NewLeaveGroupResponseMember()
					lm.MemberID, lm.InstanceID, lm.ErrorCode = m.MemberID, nullable(m.InstanceID), int16(m.Err)
					out.Members = append(out.Members, lm)
				}
			}
			return out
		})
	},
	fail: func(req kmsg.Request, code int16, _ string) kmsg.Response {
		out := req.ResponseKind().(*kmsg.LeaveGroupResponse)
		out.ErrorCode = code
		return out
	},
	entries: func(req kmsg.Request) int { return 1 + len(req.(*kmsg.LeaveGroupRequest).Members) },
}
