package client

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ringlog/ringlog/engine/batch"
	"github.com/ringlog/ringlog/netio/wire"
)

// Acks selects when the broker acknowledges a produce request.
type Acks uint8

const (
	AckAll    Acks = iota // once the high watermark covers the batch (the default)
	AckLeader             // once the leader's write completes
	AckNone               // no acknowledgement; callbacks report only local errors
)

func (a Acks) wire() int16 {
	switch a {
	case AckLeader:
		return wire.AcksLeader
	case AckNone:
		return wire.AcksNone
	}
	return wire.AcksAll
}

// ProducerConfig configures a Producer. Zero fields take the defaults noted.
type ProducerConfig struct {
	Acks        Acks          // default AckAll
	Linger      time.Duration // how long a batch waits for more records; default 5ms, negative = none
	BatchBytes  int           // a partition's batch is sent once it reaches this size; default 256 KiB
	Compression batch.Codec   // batch.CodecNone (default), CodecGzip, CodecSnappy, CodecLZ4 or CodecZstd
	// RequestBytesMax bounds one produce request (several partitions' batches to one
	// address); default 4 MiB.
	RequestBytesMax int
	// Retries bounds the attempts after the first for retriable errors; default 10. A
	// leadership error (NOT_LEADER_OR_WRONG_SHARD, a fenced or unknown leader epoch,
	// SHUTTING_DOWN) or a lost connection does not count: the batch goes again, after
	// fresh metadata, until DeliveryTimeout since it was sealed has passed, so that a
	// producer outlasts the election of a new leader.
	Retries int
	// RetryBackoff is the first pause before a partition's batches go again; it doubles
	// per attempt up to RetryBackoffMax, with jitter. Defaults 50ms and 1s.
	RetryBackoff    time.Duration
	RetryBackoffMax time.Duration
	// DeliveryTimeout bounds how long a batch is retried after leadership errors and lost
	// connections (Kafka's delivery.timeout.ms); default 2 minutes.
	DeliveryTimeout time.Duration
	ProduceTimeout  time.Duration // broker-side wait for acks=all; default 30s
	// BufferBytesMax bounds record bytes accepted by Send and not yet acknowledged; Send
	// blocks while it is exceeded. Default 64 MiB.
	BufferBytesMax int64
	// DisableIdempotence turns the idempotent producer off. By default (and always unless
	// Acks is AckNone) the producer gets a producer id and epoch from the broker
	// (InitProducerId) and numbers its batches per partition, so that a retried batch the
	// broker already wrote is not written twice, and keeps up to InflightBatchesMax batches
	// per partition in flight while still writing them in order. docs/delivery-semantics.md.
	DisableIdempotence bool
	// Name is a stable identity for an idempotent producer (Kafka's transactional.id): a
	// new producer with the same Name gets the same producer id with a newer epoch, and the
	// broker refuses every write of the older instance from then on (ErrFenced). Empty: a
	// fresh producer id, no fencing.
	Name string
	// ReadPoll, when positive, makes a SendSync that reads its own answer poll the socket
	// with non-blocking reads for up to this long before it parks in the netpoller, so that
	// an answer arriving within it is read without the thread sleeping and being woken.
	// It trades CPU for latency: the calling thread spins for up to ReadPoll per SendSync
	// (capped at ReadPollMax); ReadPollStats counts the polls that found the answer and those
	// that ran out. Default 0 (no poll); docs/client.md, "Polling for the answer".
	ReadPoll time.Duration
}

// ReadPollMax caps ProducerConfig.ReadPoll: the CPU one SendSync may burn polling.
const ReadPollMax = time.Millisecond

// ReadPollStats counts what ProducerConfig.ReadPoll did: polls whose answer arrived within
// the poll (Hits), polls that ran out and parked (Misses), and the non-blocking reads they
// made (Spins).
type ReadPollStats struct {
	Hits, Misses, Spins uint64
}

// ReadPollStats returns the producer's ReadPoll counts so far.
func (p *Producer) ReadPollStats() ReadPollStats {
	return ReadPollStats{Hits: p.pollStats.hits.Load(), Misses: p.pollStats.misses.Load(), Spins: p.pollStats.spins.Load()}
}

// pollCounts is where a connection's pollReadable adds up ReadPollStats.
type pollCounts struct {
	hits, misses, spins atomic.Uint64
}

// InflightBatchesMax is how many batches per partition an idempotent producer has in
// flight at once: Kafka's max.in.flight.requests.per.connection limit for idempotence, and
// the number of batches per producer the broker remembers for dedup.
const InflightBatchesMax = 5

// ErrFenced wraps the error of every record of a producer whose Name a newer producer took
// over (the broker answered INVALID_PRODUCER_EPOCH). The producer is finished: every later
// Send fails with it too. errors.Is(err, wire.ErrInvalidProducerEpoch) holds as well.
var ErrFenced = errors.New("ringlog producer: fenced by a newer producer with the same name")

func (cfg *ProducerConfig) setDefaults() {
	if cfg.Linger == 0 {
		cfg.Linger = 5 * time.Millisecond
	}
	if cfg.Linger < 0 {
		cfg.Linger = 0
	}
	if cfg.BatchBytes <= 0 {
		cfg.BatchBytes = 256 << 10
	}
	if cfg.RequestBytesMax <= 0 {
		cfg.RequestBytesMax = 4 << 20
	}
	if cfg.Retries == 0 {
		cfg.Retries = 10
	}
	if cfg.RetryBackoff <= 0 {
		cfg.RetryBackoff = 50 * time.Millisecond
	}
	if cfg.RetryBackoffMax < cfg.RetryBackoff {
		cfg.RetryBackoffMax = max(time.Second, cfg.RetryBackoff)
	}
	if cfg.DeliveryTimeout <= 0 {
		cfg.DeliveryTimeout = 2 * time.Minute
	}
	if cfg.ProduceTimeout <= 0 {
		cfg.ProduceTimeout = 30 * time.Second
	}
	if cfg.BufferBytesMax <= 0 {
		cfg.BufferBytesMax = 64 << 20
	}
}

// Record is one record to produce. Partition -1 lets the producer choose: murmur2 of the
// key like Kafka's default partitioner, or, for a nil key, a sticky run measured in bytes
// like Kafka's uniform sticky partitioner (KIP-794; see Producer). After a successful send,
// Partition and Offset hold where it was written (Offset -1 with AckNone).
type Record struct {
	Topic     string
	Partition int32
	Key       []byte
	Value     []byte
	Headers   []batch.RecordHeader
	Timestamp time.Time // zero = now
	Offset    int64
}

// ErrProducerClosed is returned by Send after Close.
var ErrProducerClosed = errors.New("ringlog producer: closed")

