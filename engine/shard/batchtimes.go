package shard

import (
	"fmt"

	"github.com/ringlog/ringlog/engine/batch"
	"github.com/ringlog/ringlog/ring"
)

// BatchTimesQuery asks for the timestamps of the batch that holds Offset in a partition.
// BatchTimes fills the rest.
type BatchTimesQuery struct {
	TopicPartition
	Offset int64
	// BaseTimestamp and MaxTimestamp are the batch's (milliseconds); -1 when the offset is
	// outside the log or the batch could not be read.
	BaseTimestamp, MaxTimestamp int64
}

// batchTimesMax bounds the queries of one BatchTimes call (each reads one 61-byte header).
const batchTimesMax = 100_000

// BatchTimes answers every query on its partition's shard, one mailbox message per shard,
// all shards at once. Each query reads one batch header (61 bytes, usually from the page
// cache) on the shard's loop: the admin path of group lag metrics, bounded by
// batchTimesMax queries per call.
func (b *Broker) BatchTimes(queries []BatchTimesQuery) error {
	if len(queries) > batchTimesMax {
		return fmt.Errorf("%d batch-time queries in one call (at most %d)", len(queries), batchTimesMax)
	}
	byShard := map[int][]int{}
	for i := range queries {
		queries[i].BaseTimestamp, queries[i].MaxTimestamp = -1, -1
		si, err := b.ShardOf(queries[i].TopicPartition)
		if err != nil {
			continue // unknown partition: unknown times
		}
		byShard[si] = append(byShard[si], i)
	}
	var fns []func() error
	for si, idx := range byShard {
		s := b.shards[si]
		fns = append(fns, func() error {
			return onShard(s, func() error {
				for _, i := range idx {
					s.batchTimes(&queries[i])
				}
				return nil
			})
		})
	}
	return runAll(fns)
}

// batchTimes reads the header of the batch holding q.Offset. Loop goroutine.
func (s *Shard) batchTimes(q *BatchTimesQuery) {
	p := s.parts[q.TopicPartition]
	if p == nil || q.Offset < p.log.StartOffset() || q.Offset >= p.log.EndOffset() {
		return
	}
	rr, err := p.log.ReadBounded(q.Offset, 1, p.log.EndOffset()) // the first batch, whole, as file ranges
	if err != nil || len(rr.Pieces) == 0 {
		return
	}
	var header [batch.HeaderSize]byte
	piece := rr.Pieces[0]
	switch {
	case piece.File == nil:
		if len(piece.Data) < len(header) {
			return
		}
		copy(header[:], piece.Data)
	default:
		n, err := ring.Syscalls{}.Pread(int(piece.File.Fd()), header[:], piece.Position)
		if err != nil || n < len(header) {
			return
		}
	}
	h, err := batch.ParseHeader(header[:])
	if err != nil {
		return
	}
	q.BaseTimestamp, q.MaxTimestamp = h.BaseTimestamp, h.MaxTimestamp
}
