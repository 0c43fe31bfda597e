package kafka

import (
	"errors"

	"github.com/ringlog/ringlog/engine/group"
	"github.com/ringlog/ringlog/engine/shard"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Metadata (key 3), v0-v12: a single broker is node 0 (the advertised Kafka address) and
// leads every partition with itself as the only replica and ISR member; a cluster's
// brokers and replicated partitions are described from the controller (cluster.go). Topic ids are all zero
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

// metadata answers in three steps: the brokers and controller, the topics the request
// names (or all of them), then each topic's description. A step that filters topics (what
// a client may describe) goes between the last two.
func (s *Server) metadata(r *kmsg.MetadataRequest) *kmsg.MetadataResponse {
	resp := r.ResponseKind().(*kmsg.MetadataResponse)
	v := s.clusterView()
	resp.Brokers = s.brokers(v)
	resp.ClusterID, resp.ControllerID = str(clusterID), s.controllerID()
	for _, name := range s.metadataTopics(r, v, resp) {
		resp.Topics = append(resp.Topics, s.topicMetadata(v, name))
	}
	return resp
}

// metadataTopics lists the topics to describe: every topic (this broker's and the
// controller's), or those the request names, creating missing ones when auto-creation is
// on. Names that cannot be described are answered in resp at once.
func (s *Server) metadataTopics(r *kmsg.MetadataRequest, v clusterView, resp *kmsg.MetadataResponse) []string {
	if r.Topics == nil || r.Version == 0 && len(r.Topics) == 0 {
		var names []string
		for _, t := range s.b.Topics() {
			names = append(names, t.Name)
		}
		if v.md != nil {
			for name := range v.md.Topics {
				if s.b.Topic(name) == nil { // not opened here yet
					names = append(names, name)
				}
			}
		}
		return names
	}
	names := make([]string, 0, len(r.Topics))
	seen := make(map[string]struct{}, len(r.Topics))
	for _, rt := range r.Topics {
		if rt.Topic != nil {
			// A topic named twice is answered once, as Kafka's broker does (it reads the
			// names as a set): a 45 KB request naming a 500-partition topic 9,000 times
			// asked for 4.5 million partition answers (TestAdversarialKafkaRepeatedNames).
			if _, dup := seen[*rt.Topic]; dup {
				continue
			}
			seen[*rt.Topic] = struct{}{}
		}
		if rt.Topic == nil {
			out := kmsg.NewMetadataResponseTopic()
			out.ErrorCode = kerr.UnknownTopicID.Code
			resp.Topics = append(resp.Topics, out)
			continue
		}
		name := *rt.Topic
		if s.b.Topic(name) == nil && v.replicated(name) == nil {
			if code := s.autoCreateTopic(r, name); code != 0 {
				out := kmsg.NewMetadataResponseTopic()
				out.Topic, out.ErrorCode = str(name), code
				resp.Topics = append(resp.Topics, out)
				continue
			}
			v = s.clusterView() // a replicated create is in the controller's metadata now
		}
		names = append(names, name)
	}
	return names
}

// autoCreateTopic creates a missing topic when the request and the broker allow it (on a
// cluster through the controller, replication factor 1); the Kafka code when the topic
// does not exist afterwards.
func (s *Server) autoCreateTopic(r *kmsg.MetadataRequest, name string) int16 {
	if !s.autoCreate(r) {
		return kerr.UnknownTopicOrPartition.Code
	}
	var err error
	if s.cfg.Cluster != nil {
		t := kmsg.NewCreateTopicsRequestTopic()
		t.Topic, t.NumPartitions, t.ReplicationFactor = name, int32(s.cfg.AutoCreatePartitions), 1
		if _, cerr := s.createReplicated(t, s.cfg.AutoCreatePartitions, nil, false, 0); cerr != nil && cerr.code != kerr.TopicAlreadyExists.Code {
			return cerr.code
		}
	} else {
		err = s.b.CreateTopic(name, s.cfg.AutoCreatePartitions, nil)
	}
	if err != nil && !errors.Is(err, shard.ErrTopicExists) {
		return codeFor(err)
	}
	return 0
}

// topicMetadata describes one topic: a replicated topic as the controller has it, any
// other as led by this broker alone at leader epoch 0.
func (s *Server) topicMetadata(v clusterView, name string) kmsg.MetadataResponseTopic {
	out := kmsg.NewMetadataResponseTopic()
	out.Topic, out.IsInternal = str(name), name == group.OffsetsTopic
	if ct := v.replicated(name); ct != nil {
		out.Partitions = replicatedPartitions(v, ct)
		return out
	}
	t := s.b.Topic(name)
	if t == nil {
		out.ErrorCode = kerr.UnknownTopicOrPartition.Code
		return out
	}
	self := s.nodeID()
	out.Partitions = make([]kmsg.MetadataResponseTopicPartition, len(t.Partitions))
	for i := range t.Partitions {
		p := kmsg.NewMetadataResponseTopicPartition()
		p.Partition, p.Leader, p.LeaderEpoch = int32(i), self, 0
		p.Replicas, p.ISR = []int32{self}, []int32{self}
		out.Partitions[i] = p
	}
	return out
}
