package kafka

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"time"

	"github.com/ringlog/ringlog/engine/shard"
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
	fr := shard.FetchRequest{
		MinBytes:         req.MinBytes,
		MaxWait:          time.Duration(req.MaxWaitMillis) * time.Millisecond,
		ResponseBytesMax: s.cfg.FetchResponseBytesMax,
		Files:            p.c.adm.FetchFiles,
	}
	if req.MaxBytes > 0 {
		fr.ResponseBytesMax = min(fr.ResponseBytesMax, int64(req.MaxBytes))
	}
	var refused []error // by request position; nil: every partition is served here
	for _, t := range req.Topics {
		for _, part := range t.Partitions {
			tp := shard.TopicPartition{Topic: t.Topic, Partition: part.Partition}
			if err := s.checkLeader(tp, part.CurrentLeaderEpoch); err != nil || refused != nil {
				if refused == nil {
					refused = make([]error, len(fr.Partitions), len(fr.Partitions)+1)
				}
				refused = append(refused, err)
				if err != nil {
					continue
				}
			}
			fr.Partitions = append(fr.Partitions, shard.FetchPartition{TopicPartition: tp, Offset: part.FetchOffset, MaxBytes: part.PartitionMaxBytes})
		}
	}
	s.b.FetchFrom(shard.CallerNone, fr, func(results []shard.FetchResult) {
		if refused != nil {
			m := shard.RefusedMerge{Out: make([]shard.FetchResult, 0, len(refused)), Results: results, Refused: refused}
			for _, t := range req.Topics {
				for _, part := range t.Partitions {
					m.Add(shard.TopicPartition{Topic: t.Topic, Partition: part.Partition})
				}
			}
			results = m.Out
		}
		// On a shard loop: only hand the results over; the writer encodes and sends them.
		p.replyFrame(func(dst []byte, finish func(kmsg.Response, int64)) ([]byte, []wire.Splice) {
			return appendFetchResponse(dst, req, results, finish)
		}, func() {
			for i := range results {
				results[i].Release()
			}
		})
	})
}

// recordsMarkerBytes is the size of the stand-in a partition's records get while kmsg
// encodes the response.
const recordsMarkerBytes = 16

// appendFetchResponse appends the encoded response to dst with every partition's records
// left out and returns where they go: file ranges the writer sends with sendfile (zero
// copy, as the ringlog protocol does) and in-memory pieces (direct mode's block cache).
//
// kmsg encodes the whole response; each partition with records carries a random 16-byte
// marker in place of its records, and the marker with its length prefix is then replaced
// by the real length prefix and a splice of the records. A marker is only taken where its
// length prefix reads 16, so bytes elsewhere in the response that happened to equal it
// (a 2^-128 chance) could not be mistaken for it. finish, if set, sees the response and
// its record bytes before it is encoded.
func appendFetchResponse(dst []byte, req *kmsg.FetchRequest, results []shard.FetchResult, finish func(kmsg.Response, int64)) ([]byte, []wire.Splice) {
	resp := req.ResponseKind().(*kmsg.FetchResponse)
	type marked struct {
		marker []byte
		result *shard.FetchResult
	}
	var markers []marked
	var recordBytes int64
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
			if r.Err == nil && r.Records.Size > 0 {
				marker := binary.LittleEndian.AppendUint64(binary.LittleEndian.AppendUint64(nil, rand.Uint64()), rand.Uint64())
				out.RecordBatches = marker
				markers = append(markers, marked{marker, r})
				recordBytes += r.Records.Size
			}
		}
		resp.Topics = append(resp.Topics, rt)
	}
	if finish != nil {
		finish(resp, recordBytes)
	}
	if resp.IsFlexible() {
		dst = append(dst, 0) // the response header's tagged fields
	}
	encoded := resp.AppendTo(nil)
	var splices []wire.Splice
	prev := 0
	for _, m := range markers {
		at, prefix := findMarker(encoded, prev, m.marker, resp.IsFlexible())
		if at < 0 {
			panic("kafka: a fetch response lost a records marker kmsg was given")
		}
		dst = append(dst, encoded[prev:at-prefix]...)
		if resp.IsFlexible() {
			dst = binary.AppendUvarint(dst, uint64(m.result.Records.Size)+1)
		} else {
			dst = binary.BigEndian.AppendUint32(dst, uint32(m.result.Records.Size))
		}
		for _, piece := range m.result.Records.Pieces {
			if piece.File == nil {
				splices = append(splices, wire.Splice{At: len(dst), Data: piece.Data})
				continue
			}
			splices = append(splices, wire.Splice{At: len(dst), Range: wire.FileRange{File: piece.File, Offset: piece.Position, Length: piece.Size}})
		}
		prev = at + recordsMarkerBytes
	}
	return append(dst, encoded[prev:]...), splices
}

// findMarker finds marker in b from index from, preceded by its length prefix (int32 16,
// or uvarint 17 when flexible); it returns the marker's index and the prefix's size.
func findMarker(b []byte, from int, marker []byte, flexible bool) (int, int) {
	for from < len(b) {
		i := bytes.Index(b[from:], marker)
		if i < 0 {
			return -1, 0
		}
		at := from + i
		switch {
		case flexible && at >= 1 && b[at-1] == recordsMarkerBytes+1:
			return at, 1
		case !flexible && at >= 4 && binary.BigEndian.Uint32(b[at-4:]) == recordsMarkerBytes:
			return at, 4
		}
		from = at + 1
	}
	return -1, 0
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
