package kafka

import (
	"github.com/ringlog/ringlog/engine/group"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// OffsetFetch (key 9), v1-v7: a group's committed offsets (null topics, v2+: all of them).
// v0 (offsets kept in ZooKeeper) and v8+ (several groups at once) are not served.
var offsetFetchAPI = api{
	key: keyOffsetFetch, min: 1, max: 7,
	serve: func(s *Server, p *pending, req kmsg.Request) {
		r := req.(*kmsg.OffsetFetchRequest)
		of := group.OffsetFetch{Group: r.Group}
		for _, t := range r.Topics {
			for _, part := range t.Partitions {
				of.Partitions = append(of.Partitions, group.TopicPartition{Topic: t.Topic, Partition: part})
			}
		}
		if r.Topics != nil && of.Partitions == nil {
			of.Partitions = []group.TopicPartition{} // named no partition: none, not all
		}
		s.groupDo(p, of, func(resp group.Response) kmsg.Response {
			g := resp.(group.OffsetFetchResponse)
			out := r.ResponseKind().(*kmsg.OffsetFetchResponse)
			out.ErrorCode = int16(g.Err)
			for _, f := range g.Partitions {
				if n := len(out.Topics); n == 0 || out.Topics[n-1].Topic != f.Topic {
					rt := kmsg.NewOffsetFetchResponseTopic()
					rt.Topic = f.Topic
					out.Topics = append(out.Topics, rt)
				}
				rp := kmsg.NewOffsetFetchResponseTopicPartition()
				rp.Partition, rp.Offset, rp.LeaderEpoch, rp.Metadata = f.Partition, f.Offset, f.LeaderEpoch, str(f.Metadata)
				rt := &out.Topics[len(out.Topics)-1]
				rt.Partitions = append(rt.Partitions, rp)
			}
			if r.Version < 2 && out.ErrorCode != 0 { // no top-level code before v2: on every partition
				for i := range out.Topics {
					for j := range out.Topics[i].Partitions {
						out.Topics[i].Partitions[j].ErrorCode = out.ErrorCode
					}
				}
			}
			return out
		})
	},
	fail: func(req kmsg.Request, code int16, _ string) kmsg.Response {
		r := req.(*kmsg.OffsetFetchRequest)
		out := r.ResponseKind().(*kmsg.OffsetFetchResponse)
		out.ErrorCode = code
		for _, t := range r.Topics {
			rt := kmsg.NewOffsetFetchResponseTopic()
			rt.Topic = t.Topic
			for _, part := range t.Partitions {
				rp := kmsg.NewOffsetFetchResponseTopicPartition()
				rp.Partition, rp.Offset, rp.ErrorCode = part, -1, code
				rt.Partitions = append(rt.Partitions, rp)
			}
			out.Topics = append(out.Topics, rt)
		}
		return out
	},
	entries: func(req kmsg.Request) int {
		n := 1
		for _, t := range req.(*kmsg.OffsetFetchRequest).Topics {
			n += 1 + len(t.Partitions)
		}
		return n
	},
}
