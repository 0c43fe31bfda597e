// Package client is ringlog's bundled Go client: a pipelined connection pool with
// shard-aware routing (Client), a batching producer (Producer), a consumer without groups
// (Consumer), a consumer in a consumer group (GroupConsumer) and admin calls (topics,
// configs, groups). It speaks the protocol in
// docs/protocol.md through the codecs in netio/wire and builds record batches with
// engine/batch.
//
// Routing: metadata maps every partition to a shard and the shard to an address; the
// client sends a partition's produce and fetch requests straight to that address, and
// everything else to its home broker: the first seed that answered. On a replicated
// cluster metadata (version 1) also names each partition's leader and every broker: a
// partition's requests go to its leader, and when the home broker stops answering the
// client moves home to another broker it knows of (seeds or metadata). Requests answered
// with a leadership error (NOT_LEADER_OR_WRONG_SHARD, a fenced or unknown leader epoch, a
// lost connection) refresh metadata, back off (bounded, with jitter) and go again within
// the caller's deadline.
//
// It must not depend on the broker's internals (engine state, shards): only on the wire.
package client

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ringlog/ringlog/netio/wire"
)

// Config configures a Client. Zero fields take defaults.
type Config struct {
	// Broker is the seed address host:port, or several separated by commas; default
	// 127.0.0.1:9400. Brokers adds more seeds. New uses the first seed that answers.
	Broker             string
	Brokers            []string
	ClientID           string        // sent in ApiVersions; default "ringlog-go"
	DialTimeout        time.Duration // default 10s
	RequestTimeout     time.Duration // default for calls without a deadline; default 30s
	InflightPerConnMax int           // outstanding requests per connection; default 32
	FrameBytesMax      uint32        // largest response frame accepted; default 256 MiB
	// DisableShardRouting sends every request to Broker even when metadata names shard
	// addresses (by default a partition's requests go to its shard's address).
	DisableShardRouting bool
	// TLS, when set, makes every connection (seed and shard addresses) a TLS client
	// connection with this configuration. An empty ServerName is taken from the address
	// dialled.
	TLS *tls.Config
	// SASL, when set, authenticates every connection with SCRAM before it is used.
	SASL *SASLConfig
	// RetryBackoff is the first pause before a call that failed on a leadership error or a
	// lost connection goes again; it doubles per attempt up to RetryBackoffMax, with
	// jitter. Defaults 50ms and 1s.
	RetryBackoff    time.Duration
	RetryBackoffMax time.Duration
}

const (
	defaultBroker             = "127.0.0.1:9400"
	defaultDialTimeout        = 10 * time.Second
	defaultRequestTimeout     = 30 * time.Second
	defaultInflightPerConnMax = 32
	defaultFrameBytesMax      = 256 << 20
	defaultRetryBackoff       = 50 * time.Millisecond
	defaultRetryBackoffMax    = time.Second
	metadataMaxAge            = 30 * time.Second
	// seedsMax bounds the seed list and brokersMax the brokers remembered from metadata.
	seedsMax   = 64
	brokersMax = 4096
)

// Client is safe for concurrent use.
type Client struct {
	cfg Config

	seeds []string // the bootstrap addresses, in the order given

	mu     sync.Mutex
	conns  map[string]*conn      // guarded by mu: by address
	topics map[string]*topicMeta // guarded by mu: metadata cache
	// home is the broker that non-partition requests go to; guarded by mu.
	home string
	// brokers maps a cluster's broker ids to their addresses, from the last metadata
	// answer that listed them (version 1); guarded by mu.
	brokers map[int32]string
	// coordinators maps a group id to its coordinator's address; guarded by mu.
	coordinators map[string]string
	closed       bool // guarded by mu

	// serverFrameBytesMax is the smallest frame limit among the brokers handshaken with
	// (ApiVersions); guarded by mu.
	serverFrameBytesMax int32
	// versions holds the version sent of each API: the highest both this client and the
	// last broker handshaken with (ApiVersions) serve, 0 for an API that broker did not
	// list; guarded by mu. For Metadata, version 0 makes the client ask the Controller API
	// who leads; JoinGroup version 1 means the member handles MEMBER_ID_REQUIRED (KIP-394);
	// CreateTopics, DeleteTopics and AlterConfigs at version 1 carry a timeout that 0 does
	// not stretch (wire.AdminVersionMax).
	versions  [wire.APIKeyCount]uint16
	sasl      saslState
	principal string // guarded by mu: what the broker authenticated us as

	// sleep pauses between retries (tests inject a recorder); jitter returns a value in
	// [0, 1).
	sleep  func(ctx context.Context, d time.Duration) error
	jitter func() float64
}

