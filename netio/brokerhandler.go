package netio

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/ringlog/ringlog/netio/wire"

	"github.com/ringlog/ringlog/engine"
	"github.com/ringlog/ringlog/engine/batch"
	"github.com/ringlog/ringlog/engine/group"
	"github.com/ringlog/ringlog/engine/shard"
	"github.com/ringlog/ringlog/replication/cluster"
)

// BrokerHandler answers protocol requests from a shard.Broker: it splits each request by
// partition, posts the work to the owning shards, gathers their answers and replies. It
// holds no partition state of its own.
type BrokerHandler struct {
	b          *shard.Broker
	address    string   // advertised in metadata
	shardAddrs []string // per-shard addresses advertised in metadata; nil: address for all
	brokerID   int32
	// fetchResponseBytesMax caps a fetch's records whatever its max_bytes asks for.
	fetchResponseBytesMax int64
	// cluster is this broker's replication (WithCluster); nil on a single broker.
	cluster *cluster.Manager
	// afterFunc runs f once d has passed, unless the returned stop is called first
	// (time.AfterFunc; tests inject their own clock).
	afterFunc func(d time.Duration, f func()) (stop func() bool)
	// defaultClock: afterFunc is time.AfterFunc's, so a produce may reuse its own timer.
	defaultClock bool
	// fetchWakes holds the wake handle of the ReplicaFetch outstanding on a connection (by
	// its *Session) until the fetch is answered (replicaFetchWake).
	fetchWakes sync.Map
}

// FetchResponseBytesMaxDefault is the default cap on a fetch response's records (Kafka's
// broker fetch.max.bytes is 55 MiB): with the first-batch rule a response stays below
// this plus one batch, well inside the bundled client's 256 MiB response frame limit.
const FetchResponseBytesMaxDefault = 64 << 20

// inlineEntriesMax: metadata and describe-configs requests naming more entries than this
// (or every topic, when the broker has more) are answered from a goroutine of their own
// instead of on the shard loop that read them, so building a large reply never stalls the
// loop's partitions.
const inlineEntriesMax = 64

// NewBrokerHandler returns the handler of a broker advertising address to clients.
func NewBrokerHandler(b *shard.Broker, address string) *BrokerHandler {
	return &BrokerHandler{b: b, address: address, fetchResponseBytesMax: FetchResponseBytesMaxDefault, afterFunc: afterFunc, defaultClock: true}
}

func afterFunc(d time.Duration, f func()) func() bool { return time.AfterFunc(d, f).Stop }

// WithFetchResponseBytesMax sets the cap on a fetch response's records (n <= 0: the
// default). Call it before serving.
func (h *BrokerHandler) WithFetchResponseBytesMax(n int64) *BrokerHandler {
	if n <= 0 {
		n = FetchResponseBytesMaxDefault
	}
	h.fetchResponseBytesMax = n
	return h
}

// WithShardAddresses makes metadata advertise addrs[i] for shard i: a listener that only
// shard i serves, so that a shard-aware client's requests land on the shard that owns their
// partitions and run there without a mailbox hop. Call it before serving.
func (h *BrokerHandler) WithShardAddresses(addrs []string) *BrokerHandler {
	h.shardAddrs = addrs
	return h
}

// Serve dispatches one decoded request.
func (h *BrokerHandler) Serve(req *Request) {
	if h.serveGroup(req) { // grouphandler.go
		return
	}
	switch body := req.Body.(type) {
	case *wire.ProduceRequest:
		h.produce(req, body)
	case *wire.FetchRequest:
		h.fetch(req, body)
	case *wire.ListOffsetsRequest:
		h.listOffsets(req, body)
	case *wire.MetadataRequest:
		if req.Conn.OnLoop && (len(body.Topics) > inlineEntriesMax || body.Topics == nil && len(h.b.Topics()) > inlineEntriesMax) {
			go func() { req.ReplyMessage(h.metadata(body)) }()
			return
		}
		req.ReplyMessage(h.metadata(body))
	case *wire.DescribeConfigsRequest:
		if req.Conn.OnLoop && len(body.Topics) > inlineEntriesMax/8 {
			go func() { req.ReplyMessage(h.describeConfigs(body)) }()
			return
		}
		req.ReplyMessage(h.describeConfigs(body))
	// Admin requests wait for every shard involved. They run on a goroutine of their own so
	// that a handler called on a shard's loop (the ring driver) never waits for itself.
	case *wire.CreateTopicsRequest:
		go func() { req.ReplyMessage(h.createTopics(body)) }()
	case *wire.DeleteTopicsRequest:
		go func() { req.ReplyMessage(h.deleteTopics(body)) }()
	case *wire.DescribeTopicsRequest:
		go func() { req.ReplyMessage(h.describeTopics(body)) }()
	case *wire.AlterConfigsRequest:
		go func() { req.ReplyMessage(h.alterConfigs(body)) }()
	case *wire.InitProducerIDRequest: // writes (fsyncs) the producer id file
		go func() { req.ReplyMessage(h.initProducerID(body)) }()
	case *wire.ReplicaFetchRequest:
		h.replicaFetch(req, body)
	case *wire.ReplicaFetchWakeRequest:
		h.replicaFetchWake(req)
	case *wire.OffsetsForLeaderEpochRequest: // reads the leader's state under its lock
		go func() { req.ReplyMessage(h.offsetsForLeaderEpoch(body)) }()
	case *wire.ControllerRequest: // a raft round trip
		go func() { req.ReplyMessage(h.controllerOp(body)) }()
	default:
		req.ReplyError(wire.ErrUnknownAPI, fmt.Sprintf("%s is not served by this broker", req.Header.API))
	}
}

