package client

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/ringlog/ringlog/netio/wire"

	"github.com/ringlog/ringlog/engine/batch"
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
	Compression batch.Codec   // batch.CodecNone (default) or batch.CodecZstd
	// RequestBytesMax bounds one produce request (several partitions' batches to one
	// address); default 4 MiB.
	RequestBytesMax int
	Retries         int           // attempts after the first for retriable errors; default 10
	RetryBackoff    time.Duration // default 50ms
	ProduceTimeout  time.Duration // broker-side wait for acks=all; default 30s
	// BufferBytesMax bounds record bytes accepted by Send and not yet acknowledged; Send
	// blocks while it is exceeded. Default 64 MiB.
	BufferBytesMax int64
}

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
	if cfg.ProduceTimeout <= 0 {
		cfg.ProduceTimeout = 30 * time.Second
	}
	if cfg.BufferBytesMax <= 0 {
		cfg.BufferBytesMax = 64 << 20
	}
}

// Record is one record to produce. Partition -1 lets the producer choose: murmur2 of the
// key like Kafka's default partitioner, or sticky partitioning for a nil key. After a
// successful send, Partition and Offset hold where it was written (Offset -1 with AckNone).
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

// Producer batches records per partition and sends them with bounded in-flight requests:
// at most one batch per partition is in flight, so retries never reorder a partition.
// Send, Flush and Close are safe for concurrent use.
type Producer struct {
	c   *Client
	cfg ProducerConfig

	mu         sync.Mutex
	cond       *sync.Cond                    // signalled when buffered bytes or unfinished drop
	parts      map[topicPartition]*partState // guarded by mu
	sticky     map[string]int32              // guarded by mu: topic -> sticky partition for nil keys
	buffered   int64                         // guarded by mu: record bytes accepted, not completed
	unfinished int                           // guarded by mu: records accepted, not completed
	flushing   int                           // guarded by mu: Flush calls in progress (linger off)
	closed     bool                          // guarded by mu
	callbacks  []completion                  // guarded by mu: completed, callback not yet run

	cbMu sync.Mutex // held while running callbacks, so they run in completion order

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
	sealed   []*sealedBatch // oldest first; sealed[:inflight] are in flight
	inflight int            // sealed batches in the one produce request in flight (0: none)
	retryAt  time.Time
}

type pendingRecord struct {
	rec   *Record
	cb    func(*Record, error)
	bytes int64
}

type sealedBatch struct {
	data     []byte
	records  []pendingRecord
	attempts int
}

// NewProducer returns a producer sending through c.
func (c *Client) NewProducer(cfg ProducerConfig) *Producer {
	cfg.setDefaults()
	// A request must fit the broker's frame limit (the broker closes the connection
	// otherwise); keep room for the request's own fields.
	if limit := int(c.serverFrameBytesMax) - requestOverheadBytes; c.serverFrameBytesMax > 0 && cfg.RequestBytesMax > limit {
		cfg.RequestBytesMax = max(limit, 1)
	}
	p := &Producer{
		c:          c,
		cfg:        cfg,
		parts:      map[topicPartition]*partState{},
		sticky:     map[string]int32{},
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
	partitions, err := p.c.Partitions(ctx, r.Topic)
	if err != nil {
		return fmt.Errorf("produce to %s: %w", r.Topic, err)
	}
	if r.Partition >= int32(partitions) || r.Partition < -1 {
		return fmt.Errorf("produce to %s/%d: %w", r.Topic, r.Partition, wire.ErrUnknownTopicOrPartition)
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
			return err
		}
	}
	if p.closed {
		p.mu.Unlock()
		return ErrProducerClosed
	}
	partition := r.Partition
	switch {
	case partition >= 0:
	case r.Key != nil:
		partition = KeyPartition(r.Key, partitions)
	default:
		partition = p.stickyLocked(r.Topic, partitions)
	}
	r.Partition = partition
	ps := p.partLocked(topicPartition{r.Topic, partition})
	sealed := false
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
	if sealed || firstInBatch || p.cfg.Linger == 0 {
		p.signal()
	}
	return nil
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
func (p *Producer) SendSync(ctx context.Context, r *Record) (int64, error) {
	result := make(chan error, 1)
	if err := p.Send(ctx, r, func(_ *Record, err error) { result <- err }); err != nil {
		return -1, err
	}
	p.mu.Lock()
	if ps := p.parts[topicPartition{r.Topic, r.Partition}]; ps != nil && len(ps.open) > 0 {
		p.sealLocked(ps) // do not wait for the linger: the caller is waiting
	}
	p.mu.Unlock()
	p.signal()
	select {
	case err := <-result:
		return r.Offset, err
	case <-ctx.Done():
		return -1, ctx.Err()
	}
}

func (p *Producer) stickyLocked(topic string, partitions int) int32 {
	if sp, ok := p.sticky[topic]; ok && int(sp) < partitions {
		return sp
	}
	sp := int32(rand.IntN(partitions))
	p.sticky[topic] = sp
	return sp
}

func (p *Producer) partLocked(key topicPartition) *partState {
	ps := p.parts[key]
	if ps == nil {
		ps = &partState{topicPartition: key, builder: batch.NewBuilder(batch.BuilderOptions{Codec: p.cfg.Compression})}
		p.parts[key] = ps
	}
	return ps
}

// sealLocked closes the open batch of ps and queues it for sending. A nil-key topic whose
// sticky partition was ps moves on to another partition, as Kafka's sticky partitioner.
func (p *Producer) sealLocked(ps *partState) {
	if len(ps.open) == 0 {
		return
	}
	records := ps.open
	ps.open = nil
	data, err := ps.builder.Build(getBatchBuffer(ps.builder.Len()))
	ps.builder.Reset()
	if sp, ok := p.sticky[ps.topic]; ok && sp == ps.partition {
		delete(p.sticky, ps.topic)
	}
	if err != nil {
		p.finishLocked(records, fmt.Errorf("build batch for %s/%d: %w", ps.topic, ps.partition, err))
		return
	}
	if len(data) > p.cfg.RequestBytesMax {
		putBatchBuffer(data)
		p.finishLocked(records, fmt.Errorf("batch of %d bytes for %s/%d exceeds the %d-byte request limit (broker frame limit): %w",
			len(data), ps.topic, ps.partition, p.cfg.RequestBytesMax, wire.ErrMessageTooLarge))
		return
	}
	ps.sealed = append(ps.sealed, &sealedBatch{data: data, records: records})
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
		p.unfinished--
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
		p.callbacks = nil
		p.mu.Unlock()
		if len(batch) == 0 {
			return
		}
		for _, c := range batch {
			c.pr.cb(c.pr.rec, c.err)
		}
	}
}

