package kafka

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// CreateTopics (key 19), v0-v7: the broker core's CreateTopic (or ValidateTopic for
// validate_only); partitions -1 take AutoCreatePartitions. A single broker takes
// replication factor 1 or -1, and a manual assignment when every replica list is [0]. On a
// cluster the create goes through the controller (any replication factor up to the live
// brokers, -1 meaning 1; no manual assignment), as the ringlog listener's does.
var createTopicsAPI = api{
	key: keyCreateTopics, min: 0, max: 7,
	serve: func(s *Server, p *pending, req kmsg.Request) {
		go func() { p.reply(s.createTopics(req.(*kmsg.CreateTopicsRequest)), nil) }() // waits for every shard
	},
	fail: func(req kmsg.Request, code int16, msg string) kmsg.Response {
		r := req.(*kmsg.CreateTopicsRequest)
		resp := r.ResponseKind().(*kmsg.CreateTopicsResponse)
		for _, t := range r.Topics {
			resp.Topics = append(resp.Topics, createTopicResult(t.Topic, code, msg))
		}
		return resp
	},
	entries: func(req kmsg.Request) int {
		n := 0
		for _, t := range req.(*kmsg.CreateTopicsRequest).Topics {
			n += 1 + len(t.Configs) + len(t.ReplicaAssignment)
		}
		return n
	},
}

func createTopicResult(topic string, code int16, msg string) kmsg.CreateTopicsResponseTopic {
	rt := kmsg.NewCreateTopicsResponseTopic()
	rt.Topic, rt.ErrorCode, rt.NumPartitions, rt.ReplicationFactor = topic, code, -1, -1
	if msg != "" {
		rt.ErrorMessage = str(msg)
	}
	return rt
}

func (s *Server) createTopics(r *kmsg.CreateTopicsRequest) *kmsg.CreateTopicsResponse {
	resp := r.ResponseKind().(*kmsg.CreateTopicsResponse)
	for _, t := range r.Topics {
		partitions, rf, err := s.createTopic(t, r.ValidateOnly, r.TimeoutMillis)
		rt := createTopicResult(t.Topic, 0, "")
		if err != nil {
			rt = createTopicResult(t.Topic, err.code, err.msg)
		} else {
			rt.NumPartitions, rt.ReplicationFactor = int32(partitions), rf
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

type codedError struct {
	code int16
	msg  string
}

// createTopic creates (or validates) one topic and returns its partition count and
// replication factor.
func (s *Server) createTopic(t kmsg.CreateTopicsRequestTopic, validateOnly bool, timeoutMs int32) (int, int16, *codedError) {
	partitions := int(t.NumPartitions)
	if len(t.ReplicaAssignment) > 0 {
		partitions = len(t.ReplicaAssignment)
	}
	if partitions == -1 {
		partitions = s.cfg.AutoCreatePartitions
	}
	configs := make(map[string]string, len(t.Configs))
	for _, c := range t.Configs {
		if c.Value != nil {
			configs[c.Name] = *c.Value
		}
	}
	if s.cfg.Cluster != nil {
		rf, err := s.createReplicated(t, partitions, configs, validateOnly, timeoutMs)
		return partitions, rf, err
	}
	if t.ReplicationFactor != -1 && t.ReplicationFactor != 1 && len(t.ReplicaAssignment) == 0 {
		return 0, 0, &codedError{kerr.InvalidReplicationFactor.Code, fmt.Sprintf("replication factor %d: this is a single-broker cluster (want 1, or -1 for the default)", t.ReplicationFactor)}
	}
	for _, a := range t.ReplicaAssignment {
		if len(a.Replicas) != 1 || a.Replicas[0] != localNodeID {
			return 0, 0, &codedError{kerr.InvalidReplicaAssignment.Code, fmt.Sprintf("partition %d assigned to %v: the only replica is node %d", a.Partition, a.Replicas, localNodeID)}
		}
	}
	var err error
	if validateOnly {
		err = s.b.ValidateTopic(t.Topic, partitions, configs)
	} else {
		err = s.b.CreateTopic(t.Topic, partitions, configs)
	}
	if err != nil {
		return 0, 0, &codedError{codeFor(err), err.Error()}
	}
	return partitions, 1, nil
}
