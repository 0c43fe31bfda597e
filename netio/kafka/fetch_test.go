package kafka

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/ringlog/ringlog/engine"
	"github.com/ringlog/ringlog/engine/shard"
	"github.com/ringlog/ringlog/netio/wire"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestAppendFetchResponseMatchesKmsg holds the hand-written fetch response encoder to
// kmsg's (the simple reference): random responses at every served version — partitions
// with records in file ranges and memory pieces, empty ones, errors, a throttle time, topics
// an ACL denied — encoded both ways must be byte for byte the same once the splices are
// filled in with the records they stand for.
func TestAppendFetchResponseMatchesKmsg(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	content := make([]byte, 1<<16)
	for i := range content {
		content[i] = byte(rng.Uint32())
	}
	f, err := os.Create(filepath.Join(t.TempDir(), "segment"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(content); err != nil {
		t.Fatal(err)
	}
	for round := range 500 {
		version := int16(fetchAPI.min) + int16(rng.IntN(int(fetchAPI.max-fetchAPI.min)+1))
		req := kmsg.NewPtrFetchRequest()
		req.Version = version
		var results []shard.FetchResult
		want := req.ResponseKind().(*kmsg.FetchResponse)
		want.ThrottleMillis = rng.Int32N(3) * 100
		for ti := range rng.IntN(4) {
			rt := kmsg.NewFetchRequestTopic()
			rt.Topic = fmt.Sprintf("topic-%d-%s", ti, string(make([]byte, rng.IntN(200))))
			wt := kmsg.NewFetchResponseTopic()
			wt.Topic = rt.Topic
			for pi := range rng.IntN(5) {
				rt.Partitions = append(rt.Partitions, kmsg.FetchRequestTopicPartition{Partition: int32(pi)})
				r := shard.FetchResult{TopicPartition: shard.TopicPartition{Topic: rt.Topic, Partition: int32(pi)},
					HighWatermark: rng.Int64N(1 << 40), LogStartOffset: rng.Int64N(1 << 20)}
				wp := fetchPartition(int32(pi))
				wp.HighWatermark, wp.LastStableOffset, wp.LogStartOffset = r.HighWatermark, r.HighWatermark, r.LogStartOffset
				switch rng.IntN(4) {
				case 0: // an error: no records
					r.Err = fmt.Errorf("%w: test", engine.ErrOffsetOutOfRange)
					wp.ErrorCode = codeFor(r.Err)
				case 1: // nothing to read
				default:
					for range 1 + rng.IntN(3) {
						at, n := rng.IntN(len(content)), rng.IntN(4096)
						n = min(n, len(content)-at)
						if rng.IntN(2) == 0 {
							r.Records.Pieces = append(r.Records.Pieces, engine.Piece{File: f, Position: int64(at), Size: int64(n)})
						} else {
							r.Records.Pieces = append(r.Records.Pieces, engine.Piece{Data: content[at : at+n]})
						}
						r.Records.Size += int64(n)
						wp.RecordBatches = append(wp.RecordBatches, content[at:at+n]...)
					}
				}
				results = append(results, r)
				wt.Partitions = append(wt.Partitions, wp)
			}
			req.Topics = append(req.Topics, rt)
			want.Topics = append(want.Topics, wt)
		}
		head := &kmsg.FetchResponse{Version: version, ThrottleMillis: want.ThrottleMillis}
		if rng.IntN(4) == 0 { // denied topics, as authorize.go's amend appends them
			denied := failFetch(&kmsg.FetchRequest{Version: version, Topics: []kmsg.FetchRequestTopic{{Topic: "denied", Partitions: make([]kmsg.FetchRequestTopicPartition, 2)}}}, 29, "").(*kmsg.FetchResponse)
			head.Topics = denied.Topics
			want.Topics = append(want.Topics, denied.Topics...)
		}
		prefix := []byte("earlier responses")
		got, splices := appendFetchResponse(append([]byte(nil), prefix...), nil, req, results, head)
		filled := fill(t, got, splices)
		wantBytes := prefix
		if version >= fetchFlexibleVersionMin {
			wantBytes = append(wantBytes, 0)
		}
		wantBytes = want.AppendTo(wantBytes)
		if !bytes.Equal(filled, wantBytes) {
			t.Fatalf("round %d, v%d: the encoding differs from kmsg's (%d bytes against %d)", round, version, len(filled), len(wantBytes))
		}
	}
}

// fill returns b with the splices' bytes in place.
func fill(t *testing.T, b []byte, splices []wire.Splice) []byte {
	var out []byte
	prev := 0
	for _, sp := range splices {
		out = append(out, b[prev:sp.At]...)
		prev = sp.At
		if sp.Range.File == nil {
			out = append(out, sp.Data...)
			continue
		}
		chunk := make([]byte, sp.Range.Length)
		if _, err := sp.Range.File.ReadAt(chunk, sp.Range.Offset); err != nil && !errors.Is(err, os.ErrClosed) {
			t.Fatal(err)
		}
		out = append(out, chunk...)
	}
	return append(out, b[prev:]...)
}
