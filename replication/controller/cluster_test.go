package controller

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/ringlog/ringlog/internal/testport"
)

// Raft timing for the in-process clusters: ~5x faster than hashicorp/raft's defaults but
// with room for a loaded 2-core machine (a missed heartbeat only costs an extra election;
// the tests wait for outcomes, never for durations).
const (
	testHeartbeat   = 300 * time.Millisecond
	testElection    = 300 * time.Millisecond
	testLease       = 150 * time.Millisecond
	testCommit      = 5 * time.Millisecond
	testWaitMax     = 15 * time.Second // any single wait; a healthy run needs well under 1 s
	testSubmitMax   = 2 * time.Second
	testSessionTime = time.Minute
	// fenceStepsMax bounds the quarter sessions TestClusterReplicatesAndFailsOver waits
	// for a silent broker's fencing: 4 are needed, and 4 more for every controller election
	// on the way (each restarts the grace period).
	fenceStepsMax = 120
)

// fakeClock is the clock commands are stamped with: session expiry follows it, not the
// wall clock.
type fakeClock struct{ ms atomic.Int64 }

func (c *fakeClock) Now() time.Time          { return time.UnixMilli(c.ms.Load()) }
func (c *fakeClock) Advance(d time.Duration) { c.ms.Add(d.Milliseconds()) }

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

type testCluster struct {
	t      *testing.T
	voters string
	ids    []int32
	dirs   map[int32]string
	ctrls  map[int32]*Controller // running voters
	clock  *fakeClock
	logs   *syncBuffer
}

// freeAddrs returns n distinct loopback addresses whose ports were free a moment ago,
// drawn below the kernel's ephemeral range (testport.Loopback): a ":0" port, closed until
// the voter binds it, was taken meanwhile by another test binary's connection once
// ("start voter 4: ... bind: address already in use").
func freeAddrs(t *testing.T, n int) []string {
	var addrs []string
	for range n {
		addrs = append(addrs, testport.Loopback(t))
	}
	return addrs
}

func newTestCluster(t *testing.T, n int) *testCluster {
	addrs := freeAddrs(t, n)
	c := &testCluster{t: t, dirs: map[int32]string{}, ctrls: map[int32]*Controller{}, clock: &fakeClock{}, logs: &syncBuffer{}}
	c.clock.ms.Store(1_700_000_000_000)
	root := t.TempDir()
	for i, a := range addrs {
		id := int32(i + 1)
		c.ids = append(c.ids, id)
		c.dirs[id] = filepath.Join(root, fmt.Sprint(id))
		if c.voters != "" {
			c.voters += ","
		}
		c.voters += fmt.Sprintf("%d@%s", id, a)
	}
	for _, id := range c.ids {
		c.start(id)
	}
	t.Cleanup(func() {
		for _, ctrl := range c.ctrls {
			ctrl.Shutdown()
		}
		if t.Failed() {
			t.Logf("raft logs:\n%s", c.logs.String())
		}
	})
	return c
}

func (c *testCluster) start(id int32) {
	c.t.Helper()
	ctrl, err := Start(Config{
		NodeID: id, Voters: c.voters, Dir: c.dirs[id],
		SessionTimeout: testSessionTime, ExpiryInterval: 20 * time.Millisecond,
		HeartbeatTimeout: testHeartbeat, ElectionTimeout: testElection, LeaderLeaseTimeout: testLease, CommitTimeout: testCommit,
		Now: c.clock.Now, LogOutput: c.logs,
	})
	if err != nil {
		c.t.Fatalf("start voter %d: %v", id, err)
	}
	c.ctrls[id] = ctrl
}

func (c *testCluster) stop(id int32) {
	c.t.Helper()
	if err := c.ctrls[id].Shutdown(); err != nil {
		c.t.Fatalf("shut down voter %d: %v", id, err)
	}
	delete(c.ctrls, id)
}

// leader waits until one running voter is the raft leader and every running voter agrees.
func (c *testCluster) leader() *Controller {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testWaitMax)
	defer cancel()
	for {
		var changed []<-chan struct{}
		var leader *Controller
		agree := true
		for _, ctrl := range c.ctrls {
			changed = append(changed, ctrl.LeaderChanged())
			if ctrl.IsLeader() {
				leader = ctrl
			}
		}
		if leader != nil {
			for _, ctrl := range c.ctrls {
				if id, _ := ctrl.Leader(); id != leader.ID() {
					agree = false
				}
			}
			if agree {
				return leader
			}
		}
		if err := waitAny(ctx, changed); err != nil {
			c.t.Fatalf("no agreed controller leader among %d voters: %v", len(c.ctrls), err)
		}
	}
}