// Producer batches records per partition and sends them with bounded in-flight requests.
// Idempotent (the default): up to InflightBatchesMax batches per partition are in flight,
// each numbered; a batch that must be retried is resent, with every later one, in sequence
// order, and the broker drops the copies it already has. Without idempotence, one request
// per partition is in flight, so retries never reorder a partition (but may duplicate).
// Send, Flush and Close are safe for concurrent use.
//
// Null keys (Partition -1, Key nil) are placed as Kafka's default producer places them
// (KIP-480, KIP-794 uniform sticky with adaptive partitioning): every such record of a topic
// goes to one partition until BatchBytes of record bytes went to it, then the run moves
// on, so that a partition's batch fills up to BatchBytes instead of each record of a
// request landing on a different partition. A linger expiry or a Flush does not end a run
// (KIP-794; KIP-480 moved on at every new batch, which sent more to slow partitions). When a
// run ends its partition's batch is sealed at once: it is as full as the run makes it.
// The next partition is the less loaded of two picked at random among the others, by
// batches queued and not yet acknowledged: Kafka's adaptive partitioning weighs every
// partition by its queue length; two random choices give most of that at O(1) per run.
// With Partition -1 and a key, murmur2 of the key picks the partition (Kafka's default).
type Producer struct {
	c          *Client
	cfg        ProducerConfig
	idempotent bool
	pollStats  pollCounts // ReadPoll's counts

	idMu     sync.Mutex       // serialises InitProducerId calls
	identity producerIdentity // guarded by mu; id -1 until the first Send got one
	// bumping: a batch failed for good, leaving a hole in its partition's sequence; no
	// batch is sent until every in-flight one is answered and the producer has a new epoch
	// (or id) under which its unacknowledged batches are renumbered from 0. Guarded by mu.
	bumping       bool
	bumpRetryAt   time.Time // guarded by mu
	bumpAttempts  int       // guarded by mu: failed InitProducerId calls of this bump
	inflightTotal int       // guarded by mu: batches in flight over all partitions
	fatal         error     // guarded by mu: the producer was fenced; every record fails

	mu         sync.Mutex
	cond       *sync.Cond                    // signalled when buffered bytes or unfinished drop
	parts      map[topicPartition]*partState // guarded by mu
	sticky     map[string]*stickyRun         // guarded by mu: topic -> the null-key run
	intN       func(int) int                 // guarded by mu: rand.IntN; tests script the draws
	buffered   int64                         // guarded by mu: record bytes accepted, not completed
	unfinished int                           // guarded by mu: records accepted whose callback has not run
	flushing   int                           // guarded by mu: Flush calls in progress (linger off)
	closed     bool                          // guarded by mu
	callbacks  []completion                  // guarded by mu: completed, callback not yet run
	cbSpare    []completion                  // guarded by mu: runCallbacks' other buffer (empty)

	cbMu sync.Mutex // held while running callbacks, so they run in completion order

	// sendMu is held from collecting requests (collectLocked) until they are written to
	// their connections, by the sender loop and by SendSync's direct path, so requests reach
	// the wire in the order their batches were collected (an idempotent partition's
	// sequence order). Taken before mu, never while holding it.
	sendMu sync.Mutex
	// Scratch of collectLocked and buildRequestLocked, reused from one collection to the
	// next: guarded by sendMu (and mu), which both callers hold from collecting requests
	// until they are written.
	collected  []*produceRequest
	byAddr     map[string]*produceRequest // in use (not empty) once collected outgrew collectLinearMax
	topicIndex map[string]int             // in use once a request's topics outgrew requestTopicsLinearMax

	wake       chan struct{} // cap 1: the sender loop has something to do
	senderDone chan struct{}
}

type topicPartition struct {
	topic     string
	partition int32
}

type partState struct {
	topicPartition
	builder  *batch.Builder
	open     []pendingRecord // records in the open (unsealed) batch
	openedAt time.Time
	sealed   []*sealedBatch // unacknowledged batches (and acknowledged ones behind them), oldest first
	inflight int            // batches of sealed in flight
	retryAt  time.Time
	retries  int // consecutive retries of the partition's batches: the back-off grows with it
	// retrying: a batch came back for a retry; nothing more is sent until every in-flight
	// batch is answered, then the unacknowledged ones go again in sequence order.
	retrying bool
	nextSeq  int32            // idempotent: base sequence of the next batch sealed
	built    producerIdentity // identity and sequence the builder is set up with
	builtSeq int32
}

type producerIdentity struct {
	id    int64
	epoch int16
}

// batchState is where a sealed batch stands.
type batchState uint8

const (
	batchQueued   batchState = iota // waiting to be sent (first time or again)
	batchInflight                   // in a request awaiting its response
	batchAcked                      // written; completes once the batches before it have
)

type pendingRecord struct {
	rec   *Record
	cb    func(*Record, error)
	bytes int64
}

type sealedBatch struct {
	data     []byte
	records  []pendingRecord
	sealedAt time.Time // DeliveryTimeout counts from here
	attempts int
	state    batchState
	sent     bool  // sent at least once: a resend goes alone in its request (idempotent)
	alone    bool  // its request was refused for good as a whole: it goes again on its own
	offset   int64 // base offset once acknowledged (-1 unknown)
	err      error // set with batchAcked when it failed for good
}

// NewProducer returns a producer sending through c.
func (c *Client) NewProducer(cfg ProducerConfig) *Producer {
	cfg.setDefaults()
	// A request must fit the broker's frame limit (the broker closes the connection
	// otherwise); keep room for the request's own fields.
	c.mu.Lock()
	frameMax := c.serverFrameBytesMax
	c.mu.Unlock()
	if limit := int(frameMax) - requestOverheadBytes; frameMax > 0 && cfg.RequestBytesMax > limit {
		cfg.RequestBytesMax = max(limit, 1)
	}
	p := &Producer{
		c:          c,
		cfg:        cfg,
		idempotent: !cfg.DisableIdempotence && cfg.Acks != AckNone,
		identity:   producerIdentity{id: -1, epoch: -1},
		parts:      map[topicPartition]*partState{},
		sticky:     map[string]*stickyRun{},
		intN:       rand.IntN,
		wake:       make(chan struct{}, 1),
		senderDone: make(chan struct{}),
	}
	p.cond = sync.NewCond(&p.mu)
	go p.run()
	return p
}

func (p *Producer) signal() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

func recordBytes(r *Record) int64 {
	n := int64(len(r.Key) + len(r.Value) + 24)
	for _, h := range r.Headers {
		n += int64(len(h.Key) + len(h.Value) + 4)
	}
	return n
}

