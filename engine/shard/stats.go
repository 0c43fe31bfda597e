package shard

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/ringlog/ringlog/engine/shard/core"
	"github.com/ringlog/ringlog/ring"
)

// Operational counters (read by netio/admin's Prometheus collector).
//
// Every counter a produce or fetch moves is a plain field of its shard, written only by the
// shard's loop goroutine: counting costs an increment and a bucket search, never a lock, an
// atomic or an allocation (BenchmarkStatsHotPath, TestStatsRecordNoAllocs). A scrape asks
// each shard for a copy through its mailbox (Broker.Stats), so the copy is taken on the
// owning goroutine too. The few outcomes decided off the loops (a produce refused before it
// reached its shard: unknown topic, full mailbox, fenced epoch) go to broker-wide atomics,
// which only such refusals touch.

// ErrorCodeSlots bounds the error codes counted per operation (codes 0..ErrorCodeSlots-1;
// any other code counts as ErrorCodeUnknown).
const ErrorCodeSlots = 64

// ErrorCodeUnknown is the slot of errors the classifier does not know (the protocol's
// UNKNOWN code).
const ErrorCodeUnknown = 1

// LatencyBuckets are the upper bounds of the latency histograms (produce, fetch, fsync),
// from 50 µs to 10 s: a page-cache produce answers in tens of microseconds, an fdatasync
// on a good NVMe disk in tens to hundreds, a long-poll fetch waits up to its max wait.
var LatencyBuckets = [latencyBucketCount]time.Duration{
	50 * time.Microsecond, 100 * time.Microsecond, 250 * time.Microsecond, 500 * time.Microsecond,
	time.Millisecond, 2500 * time.Microsecond, 5 * time.Millisecond, 10 * time.Millisecond,
	25 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond, 250 * time.Millisecond,
	500 * time.Millisecond, time.Second, 2500 * time.Millisecond, 5 * time.Second, 10 * time.Second,
}

const latencyBucketCount = 17

// Histogram is a fixed-bucket latency histogram: Counts[i] observations at or below
// LatencyBuckets[i] and above the bound before it, Counts[latencyBucketCount] above the
// last bound. A plain value: one goroutine writes it.
type Histogram struct {
	Counts [latencyBucketCount + 1]uint64
	Count  uint64
	Sum    time.Duration
}

// Observe adds one observation. Allocation-free.
func (h *Histogram) Observe(d time.Duration) {
	i := 0
	for i < latencyBucketCount && d > LatencyBuckets[i] {
		i++
	}
	h.Counts[i]++
	h.Count++
	h.Sum += d
}

// Add adds o's observations to h.
func (h *Histogram) Add(o *Histogram) {
	for i := range h.Counts {
		h.Counts[i] += o.Counts[i]
	}
	h.Count += o.Count
	h.Sum += o.Sum
}

// OpStats counts one kind of operation.
type OpStats struct {
	// Requests: for produce, partition appends (one per partition of a produce request);
	// for fetch, whole fetch requests answered.
	Requests uint64
	// Bytes: record batch bytes appended (produce) or returned (fetch).
	Bytes uint64
	// Errors counts failed partition results by protocol error code.
	Errors [ErrorCodeSlots]uint64
	// Latency: produce, from arrival on the owning shard to the answer (acks=all and
	// flush.always include the fdatasync); fetch, from the request reaching the broker core
	// to the answer, a long-poll's wait included.
	Latency Histogram
}

// Add adds o to s.
func (s *OpStats) Add(o *OpStats) {
	s.Requests += o.Requests
	s.Bytes += o.Bytes
	for i := range s.Errors {
		s.Errors[i] += o.Errors[i]
	}
	s.Latency.Add(&o.Latency)
}

// ShardStats is a copy of one shard's counters and partitions, taken on its loop.
type ShardStats struct {
	Shard int
	// Ring is the shard reactor's own counters; MailboxDepth the messages waiting for it
	// (read just before the copy was posted).
	Ring         ring.Stats
	MailboxDepth int
	Produce      OpStats
	Fetch        OpStats
	// Fsync is the latency of the pipelined group-commit fdatasyncs (one per partition
	// sync, all of a partition's unsynced segments).
	Fsync Histogram
	// FsyncInline counts the syncs of Fsync that ran inline on the shard's thread (the one
	// sync of a quiet loop turn; see Config.SyncInlineOff): the loop was blocked for them.
	FsyncInline uint64
	// ReplicaWakes counts the followers' fetches that parked here by what ended the park
	// (the data arrived: an append, a sync, the replicator; or the deadline); ReplicaWakesLate
	// those of them parked ReplicaWakeLate or longer.
	ReplicaWakes, ReplicaWakesLate [core.WakeCauses]uint64
	Partitions                     []PartitionState
}

// ReplicaWakeLate is the park of a follower's fetch that ReplicaWakesLate counts: far
// beyond the gap between two appends of a partition written continuously.
const ReplicaWakeLate = 100 * time.Millisecond

// shardCounters are a shard's counters. Loop goroutine only.
type shardCounters struct {
	produce, fetch                 OpStats
	fsync                          Histogram
	fsyncInline                    uint64
	replicaWakes, replicaWakesLate [core.WakeCauses]uint64
}

