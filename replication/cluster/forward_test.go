package cluster

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/ringlog/ringlog/engine/shard"
	"github.com/ringlog/ringlog/replication/controller"
	"github.com/ringlog/ringlog/replication/isr"
)

// forwardPeers plays the controller leaders' brokers a Manager forwards to: a forward to
// a frozen address is sent (sent receives its connection) and never answered until its
// context ends; any other is answered at once. It records every connection dialled.
type forwardPeers struct {
	frozen string
	sent   chan *forwardConnRecord
	mu     sync.Mutex
	dialed []*forwardConnRecord // guarded by mu
}

type forwardConnRecord struct {
	peers  *forwardPeers
	addr   string
	mu     sync.Mutex
	closed bool // guarded by mu
	done   chan struct{}
	once   sync.Once
}

func (p *forwardPeers) dial(_ context.Context, addr string) (PeerConn, error) {
	c := &forwardConnRecord{peers: p, addr: addr, done: make(chan struct{})}
	p.mu.Lock()
	p.dialed = append(p.dialed, c)
	p.mu.Unlock()
	return c, nil
}

func (p *forwardPeers) dials() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.dialed)
}

func (c *forwardConnRecord) Controller(ctx context.Context, _ int8, _ uint16, _ []byte) ([]byte, error) {
	if c.isClosed() {
		return nil, errors.New("use of closed connection")
	}
	if c.addr != c.peers.frozen {
		return []byte(`{}`), nil
	}
	c.peers.sent <- c
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-c.done:
		return nil, errors.New("connection closed")
	}
}

func (c *forwardConnRecord) Close() error {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.once.Do(func() { close(c.done) })
	return nil
}

func (c *forwardConnRecord) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

func (c *forwardConnRecord) ReplicaFetch(context.Context, *FetchRequest) ([]FetchAnswer, error) {
	return nil, errors.New("not a leader")
}

func (c *forwardConnRecord) OffsetsForLeaderEpoch(context.Context, shard.TopicPartition, int32, int32) (isr.EpochEndOffset, error) {
	return isr.EpochEndOffset{}, errors.New("not a leader")
}

// newForwardingManager is a Manager outside the quorum whose metadata names leader as the
// controller leader, brokers 2 and 3 at b2:1 and b3:1; it forwards through peers.
func newForwardingManager(t *testing.T, peers *forwardPeers, leader int32) (*Manager, *remoteQuorum) {
	t.Helper()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	q := &remoteQuorum{self: 4, seeds: []string{"b2:1"}, log: logger, changed: make(chan struct{}),
		stop: make(chan struct{}), done: make(chan struct{})}
	close(q.done) // no watch runs: the test installs the views
	q.meta.Store(&controller.Metadata{Brokers: map[int32]*controller.Broker{}, Topics: map[string]*controller.Topic{}})
	setForwardLeader(q, 1, leader)
	m := &Manager{cfg: Config{NodeID: 4, Dial: peers.dial}, log: logger, ctl: q, stop: make(chan struct{}),
		sessionSlot: make(chan struct{}, 1), forwardSlots: make(chan struct{}, forwardsMax), ctlBusy: map[PeerConn]struct{}{}}
	return m, q
}

func setForwardLeader(q *remoteQuorum, version uint64, leader int32) {
	q.install(&View{ControllerLeader: leader, Metadata: &controller.Metadata{Version: version, Topics: map[string]*controller.Topic{},
		Brokers: map[int32]*controller.Broker{2: {ID: 2, Address: "b2:1"}, 3: {ID: 3, Address: "b3:1"}}}})
}

var (
	forwardCreate    = &controller.Command{Type: controller.CmdCreateTopic, Topic: &controller.TopicRequest{Name: "t", Partitions: 1, ReplicationFactor: 1}}
	forwardHeartbeat = &controller.Command{Type: controller.CmdHeartbeat, Broker: &controller.BrokerRegistration{ID: 4, SessionEpoch: 1}}
)

