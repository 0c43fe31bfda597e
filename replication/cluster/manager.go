package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ringlog/ringlog/engine"
	"github.com/ringlog/ringlog/engine/group"
	"github.com/ringlog/ringlog/engine/shard"
	"github.com/ringlog/ringlog/replication/controller"
	"github.com/ringlog/ringlog/replication/isr"
)

// Controller operations a peer may ask for (the wire's Controller API).
const (
	OpSubmit   int8 = 0 // replicate a JSON controller.Command; answer the JSON of its result value
	OpMetadata int8 = 1 // answer the JSON of this broker's view of the controller metadata
	// OpWatch: the body is a JSON WatchRequest; answer like OpMetadata once this broker's
	// metadata version is above its Since, or after its WaitMs (at most 10 s). Brokers
	// outside the controller quorum follow the metadata with it.
	OpWatch int8 = 2
)

// Errors of the Manager's API.
var (
	// ErrNotLeader: this broker does not lead the partition (NOT_LEADER_OR_WRONG_SHARD).
	ErrNotLeader = isr.ErrNotLeader
	// ErrNoController: no controller leader could be reached.
	ErrNoController = errors.New("no controller leader reachable")
	// ErrConfig: a bad cluster configuration.
	ErrConfig = errors.New("bad cluster configuration")
	// ErrTimedOut: a controller operation did not complete within the request's timeout
	// (REQUEST_TIMED_OUT); it may still be applied.
	ErrTimedOut = errors.New("controller request timed out")
)

// PeerConn is one connection to another broker, used by one goroutine at a time.
type PeerConn interface {
	ReplicaFetch(ctx context.Context, req *FetchRequest) ([]FetchAnswer, error)
	OffsetsForLeaderEpoch(ctx context.Context, tp shard.TopicPartition, currentEpoch, epoch int32) (isr.EpochEndOffset, error)
	// Controller sends a Controller operation; protocol is the inter-broker protocol version
	// to carry (Manager.wireProtocol: 0 while the cluster is finalized below 2, so that a broker
	// of the previous release understands the request).
	Controller(ctx context.Context, op int8, protocol uint16, body []byte) ([]byte, error)
	Close() error
}

// Dialer connects to the broker at addr (its advertised client address).
type Dialer func(ctx context.Context, addr string) (PeerConn, error)

// FetchRequest is a follower's fetch of several partitions from one leader.
type FetchRequest struct {
	// ProtocolVersion is the inter-broker protocol version the request carries
	// (Manager.wireProtocol; 0: none, the request of the previous release).
	ProtocolVersion uint16
	ReplicaID       int32
	MaxWait         time.Duration
	BytesMax        int32
	Partitions      []FetchPartition
	// Caller is the shard whose loop the leader serves the request on
	// (shard.FetchFrom: that shard's partitions are read inline on the first pass), or
	// shard.CallerNone. Leader side only; a shard whose loop is not the caller's thread is
	// posted to whatever it says.
	Caller int
	// Wake, if set, ends the fetch's long-poll when the follower asks (its lane kick,
	// PeerConn's WakeFetch). Leader side only.
	Wake *shard.FetchWake
}

// FetchPartition asks for one partition's batches from Offset (the follower's LEO).
type FetchPartition struct {
	shard.TopicPartition
	LeaderEpoch int32
	Offset      int64
	// BytesMax bounds this partition's records (the first batch is always whole); 0: only
	// the request's BytesMax. A follower bounds its throttled replicas with it.
	BytesMax int32
}

// FetchAnswer is the leader's answer for one partition.
type FetchAnswer struct {
	shard.TopicPartition
	Err           error
	HighWatermark int64
	LogEndOffset  int64
	Records       []byte
}

// Config configures a Manager.
type Config struct {
	NodeID int32
	// Voters is the controller quorum (controller.ParseVoters' format). A broker among them
	// runs its voter; one that is not runs no raft and follows the metadata from the
	// brokers over the network (Seeds).
	Voters string
	// Seeds are client addresses (HOST:PORT) of brokers of the cluster that a broker
	// outside the controller quorum asks for the metadata until it knows the controller
	// leader's broker; required for such a broker, unused by voters.
	Seeds   []string
	Rack    string
	DataDir string // the broker's data directory: the controller keeps DataDir/controller

	// SessionTimeout: a broker silent this long loses its leaderships (default 6 s).
	SessionTimeout time.Duration
	// Heartbeat is the interval between heartbeats (default SessionTimeout/6).
	Heartbeat time.Duration
	// ReplicaLagMax is replica.lag.time.max: a follower that has not caught up for this long
	// leaves the ISR (default 10 s).
	ReplicaLagMax time.Duration
	// Raft timing of the controller voter; zero takes the controller's defaults.
	RaftHeartbeatTimeout, RaftElectionTimeout, RaftLeaderLease time.Duration

	Dial Dialer
	// RaftTLS, if set, runs the controller voters' raft transport over mutual TLS; nil:
	// plain TCP (a private network only: raft carries the cluster metadata).
	RaftTLS *controller.TransportTLS

	Logger    *slog.Logger
	RaftLog   io.Writer // the controller's raft log; nil discards it
	Now       func() time.Time
	FetchWait time.Duration // a follower fetch's long-poll (default 500 ms)
	// ThrottledBytesPerSecond is replication.throttled.bytes.per.second: the rate at which
	// this broker copies partitions whose ISR it is not in (catching up after a failure, a
	// reassignment's new replica); 0: unthrottled. In-sync replicas are never throttled.
	ThrottledBytesPerSecond int64
	// LeaderThrottledBytesPerSecond is Kafka's leader.replication.throttled.rate: the rate
	// at which this broker, as leader, serves followers that are not in their partition's
	// ISR; 0: unthrottled. In-sync followers are never throttled.
	LeaderThrottledBytesPerSecond int64
	// ProtocolMin and ProtocolMax are the inter-broker protocol versions this broker
	// speaks (default controller.ProtocolVersionMin/Max, this build's). Narrower only for
	// tests: ringlogd's hidden --testing-protocol-versions simulates an older broker.
	ProtocolMin, ProtocolMax uint16
	// OffsetsPartitions is the partition count of __consumer_offsets when this broker
	// creates it through the controller (Kafka's offsets.topic.num.partitions; default
	// shard.OffsetsPartitionsDefault); OffsetsReplicationFactor its replication factor
	// (offsets.topic.replication.factor, default 3), lowered to the live brokers at the
	// creation. The topic's count, once created, decides where every group lives.
	OffsetsPartitions, OffsetsReplicationFactor int32
}