type topicMeta struct {
	partitions []partitionMeta
	fetchedAt  time.Time
	stale      bool
}

type partitionMeta struct {
	shard int32
	// addr is where the partition's requests go: its leader's address on a cluster when
	// another broker leads it, else its shard's address (shard routing), else the address
	// of the broker that answered the metadata request.
	addr string
}

// ErrClosed is returned by calls on a closed Client.
var ErrClosed = errors.New("ringlog client: closed")

// New connects to the first of the seed brokers (cfg.Broker, cfg.Brokers) that answers the
// ApiVersions handshake.
func New(ctx context.Context, cfg Config) (*Client, error) {
	seeds, err := SeedList(cfg.Broker, cfg.Brokers...)
	if err != nil {
		return nil, err
	}
	cfg.Broker = seeds[0]
	if cfg.ClientID == "" {
		cfg.ClientID = "ringlog-go"
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = defaultDialTimeout
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = defaultRequestTimeout
	}
	if cfg.InflightPerConnMax <= 0 {
		cfg.InflightPerConnMax = defaultInflightPerConnMax
	}
	if cfg.FrameBytesMax == 0 {
		cfg.FrameBytesMax = defaultFrameBytesMax
	}
	if cfg.RetryBackoff <= 0 {
		cfg.RetryBackoff = defaultRetryBackoff
	}
	if cfg.RetryBackoffMax < cfg.RetryBackoff {
		cfg.RetryBackoffMax = max(defaultRetryBackoffMax, cfg.RetryBackoff)
	}
	c := &Client{cfg: cfg, seeds: seeds, conns: map[string]*conn{}, topics: map[string]*topicMeta{}, brokers: map[int32]string{},
		coordinators: map[string]string{}, sleep: sleepCtx, jitter: rand.Float64}
	var errs []error
	for _, addr := range seeds {
		if err := c.handshake(ctx, addr); err != nil {
			errs = append(errs, fmt.Errorf("handshake with %s: %w", addr, err))
			if ctx.Err() != nil {
				break
			}
			continue
		}
		c.home = addr
		return c, nil
	}
	c.Close()
	return nil, errors.Join(errs...)
}

// SeedList splits broker (addresses separated by commas) and more into a list of seed
// addresses without blanks or repeats; an empty list is the default 127.0.0.1:9400.
func SeedList(broker string, more ...string) ([]string, error) {
	var seeds []string
	for _, field := range append(strings.Split(broker, ","), more...) {
		for _, addr := range strings.Split(field, ",") {
			addr = strings.TrimSpace(addr)
			if addr == "" || slices.Contains(seeds, addr) {
				continue
			}
			if _, _, err := net.SplitHostPort(addr); err != nil {
				return nil, fmt.Errorf("broker address %q: %w", addr, err)
			}
			seeds = append(seeds, addr)
		}
	}
	if len(seeds) > seedsMax {
		return nil, fmt.Errorf("%d seed brokers: at most %d", len(seeds), seedsMax)
	}
	if len(seeds) == 0 {
		seeds = []string{defaultBroker}
	}
	return seeds, nil
}

// handshake sends ApiVersions to addr and records what the broker serves.
func (c *Client) handshake(ctx context.Context, addr string) error {
	var ver wire.APIVersionsResponse
	if err := c.Call(ctx, addr, &wire.APIVersionsRequest{ClientID: c.cfg.ClientID}, &ver); err != nil {
		return err
	}
	var versions [wire.APIKeyCount]uint16
	for _, a := range ver.APIs {
		if a.API.Known() {
			versions[a.API] = min(a.VersionMax, a.API.VersionMax())
		}
	}
	c.mu.Lock()
	if ver.FrameBytesMax > 0 && (c.serverFrameBytesMax == 0 || ver.FrameBytesMax < c.serverFrameBytesMax) {
		c.serverFrameBytesMax = ver.FrameBytesMax
	}
	c.versions = versions
	c.mu.Unlock()
	return nil
}

// apiVersion is the version of api this client sends (versions).
func (c *Client) apiVersion(api wire.APIKey) uint16 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.versions[api]
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close closes every connection. Outstanding calls fail with ErrConnClosed.
func (c *Client) Close() error {
	c.mu.Lock()
	c.closed = true
	conns := c.conns
	c.conns = map[string]*conn{}
	c.mu.Unlock()
	for _, cn := range conns {
		cn.close()
	}
	return nil
}

