package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sort"
	"sync"
	"time"

	"github.com/ringlog/ringlog/netio/wire"

	"github.com/ringlog/ringlog/engine/batch"
)

// Offset is where a consumer starts reading a partition.
type Offset struct {
	kind  offsetKind
	value int64
}

type offsetKind uint8

const (
	offsetNone offsetKind = iota
	offsetExact
	offsetEarliest
	offsetLatest
	offsetTime
)

// AtOffset starts at an exact offset.
func AtOffset(offset int64) Offset { return Offset{kind: offsetExact, value: offset} }

// Earliest starts at the log start offset.
func Earliest() Offset { return Offset{kind: offsetEarliest} }

// Latest starts at the high watermark: only records produced from now on.
func Latest() Offset { return Offset{kind: offsetLatest} }

// AtTime starts at the first record whose timestamp is at or after t (Latest if none).
func AtTime(t time.Time) Offset { return Offset{kind: offsetTime, value: t.UnixMilli()} }

func (o Offset) String() string {
	switch o.kind {
	case offsetExact:
		return fmt.Sprint(o.value)
	case offsetEarliest:
		return "earliest"
	case offsetLatest:
		return "latest"
	case offsetTime:
		return fmt.Sprintf("@%d", o.value)
	}
	return "none"
}

// partitionMaxBytesDefault is ConsumerConfig.PartitionMaxBytes when unset; MaxBytes (16 MiB)
// still bounds a whole fetch, so the buffer a consumer holds does not grow with it.
const partitionMaxBytesDefault = 4 << 20

// ConsumerConfig configures a Consumer. Zero fields take the defaults noted.
type ConsumerConfig struct {
	MaxWait  time.Duration // long-poll wait when no data; default 500ms
	MinBytes int32         // default 1
	MaxBytes int32         // per fetch request; default 16 MiB
	// PartitionMaxBytes is per partition; default 4 MiB (partitionMaxBytesDefault). With
	// 1 MiB a catch-up read of 4 partitions ran at 0.55–0.65 GB/s against 1.1 GB/s with
	// 4 MiB on the same broker: each fetch round costs a few milliseconds whatever its size
	// (docs/benchmarks.md, "Catch-up against loopback (issue 14, session 6)").
	PartitionMaxBytes int32
	// OnOutOfRange is where a partition restarts when its position falls outside the log
	// (Earliest or Latest). Unset: Poll returns an error wrapping
	// wire.ErrOffsetOutOfRange.
	OnOutOfRange Offset
	// Logger receives a warning each time a partition backs off after a retriable error,
	// saying what failed and how long it waits; nil means slog.Default().
	Logger *slog.Logger
	// QuotaGroup, when set, sends the fetches on connections of their own that state this
	// consumer group (the QuotaGroup request), so that the broker charges them to the
	// group's fetch quota (docs/security.md, "Per-group fetch quotas") as well as to this
	// client's. A GroupConsumer sets its Group here unless it is set.
	QuotaGroup string
}

// pollRetryBackoff is how long Poll pauses when every fetch failed on a connection error.
const pollRetryBackoff = 50 * time.Millisecond

// Back-off of a partition whose fetch failed with a retriable error (STORAGE_ERROR,
// THROTTLED, NOT_LEADER_OR_WRONG_SHARD, ...): the n-th consecutive failure waits a random
// time in [d/2, d] with d = retryBackoffMin * 2^(n-1), capped at retryBackoffMax. The other
// partitions keep being fetched meanwhile. Jitter keeps many consumers of one broker from
// retrying in lock step.
const (
	retryBackoffMin = 20 * time.Millisecond
	retryBackoffMax = 2 * time.Second
)

// ConsumedRecord is one record returned by Poll. Its slices stay valid until the caller
// drops them (they are not reused).
type ConsumedRecord struct {
	Topic     string
	Partition int32
	Offset    int64
	Timestamp time.Time
	Key       []byte
	Value     []byte
	Headers   []batch.RecordHeader
}

