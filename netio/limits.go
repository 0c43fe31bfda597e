package netio

import (
	"encoding/binary"
	"fmt"
	"net"
	"sync"
	"sync/atomic"

	"github.com/ringlog/ringlog/netio/wire"
)

// What one client may cost the broker, and how it is charged (issue 10). Every limit here
// is a Config field with a ringlogd flag; docs/operations.md ("Limits") lists them with
// their defaults and what a client sees when it hits one.
//
//   - Request bytes: a frame's payload is charged, as it arrives, to its connection
//     (ConnBufferBytesMax), its client address (AddressBufferBytesMax) and its shard's
//     share of ServerBufferBytesMax; the first charge is what has arrived (at least
//     frameChunkMinBytes). On the ring driver a frame announcing at most
//     frameUpfrontBytesMax is charged whole when its header is parsed, but only out of
//     the lower half of each of the three budgets (budgets.tryAcquireUpfront): headers
//     alone can hold at most half of any budget, the other half is always left for
//     frames whose bytes arrive.
//   - Response bytes: a reply's in-memory size (responseBytes) is charged to the same three
//     budgets when the handler answers and released once it is written, so a client that
//     pipelines and never reads stops being read instead of piling up replies.
//   - Entries: a request naming more than RequestEntriesMax entries (partitions, topics,
//     names, config keys, summed) is refused with INVALID_REQUEST before it is decoded
//     (countEntries walks the payload without allocating), so decoded structures never
//     exceed entries x a few dozen bytes; an entry named twice is refused too (checkEntries).
//   - Connections: ConnectionsMax in total and ConnectionsPerAddressMax per client IP,
//     refused at accept.
//   - Fetch descriptors: FetchFilesPerConnMax per connection and FetchFilesPerAddressMax per
//     client IP, on top of the broker's own quota (shard.Config.FetchFilesMax).
//
// Nothing here takes a lock on the request path: budgets and counters are atomics; the
// address table's mutex is taken only at accept and close.

// frameChunkMinBytes is the smallest payload charge and allocation: a header announcing
// 60 MiB whose payload has not arrived costs this much, not 60 MiB (1,100 such headers
// cost 4.4 MiB instead of the whole server budget).
const frameChunkMinBytes = 4 << 10

// frameUpfrontBytesMax bounds a frame charged and allocated whole from its header (the
// bundled producer's default RequestBytesMax): it is then received into one buffer,
// straight from the socket, instead of growing by doubling and copying its first half on
// every growth (14 % of the broker's CPU in a 16-partition produce profile,
// docs/benchmarks.md). Larger frames, and frames the budgets' lower halves cannot take,
// grow from what has arrived as before.
const frameUpfrontBytesMax = 4 << 20

// ---------------------------------------------------------------------------------------
// Byte budgets

// budget is a lock-free byte semaphore. tryAcquire never blocks; acquire waits for a
// release (or stop). A single charge larger than max is admitted when nothing else is
// held, so a maximal frame always progresses.
type budget struct {
	used    atomic.Int64
	max     int64
	aborted atomic.Bool
	waiters atomic.Int32
	wakeCh  atomic.Pointer[chan struct{}] // closed and replaced when bytes are released
}

func newBudget(max int64) *budget {
	b := &budget{max: max}
	ch := make(chan struct{})
	b.wakeCh.Store(&ch)
	return b
}

func (b *budget) tryAcquire(n int64) bool {
	for {
		if b.aborted.Load() {
			return false
		}
		used := b.used.Load()
		if used > 0 && used+n > b.max {
			return false
		}
		if b.used.CompareAndSwap(used, used+n) {
			return true
		}
	}
}

// tryAcquireBelow charges n only if the budget then holds at most limit.
func (b *budget) tryAcquireBelow(n, limit int64) bool {
	for {
		if b.aborted.Load() {
			return false
		}
		used := b.used.Load()
		if used+n > limit {
			return false
		}
		if b.used.CompareAndSwap(used, used+n) {
			return true
		}
	}
}

// force charges n whatever the budget holds (responses: the work is already done; the
// charge makes readers wait until it is written).
func (b *budget) force(n int64) { b.used.Add(n) }

