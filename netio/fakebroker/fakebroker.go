// Package fakebroker is a TEST FIXTURE: an in-process netio.Handler that keeps topics in
// temporary files so that the server, the zero-copy fetch path and the bundled client can
// be tested over real sockets without the real broker (engine + shards). It is
// not a broker: one mutex guards everything, nothing is recovered after a restart, there is
// no retention, and acks=all is answered like acks=1. It validates produced batches with
// engine/batch and assigns offsets the way the real broker must.
//
// It must never be imported by cmd/ or by the broker.
package fakebroker

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/ringlog/ringlog/netio/wire"

	"github.com/ringlog/ringlog/engine/batch"
	"github.com/ringlog/ringlog/netio"
)

// Broker is the fake. Create with New, serve with netio.NewServer(b, cfg).
type Broker struct {
	dir    string
	shards []wire.MetadataShard

	mu          sync.Mutex
	topics      map[string]*topic    // guarded by mu
	waiters     map[*waiter]struct{} // guarded by mu: parked long-poll fetches
	injected    []injectedError      // guarded by mu
	closed      bool                 // guarded by mu
	produced    int                  // guarded by mu: produce requests seen (for tests)
	producerIDs int64                // guarded by mu: the last producer id handed out

	fetchInjected []injectedError // guarded by mu
	fetches       int             // guarded by mu: fetch requests seen
	metadatas     int             // guarded by mu: metadata requests seen
}

type topic struct {
	name       string
	partitions []*partition
	configs    map[string]string
}

type partition struct {
	file        *os.File
	batches     []batchPos // in offset order
	sizeBytes   int64
	logStart    int64
	nextOffset  int64 // high watermark = log end offset
	shard       int32
	leaderEpoch int32
}

type batchPos struct {
	baseOffset, lastOffset int64
	maxTimestamp           int64
	position, size         int64
}

type waiter struct {
	req   *netio.Request
	fetch *wire.FetchRequest
	timer *time.Timer
}

type injectedError struct {
	topic     string
	partition int32
	code      wire.ErrorCode
	remaining int
}

// New returns a fake broker that keeps its files under dir and reports shards (index and
// address) in metadata; partitions are placed on shards round-robin.
func New(dir string, shards []wire.MetadataShard) *Broker {
	if len(shards) == 0 {
		shards = []wire.MetadataShard{{Shard: 0}}
	}
	return &Broker{dir: dir, shards: shards, topics: map[string]*topic{}, waiters: map[*waiter]struct{}{}}
}

// SetShards replaces the shard table (addresses are known only after listening).
func (b *Broker) SetShards(shards []wire.MetadataShard) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.shards = shards
}

// InjectProduceError makes the next count produce attempts to topic/partition fail with
// code before anything is written.
func (b *Broker) InjectProduceError(topicName string, partition int32, code wire.ErrorCode, count int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.injected = append(b.injected, injectedError{topicName, partition, code, count})
}

// InjectFetchError makes the next count fetches of topic/partition answer code at once
// (no long-poll), as a broker whose disk fails would.
func (b *Broker) InjectFetchError(topicName string, partition int32, code wire.ErrorCode, count int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.fetchInjected = append(b.fetchInjected, injectedError{topicName, partition, code, count})
}

// FetchRequests and MetadataRequests return how many of each the fake has seen.
func (b *Broker) FetchRequests() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.fetches
}

func (b *Broker) MetadataRequests() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.metadatas
}

// takeFetchErrorLocked consumes one injected fetch error for topic/partition, if any.
func (b *Broker) takeFetchErrorLocked(topicName string, partition int32) wire.ErrorCode {
	for i := range b.fetchInjected {
		inj := &b.fetchInjected[i]
		if inj.topic == topicName && inj.partition == partition && inj.remaining > 0 {
			inj.remaining--
			return inj.code
		}
	}
	return wire.ErrNone
}

