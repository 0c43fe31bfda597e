package netio

import (
	"fmt"
	"sync"
	"time"

	"github.com/ringlog/ringlog/engine/shard"
	"github.com/ringlog/ringlog/netio/wire"
)

// A fetch allocates nothing once the pools are warm: the handler's fetchCall (pooled, with
// every array of the request to the broker core and of the response, and its callbacks
// bound once) holds the core's results from one fetch to the next (shard.FetchRequest.
// Results), and the core's own op, waiters and segment descriptors are recycled too
// (engine/shard: fetchOp, core waiters, fetchfiles.go). A call goes back to the pool when
// its response has been written or dropped (Response.Done), after releasing the results.

func (h *BrokerHandler) fetch(req *Request, body *wire.FetchRequest) {
	if body.Isolation != 0 {
		req.ReplyError(wire.ErrInvalidRequest, fmt.Sprintf("isolation level %d: only 0 (read up to the high watermark) is served", body.Isolation))
		return
	}
	fc := getFetchCall()
	fc.req, fc.body = req, body
	fr := &fc.fr
	fr.MinBytes = body.MinBytes
	fr.MaxWait = time.Duration(body.MaxWaitMs) * time.Millisecond
	// max_bytes bounds the whole response (first-batch rule included), within the broker's
	// own cap; a partition's max_bytes bounds that partition.
	fr.ResponseBytesMax = h.fetchResponseBytesMax
	if body.MaxBytes > 0 {
		fr.ResponseBytesMax = min(fr.ResponseBytesMax, int64(body.MaxBytes))
	}
	fr.Files = nil
	if req.Conn.FetchFiles != nil {
		fr.Files = req.Conn.FetchFiles
	}
	fr.Partitions = fr.Partitions[:0]
	fc.refused = fc.refused[:0] // by request position; empty: every partition is served here
	for _, t := range body.Topics {
		for _, p := range t.Partitions {
			tp := shard.TopicPartition{Topic: t.Topic, Partition: p.Partition}
			if err := h.checkLeader(tp); err != nil || len(fc.refused) > 0 {
				for len(fc.refused) < len(fr.Partitions) {
					fc.refused = append(fc.refused, nil)
				}
				fc.refused = append(fc.refused, err)
				if err != nil {
					continue
				}
			}
			fr.Partitions = append(fr.Partitions, shard.FetchPartition{TopicPartition: tp, Offset: p.FetchOffset, MaxBytes: p.MaxBytes})
		}
	}
	fc.results = GrowFetchResults(fc.results, len(fr.Partitions))
	fr.Results = fc.results
	h.b.FetchFrom(caller(req), *fr, fc.answerFn)
}

// GrowFetchResults returns results with room for n, keeping its array (and each result's
// reused arrays) when it is large enough: the array a caller passes as
// shard.FetchRequest.Results from fetch to fetch (this listener's and netio/kafka's).
func GrowFetchResults(results []shard.FetchResult, n int) []shard.FetchResult {
	if cap(results) < n {
		grown := make([]shard.FetchResult, n)
		copy(grown, results[:cap(results)])
		return grown
	}
	return results[:n]
}

// fetchCall is one fetch request's state in the handler, pooled (see above).
type fetchCall struct {
	req  *Request
	body *wire.FetchRequest
	fr   shard.FetchRequest

	// Reused from one request to the next.
	results    []shard.FetchResult // the core's answers (FetchRequest.Results)
	answered   []shard.FetchResult // what the core answered: released when written
	refused    []error             // by request position, when a partition was refused here
	merged     []shard.FetchResult // results with the refused partitions in place
	resp       wire.FetchResponse
	topics     []wire.FetchResponseTopic
	partitions []wire.FetchResponsePartition // every topic's, back to back
	files      []wire.FileRange              // every partition's file ranges, back to back
	answerFn   func([]shard.FetchResult)
	writtenFn  func()
}

var fetchCalls sync.Pool

