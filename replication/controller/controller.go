package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
)

// Errors of the Controller's API.
var (
	// ErrBadVoters is returned by ParseVoters for a malformed or unsupported voter list.
	ErrBadVoters = errors.New("bad controller voters")
	// ErrNotController is returned by Submit on a voter that is not the raft leader; the
	// error's text names the leader when known (Controller.Leader gives it).
	ErrNotController = errors.New("not the controller leader")
	// ErrClosed is returned after Shutdown.
	ErrClosed = errors.New("controller shut down")
)

// Voter is one controller voter: its node id and raft address.
type Voter struct {
	ID   int32
	Addr string
}

// votersAllowed are the supported quorum sizes: an even count tolerates no more failures
// than the odd count below it.
var votersAllowed = map[int]bool{1: true, 3: true, 5: true}

// ParseVoters parses "1@host:port,2@host:port,3@host:port": 1, 3 or 5 voters with
// distinct positive ids and distinct addresses.
func ParseVoters(s string) ([]Voter, error) {
	if strings.TrimSpace(s) == "" {
		return nil, fmt.Errorf("empty list: %w", ErrBadVoters)
	}
	var voters []Voter
	ids := map[int32]bool{}
	addrs := map[string]bool{}
	for _, part := range strings.Split(s, ",") {
		idText, addr, ok := strings.Cut(strings.TrimSpace(part), "@")
		if !ok {
			return nil, fmt.Errorf("%q: want ID@HOST:PORT: %w", part, ErrBadVoters)
		}
		id, err := strconv.ParseInt(idText, 10, 32)
		if err != nil || id < 1 {
			return nil, fmt.Errorf("%q: id must be a positive integer: %w", part, ErrBadVoters)
		}
		host, port, err := net.SplitHostPort(addr)
		if err != nil || host == "" {
			return nil, fmt.Errorf("%q: address: %w", part, ErrBadVoters)
		}
		if p, err := strconv.ParseUint(port, 10, 16); err != nil || p == 0 {
			return nil, fmt.Errorf("%q: port must be 1-65535: %w", part, ErrBadVoters)
		}
		if ids[int32(id)] || addrs[addr] {
			return nil, fmt.Errorf("%q: id or address repeated: %w", part, ErrBadVoters)
		}
		ids[int32(id)], addrs[addr] = true, true
		voters = append(voters, Voter{ID: int32(id), Addr: addr})
	}
	if !votersAllowed[len(voters)] {
		return nil, fmt.Errorf("%d voters, want 1, 3 or 5: %w", len(voters), ErrBadVoters)
	}
	return voters, nil
}

// Config configures one controller voter.
type Config struct {
	NodeID int32
	Voters string // ParseVoters' format; NodeID must be one of them
	Dir    string // raft log, stable store and snapshots

	SessionTimeout time.Duration // a broker silent this long is fenced (default 18 s)
	// ExpiryInterval is how often the raft leader proposes ExpireSessions (default a
	// quarter of SessionTimeout).
	ExpiryInterval time.Duration

	// Raft timing; zero takes hashicorp/raft's defaults (1 s heartbeat and election
	// timeouts, 500 ms lease). Tests shorten them.
	HeartbeatTimeout   time.Duration
	ElectionTimeout    time.Duration
	LeaderLeaseTimeout time.Duration
	CommitTimeout      time.Duration
	// SnapshotThreshold is the number of log entries between snapshots (default 8192).
	SnapshotThreshold uint64

	Now       func() time.Time // the clock stamped on commands; default time.Now
	LogOutput io.Writer        // raft's log; default os.Stderr
	// TLS, if set, runs the raft transport over mutual TLS (transport.go); nil: plain TCP.
	TLS *TransportTLS
}

// Named defaults.
const (
	sessionTimeoutDefault    = 18 * time.Second // Kafka's broker.session.timeout.ms default is 9 s; 18 s tolerates a GC stall or two
	snapshotThresholdDefault = 8192
	snapshotsRetained        = 2
	transportPoolConns       = 3
	transportTimeout         = 5 * time.Second
)

// Controller is one running controller voter.
type Controller struct {
	cfg       Config
	self      Voter
	voters    []Voter
	fsm       *FSM
	raft      *raft.Raft
	transport *raft.NetworkTransport
	store     *raftboltdb.BoltStore
	observer  *raft.Observer

	mu            sync.Mutex
	leaderChanged chan struct{} // closed and replaced on every leader observation; guarded by mu

	stop chan struct{}
	done sync.WaitGroup
	once sync.Once
}