// caller is the shard whose loop runs this handler call, or shard.CallerNone.
func caller(req *Request) int {
	if req.Conn.OnLoop {
		return req.Conn.Shard
	}
	return shard.CallerNone
}

// CodeFor maps a broker or engine error to the protocol error code a client is answered
// with (the broker core counts failures by it; see shard.Config.ErrorCode).
func CodeFor(err error) wire.ErrorCode { return codeFor(err) }

// GroupCode maps a group coordinator's code to the protocol error code clients see.
func GroupCode(c group.Code) wire.ErrorCode { return groupCode(c) }

// codeFor maps broker and engine errors to protocol error codes.
func codeFor(err error) wire.ErrorCode {
	if err == nil {
		return wire.ErrNone // before clusterCodeFor, whose errors.As target is a heap allocation
	}
	if errors.Is(err, engine.ErrProducerIDsUnavailable) { // before the controller's own error it wraps
		return wire.ErrCoordinatorLoadInProgress
	}
	if c := clusterCodeFor(err); c != wire.ErrNone {
		return c
	}
	switch {
	case err == nil:
		return wire.ErrNone
	case errors.Is(err, shard.ErrUnknownTopicOrPartition):
		return wire.ErrUnknownTopicOrPartition
	case errors.Is(err, shard.ErrTopicExists):
		return wire.ErrTopicAlreadyExists
	case errors.Is(err, shard.ErrInvalidTopic):
		return wire.ErrInvalidTopic
	case errors.Is(err, shard.ErrInvalidPartitions):
		return wire.ErrInvalidPartitions
	case errors.Is(err, shard.ErrInvalidConfig):
		return wire.ErrInvalidConfig
	case errors.Is(err, shard.ErrNotEnoughReplicas):
		return wire.ErrNotEnoughReplicas
	case errors.Is(err, shard.ErrThrottled):
		return wire.ErrThrottled
	case errors.Is(err, shard.ErrShuttingDown):
		return wire.ErrShuttingDown
	case errors.Is(err, engine.ErrOffsetOutOfRange):
		return wire.ErrOffsetOutOfRange
	case errors.Is(err, engine.ErrCorruptBatch): // a stored batch failed verification
		return wire.ErrCorruptMessage
	case errors.Is(err, engine.ErrBatchTooLarge):
		return wire.ErrMessageTooLarge
	case errors.Is(err, engine.ErrProducerFenced):
		return wire.ErrInvalidProducerEpoch
	case errors.Is(err, engine.ErrOutOfOrderSequence):
		return wire.ErrOutOfOrderSequence
	case errors.Is(err, engine.ErrDuplicateSequence):
		return wire.ErrDuplicateSequence
	case errors.Is(err, engine.ErrInvalidProducerName), errors.Is(err, engine.ErrTooManyProducers):
		return wire.ErrInvalidRequest
	case errors.Is(err, engine.ErrInvalidBatch):
		return wire.ErrCorruptMessage
	case errors.Is(err, engine.ErrLogFailed), errors.Is(err, engine.ErrCorruptLog),
		errors.Is(err, engine.ErrDiskFull), errors.Is(err, engine.ErrStorageWrite):
		return wire.ErrStorage
	}
	return wire.ErrUnknown
}