// run is the sender loop: it seals lingered batches and sends ready ones.
func (p *Producer) run() {
	defer close(p.senderDone)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		p.mu.Lock()
		requests, next := p.collectLocked(time.Now())
		exit := p.closed && p.unfinished == 0
		p.mu.Unlock()
		p.runCallbacks()
		for _, rq := range requests {
			p.sendRequest(rq)
		}
		if exit {
			return
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

type produceRequest struct {
	addr    string
	batches []*partState // each sends its sealed[:inflight], concatenated
	bytes   int
}

// collectLocked seals batches whose linger expired and gathers, per address, the
// partitions with sealed batches and no request in flight. A partition sends every sealed
// batch it has queued (up to the request size limit) in one request: while a request waits
// for its acknowledgement — an fdatasync, say — the batches sealed meanwhile all go in the
// next one, so throughput grows with the latency instead of shrinking. It returns how long
// to sleep.
func (p *Producer) collectLocked(now time.Time) ([]*produceRequest, time.Duration) {
	next := time.Hour
	byAddr := map[string]*produceRequest{}
	var out []*produceRequest
	for _, ps := range p.parts {
		if len(ps.open) > 0 {
			due := ps.openedAt.Add(p.cfg.Linger)
			if p.flushing > 0 || p.closed || !now.Before(due) {
				p.sealLocked(ps)
			} else {
				next = min(next, due.Sub(now))
			}
		}
		if ps.inflight > 0 || len(ps.sealed) == 0 {
			continue
		}
		if now.Before(ps.retryAt) {
			next = min(next, ps.retryAt.Sub(now))
			continue
		}
		addr := p.c.leaderAddr(ps.topic, ps.partition)
		rq := byAddr[addr]
		if rq == nil || rq.bytes+len(ps.sealed[0].data) > p.cfg.RequestBytesMax {
			rq = &produceRequest{addr: addr}
			byAddr[addr] = rq
			out = append(out, rq)
		}
		n, size := 1, len(ps.sealed[0].data)
		for n < len(ps.sealed) && rq.bytes+size+len(ps.sealed[n].data) <= p.cfg.RequestBytesMax {
			size += len(ps.sealed[n].data)
			n++
		}
		rq.batches = append(rq.batches, ps)
		rq.bytes += size
		ps.inflight = n
	}
	return out, max(next, 0)
}

func (p *Producer) sendRequest(rq *produceRequest) {
	req := &wire.ProduceRequest{Acks: p.cfg.Acks.wire(), TimeoutMs: int32(p.cfg.ProduceTimeout.Milliseconds())}
	topicIndex := map[string]int{}
	sent := make([][]*sealedBatch, len(rq.batches))
	p.mu.Lock()
	for i, ps := range rq.batches {
		sent[i] = ps.sealed[:ps.inflight:ps.inflight]
		data := sent[i][0].data
		if len(sent[i]) > 1 {
			// The protocol takes a partition's batches concatenated; the copy is the price
			// of keeping each sealed batch retriable on its own buffer.
			size := 0
			for _, b := range sent[i] {
				size += len(b.data)
			}
			data = make([]byte, 0, size)
			for _, b := range sent[i] {
				data = append(data, b.data...)
			}
		}
		ti, ok := topicIndex[ps.topic]
		if !ok {
			ti = len(req.Topics)
			topicIndex[ps.topic] = ti
			req.Topics = append(req.Topics, wire.ProduceTopic{Topic: ps.topic})
		}
		req.Topics[ti].Partitions = append(req.Topics[ti].Partitions, wire.ProducePartition{Partition: ps.partition, Records: data})
	}
	p.mu.Unlock()
	if p.cfg.Acks == AckNone {
		p.c.CallAsync(rq.addr, req, nil, func(_ wire.Message, err error) { p.complete(rq, sent, nil, err) })
		return
	}
	resp := new(wire.ProduceResponse)
	p.c.CallAsync(rq.addr, req, resp, func(_ wire.Message, err error) { p.complete(rq, sent, resp, err) })
}

// complete applies a produce response (or a transport error) to the batches sent.
func (p *Producer) complete(rq *produceRequest, sent [][]*sealedBatch, resp *wire.ProduceResponse, err error) {
	results := map[topicPartition]wire.ProduceResponsePartition{}
	if err == nil && resp != nil {
		for _, t := range resp.Topics {
			for _, rp := range t.Partitions {
				results[topicPartition{t.Topic, rp.Partition}] = rp
			}
		}
	}
	var refresh []string
	p.mu.Lock()
	now := time.Now()
	for i, ps := range rq.batches {
		batches := sent[i]
		if len(ps.sealed) < len(batches) || ps.sealed[0] != batches[0] || ps.inflight != len(batches) {
			panic(fmt.Sprintf("ringlog producer: %s/%d completed batches that are not its oldest", ps.topic, ps.partition))
		}
		ps.inflight = 0
		code, baseOffset, batchErr := p.outcome(ps.topicPartition, results, resp, err)
		if batchErr == nil {
			// The broker appended the batches in order, contiguously, from baseOffset.
			next := baseOffset
			for _, b := range batches {
				for j, pr := range b.records {
					pr.rec.Offset = -1
					if baseOffset >= 0 {
						pr.rec.Offset = next + int64(j)
					}
				}
				next += int64(len(b.records))
				p.finishLocked(b.records, nil)
				putBatchBuffer(b.data)
			}
			ps.sealed = ps.sealed[len(batches):]
			continue
		}
		retriable := code.Retriable() || errors.Is(batchErr, ErrConnClosed)
		if retriable && batches[0].attempts < p.cfg.Retries {
			for _, b := range batches {
				b.attempts++
			}
			ps.retryAt = now.Add(p.cfg.RetryBackoff)
			if code == wire.ErrNotLeaderOrWrongShard || code == wire.ErrUnknownTopicOrPartition || errors.Is(batchErr, ErrConnClosed) {
				refresh = append(refresh, ps.topic)
			}
			continue
		}
		ps.sealed = ps.sealed[len(batches):]
		for _, b := range batches {
			putBatchBuffer(b.data)
			p.finishLocked(b.records, fmt.Errorf("produce to %s/%d after %d attempts: %w", ps.topic, ps.partition, b.attempts+1, batchErr))
		}
	}
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
	p.signal()
}

// outcome extracts one partition's result.
func (p *Producer) outcome(key topicPartition, results map[topicPartition]wire.ProduceResponsePartition, resp *wire.ProduceResponse, err error) (wire.ErrorCode, int64, error) {
	if err != nil {
		return wire.CodeOf(err), -1, err
	}
	if resp == nil { // acks=0: written to the socket
		return wire.ErrNone, -1, nil
	}
	rp, ok := results[key]
	if !ok {
		return wire.ErrUnknown, -1, fmt.Errorf("response lacks %s/%d", key.topic, key.partition)
	}
	if rp.ErrorCode != wire.ErrNone {
		return rp.ErrorCode, -1, wire.CodeError(rp.ErrorCode, rp.ErrorMessage)
	}
	return wire.ErrNone, rp.BaseOffset, nil
}

// Flush sends every queued record at once (ignoring linger) and waits until all records
// sent before the call are acknowledged or failed.
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
// connection has written (copied) them and nothing else refers to them.
var batchBuffers sync.Pool

func getBatchBuffer(sizeHint int) []byte {
	if v := batchBuffers.Get(); v != nil {
		if b := *(v.(*[]byte)); cap(b) >= sizeHint {
			return b[:0]
		}
	}
	return make([]byte, 0, sizeHint)
}

func putBatchBuffer(b []byte) {
	if cap(b) == 0 || cap(b) > 16<<20 {
		return
	}
	b = b[:0]
	batchBuffers.Put(&b)
}
