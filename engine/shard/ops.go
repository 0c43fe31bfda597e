package shard

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ringlog/ringlog/engine"
	"github.com/ringlog/ringlog/engine/shard/core"
	"github.com/ringlog/ringlog/ring"
)

// Acks values (the protocol's).
const (
	AcksNone   int16 = 0
	AcksLeader int16 = 1
	AcksAll          = core.AcksAll
)

// List-offsets special timestamps (the protocol's).
const (
	TimestampLatest   int64 = -1
	TimestampEarliest int64 = -2
)

// fetchWaitMax bounds a long-poll.
const fetchWaitMax = 5 * time.Minute

// ProduceResult is the outcome of one partition's produce.
type ProduceResult = core.ProduceResult

func postErr(s *Shard, err error) error {
	if errors.Is(err, ring.ErrMailboxFull) {
		return fmt.Errorf("%w (shard %d)", ErrThrottled, s.index)
	}
	if errors.Is(err, ring.ErrClosed) {
		return ErrShuttingDown
	}
	return err
}

// Produce appends batches (Kafka v2 record batches, validated by the log) to tp on its
// shard. done runs exactly once: on the owning shard's loop, or on the caller's goroutine
// when the request fails before reaching the shard. The batch bytes must stay untouched
// until done runs (the log rewrites their base offsets in place and writes them).
//
// acks=0 and acks=1 are answered once the write completed (unless the topic has
// flush.always); acks=all, and every produce to a flush.always topic, once an fdatasync
// covers the batch. acks=all fails with ErrNotEnoughReplicas when min.insync.replicas > 1:
// a lone broker never claims a replication it does not have.
func (b *Broker) Produce(tp TopicPartition, batches [][]byte, acks int16, done func(ProduceResult)) {
	b.ProduceFrom(CallerNone, tp, batches, acks, done)
}

// CallerNone says the caller runs on no shard loop (see ProduceFrom).
const CallerNone = -1

// ProduceFrom is Produce for a caller that may itself be running on shard caller's loop (a
// connection served on that reactor): when caller owns tp the append runs inline, without
// a mailbox hop. CallerNone always posts.
func (b *Broker) ProduceFrom(caller int, tp TopicPartition, batches [][]byte, acks int16, done func(ProduceResult)) {
	s, err := b.shardFor(tp)
	if err == nil && internalTopic(tp.Topic) {
		err = fmt.Errorf("%w: %s is written only by the group coordinator", ErrInternalTopic, tp.Topic)
	}
	if err == nil {
		err = b.checkFenced(batches)
	}
	if err != nil {
		b.offLoop.produceErrors[b.errorCode(err)].Add(1)
		done(ProduceResult{BaseOffset: -1, Err: err})
		return
	}
	if s.index == caller && s.r.OnOwnerThread() {
		s.produce(tp, batches, acks, done)
		return
	}
	op := getProducePost(s, tp, batches, acks, done)
	if err := s.r.Post(op.run); err != nil {
		op.put()
		err = postErr(s, err)
		b.offLoop.produceErrors[b.errorCode(err)].Add(1)
		done(ProduceResult{BaseOffset: -1, Err: err})
	}
}

// producePost carries a produce from another goroutine to its shard's loop without a new
// closure per produce: pooled, with its run method bound once.
type producePost struct {
	s       *Shard
	tp      TopicPartition
	batches [][]byte
	acks    int16
	done    func(ProduceResult)
	run     func()
}

var producePosts sync.Pool

func getProducePost(s *Shard, tp TopicPartition, batches [][]byte, acks int16, done func(ProduceResult)) *producePost {
	op, _ := producePosts.Get().(*producePost)
	if op == nil {
		op = new(producePost)
		op.run = op.exec
	}
	op.s, op.tp, op.batches, op.acks, op.done = s, tp, batches, acks, done
	return op
}

// exec runs on the shard's loop: the op goes back to the pool before the produce runs.
func (op *producePost) exec() {
	s, tp, batches, acks, done := op.s, op.tp, op.batches, op.acks, op.done
	op.put()
	s.produce(tp, batches, acks, done)
}