// Send queues r and calls cb once the record is acknowledged or has failed. Callbacks run
// in completion order (in record order within a partition) on the producer's internal
// goroutines: they must not block and must not call SendSync or Flush. Send blocks while BufferBytesMax is exceeded; it returns
// an error (and does not call cb) only when the record cannot be queued at all. The key,
// value and headers are copied before Send returns.
func (p *Producer) Send(ctx context.Context, r *Record, cb func(*Record, error)) error {
	if cb == nil {
		cb = func(*Record, error) {}
	}
	wake, err := p.enqueue(ctx, r, cb)
	if wake {
		p.signal()
	}
	return err
}

// enqueue adds r to its partition's open batch. It reports whether the sender loop must
// be woken (a batch was sealed, or one was opened and its linger timer must be armed).
func (p *Producer) enqueue(ctx context.Context, r *Record, cb func(*Record, error)) (wake bool, err error) {
	partitions, err := p.c.Partitions(ctx, r.Topic)
	if n, known := p.c.knownPartitions(r.Topic); err != nil && errors.Is(err, ErrConnClosed) && known {
		partitions, err = n, nil // the broker is unreachable for now: the sender retries
	}
	if err != nil {
		return false, fmt.Errorf("produce to %s: %w", r.Topic, err)
	}
	if r.Partition >= int32(partitions) || r.Partition < -1 {
		return false, fmt.Errorf("produce to %s/%d: %w", r.Topic, r.Partition, wire.ErrUnknownTopicOrPartition)
	}
	if err := p.ensureIdentity(ctx); err != nil {
		return false, err
	}
	size := recordBytes(r)
	ts := r.Timestamp
	if ts.IsZero() {
		ts = time.Now()
	}
	p.mu.Lock()
	if p.buffered > 0 && p.buffered+size > p.cfg.BufferBytesMax && !p.closed {
		if err := p.waitForBufferLocked(ctx, size); err != nil {
			p.mu.Unlock()
			return false, err
		}
	}
	if p.closed {
		p.mu.Unlock()
		return false, ErrProducerClosed
	}
	if p.fatal != nil {
		p.mu.Unlock()
		return false, p.fatal
	}
	partition := r.Partition
	sealed := false // a batch was sealed: the sender loop has something to send
	switch {
	case partition >= 0:
	case r.Key != nil:
		partition = KeyPartition(r.Key, partitions)
	default:
		partition, sealed = p.stickyLocked(r.Topic, partitions, size)
	}
	r.Partition = partition
	ps := p.partLocked(topicPartition{r.Topic, partition})
	if len(ps.open) > 0 && ps.builder.Len()+int(size) > p.cfg.BatchBytes {
		p.sealLocked(ps)
		sealed = true
	}
	if len(ps.open) == 0 {
		ps.openedAt = time.Now()
	}
	ps.builder.Append(ts.UnixMilli(), r.Key, r.Value, r.Headers)
	ps.open = append(ps.open, pendingRecord{rec: r, cb: cb, bytes: size})
	p.buffered += size
	p.unfinished++
	if ps.builder.Len() >= p.cfg.BatchBytes {
		p.sealLocked(ps)
		sealed = true
	}
	firstInBatch := len(ps.open) == 1 // the sender must arm the linger timer
	p.mu.Unlock()
	return sealed || firstInBatch || p.cfg.Linger == 0, nil
}

// waitForBufferLocked waits (p.mu held) until size more bytes fit in BufferBytesMax.
func (p *Producer) waitForBufferLocked(ctx context.Context, size int64) error {
	stop := context.AfterFunc(ctx, func() {
		p.mu.Lock()
		p.cond.Broadcast()
		p.mu.Unlock()
	})
	defer stop()
	for p.buffered > 0 && p.buffered+size > p.cfg.BufferBytesMax && !p.closed {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("produce: waiting for buffer space: %w", err)
		}
		p.cond.Wait()
	}
	return nil
}

// SendSync sends r and waits for its acknowledgement; it returns the record's offset.
//
// The calling goroutine seals the record's batch and writes the request itself (with any
// other request ready at that moment) instead of waking the sender loop for it: a record
// sent on its own costs no goroutine hand-off before it reaches the socket. When no other
// response is outstanding on the connection, the caller also reads the response itself
// (conn.readHeld) instead of being woken by a reader goroutine: a round trip on the
// calling goroutine, like a plain socket ping-pong. Batches, sequence numbers and retries
// are the sender loop's, unchanged.
func (p *Producer) SendSync(ctx context.Context, r *Record) (int64, error) {
	w := syncWaits.Get().(*syncWait)
	if _, err := p.enqueue(ctx, r, w.done); err != nil {
		syncWaits.Put(w) // never handed out: its callback cannot run
		return -1, err
	}
	sent, held := p.sendNow(topicPartition{r.Topic, r.Partition}, w.held[:0])
	if !sent {
		p.signal()
	}
	for _, h := range held {
		h.conn.readHeld(ctx, &h.rq.call, w.ready, p.cfg.ReadPoll, &p.pollStats)
		h.rq.unref() // the caller's reference: it no longer compares the call
	}
	clear(held)
	w.held = held[:0]
	select {
	case err := <-w.result:
		syncWaits.Put(w) // its callback ran, once: the channel is empty again
		return r.Offset, err
	case <-ctx.Done():
		return -1, ctx.Err() // w stays with the record: its callback may still run
	}
}

// syncWait is what a SendSync waits on: the record's callback delivers the outcome to
// result. Pooled, with both functions bound once, so a SendSync allocates none of them.
type syncWait struct {
	result chan error
	done   func(*Record, error)
	ready  func() bool   // the outcome is in
	held   []heldRequest // sendNow's, reused
}

// heldRequest is a request whose connection's reader role the SendSync caller took
// (conn.sendHeld): it reads the connection (readHeld) until its answer is in, then drops
// its reference to the request.
type heldRequest struct {
	conn *conn
	rq   *produceRequest
}

var syncWaits = sync.Pool{New: func() any {
	w := &syncWait{result: make(chan error, 1)}
	w.done = func(_ *Record, err error) { w.result <- err }
	w.ready = func() bool { return len(w.result) > 0 }
	return w
}}

// sendNow seals key's open batch and sends, from the calling goroutine, whatever the
// sender loop would send now. It reports whether a request went out; if none did (the
// partition waits for a retry or for its in-flight requests, or the sender loop or another
// SendSync is writing right now), the sender loop must be woken to send the batch later.
// held, appended to the given slice, lists the connections whose reader role the caller
// took: it must read them (readHeld) until its answer is in.
// It never waits for sendMu, a dial or a free request slot on the connection (the sender
// loop does that): a caller stuck there could not honour its context.
func (p *Producer) sendNow(key topicPartition, held []heldRequest) (sent bool, _ []heldRequest) {
	p.mu.Lock()
	if ps := p.parts[key]; ps != nil && len(ps.open) > 0 {
		p.sealLocked(ps) // do not wait for the linger: the caller is waiting
	}
	p.mu.Unlock()
	if !p.c.connReady(p.c.leaderAddr(key.topic, key.partition)) || !p.sendMu.TryLock() {
		return false, held
	}
	defer p.sendMu.Unlock()
	p.mu.Lock()
	requests, _ := p.collectLocked(time.Now())
	p.mu.Unlock()
	for _, rq := range requests {
		if cn := p.sendRequest(rq, true); cn != nil {
			held = append(held, heldRequest{cn, rq})
		}
	}
	return len(requests) > 0, held
}