// acquire waits until n bytes fit; false if the budget was aborted or stop is closed.
func (b *budget) acquire(n int64, stop <-chan struct{}) bool {
	for {
		if b.tryAcquire(n) {
			return true
		}
		if b.aborted.Load() {
			return false
		}
		b.waiters.Add(1)
		ch := *b.wakeCh.Load()
		if b.tryAcquire(n) {
			b.waiters.Add(-1)
			return true
		}
		select {
		case <-ch:
		case <-stop:
			b.waiters.Add(-1)
			return false
		}
		b.waiters.Add(-1)
	}
}

func (b *budget) release(n int64) {
	if used := b.used.Add(-n); used < 0 {
		panic(fmt.Sprintf("netio: budget released %d bytes more than acquired", -used))
	}
	if b.waiters.Load() > 0 {
		b.wake()
	}
}

// wake makes every waiter look again.
func (b *budget) wake() {
	ch := make(chan struct{})
	close(*b.wakeCh.Swap(&ch))
}

func (b *budget) abort() {
	b.aborted.Store(true)
	b.wake()
}

func (b *budget) usedNow() int64 { return b.used.Load() }

// budgets are the three a connection's bytes are charged to, innermost first.
type budgets struct {
	conn, addr, shard *budget
}

// tryAcquire charges n to all three or to none.
func (bs budgets) tryAcquire(n int64) bool {
	if !bs.conn.tryAcquire(n) {
		return false
	}
	if !bs.addr.tryAcquire(n) {
		bs.conn.release(n)
		return false
	}
	if !bs.shard.tryAcquire(n) {
		bs.addr.release(n)
		bs.conn.release(n)
		return false
	}
	return true
}

// tryAcquireUpfront charges a frame's announced payload n to all three budgets or to none:
// only when n is at most frameUpfrontBytesMax and every budget then holds at most half of
// its maximum (see the top of this file).
func (bs budgets) tryAcquireUpfront(n int64) bool {
	if n > frameUpfrontBytesMax {
		return false
	}
	if !bs.conn.tryAcquireBelow(n, bs.conn.max/2) {
		return false
	}
	if !bs.addr.tryAcquireBelow(n, bs.addr.max/2) {
		bs.conn.release(n)
		return false
	}
	if !bs.shard.tryAcquireBelow(n, bs.shard.max/2) {
		bs.addr.release(n)
		bs.conn.release(n)
		return false
	}
	return true
}

// acquire waits for each budget in turn; on failure nothing stays charged.
func (bs budgets) acquire(n int64, stop <-chan struct{}) bool {
	if !bs.conn.acquire(n, stop) {
		return false
	}
	if !bs.addr.acquire(n, stop) {
		bs.conn.release(n)
		return false
	}
	if !bs.shard.acquire(n, stop) {
		bs.addr.release(n)
		bs.conn.release(n)
		return false
	}
	return true
}

func (bs budgets) force(n int64) {
	bs.conn.force(n)
	bs.addr.force(n)
	bs.shard.force(n)
}

func (bs budgets) release(n int64) {
	bs.shard.release(n)
	bs.addr.release(n)
	bs.conn.release(n)
}

// ---------------------------------------------------------------------------------------
// Counters

// Counter is a lock-free count with a maximum (max <= 0: unlimited).
type Counter struct {
	n   atomic.Int64
	max int64
}

// NewCounter returns a counter allowing max units.
func NewCounter(max int64) *Counter { return &Counter{max: max} }

// TryTake takes n units if they fit.
func (c *Counter) TryTake(n int64) bool {
	for {
		held := c.n.Load()
		if c.max > 0 && held+n > c.max {
			return false
		}
		if c.n.CompareAndSwap(held, held+n) {
			return true
		}
	}
}

// Give returns n units.
func (c *Counter) Give(n int64) {
	if left := c.n.Add(-n); left < 0 {
		panic(fmt.Sprintf("netio: counter given back %d units more than taken", -left))
	}
}

// Load is the number of units taken.
func (c *Counter) Load() int64 { return c.n.Load() }

// Charges takes units from a connection's counter and its client address's together
// (both or neither). It is what ConnInfo.FetchFiles hands the broker core.
type Charges struct{ conn, addr *Counter }