// fetchCallPartitionsMax: calls that grew past this many partitions are left to the GC
// instead of being pooled, so one huge request does not pin its arrays forever.
const fetchCallPartitionsMax = 1024

func getFetchCall() *fetchCall {
	fc, _ := fetchCalls.Get().(*fetchCall)
	if fc == nil {
		fc = &fetchCall{}
		fc.answerFn, fc.writtenFn = fc.answer, fc.written
	}
	return fc
}

// answer builds the response from the core's results and replies.
func (fc *fetchCall) answer(results []shard.FetchResult) {
	fc.answered = results
	if len(fc.refused) > 0 {
		m := shard.RefusedMerge{Out: fc.merged[:0], Results: results, Refused: fc.refused}
		for _, t := range fc.body.Topics {
			for _, p := range t.Partitions {
				m.Add(shard.TopicPartition{Topic: t.Topic, Partition: p.Partition})
			}
		}
		fc.merged = m.Out
		results = fc.merged
	}
	body := fc.body
	fc.topics, fc.partitions, fc.files = fc.topics[:0], fc.partitions[:0], fc.files[:0]
	total := 0
	for i := range body.Topics {
		total += len(body.Topics[i].Partitions)
	}
	if cap(fc.partitions) < total {
		fc.partitions = make([]wire.FetchResponsePartition, 0, total)
	}
	k := 0
	for i := range body.Topics {
		t := &body.Topics[i]
		start := len(fc.partitions)
		for range t.Partitions {
			r := &results[k]
			k++
			fc.partitions = append(fc.partitions, wire.FetchResponsePartition{
				Partition: r.Partition, ErrorCode: codeFor(r.Err), ErrorMessage: errMessage(r.Err),
				HighWatermark: r.HighWatermark, LogStartOffset: r.LogStartOffset,
			})
			fc.fillRecords(&fc.partitions[len(fc.partitions)-1], r)
		}
		end := len(fc.partitions)
		fc.topics = append(fc.topics, wire.FetchResponseTopic{Topic: t.Topic, Partitions: fc.partitions[start:end:end]})
	}
	fc.resp = wire.FetchResponse{Topics: fc.topics}
	req := fc.req
	fc.req, fc.body = nil, nil // the request is the connection's again once replied
	req.Reply(Response{Body: &fc.resp, Done: fc.writtenFn})
}

// fillRecords hands the read's pieces to the sender without copying them: file pieces as
// file ranges (splice), in-memory pieces (direct mode's recent-block cache, immutable below
// a chunk's fill, never reused once handed out) as memory ranges sent from the cache
// itself. A read that is one memory piece goes as Records.
func (fc *fetchCall) fillRecords(out *wire.FetchResponsePartition, r *shard.FetchResult) {
	pieces := r.Records.Pieces
	if len(pieces) == 1 && pieces[0].File == nil {
		out.Records = pieces[0].Data
		return
	}
	if len(pieces) == 0 {
		return
	}
	start := len(fc.files)
	for _, p := range pieces {
		if p.File == nil {
			fc.files = append(fc.files, wire.FileRange{Length: int64(len(p.Data)), Data: p.Data})
			continue
		}
		fc.files = append(fc.files, wire.FileRange{File: p.File, Offset: p.Position, Length: p.Size})
	}
	// Later partitions may grow fc.files: a capped view survives a reallocation.
	out.RecordsFile = fc.files[start:len(fc.files):len(fc.files)]
}

// written is the response's Done: the records are sent (or dropped), so the results'
// descriptors go back and the call returns to the pool.
func (fc *fetchCall) written() {
	for i := range fc.answered {
		fc.answered[i].Release()
	}
	fc.answered = nil
	clear(fc.merged)
	clear(fc.partitions[:cap(fc.partitions)])
	clear(fc.files[:cap(fc.files)])
	fc.resp = wire.FetchResponse{}
	fc.fr.Files = nil
	if len(fc.results) > fetchCallPartitionsMax {
		return
	}
	fetchCalls.Put(fc)
}