// Named defaults and bounds.
const (
	sessionTimeoutDefault = 6 * time.Second
	replicaLagMaxDefault  = 10 * time.Second
	fetchWaitDefault      = 500 * time.Millisecond
	// fetchBytesMax bounds one follower fetch response (all partitions from one leader).
	fetchBytesMax = 8 << 20
	// tickInterval: how often leaders check follower lag and retry AlterISR.
	tickInterval = 100 * time.Millisecond
	// leaderStallMin (isr.LeaderConfig.StallMin): a leader that saw no input (tick or
	// fetch) for five ticks did not run meanwhile; that time is not held against its
	// followers.
	leaderStallMin = 5 * tickInterval
	// reconcileEvery re-applies the metadata even when it did not change, so that a step
	// that failed (a partition not open yet, a controller not reachable) is retried.
	reconcileEvery = time.Second
	submitTimeout  = 5 * time.Second
	// forwardsMax bounds the controller commands (creates, deletes, config changes, ISR
	// changes, producer-id blocks) this broker forwards to the controller leader's broker
	// at once, each on its own connection; its registration and heartbeats have a slot of
	// their own beside them. A forward waits for a slot until its context ends. Four: a
	// forward takes one controller round trip (milliseconds) when the leader is healthy, and
	// a leader that does not answer holds at most four connections until their deadlines.
	forwardsMax = 4
	// retryBackoff is how long a fetcher waits after a failed round trip.
	retryBackoff = 200 * time.Millisecond
)

// Manager is one broker's membership in the cluster (see the package doc).
type Manager struct {
	cfg Config
	log *slog.Logger
	// started is when New ran and voterCount the size of the controller quorum: the
	// offsets topic's creation waits for the brokers a starting cluster will have.
	started    time.Time
	voterCount int32
	ctl        quorum // this broker's voter, or a follower of the metadata (remoteQuorum)
	b          *shard.Broker
	// self is the advertised client address, known once Attach runs; kafkaSelf the Kafka
	// listener's advertised address (SetKafkaAddress, before Attach), registered with it.
	self, kafkaSelf string

	reps sync.Map // shard.TopicPartition -> *replica

	fmu      sync.Mutex
	fetchers map[fetcherKey]*fetcher // by leader id and lane; guarded by fmu
	throttle *throttle               // follower side; nil: replication is not throttled
	// leaderThrottle paces this broker's replies to catching-up followers; nil: off.
	leaderThrottle *throttle
	// lists holds the topics' throttled-replicas lists of the last reconciled metadata.
	lists atomic.Pointer[throttleLists]
	// reconciled is the metadata the last reconcile applied (read-only once stored): the
	// fetchers read it every round instead of copying the controller's metadata.
	reconciled atomic.Pointer[controller.Metadata]

	// Forwarded controller commands (Submit on a broker whose voter does not lead; see
	// forwardConn). A PeerConn carries one request at a time, so each forward holds its own
	// connection to the controller leader's broker for its round trip, and cmu only while
	// it picks one: a forward stuck on a frozen leader holds up no other (heartbeats above
	// all). A forward first takes a slot: sessionSlot for this broker's own registration and
	// heartbeats (heartbeatLoop's submitSession, one at a time), forwardSlots for every
	// other command (a client's heartbeat command included), so that forwardsMax stuck
	// commands never delay a heartbeat. Connections (idle plus in flight) never outnumber
	// the slots, forwardsMax+1: a new one is dialled only while none is idle.
	sessionSlot  chan struct{} // capacity 1
	forwardSlots chan struct{} // capacity forwardsMax
	cmu          sync.Mutex
	ctlIdle      []PeerConn            // idle connections to ctlAddr; guarded by cmu
	ctlBusy      map[PeerConn]struct{} // connections with a forward in flight (Close closes them); guarded by cmu
	ctlAddr      string                // the leader's broker ctlIdle connect to; guarded by cmu
	ctlClosed    bool                  // Close ran: no more connections; guarded by cmu

	registeredEpoch atomic.Int64 // the session epoch seen after our registration; 0: none yet
	// registeredNow wakes the metadata loop when registeredEpoch changes: its reconcile
	// waits for a registration, and a broker the controller already counts as live (it may
	// be given leaderships and ISR places at once) must open its partitions and start its
	// fetchers then, not at the loop's next reconcileEvery (a restarted broker idled up to
	// 2 s, acks=all waiting on it). Buffered 1.
	registeredNow chan struct{}
	// refusedVersion holds the controller's refusal of our registration for our protocol
	// versions (an error), nil otherwise; Ready reports it.
	refusedVersion atomic.Pointer[error]

	refusedMu sync.Mutex
	refused   map[int32]string // broker -> last refusal logged (logRefusedRegistration); guarded by refusedMu
	// deleting counts local topic deletions in progress (deleteDropped): a topic leaves the
	// broker's metadata before its directories are removed, and DeleteTopic answers only
	// once they are.
	deleting atomic.Int32

	// creatingOffsets: an auto-creation of __consumer_offsets is under way (groups.go).
	creatingOffsets atomic.Bool

	// ISR changes of partitions this broker leads, committed by the controller (metrics).
	isrShrinks, isrExpands atomic.Uint64
	// Follower fetch rounds answered by a leader, and the partitions' appends they carried
	// (ReplicaFetches).
	fetchRounds, replicatedAppends atomic.Uint64
	// failedRounds counts the rounds whose every partition the leader refused (the lane
	// then waits failedRoundWait).
	failedRounds atomic.Uint64
	// slowRounds counts the in-sync lane's rounds whose fetch took slowRound or longer;
	// laneKicks the lanes kicked because a replica entered the in-sync lane (fetcher.kick).
	slowRounds, laneKicks atomic.Uint64
	// laneWakes the kicks that asked the leader to answer the parked round (FetchWaker)
	// instead of dropping the lane's connection; laneDials the lanes' connections opened.
	laneWakes, laneDials atomic.Uint64

	stop chan struct{}
	wg   sync.WaitGroup
	once sync.Once
}

