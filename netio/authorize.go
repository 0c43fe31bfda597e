package netio

// ACL decisions on data and topic-admin requests (docs/security.md "Authorization").
// Denied entries are taken out of the request before the handler sees it and put back
// into the reply, each with TOPIC_AUTHORIZATION_FAILED (CLUSTER_AUTHORIZATION_FAILED for
// InitProducerId); a request with nothing left is answered here. Metadata and
// DescribeTopics without a topic list hide the topics the principal may not describe.

import (
	"github.com/ringlog/ringlog/netio/security"
	"github.com/ringlog/ringlog/netio/wire"
)

// splitTopics moves the entries whose topic allowed refuses out of *items, in order.
func splitTopics[T any](items *[]T, topic func(*T) string, allowed func(string) bool) (denied []T) {
	kept := (*items)[:0]
	for i := range *items {
		if allowed(topic(&(*items)[i])) {
			kept = append(kept, (*items)[i])
		} else {
			denied = append(denied, (*items)[i])
		}
	}
	*items = kept
	return denied
}

func deniedMessage(principal string, op security.Operation, topic string) string {
	return security.Denial(principal, op, security.ResourceTopic, topic)
}

// authorize applies the ACLs to req; true if it answered the request.
func (s *Server) authorize(req *Request) bool {
	sec := s.cfg.Security
	if sec == nil || sec.Authorizer == nil || !sec.Authorizer.Enabled() {
		return false
	}
	a := sec.Authorizer
	p := req.Conn.Session.Principal()
	can := func(op security.Operation) func(string) bool {
		return func(topic string) bool { return a.Authorize(p, op, security.ResourceTopic, topic) }
	}
	failed := wire.ErrTopicAuthorizationFailed
	switch body := req.Body.(type) {
	case *wire.ProduceRequest:
		denied := splitTopics(&body.Topics, func(t *wire.ProduceTopic) string { return t.Topic }, can(security.OpWrite))
		var out []wire.ProduceResponseTopic
		for _, t := range denied {
			rt := wire.ProduceResponseTopic{Topic: t.Topic}
			for _, pp := range t.Partitions {
				rt.Partitions = append(rt.Partitions, wire.ProduceResponsePartition{Partition: pp.Partition, ErrorCode: failed,
					ErrorMessage: deniedMessage(p, security.OpWrite, t.Topic), BaseOffset: -1, LogAppendTime: -1, LogStartOffset: -1})
			}
			out = append(out, rt)
		}
		return finishSplit(req, len(body.Topics), len(out), &wire.ProduceResponse{Topics: out}, func(m *wire.ProduceResponse) { m.Topics = append(m.Topics, out...) })
	case *wire.FetchRequest:
		denied := splitTopics(&body.Topics, func(t *wire.FetchTopic) string { return t.Topic }, can(security.OpRead))
		var out []wire.FetchResponseTopic
		for _, t := range denied {
			rt := wire.FetchResponseTopic{Topic: t.Topic}
			for _, pp := range t.Partitions {
				rt.Partitions = append(rt.Partitions, wire.FetchResponsePartition{Partition: pp.Partition, ErrorCode: failed,
					ErrorMessage: deniedMessage(p, security.OpRead, t.Topic), HighWatermark: -1, LogStartOffset: -1})
			}
			out = append(out, rt)
		}
		return finishSplit(req, len(body.Topics), len(out), &wire.FetchResponse{Topics: out}, func(m *wire.FetchResponse) { m.Topics = append(m.Topics, out...) })
	case *wire.ListOffsetsRequest:
		denied := splitTopics(&body.Topics, func(t *wire.ListOffsetsTopic) string { return t.Topic }, can(security.OpDescribe))
		var out []wire.ListOffsetsResponseTopic
		for _, t := range denied {
			rt := wire.ListOffsetsResponseTopic{Topic: t.Topic}
			for _, pp := range t.Partitions {
				rt.Partitions = append(rt.Partitions, wire.ListOffsetsResponsePartition{Partition: pp.Partition, ErrorCode: failed,
					ErrorMessage: deniedMessage(p, security.OpDescribe, t.Topic), Timestamp: -1, Offset: -1})
			}
			out = append(out, rt)
		}
		return finishSplit(req, len(body.Topics), len(out), &wire.ListOffsetsResponse{Topics: out}, func(m *wire.ListOffsetsResponse) { m.Topics = append(m.Topics, out...) })
	case *wire.MetadataRequest:
		return s.authorizeMetadata(req, body, can(security.OpDescribe), p)
	case *wire.DescribeTopicsRequest:
		if body.Topics == nil { // every topic: list only those the principal may describe
			describe := can(security.OpDescribe)
			req.amend = func(r *Response) {
				if m, ok := r.Body.(*wire.DescribeTopicsResponse); ok {
					splitTopics(&m.Topics, func(t *wire.DescribeTopic) string { return t.Topic }, describe)
				}
			}
			return false
		}
		var out []wire.DescribeTopic
		for _, t := range splitTopics(&body.Topics, func(t *string) string { return *t }, can(security.OpDescribe)) {
			out = append(out, wire.DescribeTopic{Topic: t, ErrorCode: failed, ErrorMessage: deniedMessage(p, security.OpDescribe, t)})
		}
		return finishSplit(req, len(body.Topics), len(out), &wire.DescribeTopicsResponse{Topics: out}, func(m *wire.DescribeTopicsResponse) { m.Topics = append(m.Topics, out...) })
	case *wire.DescribeConfigsRequest:
		var out []wire.DescribeConfigsResult
		for _, t := range splitTopics(&body.Topics, func(t *wire.DescribeConfigsTopic) string { return t.Topic }, can(security.OpDescribe)) {
			out = append(out, wire.DescribeConfigsResult{Topic: t.Topic, ErrorCode: failed, ErrorMessage: deniedMessage(p, security.OpDescribe, t.Topic)})
		}
		return finishSplit(req, len(body.Topics), len(out), &wire.DescribeConfigsResponse{Topics: out}, func(m *wire.DescribeConfigsResponse) { m.Topics = append(m.Topics, out...) })
	case *wire.CreateTopicsRequest:
		clusterCreate := a.Authorize(p, security.OpCreate, security.ResourceCluster, security.ClusterName)
		allowed := func(topic string) bool { return clusterCreate || can(security.OpCreate)(topic) }
		out := topicResults(splitTopics(&body.Topics, func(t *wire.CreateTopic) string { return t.Topic }, allowed), func(t *wire.CreateTopic) string { return t.Topic }, p, security.OpCreate)
		return finishSplit(req, len(body.Topics), len(out), &wire.CreateTopicsResponse{Topics: out}, func(m *wire.CreateTopicsResponse) { m.Topics = append(m.Topics, out...) })
	case *wire.DeleteTopicsRequest:
		out := topicResults(splitTopics(&body.Topics, func(t *string) string { return *t }, can(security.OpDelete)), func(t *string) string { return *t }, p, security.OpDelete)
		return finishSplit(req, len(body.Topics), len(out), &wire.DeleteTopicsResponse{Topics: out}, func(m *wire.DeleteTopicsResponse) { m.Topics = append(m.Topics, out...) })
	case *wire.AlterConfigsRequest:
		out := topicResults(splitTopics(&body.Topics, func(t *wire.AlterConfigsTopic) string { return t.Topic }, can(security.OpAlter)), func(t *wire.AlterConfigsTopic) string { return t.Topic }, p, security.OpAlter)
		return finishSplit(req, len(body.Topics), len(out), &wire.AlterConfigsResponse{Topics: out}, func(m *wire.AlterConfigsResponse) { m.Topics = append(m.Topics, out...) })
	case *wire.FindCoordinatorRequest:
		return s.denyGroups(req, p, security.OpDescribe, body.Group)
	case *wire.JoinGroupRequest:
		return s.denyGroups(req, p, security.OpRead, body.Group)
	case *wire.SyncGroupRequest:
		return s.denyGroups(req, p, security.OpRead, body.Group)
	case *wire.HeartbeatRequest:
		return s.denyGroups(req, p, security.OpRead, body.Group)
	case *wire.LeaveGroupRequest:
		return s.denyGroups(req, p, security.OpRead, body.Group)
	case *wire.OffsetCommitRequest:
		// Kafka's rule: Read on the group and on every topic committed.
		if s.denyGroups(req, p, security.OpRead, body.Group) {
			return true
		}
		for _, t := range body.Topics {
			if !can(security.OpRead)(t.Topic) {
				req.ReplyError(failed, deniedMessage(p, security.OpRead, t.Topic))
				return true
			}
		}
	case *wire.OffsetFetchRequest:
		return s.denyGroups(req, p, security.OpDescribe, body.Group)
	case *wire.DescribeGroupsRequest:
		return s.denyGroups(req, p, security.OpDescribe, body.Groups...)
	case *wire.DeleteGroupsRequest:
		return s.denyGroups(req, p, security.OpDelete, body.Groups...)
	case *wire.ListGroupsRequest:
		return s.denyCluster(req, p, security.OpDescribe)
	case *wire.ReplicaFetchRequest, *wire.ReplicaFetchWakeRequest, *wire.OffsetsForLeaderEpochRequest:
		// Between brokers: a replica reads every partition it follows, so it needs the
		// cluster's All (Kafka's ClusterAction).
		return s.denyCluster(req, p, security.OpAll)
	case *wire.ControllerRequest:
		if body.Op == wire.ControllerMetadata {
			return s.denyCluster(req, p, security.OpDescribe)
		}
		return s.denyCluster(req, p, security.OpAll)
	case *wire.InitProducerIDRequest:
		// An idempotent producer needs to write somewhere: Write on the cluster or on any
		// topic (Kafka's IdempotentWrite rule since 3.0).
		if !a.Authorize(p, security.OpWrite, security.ResourceCluster, security.ClusterName) && !a.AllowsAny(p, security.OpWrite, security.ResourceTopic) {
			req.ReplyMessage(&wire.InitProducerIDResponse{ErrorCode: wire.ErrClusterAuthorizationFailed,
				ErrorMessage: p + " may write to no topic: no producer id", ProducerID: -1, ProducerEpoch: -1})
			return true
		}
	}
	return false
}