// TryTake takes n units from both counters, or none.
func (c *Charges) TryTake(n int64) bool {
	if !c.conn.TryTake(n) {
		return false
	}
	if !c.addr.TryTake(n) {
		c.conn.Give(n)
		return false
	}
	return true
}

// Give returns n units to both counters.
func (c *Charges) Give(n int64) {
	c.addr.Give(n)
	c.conn.Give(n)
}

// ---------------------------------------------------------------------------------------
// Client addresses

// address is what one client IP holds across its connections.
type address struct {
	key        string
	conns      int     // guarded by addressTable.mu
	bytes      *budget // request and response bytes of all its connections
	fetchFiles *Counter
}

// addressTable maps client IPs to their shared limits. Its mutex is taken at accept and
// close only.
type addressTable struct {
	mu    sync.Mutex
	addrs map[string]*address // guarded by mu
}

// admit registers one more connection from ip; nil if the address is at
// ConnectionsPerAddressMax.
func (t *addressTable) admit(ip string, cfg *Config) *address {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.addrs == nil {
		t.addrs = map[string]*address{}
	}
	a := t.addrs[ip]
	if a == nil {
		a = &address{key: ip, bytes: newBudget(cfg.AddressBufferBytesMax), fetchFiles: NewCounter(cfg.FetchFilesPerAddressMax)}
		t.addrs[ip] = a
	}
	if a.conns >= cfg.ConnectionsPerAddressMax {
		return nil
	}
	a.conns++
	return a
}

// leave unregisters a connection; the entry goes when its last connection does (its
// budgets are empty by then: every request and response was released first).
func (t *addressTable) leave(a *address) {
	t.mu.Lock()
	defer t.mu.Unlock()
	a.conns--
	if a.conns == 0 {
		delete(t.addrs, a.key)
	}
}

// remoteIP is the address key of a connection: its IP without the port.
func remoteIP(remote string) string {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		return remote
	}
	return host
}

// ---------------------------------------------------------------------------------------
// Entries per request

// errEntries and errDuplicate explain an INVALID_REQUEST refusal.
type entryError struct{ msg string }

func (e *entryError) Error() string { return e.msg }

// payloadScanner walks a request payload reading only counts and lengths.
type payloadScanner struct {
	b   []byte
	bad bool
}

func (s *payloadScanner) skip(n int) {
	if s.bad || n < 0 || n > len(s.b) {
		s.bad = true
		s.b = nil
		return
	}
	s.b = s.b[n:]
}

func (s *payloadScanner) int16() int {
	if s.bad || len(s.b) < 2 {
		s.bad = true
		return 0
	}
	v := int16(binary.BigEndian.Uint16(s.b))
	s.b = s.b[2:]
	return int(v)
}

func (s *payloadScanner) int32() int {
	if s.bad || len(s.b) < 4 {
		s.bad = true
		return 0
	}
	v := int32(binary.BigEndian.Uint32(s.b))
	s.b = s.b[4:]
	return int(v)
}

func (s *payloadScanner) string() { s.skip(max(s.int16(), 0)) }
func (s *payloadScanner) bytes()  { s.skip(max(s.int32(), 0)) }

// array reads a count (a null array counts as 0).
func (s *payloadScanner) array() int { return max(s.int32(), 0) }