// New starts this broker's controller voter. The Manager serves as the broker core's
// Replicator from here on; Attach starts the rest once the core is open.
func New(cfg Config) (*Manager, error) {
	voters, err := controller.ParseVoters(cfg.Voters)
	if err != nil {
		return nil, err
	}
	voter := slices.ContainsFunc(voters, func(v controller.Voter) bool { return v.ID == cfg.NodeID })
	if !voter && len(cfg.Seeds) == 0 {
		return nil, fmt.Errorf("%w: node id %d is not among the controller voters %s, so it needs the client addresses of brokers of the cluster to follow the metadata from (--cluster-seeds)",
			ErrConfig, cfg.NodeID, cfg.Voters)
	}
	if cfg.NodeID <= 0 {
		return nil, fmt.Errorf("%w: node id %d, want a positive id", ErrConfig, cfg.NodeID)
	}
	if cfg.Dial == nil {
		return nil, fmt.Errorf("%w: no dialer", ErrConfig)
	}
	if cfg.SessionTimeout <= 0 {
		cfg.SessionTimeout = sessionTimeoutDefault
	}
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = cfg.SessionTimeout / 6
	}
	if cfg.ReplicaLagMax <= 0 {
		cfg.ReplicaLagMax = replicaLagMaxDefault
	}
	if cfg.FetchWait <= 0 {
		cfg.FetchWait = fetchWaitDefault
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.ProtocolMin == 0 && cfg.ProtocolMax == 0 {
		cfg.ProtocolMin, cfg.ProtocolMax = controller.ProtocolVersionMin, controller.ProtocolVersionMax
	}
	if cfg.ProtocolMin < controller.ProtocolVersionMin || cfg.ProtocolMin > cfg.ProtocolMax || cfg.ProtocolMax > controller.ProtocolVersionMax {
		return nil, fmt.Errorf("%w: protocol versions %d-%d, this build speaks %d-%d", ErrConfig, cfg.ProtocolMin, cfg.ProtocolMax, controller.ProtocolVersionMin, controller.ProtocolVersionMax)
	}
	if cfg.OffsetsPartitions <= 0 {
		cfg.OffsetsPartitions = shard.OffsetsPartitionsDefault
	}
	if cfg.OffsetsReplicationFactor <= 0 {
		cfg.OffsetsReplicationFactor = offsetsReplicationFactorDefault
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.RaftLog == nil {
		cfg.RaftLog = io.Discard
	}
	m := &Manager{cfg: cfg, log: cfg.Logger, fetchers: map[fetcherKey]*fetcher{}, stop: make(chan struct{}),
		started: cfg.Now(), voterCount: int32(len(voters)), registeredNow: make(chan struct{}, 1),
		sessionSlot: make(chan struct{}, 1), forwardSlots: make(chan struct{}, forwardsMax), ctlBusy: map[PeerConn]struct{}{}}
	if cfg.ThrottledBytesPerSecond > 0 {
		m.throttle = newThrottle(cfg.ThrottledBytesPerSecond, cfg.Now)
	}
	if cfg.LeaderThrottledBytesPerSecond > 0 {
		m.leaderThrottle = newThrottle(cfg.LeaderThrottledBytesPerSecond, cfg.Now)
	}
	if !voter {
		m.ctl = startRemoteQuorum(cfg.NodeID, cfg.Seeds, cfg.Dial, cfg.Logger, m.wireProtocol)
		return m, nil
	}
	ctl, err := controller.Start(controller.Config{
		NodeID: cfg.NodeID, Voters: cfg.Voters, Dir: filepath.Join(cfg.DataDir, "controller"),
		SessionTimeout:   cfg.SessionTimeout,
		HeartbeatTimeout: cfg.RaftHeartbeatTimeout, ElectionTimeout: cfg.RaftElectionTimeout, LeaderLeaseTimeout: cfg.RaftLeaderLease,
		Now: cfg.Now, LogOutput: cfg.RaftLog, TLS: cfg.RaftTLS,
	})
	if err != nil {
		return nil, fmt.Errorf("start controller voter: %w", err)
	}
	m.ctl = ctl
	return m, nil
}

// NodeID is this broker's id.
func (m *Manager) NodeID() int32 { return m.cfg.NodeID }

// SetKafkaAddress sets the Kafka listener's advertised address (host:port) this broker
// registers with, so that every broker's Kafka Metadata can list it. Call it before Attach.
func (m *Manager) SetKafkaAddress(addr string) { m.kafkaSelf = addr }

// Attach starts registration, heartbeats, metadata reconciliation and leader ticks for
// broker b, whose clients connect to address.
func (m *Manager) Attach(b *shard.Broker, address string) {
	m.b, m.self = b, address
	m.wg.Add(3)
	go m.heartbeatLoop()
	go m.metadataLoop()
	go m.tickLoop()
}

// Close stops the fetchers and loops, resigns every leadership and stops the voter.
func (m *Manager) Close() error {
	var err error
	m.once.Do(func() {
		close(m.stop)
		m.wg.Wait()
		m.fmu.Lock()
		for id, f := range m.fetchers {
			f.close()
			delete(m.fetchers, id)
		}
		m.fmu.Unlock()
		m.reps.Range(func(_, v any) bool {
			v.(*replica).resign(m)
			return true
		})
		m.closeForwardConns()
		err = m.ctl.Shutdown()
	})
	return err
}

func (m *Manager) stopped() bool {
	select {
	case <-m.stop:
		return true
	default:
		return false
	}
}

// sleep waits d or until Close; false when closing.
func (m *Manager) sleep(d time.Duration) bool { return m.sleepOr(d, nil) }

// sleepOr is sleep that also ends early when wake is closed (nil: never).
func (m *Manager) sleepOr(d time.Duration, wake <-chan struct{}) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-m.stop:
		return false
	case <-t.C:
		return true
	case <-wake:
		return true
	}
}

// Metadata is this broker's view of the controller metadata (its own voter's state, or
// the newest a broker outside the quorum was answered): shared and read-only, never copied
// (a request reads it at no cost whatever the partition count). Callers must not write
// anything they reach from it; it never changes under them.
func (m *Manager) Metadata() *controller.Metadata { return m.ctl.Metadata() }

// ControllerLeader is the controller leader's node id (0 while unknown).
func (m *Manager) ControllerLeader() int32 {
	id, _ := m.ctl.Leader()
	return id
}

// ---- controller commands ----

// Submit replicates cmd through the controller: here when this voter leads, else
// forwarded to the leader's broker. The result value comes back as JSON.
func (m *Manager) Submit(ctx context.Context, cmd *controller.Command) ([]byte, error) {
	return m.submit(ctx, cmd, m.forwardSlots)
}

// submitSession is Submit for heartbeatLoop's registration and heartbeats, whose forwards
// take sessionSlot: forwards stuck in every other slot never delay them.
func (m *Manager) submitSession(ctx context.Context, cmd *controller.Command) ([]byte, error) {
	return m.submit(ctx, cmd, m.sessionSlot)
}

// submit is Submit with the slots a forward takes.
func (m *Manager) submit(ctx context.Context, cmd *controller.Command, slots chan struct{}) ([]byte, error) {
	if m.ctl.IsLeader() {
		return m.SubmitLocal(cmd)
	}
	id, _ := m.ctl.Leader()
	if id == 0 {
		return nil, ErrNoController
	}
	md := m.ctl.Metadata()
	b := md.Brokers[id]
	if b == nil || b.Address == "" {
		return nil, fmt.Errorf("%w: controller leader %d has not registered its address", ErrNoController, id)
	}
	fwd := *cmd
	fwd.Forwarded = true
	body, err := json.Marshal(&fwd)
	if err != nil {
		return nil, err
	}
	release, err := m.forwardSlot(ctx, slots)
	if err != nil {
		return nil, fmt.Errorf("%w: forward to controller leader %d: %w", ErrNoController, id, err)
	}
	defer release()
	conn, err := m.forwardConn(ctx, b.Address)
	if err != nil {
		return nil, fmt.Errorf("%w: dial controller leader %d at %s: %w", ErrNoController, id, b.Address, err)
	}
	out, err := conn.Controller(ctx, OpSubmit, m.wireProtocol(md), body)
	failed := err != nil && !isRemote(err)
	m.putForwardConn(conn, b.Address, failed)
	if failed {
		err = fmt.Errorf("%w: controller leader %d at %s: %w", ErrNoController, id, b.Address, err)
	}
	return out, err
}

