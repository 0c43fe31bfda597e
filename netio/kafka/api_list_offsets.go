package kafka

import (
	"sync"

	"github.com/ringlog/ringlog/engine/shard"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// ListOffsets (key 2), v1-v6: the broker core's ListOffset per partition — -1 the high
// watermark, -2 the log start offset, any other timestamp the first offset whose record
// timestamp is at or after it (offset -1 when none is, as Kafka answers). Not served: v0
// (several offsets per partition) and v7+ (timestamp -3, the offset of the largest
// timestamp).
var listOffsetsAPI = api{
	key: keyListOffsets, min: 1, max: 6,
	serve: func(s *Server, p *pending, req kmsg.Request) { s.listOffsets(p, req.(*kmsg.ListOffsetsRequest)) },
	fail:  failListOffsets,
	entries: func(req kmsg.Request) int {
		n := 0
		for _, t := range req.(*kmsg.ListOffsetsRequest).Topics {
			n += 1 + len(t.Partitions)
		}
		return n
	},
}

func listOffsetsPartition(partition int32) kmsg.ListOffsetsResponseTopicPartition {
	rp := kmsg.NewListOffsetsResponseTopicPartition()
	rp.Partition, rp.Timestamp, rp.Offset, rp.LeaderEpoch = partition, -1, -1, -1
	return rp
}

func (s *Server) listOffsets(p *pending, req *kmsg.ListOffsetsRequest) {
	resp := req.ResponseKind().(*kmsg.ListOffsetsResponse)
	resp.Topics = make([]kmsg.ListOffsetsResponseTopic, len(req.Topics))
	var wg sync.WaitGroup
	for i, t := range req.Topics {
		rt := &resp.Topics[i]
		*rt = kmsg.NewListOffsetsResponseTopic()
		rt.Topic = t.Topic
		rt.Partitions = make([]kmsg.ListOffsetsResponseTopicPartition, len(t.Partitions))
		for j, part := range t.Partitions {
			out := &rt.Partitions[j]
			*out = listOffsetsPartition(part.Partition)
			tp := shard.TopicPartition{Topic: t.Topic, Partition: part.Partition}
			if err := s.checkLeader(tp, part.CurrentLeaderEpoch); err != nil {
				out.ErrorCode = codeFor(err)
				continue
			}
			wg.Add(1)
			s.b.ListOffset(tp, part.Timestamp, func(offset int64, err error) {
				out.Offset, out.ErrorCode = offset, codeFor(err)
				if part.Timestamp >= 0 && offset >= 0 {
					out.Timestamp = part.Timestamp
				}
				wg.Done()
			})
		}
	}
	go func() { // the answers come from shard loops; never wait on the reader
		wg.Wait()
		p.reply(resp, nil)
	}()
}

func failListOffsets(req kmsg.Request, code int16, _ string) kmsg.Response {
	r := req.(*kmsg.ListOffsetsRequest)
	resp := r.ResponseKind().(*kmsg.ListOffsetsResponse)
	for _, t := range r.Topics {
		rt := kmsg.NewListOffsetsResponseTopic()
		rt.Topic = t.Topic
		for _, part := range t.Partitions {
			rp := listOffsetsPartition(part.Partition)
			rp.ErrorCode = code
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}