func (op *producePost) put() {
	*op = producePost{run: op.run}
	producePosts.Put(op)
}

func (s *Shard) produce(tp TopicPartition, batches [][]byte, acks int16, done func(ProduceResult)) {
	received := monotonic()
	s.counters.produce.Requests++
	for _, b := range batches {
		s.counters.produce.Bytes += uint64(len(b))
	}
	p := s.parts[tp]
	if p == nil {
		s.produceFailed(received, fmt.Errorf("%w: %s/%d", ErrUnknownTopicOrPartition, tp.Topic, tp.Partition), -1, done)
		return
	}
	if err := s.core.Admit(&p.c, acks); err != nil { // min.insync.replicas, a failed sync
		s.produceFailed(received, err, p.log.StartOffset(), done)
		return
	}
	res, err := p.log.AppendBatchesStaged(batches) // stagedwrite.go: written at the turn's end
	if err != nil {
		s.produceFailed(received, err, p.log.StartOffset(), done)
		if res.Batches > 0 {
			s.core.Moved(&p.c)
		}
		return
	}
	r := ProduceResult{BaseOffset: res.FirstOffset, LogStartOffset: p.log.StartOffset(), Received: received}
	s.appended(p, acks, r, done) // directwrite.go: waits for asynchronous direct writes
	s.noteStaged(p)
}

// produceFailed answers a produce the shard refused, counting it. Loop goroutine.
func (s *Shard) produceFailed(received time.Duration, err error, logStart int64, done func(ProduceResult)) {
	r := ProduceResult{BaseOffset: -1, LogStartOffset: logStart, Err: err, Received: received}
	s.produceAnswered(r)
	done(r)
}

// FetchPartition asks for one partition's records from Offset.
type FetchPartition struct {
	TopicPartition
	Offset   int64
	MaxBytes int32
}

// FetchRequest is a whole fetch: MinBytes and MaxWait make it a long-poll.
type FetchRequest struct {
	Partitions []FetchPartition
	MinBytes   int32
	MaxWait    time.Duration
	// ResponseBytesMax bounds the records of the whole answer (Kafka's fetch max_bytes,
	// first-batch rule included; see fetchlimits.go). 0: no bound.
	ResponseBytesMax int64
	// Files, if set, is charged one unit per segment descriptor the results hold until
	// Release (the server's per-connection quota).
	Files FileQuota
	// Replica marks a follower's fetch: it reads up to the log end offset instead of the
	// high watermark, and a long-poll waits for the log end offset to pass its offset.
	Replica bool
	// Results, if its capacity holds every partition, is where the answers are written
	// (done gets Results[:len(Partitions)]): a caller reusing it from fetch to fetch, each
	// result Released before, fetches without allocating. Nil: a new slice per fetch.
	Results []FetchResult
	// Wake, if set, lets the caller end the fetch's long-poll early (FetchWake.Wake): a
	// follower whose fetch lane's replicas changed asks its leader to answer the round
	// parked there. One fetch per FetchWake.
	Wake *FetchWake

	limits *fetchLimits
}

// FetchWake answers a parked fetch before its deadline (FetchRequest.Wake): Wake fires
// the fetch's final read as a wake-up from outside the core would (core.WakeMoved). A Wake
// before the fetch parked makes it answer as soon as its first pass ends; one after it was
// answered does nothing (the op's use generation guards a recycled op).
type FetchWake struct {
	mu    sync.Mutex
	op    *fetchOp // guarded by mu: the parked fetch; nil before it parks
	gen   uint64   // guarded by mu: op's use
	woken bool     // guarded by mu: Wake was called
}

// Wake ends the fetch's long-poll, now or when it parks; it reports whether the fetch
// was parked (false: it had not parked yet, or was answered). Any goroutine.
func (w *FetchWake) Wake() (parked bool) {
	w.mu.Lock()
	w.woken = true
	op, gen := w.op, w.gen
	w.mu.Unlock()
	if op == nil || op.Fired(gen) {
		return false
	}
	op.Fire(gen, core.WakeMoved)
	return true
}