// countEntries counts the array entries of a request payload without decoding it,
// stopping once the count passes limit. A malformed payload returns what it counted so far
// (the decoder reports the error).
func countEntries(api wire.APIKey, payload []byte, limit int) int {
	s := payloadScanner{b: payload}
	total := 0
	add := func(n int) bool {
		total += n
		return total <= limit && !s.bad
	}
	names := func() {
		n := s.array()
		if add(n) {
			for i := 0; i < n && !s.bad; i++ {
				s.string()
			}
		}
	}
	// topicLists walks [topic string, [entry]] with fixed-size or custom entries.
	topicLists := func(entry func()) {
		n := s.array()
		if !add(n) {
			return
		}
		for i := 0; i < n && !s.bad && total <= limit; i++ {
			s.string()
			m := s.array()
			if !add(m) {
				return
			}
			for j := 0; j < m && !s.bad; j++ {
				entry()
			}
		}
	}
	switch api {
	case wire.APIProduce:
		s.skip(2 + 4)
		topicLists(func() { s.skip(4); s.bytes() })
	case wire.APIFetch:
		s.skip(4 + 4 + 4 + 1)
		topicLists(func() { s.skip(4 + 8 + 4) })
	case wire.APIListOffsets:
		topicLists(func() { s.skip(4 + 8) })
	case wire.APIMetadata, wire.APIDescribeTopics:
		names()
	case wire.APIDeleteTopics:
		s.skip(4)
		names()
	case wire.APICreateTopics:
		s.skip(4 + 1)
		n := s.array()
		if !add(n) {
			break
		}
		for i := 0; i < n && !s.bad && total <= limit; i++ {
			s.string()
			s.skip(4 + 2)
			m := s.array()
			if !add(m) {
				break
			}
			for j := 0; j < m && !s.bad; j++ {
				s.string()
				s.string()
			}
		}
	case wire.APIDescribeConfigs:
		n := s.array()
		if !add(n) {
			break
		}
		for i := 0; i < n && !s.bad && total <= limit; i++ {
			s.string()
			names()
		}
	case wire.APIAlterConfigs:
		s.skip(1)
		topicLists(func() { s.string(); s.skip(1); s.string() })
	case wire.APIJoinGroup: // group, member, instance, client, timeouts, protocol type, [protocol]
		s.string()
		s.string()
		s.string()
		s.string()
		s.skip(4 + 4)
		s.string()
		add(s.array())
	case wire.APISyncGroup: // group, member, instance, generation, type, protocol, [assignment]
		s.string()
		s.string()
		s.string()
		s.skip(4)
		s.string()
		s.string()
		add(s.array())
	case wire.APILeaveGroup:
		s.string()
		add(s.array())
	case wire.APIOffsetCommit:
		s.string()
		s.string()
		s.string()
		s.skip(4)
		topicLists(func() { s.skip(4 + 8 + 4); s.string() })
	case wire.APIOffsetFetch:
		s.string()
		topicLists(func() { s.skip(4) })
	case wire.APIListGroups, wire.APIDescribeGroups, wire.APIDeleteGroups:
		names()
	case wire.APIReplicaFetch:
		s.skip(4 + 4 + 4 + 4)
		topicLists(func() { s.skip(4 + 4 + 8 + 4) })
	case wire.APIOffsetsForLeaderEpoch:
		topicLists(func() { s.skip(4 + 4 + 4) })
	case wire.APIDescribeUsers:
		names()
	case wire.APIAlterUsers:
		n := s.array()
		if add(n) {
			for i := 0; i < n && !s.bad; i++ {
				s.string()
				s.string()
				s.skip(4)
				s.bytes()
				s.bytes()
			}
			m := s.array()
			add(m)
		}
	case wire.APICreateAcls, wire.APIDeleteAcls:
		add(s.array()) // fixed-shape bindings: the decoder bounds their bytes
	}
	return total
}

// duplicateScanMax: up to this many entries duplicates are found by comparing pairs (no
// allocation on the common one-partition produce and fetch); above it, with a map.
const duplicateScanMax = 16

type topicPartitionKey struct {
	topic     string
	partition int32
}

// firstDuplicate returns the index of the first key equal to an earlier one, or -1.
func firstDuplicate[K comparable](keys []K) int {
	if len(keys) <= duplicateScanMax {
		for i := 1; i < len(keys); i++ {
			for j := 0; j < i; j++ {
				if keys[i] == keys[j] {
					return i
				}
			}
		}
		return -1
	}
	seen := make(map[K]struct{}, len(keys))
	for i, k := range keys {
		if _, dup := seen[k]; dup {
			return i
		}
		seen[k] = struct{}{}
	}
	return -1
}