// connFor returns a live connection to addr, dialing if needed.
func (c *Client) connFor(addr string) (*conn, error) { return c.connForGroup(addr, "") }

// connForGroup returns a live connection to addr that stated quota group group (none
// when ""), dialing if needed: a group's fetches travel on connections of their own, so
// that the broker charges them, and only them, to the group's fetch quota.
func (c *Client) connForGroup(addr, group string) (*conn, error) {
	key := addr
	if group != "" {
		key = addr + "\x00group=" + group
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, ErrClosed
	}
	cn := c.conns[key]
	c.mu.Unlock()
	if cn != nil && cn.usable() {
		return cn, nil
	}
	cn, err := dialConn(addr, &c.cfg)
	if err != nil {
		// As retriable as a connection that broke: the address may be a shard listener
		// that a restarted broker no longer has, and fresh metadata will say so.
		return nil, fmt.Errorf("%w: %w", ErrConnClosed, err)
	}
	if c.cfg.SASL != nil {
		principal, err := c.authenticate(cn)
		if err != nil {
			cn.close()
			return nil, err
		}
		c.mu.Lock()
		c.principal = principal
		c.mu.Unlock()
	}
	if group != "" {
		if err := c.stateQuotaGroup(cn, group); err != nil {
			cn.close()
			return nil, err
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		cn.close()
		return nil, ErrClosed
	}
	if old := c.conns[key]; old != nil && old.failure() == nil {
		cn.close() // lost a dial race
		return old, nil
	}
	c.conns[key] = cn
	return cn, nil
}

// stateQuotaGroup sends QuotaGroup on a new connection. A broker that does not know the
// API (older than it) has no group quotas: the connection is used as it is.
func (c *Client) stateQuotaGroup(cn *conn, group string) error {
	var resp wire.QuotaGroupResponse
	err := callConn(cn, &wire.QuotaGroupRequest{Group: group}, &resp, time.Now().Add(c.cfg.DialTimeout))
	var frame *wire.Error
	switch {
	case errors.As(err, &frame) && frame.Code == wire.ErrUnknownAPI:
		return nil
	case err != nil:
		return fmt.Errorf("QuotaGroup %q: %w", group, err)
	}
	if resp.ErrorCode != wire.ErrNone {
		return fmt.Errorf("QuotaGroup %q: %w", group, wire.CodeError(resp.ErrorCode, resp.ErrorMessage))
	}
	return nil
}

// connReady reports whether a request to addr would be written at once: a live connection
// is open and has room for one more outstanding request (no dial, no wait for a slot).
func (c *Client) connReady(addr string) bool {
	c.mu.Lock()
	cn := c.conns[addr]
	c.mu.Unlock()
	return cn != nil && cn.failure() == nil && len(cn.pending) < cap(cn.pending)
}

// CallAsync sends req to addr; done receives the decoded resp (the same value passed in)
// or an error. A nil resp means no response is expected (acks=0 produce). done runs on an
// internal goroutine and must not block.
func (c *Client) CallAsync(addr string, req, resp wire.Message, done func(wire.Message, error)) {
	cn, err := c.connFor(addr)
	if err != nil {
		done(nil, err)
		return
	}
	cn.send(req, resp, done)
}

// callAsyncOwned is CallAsync for a response whose frame buffer the callee takes over and
// hands back with release.
// A group other than "" sends it on that group's connections (connForGroup).
func (c *Client) callAsyncOwned(addr, group string, req, resp wire.Message, done func(wire.Message, error, func())) {
	cn, err := c.connForGroup(addr, group)
	if err != nil {
		done(nil, err, func() {})
		return
	}
	cn.sendOwned(req, resp, done)
}

// Call sends req to addr and waits for the response, decoded into resp. Frame-level
// errors come back as *wire.Error.
func (c *Client) Call(ctx context.Context, addr string, req, resp wire.Message) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.cfg.RequestTimeout)
		defer cancel()
	}
	result := make(chan error, 1)
	c.CallAsync(addr, req, resp, func(_ wire.Message, err error) { result <- err })
	select {
	case err := <-result:
		return err
	case <-ctx.Done():
		return fmt.Errorf("%s to %s: %w", req.API(), addr, ctx.Err())
	}
}

// Principal is the principal the broker authenticated this client as ("" before the
// first connection, or without SASL).
func (c *Client) Principal() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.principal
}