// errClosing: the Manager is closing; no command is forwarded.
var errClosing = errors.New("broker closing")

// forwardSlot takes one of slots (sessionSlot or forwardSlots) for a forward, waiting
// until ctx ends or the Manager closes; release gives it back.
func (m *Manager) forwardSlot(ctx context.Context, slots chan struct{}) (release func(), err error) {
	select {
	case slots <- struct{}{}:
		return func() { <-slots }, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("%d forwards in flight: %w", cap(slots), ctx.Err())
	case <-m.stop:
		return nil, errClosing
	}
}

// forwardConn returns a connection to the controller leader's broker at addr for one
// forward: an idle one, or a new one dialled without holding cmu (a dial or login to a
// frozen broker waits for ctx). Idle connections to a previous leader are closed. The
// caller holds a slot and gives the connection back with putForwardConn.
func (m *Manager) forwardConn(ctx context.Context, addr string) (PeerConn, error) {
	m.cmu.Lock()
	if m.ctlClosed {
		m.cmu.Unlock()
		return nil, errClosing
	}
	var stale []PeerConn
	if m.ctlAddr != addr {
		stale, m.ctlIdle, m.ctlAddr = m.ctlIdle, nil, addr
	}
	var conn PeerConn
	if n := len(m.ctlIdle); n > 0 {
		conn, m.ctlIdle = m.ctlIdle[n-1], m.ctlIdle[:n-1]
		m.ctlBusy[conn] = struct{}{}
	}
	m.cmu.Unlock()
	for _, c := range stale {
		c.Close()
	}
	if conn != nil {
		return conn, nil
	}
	conn, err := m.cfg.Dial(ctx, addr)
	if err != nil {
		return nil, err
	}
	m.cmu.Lock()
	closed := m.ctlClosed
	if !closed {
		m.ctlBusy[conn] = struct{}{}
	}
	m.cmu.Unlock()
	if closed {
		conn.Close()
		return nil, errClosing
	}
	return conn, nil
}

// putForwardConn gives back conn, which forwarded to addr: kept idle for the next forward
// unless its round trip failed (its state is unknown; only this caller's connection is
// closed, never another forward's), the leader moved to another address, or the Manager
// closed.
func (m *Manager) putForwardConn(conn PeerConn, addr string, failed bool) {
	m.cmu.Lock()
	delete(m.ctlBusy, conn)
	keep := !failed && !m.ctlClosed && m.ctlAddr == addr && len(m.ctlIdle) < forwardsMax+1
	if keep {
		m.ctlIdle = append(m.ctlIdle, conn)
	}
	m.cmu.Unlock()
	if !keep {
		conn.Close()
	}
}

// closeForwardConns closes every connection to the controller leader's broker, idle or in
// flight (their forwards fail at once), and refuses new ones (Close).
func (m *Manager) closeForwardConns() {
	m.cmu.Lock()
	m.ctlClosed = true
	conns := m.ctlIdle
	m.ctlIdle = nil
	for c := range m.ctlBusy {
		conns = append(conns, c)
	}
	m.cmu.Unlock()
	for _, c := range conns {
		c.Close()
	}
}

// submitRetrying is Submit, retried every retryBackoff until ctx ends while no controller
// leader is reachable, the one asked no longer leads, or the connection to it failed (a
// killed controller leader: the next one takes a raft election), all ErrNoController or
// controller.ErrNotController. Only for commands that may be applied twice: a connection
// that failed after sending may have delivered it.
func (m *Manager) submitRetrying(ctx context.Context, cmd *controller.Command) ([]byte, error) {
	for {
		out, err := m.Submit(ctx, cmd)
		retriable := errors.Is(err, ErrNoController) || errors.Is(err, controller.ErrNotController)
		if !retriable {
			return out, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w (gave up: %w)", err, ctx.Err())
		case <-m.stop:
			return nil, err
		case <-time.After(retryBackoff):
		}
	}
}

// AllocateProducerIDs reserves the next block of producer ids through the controller
// (engine.ProducerIDBlockSource): ids no other broker ever hands out, at or above minID.
// Retried while the controller elects a leader; a block lost to a failed connection is
// only a gap in the ids.
func (m *Manager) AllocateProducerIDs(ctx context.Context, minID int64) (first, count int64, err error) {
	out, err := m.submitRetrying(ctx, &controller.Command{Type: controller.CmdAllocateProducerIDs,
		ProducerIDs: &controller.ProducerIDsRequest{BrokerID: m.cfg.NodeID, MinID: minID}})
	if err != nil {
		return 0, 0, fmt.Errorf("allocate producer ids: %w", err)
	}
	var b controller.ProducerIDBlock
	if err := json.Unmarshal(out, &b); err != nil {
		return 0, 0, fmt.Errorf("decode producer id block: %w", err)
	}
	return b.First, b.Count, nil
}

// InitProducerName gives a producer name its next identity through the controller
// (engine.ProducerNameSource): kept cluster-wide, so that the name initialised at any broker
// bumps one epoch and every partition leader fences the older one. A producer starting up
// (current engine.NoProducer) is retried while the controller elects a leader (an attempt
// applied twice only bumps the epoch twice); a running producer's own bump is not (a
// second application would find its identity outdated and fence it).
func (m *Manager) InitProducerName(ctx context.Context, name string, current engine.ProducerIdentity, keepEpoch bool) (engine.ProducerIdentity, bool, error) {
	if m.ctl.Finalized() < controller.ProtocolVersionNamedProducers {
		return engine.ProducerIdentity{}, false, nil // brokers of the previous release keep names in their files
	}
	cmd := &controller.Command{Type: controller.CmdInitProducerName, ProducerName: &controller.ProducerNameRequest{
		Name: name, Current: controller.ProducerIdentity{ID: current.ID, Epoch: current.Epoch}, KeepEpoch: keepEpoch}}
	submit := m.submitRetrying
	if current.ID >= 0 {
		submit = m.Submit
	}
	out, err := submit(ctx, cmd)
	if err != nil {
		return engine.ProducerIdentity{}, false, producerNameError(name, err)
	}
	var id controller.ProducerIdentity
	if err := json.Unmarshal(out, &id); err != nil {
		return engine.ProducerIdentity{}, false, fmt.Errorf("%w: decode the controller's answer for %q: %w", engine.ErrProducerIDsUnavailable, name, err)
	}
	return engine.ProducerIdentity{ID: id.ID, Epoch: id.Epoch}, true, nil
}

