package kafka

import (
	"errors"
	"fmt"
	"sync"
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
	pc := &produceCall{p: p, resp: resp, silent: req.Acks == 0, pending: total}
	if total == 0 {
		pc.answerLocked(-1, func() {})
		return
	}
	// The partitions' answers are written under pc.mu: an acks=all produce with a timeout
	// may be answered by its timer while shards still hold some of its partitions.
	pc.mu.Lock()
	defer pc.mu.Unlock()
	if req.Acks == -1 && req.TimeoutMillis > 0 {
		pc.answered = make([]bool, total)
		timeout := time.Duration(req.TimeoutMillis) * time.Millisecond
		t := time.AfterFunc(timeout, func() { pc.timedOut(timeout) })
		pc.stopTimer = t.Stop
	}
	k := 0
	for i, t := range req.Topics {
		for j, part := range t.Partitions {
			out, idx := &resp.Topics[i].Partitions[j], k
			k++
			records := part.Records
			if pc.answered != nil {
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
				pc.answerLocked(idx, func() {
					out.ErrorCode, out.ErrorMessage = codeFor(err), message(err)
					if isUnsupportedCompression(err) {
						out.ErrorCode = kerr.UnsupportedCompressionType.Code
					}
				})
				continue
			}
			pc.mu.Unlock() // the shard may answer inline, on this goroutine
			s.b.ProduceFrom(shard.CallerNone, tp, batches, req.Acks, func(r shard.ProduceResult) {
				pc.mu.Lock()
				defer pc.mu.Unlock()
				pc.answerLocked(idx, func() {
					out.BaseOffset, out.LogStartOffset = r.BaseOffset, r.LogStartOffset
					out.ErrorCode, out.ErrorMessage = codeFor(r.Err), message(r.Err)
				})
			})
			pc.mu.Lock()
		}
	}
}

// produceCall gathers one produce request's partition answers, as the ringlog listener's
// does: an acks=all produce with a timeout (timeout_ms, the producer's request.timeout.ms)
// is answered when it passes even though some partitions still wait for their followers;
// those get REQUEST_TIMED_OUT (retriable). Their records stay appended and may still
// commit; their late answers are dropped.
type produceCall struct {
	p         *pending
	resp      *kmsg.ProduceResponse
	silent    bool // acks=0: no response
	mu        sync.Mutex
	pending   int         // partitions not answered yet; guarded by mu
	answered  []bool      // by request position; nil without a timeout; guarded by mu
	replied   bool        // guarded by mu
	stopTimer func() bool // nil without a timeout
}

// answerLocked records partition idx's answer (set writes it) unless the request was
// already answered, and replies once every partition has answered.
func (pc *produceCall) answerLocked(idx int, set func()) {
	if pc.replied {
		return
	}
	if pc.answered != nil {
		pc.answered[idx] = true
	}
	set()
	if pc.pending--; pc.pending <= 0 {
		pc.replied = true
		if pc.stopTimer != nil {
			pc.stopTimer()
		}
		if pc.silent {
			pc.p.reply(nil, nil)
			return
		}
		pc.p.reply(pc.resp, nil)
	}
}

// timedOut answers the partitions still waiting with REQUEST_TIMED_OUT.
func (pc *produceCall) timedOut(timeout time.Duration) {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	if pc.replied {
		return
	}
	pc.replied = true
	msg := fmt.Sprintf("acks=all: not replicated within the request's timeout (%v); the records may still be committed", timeout)
	k := 0
	for i := range pc.resp.Topics {
		for j := range pc.resp.Topics[i].Partitions {
			if !pc.answered[k] {
				out := &pc.resp.Topics[i].Partitions[j]
				out.ErrorCode, out.ErrorMessage = kerr.RequestTimedOut.Code, str(msg)
			}
			k++
		}
	}
	pc.p.reply(pc.resp, nil)
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
