package kafka

import (
	"github.com/ringlog/ringlog/engine/group"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Heartbeat (key 12), v0-v4: keeps a member's session; REBALANCE_IN_PROGRESS tells it to
// rejoin.
var heartbeatAPI = api{
	key: keyHeartbeat, min: 0, max: 4,
	serve: func(s *Server, p *pending, req kmsg.Request) {
		r := req.(*kmsg.HeartbeatRequest)
		h := group.Heartbeat{Group: r.Group, MemberID: r.MemberID, InstanceID: deref(r.InstanceID), Generation: r.Generation}
		s.groupDo(p, h, func(resp group.Response) kmsg.Response {
			out := r.ResponseKind().(*kmsg.HeartbeatResponse)
			out.ErrorCode = int16(resp.(group.HeartbeatResponse).Err)
			return out
		})
	},
	fail: func(req kmsg.Request, code int16, _ string) kmsg.Response {
		out := req.ResponseKind().(*kmsg.HeartbeatResponse)
		out.ErrorCode = code
		return out
	},
}
