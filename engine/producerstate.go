package engine

import (
	"errors"
	"fmt"
	"math"
	"sort"

	"github.com/ringlog/ringlog/engine/batch"
)

// Producer state: what makes a retried produce idempotent (Kafka's KIP-98 bookkeeping).
//
// Every batch an idempotent producer sends carries its producer id, epoch and the sequence
// number of its first record (per partition, counting records from 0, wrapping after
// math.MaxInt32). Per (producer id, partition) the log keeps the current epoch, the last
// sequence appended and the sequence and offset ranges of the last producerBatchesKept
// batches. An incoming batch of a known producer is
//
//   - a duplicate when its sequence range equals one of those batches: it is not appended
//     again and the append answers with the original offsets;
//   - in order when its first sequence follows the last one: appended;
//   - out of order otherwise (a gap, or an old sequence no longer remembered):
//     ErrOutOfOrderSequence;
//   - fenced when its epoch is older than the producer's current one: ErrProducerFenced.
//
// A batch with a newer epoch must start at sequence 0 and resets the producer's entry. A
// producer the log does not know (new, or expired after producer.id.expiration.ms without a
// write) is accepted at any sequence, as Kafka does: dedup starts with its first batch.
//
// The state is a function of the batch headers in the log, so it is rebuilt on recovery by
// reading headers from the latest snapshot (see producersnapshot.go) to the end of the log.
//
// Owned by the log's goroutine, like everything in a Log.

// producerBatchesKept is how many recent batches per producer and partition the log
// remembers for dedup: Kafka's 5, which is also how many batches per partition the bundled
// producer keeps in flight, so any batch it may retry is still remembered.
const producerBatchesKept = 5

// producerIDExpirationMsDefault is Kafka's producer.id.expiration.ms default: one day.
const producerIDExpirationMsDefault = 24 * 60 * 60 * 1000

// Sentinel errors of idempotent appends.
var (
	// ErrOutOfOrderSequence: a batch's first sequence does not follow the producer's last
	// one, and it is not a duplicate of a batch the log still remembers.
	ErrOutOfOrderSequence = errors.New("out of order sequence number")
	// ErrProducerFenced: the batch's producer epoch is older than the producer's current
	// epoch (a newer instance of the same producer took over). Kafka's
	// INVALID_PRODUCER_EPOCH / PRODUCER_FENCED.
	ErrProducerFenced = errors.New("producer fenced: epoch is older than the current one")
	// ErrDuplicateSequence: one append mixes batches already written with new ones, so no
	// single base offset can answer it. A producer that resends its requests unchanged never
	// sees it.
	ErrDuplicateSequence = errors.New("append mixes duplicate and new batches")
)

// producerBatch is the metadata of one appended batch of an idempotent producer.
type producerBatch struct {
	firstSeq, lastSeq       int32
	firstOffset, lastOffset int64
}

// producerEntry is one producer's state in one partition.
type producerEntry struct {
	epoch int16
	// batches are the last appended batches, oldest first, at most producerBatchesKept.
	batches []producerBatch
	// lastTimestamp is the max timestamp (ms) of its last batch: expiry counts from it.
	lastTimestamp int64
}

func (e *producerEntry) lastSeq() int32 { return e.batches[len(e.batches)-1].lastSeq }

// producerState is the producer state of one partition log.
type producerState struct {
	producers map[int64]*producerEntry
	// tentative is scratch for checkAppend: the (epoch, last sequence) a producer would have
	// after the earlier batches of the same append.
	tentative []tentativeProducer
}

type tentativeProducer struct {
	id      int64
	epoch   int16
	lastSeq int32
}

func newProducerState() producerState {
	return producerState{producers: map[int64]*producerEntry{}}
}

// idempotent reports whether h belongs to an idempotent producer.
func idempotent(h batch.Header) bool { return h.ProducerID >= 0 && !h.Control() }

// lastSequence is the sequence of the last record of h, wrapping like Kafka's.
func lastSequence(h batch.Header) int32 {
	if h.BaseSequence > math.MaxInt32-h.LastOffsetDelta {
		return h.LastOffsetDelta - (math.MaxInt32 - h.BaseSequence) - 1
	}
	return h.BaseSequence + h.LastOffsetDelta
}

