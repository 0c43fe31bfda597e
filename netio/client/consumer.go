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
	// NoPrefetch turns fetching ahead off. By default, when an answer brings a partition's
	// records and the broker holds more after them, the next fetch to that shard address
	// is sent before the records are handed out, so that the broker sends it while the
	// caller decodes (each address has at most one fetch in flight). A consumer then holds
	// up to two answers per shard address, the one being handed out and the next, each at
	// most MaxBytes: 2 x 16 MiB per address with the defaults. With NoPrefetch a fetch goes
	// out only from Poll, one answer per address is held, and catch-up reads run at about
	// half the speed (docs/benchmarks.md, "Fetch rounds (issue 14, session 7)").
	NoPrefetch bool
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

	// Fetches in flight, at most one per shard address, and the answers that arrived
	// (filled by the connections' reader goroutines under arrivedMu; arrivedSignal, of
	// capacity 1, says there is something). Everything else is the polling goroutine's.
	inflight      map[string]*addrFetch
	arrivedMu     sync.Mutex
	arrived       []*addrFetch
	arrivedSignal chan struct{}

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
	attempts int  // consecutive retriable fetch errors
	fetching bool // in a fetch in flight (Consumer.inflight)
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
// parallel, at most one in flight per address) and returns the records after each
// partition's position from the answers that are in, advancing the positions. It waits for
// an answer, which the broker holds up to MaxWait while it has no data (long-poll), and
// returns an empty slice if none brought records. An answer bringing records while the
// broker holds more sends that address's next fetch before Poll returns (see
// ConsumerConfig.NoPrefetch); an answer overtaken by Seek, Assign or Unassign is dropped.
// PollBatches is the same fetch handing out whole batches instead of a record object each.
func (co *Consumer) Poll(ctx context.Context) ([]ConsumedRecord, error) {
	var out []ConsumedRecord
	err := co.fetchRound(ctx, true, func(key topicPartition, a *assignment, records []byte, crcChecked int) (bool, error) {
		n := len(out)
		var err error
		out, err = decodeRecords(key, records, crcChecked, a, out)
		return len(out) > n, err
	})
	return out, err
}

// addrFetch is one fetch request in flight to one shard address (at most one per address:
// Consumer.inflight). Its callback fills err and release and queues it on arrived.
type addrFetch struct {
	addr    string
	req     *wire.FetchRequest
	resp    *wire.FetchResponse
	sent    []sentPartition // one per requested partition, in request order
	err     error
	release func()
}

// sentPartition is what a fetch asked of one partition: the assignment it was sent for and
// the offset, so that an answer overtaken by an Assign, Seek, Unassign or a failed
// delivery is recognised and dropped.
type sentPartition struct {
	key    topicPartition
	a      *assignment
	offset int64
}

// deliverFunc takes one partition's records of a fetch answer (crcChecked: how many bytes of
// whole batches at their start the reader already checked the CRC-32C of, fetchChecker) and
// reports whether it handed anything out.
type deliverFunc func(key topicPartition, a *assignment, records []byte, crcChecked int) (bool, error)