// BrokerAddr is the home broker's address: the seed that answered first, or the broker the
// client moved to when that one stopped answering.
func (c *Client) BrokerAddr() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.home
}

// Brokers returns the addresses the client knows, by broker id, from the last metadata
// answer that listed a cluster's brokers (empty before that, and for a single broker).
func (c *Client) Brokers() map[int32]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.brokers)
}

// callHome sends req to the home broker (atHome).
func (c *Client) callHome(ctx context.Context, req, resp wire.Message) error {
	return c.atHome(ctx, func(addr string) error { return c.Call(ctx, addr, req, resp) })
}

// callHomeVersioned is callHome for a request at the version the handshake chose. A home
// broker that answers it UNSUPPORTED_VERSION runs an older release than the broker
// handshaken with (a cluster mid-upgrade or downgrade): the request goes again at version
// 0, which every broker serves.
func (c *Client) callHomeVersioned(ctx context.Context, req, resp wire.Message) error {
	err := c.callHome(ctx, req, resp)
	if errors.Is(err, wire.ErrUnsupportedVersion) && wire.WireVersionOf(req) > 0 {
		wire.SetWireVersion(req, 0)
		err = c.callHome(ctx, req, resp)
	}
	return err
}

// atHome runs call with the home broker's address. When the home broker cannot be reached
// (a lost or refused connection) the client moves home to the next broker that answers,
// among those metadata listed and the seeds, and runs call there once more.
func (c *Client) atHome(ctx context.Context, call func(addr string) error) error {
	addr := c.BrokerAddr()
	err := call(addr)
	if err == nil || !errors.Is(err, ErrConnClosed) || ctx.Err() != nil {
		return err
	}
	next, ok := c.failover(ctx, addr)
	if !ok {
		return err
	}
	return call(next)
}

// failover moves home away from dead to the first other known broker that answers a
// handshake; false when none does.
func (c *Client) failover(ctx context.Context, dead string) (string, bool) {
	c.mu.Lock()
	if c.home != dead {
		home := c.home // another call moved already
		c.mu.Unlock()
		return home, true
	}
	ids := slices.Sorted(maps.Keys(c.brokers))
	var candidates []string
	for _, id := range ids {
		candidates = append(candidates, c.brokers[id])
	}
	c.mu.Unlock()
	for _, addr := range append(candidates, c.seeds...) {
		if addr == dead || addr == "" {
			continue
		}
		hctx, cancel := context.WithTimeout(ctx, c.cfg.DialTimeout)
		err := c.handshake(hctx, addr)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return "", false
			}
			continue
		}
		c.mu.Lock()
		if c.home == dead {
			c.home = addr
		}
		addr = c.home
		c.mu.Unlock()
		return addr, true
	}
	return "", false
}

// ---------------------------------------------------------------------------------------
// Metadata