// nextSequence is the sequence after seq.
func nextSequence(seq int32) int32 {
	if seq == math.MaxInt32 {
		return 0
	}
	return seq + 1
}

// checkAppend classifies the batches of one append before any is written. It returns the
// original metadata of the first batch when every idempotent batch is a duplicate (then
// nothing must be appended), or an error wrapping ErrOutOfOrderSequence, ErrProducerFenced or
// ErrDuplicateSequence. headers[i] is the parsed header of batch i.
func (ps *producerState) checkAppend(headers []batch.Header) (dup producerBatch, isDup bool, err error) {
	ps.tentative = ps.tentative[:0]
	dups, fresh := 0, 0
	var first producerBatch
	for i, h := range headers {
		if !idempotent(h) {
			fresh++
			continue
		}
		d, ok, err := ps.check(h)
		if err != nil {
			return dup, false, fmt.Errorf("batch %d of %d: %w", i, len(headers), err)
		}
		if ok {
			if dups == 0 {
				first = d
			}
			dups++
			continue
		}
		fresh++
	}
	switch {
	case dups == 0:
		return dup, false, nil
	case fresh > 0:
		return dup, false, fmt.Errorf("%w: %d duplicate and %d new batches", ErrDuplicateSequence, dups, fresh)
	}
	return first, true, nil
}

// check classifies one batch against the state plus the tentative updates of the batches
// before it in the same append, and records it as tentatively appended when it is new.
func (ps *producerState) check(h batch.Header) (producerBatch, bool, error) {
	last := h.BaseSequence
	lastSeq := lastSequence(h)
	entry := ps.producers[h.ProducerID]
	epoch, known, prev := int16(0), false, int32(0)
	if entry != nil && len(entry.batches) > 0 {
		epoch, known, prev = entry.epoch, true, entry.lastSeq()
	}
	ti := -1
	for i, t := range ps.tentative {
		if t.id == h.ProducerID {
			ti, epoch, known, prev = i, t.epoch, true, t.lastSeq
		}
	}
	switch {
	case !known:
	case h.ProducerEpoch < epoch:
		return producerBatch{}, false, fmt.Errorf("%w: producer %d epoch %d, current epoch %d", ErrProducerFenced, h.ProducerID, h.ProducerEpoch, epoch)
	case h.ProducerEpoch > epoch:
		if h.BaseSequence != 0 {
			return producerBatch{}, false, fmt.Errorf("%w: producer %d new epoch %d starts at sequence %d, want 0", ErrOutOfOrderSequence, h.ProducerID, h.ProducerEpoch, h.BaseSequence)
		}
	default:
		if ti < 0 && entry != nil {
			for _, b := range entry.batches {
				if b.firstSeq == h.BaseSequence && b.lastSeq == lastSeq {
					return b, true, nil
				}
			}
		}
		if h.BaseSequence != nextSequence(prev) {
			return producerBatch{}, false, fmt.Errorf("%w: producer %d epoch %d sent sequence %d, expected %d", ErrOutOfOrderSequence, h.ProducerID, h.ProducerEpoch, last, nextSequence(prev))
		}
	}
	t := tentativeProducer{id: h.ProducerID, epoch: h.ProducerEpoch, lastSeq: lastSeq}
	if ti >= 0 {
		ps.tentative[ti] = t
	} else {
		ps.tentative = append(ps.tentative, t)
	}
	return producerBatch{}, false, nil
}

// update records an appended batch (h carries its assigned base offset). It never refuses:
// the checks ran before the write, and a follower's or recovery's batches are the log's.
func (ps *producerState) update(h batch.Header) {
	if !idempotent(h) {
		return
	}
	e := ps.producers[h.ProducerID]
	if e == nil {
		e = &producerEntry{epoch: h.ProducerEpoch}
		ps.producers[h.ProducerID] = e
	}
	if h.ProducerEpoch != e.epoch {
		e.epoch = h.ProducerEpoch
		e.batches = e.batches[:0]
	}
	b := producerBatch{firstSeq: h.BaseSequence, lastSeq: lastSequence(h), firstOffset: h.BaseOffset, lastOffset: h.LastOffset()}
	if len(e.batches) == producerBatchesKept {
		copy(e.batches, e.batches[1:])
		e.batches = e.batches[:producerBatchesKept-1]
	}
	e.batches = append(e.batches, b)
	e.lastTimestamp = h.MaxTimestamp
}