// arm records the parked op's use gen; false: Wake came first.
func (w *FetchWake) arm(op *fetchOp, gen uint64) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.op, w.gen = op, gen
	return !w.woken
}

// FetchResult is one partition's answer. Records holds whole batches below the high
// watermark; its file pieces refer to descriptors the result holds (shared duplicates of
// the segments', fetchfiles.go), so they stay valid whatever the shard does to its
// segments meanwhile. Call Release once the bytes are sent.
type FetchResult struct {
	TopicPartition
	HighWatermark  int64
	LogStartOffset int64
	LogEndOffset   int64 // read with the records (a leader learns its LEO for a follower's fetch)
	Records        engine.ReadResult
	Err            error

	held   heldFiles      // descriptors charged to the quotas, given back by Release
	pieces []engine.Piece // Records.Pieces' array, kept for the result's next use
}

// RefusedMerge rebuilds a fetch's answer in request order when some partitions were
// refused before the fetch reached the shards (Refused[i] != nil: not led here, or a leader
// epoch the leader does not hold). Add each requested partition in request order; Out
// collects the fetched partitions' results and, for each refused one, a result carrying its
// error. Both listeners (ringlog and Kafka) use it; it allocates only when Out grows.
type RefusedMerge struct {
	Out     []FetchResult
	Results []FetchResult // the fetched partitions' results, in request order
	Refused []error       // one entry per requested partition
	i, k    int
}

// Add appends the answer for the next requested partition, tp.
func (m *RefusedMerge) Add(tp TopicPartition) {
	if m.i < len(m.Refused) && m.Refused[m.i] != nil {
		m.Out = append(m.Out, FetchResult{TopicPartition: tp, HighWatermark: -1, LogStartOffset: -1, Err: m.Refused[m.i]})
	} else {
		m.Out = append(m.Out, m.Results[m.k])
		m.k++
	}
	m.i++
}

// AppendTo appends the records' bytes to dst, reading file pieces with plain pread on the
// result's own descriptors (any goroutine may call it; it never touches a shard's ring).
// The zero-copy path sends the pieces with sendfile/splice instead.
func (r *FetchResult) AppendTo(dst []byte) ([]byte, error) {
	for _, p := range r.Records.Pieces {
		if p.File == nil {
			dst = append(dst, p.Data...)
			continue
		}
		n := len(dst)
		dst = slices.Grow(dst, int(p.Size))[:n+int(p.Size)]
		for done := 0; done < int(p.Size); {
			k, err := ring.Syscalls{}.Pread(int(p.File.Fd()), dst[n+done:], p.Position+int64(done))
			if err != nil {
				return dst[:n], fmt.Errorf("read %s: %w", p.File.Name(), err)
			}
			if k == 0 {
				return dst[:n], fmt.Errorf("read %s at %d: %w", p.File.Name(), p.Position+int64(done), io.ErrUnexpectedEOF)
			}
			done += k
		}
	}
	return dst, nil
}

// Release gives back the result's descriptors; its file pieces are invalid from then on.
func (r *FetchResult) Release() {
	for i := range r.Records.Pieces {
		r.Records.Pieces[i].File = nil
	}
	r.held.release()
}

// fetchOp is one fetch in progress. Ops are pooled: an op goes back to the pool once its
// answer returned and no function posted for it is still to run (refs). Core waiters may
// outlive a use of the op; they carry the use's generation, and Fire/Fired of a past
// generation do nothing (state packs the generation and the fired bit in one word).
type fetchOp struct {
	b       *Broker
	req     FetchRequest
	results []FetchResult
	pending atomic.Int32
	final   atomic.Bool   // the next read completes the op whatever it finds
	state   atomic.Uint64 // generation<<1 | fired (a waiter or a deadline started the final read)
	refs    atomic.Int32  // the answer not yet returned + posted park functions not yet run
	// deadline ends the long-poll; each shard the op parks on fires it then from its own
	// reactor timer (core.Tick), and the first to fire wins.
	deadline time.Time
	done     func([]FetchResult)
	caller   int           // shard whose loop started the op; read inline on the first pass only
	started  time.Duration // when the op began (monotonic), for the fetch latency histogram
	// parked is when the op decided to park (monotonic; 0: it never parked), woke when it
	// fired and cause what fired it: a follower's fetch counts its wake-ups by cause
	// (fetchAnswered). Read from the clock for followers' fetches only.
	parked, woke time.Duration
	cause        core.WakeCause
	limits       fetchLimits

	// Reused from one fetch to the next.
	partitions []FetchPartition // req.Partitions, copied: the caller may reuse its array once answered
	involved   []int            // shards with partitions of this fetch, in first-seen order
	reads      []*fetchShardRef // by shard index: that shard's partitions and bound functions
}

