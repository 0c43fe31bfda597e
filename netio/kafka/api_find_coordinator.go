package kafka

import (
	"github.com/ringlog/ringlog/engine/group"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// FindCoordinator (key 10), v0-v4: every group's coordinator is this broker (node 0, the
// advertised Kafka address), or on a cluster the leader of the group's __consumer_offsets
// partition (groupCoordinator, cluster.go); the key is checked as the ringlog protocol checks it (an empty
// group id is INVALID_GROUP_ID, a broker without its offsets topic COORDINATOR_NOT_AVAILABLE).
// Transaction coordinators (key type 1) are refused with INVALID_REQUEST.
var findCoordinatorAPI = api{
	key: keyFindCoordinator, min: 0, max: 4,
	serve: func(s *Server, p *pending, req kmsg.Request) {
		r := req.(*kmsg.FindCoordinatorRequest)
		resp := r.ResponseKind().(*kmsg.FindCoordinatorResponse)
		if r.Version < 4 {
			c := s.coordinator(r.CoordinatorKey, r.CoordinatorType)
			resp.ErrorCode, resp.ErrorMessage, resp.NodeID, resp.Host, resp.Port = c.ErrorCode, c.ErrorMessage, c.NodeID, c.Host, c.Port
		}
		for _, key := range r.CoordinatorKeys {
			resp.Coordinators = append(resp.Coordinators, s.coordinator(key, r.CoordinatorType))
		}
		p.reply(resp, nil)
	},
	fail: func(req kmsg.Request, code int16, msg string) kmsg.Response {
		r := req.(*kmsg.FindCoordinatorRequest)
		resp := r.ResponseKind().(*kmsg.FindCoordinatorResponse)
		resp.ErrorCode, resp.ErrorMessage, resp.NodeID = code, str(msg), -1
		for _, key := range r.CoordinatorKeys {
			c := kmsg.NewFindCoordinatorResponseCoordinator()
			c.Key, c.NodeID, c.ErrorCode, c.ErrorMessage = key, -1, code, str(msg)
			resp.Coordinators = append(resp.Coordinators, c)
		}
		return resp
	},
	entries: func(req kmsg.Request) int { return 1 + len(req.(*kmsg.FindCoordinatorRequest).CoordinatorKeys) },
}

// coordinatorTypeGroup is FindCoordinator's key type for consumer groups (1: transactions).
const coordinatorTypeGroup = 0

func (s *Server) coordinator(key string, keyType int8) kmsg.FindCoordinatorResponseCoordinator {
	c := kmsg.NewFindCoordinatorResponseCoordinator()
	c.Key, c.NodeID, c.Port = key, -1, -1
	if keyType != coordinatorTypeGroup {
		c.ErrorCode, c.ErrorMessage = kerr.InvalidRequest.Code, str("only group coordinators: transactions are not supported by this broker")
		return c
	}
	if s.cfg.Cluster != nil && key != "" {
		c, _ = s.groupCoordinator(key) // the leader of the group's partition of the replicated topic
		return c
	}
	if _, code := s.b.Groups().CoordinatorShard(key); code != group.CodeNone {
		c.ErrorCode, c.ErrorMessage = int16(code), groupMessage(code)
		return c
	}
	c.NodeID, c.Host, c.Port = localNodeID, s.nodeHost, s.nodePort
	return c
}