// expire drops producers whose last batch is expirationMs or more older than nowMs, and
// returns how many it dropped.
func (ps *producerState) expire(nowMs, expirationMs int64) int {
	n := 0
	for id, e := range ps.producers {
		if nowMs-e.lastTimestamp >= expirationMs {
			delete(ps.producers, id)
			n++
		}
	}
	return n
}

// ids returns the producer ids in increasing order (snapshots are written in this order,
// so that equal states give equal files).
func (ps *producerState) ids() []int64 {
	ids := make([]int64, 0, len(ps.producers))
	for id := range ps.producers {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids
}

// ProducerInfo is one producer's state in a partition, for tools and tests.
type ProducerInfo struct {
	ProducerID    int64
	Epoch         int16
	LastSequence  int32
	LastOffset    int64
	LastTimestamp int64 // ms
}

// Producers lists the producer state the log holds, by producer id.
func (l *Log) Producers() []ProducerInfo {
	out := make([]ProducerInfo, 0, len(l.producers.producers))
	for _, id := range l.producers.ids() {
		e := l.producers.producers[id]
		last := e.batches[len(e.batches)-1]
		out = append(out, ProducerInfo{ProducerID: id, Epoch: e.epoch, LastSequence: last.lastSeq, LastOffset: last.lastOffset, LastTimestamp: e.lastTimestamp})
	}
	return out
}

// checkProducers runs the producer checks of one append (validated batches, in order).
// ok reports that every batch is a duplicate: res then carries the original offsets.
func (l *Log) checkProducers(batches [][]byte) (res AppendResult, ok bool, err error) {
	res = AppendResult{FirstOffset: l.StagedEndOffset(), LastOffset: l.StagedEndOffset() - 1}
	found := false
	l.producerHeaders = l.producerHeaders[:0]
	for _, b := range batches {
		h, _ := batch.ParseHeader(b)
		found = found || idempotent(h)
		l.producerHeaders = append(l.producerHeaders, h)
	}
	if !found {
		return res, false, nil
	}
	first, dup, err := l.producers.checkAppend(l.producerHeaders)
	if err != nil {
		return res, false, fmt.Errorf("append: %w", err)
	}
	if !dup {
		return res, false, nil
	}
	res.FirstOffset = first.firstOffset
	res.LastOffset = first.lastOffset
	for _, h := range l.producerHeaders[1:] {
		// Every batch is a duplicate; the last one's original end closes the range.
		if d, ok, _ := l.producers.check(h); ok {
			res.LastOffset = d.lastOffset
		}
	}
	res.Duplicate = true
	return res, true, nil
}

// noteProducers records appended batches (base offsets assigned) in the producer state.
func (l *Log) noteProducers(batches [][]byte) {
	for _, b := range batches {
		h, _ := batch.ParseHeader(b)
		l.producers.update(h)
	}
}

// reloadProducers rebuilds the producer state after a truncation.
func (l *Log) reloadProducers() error {
	if err := l.awaitSnapshot(); err != nil { // a snapshot in flight is in place before the reload prunes
		return err
	}
	if err := l.awaitFileJobs(); err != nil { // the listing sees no pruned snapshot whose unlink is in flight
		return err
	}
	var report RecoveryReport
	if err := l.loadProducerState(&report); err != nil {
		return l.fail(err)
	}
	return nil
}

// checkInvariants verifies the producer state against the log end offset: every producer
// holds 1 to producerBatchesKept batches in offset order, each within the log, and each
// batch's sequence range is as long as its offset range.
func (ps *producerState) checkInvariants(end int64) error {
	for id, e := range ps.producers {
		if len(e.batches) < 1 || len(e.batches) > producerBatchesKept {
			return fmt.Errorf("invariant: producer %d holds %d batches", id, len(e.batches))
		}
		for i, b := range e.batches {
			span := (int64(b.lastSeq) - int64(b.firstSeq) + 1<<31) % (1 << 31)
			if b.firstOffset < 0 || b.lastOffset < b.firstOffset || b.lastOffset >= end || span != b.lastOffset-b.firstOffset ||
				i > 0 && b.firstOffset <= e.batches[i-1].lastOffset {
				return fmt.Errorf("invariant: producer %d batch %d %+v (log end %d)", id, i, b, end)
			}
		}
	}
	return nil
}
