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
// timeout_ms <= 0 (validate_only too) is answered REQUEST_TIMED_OUT for every topic and
// nothing is created, as Kafka's KRaft controller answers (see deadlinePassed).
var createTopicsAPI = api{
	key: keyCreateTopics, min: 0, max: 7,
	serve: func(s *Server, p *pending, req kmsg.Request) {
		r := req.(*kmsg.CreateTopicsRequest)
		if deadlinePassed(r.TimeoutMillis) {
			p.reply(failCreateTopics(req, kerr.RequestTimedOut.Code, deadlinePassedMessage("created")), nil)
			return
		}
		go func() { p.reply(s.createTopics(r), nil) }() // waits for every shard
	},
	fail: failCreateTopics,
	entries: func(req kmsg.Request) int {
		n := 0
		for _, t := range req.(*kmsg.CreateTopicsRequest).Topics {
			n += 1 + len(t.Configs) + len(t.ReplicaAssignment)
		}
		return n
	},
}

func failCreateTopics(req kmsg.Request, code int16, msg string) kmsg.Response {
	r := req.(*kmsg.CreateTopicsRequest)
	resp := r.ResponseKind().(*kmsg.CreateTopicsResponse)
	for _, t := range r.Topics {
		resp.Topics = append(resp.Topics, createTopicResult(t.Topic, code, msg))
	}
	return resp
}

// deadlinePassed reports whether an admin request's timeout_ms (CreateTopics,
// DeleteTopics, CreatePartitions) leaves no time at all. Kafka's KRaft controller turns
// timeout_ms into a deadline (ControllerRequestContext.requestTimeoutMsToDeadlineNs: now +
// timeout) on the controller's event; its event queue (KafkaEventQueue) completes an event
// whose deadline has passed with a TimeoutException before running it, so timeout_ms <= 0
// answers REQUEST_TIMED_OUT for every topic and changes nothing, validate_only included.
// (ZooKeeper-era brokers, ZkAdminManager.createTopics, wrote the topic first and then
// answered REQUEST_TIMED_OUT without waiting; validate_only answered normally.) ringlog
// matches KRaft, the only mode Kafka 4 has.
func deadlinePassed(timeoutMs int32) bool { return timeoutMs <= 0 }

func deadlinePassedMessage(what string) string {
	return "timeout_ms <= 0: the deadline passed before the request ran, so nothing was " + what + " (as Kafka's KRaft controller answers)"
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
	names := make([]string, len(r.Topics))
	for i, t := range r.Topics {
		names[i] = t.Topic
	}
	repeated := repeatedNames(names)
	for _, t := range r.Topics {
		if repeated != nil {
			// A topic named twice is answered once and not created, as Kafka's controller
			// answers: 9,000 copies of one name were 9,000 creates, each waiting for every
			// shard (TestAdversarialKafkaRepeatedAdminNames).
			if answer, dup := repeated[t.Topic]; dup {
				if answer {
					resp.Topics = append(resp.Topics, createTopicResult(t.Topic, kerr.InvalidRequest.Code, duplicateTopicMessage))
					repeated[t.Topic] = false
				}
				continue
			}
		}
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