// fetchRound is the part Poll and PollBatches share. It sends a fetch to every shard
// address owning assigned partitions that are not backing off and have no fetch in flight
// (at most one fetch in flight per address), waits until at least one answer is in, and
// for each answer: applies every partition's error code (back-off, out-of-range reset,
// metadata refresh), sends that address's next fetch at once for the partitions the
// broker holds more of (prefetch, unless ConsumerConfig.NoPrefetch), then calls deliver with
// the records of each partition answered without error. deliver advances the partition's
// position and reports whether it handed anything to the caller.
//
// Addresses do not wait for each other: an address whose partitions are caught up
// long-polls while the others' answers are handed out, and the next fetch to an address
// is on its way while the previous answer is decoded by the caller.
//
// keep says the caller retains what deliver handed out: a response that delivered
// something then stays with the caller (its frame buffer is not pooled again); otherwise
// every response goes back to the pool when fetchRound returns. A round in which a broker
// was unreachable and nothing was delivered pauses before returning, so that callers
// polling in a loop do not spin on refused dials.
func (co *Consumer) fetchRound(ctx context.Context, keep bool, deliver deliverFunc) error {
	for {
		if err := co.sendFetches(ctx); err != nil {
			return err
		}
		if len(co.inflight) == 0 {
			return nil // every partition is backing off
		}
		arrived, err := co.waitArrived(ctx)
		if err != nil {
			return err
		}
		delivered, stale, connFailed, err := co.answerAll(arrived, keep, deliver)
		if err != nil || delivered {
			return err
		}
		if connFailed {
			select {
			case <-time.After(pollRetryBackoff):
			case <-ctx.Done():
			}
			return nil
		}
		if !stale {
			return nil // the brokers had nothing: an empty round after their long-poll
		}
		// Nothing delivered because the answers were overtaken (Seek, Assign, a failed
		// delivery): fetch again at the current positions.
	}
}

// answerAll handles the answers that arrived (see fetchRound), releasing each response
// that handed nothing out (or every one when !keep) once all are delivered.
func (co *Consumer) answerAll(arrived []*addrFetch, keep bool, deliver deliverFunc) (delivered, stale, connFailed bool, err error) {
	kept := make([]bool, len(arrived))
	defer func() {
		for i, f := range arrived {
			if !kept[i] {
				f.release() // back to the pool: nothing handed out points into it
			}
		}
	}()
	for _, f := range arrived { // free every address and partition first: an error below stops the loop
		delete(co.inflight, f.addr)
		for _, s := range f.sent {
			s.a.fetching = false
		}
	}
	for i, f := range arrived {
		got, overtaken, failed, err := co.answer(f, deliver)
		stale = stale || overtaken
		connFailed = connFailed || failed
		if got {
			delivered = true
			kept[i] = keep
		}
		if err != nil {
			return delivered, stale, connFailed, err
		}
	}
	return delivered, stale, connFailed, nil
}

// answer handles one arrived fetch (its address and partitions already freed): it sends
// the prefetch, and delivers. overtaken: some partition's answer no longer matched its
// assignment or position and was dropped.
func (co *Consumer) answer(f *addrFetch, deliver deliverFunc) (got, overtaken, connFailed bool, err error) {
	if LeadershipError(f.err) {
		// The connection (or a stale shard address) failed, or the broker is shutting
		// down: route these partitions by fresh metadata on the next Poll instead of
		// failing the caller, as a Kafka consumer does while a broker restarts or a new
		// leader is elected.
		for _, t := range f.req.Topics {
			co.c.invalidate(t.Topic)
		}
		return false, false, true, nil
	}
	if f.err != nil {
		return false, false, false, fmt.Errorf("poll: fetch from %s: %w", f.addr, f.err)
	}
	co.prefetch(f)
	err = co.eachAnswered(f, func(key topicPartition, p *wire.FetchResponsePartition, _ sentPartition, current bool) error {
		if !current {
			overtaken = true
			return nil
		}
		a, err := co.partitionAnswer(key, p)
		if err != nil || a == nil {
			return err
		}
		delivered, err := deliver(key, a, p.Records, p.RecordsCRCChecked)
		got = got || delivered
		return err
	})
	return got, overtaken, false, err
}

// eachAnswered calls fn for each partition of f's answer with what f asked of it; current
// says the answer still applies: the partition's assignment and position are the ones the
// fetch was sent for. An error from fn stops the walk.
func (co *Consumer) eachAnswered(f *addrFetch, fn func(key topicPartition, p *wire.FetchResponsePartition, s sentPartition, current bool) error) error {
	k := 0
	for _, t := range f.resp.Topics {
		for j := range t.Partitions {
			p := &t.Partitions[j]
			key := topicPartition{t.Topic, p.Partition}
			s, ok := f.sentFor(&k, key)
			current := ok && co.assigned[key] == s.a && s.a.start.kind == offsetNone && s.a.position == s.offset
			if err := fn(key, p, s, current); err != nil {
				return err
			}
		}
	}
	return nil
}