// stickyRun is a topic's current null-key partition and the record bytes placed on it.
type stickyRun struct {
	partition int32
	bytes     int64
}

// stickyLocked places a null-key record of size bytes: on the topic's current run's
// partition while the run, with it, stays within BatchBytes (a record larger than that
// still gets a run of its own); otherwise on a new run's partition (see Producer). It
// reports whether it sealed the finished run's batch.
func (p *Producer) stickyLocked(topic string, partitions int, size int64) (_ int32, sealed bool) {
	run := p.sticky[topic]
	if run != nil && int(run.partition) < partitions && run.bytes+size <= int64(p.cfg.BatchBytes) {
		run.bytes += size
		return run.partition, false
	}
	if run == nil {
		run = &stickyRun{partition: -1}
		p.sticky[topic] = run
	} else if int(run.partition) < partitions {
		// The run is over: its batch is as full as it gets, do not let it linger.
		if ps := p.parts[topicPartition{topic, run.partition}]; ps != nil && len(ps.open) > 0 {
			p.sealLocked(ps)
			sealed = true
		}
	}
	run.partition, run.bytes = p.nextStickyLocked(topic, partitions, run.partition), size
	return run.partition, sealed
}

// nextStickyLocked picks a new run's partition other than last (-1: none): the one with
// fewer batches queued of two picked at random.
func (p *Producer) nextStickyLocked(topic string, partitions int, last int32) int32 {
	pick := func() int32 {
		if last < 0 || int(last) >= partitions || partitions == 1 {
			return int32(p.intN(partitions))
		}
		return int32((int(last) + 1 + p.intN(partitions-1)) % partitions) // any but last
	}
	first, second := pick(), pick()
	if p.queuedLocked(topic, second) < p.queuedLocked(topic, first) {
		return second
	}
	return first
}

// queuedLocked is how many batches of a partition wait for their acknowledgement, the open
// one included: Kafka's adaptive partitioning's measure of a partition's load.
func (p *Producer) queuedLocked(topic string, partition int32) int {
	ps := p.parts[topicPartition{topic, partition}]
	if ps == nil {
		return 0
	}
	n := len(ps.sealed)
	if len(ps.open) > 0 {
		n++
	}
	return n
}

func (p *Producer) partLocked(key topicPartition) *partState {
	ps := p.parts[key]
	if ps == nil {
		ps = &partState{topicPartition: key, builder: batch.NewBuilder(p.builderOptionsLocked(0))}
		ps.built, ps.builtSeq = p.identity, 0
		p.parts[key] = ps
	}
	return ps
}

// builderOptionsLocked returns the options of a batch starting at sequence seq.
func (p *Producer) builderOptionsLocked(seq int32) batch.BuilderOptions {
	if !p.idempotent {
		return batch.BuilderOptions{Codec: p.cfg.Compression}
	}
	return batch.BuilderOptions{Codec: p.cfg.Compression, ProducerID: p.identity.id, ProducerEpoch: p.identity.epoch,
		BaseSequence: seq, Idempotent: true}
}

// sealLocked closes the open batch of ps and queues it for sending. It does not end a
// null-key run on ps (KIP-794: a run ends after BatchBytes, see stickyLocked).
func (p *Producer) sealLocked(ps *partState) {
	if len(ps.open) == 0 {
		return
	}
	records := ps.open
	b := sealedBatches.Get().(*sealedBatch)
	ps.open, b.records = b.records, nil // the open batch goes on in the recycled one's array
	data, err := ps.builder.Build(getBatchBuffer(ps.builder.Len()))
	if err == nil && len(data) > p.cfg.RequestBytesMax {
		putBatchBuffer(data)
		err = fmt.Errorf("batch of %d bytes exceeds the %d-byte request limit (broker frame limit): %w",
			len(data), p.cfg.RequestBytesMax, wire.ErrMessageTooLarge)
	}
	if err == nil && p.idempotent {
		if ps.built != p.identity || ps.builtSeq != ps.nextSeq {
			// The producer moved to a new epoch while this batch was open.
			batchSetProducer(data, p.identity, ps.nextSeq)
		}
		ps.nextSeq = addSequence(ps.nextSeq, len(records)) // only batches that will be sent take sequences
	}
	if p.idempotent {
		ps.builder.ResetWith(p.builderOptionsLocked(ps.nextSeq))
		ps.built, ps.builtSeq = p.identity, ps.nextSeq
	} else {
		ps.builder.Reset()
	}
	if err != nil {
		p.finishLocked(records, fmt.Errorf("build batch for %s/%d: %w", ps.topic, ps.partition, err))
		b.records = records
		releaseSealedBatch(b)
		return
	}
	b.data, b.records, b.offset, b.sealedAt = data, records, -1, time.Now()
	ps.sealed = append(ps.sealed, b)
}

// Sealed batches are recycled once completed (completeAckedLocked): by then no request
// refers to them (a batch is in at most one request, and completes after its answer), and
// its records' callbacks are queued by value. A recycled batch keeps its records array,
// empty, for the partition's next open batch: a partition sending one record at a time
// allocates neither.
var sealedBatches = sync.Pool{New: func() any { return new(sealedBatch) }}

// sealedRecordsMax bounds the records array a recycled batch keeps.
const sealedRecordsMax = 4096

func releaseSealedBatch(b *sealedBatch) {
	records := b.records
	clear(records)
	if cap(records) > sealedRecordsMax {
		records = nil
	}
	*b = sealedBatch{records: records[:0]}
	sealedBatches.Put(b)
}

func batchSetProducer(data []byte, id producerIdentity, seq int32) {
	batch.SetProducer(data, id.id, id.epoch, seq)
}

// addSequence advances a sequence by n records, wrapping after math.MaxInt32 as Kafka does.
func addSequence(seq int32, n int) int32 {
	return int32((int64(seq) + int64(n)) % (1 << 31))
}

type completion struct {
	pr  pendingRecord
	err error
}

// finishLocked completes records: releases their buffer space and queues their callbacks,
// which runCallbacks runs outside the lock in completion order.
func (p *Producer) finishLocked(records []pendingRecord, err error) {
	for _, pr := range records {
		p.buffered -= pr.bytes
		p.callbacks = append(p.callbacks, completion{pr, err})
	}
	p.cond.Broadcast()
}

