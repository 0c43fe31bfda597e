package kafka

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
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
	total := 0
	for _, t := range req.Topics {
		total += len(t.Partitions)
	}
	c := getProduceCall(p, req, total)
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
	immediate := req.Acks == -1 && req.TimeoutMillis <= 0 && s.namesReplicated(req)
	if req.Acks == -1 && req.TimeoutMillis > 0 {
		c.timeout = time.Duration(req.TimeoutMillis) * time.Millisecond
	}
	defer c.unref() // the loop's own reference, after the deferred Unlock and Expire below
	c.answers = netio.NewPartitionAnswers(total, c.replyFn)
	if total == 0 {
		return
	}
	answers := c.answers
	if c.timeout > 0 {
		answers.Timeout(c.timeout, func(d time.Duration, f func()) func() bool { return time.AfterFunc(d, f).Stop })
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
			slot := c.slots[k]
			slot.out, slot.idx = &c.resp.Topics[i].Partitions[j], k
			k++
			records := part.Records
			if c.timeout > 0 || immediate {
				// The timer may answer, and so hand the frame back to the pool, before the
				// shard has written these bytes: give the shard its own copy.
				records = append([]byte(nil), records...)
			}
			tp := shard.TopicPartition{Topic: t.Topic, Partition: part.Partition}
			start := len(c.batches)
			var err error
			c.batches, err = netio.AppendBatches(c.batches, records)
			batches := c.batches[start:len(c.batches):len(c.batches)]
			if err == nil && req.Version < zstdProduceVersionMin {
				err = refuseZstd(batches, req.Version)
			}
			if err == nil {
				err = s.checkLeader(tp, -1)
			}
			if err != nil {
				out := slot.out
				answers.AnswerLocked(slot.idx, func() {
					out.ErrorCode, out.ErrorMessage = codeFor(err), message(err)
					if isUnsupportedCompression(err) {
						out.ErrorCode = kerr.UnsupportedCompressionType.Code
					}
				})
				continue
			}
			c.refs.Add(1)    // the partition's answer
			answers.Unlock() // the shard may answer inline, on this goroutine
			s.b.ProduceFrom(shard.CallerNone, tp, batches, req.Acks, slot.fn)
			answers.Lock()
		}
	}
}

// A produce allocates little once the pool is warm (BenchmarkKafkaRequestAllocs): its
// produceCall is pooled with the response's arrays, the split batches and each
// partition's answer callback (bound once), as the ringlog listener's produceCall. What
// remains is the request's (the pending request, kmsg's decoded structs) and the
// netio.PartitionAnswers. A call goes back to the pool once its last reference is gone:
// the partitions handed to the core all answered (late answers after a timeout too), the
// response written or dropped, and the handler's loop done — refs counts them.
type produceCall struct {
	p       *pending
	req     *kmsg.ProduceRequest
	resp    kmsg.ProduceResponse
	answers *netio.PartitionAnswers
	timeout time.Duration // the acks=all timeout, for markTimedOut's message; 0: none
	refs    atomic.Int32
	batches [][]byte       // every partition's batches, back to back (they alias the frame)
	slots   []*produceSlot // by request position

	replyFn   func(waiting []bool)
	releaseFn func()
}

// produceSlot is one partition's answer; fn (slot.answer) is bound once, when the slot is
// made.
type produceSlot struct {
	c   *produceCall
	out *kmsg.ProduceResponseTopicPartition
	idx int
	fn  func(shard.ProduceResult)
}

var produceCalls sync.Pool

// produceCallPartitionsMax: calls that grew past this many partitions are left to the GC
// instead of being pooled, so one huge request does not pin its arrays.
const produceCallPartitionsMax = 1024

// getProduceCall returns a call for req with its response laid out (every partition
// answered with no error until the core answers it) and total slots; it holds two
// references: the response's and the handler's loop's.
func getProduceCall(p *pending, req *kmsg.ProduceRequest, total int) *produceCall {
	c, _ := produceCalls.Get().(*produceCall)
	if c == nil {
		c = &produceCall{}
		c.replyFn, c.releaseFn = c.reply, c.unref
	}
	c.p, c.req, c.timeout, c.batches = p, req, 0, c.batches[:0]
	c.refs.Store(2)
	for len(c.slots) < total {
		slot := &produceSlot{c: c}
		slot.fn = slot.answer
		c.slots = append(c.slots, slot)
	}
	topics := c.resp.Topics[:0]
	for i, t := range req.Topics {
		if i < cap(topics) {
			topics = topics[:i+1]
		} else {
			topics = append(topics, kmsg.ProduceResponseTopic{})
		}
		rt := &topics[i]
		partitions := rt.Partitions[:0]
		*rt = kmsg.NewProduceResponseTopic()
		rt.Topic = t.Topic
		for _, part := range t.Partitions {
			partitions = append(partitions, producePartition(part.Partition))
		}
		rt.Partitions = partitions
	}
	c.resp = kmsg.ProduceResponse{Version: req.Version, Topics: topics}
	return c
}

// reply sends the response once every partition answered or the timeout passed (under
// the answers' lock).
func (c *produceCall) reply(waiting []bool) {
	switch {
	case c.req.Acks == 0:
		c.p.reply(nil, c.releaseFn) // no response, but the writer still releases it
		return
	case waiting != nil:
		markTimedOut(&c.resp, waiting, c.timeout)
	}
	c.p.reply(&c.resp, c.releaseFn)
}

// answer is the core's answer for the slot's partition (any goroutine).
func (slot *produceSlot) answer(r shard.ProduceResult) {
	c, out := slot.c, slot.out
	c.answers.Answer(slot.idx, func() {
		out.BaseOffset, out.LogStartOffset = r.BaseOffset, r.LogStartOffset
		out.ErrorCode, out.ErrorMessage = codeFor(r.Err), message(r.Err)
	})
	c.unref()
}

// unref drops a reference; the last one puts the call back in the pool.
func (c *produceCall) unref() {
	if c.refs.Add(-1) != 0 {
		return
	}
	clear(c.batches) // the frame's bytes
	c.p, c.req, c.answers = nil, nil, nil
	if len(c.slots) > produceCallPartitionsMax {
		return
	}
	produceCalls.Put(c)
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
