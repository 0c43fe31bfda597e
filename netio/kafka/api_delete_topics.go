package kafka

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// DeleteTopics (key 20), v0-v5 (by name; v6+ may name topics by id, which ringlog lacks):
// the broker core's DeleteTopic; a replicated topic is deleted through the controller, as
// the ringlog listener deletes it (answered once this broker has deleted its copy).
// timeout_ms <= 0 is answered REQUEST_TIMED_OUT for every topic and nothing is deleted,
// as Kafka's KRaft controller answers (deadlinePassed).
var deleteTopicsAPI = api{
	key: keyDeleteTopics, min: 0, max: 5,
	serve: func(s *Server, p *pending, req kmsg.Request) {
		r := req.(*kmsg.DeleteTopicsRequest)
		if deadlinePassed(r.TimeoutMillis) {
			p.reply(failDeleteTopics(req, kerr.RequestTimedOut.Code, deadlinePassedMessage("deleted")), nil)
			return
		}
		go func() { // waits for every shard
			resp := r.ResponseKind().(*kmsg.DeleteTopicsResponse)
			repeated := repeatedNames(r.TopicNames)
			for _, name := range r.TopicNames {
				// A topic named twice is answered once and not deleted, as Kafka's
				// controller answers (each copy was a delete waiting for every shard).
				if answer, dup := repeated[name]; dup {
					if answer {
						resp.Topics = append(resp.Topics, deleteTopicResult(name, kerr.InvalidRequest.Code, str(duplicateTopicMessage)))
						repeated[name] = false
					}
					continue
				}
				var err error
				if s.cfg.Cluster != nil && s.cfg.Cluster.Replicated(name) {
					err = s.deleteReplicated(name, r.TimeoutMillis)
				} else {
					err = s.b.DeleteTopic(name)
				}
				resp.Topics = append(resp.Topics, deleteTopicResult(name, codeFor(err), message(err)))
			}
			p.reply(resp, nil)
		}()
	},
	fail:    failDeleteTopics,
	entries: func(req kmsg.Request) int { return len(req.(*kmsg.DeleteTopicsRequest).TopicNames) },
}

func failDeleteTopics(req kmsg.Request, code int16, msg string) kmsg.Response {
	r := req.(*kmsg.DeleteTopicsRequest)
	resp := r.ResponseKind().(*kmsg.DeleteTopicsResponse)
	for _, name := range r.TopicNames {
		resp.Topics = append(resp.Topics, deleteTopicResult(name, code, str(msg)))
	}
	return resp
}

func deleteTopicResult(name string, code int16, msg *string) kmsg.DeleteTopicsResponseTopic {
	rt := kmsg.NewDeleteTopicsResponseTopic()
	rt.Topic, rt.ErrorCode, rt.ErrorMessage = str(name), code, msg
	return rt
}