// fetchShardRef is one shard's part of a fetch, with its functions bound once per op.
type fetchShardRef struct {
	op     *fetchOp
	s      *Shard
	idx    []int // indexes into req.Partitions
	readFn func()
	parkFn func()
}

func (r *fetchShardRef) readAll() {
	for _, i := range r.idx {
		r.s.readInto(&r.op.results[i], r.op.req.Partitions[i], r.op.req.limits)
	}
	r.op.shardDone(r.s)
}

func (r *fetchShardRef) park() {
	op := r.op
	r.s.park(op, r.idx)
	op.unref()
}

var fetchOps sync.Pool

// fetchOpPartitionsMax: ops that served more partitions than this are left to the GC
// instead of being pooled, so one huge fetch does not pin its arrays.
const fetchOpPartitionsMax = 1024

func (b *Broker) getFetchOp() *fetchOp {
	op, _ := fetchOps.Get().(*fetchOp)
	if op == nil || op.b != b {
		op = &fetchOp{b: b}
	}
	for len(op.reads) < len(b.shards) {
		r := &fetchShardRef{op: op, s: b.shards[len(op.reads)]}
		r.readFn, r.parkFn = r.readAll, r.park
		op.reads = append(op.reads, r)
	}
	return op
}

// unref drops one reference; the last returns the op to the pool.
func (op *fetchOp) unref() {
	if n := op.refs.Add(-1); n > 0 {
		return
	} else if n < 0 {
		panic("shard: fetch op released more often than referenced")
	}
	n := len(op.req.Partitions)
	for _, si := range op.involved {
		op.reads[si].idx = op.reads[si].idx[:0]
	}
	op.involved = op.involved[:0]
	clear(op.partitions)
	op.req, op.results, op.done = FetchRequest{}, nil, nil
	op.limits.files, op.limits.broker = nil, nil
	if n <= fetchOpPartitionsMax {
		fetchOps.Put(op)
	}
}

// Fetch reads every requested partition on its shard. When fewer than MinBytes come back
// and MaxWait > 0, it parks a waiter on each partition and answers when data arrives or the
// wait ends (a reactor timer of each shard involved; see core.Core.Wait). done runs exactly
// once, on a shard loop, or on the caller's goroutine when no shard could be reached.
func (b *Broker) Fetch(req FetchRequest, done func([]FetchResult)) {
	b.FetchFrom(CallerNone, req, done)
}

// FetchFrom is Fetch for a caller that may be running on shard caller's loop: that shard's
// partitions are read inline on the first pass (see ProduceFrom).
func (b *Broker) FetchFrom(caller int, req FetchRequest, done func([]FetchResult)) {
	if req.MaxWait > fetchWaitMax {
		req.MaxWait = fetchWaitMax
	}
	op := b.getFetchOp()
	gen := op.state.Load()>>1 + 1
	op.state.Store(gen << 1)
	op.refs.Store(1) // the answer
	op.req, op.done, op.caller, op.started = req, done, caller, monotonic()
	op.parked, op.woke = 0, 0
	// A park posted before the answer may still read the partitions after it, when the
	// caller already reuses its array for another fetch: the op reads its own copy.
	op.partitions = append(op.partitions[:0], req.Partitions...)
	op.req.Partitions, op.req.Results = op.partitions, nil
	op.final.Store(false)
	op.limits.init(b, &op.req)
	op.req.limits = &op.limits
	n := len(req.Partitions)
	if cap(req.Results) >= n {
		op.results = req.Results[:n]
	} else {
		op.results = make([]FetchResult, n)
	}
	for i, fp := range req.Partitions {
		out := &op.results[i]
		out.TopicPartition, out.HighWatermark, out.LogStartOffset, out.LogEndOffset = fp.TopicPartition, -1, -1, 0
		out.Records, out.Err = engine.ReadResult{}, nil
		si, err := b.ShardOf(fp.TopicPartition)
		if err != nil {
			out.Err = err
			continue
		}
		r := op.reads[si]
		if len(r.idx) == 0 {
			op.involved = append(op.involved, si)
		}
		r.idx = append(r.idx, i)
	}
	if req.MaxWait <= 0 || len(op.involved) == 0 || b.draining.Load() {
		op.final.Store(true)
	}
	op.read()
}