// Start opens (or creates) the voter's state in cfg.Dir and joins the raft group. A voter
// with no state bootstraps the group with the configured voters (every voter may do so:
// the configurations are identical).
func Start(cfg Config) (*Controller, error) {
	voters, err := ParseVoters(cfg.Voters)
	if err != nil {
		return nil, err
	}
	c := &Controller{cfg: cfg, voters: voters, leaderChanged: make(chan struct{}), stop: make(chan struct{})}
	found := false
	for _, v := range voters {
		if v.ID == cfg.NodeID {
			c.self, found = v, true
		}
	}
	if !found {
		return nil, fmt.Errorf("node id %d not among %s: %w", cfg.NodeID, cfg.Voters, ErrBadVoters)
	}
	if cfg.SessionTimeout <= 0 {
		cfg.SessionTimeout = sessionTimeoutDefault
	}
	if cfg.ExpiryInterval <= 0 {
		cfg.ExpiryInterval = cfg.SessionTimeout / 4
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.LogOutput == nil {
		cfg.LogOutput = os.Stderr
	}
	c.cfg = cfg
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("controller dir: %w", err)
	}

	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(strconv.Itoa(int(cfg.NodeID)))
	rc.Logger = hclog.New(&hclog.LoggerOptions{Name: fmt.Sprintf("controller-%d", cfg.NodeID), Output: cfg.LogOutput, Level: hclog.Warn})
	setDuration(&rc.HeartbeatTimeout, cfg.HeartbeatTimeout)
	setDuration(&rc.ElectionTimeout, cfg.ElectionTimeout)
	setDuration(&rc.LeaderLeaseTimeout, cfg.LeaderLeaseTimeout)
	setDuration(&rc.CommitTimeout, cfg.CommitTimeout)
	rc.SnapshotThreshold = snapshotThresholdDefault
	if cfg.SnapshotThreshold > 0 {
		rc.SnapshotThreshold = cfg.SnapshotThreshold
	}
	if err := raft.ValidateConfig(rc); err != nil {
		return nil, fmt.Errorf("raft config: %w", err)
	}

	c.store, err = raftboltdb.NewBoltStore(filepath.Join(cfg.Dir, "raft.db"))
	if err != nil {
		return nil, fmt.Errorf("open raft store: %w", err)
	}
	snaps, err := raft.NewFileSnapshotStore(cfg.Dir, snapshotsRetained, cfg.LogOutput)
	if err != nil {
		c.store.Close()
		return nil, fmt.Errorf("open snapshot store: %w", err)
	}
	advertise, err := net.ResolveTCPAddr("tcp", c.self.Addr)
	if err != nil {
		c.store.Close()
		return nil, fmt.Errorf("resolve %s: %w", c.self.Addr, err)
	}
	c.transport, err = newTransport(c.self.Addr, advertise, cfg.TLS, cfg.LogOutput)
	if err != nil {
		c.store.Close()
		return nil, fmt.Errorf("listen %s: %w", c.self.Addr, err)
	}
	c.fsm = NewFSM(cfg.SessionTimeout.Milliseconds())
	existing, err := raft.HasExistingState(c.store, c.store, snaps)
	if err != nil {
		c.closeIO()
		return nil, fmt.Errorf("inspect raft state: %w", err)
	}
	c.raft, err = raft.NewRaft(rc, c.fsm, c.store, c.store, snaps, c.transport)
	if err != nil {
		c.closeIO()
		return nil, fmt.Errorf("start raft: %w", err)
	}
	if !existing {
		var servers []raft.Server
		for _, v := range voters {
			servers = append(servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(strconv.Itoa(int(v.ID))), Address: raft.ServerAddress(v.Addr)})
		}
		if err := c.raft.BootstrapCluster(raft.Configuration{Servers: servers}).Error(); err != nil && !errors.Is(err, raft.ErrCantBootstrap) {
			c.Shutdown()
			return nil, fmt.Errorf("bootstrap: %w", err)
		}
	}
	observations := make(chan raft.Observation, 16)
	c.observer = raft.NewObserver(observations, false, func(o *raft.Observation) bool {
		_, ok := o.Data.(raft.LeaderObservation)
		return ok
	})
	c.raft.RegisterObserver(c.observer)
	c.done.Add(2)
	go c.watchLeader(observations)
	go c.expireSessions()
	return c, nil
}

func setDuration(dst *time.Duration, v time.Duration) {
	if v > 0 {
		*dst = v
	}
}

func (c *Controller) closeIO() {
	c.transport.Close()
	c.store.Close()
}

func (c *Controller) watchLeader(observations <-chan raft.Observation) {
	defer c.done.Done()
	for {
		select {
		case <-c.stop:
			return
		case <-observations:
			c.mu.Lock()
			close(c.leaderChanged)
			c.leaderChanged = make(chan struct{})
			c.mu.Unlock()
		}
	}
}

// expireSessions proposes ExpireSessions every ExpiryInterval while this voter leads,
// with a grace period from the moment it became leader (brokers could not heartbeat while
// there was none).
func (c *Controller) expireSessions() {
	defer c.done.Done()
	t := time.NewTicker(c.cfg.ExpiryInterval)
	defer t.Stop()
	var leaderSinceMs int64 // 0: not leading at the last tick
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
			if c.raft.State() != raft.Leader {
				leaderSinceMs = 0
				continue
			}
			nowMs := c.cfg.Now().UnixMilli()
			if leaderSinceMs == 0 {
				leaderSinceMs = nowMs
			}
			// Propose only when the leader's state shows an overdue session, so that an idle
			// cluster does not fill the log. Refused or failed proposals retry next tick.
			if c.fsm.anyExpired(nowMs, leaderSinceMs) {
				_, _ = c.Submit(&Command{Type: CmdExpireSessions, GraceFromMs: leaderSinceMs}, c.cfg.ExpiryInterval)
			}
		}
	}
}