// checkEntries refuses a decoded request that names an entry twice (a partition within
// one produce, fetch or list-offsets; a topic within the others). Answering both copies
// would double the work and the response for nothing, and for produce is ambiguous.
func checkEntries(body wire.Message) error {
	var partitionBuf [duplicateScanMax]topicPartitionKey // no allocation for small requests
	var nameBuf [duplicateScanMax]string
	partitions, names := partitionBuf[:0], nameBuf[:0]
	switch m := body.(type) {
	case *wire.ProduceRequest:
		for _, t := range m.Topics {
			for _, p := range t.Partitions {
				partitions = append(partitions, topicPartitionKey{t.Topic, p.Partition})
			}
		}
	case *wire.FetchRequest:
		if len(m.Topics) == 1 && len(m.Topics[0].Partitions) == 1 {
			return nil // the common case, without building keys
		}
		for _, t := range m.Topics {
			for _, p := range t.Partitions {
				partitions = append(partitions, topicPartitionKey{t.Topic, p.Partition})
			}
		}
	case *wire.ListOffsetsRequest:
		for _, t := range m.Topics {
			for _, p := range t.Partitions {
				partitions = append(partitions, topicPartitionKey{t.Topic, p.Partition})
			}
		}
	case *wire.ReplicaFetchRequest:
		for _, t := range m.Topics {
			for _, p := range t.Partitions {
				partitions = append(partitions, topicPartitionKey{t.Topic, p.Partition})
			}
		}
	case *wire.OffsetsForLeaderEpochRequest:
		for _, t := range m.Topics {
			for _, p := range t.Partitions {
				partitions = append(partitions, topicPartitionKey{t.Topic, p.Partition})
			}
		}
	case *wire.MetadataRequest:
		names = m.Topics
	case *wire.DeleteTopicsRequest:
		names = m.Topics
	case *wire.DescribeTopicsRequest:
		names = m.Topics
	case *wire.CreateTopicsRequest:
		for _, t := range m.Topics {
			names = append(names, t.Topic)
		}
	case *wire.DescribeConfigsRequest:
		for _, t := range m.Topics {
			names = append(names, t.Topic)
		}
	case *wire.AlterConfigsRequest:
		for _, t := range m.Topics {
			names = append(names, t.Topic)
		}
	case *wire.OffsetCommitRequest:
		for _, t := range m.Topics {
			for _, p := range t.Partitions {
				partitions = append(partitions, topicPartitionKey{t.Topic, p.Partition})
			}
		}
	case *wire.OffsetFetchRequest:
		for _, t := range m.Topics {
			for _, p := range t.Partitions {
				partitions = append(partitions, topicPartitionKey{t.Topic, p})
			}
		}
	case *wire.DescribeGroupsRequest:
		names = m.Groups
	case *wire.DeleteGroupsRequest:
		names = m.Groups
	}
	if i := firstDuplicate(partitions); i >= 0 {
		return &entryError{fmt.Sprintf("partition %s/%d named twice in one request", partitions[i].topic, partitions[i].partition)}
	}
	if i := firstDuplicate(names); i >= 0 {
		return &entryError{fmt.Sprintf("topic %q named twice in one request", names[i])}
	}
	return nil
}

// ---------------------------------------------------------------------------------------
// Response sizes

// Per-entry memory of decoded responses, from the struct sizes on 64-bit (a string header
// is 16 bytes, a slice header 24).
const (
	responseBytesBase      = 256
	responseTopicBytes     = 96
	responsePartitionBytes = 64
)

