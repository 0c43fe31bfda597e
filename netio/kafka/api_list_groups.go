package kafka

import (
	"fmt"

	"github.com/ringlog/ringlog/engine/group"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// ListGroups (key 16), v0-v4: every group of every coordinator shard, optionally only
// those in the states asked for (v4).
var listGroupsAPI = api{
	key: keyListGroups, min: 0, max: 4,
	serve: func(s *Server, p *pending, req kmsg.Request) {
		r := req.(*kmsg.ListGroupsRequest)
		lg := group.ListGroups{}
		for _, name := range r.StatesFilter {
			state, ok := group.ParseState(name)
			if !ok {
				out := r.ResponseKind().(*kmsg.ListGroupsResponse)
				out.ErrorCode = kerr.InvalidRequest.Code
				s.logf("kafka: ListGroups from %s: unknown state %q", p.c.remote, fmt.Sprint(name))
				p.reply(out, nil)
				return
			}
			lg.States = append(lg.States, state)
		}
		s.groupDo(p, lg, func(resp group.Response) kmsg.Response {
			g := resp.(group.ListGroupsResponse)
			out := r.ResponseKind().(*kmsg.ListGroupsResponse)
			out.ErrorCode = int16(g.Err)
			for _, listed := range g.Groups {
				lgr := kmsg.NewListGroupsResponseGroup()
				lgr.Group, lgr.ProtocolType, lgr.GroupState, lgr.GroupType = listed.Group, listed.ProtocolType, listed.State.String(), "classic"
				out.Groups = append(out.Groups, lgr)
			}
			return out
		})
	},
	fail: func(req kmsg.Request, code int16, _ string) kmsg.Response {
		out := req.ResponseKind().(*kmsg.ListGroupsResponse)
		out.ErrorCode = code
		return out
	},
	entries: func(req kmsg.Request) int { return 1 + len(req.(*kmsg.ListGroupsRequest).StatesFilter) },
}