// producerNameError maps the controller's refusals of InitProducerName to the engine's
// errors (which the listeners answer with their codes); anything else leaves the ids
// unavailable for now (retriable).
func producerNameError(name string, err error) error {
	for _, pair := range [][2]error{
		{controller.ErrProducerFenced, engine.ErrProducerFenced},
		{controller.ErrInvalidProducerName, engine.ErrInvalidProducerName},
		{controller.ErrTooManyProducers, engine.ErrTooManyProducers},
	} {
		if errors.Is(err, pair[0]) {
			return fmt.Errorf("%w: init producer %q: %w", pair[1], name, err)
		}
	}
	return fmt.Errorf("%w: init producer %q: %w", engine.ErrProducerIDsUnavailable, name, err)
}

// publishProducerNames hands md's producer names to the broker core, whose produce path
// fences older epochs with them; skipped while they have not changed since the last call
// (every heartbeat moves the metadata version).
func (m *Manager) publishProducerNames(md *controller.Metadata, last *map[string]controller.ProducerIdentity) {
	if m.b == nil || maps.Equal(*last, md.ProducerNames) {
		return
	}
	names := make(map[string]engine.ProducerIdentity, len(md.ProducerNames))
	for name, id := range md.ProducerNames {
		names[name] = engine.ProducerIdentity{ID: id.ID, Epoch: id.Epoch}
	}
	m.b.SetClusterProducerNames(names)
	*last = md.ProducerNames
}

// RemoteError is a refusal that came back from a peer over the wire; the transport wraps
// the peer's error code in it.
type RemoteError interface{ Remote() bool }

func isRemote(err error) bool {
	var r RemoteError
	return errors.As(err, &r)
}

// SubmitLocal replicates cmd through this voter, which must lead (else
// controller.ErrNotController). A peer's forwarded command lands here.
func (m *Manager) SubmitLocal(cmd *controller.Command) ([]byte, error) {
	if cmd.Type == controller.CmdRegisterBroker && cmd.Broker != nil && m.ctl.IsLeader() {
		// A registration the state machine would refuse is refused here, out of the raft
		// log: a refused broker asks again every heartbeat.
		if err := m.ctl.Metadata().CheckRegistration(cmd.Broker); err != nil {
			m.logRefusedRegistration(cmd.Broker, err)
			return nil, err
		}
	}
	res, err := m.ctl.Submit(cmd, submitTimeout)
	if err != nil {
		return nil, err
	}
	if res.Err != nil {
		if cmd.Type == controller.CmdRegisterBroker && cmd.Broker != nil {
			m.logRefusedRegistration(cmd.Broker, res.Err)
		}
		return nil, res.Err
	}
	return json.Marshal(res.Value)
}

// logRefusedRegistration logs, on the controller leader's broker, a registration refused
// for its protocol versions (once per broker, range and reason in a row).
func (m *Manager) logRefusedRegistration(r *controller.BrokerRegistration, err error) {
	if !errors.Is(err, controller.ErrUnsupportedProtocolVersion) {
		return
	}
	m.refusedMu.Lock()
	defer m.refusedMu.Unlock()
	if m.refused == nil {
		m.refused = map[int32]string{}
	}
	if m.refused[r.ID] == err.Error() {
		return
	}
	if len(m.refused) >= refusedLoggedMax {
		clear(m.refused)
	}
	m.refused[r.ID] = err.Error()
	lo, hi := r.ProtocolRange()
	m.log.Error("refused a broker's registration: its protocol versions exclude the cluster's finalized version; it leads nothing and joins no ISR until it runs a build that speaks it",
		"broker", r.ID, "address", r.Address, "protocol_min", lo, "protocol_max", hi, "finalized", m.ctl.Metadata().Finalized(), "err", err)
}

// refusedLoggedMax bounds the refused registrations remembered for logging.
const refusedLoggedMax = 1024

// wireProtocol is the inter-broker protocol version requests to other brokers carry: the
// finalized version (never above this broker's own newest) once it is 2 or more (frame
// version 1), 0 before (version 0 frames, which a broker of the previous release reads).
func (m *Manager) wireProtocol(md *controller.Metadata) uint16 {
	if v := min(md.Finalized(), m.cfg.ProtocolMax); v >= controller.ProtocolVersionNamedProducers {
		return v
	}
	return 0
}

// CheckPeerProtocol refuses a peer's request carrying an inter-broker protocol version
// this broker does not speak (0: a request without one, from the CLI or a broker of the
// previous release, is always served).
func (m *Manager) CheckPeerProtocol(v uint16) error {
	if v == 0 || v >= m.cfg.ProtocolMin && v <= m.cfg.ProtocolMax {
		return nil
	}
	return fmt.Errorf("the request carries inter-broker protocol version %d, node %d speaks %d-%d: %w", v, m.cfg.NodeID, m.cfg.ProtocolMin, m.cfg.ProtocolMax, controller.ErrUnsupportedProtocolVersion)
}

// ProtocolRange is the inter-broker protocol versions this broker speaks.
func (m *Manager) ProtocolRange() (lo, hi uint16) { return m.cfg.ProtocolMin, m.cfg.ProtocolMax }

// HandleController answers a peer's or the CLI's Controller request. A client's command
// (not marked Forwarded) is forwarded to the controller leader's broker when this broker's
// voter does not lead; a command another broker forwarded is applied here or refused.
func (m *Manager) HandleController(op int8, body []byte) ([]byte, error) {
	switch op {
	case OpSubmit:
		var cmd controller.Command
		if err := json.Unmarshal(body, &cmd); err != nil {
			return nil, fmt.Errorf("decode controller command: %w", err)
		}
		if cmd.Forwarded {
			return m.SubmitLocal(&cmd)
		}
		ctx, cancel := context.WithTimeout(context.Background(), submitTimeout)
		defer cancel()
		return m.Submit(ctx, &cmd)
	case OpMetadata:
		return json.Marshal(m.View())
	case OpWatch:
		var w WatchRequest
		if err := json.Unmarshal(body, &w); err != nil {
			return nil, fmt.Errorf("decode metadata watch: %w", err)
		}
		wait := time.NewTimer(min(max(time.Duration(w.WaitMs)*time.Millisecond, 0), watchWaitMax))
		defer wait.Stop()
		select {
		case <-m.ctl.Changed(w.Since):
		case <-wait.C:
		case <-m.stop:
		}
		return json.Marshal(m.View())
	}
	return nil, fmt.Errorf("unknown controller operation %d", op)
}

// View is what `ringlog cluster describe` shows: the metadata and who leads the quorum.
type View struct {
	NodeID           int32
	ControllerLeader int32
	Metadata         *controller.Metadata
	// HighWatermarks holds this broker's high watermark of every partition it leads,
	// keyed "topic/partition".
	HighWatermarks map[string]int64
}