// TestForwardsDoNotQueue: forwarded controller commands each hold their own connection to
// the controller leader's broker, so forwards stuck on a frozen leader (up to forwardsMax)
// delay neither a heartbeat nor, once the leadership moved, any other command; a further
// command waits for a slot only until its context ends; ending one stuck forward closes
// its connection alone; a healthy leader's connection is reused; Close ends the rest.
// (e2e TestForwardNotBehindStuckForward does this with real brokers and SIGSTOP.)
func TestForwardsDoNotQueue(t *testing.T) {
	peers := &forwardPeers{frozen: "b2:1", sent: make(chan *forwardConnRecord)}
	m, q := newForwardingManager(t, peers, 2)
	type result struct {
		err error
	}
	results := make(chan result, forwardsMax)
	cancels := make([]context.CancelFunc, forwardsMax)
	stuck := make([]*forwardConnRecord, forwardsMax)
	for i := range forwardsMax {
		ctx, cancel := context.WithCancel(context.Background())
		cancels[i] = cancel
		go func() {
			_, err := m.Submit(ctx, forwardCreate)
			results <- result{err}
		}()
		stuck[i] = <-peers.sent
	}
	if got := peers.dials(); got != forwardsMax {
		t.Fatalf("%d stuck forwards dialled %d connections, want one each", forwardsMax, got)
	}

	// Every command slot is held: another command waits for one until its context ends
	// (here: already ended), and was never sent.
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := m.Submit(ended, forwardCreate); !errors.Is(err, ErrNoController) || !errors.Is(err, context.Canceled) {
		t.Fatalf("a fifth command with every slot held: %v, want ErrNoController for its ended context", err)
	}

	// The leadership moves to broker 3: a heartbeat and, once a slot is free, a create are
	// answered there while the other forwards stay stuck on broker 2.
	setForwardLeader(q, 2, 3)
	dials := peers.dials()
	if _, err := m.submitSession(context.Background(), forwardHeartbeat); err != nil {
		t.Fatalf("heartbeat to the new leader with %d forwards stuck: %v", forwardsMax, err)
	}
	cancels[0]()
	if r := <-results; !errors.Is(r.err, ErrNoController) {
		t.Fatalf("the stuck forward whose context ended: %v, want ErrNoController", r.err)
	}
	if !stuck[0].isClosed() {
		t.Fatal("the connection of the forward that failed was kept")
	}
	for i, c := range stuck[1:] {
		if c.isClosed() {
			t.Fatalf("stuck forward %d's connection was closed by another forward's failure", i+1)
		}
	}
	for range 3 {
		if _, err := m.Submit(context.Background(), forwardCreate); err != nil {
			t.Fatalf("create at the new leader with %d forwards stuck: %v", forwardsMax-1, err)
		}
	}
	if got := peers.dials() - dials; got != 1 {
		t.Fatalf("a heartbeat and three creates one after another to a healthy leader dialled %d connections, want 1 (reused)", got)
	}

	// Close ends the stuck forwards at once and closes every connection.
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	for range forwardsMax - 1 {
		if r := <-results; !errors.Is(r.err, ErrNoController) {
			t.Fatalf("a stuck forward at Close: %v", r.err)
		}
	}
	peers.mu.Lock()
	defer peers.mu.Unlock()
	for i, c := range peers.dialed {
		if !c.isClosed() {
			t.Fatalf("connection %d to %s open after Close", i, c.addr)
		}
	}
}

// TestDeleteTopicOutcomeUnknown: a delete forwarded to a controller leader that never
// answers ends with the caller's context (the request's timeout_ms) and says so:
// ErrTimedOut (REQUEST_TIMED_OUT), not the lost connection's NOT_CONTROLLER, and not
// after a fixed 30 s.
func TestDeleteTopicOutcomeUnknown(t *testing.T) {
	peers := &forwardPeers{frozen: "b2:1", sent: make(chan *forwardConnRecord)}
	m, q := newForwardingManager(t, peers, 2)
	q.install(&View{ControllerLeader: 2, Metadata: &controller.Metadata{Version: 2,
		Topics:  map[string]*controller.Topic{"t": {Name: "t", ID: "00112233445566778899aabbccddeeff"}},
		Brokers: map[int32]*controller.Broker{2: {ID: 2, Address: "b2:1"}}}})
	ctx, cancel := context.WithCancel(context.Background())
	errs := make(chan error, 1)
	go func() { errs <- m.DeleteTopic(ctx, "t") }()
	<-peers.sent
	cancel() // the request's timeout passes
	err := <-errs
	if !errors.Is(err, ErrTimedOut) || errors.Is(err, ErrNoController) {
		t.Fatalf("delete stuck on a frozen controller leader, its context ended: %v, want ErrTimedOut alone", err)
	}
	m.Close()
}

// TestOutcomeUnknown: which failures of a controller command leave its outcome unknown,
// and what they are answered.
func TestOutcomeUnknown(t *testing.T) {
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name     string
		ctx      context.Context
		err      error
		want     error // errors.Is holds
		wantNot  error // errors.Is does not hold (nil: no check)
		mayApply bool  // the message says the command may still be applied
	}{
		{"context ended", ended, ErrNoController, ErrTimedOut, ErrNoController, true},
		{"connection lost", context.Background(), ErrNoController, ErrNoController, ErrTimedOut, true},
		{"leadership lost", context.Background(), controller.ErrNotController, controller.ErrNotController, ErrTimedOut, true},
		{"refused", context.Background(), controller.ErrTopicExists, controller.ErrTopicExists, ErrTimedOut, false},
	} {
		err := outcomeUnknown(tc.ctx, "delete", "t", "a retry answers X", tc.err)
		if !errors.Is(err, tc.want) || tc.wantNot != nil && errors.Is(err, tc.wantNot) {
			t.Errorf("%s: %v, want %v and not %v", tc.name, err, tc.want, tc.wantNot)
		}
		if got := strings.Contains(err.Error(), "may still be applied"); got != tc.mayApply {
			t.Errorf("%s: %q says it may still be applied: %v, want %v", tc.name, err, got, tc.mayApply)
		}
	}
}