// waitAny waits for one of chans, or a leader-lease period at most (raft does not report
// every role change through observations, e.g. a follower losing its leader's contact).
func waitAny(ctx context.Context, chans []<-chan struct{}) error {
	done := make(chan struct{})
	defer close(done)
	fired := make(chan struct{}, len(chans))
	for _, ch := range chans {
		go func() {
			select {
			case <-ch:
				fired <- struct{}{}
			case <-done:
			}
		}()
	}
	t := time.NewTimer(testLease)
	defer t.Stop()
	select {
	case <-fired:
	case <-t.C:
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// submit sends cmd to the leader, retrying when leadership moves under it. maybeApplied
// reports that an attempt before the last may have been committed all the same: raft's
// ErrLeadershipLost means the leader appended the command and stepped down before it
// committed, and the next leader commits it if it reached that leader's log (as against
// ErrNotLeader: never appended). A loaded machine makes a new leader step down again
// (its followers miss the lease), so a retry can meet its own first attempt.
func (c *testCluster) submit(cmd Command) (res Result, maybeApplied bool) {
	c.t.Helper()
	deadline := time.Now().Add(testWaitMax)
	for {
		res, err := c.leader().Submit(&cmd, testSubmitMax)
		if err == nil {
			return res, maybeApplied
		}
		if !errors.Is(err, ErrNotController) || time.Now().After(deadline) {
			c.t.Fatalf("submit %+v: %v", cmd, err)
		}
		if errors.Is(err, raft.ErrLeadershipLost) {
			c.t.Logf("submit %+v: %v; retrying (the lost attempt may be committed)", cmd, err)
			maybeApplied = true
		}
	}
}

// mustSubmit is submit that fails the test on a refused command. A create refused because
// the topic exists, after an attempt whose outcome was lost with the leadership, is that
// attempt's own topic: its Value is the topic as the leader applied it.
func (c *testCluster) mustSubmit(cmd Command) Result {
	c.t.Helper()
	res, maybeApplied := c.submit(cmd)
	if res.Err != nil && maybeApplied && cmd.Type == CmdCreateTopic && errors.Is(res.Err, ErrTopicExists) {
		return Result{Value: c.leader().Metadata().Topics[cmd.Topic.Name]}
	}
	if res.Err != nil {
		c.t.Fatalf("command %+v refused: %v", cmd, res.Err)
	}
	return res
}

// barrier runs a barrier on the leader and returns that leader, asking the next leader
// when the leadership moves under it (a loaded machine holds elections: 'barrier:
// leadership lost while committing log', -race at load 21).
func (c *testCluster) barrier() *Controller {
	c.t.Helper()
	deadline := time.Now().Add(testWaitMax)
	for {
		leader := c.leader()
		err := leader.Barrier(testSubmitMax)
		if err == nil {
			return leader
		}
		if !errors.Is(err, raft.ErrLeadershipLost) && !errors.Is(err, raft.ErrNotLeader) || time.Now().After(deadline) {
			c.t.Fatalf("barrier on voter %d: %v", leader.ID(), err)
		}
		c.t.Logf("barrier on voter %d: %v; asking the next leader", leader.ID(), err)
	}
}

// converge waits until every running voter has applied version v. The version is read
// once per wait: reading it again for Changed lost the wake-up when the voter applied v in
// between (it then waited for a change after v that never came: 'voter 2 stuck at version
// 5, want 5' after testWaitMax, -race at load 26).
func (c *testCluster) converge(v uint64) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testWaitMax)
	defer cancel()
	for id, ctrl := range c.ctrls {
		for at := ctrl.Version(); at < v; at = ctrl.Version() {
			select {
			case <-ctrl.Changed(at):
			case <-ctx.Done():
				c.t.Fatalf("voter %d stuck at version %d, want %d", id, ctrl.Version(), v)
			}
		}
	}
}

