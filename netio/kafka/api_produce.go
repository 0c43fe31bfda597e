package kafka

import (
	"errors"
	"fmt"
	"time"

	"github.com/ringlog/ringlog/engine/batch"
	"github.com/ringlog/ringlog/engine/shard"
	"github.com/ringlog/ringlog/netio"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Produce (key 0), v3-v9: record batch v2 only (v3 is the first version that carries it);
// zstd batches need v7+, as Kafka requires. Each partition's batches go to the broker core's
// ProduceFrom, the ringlog protocol's path: validation (CRC, every record, compressed
// sections decoded within their limit), idempotent sequence checks, group commit, acks.
var produceAPI = api{
	key: keyProduce, min: 3, max: 9,
	serve: func(s *Server, p *pending, req kmsg.Request) { s.produce(p, req.(*kmsg.ProduceRequest)) },
	fail:  failProduce,
	entries: func(req kmsg.Request) int {
		n := 0
		for _, t := range req.(*kmsg.ProduceRequest).Topics {
			n += 1 + len(t.Partitions)
		}
		return n
	},
}

// zstdProduceVersionMin: Kafka accepts zstd batches from Produce v7 on
// (UNSUPPORTED_COMPRESSION_TYPE before), so an old client never receives them on fetch.
const zstdProduceVersionMin = 7

func producePartition(partition int32) kmsg.ProduceResponseTopicPartition {
	rp := kmsg.NewProduceResponseTopicPartition()
	rp.Partition, rp.BaseOffset, rp.LogAppendTime, rp.LogStartOffset = partition, -1, -1, -1
	return rp
}

func (s *Server) produce(p *pending, req *kmsg.ProduceRequest) {
	if req.TransactionID != nil {
		p.reply(failProduce(req, kerr.InvalidRequest.Code, "transactions are not supported by this broker"), nil)
		return
	}
	if req.Acks != 0 && req.Acks != 1 && req.Acks != -1 {
		p.reply(failProduce(req, kerr.InvalidRequiredAcks.Code, fmt.Sprintf("acks must be 0, 1 or -1, got %d", req.Acks)), nil)
		return
	}
	resp := req.ResponseKind().(*kmsg.ProduceResponse)
	total := 0
	resp.Topics = make([]kmsg.ProduceResponseTopic, len(req.Topics))
	for i, t := range req.Topics {
		resp.Topics[i] = kmsg.NewProduceResponseTopic()
		resp.Topics[i].Topic = t.Topic
		resp.Topics[i].Partitions = make([]kmsg.ProduceResponseTopicPartition, len(t.Partitions))
		for j, part := range t.Partitions {
			resp.Topics[i].Partitions[j] = producePartition(part.Partition)
		}
		total += len(t.Partitions)
	}
	// An acks=all produce with a timeout (timeout_ms, the producer's request.timeout.ms) is
	// answered when it passes even though some partitions still wait for their followers:
	// those get REQUEST_TIMED_OUT (retriable); their records stay appended and may still
	// commit (the ringlog listener's rule, netio.PartitionAnswers).
	//
	// timeout_ms <= 0 leaves no time to wait for followers: as Kafka's DelayedProduce, whose
	// timer expires at once, the request is answered once every partition has been handed
	// to its shard, and those still waiting get REQUEST_TIMED_OUT. That applies when the
	// request names a replicated topic of a cluster; elsewhere the leader alone is the ISR
	// and the answer comes with its write, as Kafka's append moves a one-replica high
	// watermark at once (namesReplicated).
	var timeout time.Duration
	immediate := req.Acks == -1 && req.TimeoutMillis <= 0 && s.namesReplicated(req)
	if req.Acks == -1 && req.TimeoutMillis > 0 {
		timeout = time.Duration(req.TimeoutMillis) * time.Millisecond
	}
	answers := netio.NewPartitionAnswers(total, func(waiting []bool) {
		switch {
		case req.Acks == 0:
			p.reply(nil, nil)
			return
		case waiting != nil:
			markTimedOut(resp, waiting, timeout)
		}
		p.reply(resp, nil)
	})
	if total == 0 {
		return
	}
	if timeout > 0 {
		answers.Timeout(timeout, func(d time.Duration, f func()) func() bool { return time.AfterFunc(d, f).Stop })
	}
	if immediate {
		answers.Timeout(0, func(time.Duration, func()) func() bool { return func() bool { return false } })
		defer answers.Expire() // after the loop's deferred Unlock
	}
	// The partitions' answers are written under the answers' lock: the timer may answer
	// while shards still hold some of the partitions.
	answers.Lock()
	defer answers.Unlock()
	k := 0
	for i, t := range req.Topics {
		for j, part := range t.Partitions {
			out, idx := &resp.Topics[i].Partitions[j], k
			k++
			records := part.Records
			if timeout > 0 || immediate {
				// The timer may answer, and so hand the frame back to the pool, before the
				// shard has written these bytes: give the shard its own copy.
				records = append([]byte(nil), records...)
			}
			tp := shard.TopicPartition{Topic: t.Topic, Partition: part.Partition}
			batches, err := netio.SplitBatches(records)
			if err == nil && req.Version < zstdProduceVersionMin {
				err = refuseZstd(batches, req.Version)
			}
			if err == nil {
				err = s.checkLeader(tp, -1)
			}
			if err != nil {
				answers.AnswerLocked(idx, func() {
					out.ErrorCode, out.ErrorMessage = codeFor(err), message(err)
					if isUnsupportedCompression(err) {
						out.ErrorCode = kerr.UnsupportedCompressionType.Code
					}
				})
				continue
			}
			answers.Unlock() // the shard may answer inline, on this goroutine
			s.b.ProduceFrom(shard.CallerNone, tp, batches, req.Acks, func(r shard.ProduceResult) {
				answers.Answer(idx, func() {
					out.BaseOffset, out.LogStartOffset = r.BaseOffset, r.LogStartOffset
					out.ErrorCode, out.ErrorMessage = codeFor(r.Err), message(r.Err)
				})
			})
			answers.Lock()
		}
	}
}

// namesReplicated reports whether req names a replicated topic of this broker's cluster:
// only those wait for followers.
func (s *Server) namesReplicated(req *kmsg.ProduceRequest) bool {
	if s.cfg.Cluster == nil {
		return false
	}
	for _, t := range req.Topics {
		if s.cfg.Cluster.Replicated(t.Topic) {
			return true
		}
	}
	return false
}

// markTimedOut answers the partitions still waiting (by request position) with
// REQUEST_TIMED_OUT.
func markTimedOut(resp *kmsg.ProduceResponse, waiting []bool, timeout time.Duration) {
	msg := fmt.Sprintf("acks=all: not replicated within the request's timeout (%v); the records may still be committed", timeout)
	if timeout <= 0 {
		msg = "acks=all with timeout_ms <= 0: answered at once, before replication (as Kafka); the records may still be committed"
	}
	k := 0
	for i := range resp.Topics {
		for j := range resp.Topics[i].Partitions {
			if waiting[k] {
				out := &resp.Topics[i].Partitions[j]
				out.ErrorCode, out.ErrorMessage = kerr.RequestTimedOut.Code, str(msg)
			}
			k++
		}
	}
}

var errZstdNeedsV7 = fmt.Errorf("zstd batches need Produce v%d or later", zstdProduceVersionMin)

// refuseZstd fails when a batch of a pre-v7 produce is zstd-compressed.
func refuseZstd(batches [][]byte, version int16) error {
	for _, b := range batches {
		if h, err := batch.ParseHeader(b); err == nil && h.Compression() == batch.CodecZstd {
			return fmt.Errorf("%w (this request is v%d)", errZstdNeedsV7, version)
		}
	}
	return nil
}

func isUnsupportedCompression(err error) bool {
	return errors.Is(err, errZstdNeedsV7) || errors.Is(err, batch.ErrUnsupportedCodec)
}

func failProduce(req kmsg.Request, code int16, msg string) kmsg.Response {
	r := req.(*kmsg.ProduceRequest)
	resp := r.ResponseKind().(*kmsg.ProduceResponse)
	for _, t := range r.Topics {
		rt := kmsg.NewProduceResponseTopic()
		rt.Topic = t.Topic
		for _, part := range t.Partitions {
			rp := producePartition(part.Partition)
			rp.ErrorCode, rp.ErrorMessage = code, str(msg)
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}