func topicResults[T any](denied []T, topic func(*T) string, principal string, op security.Operation) []wire.TopicResult {
	var out []wire.TopicResult
	for i := range denied {
		t := topic(&denied[i])
		out = append(out, wire.TopicResult{Topic: t, ErrorCode: wire.ErrTopicAuthorizationFailed, ErrorMessage: deniedMessage(principal, op, t)})
	}
	return out
}

// finishSplit answers req with whole when every entry was denied (kept == 0), or arranges
// for add to put the denied entries into the handler's reply. It reports whether it
// answered.
func finishSplit[M wire.Message](req *Request, kept, denied int, whole M, add func(M)) bool {
	if denied == 0 {
		return false
	}
	if kept == 0 {
		req.ReplyMessage(whole)
		return true
	}
	req.amend = func(r *Response) {
		if m, ok := r.Body.(M); ok {
			add(m)
		}
	}
	return false
}

// authorizeMetadata: named topics the principal may not describe are answered
// TOPIC_AUTHORIZATION_FAILED (whether or not they exist); a request for every topic
// lists only those it may describe.
func (s *Server) authorizeMetadata(req *Request, body *wire.MetadataRequest, describe func(string) bool, p string) bool {
	if body.Topics == nil {
		req.amend = func(r *Response) {
			if m, ok := r.Body.(*wire.MetadataResponse); ok {
				splitTopics(&m.Topics, func(t *wire.MetadataTopic) string { return t.Topic }, describe)
			}
		}
		return false
	}
	var out []wire.MetadataTopic
	for _, t := range splitTopics(&body.Topics, func(t *string) string { return *t }, describe) {
		out = append(out, wire.MetadataTopic{Topic: t, ErrorCode: wire.ErrTopicAuthorizationFailed, ErrorMessage: deniedMessage(p, security.OpDescribe, t)})
	}
	return finishSplit(req, len(body.Topics), len(out), &wire.MetadataResponse{Topics: out}, func(m *wire.MetadataResponse) { m.Topics = append(m.Topics, out...) })
}

// denyGroups answers req with GROUP_AUTHORIZATION_FAILED, whole, unless the principal may
// do op on every group named; true if it answered.
func (s *Server) denyGroups(req *Request, principal string, op security.Operation, groups ...string) bool {
	for _, g := range groups {
		if !s.cfg.Security.Authorizer.Authorize(principal, op, security.ResourceGroup, g) {
			req.ReplyError(wire.ErrGroupAuthorizationFailed, security.Denial(principal, op, security.ResourceGroup, g))
			return true
		}
	}
	return false
}

// denyCluster answers req with CLUSTER_AUTHORIZATION_FAILED unless the principal may do op
// on the cluster; true if it answered.
func (s *Server) denyCluster(req *Request, principal string, op security.Operation) bool {
	if s.cfg.Security.Authorizer.Authorize(principal, op, security.ResourceCluster, security.ClusterName) {
		return false
	}
	req.ReplyError(wire.ErrClusterAuthorizationFailed, security.Denial(principal, op, security.ResourceCluster, security.ClusterName))
	return true
}
