package kafka

// ACLs on the Kafka listener (docs/security.md "Authorization"): the ringlog listener's
// rules (netio/authorize.go) over the same security.Authorizer, answered with Kafka's
// codes — TOPIC_AUTHORIZATION_FAILED (29) per topic entry, GROUP_AUTHORIZATION_FAILED (30)
// per group, CLUSTER_AUTHORIZATION_FAILED (31) for cluster actions. The decision runs on
// the connection's reader before the handler: denied entries are taken out of the request
// and answered by the API's own fail with their code, then appended to the handler's reply
// (pending.amend); a request with nothing left is answered here. Requests for every topic
// (Metadata, OffsetFetch) or every group (ListGroups) list only what the principal may
// describe.

import (
	"reflect"

	"github.com/ringlog/ringlog/netio/security"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// gate is one request's authorization: the principal and what answers a denied entry.
type gate struct {
	az        *security.Authorizer
	p         *pending
	a         *api
	req       kmsg.Request
	principal string
	// serveEmpty: a request left with no entries still goes to its handler (Metadata v1+:
	// the reply carries the brokers, which clients need whatever the topics).
	serveEmpty bool
}

// verdict is a decision on one entry: code 0 allows it.
type verdict struct {
	code int16
	msg  string
}

// authorizer is the Authorizer in force, nil when ACLs are off.
func (s *Server) authorizer() *security.Authorizer {
	sec := s.cfg.Security
	if sec == nil || sec.Authorizer == nil || !sec.Authorizer.Enabled() {
		return nil
	}
	return sec.Authorizer
}

// authorize applies the ACLs to req before its handler runs; true if it answered p.
func (s *Server) authorize(p *pending, a *api, req kmsg.Request) bool {
	az := s.authorizer()
	if az == nil || preAuth(p.hdr.key) {
		return false
	}
	g := &gate{az: az, p: p, a: a, req: req, principal: p.c.sess.Principal()}
	switch r := req.(type) {
	case *kmsg.ProduceRequest:
		if r.Acks == 0 && !allowsAll(r.Topics, func(t *kmsg.ProduceRequestTopic) bool { return g.allowed(security.OpWrite, t.Topic) }) {
			// No reply to carry the code: close, as Kafka does on any acks=0 error.
			s.closeWith(p, security.Denial(g.principal, security.OpWrite, security.ResourceTopic, "(acks=0 produce)"))
			return true
		}
		return splitEntries(g, &r.Topics, func(t *kmsg.ProduceRequestTopic) verdict { return g.topic(security.OpWrite, t.Topic) },
			func(d []kmsg.ProduceRequestTopic) kmsg.Request { c := *r; c.Topics = d; return &c }, "Topics")
	case *kmsg.FetchRequest:
		return splitEntries(g, &r.Topics, func(t *kmsg.FetchRequestTopic) verdict { return g.topic(security.OpRead, t.Topic) },
			func(d []kmsg.FetchRequestTopic) kmsg.Request { c := *r; c.Topics = d; return &c }, "Topics")
	case *kmsg.ListOffsetsRequest:
		return splitEntries(g, &r.Topics, func(t *kmsg.ListOffsetsRequestTopic) verdict { return g.topic(security.OpDescribe, t.Topic) },
			func(d []kmsg.ListOffsetsRequestTopic) kmsg.Request { c := *r; c.Topics = d; return &c }, "Topics")
	case *kmsg.OffsetForLeaderEpochRequest: // Kafka's rule: Describe on the topic
		return splitEntries(g, &r.Topics, func(t *kmsg.OffsetForLeaderEpochRequestTopic) verdict { return g.topic(security.OpDescribe, t.Topic) },
			func(d []kmsg.OffsetForLeaderEpochRequestTopic) kmsg.Request { c := *r; c.Topics = d; return &c }, "Topics")
	case *kmsg.MetadataRequest:
		return s.authorizeMetadata(g, r)
	case *kmsg.CreateTopicsRequest:
		cluster := g.cluster(security.OpCreate).code == 0
		return splitEntries(g, &r.Topics, func(t *kmsg.CreateTopicsRequestTopic) verdict {
			if cluster {
				return verdict{}
			}
			return g.topic(security.OpCreate, t.Topic)
		}, func(d []kmsg.CreateTopicsRequestTopic) kmsg.Request { c := *r; c.Topics = d; return &c }, "Topics")
	case *kmsg.DeleteTopicsRequest:
		return splitEntries(g, &r.TopicNames, func(t *string) verdict { return g.topic(security.OpDelete, *t) },
			func(d []string) kmsg.Request { c := *r; c.TopicNames = d; return &c }, "Topics")
	case *kmsg.CreatePartitionsRequest:
		return splitEntries(g, &r.Topics, func(t *kmsg.CreatePartitionsRequestTopic) verdict { return g.topic(security.OpAlter, t.Topic) },
			func(d []kmsg.CreatePartitionsRequestTopic) kmsg.Request { c := *r; c.Topics = d; return &c }, "Topics")
	case *kmsg.DescribeConfigsRequest:
		return splitEntries(g, &r.Resources, func(res *kmsg.DescribeConfigsRequestResource) verdict {
			switch res.ResourceType {
			case kmsg.ConfigResourceTypeTopic:
				return g.topic(security.OpDescribe, res.ResourceName)
			case kmsg.ConfigResourceTypeBroker, kmsg.ConfigResourceTypeBrokerLogger:
				return g.cluster(security.OpDescribe)
			}
			return verdict{} // the handler refuses other types
		}, func(d []kmsg.DescribeConfigsRequestResource) kmsg.Request { c := *r; c.Resources = d; return &c }, "Resources")
	case *kmsg.FindCoordinatorRequest:
		if r.CoordinatorType != coordinatorTypeGroup {
			return false // transactions: the handler refuses them
		}
		if r.Version < 4 {
			return g.refuse(g.group(security.OpDescribe, r.CoordinatorKey))
		}
		return splitEntries(g, &r.CoordinatorKeys, func(k *string) verdict { return g.group(security.OpDescribe, *k) },
			func(d []string) kmsg.Request { c := *r; c.CoordinatorKeys = d; return &c }, "Coordinators")
	case *kmsg.JoinGroupRequest:
		return g.refuse(g.group(security.OpRead, r.Group))
	case *kmsg.SyncGroupRequest:
		return g.refuse(g.group(security.OpRead, r.Group))
	case *kmsg.HeartbeatRequest:
		return g.refuse(g.group(security.OpRead, r.Group))
	case *kmsg.LeaveGroupRequest:
		return g.refuse(g.group(security.OpRead, r.Group))
	case *kmsg.OffsetCommitRequest:
		// Kafka's rule: Read on the group, then Read on each topic committed.
		if g.refuse(g.group(security.OpRead, r.Group)) {
			return true
		}
		return splitEntries(g, &r.Topics, func(t *kmsg.OffsetCommitRequestTopic) verdict { return g.topic(security.OpRead, t.Topic) },
			func(d []kmsg.OffsetCommitRequestTopic) kmsg.Request { c := *r; c.Topics = d; return &c }, "Topics")
	case *kmsg.OffsetFetchRequest:
		if g.refuse(g.group(security.OpDescribe, r.Group)) {
			return true
		}
		if r.Topics == nil { // every committed topic: those the principal may describe
			p.amend = func(resp kmsg.Response) {
				m := resp.(*kmsg.OffsetFetchResponse)
				m.Topics = keep(m.Topics, func(t *kmsg.OffsetFetchResponseTopic) bool { return g.allowed(security.OpDescribe, t.Topic) })
			}
			return false
		}
		return splitEntries(g, &r.Topics, func(t *kmsg.OffsetFetchRequestTopic) verdict { return g.topic(security.OpDescribe, t.Topic) },
			func(d []kmsg.OffsetFetchRequestTopic) kmsg.Request { c := *r; c.Topics = d; return &c }, "Topics")
	case *kmsg.DescribeGroupsRequest:
		return splitEntries(g, &r.Groups, func(name *string) verdict { return g.group(security.OpDescribe, *name) },
			func(d []string) kmsg.Request { c := *r; c.Groups = d; return &c }, "Groups")
	case *kmsg.ListGroupsRequest:
		// Kafka's rule: Describe on the cluster lists every group; without it, the groups
		// the principal may describe.
		if g.cluster(security.OpDescribe).code != 0 {
			p.amend = func(resp kmsg.Response) {
				m := resp.(*kmsg.ListGroupsResponse)
				m.Groups = keep(m.Groups, func(lg *kmsg.ListGroupsResponseGroup) bool { return g.group(security.OpDescribe, lg.Group).code == 0 })
			}
		}
	case *kmsg.InitProducerIDRequest:
		// An idempotent producer needs to write somewhere: Write on the cluster or on any
		// topic (Kafka's IdempotentWrite rule since 3.0). Transactional ids are refused by
		// the handler (no transactions), so TRANSACTIONAL_ID_AUTHORIZATION_FAILED never arises.
		if r.TransactionalID == nil && g.cluster(security.OpWrite).code != 0 && !az.AllowsAny(g.principal, security.OpWrite, security.ResourceTopic) {
			return g.refuse(verdict{kerr.ClusterAuthorizationFailed.Code, g.principal + " may write to no topic: no producer id"})
		}
	}
	return false
}

// authorizeMetadata is Metadata's step, apart from the handler (api_metadata.go): a named
// topic the principal may not describe is answered TOPIC_AUTHORIZATION_FAILED whether or
// not it exists, as is one the request would auto-create without Create on the cluster or
// the topic (Kafka's rule); a request for every topic lists only those it may describe.
func (s *Server) authorizeMetadata(g *gate, r *kmsg.MetadataRequest) bool {
	if r.Topics == nil || r.Version == 0 && len(r.Topics) == 0 {
		g.p.amend = func(resp kmsg.Response) {
			m := resp.(*kmsg.MetadataResponse)
			m.Topics = keep(m.Topics, func(t *kmsg.MetadataResponseTopic) bool {
				return t.Topic != nil && g.allowed(security.OpDescribe, *t.Topic)
			})
		}
		return false
	}
	g.serveEmpty = r.Version >= 1 // v0 would read no topics as every topic
	autoCreate := s.autoCreate(r)
	clusterCreate := autoCreate && g.cluster(security.OpCreate).code == 0
	return splitEntries(g, &r.Topics, func(t *kmsg.MetadataRequestTopic) verdict {
		if t.Topic == nil {
			return verdict{} // by id: the handler answers UNKNOWN_TOPIC_ID
		}
		if v := g.topic(security.OpDescribe, *t.Topic); v.code != 0 {
			return v
		}
		if autoCreate && !clusterCreate && s.b.Topic(*t.Topic) == nil {
			return g.topic(security.OpCreate, *t.Topic)
		}
		return verdict{}
	}, func(d []kmsg.MetadataRequestTopic) kmsg.Request { c := *r; c.Topics = d; return &c }, "Topics")
}

func (g *gate) allowed(op security.Operation, topic string) bool {
	return g.az.Authorize(g.principal, op, security.ResourceTopic, topic)
}

func (g *gate) topic(op security.Operation, name string) verdict {
	if g.allowed(op, name) {
		return verdict{}
	}
	return verdict{kerr.TopicAuthorizationFailed.Code, security.Denial(g.principal, op, security.ResourceTopic, name)}
}

func (g *gate) group(op security.Operation, name string) verdict {
	if g.az.Authorize(g.principal, op, security.ResourceGroup, name) {
		return verdict{}
	}
	return verdict{kerr.GroupAuthorizationFailed.Code, security.Denial(g.principal, op, security.ResourceGroup, name)}
}

func (g *gate) cluster(op security.Operation) verdict {
	if g.az.Authorize(g.principal, op, security.ResourceCluster, security.ClusterName) {
		return verdict{}
	}
	return verdict{kerr.ClusterAuthorizationFailed.Code, security.Denial(g.principal, op, security.ResourceCluster, security.ClusterName)}
}

// refuse answers the whole request with v's code (the API's fail) unless v allows it;
// true if it answered.
func (g *gate) refuse(v verdict) bool {
	if v.code == 0 {
		return false
	}
	g.p.reply(g.a.fail(g.req, v.code, v.msg), nil)
	return true
}

// splitEntries takes the entries judge refuses out of *items, in order. Each is answered
// by the API's fail on a request naming it alone (with builds a copy of the request
// holding the entries given), with its code and no top-level error, and the answers are
// appended to the response's field: the handler's reply's (through p.amend), or, when
// nothing is left (unless g.serveEmpty), a reply of their own sent here. True if it
// answered p.
func splitEntries[T any](g *gate, items *[]T, judge func(*T) verdict, with func([]T) kmsg.Request, field string) bool {
	var denied []kmsg.Response
	kept := (*items)[:0]
	for i := range *items {
		item := (*items)[i]
		v := judge(&item)
		if v.code == 0 {
			kept = append(kept, item)
			continue
		}
		resp := g.a.fail(with([]T{item}), v.code, v.msg)
		setTopLevelError(resp, 0)
		denied = append(denied, resp)
	}
	*items = kept
	if len(denied) == 0 {
		return false
	}
	add := func(resp kmsg.Response) {
		for _, d := range denied {
			appendField(resp, d, field)
		}
	}
	if len(kept) == 0 && !g.serveEmpty {
		resp := g.a.fail(with(nil), 0, "")
		add(resp)
		g.p.reply(resp, nil)
		return true
	}
	g.p.amend = add
	return false
}

// appendField appends src's slice field name to dst's (two responses of one type).
func appendField(dst, src kmsg.Response, name string) {
	d := reflect.ValueOf(dst).Elem().FieldByName(name)
	d.Set(reflect.AppendSlice(d, reflect.ValueOf(src).Elem().FieldByName(name)))
}

// keep returns the items pred keeps, in order, in items' array.
func keep[T any](items []T, pred func(*T) bool) []T {
	kept := items[:0]
	for i := range items {
		if pred(&items[i]) {
			kept = append(kept, items[i])
		}
	}
	return kept
}

func allowsAll[T any](items []T, pred func(*T) bool) bool {
	for i := range items {
		if !pred(&items[i]) {
			return false
		}
	}
	return true
}