func (b *Broker) fetchInjectedLocked(m *wire.FetchRequest) bool {
	for _, t := range m.Topics {
		for _, p := range t.Partitions {
			for _, inj := range b.fetchInjected {
				if inj.topic == t.Topic && inj.partition == p.Partition && inj.remaining > 0 {
					return true
				}
			}
		}
	}
	return false
}

// InjectedLeft returns how many injected produce errors have not fired yet.
func (b *Broker) InjectedLeft() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, inj := range b.injected {
		n += inj.remaining
	}
	return n
}

// ParkedFetches returns how many long-poll fetches are waiting for data.
func (b *Broker) ParkedFetches() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.waiters)
}

// ProduceRequests returns how many produce requests the fake has seen.
func (b *Broker) ProduceRequests() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.produced
}

// Close closes every partition file and answers parked fetches.
func (b *Broker) Close() {
	b.mu.Lock()
	b.closed = true
	var replies []func()
	for w := range b.waiters {
		w.timer.Stop()
		replies = append(replies, b.fetchReplyLocked(w))
		delete(b.waiters, w)
	}
	for _, t := range b.topics {
		for _, p := range t.partitions {
			p.file.Close()
		}
	}
	b.mu.Unlock()
	for _, r := range replies {
		r()
	}
}

// Serve implements netio.Handler.
func (b *Broker) Serve(req *netio.Request) {
	switch m := req.Body.(type) {
	case *wire.ProduceRequest:
		req.ReplyMessage(b.produce(m))
	case *wire.FetchRequest:
		b.fetch(req, m)
	case *wire.ListOffsetsRequest:
		req.ReplyMessage(b.listOffsets(m))
	case *wire.MetadataRequest:
		b.mu.Lock()
		b.metadatas++
		b.mu.Unlock()
		req.ReplyMessage(b.metadata(m))
	case *wire.CreateTopicsRequest:
		req.ReplyMessage(b.createTopics(m))
	case *wire.DeleteTopicsRequest:
		req.ReplyMessage(b.deleteTopics(m))
	case *wire.DescribeTopicsRequest:
		req.ReplyMessage(b.describeTopics(m))
	case *wire.DescribeConfigsRequest:
		req.ReplyMessage(b.describeConfigs(m))
	case *wire.AlterConfigsRequest:
		req.ReplyMessage(b.alterConfigs(m))
	case *wire.InitProducerIDRequest: // ids only: the fake does not deduplicate
		b.mu.Lock()
		b.producerIDs++
		id := b.producerIDs
		b.mu.Unlock()
		req.ReplyMessage(&wire.InitProducerIDResponse{ProducerID: id})
	default:
		req.ReplyError(wire.ErrUnknownAPI, fmt.Sprintf("fakebroker does not serve %s", req.Header.API))
	}
}

func (b *Broker) partitionLocked(topicName string, p int32) (*partition, wire.ErrorCode) {
	t := b.topics[topicName]
	if t == nil || p < 0 || int(p) >= len(t.partitions) {
		return nil, wire.ErrUnknownTopicOrPartition
	}
	return t.partitions[p], wire.ErrNone
}