// View returns this broker's view of the cluster.
func (m *Manager) View() *View {
	v := &View{NodeID: m.cfg.NodeID, ControllerLeader: m.ControllerLeader(), Metadata: m.ctl.Metadata(), HighWatermarks: map[string]int64{}}
	m.reps.Range(func(k, val any) bool {
		r := val.(*replica)
		if r.leading.Load() {
			tp := k.(shard.TopicPartition)
			v.HighWatermarks[tp.Topic+"/"+strconv.Itoa(int(tp.Partition))] = r.hwm.Load()
		}
		return true
	})
	return v
}

// CreateTopic creates a replicated topic through the controller and waits until this
// broker has opened its replicas of it.
//
// A create whose outcome is unknown — the voter that appended it lost the leadership
// before it committed (controller.ErrNotController), the connection to the leader's broker
// failed after sending it (ErrNoController), or ctx ended first (ErrTimedOut) — may still
// be applied later, by the next controller leader. As Kafka's controller does, the caller
// is told so (NOT_CONTROLLER or REQUEST_TIMED_OUT, both retriable), and a retry is then
// answered TOPIC_ALREADY_EXISTS if that attempt was applied (e2e
// TestCreateTopicControllerLost).
func (m *Manager) CreateTopic(ctx context.Context, name string, partitions, replicationFactor int32, config map[string]string) error {
	if name == group.OffsetsTopic {
		return fmt.Errorf("%w: %s is created by the brokers at the first group coordinator lookup", ErrInternalTopic, name)
	}
	if err := m.b.ValidateTopic(name, int(partitions), config); err != nil {
		return err
	}
	unclean, _ := strconv.ParseBool(config[configUnclean])
	_, err := m.Submit(ctx, &controller.Command{Type: controller.CmdCreateTopic, Topic: &controller.TopicRequest{
		Name: name, Partitions: partitions, ReplicationFactor: replicationFactor, UncleanLeaderElection: unclean, Config: config,
	}})
	if err != nil {
		return outcomeUnknown(ctx, "create", name, "a retry answers TOPIC_ALREADY_EXISTS if it was", err)
	}
	// Wait until this broker's voter has applied the create and, when this broker holds a
	// replica, until the metadata loop has opened it: a produce right after the answer
	// then finds it.
	err = m.waitLocal(ctx, fmt.Sprintf("topic %q created; not open here yet", name), func() bool { return m.topicReady(name) })
	return appliedNotLocal(ctx, err)
}

// outcomeUnknown says so when the failure of a controller command (op of topic name)
// leaves its outcome unknown (see CreateTopic): ctx ended (ErrTimedOut, the cause kept as
// text only, so that it maps to REQUEST_TIMED_OUT rather than to the cause's code), or the
// controller leadership or the connection to it was lost; retry says what a retry answers
// if it was applied. Any other error is returned as it is.
func outcomeUnknown(ctx context.Context, op, name, retry string, err error) error {
	maybe := fmt.Sprintf("the %s may still be applied: %s", op, retry)
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("%w: %s %s: %v (%s)", ErrTimedOut, op, name, err, maybe)
	case errors.Is(err, ErrNoController), errors.Is(err, controller.ErrNotController):
		return fmt.Errorf("%s %s: %w (%s)", op, name, err, maybe)
	}
	return err
}

// appliedNotLocal is waitLocal's error once the controller applied a command: past ctx's
// end it is ErrTimedOut (Kafka answers REQUEST_TIMED_OUT too), else err as it is.
func appliedNotLocal(ctx context.Context, err error) error {
	if err != nil && ctx.Err() != nil {
		return fmt.Errorf("%w: %v", ErrTimedOut, err)
	}
	return err
}

// topicReady: this broker's voter knows the topic, the metadata loop has opened it and
// has made this broker leader of the partitions the metadata says it leads (the topic is
// opened before its replicas take their roles: a produce in between was answered
// NOT_LEADER).
func (m *Manager) topicReady(name string) bool {
	t := m.ctl.Metadata().Topics[name]
	local := m.b.Topic(name)
	if t == nil || local == nil || localTopicID(local) != t.ID {
		return false
	}
	for _, p := range t.Partitions {
		if p.Leader != m.cfg.NodeID {
			continue
		}
		v, ok := m.reps.Load(shard.TopicPartition{Topic: name, Partition: p.Index})
		if !ok || !v.(*replica).leading.Load() {
			return false
		}
	}
	return true
}

// configUnclean is the topic config the controller reads at create.
const configUnclean = controller.ConfigUnclean

// Replicated reports whether this broker's view of the controller metadata holds topic
// name (a replicated topic: deletes and config changes go through the controller).
func (m *Manager) Replicated(name string) bool { return m.ctl.Metadata().Topics[name] != nil }

// DeleteTopic deletes a replicated topic through the controller and waits until this
// broker has deleted its copy; every other broker deletes its own when its view of the
// metadata shows the deletion (reconcile), including a broker that was down meanwhile.
func (m *Manager) DeleteTopic(ctx context.Context, name string) error {
	if name == group.OffsetsTopic {
		return fmt.Errorf("%w: %q holds committed offsets and group metadata; it cannot be deleted", ErrInternalTopic, name)
	}
	t := m.ctl.Metadata().Topics[name]
	if t == nil {
		return fmt.Errorf("delete %s: %w", name, controller.ErrUnknownTopic)
	}
	_, err := m.submitRetrying(ctx, &controller.Command{Type: controller.CmdDeleteTopic, Topic: &controller.TopicRequest{Name: name, ID: t.ID}})
	if err != nil && !m.ctl.Metadata().TopicDeleted(name, t.ID, t.CreatedVersion) {
		// (A retried delete whose first attempt was applied is refused as unknown; the
		// metadata then shows the deletion.)
		return outcomeUnknown(ctx, "delete", name, "a retry answers UNKNOWN_TOPIC_OR_PARTITION if it was", err)
	}
	return appliedNotLocal(ctx, m.waitLocal(ctx, "deleted; its local copy is not removed yet", func() bool {
		local := m.b.Topic(name)
		return (local == nil || localTopicID(local) != t.ID) && m.deleting.Load() == 0
	}))
}

// AlterTopicConfig changes a replicated topic's config through the controller (set the
// keys of set, remove those of deletes) and waits until this broker applied it; every
// replica's broker applies it when its view of the metadata shows it.
func (m *Manager) AlterTopicConfig(ctx context.Context, name string, set map[string]string, deletes []string) error {
	t := m.ctl.Metadata().Topics[name]
	if t == nil {
		return fmt.Errorf("alter config of %s: %w", name, controller.ErrUnknownTopic)
	}
	if err := m.b.ValidateAlter(name, set, deletes); err != nil {
		return err
	}
	out, err := m.submitRetrying(ctx, &controller.Command{Type: controller.CmdAlterConfig, Topic: &controller.TopicRequest{
		Name: name, ID: t.ID, Config: set, ConfigDeletes: deletes}})
	if err != nil {
		return outcomeUnknown(ctx, "config change", name, "a retry changes nothing more if it was", err)
	}
	var after controller.Topic
	if err := json.Unmarshal(out, &after); err != nil {
		return fmt.Errorf("alter config of %s: controller answer: %w", name, err)
	}
	return appliedNotLocal(ctx, m.waitLocal(ctx, "config changed; not applied here yet", func() bool {
		local := m.b.Topic(name)
		return local == nil || localTopicID(local) != t.ID || maps.Equal(local.Config, after.Config)
	}))
}