// ID is this voter's node id.
func (c *Controller) ID() int32 { return c.self.ID }

// Leader is the current raft leader's id and address (0 and "" while unknown).
func (c *Controller) Leader() (int32, string) {
	addr, id := c.raft.LeaderWithID()
	n, err := strconv.Atoi(string(id))
	if err != nil {
		return 0, ""
	}
	return int32(n), string(addr)
}

// LeaderChanged returns a channel closed at the next change of raft leader seen by this
// voter.
func (c *Controller) LeaderChanged() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.leaderChanged
}

// IsLeader reports whether this voter is the raft leader.
func (c *Controller) IsLeader() bool { return c.raft.State() == raft.Leader }

// WaitLeader blocks until a raft leader is known to this voter, and returns it.
func (c *Controller) WaitLeader(ctx context.Context) (int32, error) {
	for {
		c.mu.Lock()
		changed := c.leaderChanged
		c.mu.Unlock()
		if id, _ := c.Leader(); id != 0 {
			return id, nil
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("wait for a controller leader: %w", ctx.Err())
		case <-c.stop:
			return 0, ErrClosed
		case <-changed:
		}
	}
}

// Submit replicates cmd through raft and returns its result once applied, or
// ErrNotController on a voter that does not lead. The command is stamped with the clock.
func (c *Controller) Submit(cmd *Command, timeout time.Duration) (Result, error) {
	select {
	case <-c.stop:
		return Result{}, ErrClosed
	default:
	}
	if c.raft.State() != raft.Leader {
		id, addr := c.Leader()
		return Result{}, fmt.Errorf("voter %d (leader %d at %q): %w", c.self.ID, id, addr, ErrNotController)
	}
	stamped := *cmd
	stamped.NowMs = c.cfg.Now().UnixMilli()
	stamped.Version = CommandVersion
	stamped.Forwarded = false
	if cmd.Type == CmdCreateTopic && cmd.Topic != nil {
		// The controller assigns a new topic's ID: drawn here, it is in the raft log, so
		// every voter stores the same one.
		t := *cmd.Topic
		t.ID = NewTopicID()
		stamped.Topic = &t
	}
	data, err := json.Marshal(&stamped)
	if err != nil {
		return Result{}, fmt.Errorf("encode command: %w", err)
	}
	f := c.raft.Apply(data, timeout)
	if err := f.Error(); err != nil {
		if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) {
			return Result{}, fmt.Errorf("voter %d: %w: %w", c.self.ID, ErrNotController, err)
		}
		return Result{}, fmt.Errorf("replicate command: %w", err)
	}
	res, _ := f.Response().(Result)
	return res, nil
}

// Metadata returns a copy of this voter's applied state (it may lag the leader's; use
// Barrier on the leader for a linearizable read).
func (c *Controller) Metadata() *Metadata { return c.fsm.Metadata() }

// Finalized is this voter's applied finalized protocol version (Metadata.Finalized).
func (c *Controller) Finalized() uint16 { return c.fsm.Finalized() }

// Version is the raft index of the last command this voter applied.
func (c *Controller) Version() uint64 { return c.fsm.Version() }

// Changed returns a channel closed once this voter applied a command after version since.
func (c *Controller) Changed(since uint64) <-chan struct{} { return c.fsm.Changed(since) }

// Barrier waits until everything committed before it is applied here (leader only).
func (c *Controller) Barrier(timeout time.Duration) error {
	if err := c.raft.Barrier(timeout).Error(); err != nil {
		return fmt.Errorf("barrier: %w", err)
	}
	return nil
}

// Snapshot asks raft for a snapshot now (tests; raft also takes them by threshold).
func (c *Controller) Snapshot() error {
	if err := c.raft.Snapshot().Error(); err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	return nil
}

// Shutdown stops the voter and closes its files and sockets. It is idempotent.
func (c *Controller) Shutdown() error {
	var err error
	c.once.Do(func() {
		close(c.stop)
		// Raft first: a proposal of the expiry loop in flight then fails at once instead of
		// running out its timeout.
		if e := c.raft.Shutdown().Error(); e != nil {
			err = fmt.Errorf("raft shutdown: %w", e)
		}
		c.done.Wait()
		if c.observer != nil {
			c.raft.DeregisterObserver(c.observer)
		}
		if e := c.transport.Close(); e != nil && err == nil {
			err = fmt.Errorf("close transport: %w", e)
		}
		if e := c.store.Close(); e != nil && err == nil {
			err = fmt.Errorf("close raft store: %w", e)
		}
	})
	return err
}
