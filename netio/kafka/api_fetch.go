package kafka

import (
	"encoding/binary"
	"math"
	"sync"
	"time"

	"github.com/ringlog/ringlog/engine/shard"
	"github.com/ringlog/ringlog/netio"
	"github.com/ringlog/ringlog/netio/wire"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Fetch (key 1), v4-v12: the broker core's FetchFrom, the ringlog protocol's path — whole
// batches from the one holding the fetch offset (a fetch landing mid-batch gets that whole
// batch; the client skips the records before its offset), never above the high watermark,
// long-poll on MinBytes/MaxWait, the response byte cap with the first-batch rule, and the
// connection's fetch-descriptor quota. Batches are served as stored, whatever their codec.
// On a cluster only the partition's leader serves it (NOT_LEADER_OR_FOLLOWER elsewhere), at
// the leader epoch the request names from v9 on (FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH),
// and never above the high watermark the followers have reached: the core's read limit,
// the same as the ringlog listener's.
//
// Not served: fetch sessions (KIP-227: every response has session id 0, which tells the
// client to send full fetches), topic ids (v13+), follower fetches (replica id >= 0 is
// answered like a consumer's), transactions (read_committed reads up to the high
// watermark, which is the last stable offset since no transaction ever opens).
var fetchAPI = api{
	key: keyFetch, min: 4, max: 12,
	serve: func(s *Server, p *pending, req kmsg.Request) { s.fetch(p, req.(*kmsg.FetchRequest)) },
	fail:  failFetch,
	entries: func(req kmsg.Request) int {
		r := req.(*kmsg.FetchRequest)
		n := len(r.ForgottenTopics)
		for _, t := range r.Topics {
			n += 1 + len(t.Partitions)
		}
		return n
	},
}

// fetchPartition is a partition's answer without records. Its records are empty, not null:
// kmsg encodes a nil slice as null (length -1), which librdkafka refuses ("invalid
// MessageSetSize -1") where Kafka always sends a length.
func fetchPartition(partition int32) kmsg.FetchResponseTopicPartition {
	rp := kmsg.NewFetchResponseTopicPartition()
	rp.Partition, rp.HighWatermark, rp.LastStableOffset, rp.LogStartOffset = partition, -1, -1, -1
	rp.RecordBatches = []byte{}
	return rp
}

func (s *Server) fetch(p *pending, req *kmsg.FetchRequest) {
	if req.SessionID > 0 {
		p.reply(failFetch(req, kerr.FetchSessionIDNotFound.Code, ""), nil)
		return
	}
	fc := getFetchCall()
	fc.p, fc.req = p, req
	fr := &fc.fr
	fr.MinBytes = req.MinBytes
	fr.MaxWait = time.Duration(req.MaxWaitMillis) * time.Millisecond
	fr.ResponseBytesMax = s.cfg.FetchResponseBytesMax
	if req.MaxBytes > 0 {
		fr.ResponseBytesMax = min(fr.ResponseBytesMax, int64(req.MaxBytes))
	}
	fr.Files = p.c.adm.FetchFiles
	fr.Partitions = fr.Partitions[:0]
	fc.refused = fc.refused[:0] // by request position; empty: every partition is served here
	for _, t := range req.Topics {
		for _, part := range t.Partitions {
			tp := shard.TopicPartition{Topic: t.Topic, Partition: part.Partition}
			if err := s.checkLeader(tp, part.CurrentLeaderEpoch); err != nil || len(fc.refused) > 0 {
				for len(fc.refused) < len(fr.Partitions) {
					fc.refused = append(fc.refused, nil)
				}
				fc.refused = append(fc.refused, err)
				if err != nil {
					continue
				}
			}
			fr.Partitions = append(fr.Partitions, shard.FetchPartition{TopicPartition: tp, Offset: part.FetchOffset, MaxBytes: part.PartitionMaxBytes})
		}
	}
	fc.results = netio.GrowFetchResults(fc.results, len(fr.Partitions))
	fr.Results = fc.results
	s.b.FetchFrom(shard.CallerNone, *fr, fc.answerFn)
}

// A fetch allocates little once the pools are warm (BenchmarkKafkaRequestAllocs): its
// fetchCall (pooled, its callbacks bound once) holds the core's results from one fetch to
// the next (shard.FetchRequest.Results, whose piece and descriptor arrays the core
// reuses), and the response is encoded straight into the writer's buffer
// (appendFetchResponse), records left out as splices. What remains is the request's:
// the pending request and kmsg's decoded structs.

// fetchCall is one fetch request's state, pooled: it goes back once its response is
// written or dropped (pending.release), after releasing the results.
type fetchCall struct {
	p   *pending
	req *kmsg.FetchRequest
	fr  shard.FetchRequest

	// Reused from one request to the next.
	results  []shard.FetchResult // the core's answers (FetchRequest.Results)
	answered []shard.FetchResult // what the core answered: released when written
	refused  []error             // by request position, when a partition was refused here
	merged   []shard.FetchResult // results with the refused partitions in place
	view     []shard.FetchResult // what the response answers, in request order
	splices  []wire.Splice       // the response's records
	// head carries what the writer's finish sets (the throttle time, and the topics an
	// ACL denied: authorize.go) into the encoding.
	head      kmsg.FetchResponse
	answerFn  func([]shard.FetchResult)
	frameFn   frameBuilder
	releaseFn func()
}

var fetchCalls sync.Pool

// fetchCallPartitionsMax: calls that grew past this many partitions are left to the GC
// instead of being pooled, so one huge request does not pin its arrays.
const fetchCallPartitionsMax = 1024

func getFetchCall() *fetchCall {
	fc, _ := fetchCalls.Get().(*fetchCall)
	if fc == nil {
		fc = &fetchCall{}
		fc.answerFn, fc.frameFn, fc.releaseFn = fc.answer, fc.frame, fc.release
	}
	return fc
}

// answer takes the core's results (on a shard loop) and hands them to the writer, which
// encodes and sends them.
func (fc *fetchCall) answer(results []shard.FetchResult) {
	fc.answered, fc.view = results, results
	if len(fc.refused) > 0 {
		m := shard.RefusedMerge{Out: fc.merged[:0], Results: results, Refused: fc.refused}
		for _, t := range fc.req.Topics {
			for _, part := range t.Partitions {
				m.Add(shard.TopicPartition{Topic: t.Topic, Partition: part.Partition})
			}
		}
		fc.merged, fc.view = m.Out, m.Out
	}
	fc.p.replyFrame(fc.frameFn, fc.releaseFn)
}

// frame is the response's frameBuilder (the writer's goroutine).
func (fc *fetchCall) frame(dst []byte, finish func(kmsg.Response, int64)) ([]byte, []wire.Splice) {
	var recordBytes int64
	for i := range fc.view {
		if fc.view[i].Err == nil {
			recordBytes += fc.view[i].Records.Size
		}
	}
	fc.head = kmsg.FetchResponse{Version: fc.req.Version}
	if finish != nil {
		finish(&fc.head, recordBytes)
	}
	dst, fc.splices = appendFetchResponse(dst, fc.splices[:0], fc.req, fc.view, &fc.head)
	return dst, fc.splices
}

// release is the response's release: the records are sent (or dropped), so the results'
// descriptors go back and the call returns to the pool.
func (fc *fetchCall) release() {
	for i := range fc.answered {
		fc.answered[i].Release()
	}
	fc.answered, fc.view = nil, nil
	clear(fc.merged)
	clear(fc.splices[:cap(fc.splices)])
	clear(fc.fr.Partitions) // topic names
	fc.p, fc.req, fc.head = nil, nil, kmsg.FetchResponse{}
	fc.fr.Files = nil
	if len(fc.results) > fetchCallPartitionsMax {
		return
	}
	fetchCalls.Put(fc)
}

// appendFetchResponse appends the response body (the response header's tagged fields
// first when flexible) to dst, encoded as kmsg encodes it, with every partition's records
// left out: their length prefix is in dst and the records are splices at that position
// (appended to splices), file ranges the writer sends with sendfile — zero copy, as the
// ringlog protocol does — or in-memory pieces (direct mode's block cache). results answer
// req's partitions in request order; head holds the throttle time and any topics an ACL
// denied (their partitions carry no records), appended after the served ones as the
// kmsg path did. TestAppendFetchResponseMatchesKmsg holds it to kmsg's encoding.
//
// Layout (big-endian; flexible = v12: compact arrays and strings as uvarint length+1,
// and a tagged-field count, always 0 here, after each struct):
//
//	v12 header tags | throttle ms int32 | v7+: error code int16, session id int32 |
//	topics: [ topic string | partitions: [ partition int32 | error code int16 |
//	  high watermark int64 | last stable offset int64 | v5+: log start offset int64 |
//	  aborted transactions (null) | v11+: preferred read replica int32 | records bytes |
//	  tags ] | tags ] | tags
func appendFetchResponse(dst []byte, splices []wire.Splice, req *kmsg.FetchRequest, results []shard.FetchResult, head *kmsg.FetchResponse) ([]byte, []wire.Splice) {
	version := req.Version
	flexible := version >= fetchFlexibleVersionMin
	if flexible {
		dst = append(dst, 0) // the response header's tagged fields
	}
	dst = binary.BigEndian.AppendUint32(dst, uint32(head.ThrottleMillis))
	if version >= 7 {
		dst = binary.BigEndian.AppendUint16(dst, uint16(head.ErrorCode))
		dst = binary.BigEndian.AppendUint32(dst, uint32(head.SessionID))
	}
	dst = appendArrayLen(dst, len(req.Topics)+len(head.Topics), flexible)
	k := 0
	for i := range req.Topics {
		t := &req.Topics[i]
		dst = appendString(dst, t.Topic, flexible)
		dst = appendArrayLen(dst, len(t.Partitions), flexible)
		for range t.Partitions {
			r := &results[k]
			k++
			var size int64
			if r.Err == nil {
				size = r.Records.Size
			}
			dst = appendFetchPartitionHead(dst, version, r.Partition, codeFor(r.Err), r.HighWatermark, r.HighWatermark, r.LogStartOffset, -1, size)
			if size > 0 {
				for _, piece := range r.Records.Pieces {
					if piece.File == nil {
						splices = append(splices, wire.Splice{At: len(dst), Data: piece.Data})
						continue
					}
					splices = append(splices, wire.Splice{At: len(dst), Range: wire.FileRange{File: piece.File, Offset: piece.Position, Length: piece.Size}})
				}
			}
			if flexible {
				dst = append(dst, 0) // the partition's tagged fields
			}
		}
		if flexible {
			dst = append(dst, 0) // the topic's tagged fields
		}
	}
	for i := range head.Topics { // denied by an ACL: codes only
		t := &head.Topics[i]
		dst = appendString(dst, t.Topic, flexible)
		dst = appendArrayLen(dst, len(t.Partitions), flexible)
		for j := range t.Partitions {
			rp := &t.Partitions[j]
			if len(rp.RecordBatches) > 0 || len(rp.AbortedTransactions) > 0 {
				panic("kafka: a denied fetch partition carries records")
			}
			dst = appendFetchPartitionHead(dst, version, rp.Partition, rp.ErrorCode, rp.HighWatermark, rp.LastStableOffset, rp.LogStartOffset, rp.PreferredReadReplica, 0)
			if flexible {
				dst = append(dst, 0)
			}
		}
		if flexible {
			dst = append(dst, 0)
		}
	}
	if flexible {
		dst = append(dst, 0) // the response's tagged fields
	}
	return dst, splices
}

// fetchFlexibleVersionMin is the first flexible Fetch version (KIP-482).
const fetchFlexibleVersionMin = 12

// appendFetchPartitionHead appends a partition's fields up to and including its records'
// length prefix (records of recordsSize bytes follow; empty, never null: kmsg encodes a
// nil slice as null, which librdkafka refuses with "invalid MessageSetSize -1").
func appendFetchPartitionHead(dst []byte, version int16, partition int32, code int16, highWatermark, lastStable, logStart int64, preferredReadReplica int32, recordsSize int64) []byte {
	flexible := version >= fetchFlexibleVersionMin
	dst = binary.BigEndian.AppendUint32(dst, uint32(partition))
	dst = binary.BigEndian.AppendUint16(dst, uint16(code))
	dst = binary.BigEndian.AppendUint64(dst, uint64(highWatermark))
	dst = binary.BigEndian.AppendUint64(dst, uint64(lastStable)) // v4+, the least served
	if version >= 5 {
		dst = binary.BigEndian.AppendUint64(dst, uint64(logStart))
	}
	if flexible {
		dst = append(dst, 0) // aborted transactions: null (compact)
	} else {
		dst = binary.BigEndian.AppendUint32(dst, math.MaxUint32) // null: -1
	}
	if version >= 11 {
		dst = binary.BigEndian.AppendUint32(dst, uint32(preferredReadReplica))
	}
	if flexible {
		return binary.AppendUvarint(dst, uint64(recordsSize)+1)
	}
	return binary.BigEndian.AppendUint32(dst, uint32(recordsSize))
}

// appendArrayLen appends an array length: int32, or uvarint length+1 when flexible.
func appendArrayLen(dst []byte, n int, flexible bool) []byte {
	if flexible {
		return binary.AppendUvarint(dst, uint64(n)+1)
	}
	return binary.BigEndian.AppendUint32(dst, uint32(n))
}

// appendString appends a string: int16 length, or uvarint length+1 when flexible.
func appendString(dst []byte, s string, flexible bool) []byte {
	if flexible {
		dst = binary.AppendUvarint(dst, uint64(len(s))+1)
	} else {
		dst = binary.BigEndian.AppendUint16(dst, uint16(len(s)))
	}
	return append(dst, s...)
}

func failFetch(req kmsg.Request, code int16, _ string) kmsg.Response {
	r := req.(*kmsg.FetchRequest)
	resp := r.ResponseKind().(*kmsg.FetchResponse)
	resp.ErrorCode = code
	for _, t := range r.Topics {
		rt := kmsg.NewFetchResponseTopic()
		rt.Topic = t.Topic
		for _, part := range t.Partitions {
			rp := fetchPartition(part.Partition)
			rp.ErrorCode = code
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}