// waitLocal polls done until it holds (the metadata loop has applied a committed change
// here), ctx ends or the Manager closes.
func (m *Manager) waitLocal(ctx context.Context, what string, done func() bool) error {
	for !done() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w", what, ctx.Err())
		case <-m.stop:
			return shard.ErrShuttingDown
		case <-time.After(10 * time.Millisecond):
		}
	}
	return nil
}

// localTopicID is the controller topic ID of a local topic: the one stored in its catalog
// entry, or the legacy ID of its name for a topic created before topic IDs.
func localTopicID(t *shard.Topic) string {
	if t.ID != "" {
		return t.ID
	}
	return controller.LegacyTopicID(t.Name)
}

// ---- registration and heartbeats ----

func (m *Manager) heartbeatLoop() {
	defer m.wg.Done()
	var registered bool
	var before int64 // our session epoch before registering
	// A refusal from the controller leader's broker (a login or an ACL) is a configuration
	// to fix: warned about; no controller leader yet (an election) stays at debug level.
	var failures repeatedError
	for {
		ctx, cancel := context.WithTimeout(context.Background(), submitTimeout)
		md := m.ctl.Metadata()
		me := md.Brokers[m.cfg.NodeID]
		var applied <-chan struct{} // set after a registration: wake when it may be applied
		switch {
		case !m.quorumSynced():
			// a broker outside the quorum has not heard the metadata yet: registering now
			// could not tell our previous session from the new one
		case !registered:
			if me != nil {
				before = me.SessionEpoch
			}
			_, err := m.submitSession(ctx, &controller.Command{Type: controller.CmdRegisterBroker,
				Broker: &controller.BrokerRegistration{ID: m.cfg.NodeID, Address: m.self, KafkaAddress: m.kafkaSelf, Rack: m.cfg.Rack,
					ProtocolMin: m.cfg.ProtocolMin, ProtocolMax: m.cfg.ProtocolMax}})
			switch {
			case err == nil:
				registered = true
				applied = m.ctl.Changed(md.Version)
				m.refusedVersion.Store(nil)
				failures.reset()
			case errors.Is(err, controller.ErrUnsupportedProtocolVersion):
				if prev := m.refusedVersion.Swap(&err); prev == nil || (*prev).Error() != err.Error() {
					m.log.Error("the controller refused this broker's registration: its protocol versions exclude the cluster's finalized version; it leads nothing and joins no ISR (run a build that speaks the finalized version)",
						"protocol_min", m.cfg.ProtocolMin, "protocol_max", m.cfg.ProtocolMax, "err", err)
				}
			default:
				failures.log(ctx, m.log, isRemote(err), "register with the controller", err)
			}
		case me == nil || me.SessionEpoch <= before:
			// our voter has not applied the registration yet: look again when it changes
			applied = m.ctl.Changed(md.Version)
		case me.Fenced && m.registeredEpoch.Load() == me.SessionEpoch:
			registered = false // the session expired (a stall longer than the timeout): start a new one
		default:
			if m.registeredEpoch.Swap(me.SessionEpoch) != me.SessionEpoch {
				select {
				case m.registeredNow <- struct{}{}:
				default:
				}
			}
			_, err := m.submitSession(ctx, &controller.Command{Type: controller.CmdHeartbeat,
				Broker: &controller.BrokerRegistration{ID: m.cfg.NodeID, SessionEpoch: me.SessionEpoch}})
			if err != nil && errors.Is(err, controller.ErrStaleSession) {
				registered = false
			}
		}
		cancel()
		if !m.sleepOr(m.cfg.Heartbeat, applied) {
			return
		}
	}
}

// quorumSynced: this broker's view of the metadata has been filled once (always for a
// voter, whose view is its own state machine).
func (m *Manager) quorumSynced() bool {
	r, ok := m.ctl.(*remoteQuorum)
	return !ok || r.isSynced()
}

// ---- metadata reconciliation ----

func (m *Manager) metadataLoop() {
	defer m.wg.Done()
	var names map[string]controller.ProducerIdentity // as last published
	for {
		md := m.ctl.Metadata()
		changed := m.ctl.Changed(md.Version)
		m.publishProducerNames(md, &names)
		if m.registeredEpoch.Load() != 0 {
			m.reconcile(md)
		}
		select {
		case <-m.stop:
			return
		case <-changed:
		case <-m.registeredNow:
		case <-time.After(reconcileEvery):
		}
	}
}

// reconcile brings local partitions in line with md: topics this broker replicates are
// opened, and each replica leads, follows or idles as md says.
func (m *Manager) reconcile(md *controller.Metadata) {
	if l := m.lists.Load(); l == nil || l.version != md.Version {
		m.lists.Store(newThrottleLists(md))
	}
	m.deleteDropped(md)
	me := md.Brokers[m.cfg.NodeID]
	if me == nil || me.Fenced {
		// Fenced: the controller has moved our leaderships elsewhere; stop serving them.
		m.reps.Range(func(_, v any) bool {
			v.(*replica).resign(m)
			return true
		})
		return
	}
	for name, t := range md.Topics {
		// Every broker opens every topic, replica or not, so that its metadata answers
		// for it (partition count) and clients seeded with it route to the leaders; a
		// partition it holds no replica of stays empty and refuses clients.
		if !m.openTopic(t) {
			continue
		}
		if name == group.OffsetsTopic && !m.adoptOffsetsTopic(t) {
			continue
		}
		minInsync, _ := engine.MinInsyncReplicas(t.Config)
		for _, p := range t.Partitions {
			tp := shard.TopicPartition{Topic: name, Partition: p.Index}
			if !slices.Contains(p.Replicas, m.cfg.NodeID) {
				if v, ok := m.reps.Load(tp); ok {
					v.(*replica).resign(m)
				}
				continue
			}
			r := m.replicaFor(tp)
			if err := r.apply(m, p, minInsync); err != nil {
				m.log.Warn("apply partition metadata", "topic", name, "partition", p.Index, "err", err)
			}
		}
	}
	m.reconciled.Store(md)
	m.syncFetchers(md)
}

// reconciledMetadata is the metadata the last reconcile applied, or the controller's
// before the first one. Read-only, as Metadata.
func (m *Manager) reconciledMetadata() *controller.Metadata {
	if md := m.reconciled.Load(); md != nil {
		return md
	}
	return m.ctl.Metadata()
}

