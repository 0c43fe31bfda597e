package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ringlog/ringlog/engine/batch"
	"github.com/ringlog/ringlog/netio/client"
	"github.com/ringlog/ringlog/netio/wire"
	"github.com/ringlog/ringlog/replication/cluster"
	"github.com/ringlog/ringlog/replication/controller"
)

// Replication across real ringlogd processes on 127.0.0.1: every broker runs a controller
// voter (--node-id, --controller-voters) and its own data directory and ports.

const (
	clusterSessionTimeout = "6s"
	clusterLagMax         = "2s"
	failoverMax           = 20 * time.Second // raft re-election plus the session timeout, on a loaded 2-core box
)

type testCluster struct {
	t          *testing.T
	brokers    []*broker // brokers[i] is node i+1
	c          *client.Client
	lastLeader *broker // the broker the last produce succeeded on (produce's goroutine only)
}

// startCluster starts n brokers, each a controller voter, and waits until all registered;
// extra are further ringlogd flags for every broker.
func startCluster(t *testing.T, n int, extra ...string) *testCluster {
	t.Helper()
	return startClusterWith(t, n, 0, nil, extra...)
}

// startClusterWith starts voters brokers that are controller voters (nodes 1..voters) and
// nonVoters brokers outside the quorum (the next ids, seeded with node 1's address), and
// waits until all registered. perBroker(id), if set, gives node id's own further flags
// (its own listen addresses).
func startClusterWith(t *testing.T, voters, nonVoters int, perBroker func(id int) []string, extra ...string) *testCluster {
	t.Helper()
	return startClusterPrepared(t, voters, nonVoters, perBroker, nil, nil, extra...)
}

// startClusterPrepared is startClusterWith (perBroker as there) with prepare run on each broker's data
// directory before it starts (nil: nothing), and newClient making the test's client of
// broker 1 (nil: broker.client).
func startClusterPrepared(t *testing.T, voters, nonVoters int, perBroker func(id int) []string, prepare func(b *broker), newClient func(b *broker) *client.Client, extra ...string) *testCluster {
	t.Helper()
	n := voters + nonVoters
	var quorum []string
	for i := 0; i < voters; i++ {
		quorum = append(quorum, fmt.Sprintf("%d@%s", i+1, freeAddr(t)))
	}
	tc := &testCluster{t: t}
	for i := 0; i < n; i++ {
		flags := []string{"--node-id", strconv.Itoa(i + 1), "--controller-voters", strings.Join(quorum, ","),
			"--broker-session-timeout", clusterSessionTimeout, "--replica-lag-time-max", clusterLagMax, "--shard-ports", "off"}
		if i >= voters {
			flags = append(flags, "--cluster-seeds", tc.brokers[0].addr)
		}
		if perBroker != nil {
			flags = append(flags, perBroker(i+1)...)
		}
		b := newBroker(t, append(flags, extra...)...)
		if prepare != nil {
			prepare(b)
		}
		b.start()
		tc.brokers = append(tc.brokers, b)
	}
	if newClient == nil {
		newClient = func(b *broker) *client.Client { return b.client(t) }
	}
	tc.c = newClient(tc.brokers[0])
	tc.waitFor("every broker registered and live", func(v *cluster.View) bool {
		live := 0
		for _, b := range v.Metadata.Brokers {
			if !b.Fenced {
				live++
			}
		}
		return live == n
	}, tc.brokers[0])
	return tc
}

// view asks broker b for its view of the cluster; nil when it does not answer.
func (tc *testCluster) view(b *broker) *cluster.View {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	body, err := tc.c.ClusterMetadataAt(ctx, b.addr)
	if err != nil {
		return nil
	}
	var v cluster.View
	if err := json.Unmarshal(body, &v); err != nil {
		tc.t.Fatalf("decode cluster view: %v", err)
	}
	return &v
}

// waitFor polls b's view until ok holds.
func (tc *testCluster) waitFor(what string, ok func(*cluster.View) bool, b *broker) *cluster.View {
	tc.t.Helper()
	deadline := time.Now().Add(soakScaled(60 * time.Second))
	for time.Now().Before(deadline) {
		if v := tc.view(b); v != nil && ok(v) {
			return v
		}
		time.Sleep(50 * time.Millisecond)
	}
	tc.t.Fatalf("timed out waiting for %s", what)
	return nil
}

func partitionOf(v *cluster.View, topic string) *controller.Partition {
	t := v.Metadata.Topics[topic]
	if t == nil || len(t.Partitions) == 0 {
		return nil
	}
	return &t.Partitions[0]
}