// offLoopCounters count outcomes decided before a request reached any shard loop. Any
// goroutine; only refusals touch them.
type offLoopCounters struct {
	produceErrors, fetchErrors [ErrorCodeSlots]atomic.Uint64
}

// errorCode classifies err with Config.ErrorCode into a slot.
func (b *Broker) errorCode(err error) int {
	if b.cfg.ErrorCode == nil {
		return ErrorCodeUnknown
	}
	code := b.cfg.ErrorCode(err)
	if code < 0 || code >= ErrorCodeSlots {
		return ErrorCodeUnknown
	}
	return code
}

// CountProduceError counts a produce refused before it reached the broker core (a
// malformed batch the protocol layer could not split). Any goroutine.
func (b *Broker) CountProduceError(err error) {
	b.offLoop.produceErrors[b.errorCode(err)].Add(1)
}

// clockBase anchors the monotonic durations the counters measure with.
var clockBase = time.Now()

// monotonic is the time since clockBase (monotonic clock; no allocation).
func monotonic() time.Duration { return time.Since(clockBase) }

// Answered counts a produce answer given by the core (core.AnswerObserver). Loop goroutine.
func (d *coreDriver) Answered(_ *core.Partition, res core.ProduceResult) {
	(*Shard)(d).produceAnswered(res)
}

// produceAnswered counts one produce answer. Loop goroutine.
func (s *Shard) produceAnswered(res core.ProduceResult) {
	st := &s.counters.produce
	if res.Err != nil {
		st.Errors[s.b.errorCode(res.Err)]++
	}
	if res.Received > 0 {
		st.Latency.Observe(monotonic() - res.Received)
	}
}

// fetchAnswered counts one answered fetch request. Loop goroutine of s.
func (s *Shard) fetchAnswered(op *fetchOp) {
	st := &s.counters.fetch
	st.Requests++
	for i := range op.results {
		r := &op.results[i]
		st.Bytes += uint64(r.Records.Size)
		if r.Err != nil {
			st.Errors[s.b.errorCode(r.Err)]++
		}
	}
	st.Latency.Observe(monotonic() - op.started)
	if op.req.Replica && op.parked > 0 && op.woke > 0 && op.cause < core.WakeCauses {
		s.counters.replicaWakes[op.cause]++
		if op.woke-op.parked >= ReplicaWakeLate {
			s.counters.replicaWakesLate[op.cause]++
		}
	}
}

// fetchAnsweredOffLoop counts the errors of a fetch answered off every shard loop.
func (b *Broker) fetchAnsweredOffLoop(op *fetchOp) {
	for i := range op.results {
		if err := op.results[i].Err; err != nil {
			b.offLoop.fetchErrors[b.errorCode(err)].Add(1)
		}
	}
}

// Stats copies every shard's counters and the state of its partitions, each on its own
// loop (one mailbox message per shard; admin path: it waits for the shards). The
// refusals counted off the loops are added to shard 0's copy.
func (b *Broker) Stats() ([]ShardStats, error) {
	if b.closing.Load() {
		return nil, ErrShuttingDown
	}
	out := make([]ShardStats, len(b.shards))
	fns := make([]func() error, len(b.shards))
	for i, s := range b.shards {
		out[i].Shard, out[i].MailboxDepth = i, s.r.MailboxDepth()
		fns[i] = func() error { return onShard(s, func() error { s.snapshot(&out[i]); return nil }) }
	}
	if err := runAll(fns); err != nil {
		return nil, err
	}
	if len(out) > 0 {
		for code := range ErrorCodeSlots {
			out[0].Produce.Errors[code] += b.offLoop.produceErrors[code].Load()
			out[0].Fetch.Errors[code] += b.offLoop.fetchErrors[code].Load()
		}
	}
	return out, nil
}

// snapshot fills out with s's counters and partitions. Loop goroutine.
func (s *Shard) snapshot(out *ShardStats) {
	out.Ring = s.r.Stats()
	out.Produce, out.Fetch, out.Fsync = s.counters.produce, s.counters.fetch, s.counters.fsync
	out.FsyncInline = s.counters.fsyncInline
	out.ReplicaWakes, out.ReplicaWakesLate = s.counters.replicaWakes, s.counters.replicaWakesLate
	out.Partitions = make([]PartitionState, 0, len(s.parts))
	for _, p := range s.parts {
		out.Partitions = append(out.Partitions, s.partitionState(p))
	}
}

// Ping posts a no-op to every shard's mailbox and waits, up to wait, until each has run it:
// every loop is alive and draining its mailbox. Any goroutine (readiness checks).
func (b *Broker) Ping(wait time.Duration) error {
	if b.closing.Load() || b.draining.Load() {
		return ErrShuttingDown
	}
	done := make(chan int, len(b.shards))
	for i, s := range b.shards {
		if err := s.r.Post(func() { done <- i }); err != nil {
			return fmt.Errorf("shard %d: %w", i, postErr(s, err))
		}
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for range b.shards {
		select {
		case <-done:
		case <-timer.C:
			return fmt.Errorf("a shard did not answer its mailbox within %s", wait)
		}
	}
	return nil
}