// responseBytes estimates the memory a reply holds until it is written: its structures,
// strings and in-memory records (file ranges cost descriptors, counted elsewhere).
func responseBytes(resp *Response) int64 {
	n := int64(responseBytesBase + len(resp.ErrorMessage))
	switch m := resp.Body.(type) {
	case *wire.FetchResponse:
		for i := range m.Topics {
			t := &m.Topics[i]
			n += responseTopicBytes + int64(len(t.Topic))
			for j := range t.Partitions {
				p := &t.Partitions[j]
				n += responsePartitionBytes + int64(len(p.ErrorMessage)+len(p.Records)) + int64(len(p.RecordsFile))*32
			}
		}
	case *wire.ProduceResponse:
		for _, t := range m.Topics {
			n += responseTopicBytes + int64(len(t.Topic))
			for _, p := range t.Partitions {
				n += responsePartitionBytes + int64(len(p.ErrorMessage))
			}
		}
	case *wire.ListOffsetsResponse:
		for _, t := range m.Topics {
			n += responseTopicBytes + int64(len(t.Topic))
			for _, p := range t.Partitions {
				n += responsePartitionBytes + int64(len(p.ErrorMessage))
			}
		}
	case *wire.MetadataResponse:
		for _, s := range m.Shards {
			n += 32 + int64(len(s.Address))
		}
		for _, t := range m.Topics {
			n += responseTopicBytes + int64(len(t.Topic)+len(t.ErrorMessage)) + int64(len(t.Partitions))*16
			if m.Version >= 1 { // leader, high watermark, replicas and ISR (slice headers and ids)
				for _, p := range t.Partitions {
					n += 64 + 4*int64(len(p.Replicas)+len(p.ISR))
				}
			}
		}
		for _, b := range m.Brokers {
			n += 48 + int64(len(b.Address)+len(b.Rack))
		}
	case *wire.DescribeTopicsResponse:
		for _, t := range m.Topics {
			n += responseTopicBytes + int64(len(t.Topic)+len(t.ErrorMessage)) + int64(len(t.Partitions))*responsePartitionBytes
		}
	case *wire.DescribeConfigsResponse:
		for _, t := range m.Topics {
			n += responseTopicBytes + int64(len(t.Topic)+len(t.ErrorMessage))
			for _, c := range t.Configs {
				n += 48 + int64(len(c.Key)+len(c.Value))
			}
		}
	case *wire.CreateTopicsResponse:
		n += topicResultsBytes(m.Topics)
	case *wire.DeleteTopicsResponse:
		n += topicResultsBytes(m.Topics)
	case *wire.AlterConfigsResponse:
		n += topicResultsBytes(m.Topics)
	case *wire.ReplicaFetchResponse:
		for _, t := range m.Topics {
			n += responseTopicBytes + int64(len(t.Topic))
			for _, p := range t.Partitions {
				n += responsePartitionBytes + int64(len(p.ErrorMessage)+len(p.Records))
			}
		}
	case *wire.OffsetsForLeaderEpochResponse:
		for _, t := range m.Topics {
			n += responseTopicBytes + int64(len(t.Topic)) + int64(len(t.Partitions))*responsePartitionBytes
		}
	case *wire.ControllerResponse:
		n += int64(len(m.ErrorMessage) + len(m.Body))
	default:
		n += groupResponseBytes(resp.Body)
	}
	return n
}

func topicResultsBytes(rs []wire.TopicResult) (n int64) {
	for _, r := range rs {
		n += 48 + int64(len(r.Topic)+len(r.ErrorMessage))
	}
	return n
}

// groupResponseBytes estimates the memory of a group API reply (the others cost the base).
func groupResponseBytes(body wire.Message) (n int64) {
	switch m := body.(type) {
	case *wire.JoinGroupResponse:
		for _, mb := range m.Members {
			n += 64 + int64(len(mb.MemberID)+len(mb.InstanceID)+len(mb.Metadata))
		}
	case *wire.SyncGroupResponse:
		n += int64(len(m.Assignment))
	case *wire.OffsetCommitResponse:
		for _, t := range m.Topics {
			n += responseTopicBytes + int64(len(t.Topic)) + int64(len(t.Partitions))*8
		}
	case *wire.OffsetFetchResponse:
		for _, t := range m.Topics {
			n += responseTopicBytes + int64(len(t.Topic))
			for _, p := range t.Partitions {
				n += responsePartitionBytes + int64(len(p.Metadata))
			}
		}
	case *wire.ListGroupsResponse:
		for _, g := range m.Groups {
			n += 64 + int64(len(g.Group)+len(g.ProtocolType)+len(g.State))
		}
	case *wire.DescribeGroupsResponse:
		for _, g := range m.Groups {
			n += responseTopicBytes + int64(len(g.Group)+len(g.Leader)+len(g.Protocol))
			for _, mb := range g.Members {
				n += 128 + int64(len(mb.MemberID)+len(mb.InstanceID)+len(mb.ClientID)+len(mb.ClientHost)+len(mb.Metadata)+len(mb.Assignment))
			}
		}
	case *wire.DeleteGroupsResponse:
		for _, g := range m.Groups {
			n += 48 + int64(len(g.Group)+len(g.ErrorMessage))
		}
	}
	return n
}