// Consumer reads assigned partitions without consumer groups. It is not safe for
// concurrent use: one goroutine assigns, seeks and polls.
type Consumer struct {
	c        *Client
	cfg      ConsumerConfig
	assigned map[topicPartition]*assignment
	order    []topicPartition // stable iteration order

	// Injectable for tests: the clock, the wait between polls, and the jitter source
	// (returns a value in [0, n)).
	now    func() time.Time
	sleep  func(ctx context.Context, d time.Duration)
	jitter func(n int64) int64
}

type assignment struct {
	start    Offset // pending start, resolved by the next Poll
	position int64  // next offset to read, valid when start.kind == offsetNone
	retryAt  time.Time
	attempts int // consecutive retriable fetch errors
}

// NewConsumer returns a consumer reading through c.
func (c *Client) NewConsumer(cfg ConsumerConfig) *Consumer {
	if cfg.MaxWait <= 0 {
		cfg.MaxWait = 500 * time.Millisecond
	}
	if cfg.MinBytes <= 0 {
		cfg.MinBytes = 1
	}
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = 16 << 20
	}
	if cfg.PartitionMaxBytes <= 0 {
		cfg.PartitionMaxBytes = partitionMaxBytesDefault
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Consumer{c: c, cfg: cfg, assigned: map[topicPartition]*assignment{},
		now: time.Now, sleep: sleepContext, jitter: rand.Int64N}
}