// sentFor finds what f asked of key, starting at *k (answers come in request order).
func (f *addrFetch) sentFor(k *int, key topicPartition) (sentPartition, bool) {
	for i := range f.sent {
		j := (*k + i) % len(f.sent)
		if f.sent[j].key == key {
			*k = j + 1
			return f.sent[j], true
		}
	}
	return sentPartition{}, false
}

// prefetch sends f's address its next fetch before f's records are handed out, for the
// partitions answered with records whose broker holds more after them (their high
// watermark is past the answer's last whole batch): that fetch answers at once, and the
// broker and the socket move it while the caller decodes this one. Partitions caught up
// are left to the next Poll (their fetch long-polls). A delivery that stops early (an
// error from the caller) leaves its partition behind the prefetched offset: that answer
// is then dropped as overtaken and the partition fetched again.
func (co *Consumer) prefetch(f *addrFetch) {
	if co.cfg.NoPrefetch {
		return
	}
	var next *addrFetch
	_ = co.eachAnswered(f, func(key topicPartition, p *wire.FetchResponsePartition, s sentPartition, current bool) error {
		if !current || p.ErrorCode != wire.ErrNone {
			return nil
		}
		after := nextFetchOffset(p.Records, s.offset)
		if after <= s.offset || p.HighWatermark <= after {
			return nil // nothing whole in the answer, or caught up
		}
		if next == nil {
			next = co.newFetch(f.addr)
		}
		next.add(key, s.a, after, co.cfg.PartitionMaxBytes)
		return nil
	})
	if next != nil {
		co.send(next)
	}
}

// nextFetchOffset is the offset after the last whole batch of a fetched partition's
// records (from when nothing whole is there): where the position will be once they are
// all handed out.
func nextFetchOffset(records []byte, from int64) int64 {
	next := from
	for len(records) > 0 {
		h, err := batch.ParseHeader(records)
		if err != nil || h.Size() > len(records) {
			break
		}
		records = records[h.Size():]
		next = max(next, h.LastOffset()+1)
	}
	return next
}

func (co *Consumer) newFetch(addr string) *addrFetch {
	return &addrFetch{addr: addr, req: &wire.FetchRequest{MaxWaitMs: int32(co.cfg.MaxWait.Milliseconds()), MinBytes: co.cfg.MinBytes, MaxBytes: co.cfg.MaxBytes}}
}

// add asks for key at offset in f.
func (f *addrFetch) add(key topicPartition, a *assignment, offset int64, maxBytes int32) {
	if n := len(f.req.Topics); n == 0 || f.req.Topics[n-1].Topic != key.topic {
		f.req.Topics = append(f.req.Topics, wire.FetchTopic{Topic: key.topic})
	}
	t := &f.req.Topics[len(f.req.Topics)-1]
	t.Partitions = append(t.Partitions, wire.FetchPartition{Partition: key.partition, FetchOffset: offset, MaxBytes: maxBytes})
	f.sent = append(f.sent, sentPartition{key: key, a: a, offset: offset})
	a.fetching = true
}

// send puts f in flight; its answer is queued on arrived.
func (co *Consumer) send(f *addrFetch) {
	if co.inflight == nil {
		co.inflight = map[string]*addrFetch{}
		co.arrivedSignal = make(chan struct{}, 1)
	}
	co.inflight[f.addr] = f
	f.resp = new(wire.FetchResponse)
	co.c.callAsyncOwned(f.addr, co.cfg.QuotaGroup, f.req, f.resp, func(_ wire.Message, err error, release func()) {
		f.err, f.release = err, release
		co.arrivedMu.Lock()
		co.arrived = append(co.arrived, f)
		co.arrivedMu.Unlock()
		select {
		case co.arrivedSignal <- struct{}{}:
		default:
		}
	})
}

