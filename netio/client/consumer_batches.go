package client

import (
	"context"
	"errors"

	"github.com/ringlog/ringlog/engine/batch"
)

// FetchedBatch is one record batch handed out by PollBatches: records per batch instead of
// an object per record. It and every slice it gives out are valid only during the
// PollBatches callback: Raw aliases the fetch response, which goes back to a pool (and the
// FetchedBatch is reused) once the callback returns.
type FetchedBatch struct {
	Topic      string
	Partition  int32
	BaseOffset int64 // the batch's first offset; a fetch may start mid-batch (see From)
	LastOffset int64
	// Raw is the whole batch as stored, header included. PollBatches parses only its
	// header: Records checks the CRC and every record, a caller that forwards Raw without
	// calling Records should check it itself (batch.ValidateStored, or only the records
	// when CRCChecked).
	Raw []byte

	from       int64 // the consumer's position when the batch was handed out
	crcChecked bool  // the connection's reader checked Raw's CRC-32C as it arrived
}

// CRCChecked reports whether the client already checked Raw's CRC-32C against the bytes
// it received (it does so per batch as a fetch answer arrives, while the bytes are in
// the CPU cache); Records then skips that pass. False means nobody has yet.
func (b *FetchedBatch) CRCChecked() bool { return b.crcChecked }

// From is the first offset Records hands out: the consumer's position when the batch was
// fetched, BaseOffset or later.
func (b *FetchedBatch) From() int64 { return max(b.from, b.BaseOffset) }

// Records checks the batch (as Poll does) and calls fn for each record at or after From,
// in offset order, with its offset, its timestamp in Unix milliseconds, and its key, value
// and headers (nil key or value: null on the wire). The slices alias the fetch response
// or, for a compressed batch, a reused decompression buffer: they are valid only until fn
// returns; copy what must outlive it. Records allocates nothing per record.
//
// An error from fn stops the walk and is returned unchanged. A batch that fails its checks
// yields an error wrapping wire.ErrCorruptMessage (and batch's sentinel), after fn has
// seen the records before the bad one.
func (b *FetchedBatch) Records(fn func(offset, timestamp int64, key, value []byte, headers []batch.RecordHeader) error) error {
	from := b.from
	var fnErr error
	err := decodeBatch(b.Raw, b.crcChecked, func(offset, ts int64, r *batch.Record) error {
		if offset < from {
			return nil
		}
		fnErr = fn(offset, ts, r.Key, r.Value, r.Headers)
		return fnErr
	})
	if err != nil && fnErr == nil {
		return corruptBatch(topicPartition{b.Topic, b.Partition}, b.BaseOffset, err)
	}
	return err
}

// errReassigned stops PollBatches' walk of a partition whose assignment fn changed.
var errReassigned = errors.New("partition reassigned during PollBatches")

// PollBatches is Poll handing out whole batches: it fetches from every assigned partition
// the same way (one request per owning shard address, long-polling up to MaxWait, the same
// back-off, retries and errors) and calls fn for each batch holding records at or after
// its partition's position, in partition order within each address's answer. The
// position moves past a batch when fn returns nil; an error from fn stops the round, is
// returned unchanged, and leaves the position before that batch, so the next poll hands it
// out again (a fetch sent ahead for that partition is dropped and the partition fetched
// again from there). An Assign, Seek or
// Unassign from fn applies from the partition's next batch on. Control batches
// (transaction markers) are skipped.
//
// The batch and its bytes are only valid during fn (see FetchedBatch): nothing is copied
// and, with FetchedBatch.Records, nothing is allocated per record. A round that fetched
// nothing returns nil without calling fn.
func (co *Consumer) PollBatches(ctx context.Context, fn func(*FetchedBatch) error) error {
	fb := new(FetchedBatch)
	return co.fetchRound(ctx, false, func(key topicPartition, a *assignment, records []byte, crcChecked int) (bool, error) {
		return co.deliverBatches(key, a, records, crcChecked, fb, fn)
	})
}

// deliverBatches hands the batches of one fetched partition to fn through fb (reused) and
// reports whether fn saw any.
func (co *Consumer) deliverBatches(key topicPartition, a *assignment, records []byte, crcChecked int, fb *FetchedBatch, fn func(*FetchedBatch) error) (bool, error) {
	delivered := false
	err := walkBatches(key, records, crcChecked, a, func(h batch.Header, whole []byte, wholeChecked bool) error {
		if co.assigned[key] != a {
			return errReassigned // Assign, Seek or Unassign from fn: drop the rest
		}
		*fb = FetchedBatch{Topic: key.topic, Partition: key.partition, BaseOffset: h.BaseOffset,
			LastOffset: h.LastOffset(), Raw: whole, from: a.position, crcChecked: wholeChecked}
		delivered = true
		return fn(fb)
	})
	if err == errReassigned {
		err = nil
	}
	return delivered, err
}