func sleepContext(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// backOff schedules the next fetch of a partition after a retriable error and says so.
func (co *Consumer) backOff(key topicPartition, a *assignment, code wire.ErrorCode, message string) {
	a.attempts++
	d := retryBackoffMax
	if shift := a.attempts - 1; shift < 16 && retryBackoffMin<<shift < retryBackoffMax {
		d = retryBackoffMin << shift
	}
	d = d/2 + time.Duration(co.jitter(int64(d/2)+1))
	a.retryAt = co.now().Add(d)
	co.cfg.Logger.Warn("consumer: partition fetch failed, backing off",
		"topic", key.topic, "partition", key.partition, "offset", a.position, "error", code.Name(),
		"message", message, "retry_in", d.Round(time.Millisecond), "attempt", a.attempts)
}

// waitForRetries sleeps until the first backing-off partition may be fetched again (at
// most MaxWait) when every assigned partition is backing off.
func (co *Consumer) waitForRetries(ctx context.Context) {
	now := co.now()
	var earliest time.Time
	for _, key := range co.order {
		a := co.assigned[key]
		if !a.retryAt.After(now) {
			return
		}
		if earliest.IsZero() || a.retryAt.Before(earliest) {
			earliest = a.retryAt
		}
	}
	if !earliest.IsZero() {
		co.sleep(ctx, min(earliest.Sub(now), co.cfg.MaxWait))
	}
}

// Assign adds (or re-positions) a partition, starting at from.
func (co *Consumer) Assign(topic string, partition int32, from Offset) {
	key := topicPartition{topic, partition}
	if _, ok := co.assigned[key]; !ok {
		co.order = append(co.order, key)
		sort.Slice(co.order, func(i, j int) bool {
			if co.order[i].topic != co.order[j].topic {
				return co.order[i].topic < co.order[j].topic
			}
			return co.order[i].partition < co.order[j].partition
		})
	}
	co.assigned[key] = &assignment{start: from}
}

// Seek moves an assigned partition (or assigns it).
func (co *Consumer) Seek(topic string, partition int32, to Offset) { co.Assign(topic, partition, to) }

// Unassign stops reading a partition.
func (co *Consumer) Unassign(topic string, partition int32) {
	key := topicPartition{topic, partition}
	delete(co.assigned, key)
	for i, k := range co.order {
		if k == key {
			co.order = append(co.order[:i], co.order[i+1:]...)
			break
		}
	}
}

// Position returns the next offset Poll will return for a partition, resolving a pending
// earliest/latest/time start first.
func (co *Consumer) Position(ctx context.Context, topic string, partition int32) (int64, error) {
	a := co.assigned[topicPartition{topic, partition}]
	if a == nil {
		return -1, fmt.Errorf("%s/%d is not assigned", topic, partition)
	}
	if err := co.resolve(ctx, topicPartition{topic, partition}, a); err != nil {
		return -1, err
	}
	return a.position, nil
}

func (co *Consumer) resolve(ctx context.Context, key topicPartition, a *assignment) error {
	var ts int64
	switch a.start.kind {
	case offsetNone:
		return nil
	case offsetExact:
		a.position, a.start = a.start.value, Offset{}
		return nil
	case offsetEarliest:
		ts = wire.TimestampEarliest
	case offsetLatest:
		ts = wire.TimestampLatest
	case offsetTime:
		ts = a.start.value
	}
	off, err := co.c.ListOffset(ctx, key.topic, key.partition, ts)
	if err != nil {
		return err
	}
	if off < 0 { // no record at or after the time: start at the end
		if off, err = co.c.ListOffset(ctx, key.topic, key.partition, wire.TimestampLatest); err != nil {
			return err
		}
	}
	a.position, a.start = off, Offset{}
	return nil
}

// Poll fetches from every assigned partition (one request per owning shard address, in
// parallel) and returns the records after each partition's position, advancing it. It
// waits up to MaxWait for data (long-poll) and returns an empty slice if none arrived.
// PollBatches is the same fetch handing out whole batches instead of a record object each.
func (co *Consumer) Poll(ctx context.Context) ([]ConsumedRecord, error) {
	var out []ConsumedRecord
	err := co.fetchRound(ctx, true, func(key topicPartition, a *assignment, records []byte) (bool, error) {
		n := len(out)
		var err error
		out, err = decodeRecords(key, records, a, out)
		return len(out) > n, err
	})
	return out, err
}

// fetchResult is one shard address's answer in a fetch round.
type fetchResult struct {
	addr    string
	req     *wire.FetchRequest
	resp    *wire.FetchResponse
	err     error
	release func()
}

// fetchRound is the part Poll and PollBatches share: it fetches from every assigned
// partition that is not backing off (one request per owning shard address, in parallel),
// applies each partition's error code (back-off, out-of-range reset, metadata refresh) and
// calls deliver with the records of each partition answered without error. deliver
// advances the partition's position and reports whether it handed anything to the caller.
//
// keep says the caller retains what deliver handed out: a response that delivered
// something then stays with the caller (its frame buffer is not pooled again); otherwise
// every response goes back to the pool when fetchRound returns. A round in which a broker
// was unreachable and nothing was delivered pauses before returning, so that callers
// polling in a loop do not spin on refused dials.
func (co *Consumer) fetchRound(ctx context.Context, keep bool, deliver func(key topicPartition, a *assignment, records []byte) (bool, error)) error {
	results, err := co.fetchAll(ctx)
	if err != nil || len(results) == 0 {
		return err
	}
	kept := make([]bool, len(results))
	defer func() {
		for i, r := range results {
			if !kept[i] {
				r.release() // back to the pool: nothing handed out points into it
			}
		}
	}()
	delivered, connFailed := false, false
	defer func() {
		if connFailed && !delivered {
			select {
			case <-time.After(pollRetryBackoff):
			case <-ctx.Done():
			}
		}
	}()
	for i, r := range results {
		if LeadershipError(r.err) {
			connFailed = true
			// The connection (or a stale shard address) failed, or the broker is
			// shutting down: route these partitions by fresh metadata on the next Poll
			// instead of failing the caller, as a Kafka consumer does while a broker
			// restarts or a new leader is elected.
			for _, t := range r.req.Topics {
				co.c.invalidate(t.Topic)
			}
			continue
		}
		if r.err != nil {
			return fmt.Errorf("poll: fetch from %s: %w", r.addr, r.err)
		}
		for _, t := range r.resp.Topics {
			for j := range t.Partitions {
				p := &t.Partitions[j]
				key := topicPartition{t.Topic, p.Partition}
				a, err := co.partitionAnswer(key, p)
				if err != nil {
					return err
				}
				if a == nil {
					continue
				}
				got, err := deliver(key, a, p.Records)
				if got {
					delivered = true
					kept[i] = keep
				}
				if err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// fetchAll sends one fetch request per shard address owning an assigned partition that is
// not backing off, and waits for every answer (or ctx). It returns no results when every
// partition is backing off.
func (co *Consumer) fetchAll(ctx context.Context) ([]fetchResult, error) {
	if len(co.order) == 0 {
		return nil, errors.New("poll: no partitions assigned")
	}
	co.waitForRetries(ctx)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	now := co.now()
	byAddr := map[string]*wire.FetchRequest{}
	var results []fetchResult
	lastTopic := ""
	for _, key := range co.order {
		a := co.assigned[key]
		if a.retryAt.After(now) {
			continue // backing off after a retriable error
		}
		if key.topic != lastTopic {
			// Route by fresh metadata: a topic a routing error marked stale (its leader
			// died or moved) is refreshed here, once per round; a fresh one costs a
			// cache lookup. A failed refresh leaves the old routes (the next round tries
			// again).
			lastTopic = key.topic
			_, _ = co.c.Partitions(ctx, key.topic)
		}
		if err := co.resolve(ctx, key, a); err != nil {
			return nil, fmt.Errorf("poll: position of %s/%d: %w", key.topic, key.partition, err)
		}
		addr := co.c.leaderAddr(key.topic, key.partition)
		req := byAddr[addr]
		if req == nil {
			req = &wire.FetchRequest{MaxWaitMs: int32(co.cfg.MaxWait.Milliseconds()), MinBytes: co.cfg.MinBytes, MaxBytes: co.cfg.MaxBytes}
			byAddr[addr] = req
			results = append(results, fetchResult{addr: addr, req: req})
		}
		if n := len(req.Topics); n == 0 || req.Topics[n-1].Topic != key.topic {
			req.Topics = append(req.Topics, wire.FetchTopic{Topic: key.topic})
		}
		t := &req.Topics[len(req.Topics)-1]
		t.Partitions = append(t.Partitions, wire.FetchPartition{Partition: key.partition, FetchOffset: a.position, MaxBytes: co.cfg.PartitionMaxBytes})
	}
	if len(results) == 0 {
		return nil, nil
	}
	var wg sync.WaitGroup
	for i := range results {
		wg.Add(1)
		r := &results[i]
		r.resp = new(wire.FetchResponse)
		co.c.callAsyncOwned(r.addr, co.cfg.QuotaGroup, r.req, r.resp, func(_ wire.Message, err error, release func()) {
			r.err, r.release = err, release
			wg.Done()
		})
	}
	waited := make(chan struct{})
	go func() { wg.Wait(); close(waited) }()
	select {
	case <-waited:
		return results, nil
	case <-ctx.Done():
		go func() { // release the buffers of responses that arrive after we gave up
			<-waited
			for _, r := range results {
				r.release()
			}
		}()
		return nil, ctx.Err()
	}
}

// partitionAnswer applies one partition's error code from a fetch response. It returns
// the assignment when the records are to be delivered, nil when the partition is skipped
// (unassigned or re-seeked meanwhile, backing off, restarting after out-of-range), or an
// error the caller must see.
func (co *Consumer) partitionAnswer(key topicPartition, p *wire.FetchResponsePartition) (*assignment, error) {
	a := co.assigned[key]
	if a == nil || a.start.kind != offsetNone {
		return nil, nil // unassigned or re-seeked meanwhile
	}
	switch p.ErrorCode {
	case wire.ErrNone:
		a.attempts, a.retryAt = 0, time.Time{}
		return a, nil
	case wire.ErrCorruptMessage:
		// The stored batch at this position is unreadable: retrying cannot help.
		// The caller decides: Seek past it (the message names the next readable
		// offset) or stop.
		return nil, fmt.Errorf("poll %s/%d at offset %d: %w", key.topic, key.partition, a.position, wire.CodeError(p.ErrorCode, p.ErrorMessage))
	case wire.ErrOffsetOutOfRange:
		if co.cfg.OnOutOfRange.kind == offsetEarliest || co.cfg.OnOutOfRange.kind == offsetLatest {
			a.start = co.cfg.OnOutOfRange
			return nil, nil
		}
		return nil, fmt.Errorf("poll %s/%d at %d: %w", key.topic, key.partition, a.position, wire.CodeError(p.ErrorCode, p.ErrorMessage))
	}
	if p.ErrorCode.Retriable() || leadershipCode(p.ErrorCode) {
		// Only a routing error makes fresh metadata worth fetching; a disk or
		// quota error on the right broker does not (refreshing on every loop
		// was half of the spin this back-off replaces).
		if leadershipCode(p.ErrorCode) || p.ErrorCode == wire.ErrUnknownTopicOrPartition {
			co.c.invalidate(key.topic)
		}
		co.backOff(key, a, p.ErrorCode, p.ErrorMessage)
		return nil, nil
	}
	return nil, fmt.Errorf("poll %s/%d: %w", key.topic, key.partition, wire.CodeError(p.ErrorCode, p.ErrorMessage))
}

// decodeRecords appends the records at or after a.position from whole batches in records
// (a trailing partial batch is ignored, as the protocol allows) and advances a.position.
func decodeRecords(key topicPartition, records []byte, a *assignment, out []ConsumedRecord) ([]ConsumedRecord, error) {
	err := walkBatches(key, records, a, func(h batch.Header, whole []byte) error {
		// Uncompressed records point into the fetch response, which is theirs from now
		// on (Poll does not reuse it); decompressed ones live in the decoder's reused
		// buffer and are copied.
		keep := identity
		if h.Compression() != batch.CodecNone {
			keep = clone
		}
		from := a.position
		err := batch.Decode(whole, func(offset, ts int64, r *batch.Record) error {
			if offset < from {
				return nil
			}
			rec := ConsumedRecord{Topic: key.topic, Partition: key.partition, Offset: offset, Timestamp: time.UnixMilli(ts), Key: keep(r.Key), Value: keep(r.Value)}
			if len(r.Headers) > 0 {
				rec.Headers = make([]batch.RecordHeader, len(r.Headers))
				for i, hd := range r.Headers {
					rec.Headers[i] = batch.RecordHeader{Key: hd.Key, Value: keep(hd.Value)}
				}
			}
			out = append(out, rec)
			return nil
		})
		if err != nil {
			return corruptBatch(key, h.BaseOffset, err)
		}
		return nil
	})
	return out, err
}

// walkBatches calls fn for each whole batch in records (a fetched partition's bytes) that
// holds an offset at or after a.position, skipping control batches (transaction markers
// are not records for the application), and moves a.position past each batch fn accepted.
// A trailing partial batch is ignored, as the protocol allows. An error from fn stops the
// walk with a.position before that batch.
func walkBatches(key topicPartition, records []byte, a *assignment, fn func(h batch.Header, whole []byte) error) error {
	for len(records) > 0 {
		h, err := batch.ParseHeader(records)
		if err != nil {
			if len(records) < batch.HeaderSize {
				return nil // partial header at the end
			}
			return fmt.Errorf("poll %s/%d: %w", key.topic, key.partition, err)
		}
		if h.Size() > len(records) {
			return nil // partial batch at the end
		}
		whole := records[:h.Size()]
		records = records[h.Size():]
		if h.LastOffset() < a.position {
			continue
		}
		if !h.Control() {
			if err := fn(h, whole); err != nil {
				return err
			}
		}
		a.position = h.LastOffset() + 1
	}
	return nil
}

// corruptBatch reports a batch that fails its checks on the client: it is as unreadable
// as one the broker reported, so the error carries wire.ErrCorruptMessage for callers to
// test (errors.Is), batch's sentinel in the chain too.
func corruptBatch(key topicPartition, baseOffset int64, err error) error {
	return fmt.Errorf("poll %s/%d: batch at %d: %w: %w", key.topic, key.partition, baseOffset, wire.ErrCorruptMessage, err)
}

func identity(b []byte) []byte { return b }

func clone(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append(make([]byte, 0, len(b)), b...)
}