func (b *Broker) produce(m *wire.ProduceRequest) *wire.ProduceResponse {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.produced++
	resp := &wire.ProduceResponse{}
	for _, t := range m.Topics {
		rt := wire.ProduceResponseTopic{Topic: t.Topic}
		for _, p := range t.Partitions {
			rp := wire.ProduceResponsePartition{Partition: p.Partition, BaseOffset: -1, LogAppendTime: -1, LogStartOffset: -1}
			base, code, msg := b.appendLocked(t.Topic, p.Partition, p.Records)
			rp.ErrorCode, rp.ErrorMessage = code, msg
			if code == wire.ErrNone {
				rp.BaseOffset = base
				rp.LogStartOffset = 0
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	b.wakeWaitersLocked()
	return resp
}

func (b *Broker) appendLocked(topicName string, pi int32, records []byte) (int64, wire.ErrorCode, string) {
	for i := range b.injected {
		inj := &b.injected[i]
		if inj.topic == topicName && inj.partition == pi && inj.remaining > 0 {
			inj.remaining--
			return -1, inj.code, "injected by fakebroker"
		}
	}
	p, code := b.partitionLocked(topicName, pi)
	if code != wire.ErrNone {
		return -1, code, fmt.Sprintf("no partition %s/%d", topicName, pi)
	}
	// Validate every batch before writing any.
	var sizes []int
	for rest := records; len(rest) > 0; {
		h, err := batch.ParseHeader(rest)
		if err != nil || h.Size() > len(rest) {
			return -1, wire.ErrCorruptMessage, fmt.Sprintf("batch header: %v", err)
		}
		if _, err := batch.Validate(rest[:h.Size()]); err != nil {
			return -1, wire.ErrCorruptMessage, err.Error()
		}
		sizes = append(sizes, h.Size())
		rest = rest[h.Size():]
	}
	if len(sizes) == 0 {
		return -1, wire.ErrCorruptMessage, "no record batch"
	}
	base := p.nextOffset
	buf := append([]byte(nil), records...)
	for rest := buf; len(rest) > 0; {
		h, _ := batch.ParseHeader(rest)
		batch.SetBaseOffset(rest[:h.Size()], p.nextOffset)
		p.batches = append(p.batches, batchPos{
			baseOffset: p.nextOffset, lastOffset: p.nextOffset + int64(h.LastOffsetDelta),
			maxTimestamp: h.MaxTimestamp, position: p.sizeBytes, size: int64(h.Size()),
		})
		p.nextOffset += int64(h.LastOffsetDelta) + 1
		p.sizeBytes += int64(h.Size())
		rest = rest[h.Size():]
	}
	if _, err := p.file.WriteAt(buf, p.sizeBytes-int64(len(buf))); err != nil {
		return -1, wire.ErrStorage, err.Error()
	}
	return base, wire.ErrNone, ""
}

// fetch answers at once if min bytes are available or max wait is 0, else parks.
func (b *Broker) fetch(req *netio.Request, m *wire.FetchRequest) {
	b.mu.Lock()
	b.fetches++
	w := &waiter{req: req, fetch: m}
	if m.MaxWaitMs <= 0 || b.closed || b.fetchInjectedLocked(m) || b.availableLocked(m) >= int64(max(m.MinBytes, 1)) {
		reply := b.fetchReplyLocked(w)
		b.mu.Unlock()
		reply()
		return
	}
	b.waiters[w] = struct{}{}
	w.timer = time.AfterFunc(time.Duration(m.MaxWaitMs)*time.Millisecond, func() { b.expire(w) })
	b.mu.Unlock()
}

func (b *Broker) expire(w *waiter) {
	b.mu.Lock()
	if _, ok := b.waiters[w]; !ok {
		b.mu.Unlock()
		return
	}
	delete(b.waiters, w)
	reply := b.fetchReplyLocked(w)
	b.mu.Unlock()
	reply()
}

func (b *Broker) wakeWaitersLocked() {
	var replies []func()
	for w := range b.waiters {
		if b.availableLocked(w.fetch) >= int64(max(w.fetch.MinBytes, 1)) {
			w.timer.Stop()
			delete(b.waiters, w)
			replies = append(replies, b.fetchReplyLocked(w))
		}
	}
	if len(replies) > 0 {
		go func() {
			for _, r := range replies {
				r()
			}
		}()
	}
}

func (b *Broker) availableLocked(m *wire.FetchRequest) int64 {
	var total int64
	for _, t := range m.Topics {
		for _, fp := range t.Partitions {
			p, code := b.partitionLocked(t.Topic, fp.Partition)
			if code != wire.ErrNone {
				return 1 << 62 // errors answer at once
			}
			if fp.FetchOffset < p.logStart || fp.FetchOffset > p.nextOffset {
				return 1 << 62
			}
			for _, bp := range p.batches {
				if bp.lastOffset >= fp.FetchOffset {
					total += bp.size
				}
			}
		}
	}
	return total
}

// fetchReplyLocked builds the response with file ranges and returns the call that sends it.
func (b *Broker) fetchReplyLocked(w *waiter) func() {
	m := w.fetch
	resp := &wire.FetchResponse{}
	budget := int64(m.MaxBytes)
	if budget <= 0 {
		budget = 1 << 62
	}
	first := true
	for _, t := range m.Topics {
		rt := wire.FetchResponseTopic{Topic: t.Topic}
		for _, fp := range t.Partitions {
			rp := wire.FetchResponsePartition{Partition: fp.Partition, HighWatermark: -1, LogStartOffset: -1}
			p, code := b.partitionLocked(t.Topic, fp.Partition)
			if code != wire.ErrNone || b.closed {
				rp.ErrorCode, rp.ErrorMessage = wire.ErrUnknownTopicOrPartition, "unknown topic or partition"
				rt.Partitions = append(rt.Partitions, rp)
				continue
			}
			rp.HighWatermark, rp.LogStartOffset = p.nextOffset, p.logStart
			if code := b.takeFetchErrorLocked(t.Topic, fp.Partition); code != wire.ErrNone {
				rp.ErrorCode, rp.ErrorMessage = code, "injected: "+code.Error()
				rt.Partitions = append(rt.Partitions, rp)
				continue
			}
			if fp.FetchOffset < p.logStart || fp.FetchOffset > p.nextOffset {
				rp.ErrorCode = wire.ErrOffsetOutOfRange
				rp.ErrorMessage = fmt.Sprintf("offset %d outside [%d, %d]", fp.FetchOffset, p.logStart, p.nextOffset)
				rt.Partitions = append(rt.Partitions, rp)
				continue
			}
			i := sort.Search(len(p.batches), func(i int) bool { return p.batches[i].lastOffset >= fp.FetchOffset })
			var start, length int64
			limit := min(int64(fp.MaxBytes), budget)
			for j := i; j < len(p.batches); j++ {
				bp := p.batches[j]
				if length+bp.size > limit && !first {
					break // only the response's first batch may exceed the limits
				}
				if length == 0 {
					start = bp.position
				}
				length += bp.size
				first = false
			}
			if length > 0 {
				rp.RecordsFile = []wire.FileRange{{File: p.file, Offset: start, Length: length}}
				budget -= length
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	req := w.req
	return func() { req.ReplyMessage(resp) }
}

func (b *Broker) listOffsets(m *wire.ListOffsetsRequest) *wire.ListOffsetsResponse {
	b.mu.Lock()
	defer b.mu.Unlock()
	resp := &wire.ListOffsetsResponse{}
	for _, t := range m.Topics {
		rt := wire.ListOffsetsResponseTopic{Topic: t.Topic}
		for _, lp := range t.Partitions {
			rp := wire.ListOffsetsResponsePartition{Partition: lp.Partition, Timestamp: -1, Offset: -1}
			p, code := b.partitionLocked(t.Topic, lp.Partition)
			switch {
			case code != wire.ErrNone:
				rp.ErrorCode, rp.ErrorMessage = code, "unknown topic or partition"
			case lp.Timestamp == wire.TimestampEarliest:
				rp.Offset = p.logStart
			case lp.Timestamp == wire.TimestampLatest:
				rp.Offset = p.nextOffset
			default:
				// Batch granularity: the first batch whose max timestamp reaches the target.
				for _, bp := range p.batches {
					if bp.maxTimestamp >= lp.Timestamp {
						rp.Offset, rp.Timestamp = bp.baseOffset, bp.maxTimestamp
						break
					}
				}
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

func (b *Broker) topicNamesLocked(names []string) []string {
	if names != nil {
		return names
	}
	all := make([]string, 0, len(b.topics))
	for n := range b.topics {
		all = append(all, n)
	}
	sort.Strings(all)
	return all
}

func (b *Broker) metadata(m *wire.MetadataRequest) *wire.MetadataResponse {
	b.mu.Lock()
	defer b.mu.Unlock()
	resp := &wire.MetadataResponse{BrokerID: 0, Shards: append([]wire.MetadataShard(nil), b.shards...)}
	for _, name := range b.topicNamesLocked(m.Topics) {
		mt := wire.MetadataTopic{Topic: name}
		t := b.topics[name]
		if t == nil {
			mt.ErrorCode, mt.ErrorMessage = wire.ErrUnknownTopicOrPartition, "unknown topic "+name
		} else {
			for i, p := range t.partitions {
				mt.Partitions = append(mt.Partitions, wire.MetadataPartition{Partition: int32(i), Shard: p.shard, LeaderEpoch: p.leaderEpoch})
			}
		}
		resp.Topics = append(resp.Topics, mt)
	}
	return resp
}

// ErrInvalidName is returned for topic names that the fake (and the real broker) refuse.
var ErrInvalidName = errors.New("invalid topic name")

func validTopicName(name string) bool {
	if name == "" || len(name) > 249 || name == "." || name == ".." {
		return false
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

func (b *Broker) createTopics(m *wire.CreateTopicsRequest) *wire.CreateTopicsResponse {
	b.mu.Lock()
	defer b.mu.Unlock()
	resp := &wire.CreateTopicsResponse{}
	for _, ct := range m.Topics {
		r := wire.TopicResult{Topic: ct.Topic}
		switch {
		case m.DeadlinePassed():
			r.ErrorCode, r.ErrorMessage = wire.ErrRequestTimedOut, "timeout_ms <= 0"
		case !validTopicName(ct.Topic):
			r.ErrorCode, r.ErrorMessage = wire.ErrInvalidTopic, fmt.Sprintf("%q: %v", ct.Topic, ErrInvalidName)
		case b.topics[ct.Topic] != nil:
			r.ErrorCode, r.ErrorMessage = wire.ErrTopicAlreadyExists, "topic "+ct.Topic+" already exists"
		case ct.Partitions < 1 || ct.Partitions > 10000:
			r.ErrorCode, r.ErrorMessage = wire.ErrInvalidPartitions, fmt.Sprintf("partitions %d not in [1, 10000]", ct.Partitions)
		case ct.ReplicationFactor > 1:
			r.ErrorCode, r.ErrorMessage = wire.ErrInvalidReplication, "single-node fake: replication factor must be 1"
		case m.ValidateOnly:
		default:
			t := &topic{name: ct.Topic, configs: map[string]string{}}
			for _, c := range ct.Configs {
				t.configs[c.Key] = c.Value
			}
			for i := range ct.Partitions {
				f, err := os.Create(filepath.Join(b.dir, fmt.Sprintf("%s-%d.log", ct.Topic, i)))
				if err != nil {
					r.ErrorCode, r.ErrorMessage = wire.ErrStorage, err.Error()
					break
				}
				t.partitions = append(t.partitions, &partition{file: f, shard: int32(int(i) % len(b.shards))})
			}
			if r.ErrorCode == wire.ErrNone {
				b.topics[ct.Topic] = t
			}
		}
		resp.Topics = append(resp.Topics, r)
	}
	return resp
}

func (b *Broker) deleteTopics(m *wire.DeleteTopicsRequest) *wire.DeleteTopicsResponse {
	b.mu.Lock()
	defer b.mu.Unlock()
	resp := &wire.DeleteTopicsResponse{}
	for _, name := range m.Topics {
		r := wire.TopicResult{Topic: name}
		if m.DeadlinePassed() {
			r.ErrorCode, r.ErrorMessage = wire.ErrRequestTimedOut, "timeout_ms <= 0"
		} else if t := b.topics[name]; t == nil {
			r.ErrorCode, r.ErrorMessage = wire.ErrUnknownTopicOrPartition, "unknown topic "+name
		} else {
			// Files stay open until Close: a fetch may still be sending from them.
			delete(b.topics, name)
		}
		resp.Topics = append(resp.Topics, r)
	}
	return resp
}

func (b *Broker) describeTopics(m *wire.DescribeTopicsRequest) *wire.DescribeTopicsResponse {
	b.mu.Lock()
	defer b.mu.Unlock()
	resp := &wire.DescribeTopicsResponse{}
	for _, name := range b.topicNamesLocked(m.Topics) {
		dt := wire.DescribeTopic{Topic: name}
		if t := b.topics[name]; t == nil {
			dt.ErrorCode, dt.ErrorMessage = wire.ErrUnknownTopicOrPartition, "unknown topic "+name
		} else {
			for i, p := range t.partitions {
				dt.Partitions = append(dt.Partitions, wire.DescribePartition{
					Partition: int32(i), Shard: p.shard, LogStartOffset: p.logStart,
					HighWatermark: p.nextOffset, LogEndOffset: p.nextOffset, SizeBytes: p.sizeBytes,
				})
			}
		}
		resp.Topics = append(resp.Topics, dt)
	}
	return resp
}

// configDefaults are what DescribeConfigs reports for keys a topic does not set.
var configDefaults = map[string]string{
	"retention.ms":      "604800000",
	"segment.bytes":     "1073741824",
	"max.message.bytes": "1048588",
	"cleanup.policy":    "delete",
}

func (b *Broker) describeConfigs(m *wire.DescribeConfigsRequest) *wire.DescribeConfigsResponse {
	b.mu.Lock()
	defer b.mu.Unlock()
	resp := &wire.DescribeConfigsResponse{}
	for _, dt := range m.Topics {
		r := wire.DescribeConfigsResult{Topic: dt.Topic}
		t := b.topics[dt.Topic]
		if t == nil {
			r.ErrorCode, r.ErrorMessage = wire.ErrUnknownTopicOrPartition, "unknown topic "+dt.Topic
			resp.Topics = append(resp.Topics, r)
			continue
		}
		keys := dt.Keys
		if keys == nil {
			seen := map[string]bool{}
			for k := range configDefaults {
				seen[k] = true
			}
			for k := range t.configs {
				seen[k] = true
			}
			for k := range seen {
				keys = append(keys, k)
			}
			sort.Strings(keys)
		}
		for _, k := range keys {
			if v, ok := t.configs[k]; ok {
				r.Configs = append(r.Configs, wire.ConfigDescription{Key: k, Value: v, Source: wire.ConfigSourceTopic})
			} else if v, ok := configDefaults[k]; ok {
				r.Configs = append(r.Configs, wire.ConfigDescription{Key: k, Value: v, Source: wire.ConfigSourceDefault})
			}
		}
		resp.Topics = append(resp.Topics, r)
	}
	return resp
}

func (b *Broker) alterConfigs(m *wire.AlterConfigsRequest) *wire.AlterConfigsResponse {
	b.mu.Lock()
	defer b.mu.Unlock()
	resp := &wire.AlterConfigsResponse{}
	for _, at := range m.Topics {
		r := wire.TopicResult{Topic: at.Topic}
		t := b.topics[at.Topic]
		if m.DeadlinePassed() {
			r.ErrorCode, r.ErrorMessage = wire.ErrRequestTimedOut, "timeout_ms <= 0"
			resp.Topics = append(resp.Topics, r)
			continue
		}
		if t == nil {
			r.ErrorCode, r.ErrorMessage = wire.ErrUnknownTopicOrPartition, "unknown topic "+at.Topic
			resp.Topics = append(resp.Topics, r)
			continue
		}
		for _, c := range at.Configs {
			if _, known := configDefaults[c.Key]; !known {
				r.ErrorCode, r.ErrorMessage = wire.ErrInvalidConfig, "unknown config key "+c.Key
			}
		}
		if r.ErrorCode == wire.ErrNone && !m.ValidateOnly {
			for _, c := range at.Configs {
				if c.Op == wire.AlterConfigDelete {
					delete(t.configs, c.Key)
				} else {
					t.configs[c.Key] = c.Value
				}
			}
		}
		resp.Topics = append(resp.Topics, r)
	}
	return resp
}