// waitWithin waits until cond holds on ctrl's metadata, at most d: nil when it did not.
func waitWithin(ctrl *Controller, d time.Duration, cond func(*Metadata) bool) *Metadata {
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		v := ctrl.Version()
		if m := ctrl.Metadata(); cond(m) {
			return m
		}
		select {
		case <-ctrl.Changed(v):
		case <-timer.C:
			return nil
		}
	}
}

func TestClusterReplicatesAndFailsOver(t *testing.T) {
	c := newTestCluster(t, 3)
	c.leader() // a leader agreed on before the first command
	for id := int32(1); id <= 3; id++ {
		c.mustSubmit(Command{Type: CmdRegisterBroker, Broker: &BrokerRegistration{ID: id, Address: fmt.Sprintf("127.0.0.1:%d", 9091+id), Rack: fmt.Sprint("r", id)}})
	}
	created := c.mustSubmit(Command{Type: CmdCreateTopic, Topic: &TopicRequest{Name: "orders", Partitions: 3, ReplicationFactor: 3}})
	if topic := created.Value.(*Topic); len(topic.Partitions) != 3 {
		t.Fatalf("created %+v", topic)
	}
	v := c.leader().Version()
	c.converge(v)
	for id, ctrl := range c.ctrls {
		m := ctrl.Metadata()
		if len(m.Brokers) != 3 || len(m.Topics["orders"].Partitions) != 3 {
			t.Fatalf("voter %d metadata: %+v", id, m)
		}
	}
	// A follower refuses commands and names the leader. The command is harmless if
	// applied (a topic that does not exist): on a loaded machine the voter asked may have
	// won an election since the leader was looked up, and then it answers; ask again.
	for attempt := 0; ; attempt++ {
		if attempt == 10 {
			t.Fatalf("no follower refused a command in %d attempts: leadership kept moving", attempt)
		}
		leader, asked := c.leader(), (*Controller)(nil)
		for _, ctrl := range c.ctrls {
			if ctrl.ID() != leader.ID() {
				asked = ctrl
				break
			}
		}
		_, err := asked.Submit(&Command{Type: CmdDeleteTopic, Topic: &TopicRequest{Name: "no-such-topic"}}, testSubmitMax)
		if errors.Is(err, ErrNotController) {
			break
		}
		t.Logf("submit on voter %d, a follower when asked: %v; leadership moved, asking again", asked.ID(), err)
	}

	// Kill the raft leader: another voter takes over with the metadata.
	old := c.leader().ID()
	c.stop(old)
	next := c.leader()
	if next.ID() == old {
		t.Fatalf("voter %d still leads after shutdown", old)
	}
	if m := next.Metadata(); len(m.Topics["orders"].Partitions) != 3 || len(m.Brokers) != 3 {
		t.Fatalf("metadata lost on failover: %+v", m)
	}
	c.mustSubmit(Command{Type: CmdCreateTopic, Topic: &TopicRequest{Name: "payments", Partitions: 1, ReplicationFactor: 2}})

	// The killed voter restarts from its directory and catches up.
	c.start(old)
	v = c.leader().Version()
	c.converge(v)
	if m := c.ctrls[old].Metadata(); m.Topics["payments"] == nil || m.Topics["orders"] == nil {
		t.Fatalf("restarted voter %d metadata: %+v", old, m)
	}

	// Broker sessions expire on the controller's clock: broker 1 stops heartbeating; the
	// leader's expiry loop fences it and partitions it led elect from their ISR.
	// Time passes on the controller's clock in quarter sessions; brokers 2 and 3 heartbeat
	// at each step, broker 1 stays silent. The leader's expiry loop fences broker 1 a
	// session after the later of its last heartbeat and the leader's election: every
	// election restarts that grace, and a loaded machine holds elections (raft heartbeats
	// missed: 12 steps were not enough once under -race at load 30, after 3 lost
	// leaderships), so the bound is generous and the steps taken are logged.
	before := c.leader().Metadata()
	var after *Metadata
	for step := 0; after == nil; step++ {
		if step == fenceStepsMax {
			t.Fatalf("broker 1 not fenced after %d quarter sessions", step)
		}
		if step >= 8 {
			t.Logf("broker 1 not yet fenced after %d quarter sessions (leader voter %d)", step, c.leader().ID())
		}
		c.clock.Advance(testSessionTime / 4)
		for id := int32(2); id <= 3; id++ {
			b := before.Brokers[id]
			c.mustSubmit(Command{Type: CmdHeartbeat, Broker: &BrokerRegistration{ID: id, SessionEpoch: b.SessionEpoch}})
		}
		after = waitWithin(c.leader(), 30*testCommit, func(m *Metadata) bool { return m.Brokers[1].Fenced })
	}
	if after.Brokers[2].Fenced || after.Brokers[3].Fenced {
		t.Fatalf("heartbeating brokers fenced: %+v", after.Brokers)
	}
	for i, p := range after.Topics["orders"].Partitions {
		q := before.Topics["orders"].Partitions[i]
		if p.Leader == 1 || slices.Contains(p.ISR, int32(1)) {
			t.Errorf("partition %d after broker 1 expired: %+v", i, p)
		}
		if q.Leader == 1 && (p.LeaderEpoch != q.LeaderEpoch+1 || !slices.Contains(q.ISR, p.Leader)) {
			t.Errorf("partition %d: new leader %+v, was %+v", i, p, q)
		}
	}
}