// runCallbacks runs queued callbacks. It is called by the sender loop and by response
// completions, never by Send (a callback may call Send).
func (p *Producer) runCallbacks() {
	p.cbMu.Lock()
	defer p.cbMu.Unlock()
	for range 1 << 20 {
		p.mu.Lock()
		batch := p.callbacks
		if len(batch) == 0 {
			p.mu.Unlock()
			return
		}
		// Two buffers: completions queue into one while the callbacks of the other run
		// (cbMu keeps a single runner), so a steady stream of completions allocates nothing.
		p.callbacks, p.cbSpare = p.cbSpare, nil
		p.mu.Unlock()
		for _, c := range batch {
			c.pr.cb(c.pr.rec, c.err)
		}
		n := len(batch)
		clear(batch)
		if cap(batch) > sealedRecordsMax {
			batch = nil
		}
		p.mu.Lock()
		p.unfinished -= n // after the callbacks: Flush returns once they have run
		p.cbSpare = batch[:0]
		p.cond.Broadcast()
		p.mu.Unlock()
	}
}

// run is the sender loop: it seals lingered batches and sends ready ones.
func (p *Producer) run() {
	defer close(p.senderDone)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		p.sendMu.Lock()
		p.mu.Lock()
		requests, next := p.collectLocked(time.Now())
		exit := p.closed && p.unfinished == 0
		bump := p.bumpReadyLocked(time.Now())
		p.mu.Unlock()
		for _, rq := range requests {
			p.sendRequest(rq, false)
		}
		p.sendMu.Unlock()
		p.runCallbacks()
		if exit {
			return
		}
		if bump {
			p.bumpEpoch()
			continue
		}
		timer.Reset(next)
		select {
		case <-p.wake:
		case <-timer.C:
		}
	}
}

// requestOverheadBytes bounds a produce request's bytes besides its batches: frame header,
// acks, timeout, topic names and partition entries for a request to one address.
const requestOverheadBytes = 64 << 10

// produceRequest is one produce request being collected, in flight, or answered. Pooled
// with its wire request and response and its done callback bound once: a request of one
// batch (SendSync's) allocates nothing. It goes back to the pool once complete has run and
// the SendSync caller that read its answer inline (a second reference) is done with it;
// the connection does not touch the request, the response or the call after calling done.
type produceRequest struct {
	p      *Producer
	addr   string
	groups []sendGroup
	bytes  int

	req    wire.ProduceRequest
	resp   wire.ProduceResponse
	call   call     // the connection's record of the request
	copies [][]byte // pooled buffers of groups of several batches, concatenated
	done   func(wire.Message, error)
	refs   atomic.Int32 // complete's, and a held reader's until it stops reading
}

var produceRequests sync.Pool

func (p *Producer) newRequest(addr string) *produceRequest {
	rq, _ := produceRequests.Get().(*produceRequest)
	if rq == nil {
		rq = new(produceRequest)
		rq.done = func(_ wire.Message, err error) {
			var resp *wire.ProduceResponse
			if rq.p.cfg.Acks != AckNone {
				resp = &rq.resp
			}
			rq.p.complete(rq, resp, err)
		}
	}
	rq.p, rq.addr = p, addr
	rq.refs.Store(1)
	return rq
}

// addGroup appends ps's batches to rq, reusing the arrays of an earlier use.
func (rq *produceRequest) addGroup(ps *partState, batches []*sealedBatch) {
	if len(rq.groups) < cap(rq.groups) {
		rq.groups = rq.groups[:len(rq.groups)+1]
	} else {
		rq.groups = append(rq.groups, sendGroup{})
	}
	g := &rq.groups[len(rq.groups)-1]
	g.ps, g.batches = ps, append(g.batches[:0], batches...)
}

// pooledRequestArraysMax: a request of more partitions than this leaves its arrays to the
// GC rather than keeping them pooled.
const pooledRequestArraysMax = 1024

func (rq *produceRequest) unref() {
	if rq.refs.Add(-1) != 0 {
		return
	}
	for i := range rq.groups {
		g := &rq.groups[i]
		clear(g.batches)
		g.ps, g.batches = nil, g.batches[:0]
	}
	for i := range rq.req.Topics {
		t := &rq.req.Topics[i]
		clear(t.Partitions)
		t.Topic, t.Partitions = "", t.Partitions[:0]
	}
	for _, b := range rq.copies {
		putBatchBuffer(b)
	}
	clear(rq.copies)
	rq.groups, rq.req.Topics, rq.copies = rq.groups[:0], rq.req.Topics[:0], rq.copies[:0]
	if cap(rq.groups) > pooledRequestArraysMax || cap(rq.req.Topics) > pooledRequestArraysMax ||
		len(rq.resp.Topics) > pooledRequestArraysMax {
		rq.groups, rq.req.Topics, rq.resp.Topics = nil, nil, nil
	}
	rq.p, rq.addr, rq.bytes, rq.call = nil, "", 0, call{}
	produceRequests.Put(rq)
}

// sendGroup is one partition's batches in one request, concatenated on the wire.
type sendGroup struct {
	ps      *partState
	batches []*sealedBatch
}

// collectLocked seals batches whose linger expired and gathers, per address, what each
// partition may send now. Without idempotence a partition with no request in flight sends
// every sealed batch it has queued (up to the request size limit) in one request: while a
// request waits for its acknowledgement — an fdatasync, say — the batches sealed meanwhile
// all go in the next one, so throughput grows with the latency instead of shrinking. An
// idempotent partition does the same with up to InflightBatchesMax batches sent and not yet
// resolved (see sentUnresolved), in sequence order; a batch sent before goes again alone, so that the broker finds each
// resent batch either wholly written (and answers with its offsets) or not at all. It
// returns how long to sleep.
func (p *Producer) collectLocked(now time.Time) ([]*produceRequest, time.Duration) {
	next := time.Hour
	clear(p.collected)
	p.collected = p.collected[:0]
	if len(p.byAddr) > 0 {
		clear(p.byAddr)
	}
	for _, ps := range p.parts {
		if len(ps.open) > 0 {
			due := ps.openedAt.Add(p.cfg.Linger)
			if p.flushing > 0 || p.closed || !now.Before(due) {
				p.sealLocked(ps)
			} else {
				next = min(next, due.Sub(now))
			}
		}
		if p.fatal != nil {
			p.failQueuedLocked(ps, p.fatal)
			continue
		}
		if len(ps.sealed) == 0 || ps.inflight > 0 && (ps.retrying || !p.idempotent) {
			continue
		}
		if now.Before(ps.retryAt) {
			next = min(next, ps.retryAt.Sub(now))
			continue
		}
		ps.retrying = false
		first := -1
		for i, b := range ps.sealed {
			// While the producer waits to move to a new epoch, only batches sent before go
			// out (again, under the old epoch): see bumpReadyLocked.
			if b.state == batchQueued && (b.sent || !p.bumping) {
				first = i
				break
			}
		}
		if first < 0 {
			continue
		}
		budget := len(ps.sealed)
		if p.idempotent && !ps.sealed[first].sent {
			// A new batch needs room among the sent ones; a batch going again is one of them.
			budget = InflightBatchesMax - sentUnresolved(ps)
		}
		if budget <= 0 {
			continue
		}
		addr := p.c.leaderAddr(ps.topic, ps.partition)
		rq := p.collectingLocked(addr)
		if rq == nil || rq.bytes+len(ps.sealed[first].data) > p.cfg.RequestBytesMax {
			rq = p.newRequest(addr)
			p.addCollectedLocked(rq)
		}
		n, size := 1, len(ps.sealed[first].data)
		resend := p.idempotent && ps.sealed[first].sent || ps.sealed[first].alone
		for !resend && first+n < len(ps.sealed) && n < budget {
			b := ps.sealed[first+n]
			if b.state != batchQueued || b.sent || b.alone || rq.bytes+size+len(b.data) > p.cfg.RequestBytesMax {
				break
			}
			size += len(b.data)
			n++
		}
		for _, b := range ps.sealed[first : first+n] {
			b.state, b.sent = batchInflight, true
		}
		rq.addGroup(ps, ps.sealed[first:first+n])
		rq.bytes += size
		ps.inflight += n
		p.inflightTotal += n
	}
	if p.bumping && p.inflightTotal == 0 && !p.probesPendingLocked() {
		next = min(next, max(p.bumpRetryAt.Sub(now), 0))
	}
	return p.collected, max(next, 0)
}