func (tc *testCluster) node(id int32) *broker { return tc.brokers[id-1] }

func (tc *testCluster) idOf(b *broker) int32 {
	return int32(slices.Index(tc.brokers, b) + 1)
}

// leader is the broker that leads partition 0 of topic as a running broker's view says;
// nil while there is none. The brokers are asked at once, so that a frozen one (which
// answers nothing) costs one timeout, not one per call.
func (tc *testCluster) leader(topic string) *broker {
	answers := make(chan *broker, len(tc.brokers))
	asked := 0
	for _, b := range tc.brokers {
		if !b.running() {
			continue
		}
		asked++
		go func() {
			if v := tc.view(b); v != nil {
				if p := partitionOf(v, topic); p != nil && p.Leader > 0 {
					answers <- tc.node(p.Leader)
					return
				}
			}
			answers <- nil
		}()
	}
	for ; asked > 0; asked-- {
		if b := <-answers; b != nil && b.running() {
			return b
		}
	}
	return nil
}

// produce sends one record to partition 0's leader, following leadership changes (as a
// client refreshing metadata on NOT_LEADER would), until it is answered without a
// retriable error or a minute has passed; other errors come back as errors.
// NOT_ENOUGH_REPLICAS is retried too, as Kafka's producer retries it (the record was refused
// before the append, so a retry cannot duplicate it): on a loaded machine a starved
// follower can lag past replica.lag.time.max and leave the ISR until it catches up. A test
// that wants the refusal itself produces with produceOnConn.
func (tc *testCluster) produce(ctx context.Context, topic string, acks int16, value []byte) (wire.ProduceResponsePartition, error) {
	deadline := time.Now().Add(60 * time.Second)
	refused := 0
	for {
		var res wire.ProduceResponsePartition
		var err error
		b := tc.lastLeader
		if b == nil || !b.running() {
			b = tc.leader(topic)
		}
		if b != nil {
			res, err = produceOne(ctx, tc.c, b.addr, topic, acks, value)
			if err == nil && res.ErrorCode == wire.ErrNone {
				tc.lastLeader = b
				if refused > 0 {
					tc.t.Logf("produce to %s: taken after %d NOT_ENOUGH_REPLICAS refusals", topic, refused)
				}
				return res, nil
			}
			tc.lastLeader = nil
			if err == nil && res.ErrorCode == wire.ErrNotEnoughReplicas {
				refused++
			} else if err == nil && !res.ErrorCode.Retriable() {
				return res, fmt.Errorf("%s: %s", res.ErrorCode.Name(), res.ErrorMessage)
			}
		}
		if time.Now().After(deadline) {
			return res, fmt.Errorf("no leader took the produce within a minute (last: %v %s %s)", err, res.ErrorCode.Name(), res.ErrorMessage)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// produceOnConn produces one record on a connection of its own, closed afterwards, waiting
// at most limit for the answer (a produce that hangs then holds back nothing else).
func produceOnConn(addr string, acks int16, topic string, value []byte, limit time.Duration) (wire.ProduceResponsePartition, error) {
	b := batch.NewBuilder(batch.BuilderOptions{})
	b.Append(time.Now().UnixMilli(), nil, value, nil)
	records, err := b.Build(nil)
	if err != nil {
		return wire.ProduceResponsePartition{}, err
	}
	conn, err := net.DialTimeout("tcp", addr, limit)
	if err != nil {
		return wire.ProduceResponsePartition{}, err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(limit))
	req := &wire.ProduceRequest{Acks: acks, TimeoutMs: int32(limit / time.Millisecond), Topics: []wire.ProduceTopic{{Topic: topic, Partitions: []wire.ProducePartition{{Partition: 0, Records: records}}}}}
	if _, err := conn.Write(wire.AppendRequest(nil, 1, req)); err != nil {
		return wire.ProduceResponsePartition{}, err
	}
	h, payload, _, err := wire.ReadResponse(conn, nil, wire.FrameBytesMaxDefault)
	if err != nil {
		return wire.ProduceResponsePartition{}, err
	}
	if h.ErrorCode != wire.ErrNone {
		return wire.ProduceResponsePartition{}, h.ErrorCode
	}
	var resp wire.ProduceResponse
	if err := resp.ReadFrom(payload); err != nil {
		return wire.ProduceResponsePartition{}, err
	}
	return resp.Topics[0].Partitions[0], nil
}

// produceOne sends one single-record batch to addr and returns the answer.
func produceOne(ctx context.Context, c *client.Client, addr, topic string, acks int16, value []byte) (wire.ProduceResponsePartition, error) {
	return producePartition(ctx, c, addr, topic, 0, acks, value)
}

// producePartition is produceOne to partition p.
func producePartition(ctx context.Context, c *client.Client, addr, topic string, p int32, acks int16, value []byte) (wire.ProduceResponsePartition, error) {
	b := batch.NewBuilder(batch.BuilderOptions{})
	b.Append(time.Now().UnixMilli(), nil, value, nil)
	records, err := b.Build(nil)
	if err != nil {
		return wire.ProduceResponsePartition{}, err
	}
	var resp wire.ProduceResponse
	req := &wire.ProduceRequest{Acks: acks, TimeoutMs: 10000, Topics: []wire.ProduceTopic{{Topic: topic, Partitions: []wire.ProducePartition{{Partition: p, Records: records}}}}}
	if err := c.Call(ctx, addr, req, &resp); err != nil {
		return wire.ProduceResponsePartition{}, err
	}
	return resp.Topics[0].Partitions[0], nil
}

// readAll fetches partition 0 of topic from addr up to its high watermark: offset -> value.
// leaderAnswering is the topic's leader as the views name it, once that broker answers a
// fetch of partition 0 as leader. A broker killed and restarted within its session can stay
// named in the views until the controller moves the role, and then never leads again: asking
// it alone ran readAll into its deadline (TestReplicationRandomFaults, seed
// 1796292186423146762). Bounded by 60 s; then it returns whom the views name.
func (tc *testCluster) leaderAnswering(t *testing.T, topic string) *broker {
	t.Helper()
	ctx := testContext(t, 60*time.Second)
	for {
		b := tc.leader(topic)
		if b == nil || ctx.Err() != nil {
			return b
		}
		req := &wire.FetchRequest{MaxBytes: 1, Topics: []wire.FetchTopic{{Topic: topic, Partitions: []wire.FetchPartition{{Partition: 0, MaxBytes: 1}}}}}
		var resp wire.FetchResponse
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := tc.c.Call(cctx, b.addr, req, &resp)
		cancel()
		if err == nil && resp.Topics[0].Partitions[0].ErrorCode != wire.ErrNotLeaderOrWrongShard {
			return b
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func readAll(t *testing.T, c *client.Client, addr, topic string) (map[int64][]byte, int64) {
	t.Helper()
	ctx := testContext(t, 30*time.Second)
	out := map[int64][]byte{}
	var offset, hwm int64
	notLeaderUntil := time.Now().Add(30 * time.Second)
	for {
		var resp wire.FetchResponse
		req := &wire.FetchRequest{MaxBytes: 1 << 20, Topics: []wire.FetchTopic{{Topic: topic, Partitions: []wire.FetchPartition{{Partition: 0, FetchOffset: offset, MaxBytes: 1 << 20}}}}}
		if err := c.Call(ctx, addr, req, &resp); err != nil {
			t.Fatalf("fetch from %s: %v", addr, err)
		}
		p := resp.Topics[0].Partitions[0]
		if p.ErrorCode == wire.ErrNotLeaderOrWrongShard && time.Now().Before(notLeaderUntil) {
			time.Sleep(20 * time.Millisecond) // the metadata named it leader; it is taking the role
			continue
		}
		if p.ErrorCode != wire.ErrNone {
			t.Fatalf("fetch from %s at %d: %s %s", addr, offset, p.ErrorCode.Name(), p.ErrorMessage)
		}
		hwm = p.HighWatermark
		recs := p.Records
		for len(recs) > 0 {
			h, err := batch.ParseHeader(recs)
			if err != nil {
				t.Fatalf("fetched batch: %v", err)
			}
			err = batch.Decode(recs[:h.Size()], func(off, _ int64, r *batch.Record) error {
				out[off] = append([]byte(nil), r.Value...)
				return nil
			})
			if err != nil {
				t.Fatalf("decode fetched batch: %v", err)
			}
			offset = h.LastOffset() + 1
			recs = recs[h.Size():]
		}
		if offset >= hwm || len(p.Records) == 0 {
			return out, hwm
		}
	}
}

// TestReplicationLeaderFailover: 3 brokers, RF=3, min.insync.replicas=2, acks=all. kill -9
// the partition's leader: a new leader from the ISR takes over, every acknowledged record
// reads back from it with identical bytes at its offset, produces continue, and the old
// leader rejoins the ISR after a restart.
func TestReplicationLeaderFailover(t *testing.T) {
	tc := startCluster(t, 3)
	ctx := testContext(t, 3*time.Minute)
	if err := tc.c.CreateReplicatedTopic(ctx, "orders", 1, 3, map[string]string{"min.insync.replicas": "2"}); err != nil {
		t.Fatalf("create topic: %v", err)
	}
	v := tc.waitFor("a leader with a full ISR", func(v *cluster.View) bool {
		p := partitionOf(v, "orders")
		return p != nil && p.Leader > 0 && len(p.ISR) == 3
	}, tc.brokers[0])
	leader := partitionOf(v, "orders").Leader
	acked := map[int64][]byte{}
	produce := func(from, n int) {
		for i := from; i < from+n; i++ {
			value := []byte(fmt.Sprintf("record-%06d-%s", i, strings.Repeat("x", i%50)))
			res, err := tc.produce(ctx, "orders", wire.AcksAll, value)
			if err != nil {
				t.Fatalf("produce %d: %v", i, err)
			}
			acked[res.BaseOffset] = value
		}
	}
	start := time.Now()
	produce(0, 200)
	t.Logf("200 acks=all produces one at a time: %v", time.Since(start).Round(time.Millisecond))
	leader = tc.idOf(tc.leader("orders"))

	// A follower refuses clients.
	follower := tc.brokers[0]
	if follower == tc.node(leader) {
		follower = tc.brokers[1]
	}
	if res, err := produceOne(ctx, tc.c, follower.addr, "orders", wire.AcksAll, []byte("wrong broker")); err != nil || res.ErrorCode != wire.ErrNotLeaderOrWrongShard {
		t.Fatalf("produce to a follower: %v %s, want NOT_LEADER_OR_WRONG_SHARD", err, res.ErrorCode.Name())
	}

	old := tc.node(leader)
	old.kill()
	killedAt := time.Now()
	var survivor *broker
	for _, b := range tc.brokers {
		if b != old {
			survivor = b
			break
		}
	}
	v = tc.waitFor("a new leader", func(v *cluster.View) bool {
		p := partitionOf(v, "orders")
		return p != nil && p.Leader > 0 && p.Leader != leader
	}, survivor)
	took := time.Since(killedAt)
	p := partitionOf(v, "orders")
	t.Logf("new leader %d (epoch %d, isr %v) %v after kill -9 of %d", p.Leader, p.LeaderEpoch, p.ISR, took.Round(time.Millisecond), leader)
	if took > failoverMax {
		t.Errorf("failover took %v, want under %v", took, failoverMax)
	}
	newLeader := tc.node(p.Leader)
	produce(200, 100)
	newLeader = tc.leader("orders")
	got, hwm := readAll(t, tc.c, newLeader.addr, "orders")
	for off, want := range acked {
		if !bytes.Equal(got[off], want) {
			t.Fatalf("acknowledged offset %d: read %q from the new leader, want %q", off, got[off], want)
		}
	}
	if int64(len(got)) != hwm {
		t.Errorf("read %d records below the high watermark %d", len(got), hwm)
	}

	// The old leader comes back as a follower, catches up and rejoins the ISR.
	start = time.Now()
	old.restart()
	defer func() {
		t.Logf("the old leader rejoined the ISR %v after its restart", time.Since(start).Round(time.Millisecond))
	}()
	tc.waitFor("the old leader back in the ISR", func(v *cluster.View) bool {
		p := partitionOf(v, "orders")
		return p != nil && slices.Contains(p.ISR, leader) && len(p.ISR) == 3
	}, survivor)

	// The CLI shows it: cluster describe from any broker, topic describe with the
	// replication table (the leader's high watermark comes from the leader).
	out := ok(t, "", nil, "--broker", old.addr, "cluster", "describe").stdout
	for _, want := range []string{"controller leader: node", "topic orders", "partition 0  leader=", "node 1  " + tc.brokers[0].addr} {
		if !strings.Contains(out, want) {
			t.Errorf("cluster describe lacks %q:\n%s", want, out)
		}
	}
	out = ok(t, "", nil, "--broker", old.addr, "topic", "describe", "orders").stdout
	if !strings.Contains(out, "LEADER-EPOCH") || !strings.Contains(out, "LEADER-HWM") {
		t.Errorf("topic describe lacks the replication table:\n%s", out)
	}
}

// TestClusterDescribeSingleBroker: a broker without --node-id is not a cluster; the CLI
// says so, and topic describe prints no replication table.
func TestClusterDescribeSingleBroker(t *testing.T) {
	b := startBroker(t)
	fails(t, "NOT_CONTROLLER", nil, "--broker", b.addr, "cluster", "describe")
	ok(t, "", nil, "--broker", b.addr, "topic", "create", "solo")
	if out := ok(t, "", nil, "--broker", b.addr, "topic", "describe", "solo").stdout; strings.Contains(out, "LEADER-EPOCH") {
		t.Errorf("a single broker printed a replication table:\n%s", out)
	}
	fails(t, "INVALID_REPLICATION_FACTOR", nil, "--broker", b.addr, "topic", "create", "triple", "--replication-factor", "3")
}

// signal sends sig to the broker process (SIGSTOP/SIGCONT to freeze and thaw it).
func (b *broker) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := b.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("signal %v: %v", sig, err)
	}
	if sig == syscall.SIGSTOP {
		t.Cleanup(func() { _ = b.cmd.Process.Signal(syscall.SIGCONT) })
		waitStopped(t, b.cmd.Process.Pid)
	}
}

// waitStopped waits until every thread of process pid is stopped (state T in
// /proc/PID/task/*/stat): kill(2) returns before the group stop has reached each thread,
// and a test that produces right after SIGSTOP must not race a follower's last round.
func waitStopped(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
		stopped := len(tasks) > 0
		for _, f := range tasks {
			data, err := os.ReadFile(f)
			if err != nil {
				continue // the thread ended
			}
			// The state follows the command name in parentheses, which may hold spaces.
			if i := bytes.LastIndexByte(data, ')'); i < 0 || i+2 >= len(data) || data[i+2] != 'T' && data[i+2] != 't' {
				stopped = false
				break
			}
		}
		if stopped {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d not stopped 10s after SIGSTOP", pid)
		}
		time.Sleep(time.Millisecond)
	}
}

// createReplicated creates a 1-partition RF=3 topic and waits for a leader with a full ISR.
func (tc *testCluster) createReplicated(ctx context.Context, topic string, configs map[string]string) {
	tc.t.Helper()
	if err := tc.c.CreateReplicatedTopic(ctx, topic, 1, 3, configs); err != nil {
		tc.t.Fatalf("create topic: %v", err)
	}
	tc.waitFor("a leader with a full ISR", func(v *cluster.View) bool {
		p := partitionOf(v, topic)
		return p != nil && p.Leader > 0 && len(p.ISR) == 3
	}, tc.brokers[0])
	for _, b := range tc.brokers { // every broker has opened its replica
		for {
			var resp wire.MetadataResponse
			err := tc.c.Call(ctx, b.addr, &wire.MetadataRequest{Topics: []string{topic}}, &resp)
			if err == nil && len(resp.Topics) == 1 && resp.Topics[0].ErrorCode == wire.ErrNone {
				break
			}
			if ctx.Err() != nil {
				tc.t.Fatalf("node %d never opened %s: %v", tc.idOf(b), topic, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// followers are the running brokers other than the leader.
func (tc *testCluster) followers(leader *broker) []*broker {
	var out []*broker
	for _, b := range tc.brokers {
		if b != leader {
			out = append(out, b)
		}
	}
	return out
}

// TestReplicationFrozenFollowers: SIGSTOP a follower: it leaves the ISR after the lag time
// and acks=all keeps flowing at ISR=2; SIGCONT: it catches up and rejoins. Then freeze two:
// acks=all is refused with NOT_ENOUGH_REPLICAS (min.insync.replicas=2) while acks=1 still
// appends.
func TestReplicationFrozenFollowers(t *testing.T) {
	tc := startCluster(t, 3)
	ctx := testContext(t, 3*time.Minute)
	tc.createReplicated(ctx, "frozen", map[string]string{"min.insync.replicas": "2"})
	for i := 0; i < 20; i++ {
		if _, err := tc.produce(ctx, "frozen", wire.AcksAll, []byte(fmt.Sprintf("before-%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	leader := tc.leader("frozen")
	leaderID := tc.idOf(leader)
	fs := tc.followers(leader)
	fs[0].signal(t, syscall.SIGSTOP)
	frozenAt := time.Now()
	frozenID := tc.idOf(fs[0])
	tc.waitFor("the frozen follower out of the ISR", func(v *cluster.View) bool {
		p := partitionOf(v, "frozen")
		return p != nil && !slices.Contains(p.ISR, frozenID) && len(p.ISR) == 2
	}, leader)
	t.Logf("frozen follower left the ISR %v after SIGSTOP (lag limit %s)", time.Since(frozenAt).Round(time.Millisecond), clusterLagMax)
	// The leader's metrics say so: ISR 2 of 3 replicas, one under-replicated partition, one
	// shrink; a running follower reports itself as such and leaves the ISR to the leader.
	waitMetric(t, leader, "ringlog_partition_isr_size", 2, "topic", "frozen", "partition", "0")
	waitMetric(t, leader, "ringlog_under_replicated_partitions", 1)
	if m := scrapeMetrics(t, "http://"+leader.admin); m.Sum("ringlog_isr_shrinks_total") < 1 || m.Sum("ringlog_partition_replicas", "topic", "frozen") != 3 {
		t.Errorf("leader's shrinks %v, replicas %v", m.Sum("ringlog_isr_shrinks_total"), m.Sum("ringlog_partition_replicas", "topic", "frozen"))
	}
	if m := scrapeMetrics(t, "http://"+fs[1].admin); m.Sum("ringlog_partition_leader", "topic", "frozen") != 0 || len(m["ringlog_partition_isr_size"]) != 0 && m.Sum("ringlog_partition_isr_size", "topic", "frozen") != 0 {
		t.Errorf("follower reports leadership %v or an ISR", m.Sum("ringlog_partition_leader", "topic", "frozen"))
	} else if rounds, appends := m.Sum("ringlog_replica_fetch_rounds_total"), m.Sum("ringlog_replica_appends_total"); rounds < 1 || appends < 1 || appends > rounds*float64(len(m["ringlog_partition_leader"])) {
		// It copied the 20 records in at least one round; a round appends at most once per
		// partition it holds.
		t.Errorf("running follower counted %v fetch rounds and %v appends", rounds, appends)
	}
	for i := 0; i < 20; i++ {
		if _, err := tc.produce(ctx, "frozen", wire.AcksAll, []byte(fmt.Sprintf("isr2-%d", i))); err != nil {
			t.Fatalf("acks=all at ISR=2: %v", err)
		}
	}
	fs[0].signal(t, syscall.SIGCONT)
	thawedAt := time.Now()
	tc.waitFor("the thawed follower back in the ISR", func(v *cluster.View) bool {
		p := partitionOf(v, "frozen")
		return p != nil && slices.Contains(p.ISR, frozenID) && len(p.ISR) == 3
	}, leader)
	t.Logf("thawed follower rejoined the ISR %v after SIGCONT", time.Since(thawedAt).Round(time.Millisecond))
	waitMetric(t, leader, "ringlog_under_replicated_partitions", 0)
	if m := scrapeMetrics(t, "http://"+leader.admin); m.Sum("ringlog_isr_expands_total") < 1 {
		t.Errorf("leader counted %v ISR expands after the rejoin", m.Sum("ringlog_isr_expands_total"))
	}

	// Two frozen: the controller has no quorum left (every broker is a voter), so the ISR
	// cannot shrink; the leader refuses acks=all once both lag past the limit.
	if tc.idOf(tc.leader("frozen")) != leaderID {
		t.Skip("leadership moved while the follower was frozen; the two-frozen half needs a stable leader")
	}
	fs[0].signal(t, syscall.SIGSTOP)
	fs[1].signal(t, syscall.SIGSTOP)
	// A produce admitted before the lag limit passed waits for replication that cannot
	// come until its timeout (REQUEST_TIMED_OUT, TestReplicationProduceTimeout): each
	// attempt gets its own connection and deadline.
	deadline := time.Now().Add(30 * time.Second)
	for {
		res, err := produceOnConn(leader.addr, wire.AcksAll, "frozen", []byte("refused"), time.Second)
		if err == nil && res.ErrorCode == wire.ErrNotEnoughReplicas {
			t.Logf("acks=all refused: %s", res.ErrorMessage)
			break
		}
		if err == nil && res.ErrorCode != wire.ErrNone && res.ErrorCode != wire.ErrRequestTimedOut || time.Now().After(deadline) {
			t.Fatalf("acks=all with two followers frozen: %v %s %s, want NOT_ENOUGH_REPLICAS", err, res.ErrorCode.Name(), res.ErrorMessage)
		}
	}
	res, err := produceOnConn(leader.addr, wire.AcksLeader, "frozen", []byte("acks=1 alone"), 10*time.Second)
	if err != nil || res.ErrorCode != wire.ErrNone {
		t.Fatalf("acks=1 with two followers frozen: %v %s %s", err, res.ErrorCode.Name(), res.ErrorMessage)
	}
}

// TestReplicationLeaderStall: SIGSTOP the partition leader for twice
// replica.lag.time.max (its broker session outlives it): on SIGCONT its followers, whose
// fetches waited in its sockets, are not taken for lagging — the ISR keeps all three at the
// same partition epoch and the first acks=all produce is taken. Before isr's StallMin, the
// leader's first tick on waking shrank the ISR to itself and refused acks=all
// (NOT_ENOUGH_REPLICAS) until the followers rejoined, in 1 of 4 runs (the tick and the
// followers' next fetches race on waking): on a loaded machine, where a starved broker
// stalls for seconds, that failed replication tests' acks=all produces.
func TestReplicationLeaderStall(t *testing.T) {
	tc := startCluster(t, 3)
	ctx := testContext(t, 3*time.Minute)
	tc.createReplicated(ctx, "stall", map[string]string{"min.insync.replicas": "2"})
	for i := 0; i < 10; i++ {
		if _, err := tc.produce(ctx, "stall", wire.AcksAll, []byte(fmt.Sprintf("before-%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	leader := tc.leader("stall")
	before := partitionOf(tc.view(leader), "stall")
	lagMax, err := time.ParseDuration(clusterLagMax)
	if err != nil {
		t.Fatal(err)
	}
	leader.signal(t, syscall.SIGSTOP)
	time.Sleep(2 * lagMax) // the stall under test, not a wait for an outcome
	leader.signal(t, syscall.SIGCONT)
	res, err := produceOnConn(leader.addr, wire.AcksAll, "stall", []byte("after the stall"), 10*time.Second)
	if err != nil || res.ErrorCode != wire.ErrNone {
		t.Fatalf("acks=all right after the leader's stall: %v %s %s", err, res.ErrorCode.Name(), res.ErrorMessage)
	}
	after := partitionOf(tc.view(leader), "stall")
	t.Logf("partition before the stall %+v, after %+v", before, after)
	if after.Leader != before.Leader || after.PartitionEpoch != before.PartitionEpoch || len(after.ISR) != 3 {
		t.Fatalf("the leader's stall changed the partition from %+v to %+v", before, after)
	}
}

// TestReplicationAcksOneLoss reproduces seed 002's acks=1 loss: records acknowledged with
// acks=1 while the followers lag sit above the high watermark, so no consumer sees them;
// the leader dies, a follower from the ISR takes over without them, and the old leader,
// back as a follower, truncates them (by leader epoch) — while every acks=all record stays.
// Records a follower fetched before the failure survive (acks=1 loses "may", not "must").
func TestReplicationAcksOneLoss(t *testing.T) {
	tc := startCluster(t, 3)
	ctx := testContext(t, 3*time.Minute)
	tc.createReplicated(ctx, "loss", map[string]string{"min.insync.replicas": "2"})
	committed := map[int64][]byte{}
	for i := 0; i < 10; i++ {
		v := []byte(fmt.Sprintf("committed-%d", i))
		res, err := tc.produce(ctx, "loss", wire.AcksAll, v)
		if err != nil {
			t.Fatal(err)
		}
		committed[res.BaseOffset] = v
	}
	leader := tc.leader("loss")
	leaderID := tc.idOf(leader)
	fs := tc.followers(leader)
	f1, f2 := fs[0], fs[1]
	f1.signal(t, syscall.SIGSTOP)
	v := tc.waitFor("the first frozen follower out of the ISR", func(v *cluster.View) bool {
		p := partitionOf(v, "loss")
		return p != nil && len(p.ISR) == 2 && !slices.Contains(p.ISR, tc.idOf(f1))
	}, leader)
	t.Logf("ISR %v after freezing %d", partitionOf(v, "loss").ISR, tc.idOf(f1))
	if tc.idOf(tc.leader("loss")) != leaderID {
		t.Skip("leadership moved while a follower was frozen")
	}
	f2.signal(t, syscall.SIGSTOP)
	lost := map[int64][]byte{}
	lc := leader.client(t)
	for i := 0; i < 5; i++ {
		v := []byte(fmt.Sprintf("acks1-%d", i))
		res, err := produceOne(ctx, lc, leader.addr, "loss", wire.AcksLeader, v)
		if err != nil || res.ErrorCode != wire.ErrNone {
			t.Fatalf("acks=1 produce: %v %s %s", err, res.ErrorCode.Name(), res.ErrorMessage)
		}
		lost[res.BaseOffset] = v
	}
	seen, hwm := readAll(t, lc, leader.addr, "loss")
	for off := range lost {
		if off < hwm {
			t.Fatalf("acks=1 record at %d below the high watermark %d with both followers frozen", off, hwm)
		}
		if _, ok := seen[off]; ok {
			t.Fatalf("a consumer saw the unreplicated acks=1 record at %d", off)
		}
	}
	leader.kill()
	f1.signal(t, syscall.SIGCONT)
	f2.signal(t, syscall.SIGCONT)
	v = tc.waitFor("a new leader", func(v *cluster.View) bool {
		p := partitionOf(v, "loss")
		return p != nil && p.Leader > 0 && p.Leader != leaderID
	}, f2)
	np := partitionOf(v, "loss")
	t.Logf("new leader %d at epoch %d, isr %v (the ISR before the kill held %d and %d)", np.Leader, np.LeaderEpoch, np.ISR, leaderID, tc.idOf(f2))
	f2 = tc.node(np.Leader)
	leader.restart()
	tc.waitFor("the old leader back in the ISR", func(v *cluster.View) bool {
		p := partitionOf(v, "loss")
		return p != nil && slices.Contains(p.ISR, leaderID)
	}, f2)
	got, _ := readAll(t, f2.client(t), f2.addr, "loss")
	for off, want := range committed {
		if !bytes.Equal(got[off], want) {
			t.Fatalf("acks=all record at %d: %q, want %q", off, got[off], want)
		}
	}
	// A fetch the frozen follower had parked may still have carried the first acks=1
	// records to it (the leader answered into its socket buffer; it read them on SIGCONT):
	// those survive. The rest are gone, and their offsets now hold other records or none.
	gone := 0
	for off, v := range lost {
		if !bytes.Equal(got[off], v) {
			gone++
		}
	}
	t.Logf("%d of %d acks=1 records lost in the failover", gone, len(lost))
	if gone == 0 {
		t.Fatalf("every acks=1 record survived; the frozen followers had none of the last ones")
	}
	if !strings.Contains(leader.logText(), "follower truncated its log to the leader's") {
		t.Errorf("the returning old leader did not log a truncation:\n%s", leader.logText())
	}
}

// TestReplicationClientFollowsLeader: the bundled idempotent producer, seeded with a broker
// that does not lead the partition, sends there through the leader it learns from the
// cluster view; kill -9 of the leader mid-stream: it retries on the new leader (found by
// refreshing metadata), and every record is in the log exactly once — the producer's
// sequences carried over, since followers copy the producer state with the batches.
func TestReplicationClientFollowsLeader(t *testing.T) {
	tc := startCluster(t, 3)
	ctx := testContext(t, 3*time.Minute)
	tc.createReplicated(ctx, "follow", map[string]string{"min.insync.replicas": "2"})
	leader := tc.leader("follow")
	seed := tc.followers(leader)[0]
	c := seed.client(t)
	p := c.NewProducer(client.ProducerConfig{Acks: client.AckAll, Retries: 1000, RetryBackoff: 50 * time.Millisecond, Linger: time.Millisecond})
	const total = 3000
	errs := make(chan error, total)
	for i := 0; i < total; i++ {
		if i == total/3 {
			if err := p.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			leader.kill()
		}
		r := &client.Record{Topic: "follow", Partition: 0, Value: []byte(fmt.Sprintf("follow-%05d", i))}
		if err := p.Send(ctx, r, func(_ *client.Record, err error) { errs <- err }); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	if err := p.Close(ctx); err != nil {
		t.Fatalf("close the producer: %v", err)
	}
	for i := 0; i < total; i++ {
		if err := <-errs; err != nil {
			t.Fatalf("a record failed: %v", err)
		}
	}
	got, _ := readAll(t, c, tc.leader("follow").addr, "follow")
	seen := map[string]int{}
	for _, v := range got {
		seen[string(v)]++
	}
	for i := 0; i < total; i++ {
		if n := seen[fmt.Sprintf("follow-%05d", i)]; n != 1 {
			t.Fatalf("record %d is in the log %d times, want once", i, n)
		}
	}
	if len(got) != total {
		t.Fatalf("%d records in the log, want %d", len(got), total)
	}
}