// answer runs done and drops the answer's reference to the op.
func (op *fetchOp) answer() {
	op.done(op.results)
	op.unref()
}

// read posts one read to every shard involved; the last to finish calls readDone. The
// caller's own shard reads inline, after the posts: the op may be answered (and reused)
// by the last read to finish, so nothing here touches it after that.
func (op *fetchOp) read() {
	n := len(op.involved)
	if n == 0 {
		op.b.fetchAnsweredOffLoop(op)
		op.answer()
		return
	}
	op.pending.Store(int32(n))
	op.limits.reset()
	inline := op.caller
	op.caller = CallerNone // later passes run from timers or other loops
	var own *fetchShardRef
	for i := range n {
		r := op.reads[op.involved[i]]
		if r.s.index == inline && r.s.r.OnOwnerThread() {
			own = r
			continue
		}
		if err := r.s.r.Post(r.readFn); err != nil {
			for _, k := range r.idx {
				op.results[k].Err = postErr(r.s, err)
			}
			op.shardDone(nil)
		}
	}
	if own != nil {
		own.readAll()
	}
}

// shardDone ends one shard's read; on is that shard when called on its loop, nil off the
// loops. The last one answers the op or parks it.
func (op *fetchOp) shardDone(on *Shard) {
	if op.pending.Add(-1) != 0 {
		return
	}
	if op.final.Load() || op.satisfied() || op.b.draining.Load() {
		if on != nil {
			on.fetchAnswered(op)
		} else {
			op.b.fetchAnsweredOffLoop(op)
		}
		op.answer()
		return
	}
	// Not enough yet: drop what was read and wait for data or the deadline.
	for i := range op.results {
		op.results[i].Release()
		op.results[i].Records = engine.ReadResult{}
	}
	op.final.Store(true)
	op.deadline = op.b.now().Add(op.req.MaxWait)
	if op.req.Replica {
		op.parked = monotonic()
	}
	n := len(op.involved)
	op.refs.Add(int32(n)) // each park holds the op until it ran
	gen := op.state.Load() >> 1
	if w := op.req.Wake; w != nil && !w.arm(op, gen) {
		op.Fire(gen, core.WakeMoved) // woken before it parked: the parks below find it fired
	}
	for i := range n {
		r := op.reads[op.involved[i]]
		if err := r.s.r.Post(r.parkFn); err != nil {
			op.Fire(gen, core.WakeRemoved)
			op.unref()
		}
	}
}

func (op *fetchOp) satisfied() bool {
	var size int64
	for i := range op.results {
		if op.results[i].Err != nil {
			return true
		}
		size += op.results[i].Records.Size
	}
	return size >= int64(op.req.MinBytes) && size > 0 || op.req.MinBytes <= 0
}

// Fire starts the final read of the op's use gen, once (core.Waiter). Any goroutine.
func (op *fetchOp) Fire(gen uint64, cause core.WakeCause) {
	if !op.state.CompareAndSwap(gen<<1, gen<<1|1) {
		return // fired already, or a waiter of a past use
	}
	if op.req.Replica {
		op.woke, op.cause = monotonic(), cause
	}
	op.read()
}

// Fired reports whether use gen's final read started, or gen is past (core.Waiter).
func (op *fetchOp) Fired(gen uint64) bool { return op.state.Load() != gen<<1 }

