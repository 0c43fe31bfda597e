package kafka

import (
	"time"

	"github.com/ringlog/ringlog/engine/shard"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Fetch (key 1), v4-v12: the broker core's FetchFrom, the ringlog protocol's path — whole
// batches from the one holding the fetch offset (a fetch landing mid-batch gets that whole
// batch; the client skips the records before its offset), never above the high watermark,
// long-poll on MinBytes/MaxWait, the response byte cap with the first-batch rule, and the
// connection's fetch-descriptor quota. Batches are served as stored, whatever their codec.
//
// Not served: fetch sessions (KIP-227: every response has session id 0, which tells the
// client to send full fetches), topic ids (v13+), follower fetches (replica id >= 0 is
// answered like a consumer's), transactions (read_committed reads up to the high
// watermark, which is the last stable offset since no transaction ever opens).
var fetchAPI = api{
	key: keyFetch, min: 4, max: 12,
	serve: func(s *Server, p *pending, req kmsg.Request) { s.fetch(p, req.(*kmsg.FetchRequest)) },
	fail: failFetch,
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
	fr := shard.FetchRequest{
		MinBytes:         req.MinBytes,
		MaxWait:          time.Duration(req.MaxWaitMillis) * time.Millisecond,
		ResponseBytesMax: s.cfg.FetchResponseBytesMax,
		Files:            p.c.adm.FetchFiles,
	}
	if req.MaxBytes > 0 {
		fr.ResponseBytesMax = min(fr.ResponseBytesMax, int64(req.MaxBytes))
	}
	for _, t := range req.Topics {
		for _, part := range t.Partitions {
			fr.Partitions = append(fr.Partitions, shard.FetchPartition{
				TopicPartition: shard.TopicPartition{Topic: t.Topic, Partition: part.Partition},
				Offset:         part.FetchOffset, MaxBytes: part.PartitionMaxBytes,
			})
		}
	}
	s.b.FetchFrom(shard.CallerNone, fr, func(results []shard.FetchResult) {
		// On a shard loop: only hand the results over; the writer reads their bytes.
		p.replyLater(func() kmsg.Response { return fetchResponse(req, results) }, func() {
			for i := range results {
				results[i].Release()
			}
		})
	})
}

// fetchResponse builds the response, reading the records of every partition into one
// buffer (file pieces with pread on the results' own descriptors). Writer goroutine.
func fetchResponse(req *kmsg.FetchRequest, results []shard.FetchResult) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.FetchResponse)
	var size int64
	for i := range results {
		size += results[i].Records.Size
	}
	buf := make([]byte, 0, size)
	k := 0
	for _, t := range req.Topics {
		rt := kmsg.NewFetchResponseTopic()
		rt.Topic = t.Topic
		rt.Partitions = make([]kmsg.FetchResponseTopicPartition, len(t.Partitions))
		for j := range t.Partitions {
			r := &results[k]
			k++
			out := &rt.Partitions[j]
			*out = fetchPartition(r.Partition)
			out.HighWatermark, out.LastStableOffset, out.LogStartOffset = r.HighWatermark, r.HighWatermark, r.LogStartOffset
			out.ErrorCode = codeFor(r.Err)
			if r.Err != nil || r.Records.Size == 0 {
				continue
			}
			start := len(buf)
			var err error
			if buf, err = r.AppendTo(buf); err != nil {
				out.ErrorCode = kerr.KafkaStorageError.Code
				buf = buf[:start]
				continue
			}
			out.RecordBatches = buf[start:len(buf):len(buf)]
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
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
