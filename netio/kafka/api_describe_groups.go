package kafka

import (
	"github.com/ringlog/ringlog/engine/group"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// DescribeGroups (key 15), v0-v5: state, protocol, members (with metadata and assignments
// when the group is Stable), from each group's coordinator.
var describeGroupsAPI = api{
	key: keyDescribeGroups, min: 0, max: 5,
	serve: func(s *Server, p *pending, req kmsg.Request) {
		r := req.(*kmsg.DescribeGroupsRequest)
		// A group named twice is described once: each copy would carry every member's
		// metadata and assignment again (9,000 copies of a group keeping 1 MB asked for a
		// 9 GB response, TestAdversarialKafkaRepeatedNames).
		s.groupDo(p, group.DescribeGroups{Groups: uniqueNames(r.Groups)}, func(resp group.Response) kmsg.Response {
			out := r.ResponseKind().(*kmsg.DescribeGroupsResponse)
			for _, d := range resp.(group.DescribeGroupsResponse).Groups {
				g := kmsg.NewDescribeGroupsResponseGroup()
				g.ErrorCode, g.ErrorMessage, g.Group, g.State = int16(d.Err), groupMessage(d.Err), d.Group, d.State.String()
				g.ProtocolType, g.Protocol = d.ProtocolType, d.Protocol
				for _, m := range d.Members {
					gm := kmsg.NewDescribeGroupsResponseGroupMember()
					gm.MemberID, gm.InstanceID, gm.ClientID, gm.ClientHost = m.MemberID, nullable(m.InstanceID), m.ClientID, m.ClientHost
					gm.ProtocolMetadata, gm.MemberAssignment = orEmpty(m.Metadata), orEmpty(m.Assignment)
					g.Members = append(g.Members, gm)
				}
				out.Groups = append(out.Groups, g)
			}
			return out
		})
	},
	fail: func(req kmsg.Request, code int16, _ string) kmsg.Response {
		r := req.(*kmsg.DescribeGroupsRequest)
		out := r.ResponseKind().(*kmsg.DescribeGroupsResponse)
		for _, id := range r.Groups {
			g := kmsg.NewDescribeGroupsResponseGroup()
			g.ErrorCode, g.Group, g.State = code, id, group.Dead.String()
			out.Groups = append(out.Groups, g)
		}
		return out
	},
	entries: func(req kmsg.Request) int { return len(req.(*kmsg.DescribeGroupsRequest).Groups) },
}

func orEmpty(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}