// park registers op on the partitions in idx until its deadline, or fires it at once when
// one already has data past its offset. Loop goroutine; the caller holds a reference.
func (s *Shard) park(op *fetchOp, idx []int) {
	gen := op.state.Load() >> 1
	if s.b.draining.Load() { // Drain's wake-up may have run before this park
		op.Fire(gen, core.WakeRemoved)
		return
	}
	for _, i := range idx {
		fp := op.req.Partitions[i]
		p := s.parts[fp.TopicPartition]
		if p == nil || !op.req.Replica && s.core.Ready(&p.c, fp.Offset) || op.req.Replica && s.core.ReadyEnd(&p.c, fp.Offset) {
			op.Fire(gen, core.WakeReady)
			return
		}
	}
	if op.Fired(gen) {
		return // another shard fired it meanwhile: nothing to wait for
	}
	h := s.core.Wait(op, gen, op.deadline)
	for _, i := range idx {
		fp := op.req.Partitions[i]
		if op.req.Replica {
			s.core.WatchEnd(h, &s.parts[fp.TopicPartition].c, fp.Offset)
			continue
		}
		s.core.Watch(h, &s.parts[fp.TopicPartition].c, fp.Offset)
	}
}

// readInto reads one partition up to its high watermark. Loop goroutine.
func (s *Shard) readInto(out *FetchResult, fp FetchPartition, lim *fetchLimits) {
	p := s.parts[fp.TopicPartition]
	if p == nil {
		out.Err = fmt.Errorf("%w: %s/%d", ErrUnknownTopicOrPartition, fp.Topic, fp.Partition)
		return
	}
	hw := s.highWatermark(p)
	out.HighWatermark, out.LogStartOffset, out.LogEndOffset, out.Err = hw, p.log.StartOffset(), p.log.EndOffset(), nil
	out.Records = engine.ReadResult{}
	bound := hw // what a consumer may read; a follower copies up to the log end
	if lim.replica {
		bound = out.LogEndOffset
	}
	if fp.Offset == bound {
		return
	}
	if fp.Offset < out.LogStartOffset || fp.Offset > bound {
		out.Err = fmt.Errorf("%w: offset %d, partition %s/%d holds [%d, %d)", engine.ErrOffsetOutOfRange, fp.Offset, fp.Topic, fp.Partition, out.LogStartOffset, bound)
		return
	}
	for {
		limit, ok := lim.limit(fp.MaxBytes)
		if !ok {
			return // the fetch's byte budget is spent: answered without records
		}
		rr, err := p.log.ReadBoundedInto(out.pieces, fp.Offset, int(limit), bound)
		if cap(rr.Pieces) > cap(out.pieces) {
			out.pieces = rr.Pieces[:0]
		}
		if err != nil {
			out.Err = err
			return
		}
		keep, retry := lim.charge(limit, rr.Size)
		if retry {
			continue // others spent the bytes while this read ran: read again under what is left
		}
		if keep {
			out.Err = lim.holdFiles(out, rr, s.sharedFiles)
		}
		return
	}
}

// ListOffset answers a list-offsets query for one partition: TimestampLatest gives the high
// watermark, TimestampEarliest the log start offset, any other timestamp the first offset
// whose record timestamp is at or after it (-1 when none is). done runs exactly once.
func (b *Broker) ListOffset(tp TopicPartition, timestamp int64, done func(offset int64, err error)) {
	s, err := b.shardFor(tp)
	if err != nil {
		done(-1, err)
		return
	}
	err = s.r.Post(func() {
		p := s.parts[tp]
		if p == nil {
			done(-1, fmt.Errorf("%w: %s/%d", ErrUnknownTopicOrPartition, tp.Topic, tp.Partition))
			return
		}
		switch timestamp {
		case TimestampLatest:
			done(s.highWatermark(p), nil)
		case TimestampEarliest:
			done(p.log.StartOffset(), nil)
		default:
			off, err := p.log.OffsetForTimestamp(timestamp)
			if errors.Is(err, engine.ErrTimestampNotFound) || err == nil && off >= s.highWatermark(p) {
				done(-1, nil)
				return
			}
			done(off, err)
		}
	})
	if err != nil {
		done(-1, postErr(s, err))
	}
}
