package client

import (
	"errors"
	"fmt"
	"testing"

	"github.com/ringlog/ringlog/engine/batch"
	"github.com/ringlog/ringlog/netio/wire"
)

// FuzzFetchedRecords feeds arbitrary partition bytes of a fetch response to both decoders:
// Poll's (decodeRecords) and PollBatches' (walkBatches and FetchedBatch.Records). They must
// hand out the same records, fail alike, and leave the same position.
func FuzzFetchedRecords(f *testing.F) {
	for _, codec := range []batch.Codec{batch.CodecNone, batch.CodecZstd} {
		var records []byte
		b := batch.NewBuilder(batch.BuilderOptions{Codec: codec})
		for base := int64(0); base < 6; base += 3 {
			b.Reset()
			b.Append(1, []byte("k"), []byte("v"), []batch.RecordHeader{{Key: "h", Value: []byte("x")}})
			b.Append(2, nil, nil, nil)
			b.Append(3, []byte("k3"), []byte("value"), nil)
			start := len(records)
			var err error
			if records, err = b.Build(records); err != nil {
				f.Fatal(err)
			}
			batch.SetBaseOffset(records[start:], base)
		}
		f.Add(records, int64(0))
		f.Add(records, int64(4))                  // mid-batch
		f.Add(records[:len(records)-5], int64(1)) // partial batch at the end
		corrupt := append([]byte(nil), records...)
		corrupt[len(corrupt)-1] ^= 1
		f.Add(corrupt, int64(0))
	}
	key := topicPartition{"t", 3}
	f.Fuzz(func(t *testing.T, records []byte, position int64) {
		polled := &assignment{position: position}
		out, pollErr := decodeRecords(key, records, 0, polled, nil)

		var got []string
		for _, r := range out {
			got = append(got, fmt.Sprintf("%d %d %q %q %v", r.Offset, r.Timestamp.UnixMilli(), r.Key, r.Value, r.Headers))
		}
		var walked []string
		a := &assignment{position: position}
		co := &Consumer{assigned: map[topicPartition]*assignment{key: a}}
		_, batchErr := co.deliverBatches(key, a, records, 0, new(FetchedBatch), func(fb *FetchedBatch) error {
			if fb.Topic != key.topic || fb.Partition != key.partition || fb.From() < fb.BaseOffset {
				t.Fatalf("batch %+v from %d", fb, fb.From())
			}
			return fb.Records(func(offset, ts int64, k, v []byte, headers []batch.RecordHeader) error {
				if offset < fb.From() || offset > fb.LastOffset {
					t.Fatalf("offset %d outside [%d, %d]", offset, fb.From(), fb.LastOffset)
				}
				walked = append(walked, fmt.Sprintf("%d %d %q %q %v", offset, ts, k, v, headersOrNil(headers)))
				return nil
			})
		})
		if (pollErr == nil) != (batchErr == nil) || errors.Is(pollErr, wire.ErrCorruptMessage) != errors.Is(batchErr, wire.ErrCorruptMessage) {
			t.Fatalf("Poll: %v; PollBatches: %v", pollErr, batchErr)
		}
		if polled.position != a.position {
			t.Fatalf("position after Poll %d, after PollBatches %d", polled.position, a.position)
		}
		if fmt.Sprint(got) != fmt.Sprint(walked) {
			t.Fatalf("Poll handed out\n%v\nPollBatches\n%v", got, walked)
		}
	})
}

// headersOrNil prints an empty header list as Poll's records carry it: nil.
func headersOrNil(h []batch.RecordHeader) []batch.RecordHeader {
	if len(h) == 0 {
		return nil
	}
	return h
}