func errMessage(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// SplitBatches cuts a produce payload into its record batches (validated again, with CRC,
// by the log before anything is written).
func SplitBatches(records []byte) ([][]byte, error) { return appendBatches(nil, records) }

// AppendBatches is SplitBatches appending to out, for a caller that keeps one array of
// batches from request to request (the Kafka listener's pooled produce).
func AppendBatches(out [][]byte, records []byte) ([][]byte, error) {
	return appendBatches(out, records)
}

// appendBatches is SplitBatches appending to out.
func appendBatches(out [][]byte, records []byte) ([][]byte, error) {
	start := len(out)
	for len(records) > 0 {
		hdr, err := batch.ParseHeader(records)
		if err != nil {
			return out, fmt.Errorf("%w: batch %d: %w", engine.ErrInvalidBatch, len(out)-start, err)
		}
		size := hdr.Size()
		if size > len(records) {
			return out, fmt.Errorf("%w: batch %d claims %d bytes, %d remain", engine.ErrInvalidBatch, len(out)-start, size, len(records))
		}
		out = append(out, records[:size:size])
		records = records[size:]
	}
	if len(out) == start {
		return out, fmt.Errorf("%w: no record batch", engine.ErrInvalidBatch)
	}
	return out, nil
}

func (h *BrokerHandler) produce(req *Request, body *wire.ProduceRequest) {
	if body.Acks != wire.AcksNone && body.Acks != wire.AcksLeader && body.Acks != wire.AcksAll {
		req.ReplyError(wire.ErrInvalidRequiredAcks, fmt.Sprintf("acks must be 0, 1 or -1, got %d", body.Acks))
		return
	}
	total := 0
	for i := range body.Topics {
		total += len(body.Topics[i].Partitions)
	}
	if total == 0 {
		req.ReplyMessage(&wire.ProduceResponse{Topics: make([]wire.ProduceResponseTopic, len(body.Topics))})
		return
	}
	pc := getProduceCall(req, body, total)
	// The partitions' answers are written under pc.mu: an acks=all produce with a timeout
	// may be answered by its timer while shards still hold some of its partitions. The
	// reply is sent after unlocking (see answerLocked), and pc is not touched after the
	// last partition was handed to its shard: from then on it may be answered, written,
	// released and reused by another request.
	pc.mu.Lock()
	// timeout_ms <= 0 leaves no time to wait for followers: as Kafka's DelayedProduce, whose
	// timer expires at once, the request is answered when its last partition is handed to
	// its shard, and the partitions still waiting get REQUEST_TIMED_OUT. That applies when
	// the request names a replicated topic of a cluster; elsewhere the leader alone is the
	// ISR and the answer comes with its write (Kafka's append moves a one-replica high
	// watermark at once).
	immediate := body.Acks == wire.AcksAll && body.TimeoutMs <= 0 && h.namesReplicated(body)
	withTimeout := body.Acks == wire.AcksAll && body.TimeoutMs > 0 || immediate
	if withTimeout {
		pc.answeredBuf = reuseCleared(pc.answeredBuf, total)
		pc.answered = pc.answeredBuf
		pc.timeout = time.Duration(body.TimeoutMs) * time.Millisecond
		if immediate {
			pc.timeout, pc.deadline, pc.stopTimer = 0, time.Now(), noTimer
		} else {
			pc.armTimer(h)
		}
		// The timer may answer, and so release the request's buffer to the next request,
		// before the shard has written these bytes: give the shards a copy (one memmove per
		// acks=all produce with a timeout, into the call's reused buffer).
		size := 0
		for i := range body.Topics {
			for j := range body.Topics[i].Partitions {
				size += len(body.Topics[i].Partitions[j].Records)
			}
		}
		if cap(pc.records) < size {
			pc.records = make([]byte, 0, size)
		}
		pc.records = pc.records[:0]
	}
	k := 0
	for i := range body.Topics {
		t := &body.Topics[i]
		for j := range t.Partitions {
			p := &t.Partitions[j]
			idx := k
			k++
			records := p.Records
			if withTimeout {
				start := len(pc.records)
				pc.records = append(pc.records, records...) // within cap: earlier copies stay put
				records = pc.records[start:len(pc.records):len(pc.records)]
			}
			batches, err := pc.splitBatches(idx, records)
			tp := shard.TopicPartition{Topic: t.Topic, Partition: p.Partition}
			if err == nil {
				err = h.checkLeader(tp)
			}
			if err != nil {
				h.b.CountProduceError(err)
				out := pc.out(idx)
				out.ErrorCode, out.ErrorMessage = codeFor(err), err.Error()
				if pc.answerLocked(idx) { // the last partition: nothing else to start
					pc.mu.Unlock()
					pc.reply()
					return
				}
				continue
			}
			expired := immediate && k == total && pc.expireLocked()
			pc.mu.Unlock() // the shard may answer inline, on this goroutine
			if expired {
				// The answer goes before the last partition reaches its shard; that
				// partition's unanswered reference keeps pc (and the copied records) alive.
				pc.reply()
			}
			h.b.ProduceFrom(caller(req), tp, batches, body.Acks, pc.answers[idx].fn)
			if k == total {
				return // pc and body may belong to another request by now
			}
			pc.mu.Lock()
		}
	}
	// The last partition failed before reaching a shard, and others still wait.
	expired := immediate && pc.expireLocked()
	pc.mu.Unlock()
	if expired {
		pc.reply()
	}
}

// noTimer stands for the timer of a produce whose timeout passed when it arrived.
func noTimer() bool { return false }

// namesReplicated reports whether body names a replicated topic of this broker's
// cluster: only those wait for followers.
func (h *BrokerHandler) namesReplicated(body *wire.ProduceRequest) bool {
	if h.cluster == nil {
		return false
	}
	for i := range body.Topics {
		if h.cluster.Replicated(body.Topics[i].Topic) {
			return true
		}
	}
	return false
}

// produceCall gathers one produce request's partition answers. An acks=all produce with a
// timeout (the request's timeout_ms, Kafka's request.timeout.ms on the producer) is
// answered when the timeout passes even though some partitions still wait for their
// followers: those get REQUEST_TIMED_OUT, which frees the connection's pipeline. Their
// records stay appended and may still commit later (as in Kafka: a timed-out produce's
// outcome is unknown, and a retry may duplicate it unless the producer is idempotent);
// their late answers are dropped.
//
// Calls are pooled with everything they hold (the response, its slices, the split batches,
// each partition's answer callback), so a produce allocates nothing once the pool is warm.
// A call goes back to the pool when its last reference is gone: every partition answered
// and the response written (or dropped) — refs counts them.
type produceCall struct {
	req       *Request
	resp      wire.ProduceResponse
	mu        sync.Mutex
	pending   int           // partitions not answered yet; guarded by mu
	refs      int           // unanswered partitions + the unwritten response; guarded by mu
	answered  []bool        // by request position; nil without a timeout; guarded by mu
	replied   bool          // guarded by mu
	stopTimer func() bool   // nil without a timeout
	timeout   time.Duration // the acks=all timeout, for timedOut's message
	deadline  time.Time     // when the timeout passes; guarded by mu
	timer     *time.Timer   // the default clock's timer, reused (Reset) from use to use

	// Reused from one request to the next.
	partitions  []wire.ProduceResponsePartition // every topic's, back to back
	positions   []int                           // partition position -> index in partitions
	batches     [][]byte                        // every partition's split batches
	answers     []*produceAnswer                // by partition position
	records     []byte                          // acks=all copies of the records
	answeredBuf []bool                          // answered's array
	timedOutFn  func()
	writtenFn   func()
	stopTimerFn func() bool // timer.Stop, bound once
}

// produceAnswer is one partition's answer callback, bound once per pooled call.
type produceAnswer struct {
	pc  *produceCall
	idx int
	fn  func(shard.ProduceResult) // a.answer, bound when the answer was made
}

var produceCalls sync.Pool

func newProduceCall() *produceCall {
	pc := &produceCall{}
	pc.timedOutFn = pc.timedOut
	pc.writtenFn = pc.written
	return pc
}

// produceCallPartitionsMax: calls that grew past this many partitions are left to the GC
// instead of being pooled, so one huge request does not pin its arrays forever.
const produceCallPartitionsMax = 1024

func getProduceCall(req *Request, body *wire.ProduceRequest, total int) *produceCall {
	pc, _ := produceCalls.Get().(*produceCall)
	if pc == nil {
		pc = newProduceCall()
	}
	pc.req, pc.pending, pc.refs, pc.replied = req, total, total+1, false
	pc.partitions = pc.partitions[:0]
	pc.resp = wire.ProduceResponse{Topics: pc.resp.Topics[:0]}
	for len(pc.answers) < total {
		a := &produceAnswer{pc: pc, idx: len(pc.answers)}
		a.fn = a.answer
		pc.answers = append(pc.answers, a)
	}
	pc.positions = pc.positions[:0]
	for i := range body.Topics {
		t := &body.Topics[i]
		for j := range t.Partitions {
			pc.positions = append(pc.positions, len(pc.partitions))
			pc.partitions = append(pc.partitions, wire.ProduceResponsePartition{
				Partition: t.Partitions[j].Partition, BaseOffset: -1, LogAppendTime: -1, LogStartOffset: -1})
		}
	}
	k := 0
	for i := range body.Topics {
		n := len(body.Topics[i].Partitions)
		pc.resp.Topics = append(pc.resp.Topics, wire.ProduceResponseTopic{Topic: body.Topics[i].Topic, Partitions: pc.partitions[k : k+n : k+n]})
		k += n
	}
	pc.batches = pc.batches[:0]
	return pc
}

// armTimer starts the acks=all timeout. With the default clock the call's own timer is
// reused; a fire left over from an earlier use finds the deadline not passed and returns.
func (pc *produceCall) armTimer(h *BrokerHandler) {
	pc.deadline = time.Now().Add(pc.timeout)
	if !h.defaultClock {
		pc.stopTimer = h.afterFunc(pc.timeout, pc.timedOutFn)
		return
	}
	if pc.timer == nil {
		pc.timer = time.AfterFunc(pc.timeout, pc.timedOutFn)
		pc.stopTimerFn = pc.timer.Stop
	} else {
		pc.timer.Reset(pc.timeout)
	}
	pc.stopTimer = pc.stopTimerFn
}

// reuseCleared returns n false values, in s's array when it is large enough.
func reuseCleared(s []bool, n int) []bool {
	if cap(s) < n {
		return make([]bool, n)
	}
	s = s[:n]
	clear(s)
	return s
}

// out is partition position idx's answer in the response.
func (pc *produceCall) out(idx int) *wire.ProduceResponsePartition {
	return &pc.partitions[pc.positions[idx]]
}

// splitBatches is SplitBatches into the call's reused slice.
func (pc *produceCall) splitBatches(idx int, records []byte) ([][]byte, error) {
	start := len(pc.batches)
	var err error
	pc.batches, err = appendBatches(pc.batches, records)
	if err != nil {
		return nil, err
	}
	// Later partitions may grow pc.batches: hand the shard its own capped view, which a
	// reallocation leaves intact (the old array stays reachable through it).
	return pc.batches[start:len(pc.batches):len(pc.batches)], nil
}

// answer is a shard's answer for one partition.
func (a *produceAnswer) answer(r shard.ProduceResult) {
	pc := a.pc
	pc.mu.Lock()
	if !pc.replied {
		out := pc.out(a.idx)
		out.BaseOffset, out.LogStartOffset = r.BaseOffset, r.LogStartOffset
		out.ErrorCode, out.ErrorMessage = codeFor(r.Err), errMessage(r.Err)
	}
	last := pc.answerLocked(a.idx)
	pc.mu.Unlock()
	if last {
		pc.reply()
	}
}

// answerLocked counts partition idx's answer (already written into the response unless the
// request was answered) and reports whether every partition has now answered: the caller
// then replies, after unlocking pc.mu.
func (pc *produceCall) answerLocked(idx int) (last bool) {
	pc.refs--
	if pc.replied {
		pc.releaseLocked()
		return false
	}
	if pc.answered != nil {
		pc.answered[idx] = true
	}
	if pc.pending--; pc.pending == 0 {
		pc.replied = true
		if pc.stopTimer != nil {
			pc.stopTimer()
		}
		return true
	}
	return false
}

// reply sends the response; pc.replied is set, so nothing writes pc.resp any more, and the
// response's own reference keeps pc from the pool until written runs. Never under pc.mu:
// a connection that is gone releases the reply inline, and written locks pc.mu.
func (pc *produceCall) reply() {
	pc.req.Reply(Response{Body: &pc.resp, Done: pc.writtenFn})
}

// written is the response's Done: the connection no longer needs pc.resp.
func (pc *produceCall) written() {
	pc.mu.Lock()
	pc.refs--
	pc.releaseLocked()
	pc.mu.Unlock()
}

// releaseLocked returns pc to the pool once nothing refers to it any more.
func (pc *produceCall) releaseLocked() {
	if pc.refs > 0 {
		return
	}
	pc.req, pc.answered, pc.stopTimer = nil, nil, nil
	clear(pc.batches)
	if len(pc.answers) > produceCallPartitionsMax {
		return
	}
	produceCalls.Put(pc)
}

// timedOut answers the partitions still waiting with REQUEST_TIMED_OUT.
func (pc *produceCall) timedOut() {
	pc.mu.Lock()
	if pc.stopTimer == nil || time.Now().Before(pc.deadline) {
		pc.mu.Unlock()
		return // a fire left over from an earlier use of this call
	}
	expired := pc.expireLocked()
	pc.mu.Unlock()
	if expired {
		pc.reply()
	}
}

// expireLocked marks the partitions still waiting REQUEST_TIMED_OUT and reports whether
// the caller must now reply (after unlocking pc.mu); false when pc was answered already.
func (pc *produceCall) expireLocked() bool {
	if pc.replied {
		return false
	}
	pc.replied = true
	msg := fmt.Sprintf("acks=all: not replicated within the request's timeout (%v); the records may still be committed", pc.timeout)
	if pc.timeout <= 0 {
		msg = "acks=all with timeout_ms <= 0: answered at once, before replication (as Kafka); the records may still be committed"
	}
	for k := range pc.positions {
		if !pc.answered[k] {
			out := pc.out(k)
			out.ErrorCode, out.ErrorMessage = wire.ErrRequestTimedOut, msg
		}
	}
	return true
}

func (h *BrokerHandler) listOffsets(req *Request, body *wire.ListOffsetsRequest) {
	resp := &wire.ListOffsetsResponse{Topics: make([]wire.ListOffsetsResponseTopic, len(body.Topics))}
	var wg sync.WaitGroup
	for i, t := range body.Topics {
		rt := &resp.Topics[i]
		rt.Topic = t.Topic
		rt.Partitions = make([]wire.ListOffsetsResponsePartition, len(t.Partitions))
		for j, p := range t.Partitions {
			out := &rt.Partitions[j]
			out.Partition, out.Timestamp = p.Partition, -1
			tp := shard.TopicPartition{Topic: t.Topic, Partition: p.Partition}
			if err := h.checkLeader(tp); err != nil {
				out.Offset, out.ErrorCode, out.ErrorMessage = -1, codeFor(err), err.Error()
				continue
			}
			wg.Add(1)
			h.b.ListOffset(tp, p.Timestamp, func(off int64, err error) {
				out.Offset, out.ErrorCode, out.ErrorMessage = off, codeFor(err), errMessage(err)
				if p.Timestamp >= 0 && off >= 0 {
					out.Timestamp = p.Timestamp
				}
				wg.Done()
			})
		}
	}
	go func() { // never block the connection's reader on shard answers
		wg.Wait()
		req.ReplyMessage(resp)
	}()
}

func (h *BrokerHandler) metadata(body *wire.MetadataRequest) *wire.MetadataResponse {
	resp := &wire.MetadataResponse{BrokerID: h.brokerID}
	for i := 0; i < h.b.Shards(); i++ {
		addr := h.address
		if i < len(h.shardAddrs) {
			addr = h.shardAddrs[i]
		}
		resp.Shards = append(resp.Shards, wire.MetadataShard{Shard: int32(i), Address: addr})
	}
	var view *cluster.View
	if h.cluster != nil {
		view = h.cluster.View()
	}
	var topics []*shard.Topic
	var unopened []string // replicated topics this broker has not opened yet (a reconcile under way)
	if body.Topics == nil {
		topics = h.b.Topics()
		if view != nil {
			for name := range view.Metadata.Topics {
				if h.b.Topic(name) == nil {
					unopened = append(unopened, name)
				}
			}
			slices.Sort(unopened)
		}
	} else {
		for _, name := range body.Topics {
			t := h.b.Topic(name)
			switch {
			case t != nil:
				topics = append(topics, t)
			case view != nil && view.Metadata.Topics[name] != nil:
				unopened = append(unopened, name)
			default:
				resp.Topics = append(resp.Topics, wire.MetadataTopic{Topic: name, ErrorCode: wire.ErrUnknownTopicOrPartition,
					ErrorMessage: fmt.Sprintf("topic %q does not exist", name)})
			}
		}
	}
	for _, t := range topics {
		mt := wire.MetadataTopic{Topic: t.Name, Partitions: make([]wire.MetadataPartition, len(t.Partitions))}
		for p, s := range t.Partitions {
			mt.Partitions[p] = wire.MetadataPartition{Partition: int32(p), Shard: int32(s), Leader: h.brokerID, HighWatermark: -1}
		}
		resp.Topics = append(resp.Topics, mt)
	}
	for _, name := range unopened {
		resp.Topics = append(resp.Topics, unopenedTopic(name, view.Metadata.Topics[name]))
	}
	if h.cluster != nil {
		h.clusterMetadata(resp, view) // replication.go: leaders, replicas, ISR, brokers
	} else if body.Version >= 1 {
		// A single broker leads every partition alone.
		resp.Brokers, resp.ControllerID = []wire.MetadataBroker{{NodeID: h.brokerID, Address: h.address}}, -1
		self := []int32{h.brokerID}
		for i := range resp.Topics {
			for j := range resp.Topics[i].Partitions {
				resp.Topics[i].Partitions[j].Replicas, resp.Topics[i].Partitions[j].ISR = self, self
			}
		}
	}
	resp.Version = body.Version
	return resp
}

func configMap(entries []wire.ConfigEntry) map[string]string {
	m := make(map[string]string, len(entries))
	for _, e := range entries {
		m[e.Key] = e.Value
	}
	return m
}

// deadlinePassedResults answers every topic of an admin request whose deadline passed
// before it ran (version 1, timeout_ms <= 0: wire's DeadlinePassed) REQUEST_TIMED_OUT,
// with nothing changed, as Kafka's KRaft controller answers (and the Kafka listener).
// name reads a topic's name from the request's entry.
func deadlinePassedResults[T any](topics []T, name func(T) string, what string) []wire.TopicResult {
	out := make([]wire.TopicResult, len(topics))
	for i, t := range topics {
		out[i] = wire.TopicResult{Topic: name(t), ErrorCode: wire.ErrRequestTimedOut,
			ErrorMessage: "timeout_ms <= 0: the deadline passed before the request ran, so nothing was " + what}
	}
	return out
}

func (h *BrokerHandler) createTopics(body *wire.CreateTopicsRequest) *wire.CreateTopicsResponse {
	resp := &wire.CreateTopicsResponse{}
	if body.DeadlinePassed() {
		resp.Topics = deadlinePassedResults(body.Topics, func(t wire.CreateTopic) string { return t.Topic }, "created")
		return resp
	}
	for _, t := range body.Topics {
		res := wire.TopicResult{Topic: t.Topic}
		var err error
		switch {
		case h.cluster != nil && !body.ValidateOnly && (t.ReplicationFactor >= 1 || t.ReplicationFactor == -1):
			err = h.createReplicated(t, body.TimeoutMs)
		case t.ReplicationFactor > 1 && h.cluster == nil:
			res.ErrorCode, res.ErrorMessage = wire.ErrInvalidReplication, fmt.Sprintf("replication factor %d: this is a single-broker cluster", t.ReplicationFactor)
		case t.ReplicationFactor == 0 || t.ReplicationFactor < -1:
			res.ErrorCode, res.ErrorMessage = wire.ErrInvalidReplication, fmt.Sprintf("replication factor %d: want 1, or -1 for the broker default", t.ReplicationFactor)
		case body.ValidateOnly:
			err = h.b.ValidateTopic(t.Topic, int(t.Partitions), configMap(t.Configs))
		default:
			err = h.b.CreateTopic(t.Topic, int(t.Partitions), configMap(t.Configs))
		}
		if err != nil {
			res.ErrorCode, res.ErrorMessage = codeFor(err), err.Error()
		}
		resp.Topics = append(resp.Topics, res)
	}
	return resp
}

func (h *BrokerHandler) deleteTopics(body *wire.DeleteTopicsRequest) *wire.DeleteTopicsResponse {
	resp := &wire.DeleteTopicsResponse{}
	if body.DeadlinePassed() {
		resp.Topics = deadlinePassedResults(body.Topics, func(name string) string { return name }, "deleted")
		return resp
	}
	for _, name := range body.Topics {
		var err error
		if h.cluster != nil && h.cluster.Replicated(name) {
			err = h.deleteReplicated(name, body.TimeoutMs)
		} else {
			err = h.b.DeleteTopic(name)
		}
		resp.Topics = append(resp.Topics, wire.TopicResult{Topic: name, ErrorCode: codeFor(err), ErrorMessage: errMessage(err)})
	}
	return resp
}

func (h *BrokerHandler) describeTopics(body *wire.DescribeTopicsRequest) *wire.DescribeTopicsResponse {
	names := body.Topics
	if names == nil {
		for _, t := range h.b.Topics() {
			names = append(names, t.Name)
		}
	}
	resp := &wire.DescribeTopicsResponse{}
	for _, name := range names {
		dt := wire.DescribeTopic{Topic: name}
		_, states, err := h.b.DescribeTopic(name)
		if err != nil {
			dt.ErrorCode, dt.ErrorMessage = codeFor(err), err.Error()
		}
		for _, s := range states {
			dp := wire.DescribePartition{Partition: s.Partition, Shard: int32(s.Shard), LogStartOffset: s.LogStartOffset,
				HighWatermark: s.HighWatermark, LogEndOffset: s.LogEndOffset, SizeBytes: s.SizeBytes}
			switch {
			case s.Err != "":
				dp.ErrorCode, dp.ErrorMessage = wire.ErrStorage, s.Err
			case s.CorruptBatches > 0:
				dp.ErrorCode, dp.ErrorMessage = wire.ErrCorruptMessage, s.Corruption
			}
			dp.CorruptBatches = int32(min(s.CorruptBatches, math.MaxInt32))
			dt.Partitions = append(dt.Partitions, dp)
		}
		resp.Topics = append(resp.Topics, dt)
	}
	return resp
}

func (h *BrokerHandler) describeConfigs(body *wire.DescribeConfigsRequest) *wire.DescribeConfigsResponse {
	resp := &wire.DescribeConfigsResponse{}
	for _, q := range body.Topics {
		res := wire.DescribeConfigsResult{Topic: q.Topic}
		configs, err := DescribeTopicConfig(h.b, q.Topic, q.Keys)
		res.Configs, res.ErrorCode, res.ErrorMessage = configs, codeFor(err), errMessage(err)
		resp.Topics = append(resp.Topics, res)
	}
	return resp
}

// DescribeTopicConfig is a topic's effective configuration for the keys asked (nil: every
// key, sorted), each with its source: set on the topic, set in the broker's configuration,
// or the built-in default. Keys the broker does not know are left out. Both protocol
// listeners answer DescribeConfigs with it.
func DescribeTopicConfig(b *shard.Broker, topic string, keys []string) ([]wire.ConfigDescription, error) {
	t := b.Topic(topic)
	if t == nil {
		return nil, fmt.Errorf("%w: topic %q does not exist", shard.ErrUnknownTopicOrPartition, topic)
	}
	effective := b.EffectiveConfig(t)
	if keys == nil {
		for k := range effective {
			keys = append(keys, k)
		}
		sort.Strings(keys)
	}
	var out []wire.ConfigDescription
	for _, k := range keys {
		v, ok := effective[k]
		if !ok {
			continue
		}
		src := wire.ConfigSourceDefault
		if _, set := t.Config[k]; set {
			src = wire.ConfigSourceTopic
		} else if b.BrokerSetsConfig(k) {
			src = wire.ConfigSourceBroker
		}
		out = append(out, wire.ConfigDescription{Key: k, Value: v, Source: src})
	}
	return out, nil
}

func (h *BrokerHandler) alterConfigs(body *wire.AlterConfigsRequest) *wire.AlterConfigsResponse {
	resp := &wire.AlterConfigsResponse{}
	if body.DeadlinePassed() {
		resp.Topics = deadlinePassedResults(body.Topics, func(t wire.AlterConfigsTopic) string { return t.Topic }, "changed")
		return resp
	}
	for _, t := range body.Topics {
		set := map[string]string{}
		var deletes []string
		var err error
		for _, c := range t.Configs {
			switch c.Op {
			case wire.AlterConfigDelete:
				deletes = append(deletes, c.Key)
			case wire.AlterConfigSet:
				set[c.Key] = c.Value
			default:
				err = fmt.Errorf("%w: %s: operation %d unknown (want %d set or %d delete)", shard.ErrInvalidConfig, c.Key, c.Op, wire.AlterConfigSet, wire.AlterConfigDelete)
			}
		}
		switch {
		case err != nil: // nothing of this topic's request is applied
		case body.ValidateOnly:
			err = h.b.ValidateAlter(t.Topic, set, deletes)
		case h.cluster != nil && h.cluster.Replicated(t.Topic):
			err = h.alterReplicated(t.Topic, set, deletes, body.TimeoutMs)
		default:
			err = h.b.AlterTopicConfig(t.Topic, set, deletes)
		}
		resp.Topics = append(resp.Topics, wire.TopicResult{Topic: t.Topic, ErrorCode: codeFor(err), ErrorMessage: errMessage(err)})
	}
	return resp
}