// collectLinearMax: up to this many requests in one collection, the one for an address is
// found by a scan; beyond, through a map (a collection stays O(partitions)).
const collectLinearMax = 8

// collectingLocked returns the request collectLocked adds addr's batches to: the last one
// made for addr, or nil.
func (p *Producer) collectingLocked(addr string) *produceRequest {
	if len(p.byAddr) > 0 {
		return p.byAddr[addr]
	}
	for i := len(p.collected) - 1; i >= 0; i-- {
		if p.collected[i].addr == addr {
			return p.collected[i]
		}
	}
	return nil
}

func (p *Producer) addCollectedLocked(rq *produceRequest) {
	p.collected = append(p.collected, rq)
	switch {
	case len(p.byAddr) > 0:
		p.byAddr[rq.addr] = rq
	case len(p.collected) > collectLinearMax:
		if p.byAddr == nil {
			p.byAddr = map[string]*produceRequest{}
		}
		for _, r := range p.collected { // in order: the last one per address wins
			p.byAddr[r.addr] = r
		}
	}
}

// sentUnresolved counts the batches of ps sent since its oldest unacknowledged one: those
// in flight, those waiting to go again, and those acknowledged behind them. Capping it at
// InflightBatchesMax (rather than only the batches in flight) keeps every batch that may
// still go again among the last InflightBatchesMax the broker remembers for dedup: a batch
// whose connection died goes again after its retry back-off, and a request collected
// before that connection failed may reach the broker on a new connection before the retry,
// so counting only the batches in flight let a partition run past the broker's memory of a
// batch still to be resent (OUT_OF_ORDER_SEQUENCE on its retry).
//
// Batches go out in sequence order, so the sent ones are a prefix of ps.sealed and the count
// stops at the first batch never sent: O(InflightBatchesMax) however many batches are
// queued behind. (Only a move to a new epoch unmarks a batch after a gap, and batches of the
// new epoch start the broker's memory afresh.)
func sentUnresolved(ps *partState) int {
	n := 0
	for _, b := range ps.sealed {
		if !b.sent || n == InflightBatchesMax {
			break
		}
		n++
	}
	return n
}

// sendRequest writes rq. With held (SendSync's caller, who waits anyway) the caller may
// take the connection's reader role: it gets the connection back, must read it (readHeld)
// and then drop its reference to rq (unref).
func (p *Producer) sendRequest(rq *produceRequest, held bool) *conn {
	p.mu.Lock()
	p.buildRequestLocked(rq)
	p.mu.Unlock()
	cn, err := p.c.connFor(rq.addr)
	if err != nil {
		rq.done(nil, err)
		return nil
	}
	if p.cfg.Acks == AckNone {
		rq.call = call{done: rq.done} // no response: done runs once the frame is written
		cn.sendCall(&rq.req, &rq.call, false)
		return nil
	}
	rq.call = call{resp: &rq.resp, done: rq.done}
	if !held {
		cn.sendCall(&rq.req, &rq.call, false)
		return nil
	}
	rq.refs.Add(1) // the caller's, should it read: readHeld compares the call
	if cn.sendHeld(&rq.req, &rq.call) {
		return cn
	}
	rq.unref()
	return nil
}

// buildRequestLocked fills rq's wire request from its groups (sendMu held: it uses the
// producer's topic index).
func (p *Producer) buildRequestLocked(rq *produceRequest) {
	req := &rq.req
	req.Acks, req.TimeoutMs = p.cfg.Acks.wire(), int32(p.cfg.ProduceTimeout.Milliseconds())
	if len(p.topicIndex) > 0 { // a large map is not cleared for every small request
		clear(p.topicIndex)
	}
	for _, g := range rq.groups {
		data := g.batches[0].data
		if len(g.batches) > 1 {
			// The protocol takes a partition's batches concatenated; the copy is the price
			// of keeping each sealed batch retriable on its own buffer.
			size := 0
			for _, b := range g.batches {
				size += len(b.data)
			}
			data = getBatchBuffer(size)
			for _, b := range g.batches {
				data = append(data, b.data...)
			}
			rq.copies = append(rq.copies, data)
		}
		t := p.requestTopic(req, g.ps.topic)
		t.Partitions = append(t.Partitions, wire.ProducePartition{Partition: g.ps.partition, Records: data})
	}
}

// requestTopicsLinearMax: up to this many topics in a request, a topic's entry is found
// by a scan; beyond, through the producer's index (a request stays O(partitions)).
const requestTopicsLinearMax = 8

// requestTopic returns topic's entry in req, added (reusing an earlier use's arrays) if new.
func (p *Producer) requestTopic(req *wire.ProduceRequest, topic string) *wire.ProduceTopic {
	n := len(req.Topics)
	if n > 0 && req.Topics[n-1].Topic == topic { // one topic: the common case
		return &req.Topics[n-1]
	}
	if n <= requestTopicsLinearMax {
		for i := range req.Topics {
			if req.Topics[i].Topic == topic {
				return &req.Topics[i]
			}
		}
	} else if i, ok := p.topicIndex[topic]; ok {
		return &req.Topics[i]
	}
	if n < cap(req.Topics) {
		req.Topics = req.Topics[:n+1]
	} else {
		req.Topics = append(req.Topics, wire.ProduceTopic{})
	}
	t := &req.Topics[n]
	t.Topic, t.Partitions = topic, t.Partitions[:0]
	switch {
	case n == requestTopicsLinearMax: // past the scan's limit from now on: index them all
		if p.topicIndex == nil {
			p.topicIndex = map[string]int{}
		}
		for i := range req.Topics {
			p.topicIndex[req.Topics[i].Topic] = i
		}
	case n > requestTopicsLinearMax:
		p.topicIndex[topic] = n
	}
	return t
}

