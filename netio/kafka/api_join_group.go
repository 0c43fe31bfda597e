package kafka

import (
	"bytes"

	"github.com/ringlog/ringlog/engine/group"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// JoinGroup (key 11), v0-v9: the coordinator's join phase; the answer comes when it ends.
// From v4 a new dynamic member (no member id, no group.instance.id) is first answered
// MEMBER_ID_REQUIRED (79) with its member id and joins when it comes back with it (KIP-394,
// as Kafka's KafkaApis sets requireKnownMemberId = version >= 4 && no instance id). v9's
// SkipAssignment is always false (the leader assigns, as before KIP-814); v8's reason is
// not kept.
var joinGroupAPI = api{
	key: keyJoinGroup, min: 0, max: 9,
	serve: func(s *Server, p *pending, req kmsg.Request) {
		r := req.(*kmsg.JoinGroupRequest)
		j := group.JoinGroup{Group: r.Group, MemberID: r.MemberID, InstanceID: deref(r.InstanceID), ClientID: p.hdr.clientID,
			ClientHost: p.c.remote, SessionTimeout: millis(r.SessionTimeoutMillis), ProtocolType: r.ProtocolType}
		j.RebalanceTimeout = millis(r.RebalanceTimeoutMillis)
		j.RequireKnownMemberID = r.Version >= 4
		if r.Version == 0 {
			j.RebalanceTimeout = j.SessionTimeout // v0 has one timeout for both
		}
		for _, proto := range r.Protocols {
			j.Protocols = append(j.Protocols, group.Protocol{Name: proto.Name, Metadata: bytes.Clone(proto.Metadata)})
		}
		s.groupDo(p, j, func(resp group.Response) kmsg.Response {
			g := resp.(group.JoinGroupResponse)
			out := r.ResponseKind().(*kmsg.JoinGroupResponse)
			out.ErrorCode, out.Generation, out.LeaderID, out.MemberID = int16(g.Err), g.Generation, g.Leader, g.MemberID
			out.ProtocolType, out.Protocol = nullable(g.ProtocolType), nullable(g.Protocol)
			if r.Version < 7 && out.Protocol == nil {
				out.Protocol = str("") // not nullable before v7
			}
			for _, m := range g.Members {
				jm := kmsg.NewJoinGroupResponseMember()
				jm.MemberID, jm.InstanceID, jm.ProtocolMetadata = m.MemberID, nullable(m.InstanceID), m.Metadata
				out.Members = append(out.Members, jm)
			}
			return out
		})
	},
	fail:    failJoinGroup,
	entries: func(req kmsg.Request) int { return 1 + len(req.(*kmsg.JoinGroupRequest).Protocols) },
}

func failJoinGroup(req kmsg.Request, code int16, _ string) kmsg.Response {
	out := req.ResponseKind().(*kmsg.JoinGroupResponse)
	out.ErrorCode, out.Generation, out.Protocol = code, -1, str("")
	return out
}
