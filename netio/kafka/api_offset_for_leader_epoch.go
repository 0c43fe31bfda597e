package kafka

import (
	"github.com/ringlog/ringlog/engine/shard"
	"github.com/ringlog/ringlog/replication/isr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// OffsetForLeaderEpoch (key 23), v0-v4: where the leader's log stops holding records of the
// asked leader epoch (KIP-101), which consumers use to detect a log truncated under them
// after a leader change (KIP-320). A replicated partition is answered by its leader from
// the partition's epoch checkpoint — the answer the ringlog protocol's
// OffsetsForLeaderEpoch gives followers (cluster.Manager.OffsetsForLeaderEpoch): the
// latest epoch ends at the log end offset, an older one at the start of the next epoch, an
// epoch newer than any is (-1, -1). Elsewhere NOT_LEADER_OR_FOLLOWER. From v2 on the
// request's current_leader_epoch is checked: older than the leader's is
// FENCED_LEADER_EPOCH, newer UNKNOWN_LEADER_EPOCH. A partition that is not replicated (a
// single broker's) has one epoch, 0, from offset 0. Follower requests (v3+ replica id >= 0)
// are answered like a consumer's.
var offsetForLeaderEpochAPI = api{
	key: keyOffsetForLeaderEpoch, min: 0, max: 4,
	serve: func(s *Server, p *pending, req kmsg.Request) {
		go func() { p.reply(s.offsetForLeaderEpoch(req.(*kmsg.OffsetForLeaderEpochRequest)), nil) }() // waits for shards
	},
	fail: func(req kmsg.Request, code int16, _ string) kmsg.Response {
		r := req.(*kmsg.OffsetForLeaderEpochRequest)
		resp := r.ResponseKind().(*kmsg.OffsetForLeaderEpochResponse)
		for _, t := range r.Topics {
			rt := kmsg.NewOffsetForLeaderEpochResponseTopic()
			rt.Topic = t.Topic
			for _, part := range t.Partitions {
				rt.Partitions = append(rt.Partitions, epochEndOffset(part.Partition, code, isr.EpochEndOffset{Epoch: isr.UndefinedEpoch, EndOffset: isr.UndefinedOffset}))
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return resp
	},
	entries: func(req kmsg.Request) int {
		n := 0
		for _, t := range req.(*kmsg.OffsetForLeaderEpochRequest).Topics {
			n += 1 + len(t.Partitions)
		}
		return n
	},
}

func epochEndOffset(partition int32, code int16, e isr.EpochEndOffset) kmsg.OffsetForLeaderEpochResponseTopicPartition {
	rp := kmsg.NewOffsetForLeaderEpochResponseTopicPartition()
	rp.Partition, rp.ErrorCode, rp.LeaderEpoch, rp.EndOffset = partition, code, e.Epoch, e.EndOffset
	return rp
}

func (s *Server) offsetForLeaderEpoch(r *kmsg.OffsetForLeaderEpochRequest) *kmsg.OffsetForLeaderEpochResponse {
	resp := r.ResponseKind().(*kmsg.OffsetForLeaderEpochResponse)
	v := s.clusterView()
	for _, t := range r.Topics {
		rt := kmsg.NewOffsetForLeaderEpochResponseTopic()
		rt.Topic = t.Topic
		for _, part := range t.Partitions {
			current := part.CurrentLeaderEpoch
			if r.Version < 2 {
				current = -1 // not in the request before v2
			}
			tp := shard.TopicPartition{Topic: t.Topic, Partition: part.Partition}
			e, err := s.epochEndOffset(v, tp, current, part.LeaderEpoch)
			rt.Partitions = append(rt.Partitions, epochEndOffset(part.Partition, codeFor(err), e))
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

// epochEndOffset answers for one partition (see offsetForLeaderEpochAPI).
func (s *Server) epochEndOffset(v clusterView, tp shard.TopicPartition, current, epoch int32) (isr.EpochEndOffset, error) {
	undefined := isr.EpochEndOffset{Epoch: isr.UndefinedEpoch, EndOffset: isr.UndefinedOffset}
	if err := s.checkLeader(tp, current); err != nil {
		return undefined, err
	}
	if v.replicated(tp.Topic) != nil {
		return s.cfg.Cluster.OffsetsForLeaderEpoch(tp, current, epoch)
	}
	_, end, err := s.b.LogOffsets(tp)
	if err != nil {
		return undefined, err
	}
	return localEpochs.EndOffsetFor(epoch, end), nil
}

// localEpochs is the epoch cache of a partition that is not replicated: epoch 0 from
// offset 0, what Metadata says of it.
var localEpochs = func() *isr.EpochCache {
	c, err := isr.NewEpochCache([]isr.EpochEntry{{Epoch: 0, StartOffset: 0}})
	if err != nil {
		panic(err)
	}
	return c
}()