// refreshMetadata fetches metadata for topics (nil = all) from the home broker and
// updates the cache.
func (c *Client) refreshMetadata(ctx context.Context, topics []string) (*wire.MetadataResponse, error) {
	version := c.apiVersion(wire.APIMetadata)
	var resp wire.MetadataResponse
	var addr string // the broker that answered
	err := c.atHome(ctx, func(home string) error {
		addr = home
		err := c.Call(ctx, home, &wire.MetadataRequest{Topics: topics, Version: version}, &resp)
		if errors.Is(err, wire.ErrUnsupportedVersion) && version > 0 {
			// An older release at this address than the broker handshaken with (a cluster
			// mid-upgrade or a broker rolled back): version 0, which every broker serves,
			// as callHomeVersioned does for the admin APIs.
			resp = wire.MetadataResponse{}
			err = c.Call(ctx, home, &wire.MetadataRequest{Topics: topics, Version: 0}, &resp)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	var leaders *clusterLeaders
	if resp.Version == 0 {
		leaders = c.clusterLeadersOf(ctx, addr, resp.BrokerID)
	}
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(resp.Brokers) > 0 && resp.BrokerID > 0 {
		clear(c.brokers)
		for _, b := range resp.Brokers[:min(len(resp.Brokers), brokersMax)] {
			if b.Address != "" {
				c.brokers[b.NodeID] = b.Address
			}
		}
	}
	shards := make(map[int32]string, len(resp.Shards))
	for _, s := range resp.Shards {
		shards[s.Shard] = s.Address
	}
	for _, t := range resp.Topics {
		if t.ErrorCode != wire.ErrNone {
			delete(c.topics, t.Topic)
			continue
		}
		tm := &topicMeta{fetchedAt: now, partitions: make([]partitionMeta, len(t.Partitions))}
		for _, p := range t.Partitions {
			if p.Partition < 0 || int(p.Partition) >= len(tm.partitions) {
				continue
			}
			pm := partitionMeta{shard: p.Shard, addr: addr}
			switch leader := c.leaderOfLocked(&resp, leaders, t.Topic, p); {
			case leader != "":
				pm.addr = leader
			case !c.cfg.DisableShardRouting && shards[p.Shard] != "":
				pm.addr = shards[p.Shard]
			}
			tm.partitions[p.Partition] = pm
		}
		c.topics[t.Topic] = tm
	}
	return &resp, nil
}

// leaderOfLocked is the address of the broker leading p when another broker of a cluster
// leads it ("" when the answering broker leads it, it is offline, or there is no
// cluster): from the answer itself (version 1) or the Controller API's view (version 0).
func (c *Client) leaderOfLocked(resp *wire.MetadataResponse, leaders *clusterLeaders, topic string, p wire.MetadataPartition) string {
	if resp.BrokerID <= 0 {
		return ""
	}
	if resp.Version >= 1 {
		if p.Leader <= 0 || p.Leader == resp.BrokerID {
			return ""
		}
		return c.brokers[p.Leader]
	}
	return leaders.addr(resp.BrokerID, topic, p.Partition)
}

// clusterLeaders is the part of a broker's cluster view (the Controller API's JSON,
// replication/cluster.View) that routing needs: who leads each partition, and where. Only
// a broker without Metadata version 1 is asked for it.
type clusterLeaders struct {
	Metadata struct {
		Brokers map[string]struct{ Address string }
		Topics  map[string]struct {
			Partitions []struct{ Index, Leader int32 }
		}
	}
}

// addr is the address of the broker leading topic/partition, or "" when it is the
// answering broker (self), unknown, or there is no cluster.
func (v *clusterLeaders) addr(self int32, topic string, partition int32) string {
	if v == nil {
		return ""
	}
	t, ok := v.Metadata.Topics[topic]
	if !ok {
		return ""
	}
	for _, p := range t.Partitions {
		if p.Index == partition && p.Leader > 0 && p.Leader != self {
			return v.Metadata.Brokers[strconv.Itoa(int(p.Leader))].Address
		}
	}
	return ""
}

// clusterLeadersOf asks the broker at addr of a replicated cluster (a metadata answer with
// a broker id; a single broker answers 0) who leads what; nil for a single broker or when
// the view cannot be had (routing then falls back to that broker, which answers
// NOT_LEADER_OR_WRONG_SHARD for partitions it does not lead, and the retry asks again).
func (c *Client) clusterLeadersOf(ctx context.Context, addr string, brokerID int32) *clusterLeaders {
	if brokerID <= 0 {
		return nil
	}
	data, err := c.ClusterMetadataAt(ctx, addr)
	if err != nil {
		return nil
	}
	var v clusterLeaders
	if json.Unmarshal(data, &v) != nil {
		return nil
	}
	return &v
}

// Partitions returns the topic's partition count, from cache or a metadata request.
func (c *Client) Partitions(ctx context.Context, topic string) (int, error) {
	c.mu.Lock()
	tm := c.topics[topic]
	fresh := tm != nil && !tm.stale && time.Since(tm.fetchedAt) < metadataMaxAge
	c.mu.Unlock()
	if fresh {
		return len(tm.partitions), nil
	}
	resp, err := c.refreshMetadata(ctx, []string{topic})
	if err != nil {
		return 0, err
	}
	for _, t := range resp.Topics {
		if t.Topic == topic {
			if t.ErrorCode != wire.ErrNone {
				return 0, fmt.Errorf("topic %s: %w", topic, wire.CodeError(t.ErrorCode, t.ErrorMessage))
			}
			return len(t.Partitions), nil
		}
	}
	return 0, fmt.Errorf("topic %s: %w", topic, wire.ErrUnknownTopicOrPartition)
}

// invalidate marks a topic's metadata stale (after a routing error).
func (c *Client) invalidate(topic string) {
	c.mu.Lock()
	if tm := c.topics[topic]; tm != nil {
		tm.stale = true
	}
	c.mu.Unlock()
}

// leaderAddr returns the address to send topic/partition requests to: the leading
// broker's when another broker of a cluster leads the partition, else the owning shard's
// address when metadata names one and routing is on, else the broker that answered the
// metadata request (the home broker when the topic is not cached).
func (c *Client) leaderAddr(topic string, partition int32) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	tm := c.topics[topic]
	if tm == nil || partition < 0 || int(partition) >= len(tm.partitions) || tm.partitions[partition].addr == "" {
		return c.home
	}
	return tm.partitions[partition].addr
}

// ---------------------------------------------------------------------------------------
// Admin

// TopicInfo is one topic as listed by ListTopics.
type TopicInfo struct {
	Name       string
	Partitions int
}

// ListTopics returns every topic, sorted by name.
func (c *Client) ListTopics(ctx context.Context) ([]TopicInfo, error) {
	resp, err := c.refreshMetadata(ctx, nil)
	if err != nil {
		return nil, err
	}
	var out []TopicInfo
	for _, t := range resp.Topics {
		if t.ErrorCode == wire.ErrNone {
			out = append(out, TopicInfo{Name: t.Topic, Partitions: len(t.Partitions)})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// CreateTopic creates a topic with the given partition count and configs.
func (c *Client) CreateTopic(ctx context.Context, name string, partitions int32, configs map[string]string) error {
	return c.CreateReplicatedTopic(ctx, name, partitions, 1, configs)
}

// CreateReplicatedTopic creates a topic whose partitions have replicationFactor replicas
// on different brokers of a cluster (a single broker refuses more than 1).
func (c *Client) CreateReplicatedTopic(ctx context.Context, name string, partitions int32, replicationFactor int16, configs map[string]string) error {
	ct := wire.CreateTopic{Topic: name, Partitions: partitions, ReplicationFactor: replicationFactor}
	for _, k := range sortedKeys(configs) {
		ct.Configs = append(ct.Configs, wire.ConfigEntry{Key: k, Value: configs[k]})
	}
	var resp wire.CreateTopicsResponse
	req := &wire.CreateTopicsRequest{Version: c.apiVersion(wire.APICreateTopics), TimeoutMs: timeoutMs(ctx, c.cfg.RequestTimeout), Topics: []wire.CreateTopic{ct}}
	if err := c.callHomeVersioned(ctx, req, &resp); err != nil {
		return fmt.Errorf("create topic %s: %w", name, err)
	}
	return topicResultErr("create topic", name, resp.Topics)
}

// ClusterMetadata returns the broker's view of the cluster's controller metadata as JSON
// (brokers, controller leader, topics with their leaders, replicas, ISR and epochs, and
// the high watermark of each partition the broker leads). A single broker answers
// NOT_CONTROLLER.
func (c *Client) ClusterMetadata(ctx context.Context) ([]byte, error) {
	var body []byte
	err := c.atHome(ctx, func(addr string) (err error) {
		body, err = c.ClusterMetadataAt(ctx, addr)
		return err
	})
	return body, err
}

// ClusterMetadataAt is ClusterMetadata asked of the broker at addr.
func (c *Client) ClusterMetadataAt(ctx context.Context, addr string) ([]byte, error) {
	body, err := c.controller(ctx, addr, wire.ControllerMetadata, nil)
	if err != nil {
		return nil, fmt.Errorf("cluster metadata from %s: %w", addr, err)
	}
	return body, nil
}

// ControllerSubmitAt sends a controller command (the JSON of replication/controller's
// Command: a partition reassignment, a preferred-leader election) to the broker at addr,
// which replicates it through the controller quorum (forwarding it to the controller
// leader's broker when its own voter does not lead), and returns the JSON of its result.
// NOT_CONTROLLER means no controller leader was reachable from that broker (retry), or
// the broker predates forwarding: send it to the broker of the cluster view's
// ControllerLeader. A refused command answers INVALID_REQUEST with the reason.
func (c *Client) ControllerSubmitAt(ctx context.Context, addr string, command []byte) ([]byte, error) {
	body, err := c.controller(ctx, addr, wire.ControllerSubmit, command)
	if err != nil {
		return nil, fmt.Errorf("controller command at %s: %w", addr, err)
	}
	return body, nil
}

// controller makes one Controller API call to addr and returns a copy of the answer's body.
func (c *Client) controller(ctx context.Context, addr string, op int8, body []byte) ([]byte, error) {
	type answer struct {
		body []byte
		err  error
	}
	result := make(chan answer, 1)
	var resp wire.ControllerResponse
	c.callAsyncOwned(addr, "", &wire.ControllerRequest{Op: op, Body: body}, &resp, func(_ wire.Message, err error, release func()) {
		// The body aliases the frame buffer, which release hands back: copy it first.
		a := answer{err: err}
		if err == nil {
			if a.err = resp.ErrorCode.Err(); a.err != nil {
				a.err = fmt.Errorf("%w: %s", a.err, resp.ErrorMessage)
			} else {
				a.body = append([]byte(nil), resp.Body...)
			}
		}
		release()
		result <- a
	})
	select {
	case a := <-result:
		return a.body, a.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// DeleteTopic deletes a topic.
func (c *Client) DeleteTopic(ctx context.Context, name string) error {
	var resp wire.DeleteTopicsResponse
	req := &wire.DeleteTopicsRequest{Version: c.apiVersion(wire.APIDeleteTopics), TimeoutMs: timeoutMs(ctx, c.cfg.RequestTimeout), Topics: []string{name}}
	if err := c.callHomeVersioned(ctx, req, &resp); err != nil {
		return fmt.Errorf("delete topic %s: %w", name, err)
	}
	c.invalidate(name)
	return topicResultErr("delete topic", name, resp.Topics)
}

// DescribeTopics returns per-partition offsets, sizes and shards; no names means all.
func (c *Client) DescribeTopics(ctx context.Context, names ...string) ([]wire.DescribeTopic, error) {
	var resp wire.DescribeTopicsResponse
	if err := c.callHome(ctx, &wire.DescribeTopicsRequest{Topics: names}, &resp); err != nil {
		return nil, fmt.Errorf("describe topics: %w", err)
	}
	for _, t := range resp.Topics {
		if t.ErrorCode != wire.ErrNone {
			return resp.Topics, fmt.Errorf("describe topic %s: %w", t.Topic, wire.CodeError(t.ErrorCode, t.ErrorMessage))
		}
	}
	return resp.Topics, nil
}

// DescribeConfigs returns a topic's configuration; no keys means all.
func (c *Client) DescribeConfigs(ctx context.Context, topic string, keys ...string) ([]wire.ConfigDescription, error) {
	var resp wire.DescribeConfigsResponse
	if err := c.callHome(ctx, &wire.DescribeConfigsRequest{Topics: []wire.DescribeConfigsTopic{{Topic: topic, Keys: keys}}}, &resp); err != nil {
		return nil, fmt.Errorf("describe configs of %s: %w", topic, err)
	}
	if len(resp.Topics) != 1 {
		return nil, fmt.Errorf("describe configs of %s: %d results", topic, len(resp.Topics))
	}
	r := resp.Topics[0]
	if r.ErrorCode != wire.ErrNone {
		return nil, fmt.Errorf("describe configs of %s: %w", topic, wire.CodeError(r.ErrorCode, r.ErrorMessage))
	}
	return r.Configs, nil
}

// AlterConfigs sets the keys in set and removes the keys in remove, on one topic.
func (c *Client) AlterConfigs(ctx context.Context, topic string, set map[string]string, remove []string) error {
	at := wire.AlterConfigsTopic{Topic: topic}
	for _, k := range sortedKeys(set) {
		at.Configs = append(at.Configs, wire.AlterConfig{Key: k, Op: wire.AlterConfigSet, Value: set[k]})
	}
	for _, k := range remove {
		at.Configs = append(at.Configs, wire.AlterConfig{Key: k, Op: wire.AlterConfigDelete})
	}
	var resp wire.AlterConfigsResponse
	req := &wire.AlterConfigsRequest{Version: c.apiVersion(wire.APIAlterConfigs), TimeoutMs: timeoutMs(ctx, c.cfg.RequestTimeout), Topics: []wire.AlterConfigsTopic{at}}
	if err := c.callHomeVersioned(ctx, req, &resp); err != nil {
		return fmt.Errorf("alter configs of %s: %w", topic, err)
	}
	return topicResultErr("alter configs of", topic, resp.Topics)
}

// ListOffset looks up one partition's offset: ts is wire.TimestampEarliest,
// wire.TimestampLatest or a time in ms since epoch (first offset with a timestamp >= ts;
// -1 if none).
func (c *Client) ListOffset(ctx context.Context, topic string, partition int32, ts int64) (int64, error) {
	var offset int64
	err := c.retryLeader(ctx, topic, func(ctx context.Context) error {
		if _, err := c.Partitions(ctx, topic); err != nil {
			return err
		}
		var resp wire.ListOffsetsResponse
		req := &wire.ListOffsetsRequest{Topics: []wire.ListOffsetsTopic{{Topic: topic, Partitions: []wire.ListOffsetsPartition{{Partition: partition, Timestamp: ts}}}}}
		if err := c.Call(ctx, c.leaderAddr(topic, partition), req, &resp); err != nil {
			return err
		}
		if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
			return errors.New("malformed response")
		}
		p := resp.Topics[0].Partitions[0]
		offset = p.Offset
		return wire.CodeError(p.ErrorCode, p.ErrorMessage)
	})
	if err != nil {
		return 0, fmt.Errorf("list offsets %s/%d: %w", topic, partition, err)
	}
	return offset, nil
}

func topicResultErr(what, name string, results []wire.TopicResult) error {
	for _, r := range results {
		if r.Topic == name && r.ErrorCode != wire.ErrNone {
			return fmt.Errorf("%s %s: %w", what, name, wire.CodeError(r.ErrorCode, r.ErrorMessage))
		}
	}
	if len(results) == 0 {
		return fmt.Errorf("%s %s: empty response", what, name)
	}
	return nil
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// timeoutMs is a request's timeout_ms: the time left until ctx's deadline, else fallback;
// 0 once the deadline passed, which a version 1 admin request turns into
// REQUEST_TIMED_OUT with nothing changed.
func timeoutMs(ctx context.Context, fallback time.Duration) int32 {
	d := fallback
	if deadline, ok := ctx.Deadline(); ok {
		d = time.Until(deadline)
	}
	return int32(max(min(d.Milliseconds(), 1<<31-1), 0))
}

// PartitionReplication is one partition's replication state as Metadata (version 1)
// reports it.
type PartitionReplication struct {
	Partition   int32
	Leader      int32 // broker id; -1 while the partition is offline
	LeaderEpoch int32
	Replicas    []int32
	ISR         []int32
	// HighWatermark is the leader's, asked of the leader itself; -1 when it did not answer.
	HighWatermark int64
}

// DescribeReplication returns the replication state of topic's partitions on a cluster and
// the controller leader's broker id: leaders, epochs, replicas and ISR from the home
// broker's metadata, each high watermark from its partition's leader. A single broker (or
// a broker without Metadata version 1) returns no partitions.
func (c *Client) DescribeReplication(ctx context.Context, topic string) ([]PartitionReplication, int32, error) {
	resp, err := c.refreshMetadata(ctx, []string{topic})
	if err != nil {
		return nil, -1, fmt.Errorf("describe replication of %s: %w", topic, err)
	}
	if resp.Version < 1 || resp.BrokerID <= 0 {
		return nil, -1, nil
	}
	var parts []PartitionReplication
	for _, t := range resp.Topics {
		if t.Topic != topic {
			continue
		}
		if t.ErrorCode != wire.ErrNone {
			return nil, -1, fmt.Errorf("describe replication of %s: %w", topic, wire.CodeError(t.ErrorCode, t.ErrorMessage))
		}
		for _, p := range t.Partitions {
			hwm := int64(-1)
			if p.Leader == resp.BrokerID {
				hwm = p.HighWatermark
			}
			parts = append(parts, PartitionReplication{Partition: p.Partition, Leader: p.Leader, LeaderEpoch: p.LeaderEpoch,
				Replicas: p.Replicas, ISR: p.ISR, HighWatermark: hwm})
		}
	}
	// The other leaders' high watermarks, one Metadata request per leader.
	asked := map[int32]map[int32]int64{resp.BrokerID: nil}
	for i := range parts {
		p := &parts[i]
		if p.Leader <= 0 || p.Leader == resp.BrokerID {
			continue
		}
		hwms, ok := asked[p.Leader]
		if !ok {
			hwms = c.highWatermarksAt(ctx, p.Leader, topic)
			asked[p.Leader] = hwms
		}
		if h, ok := hwms[p.Partition]; ok {
			p.HighWatermark = h
		}
	}
	return parts, resp.ControllerID, nil
}

// highWatermarksAt asks broker id for topic's metadata and returns the high watermarks it
// reports for the partitions it leads (nil when it does not answer).
func (c *Client) highWatermarksAt(ctx context.Context, id int32, topic string) map[int32]int64 {
	c.mu.Lock()
	addr := c.brokers[id]
	c.mu.Unlock()
	if addr == "" {
		return nil
	}
	var resp wire.MetadataResponse
	if c.Call(ctx, addr, &wire.MetadataRequest{Topics: []string{topic}, Version: 1}, &resp) != nil {
		return nil
	}
	out := map[int32]int64{}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if t.Topic == topic && p.Leader == resp.BrokerID && p.HighWatermark >= 0 {
				out[p.Partition] = p.HighWatermark
			}
		}
	}
	return out
}
