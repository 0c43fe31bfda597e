package kafka

import (
	"errors"

	"github.com/ringlog/ringlog/engine/group"
	"github.com/ringlog/ringlog/engine/shard"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Metadata (key 3), v0-v12: one broker (node 0, the advertised Kafka address), which leads
// every partition with itself as the only replica and ISR member. Topic ids are all zero
// (ringlog has none; Fetch v13+, which needs them, is not served). With AutoCreateTopics a
// named topic the broker lacks is created (AutoCreatePartitions partitions, the broker's
// topic defaults) when the request allows it (v4+ carries the client's wish).
var metadataAPI = api{
	key: keyMetadata, min: 0, max: 12,
	serve: func(s *Server, p *pending, req kmsg.Request) {
		r := req.(*kmsg.MetadataRequest)
		if s.wouldCreate(r) || len(r.Topics) > inlineTopicsMax || r.Topics == nil && len(s.b.Topics()) > inlineTopicsMax {
			go func() { p.reply(s.metadata(r), nil) }() // creates wait for every shard
			return
		}
		p.reply(s.metadata(r), nil)
	},
	fail: func(req kmsg.Request, code int16, _ string) kmsg.Response {
		r := req.(*kmsg.MetadataRequest)
		resp := r.ResponseKind().(*kmsg.MetadataResponse)
		resp.ErrorCode = code
		for _, t := range r.Topics {
			rt := kmsg.NewMetadataResponseTopic()
			rt.Topic, rt.ErrorCode = t.Topic, code
			resp.Topics = append(resp.Topics, rt)
		}
		return resp
	},
	entries: func(req kmsg.Request) int { return len(req.(*kmsg.MetadataRequest).Topics) },
}

// inlineTopicsMax: a metadata answer about more topics is built on a goroutine of its own.
const inlineTopicsMax = 64

// clusterID is what Metadata v2+ reports as the cluster id.
const clusterID = "ringlog"

// nodeID is this broker's id in Metadata: a single-broker cluster.
const nodeID = 0

func (s *Server) autoCreate(r *kmsg.MetadataRequest) bool {
	return s.cfg.AutoCreateTopics && (r.Version < 4 || r.AllowAutoTopicCreation)
}

func (s *Server) wouldCreate(r *kmsg.MetadataRequest) bool {
	if !s.autoCreate(r) {
		return false
	}
	for _, t := range r.Topics {
		if t.Topic != nil && s.b.Topic(*t.Topic) == nil {
			return true
		}
	}
	return false
}

func (s *Server) metadata(r *kmsg.MetadataRequest) *kmsg.MetadataResponse {
	resp := r.ResponseKind().(*kmsg.MetadataResponse)
	broker := kmsg.NewMetadataResponseBroker()
	broker.NodeID, broker.Host, broker.Port = nodeID, s.nodeHost, s.nodePort
	resp.Brokers = []kmsg.MetadataResponseBroker{broker}
	resp.ClusterID, resp.ControllerID = str(clusterID), nodeID
	all := r.Topics == nil || r.Version == 0 && len(r.Topics) == 0
	if all {
		for _, t := range s.b.Topics() {
			resp.Topics = append(resp.Topics, topicMetadata(t))
		}
		return resp
	}
	for _, rt := range r.Topics {
		if rt.Topic == nil {
			out := kmsg.NewMetadataResponseTopic()
			out.ErrorCode = kerr.UnknownTopicID.Code
			resp.Topics = append(resp.Topics, out)
			continue
		}
		name := *rt.Topic
		t := s.b.Topic(name)
		if t == nil && s.autoCreate(r) {
			err := s.b.CreateTopic(name, s.cfg.AutoCreatePartitions, nil)
			if err != nil && !errors.Is(err, shard.ErrTopicExists) {
				out := kmsg.NewMetadataResponseTopic()
				out.Topic, out.ErrorCode = str(name), codeFor(err)
				resp.Topics = append(resp.Topics, out)
				continue
			}
			t = s.b.Topic(name)
		}
		if t == nil {
			out := kmsg.NewMetadataResponseTopic()
			out.Topic, out.ErrorCode = str(name), kerr.UnknownTopicOrPartition.Code
			resp.Topics = append(resp.Topics, out)
			continue
		}
		resp.Topics = append(resp.Topics, topicMetadata(t))
	}
	return resp
}

func topicMetadata(t *shard.Topic) kmsg.MetadataResponseTopic {
	out := kmsg.NewMetadataResponseTopic()
	out.Topic, out.IsInternal = str(t.Name), t.Name == group.OffsetsTopic
	out.Partitions = make([]kmsg.MetadataResponseTopicPartition, len(t.Partitions))
	for i := range t.Partitions {
		p := kmsg.NewMetadataResponseTopicPartition()
		p.Partition, p.Leader, p.LeaderEpoch = int32(i), nodeID, 0
		p.Replicas, p.ISR = []int32{nodeID}, []int32{nodeID}
		out.Partitions[i] = p
	}
	return out
}