// openTopic makes the local topic match md's topic t: created under t's ID and creation
// version when missing, its config changed to t's when it differs. It reports whether the
// local topic is t's incarnation. A local topic of another incarnation that md does not
// prove deleted (deleteDropped) is left alone: md may be the stale one.
func (m *Manager) openTopic(t *controller.Topic) bool {
	local := m.b.Topic(t.Name)
	if local == nil {
		// The engine keeps the config map it is given; the metadata's is read-only.
		err := m.b.CreateTopicIdentified(t.Name, len(t.Partitions), maps.Clone(t.Config), t.ID, t.CreatedVersion)
		if err != nil && !errors.Is(err, shard.ErrTopicExists) {
			m.log.Warn("open replicated topic", "topic", t.Name, "err", err)
		}
		local = m.b.Topic(t.Name)
		return local != nil && localTopicID(local) == t.ID
	}
	if localTopicID(local) != t.ID {
		return false
	}
	if !maps.Equal(local.Config, t.Config) {
		var deletes []string
		for k := range local.Config {
			if _, ok := t.Config[k]; !ok {
				deletes = append(deletes, k)
			}
		}
		if err := m.b.AlterTopicConfig(t.Name, t.Config, deletes); err != nil {
			m.log.Warn("apply replicated topic config", "topic", t.Name, "err", err)
		} else {
			m.log.Info("topic config changed by the controller", "topic", t.Name, "config", t.Config)
		}
	}
	return true
}

// deleteDropped deletes every local topic whose incarnation md proves deleted (a tombstone
// with its ID, the name recreated later, or md past its creation without it:
// controller.Metadata.TopicDeleted), never one md merely lacks. Its replicas stop first, so
// that no in-flight fetch writes into a recreated topic of the same name.
func (m *Manager) deleteDropped(md *controller.Metadata) {
	for _, t := range m.b.Topics() {
		if !md.TopicDeleted(t.Name, localTopicID(t), t.Incarnation) {
			continue
		}
		for p := range t.Partitions {
			if v, ok := m.reps.LoadAndDelete(shard.TopicPartition{Topic: t.Name, Partition: int32(p)}); ok {
				v.(*replica).retire(m)
			}
		}
		m.deleting.Add(1)
		err := m.b.DeleteReplicatedTopic(t.Name)
		m.deleting.Add(-1)
		if err != nil {
			m.log.Warn("delete a topic the controller deleted", "topic", t.Name, "id", localTopicID(t), "err", err)
			continue
		}
		m.log.Info("deleted a topic the controller deleted", "topic", t.Name, "id", localTopicID(t))
	}
}

func (m *Manager) replicaFor(tp shard.TopicPartition) *replica {
	if v, ok := m.reps.Load(tp); ok {
		return v.(*replica)
	}
	r := newReplica(tp, engine.PartitionDir(m.cfg.DataDir, tp.Topic, int(tp.Partition)))
	v, _ := m.reps.LoadOrStore(tp, r)
	return v.(*replica)
}

func (m *Manager) tickLoop() {
	defer m.wg.Done()
	t := time.NewTicker(tickInterval)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
			now := m.cfg.Now()
			m.reps.Range(func(_, v any) bool {
				v.(*replica).tick(m, now)
				return true
			})
		}
	}
}

// alterISR publishes a leader's ISR change through the controller (its own goroutine: a
// controller round trip must not hold the replica). The committed change comes back
// through the metadata; a refusal drops the proposal so that a later tick proposes again.
func (m *Manager) alterISR(r *replica, a isr.AlterISR, before int) {
	ids := make([]int32, len(a.ISR))
	for i, id := range a.ISR {
		ids[i] = int32(id)
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), submitTimeout)
		defer cancel()
		_, err := m.Submit(ctx, &controller.Command{Type: controller.CmdAlterISR, AlterISR: &controller.AlterISRRequest{
			Topic: r.tp.Topic, Partition: r.tp.Partition, Leader: int32(a.Leader),
			LeaderEpoch: a.LeaderEpoch, PartitionEpoch: a.PartitionEpoch, ISR: ids,
		}})
		if err != nil {
			m.log.Debug("ISR change refused or not delivered", "topic", r.tp.Topic, "partition", r.tp.Partition, "isr", ids, "err", err)
			r.isrRejected(a)
			return
		}
		switch {
		case len(ids) < before:
			m.isrShrinks.Add(1)
		case len(ids) > before:
			m.isrExpands.Add(1)
		}
	}()
}

// Operational views for the admin listener (netio/admin.Replication; netio/node wires the
// Manager in as it is).

// ReplicaCounts returns the number of replicas assigned to every partition in the
// controller's metadata.
func (m *Manager) ReplicaCounts() map[shard.TopicPartition]int {
	meta := m.ctl.Metadata()
	out := map[shard.TopicPartition]int{}
	for name, t := range meta.Topics {
		for p, part := range t.Partitions {
			out[shard.TopicPartition{Topic: name, Partition: int32(p)}] = len(part.Replicas)
		}
	}
	return out
}

// Leads reports whether this broker leads tp (true too for a partition the controller has
// not placed here, which behaves as on a single broker).
func (m *Manager) Leads(tp shard.TopicPartition) bool {
	v, ok := m.reps.Load(tp)
	return !ok || v.(*replica).leading.Load()
}

// ISRChanges returns the ISR shrinks and expands of partitions this broker leads that the
// controller committed since the broker started.
func (m *Manager) ISRChanges() (shrinks, expands uint64) {
	return m.isrShrinks.Load(), m.isrExpands.Load()
}

// ReplicaFetches returns, since the broker started, its follower fetch rounds that a
// leader answered, the appends of partitions' batches those answers carried (a partition
// with batches counts once per round), and the rounds whose every partition the leader
// refused (after which the lane waits failedRoundWait).
func (m *Manager) ReplicaFetches() (rounds, appends, refused uint64) {
	return m.fetchRounds.Load(), m.replicatedAppends.Load(), m.failedRounds.Load()
}

// ReplicaLanes returns, since the broker started, its in-sync lanes' fetch rounds that took
// slowRound or longer and the lanes kicked because a replica entered the in-sync lane.
func (m *Manager) ReplicaLanes() (slowRounds, kicks uint64) {
	return m.slowRounds.Load(), m.laneKicks.Load()
}

// ReplicaLaneConns returns, since the broker started, the connections its fetch lanes
// opened to leaders (one per lane, and one more after each failure or cancelled kick)
// and the kicks that asked the leader to answer a parked round on the lane's connection
// (ReplicaFetchWake) instead of dropping it.
func (m *Manager) ReplicaLaneConns() (dials, wakes uint64) {
	return m.laneDials.Load(), m.laneWakes.Load()
}

// Ready is nil while this broker knows a controller leader and is registered with it.
func (m *Manager) Ready() error {
	if m.ControllerLeader() == 0 {
		return errors.New("no controller leader known")
	}
	if p := m.refusedVersion.Load(); p != nil {
		return fmt.Errorf("registration refused: %w", *p)
	}
	if m.registeredEpoch.Load() == 0 {
		return errors.New("not registered with the controller yet")
	}
	return nil
}