// waitArrived returns the answers that arrived, waiting for one when none has (or ctx).
func (co *Consumer) waitArrived(ctx context.Context) ([]*addrFetch, error) {
	for {
		co.arrivedMu.Lock()
		arrived := co.arrived
		co.arrived = nil
		co.arrivedMu.Unlock()
		if len(arrived) > 0 {
			return arrived, nil
		}
		select {
		case <-co.arrivedSignal:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// sendFetches sends one fetch per shard address owning an assigned partition that is not
// backing off and not in a fetch already, except to addresses with a fetch in flight
// (their partitions go in the next one). When nothing is in flight and every partition is
// backing off, it first sleeps until the earliest may be fetched again (at most MaxWait).
func (co *Consumer) sendFetches(ctx context.Context) error {
	if len(co.order) == 0 {
		return errors.New("poll: no partitions assigned")
	}
	if len(co.inflight) == 0 {
		co.waitForRetries(ctx)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	now := co.now()
	var byAddr map[string]*addrFetch
	var order []*addrFetch
	lastTopic := ""
	for _, key := range co.order {
		a := co.assigned[key]
		if a.fetching || a.retryAt.After(now) {
			continue // in a fetch already, or backing off after a retriable error
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
			return fmt.Errorf("poll: position of %s/%d: %w", key.topic, key.partition, err)
		}
		addr := co.c.leaderAddr(key.topic, key.partition)
		if co.inflight[addr] != nil {
			continue // one fetch in flight per address: this partition goes in the next
		}
		f := byAddr[addr]
		if f == nil {
			if byAddr == nil {
				byAddr = map[string]*addrFetch{}
			}
			f = co.newFetch(addr)
			byAddr[addr] = f
			order = append(order, f)
		}
		f.add(key, a, a.position, co.cfg.PartitionMaxBytes)
	}
	for _, f := range order {
		co.send(f)
	}
	return nil
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
// The first crcChecked bytes of records are whole batches whose CRC-32C was checked as
// they arrived (wire.FetchResponsePartition.RecordsCRCChecked).
func decodeRecords(key topicPartition, records []byte, crcChecked int, a *assignment, out []ConsumedRecord) ([]ConsumedRecord, error) {
	err := walkBatches(key, records, crcChecked, a, func(h batch.Header, whole []byte, wholeChecked bool) error {
		// Uncompressed records point into the fetch response, which is theirs from now
		// on (Poll does not reuse it); decompressed ones live in the decoder's reused
		// buffer and are copied.
		keep := identity
		if h.Compression() != batch.CodecNone {
			keep = clone
		}
		from := a.position
		err := decodeBatch(whole, wholeChecked, func(offset, ts int64, r *batch.Record) error {
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
// walk with a.position before that batch. fn learns whether the batch lies within the
// first crcChecked bytes, whose batches' CRC-32C the reader checked as they arrived.
func walkBatches(key topicPartition, records []byte, crcChecked int, a *assignment, fn func(h batch.Header, whole []byte, wholeChecked bool) error) error {
	unchecked := len(records) - crcChecked // once len(records) is at most this, nothing is checked
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
			if err := fn(h, whole, len(records) >= unchecked); err != nil {
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

// decodeBatch is batch.Decode, without its CRC-32C pass when the reader checked the CRC
// of these bytes as they arrived (fetchChecker).
func decodeBatch(whole []byte, crcChecked bool, fn func(offset, ts int64, r *batch.Record) error) error {
	if crcChecked {
		return batch.DecodeCRCChecked(whole, fn)
	}
	return batch.Decode(whole, fn)
}

func identity(b []byte) []byte { return b }

func clone(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append(make([]byte, 0, len(b)), b...)
}
