package kafka

import (
	"github.com/ringlog/ringlog/engine/group"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// OffsetCommit (key 8), v0-v8: commits into __consumer_offsets through the group's
// coordinator, the same store the ringlog protocol commits to. v1's per-partition commit
// timestamp and v2-v4's retention time are not kept (offsets expire with the group, as in
// Kafka 2.1+).
var offsetCommitAPI = api{
	key: keyOffsetCommit, min: 0, max: 8,
	serve: func(s *Server, p *pending, req kmsg.Request) {
		r := req.(*kmsg.OffsetCommitRequest)
		c := group.OffsetCommit{Group: r.Group, MemberID: r.MemberID, InstanceID: deref(r.InstanceID), Generation: r.Generation}
		if r.Version == 0 {
			c.Generation = -1 // v0 commits outside group management
		}
		for _, t := range r.Topics {
			for _, part := range t.Partitions {
				c.Offsets = append(c.Offsets, group.CommitOffset{Topic: t.Topic, Partition: part.Partition, Offset: part.Offset,
					LeaderEpoch: part.LeaderEpoch, Metadata: deref(part.Metadata)})
			}
		}
		s.groupDo(p, c, func(resp group.Response) kmsg.Response {
			codes := map[topicPartition]int16{}
			for _, res := range resp.(group.OffsetCommitResponse).Partitions {
				codes[topicPartition{res.Topic, res.Partition}] = int16(res.Err)
			}
			return commitResponse(r, func(topic string, partition int32) int16 { return codes[topicPartition{topic, partition}] })
		})
	},
	fail: func(req kmsg.Request, code int16, _ string) kmsg.Response {
		return commitResponse(req.(*kmsg.OffsetCommitRequest), func(string, int32) int16 { return code })
	},
	entries: func(req kmsg.Request) int {
		n := 1
		for _, t := range req.(*kmsg.OffsetCommitRequest).Topics {
			n += 1 + len(t.Partitions)
		}
		return n
	},
}

type topicPartition struct {
	topic     string
	partition int32
}

// commitResponse answers every partition r names, in r's order, with code(topic, partition).
func commitResponse(r *kmsg.OffsetCommitRequest, code func(string, int32) int16) *kmsg.OffsetCommitResponse {
	out := r.ResponseKind().(*kmsg.OffsetCommitResponse)
	for _, t := range r.Topics {
		rt := kmsg.NewOffsetCommitResponseTopic()
		rt.Topic = t.Topic
		for _, part := range t.Partitions {
			rp := kmsg.NewOffsetCommitResponseTopicPartition()
			rp.Partition, rp.ErrorCode = part.Partition, code(t.Topic, part.Partition)
			rt.Partitions = append(rt.Partitions, rp)
		}
		out.Topics = append(out.Topics, rt)
	}
	return out
}
