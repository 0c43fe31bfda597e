package kafka

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// CreatePartitions (key 37), v0-v3: served only to refuse clearly. ringlog fixes a topic's
// partitions (and their shards) at creation, so growing a topic is refused with
// INVALID_REQUEST and a message saying so; a count at or below the current one gets
// Kafka's own INVALID_PARTITIONS; an unknown topic UNKNOWN_TOPIC_OR_PARTITION. timeout_ms
// <= 0 is answered REQUEST_TIMED_OUT for every topic, as Kafka's KRaft controller answers
// (deadlinePassed).
var createPartitionsAPI = api{
	key: keyCreatePartitions, min: 0, max: 3,
	serve: func(s *Server, p *pending, req kmsg.Request) {
		r := req.(*kmsg.CreatePartitionsRequest)
		if deadlinePassed(r.TimeoutMillis) {
			p.reply(failCreatePartitions(req, kerr.RequestTimedOut.Code, deadlinePassedMessage("changed")), nil)
			return
		}
		resp := r.ResponseKind().(*kmsg.CreatePartitionsResponse)
		names := make([]string, len(r.Topics))
		for i, t := range r.Topics {
			names[i] = t.Topic
		}
		repeated := repeatedNames(names)
		for _, t := range r.Topics {
			if answer, dup := repeated[t.Topic]; dup { // once, as Kafka's controller answers
				if answer {
					resp.Topics = append(resp.Topics, createPartitionsResult(t.Topic, kerr.InvalidRequest.Code, duplicateTopicMessage))
					repeated[t.Topic] = false
				}
				continue
			}
			code, msg := kerr.InvalidRequest.Code, fmt.Sprintf("topic %q: ringlog cannot add partitions to an existing topic (partitions and their shards are fixed at creation); create a new topic with %d partitions", t.Topic, t.Count)
			switch topic := s.b.Topic(t.Topic); {
			case topic == nil:
				code, msg = kerr.UnknownTopicOrPartition.Code, fmt.Sprintf("topic %q does not exist", t.Topic)
			case int(t.Count) <= len(topic.Partitions):
				code, msg = kerr.InvalidPartitions.Code, fmt.Sprintf("topic %q has %d partitions; %d would not add any", t.Topic, len(topic.Partitions), t.Count)
			}
			resp.Topics = append(resp.Topics, createPartitionsResult(t.Topic, code, msg))
		}
		p.reply(resp, nil)
	},
	fail:    failCreatePartitions,
	entries: func(req kmsg.Request) int { return len(req.(*kmsg.CreatePartitionsRequest).Topics) },
}

func failCreatePartitions(req kmsg.Request, code int16, msg string) kmsg.Response {
	r := req.(*kmsg.CreatePartitionsRequest)
	resp := r.ResponseKind().(*kmsg.CreatePartitionsResponse)
	for _, t := range r.Topics {
		resp.Topics = append(resp.Topics, createPartitionsResult(t.Topic, code, msg))
	}
	return resp
}

func createPartitionsResult(topic string, code int16, msg string) kmsg.CreatePartitionsResponseTopic {
	rt := kmsg.NewCreatePartitionsResponseTopic()
	rt.Topic, rt.ErrorCode, rt.ErrorMessage = topic, code, str(msg)
	return rt
}