// complete applies a produce response (or a transport error) to the batches sent.
func (p *Producer) complete(rq *produceRequest, resp *wire.ProduceResponse, err error) {
	defer rq.unref() // complete's reference: nothing below keeps rq, its request or response
	results := produceResults{resp: resp}
	var refresh []string
	p.mu.Lock()
	now := time.Now()
	for _, g := range rq.groups {
		ps := g.ps
		for _, b := range g.batches {
			if b.state != batchInflight {
				panic(fmt.Sprintf("ringlog producer: %s/%d completed a batch that was not in flight", ps.topic, ps.partition))
			}
		}
		ps.inflight -= len(g.batches)
		p.inflightTotal -= len(g.batches)
		code, baseOffset, batchErr := p.outcome(ps.topicPartition, &results, err)
		switch {
		case batchErr == nil:
			// The broker appended the batches in order, contiguously, from baseOffset (or
			// had appended them so before: a duplicate answers with the original offset).
			ps.retries = 0
			next := baseOffset
			for _, b := range g.batches {
				b.state, b.offset = batchAcked, -1
				if baseOffset >= 0 {
					b.offset = next
					next += int64(len(b.records))
				}
			}
		case p.idempotent && code == wire.ErrInvalidProducerEpoch:
			p.fenceLocked(fmt.Errorf("%w: produce to %s/%d: %w", ErrFenced, ps.topic, ps.partition, batchErr))
			for _, b := range g.batches {
				b.state, b.err = batchAcked, p.fatal
			}
		case p.retriableLocked(ps, g, code, batchErr, now):
			leadership := leadershipCode(code) || LeadershipError(batchErr)
			for _, b := range g.batches {
				b.state = batchQueued
				if !leadership {
					b.attempts++
				}
				if p.bumping && code == wire.ErrOutOfOrderSequence {
					b.sent = false // a sequence before it is missing: it is not in the log
				}
			}
			ps.retrying = true
			ps.retries++
			ps.retryAt = now.Add(BackoffDelay(p.cfg.RetryBackoff, p.cfg.RetryBackoffMax, ps.retries-1, p.c.jitter()))
			if leadership || code == wire.ErrUnknownTopicOrPartition {
				refresh = append(refresh, ps.topic)
			}
		case len(g.batches) > 1 && code != wire.ErrNone:
			// The broker refuses a partition's batches as a whole when one is bad: find out
			// which by sending each on its own.
			for _, b := range g.batches {
				b.state, b.alone = batchQueued, true
			}
			ps.retrying = true
		default:
			for _, b := range g.batches {
				b.state = batchAcked
				b.err = fmt.Errorf("produce to %s/%d after %d attempts: %w", ps.topic, ps.partition, b.attempts+1, batchErr)
			}
			if p.idempotent && p.fatal == nil {
				// The batch may or may not be in the log, and the batches after it carry
				// sequences that no longer follow: move to a new epoch and renumber them.
				p.bumping = true
			}
		}
		p.completeAckedLocked(ps)
	}
	wake := len(refresh) > 0 || p.senderNeededLocked(rq)
	p.mu.Unlock()
	p.runCallbacks()
	for _, topic := range refresh {
		// Not on this goroutine: it may be the connection's reader, which the metadata
		// response has to come through.
		p.c.invalidate(topic)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), p.c.cfg.RequestTimeout)
			defer cancel()
			p.c.Partitions(ctx, topic) // best effort; the retry uses whatever metadata we have
		}()
	}
	if wake {
		p.signal()
	}
}

// senderNeededLocked reports whether the answer to rq may have given the sender loop work:
// a batch of one of its partitions waits to be sent (a completion is what frees its
// in-flight slot), a retry or a new epoch is pending, or the producer flushes, closes or
// failed for good. A lone record answered (SendSync's case) wakes nobody but its caller.
func (p *Producer) senderNeededLocked(rq *produceRequest) bool {
	if p.closed || p.flushing > 0 || p.bumping || p.fatal != nil {
		return true
	}
	for _, g := range rq.groups {
		if g.ps.retrying {
			return true
		}
		for _, b := range g.ps.sealed {
			if b.state == batchQueued {
				return true
			}
		}
	}
	return false
}

// retriableLocked decides whether a failed group goes again. OUT_OF_ORDER_SEQUENCE is
// retriable for an idempotent batch while an earlier batch of its partition is still
// unacknowledged: that one failed or is in flight, and once it is written this one follows.
func (p *Producer) retriableLocked(ps *partState, g sendGroup, code wire.ErrorCode, err error, now time.Time) bool {
	if leadershipCode(code) || LeadershipError(err) {
		return now.Sub(g.batches[0].sealedAt) < p.cfg.DeliveryTimeout
	}
	if g.batches[0].attempts >= p.cfg.Retries {
		return false
	}
	if code.Retriable() || errors.Is(err, ErrConnClosed) {
		return true
	}
	if p.idempotent && code == wire.ErrOutOfOrderSequence {
		if p.bumping {
			return true // renumbered under the new epoch before it goes again
		}
		for _, b := range ps.sealed {
			if b == g.batches[0] {
				return false // nothing unacknowledged before it: a real gap
			}
			if b.state != batchAcked || b.err != nil {
				return true
			}
		}
	}
	return false
}

// completeAckedLocked completes the acknowledged (or failed) batches at the front of ps, so
// that callbacks run in record order within the partition.
func (p *Producer) completeAckedLocked(ps *partState) {
	n := 0
	for n < len(ps.sealed) && ps.sealed[n].state == batchAcked {
		b := ps.sealed[n]
		for j, pr := range b.records {
			pr.rec.Offset = -1
			if b.err == nil && b.offset >= 0 {
				pr.rec.Offset = b.offset + int64(j)
			}
		}
		p.finishLocked(b.records, b.err)
		putBatchBuffer(b.data)
		releaseSealedBatch(b)
		n++
	}
	if n == 0 {
		return
	}
	// Keep the array: move the rest to its front when that costs no more than the batches
	// just completed (amortised O(1) per batch), else drop the front.
	rest := len(ps.sealed) - n
	if rest <= n {
		copy(ps.sealed, ps.sealed[n:])
		clear(ps.sealed[rest:])
		ps.sealed = ps.sealed[:rest]
		return
	}
	clear(ps.sealed[:n])
	ps.sealed = ps.sealed[n:]
}