func TestClusterRestartsFromDisk(t *testing.T) {
	c := newTestCluster(t, 3)
	c.mustSubmit(Command{Type: CmdRegisterBroker, Broker: &BrokerRegistration{ID: 7, Address: "127.0.0.1:9097"}})
	c.mustSubmit(Command{Type: CmdCreateTopic, Topic: &TopicRequest{Name: "a", Partitions: 2, ReplicationFactor: 1}})
	// One voter snapshots (so that its restart restores from the snapshot); more log
	// entries follow it.
	if err := c.leader().Snapshot(); err != nil {
		t.Fatal(err)
	}
	c.mustSubmit(Command{Type: CmdCreateTopic, Topic: &TopicRequest{Name: "b", Partitions: 1, ReplicationFactor: 1, UncleanLeaderElection: true}})
	v := c.leader().Version()
	c.converge(v)
	want := c.leader().Metadata()
	for _, id := range slices.Clone(c.ids) {
		c.stop(id)
	}
	for _, id := range c.ids {
		c.start(id)
	}
	// A new term: a barrier makes the leader apply everything committed before it.
	got := c.barrier().Metadata()
	if got.Version < want.Version {
		t.Fatalf("version %d after restart, want at least %d", got.Version, want.Version)
	}
	got.Version = want.Version
	if !equalMetadata(got, want) {
		t.Fatalf("after restart %+v, want %+v", got, want)
	}
	if !got.Topics["b"].UncleanLeaderElection {
		t.Error("unclean.leader.election.enable lost")
	}
}

func TestSingleVoter(t *testing.T) {
	c := newTestCluster(t, 1)
	c.mustSubmit(Command{Type: CmdRegisterBroker, Broker: &BrokerRegistration{ID: 1, Address: "127.0.0.1:9092"}})
	res := c.mustSubmit(Command{Type: CmdCreateTopic, Topic: &TopicRequest{Name: "solo", Partitions: 1, ReplicationFactor: 1}})
	if p := res.Value.(*Topic).Partitions[0]; p.Leader != 1 || !slices.Equal(p.ISR, []int32{1}) {
		t.Errorf("single-node partition %+v", p)
	}
	if _, err := Start(Config{NodeID: 9, Voters: c.voters, Dir: t.TempDir()}); !errors.Is(err, ErrBadVoters) {
		t.Errorf("a node id outside the voters: %v", err)
	}
}

func TestFiveVotersLoseTwo(t *testing.T) {
	c := newTestCluster(t, 5)
	c.mustSubmit(Command{Type: CmdRegisterBroker, Broker: &BrokerRegistration{ID: 1, Address: "127.0.0.1:9092"}})
	// Two voters go, the leader among them: the other three still form a quorum.
	first := c.leader().ID()
	c.stop(first)
	for _, id := range c.ids {
		if _, running := c.ctrls[id]; running {
			c.stop(id)
			break
		}
	}
	c.mustSubmit(Command{Type: CmdCreateTopic, Topic: &TopicRequest{Name: "five", Partitions: 1, ReplicationFactor: 1}})
	c.converge(c.leader().Version())
	for id, ctrl := range c.ctrls {
		if m := ctrl.Metadata(); m.Topics["five"] == nil || len(m.Brokers) != 1 {
			t.Errorf("voter %d: %+v", id, m)
		}
	}
}