// failQueuedLocked fails every batch of ps not in flight (the producer was fenced).
func (p *Producer) failQueuedLocked(ps *partState, err error) {
	for _, b := range ps.sealed {
		if b.state == batchQueued {
			b.state, b.err = batchAcked, err
		}
	}
	p.completeAckedLocked(ps)
}

// fenceLocked finishes the producer: a newer instance with the same Name took over.
func (p *Producer) fenceLocked(err error) {
	if p.fatal == nil {
		p.fatal = err
	}
	p.bumping = false
	for _, ps := range p.parts {
		for _, pr := range ps.open {
			p.finishLocked([]pendingRecord{pr}, p.fatal)
		}
		ps.open = nil
		ps.builder.Reset()
		p.failQueuedLocked(ps, p.fatal)
	}
}

// outcome extracts one partition's result.
func (p *Producer) outcome(key topicPartition, results *produceResults, err error) (wire.ErrorCode, int64, error) {
	if err != nil {
		return wire.CodeOf(err), -1, err
	}
	if results.resp == nil { // acks=0: written to the socket
		return wire.ErrNone, -1, nil
	}
	rp := results.find(key)
	if rp == nil {
		return wire.ErrUnknown, -1, fmt.Errorf("response lacks %s/%d", key.topic, key.partition)
	}
	if rp.ErrorCode != wire.ErrNone {
		return rp.ErrorCode, -1, wire.CodeError(rp.ErrorCode, rp.ErrorMessage)
	}
	return wire.ErrNone, rp.BaseOffset, nil
}

// produceResults finds each partition's result in a produce response. The broker answers
// in request order, so a cursor finds each in turn at O(1); a response in another order is
// scanned while small, and indexed by a map built once when large (O(partitions) either way).
type produceResults struct {
	resp       *wire.ProduceResponse
	topic, pos int // the cursor: the result expected next
	byKey      map[topicPartition]*wire.ProduceResponsePartition
}

// produceResultsLinearMax: up to this many results, a result out of order is scanned for.
const produceResultsLinearMax = 16

func (r *produceResults) find(key topicPartition) *wire.ProduceResponsePartition {
	topics := r.resp.Topics
	for r.topic < len(topics) && r.pos >= len(topics[r.topic].Partitions) {
		r.topic, r.pos = r.topic+1, 0
	}
	if r.topic < len(topics) && topics[r.topic].Topic == key.topic && topics[r.topic].Partitions[r.pos].Partition == key.partition {
		r.pos++
		return &topics[r.topic].Partitions[r.pos-1]
	}
	if r.byKey == nil {
		n := 0
		for i := range topics {
			n += len(topics[i].Partitions)
		}
		if n <= produceResultsLinearMax {
			for i := range topics {
				for j := range topics[i].Partitions {
					if topics[i].Topic == key.topic && topics[i].Partitions[j].Partition == key.partition {
						return &topics[i].Partitions[j]
					}
				}
			}
			return nil
		}
		r.byKey = make(map[topicPartition]*wire.ProduceResponsePartition, n)
		for i := range topics {
			for j := range topics[i].Partitions {
				r.byKey[topicPartition{topics[i].Topic, topics[i].Partitions[j].Partition}] = &topics[i].Partitions[j]
			}
		}
	}
	return r.byKey[key]
}

// Flush sends every queued record at once (ignoring linger) and waits until all records
// sent before the call are acknowledged or failed and their callbacks have returned.
func (p *Producer) Flush(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() {
		p.mu.Lock()
		p.cond.Broadcast()
		p.mu.Unlock()
	})
	defer stop()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.flushing++
	defer func() { p.flushing-- }()
	p.signal()
	for p.unfinished > 0 {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("flush: %d records outstanding: %w", p.unfinished, err)
		}
		p.cond.Wait()
	}
	return nil
}

// Close flushes and stops the producer. Sends after Close fail with ErrProducerClosed.
func (p *Producer) Close(ctx context.Context) error {
	err := p.Flush(ctx)
	p.mu.Lock()
	p.closed = true
	p.cond.Broadcast()
	p.mu.Unlock()
	p.signal()
	if err != nil {
		return err
	}
	select {
	case <-p.senderDone:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Batch buffers are recycled once their produce request has completed: by then the
// connection has written (copied) them and nothing else refers to them. They are pooled by
// size class — 4 per power of two from 4 KiB to 16 MiB, so a buffer is at most 25 % larger
// than asked for — because batches and the concatenations of several (buildRequestLocked)
// differ in size: one pool for all dropped every buffer found too small and allocated
// anew. A pool holds *[]byte; the emptied holders go to a pool of their own, so that a Put
// allocates no new holder.
var (
	batchBuffers       [batchBufferClasses]sync.Pool
	batchBufferHolders sync.Pool
)

const (
	batchBufferMinShift = 12 // 4 KiB: the smallest class
	batchBufferMaxShift = 24 // 16 MiB: the largest class; larger buffers are not pooled
	batchBufferClasses  = (batchBufferMaxShift-batchBufferMinShift)*4 + 1
)

// batchBufferClassUp is the smallest class whose size is at least n (may be past the last).
func batchBufferClassUp(n int) int {
	if n <= 1<<batchBufferMinShift {
		return 0
	}
	k := bits.Len(uint(n)) - 1 // 2^k <= n < 2^(k+1)
	step := 1 << (k - 2)
	j := (n - 1<<k + step - 1) / step // 0..4; 4 is the next power's first class
	return (k-batchBufferMinShift)*4 + j
}

// batchBufferClassDown is the largest class whose size is at most n, or -1.
func batchBufferClassDown(n int) int {
	if n < 1<<batchBufferMinShift {
		return -1
	}
	k := bits.Len(uint(n)) - 1
	return (k-batchBufferMinShift)*4 + (n-1<<k)/(1<<(k-2))
}

func batchBufferClassSize(c int) int {
	k := c/4 + batchBufferMinShift
	return 1<<k + c%4*(1<<(k-2))
}

func getBatchBuffer(sizeHint int) []byte {
	c := batchBufferClassUp(sizeHint)
	if c >= batchBufferClasses {
		return make([]byte, 0, sizeHint)
	}
	if v := batchBuffers[c].Get(); v != nil {
		h := v.(*[]byte)
		b := *h
		*h = nil
		batchBufferHolders.Put(h)
		return b[:0]
	}
	return make([]byte, 0, batchBufferClassSize(c))
}

func putBatchBuffer(b []byte) {
	c := batchBufferClassDown(cap(b))
	if c < 0 || c >= batchBufferClasses {
		return
	}
	h, _ := batchBufferHolders.Get().(*[]byte)
	if h == nil {
		h = new([]byte)
	}
	*h = b[:0]
	batchBuffers[c].Put(h)
}
