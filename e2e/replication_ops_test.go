package e2e

import (
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

	"github.com/ringlog/ringlog/engine"
	"github.com/ringlog/ringlog/engine/batch"
	"github.com/ringlog/ringlog/netio/wire"
	"github.com/ringlog/ringlog/replication/cluster"
)

// produceRequest is a one-record produce to partition 0 of topic.
func produceRequest(t *testing.T, topic string, acks int16, timeout time.Duration, value []byte) *wire.ProduceRequest {
	t.Helper()
	b := batch.NewBuilder(batch.BuilderOptions{})
	b.Append(time.Now().UnixMilli(), nil, value, nil)
	records, err := b.Build(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &wire.ProduceRequest{Acks: acks, TimeoutMs: int32(timeout / time.Millisecond),
		Topics: []wire.ProduceTopic{{Topic: topic, Partitions: []wire.ProducePartition{{Partition: 0, Records: records}}}}}
}

// readProduceResponse reads the next response on conn, which must answer correlation id
// corr, and returns its one partition.
func readProduceResponse(t *testing.T, conn net.Conn, corr uint32) wire.ProduceResponsePartition {
	t.Helper()
	h, payload, _, err := wire.ReadResponse(conn, nil, wire.FrameBytesMaxDefault)
	if err != nil {
		t.Fatalf("read the answer to request %d: %v", corr, err)
	}
	if h.CorrelationID != corr || h.ErrorCode != wire.ErrNone {
		t.Fatalf("answer %+v, want correlation id %d without a frame error", h, corr)
	}
	var resp wire.ProduceResponse
	if err := resp.ReadFrom(payload); err != nil {
		t.Fatal(err)
	}
	return resp.Topics[0].Partitions[0]
}

// TestReplicationProduceTimeout: with both followers frozen (and with them the controller's
// quorum, so the ISR cannot shrink) an acks=all produce admitted under
// min.insync.replicas=1 can never commit. The leader answers it REQUEST_TIMED_OUT once the
// request's timeout passes, and the acks=1 produce pipelined behind it on the same
// connection is answered right after; after SIGCONT acks=all works again.
//
// The premise needs the full ISR at the moment the second follower stops. On a loaded
// machine a follower can fall more than the lag limit (2 s) behind just before, and the ISR
// then shrinks legitimately while a quorum still exists, so that acks=all is rightly
// acknowledged by the smaller ISR. The test checks the leader's committed ISR around the
// freeze and replays the scenario (at most three times) when it changed; an acks=all
// success with the full ISR still committed fails at once.
func TestReplicationProduceTimeout(t *testing.T) {
	tc := startCluster(t, 3)
	ctx := testContext(t, 2*time.Minute)
	tc.createReplicated(ctx, "slow", nil)
	if _, err := tc.produce(ctx, "slow", wire.AcksAll, []byte("before")); err != nil {
		t.Fatal(err)
	}
	leader := tc.leader("slow")
	fs := tc.followers(leader)
	isrOf := func() int {
		if v := tc.view(leader); v != nil {
			if p := partitionOf(v, "slow"); p != nil {
				return len(p.ISR)
			}
		}
		return -1
	}
	const attempts = 3
	for attempt := 1; ; attempt++ {
		tc.waitFor("a full ISR", func(v *cluster.View) bool {
			p := partitionOf(v, "slow")
			return p != nil && len(p.ISR) == 3
		}, leader)
		for _, f := range fs {
			f.signal(t, syscall.SIGSTOP)
		}
		thaw := func(why string) {
			if attempt == attempts {
				t.Fatalf("attempt %d: %s", attempt, why)
			}
			t.Logf("attempt %d: %s; thawing the followers and trying again", attempt, why)
			for _, f := range fs {
				f.signal(t, syscall.SIGCONT)
			}
		}
		if n := isrOf(); n != 3 {
			thaw(fmt.Sprintf("the ISR had %d members once both followers stopped (a follower lagged before the freeze)", n))
			continue
		}
		res, took := produceTimingOut(t, leader.addr, "slow", time.Second)
		if res.ErrorCode == wire.ErrNone {
			if n := isrOf(); n != 3 {
				thaw(fmt.Sprintf("acks=all was acknowledged by an ISR of %d", n))
				continue
			}
		}
		if res.ErrorCode != wire.ErrRequestTimedOut {
			t.Fatalf("acks=all with both followers frozen: %s %s, want REQUEST_TIMED_OUT", res.ErrorCode.Name(), res.ErrorMessage)
		}
		t.Logf("acks=all answered REQUEST_TIMED_OUT after %v: %s", took.Round(time.Millisecond), res.ErrorMessage)
		break
	}
	for _, f := range fs {
		f.signal(t, syscall.SIGCONT)
	}
	if _, err := tc.produce(ctx, "slow", wire.AcksAll, []byte("after")); err != nil {
		t.Fatalf("acks=all after SIGCONT: %v", err)
	}
}

// produceTimingOut sends an acks=all produce to topic with the given timeout to addr and, pipelined
// behind it on the same connection, an acks=1 produce; it returns the acks=all answer and
// how long it took, and fails unless the acks=1 produce is answered without error and the
// acks=all answer (if it is REQUEST_TIMED_OUT) came about one timeout after sending.
func produceTimingOut(t *testing.T, addr, topic string, timeout time.Duration) (wire.ProduceResponsePartition, time.Duration) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(30 * time.Second))
	var out []byte
	out = wire.AppendRequest(out, 1, produceRequest(t, topic, wire.AcksAll, timeout, []byte("never replicated")))
	out = wire.AppendRequest(out, 2, produceRequest(t, topic, wire.AcksLeader, timeout, []byte("behind it")))
	sent := time.Now()
	if _, err := conn.Write(out); err != nil {
		t.Fatal(err)
	}
	res := readProduceResponse(t, conn, 1)
	took := time.Since(sent)
	if res.ErrorCode == wire.ErrRequestTimedOut && (took < timeout || took > timeout+5*time.Second) {
		t.Fatalf("REQUEST_TIMED_OUT after %v, want about %v", took, timeout)
	}
	if res := readProduceResponse(t, conn, 2); res.ErrorCode != wire.ErrNone {
		t.Fatalf("acks=1 behind the acks=all produce: %s %s", res.ErrorCode.Name(), res.ErrorMessage)
	}
	return res, took
}

// TestReplicationReassignAndElectLeader moves an RF=2 partition with the CLI onto the broker
// that held no replica (dropping one of the old ones), elects that broker its preferred
// leader, and checks that every acknowledged record, from before and after the move, reads
// back from the new leader.
func TestReplicationReassignAndElectLeader(t *testing.T) {
	tc := startCluster(t, 3)
	ctx := testContext(t, 2*time.Minute)
	if err := tc.c.CreateReplicatedTopic(ctx, "moved", 1, 2, nil); err != nil {
		t.Fatal(err)
	}
	v := tc.waitFor("a leader with a full ISR", func(v *cluster.View) bool {
		p := partitionOf(v, "moved")
		return p != nil && p.Leader > 0 && len(p.ISR) == 2
	}, tc.brokers[0])
	old := partitionOf(v, "moved").Replicas
	var fresh int32 // the broker without a replica
	for id := int32(1); id <= 3; id++ {
		if !slices.Contains(old, id) {
			fresh = id
		}
	}
	want := map[int64][]byte{}
	var by []string
	produce := func(what string, n int) {
		for i := 0; i < n; i++ {
			value := []byte(fmt.Sprintf("%s-%d", what, i))
			res, err := tc.produce(ctx, "moved", wire.AcksAll, value)
			if err != nil {
				t.Fatalf("produce %s: %v", value, err)
			}
			want[res.BaseOffset] = value
			by = append(by, fmt.Sprintf("%d@%d", res.BaseOffset, tc.idOf(tc.lastLeader)))
		}
	}
	produce("before", 50)

	seed := tc.brokers[0].addr
	target := []int32{fresh, old[0]} // the fresh broker preferred; old[1] dropped
	targetFlag := strconv.Itoa(int(target[0])) + "," + strconv.Itoa(int(target[1]))
	fails(t, "INVALID_REQUEST", nil, "--broker", seed, "partition", "reassign", "moved", "--partition", "0", "--replicas", "1,9")
	out := ok(t, "", nil, "--broker", seed, "partition", "reassign", "moved", "--partition", "0", "--replicas", targetFlag, "--wait", "30s").stdout
	if !strings.Contains(out, "complete") {
		t.Fatalf("reassign printed %q, want a complete reassignment", out)
	}
	tc.waitFor("the target assignment", func(v *cluster.View) bool {
		p := partitionOf(v, "moved")
		return p != nil && slices.Equal(p.Replicas, target) && p.TargetReplicas == nil && p.Leader > 0
	}, tc.brokers[0])
	out = ok(t, "", nil, "--broker", seed, "partition", "elect-leader", "moved").stdout
	if !strings.Contains(out, fmt.Sprintf("leader=%d ", fresh)) {
		t.Fatalf("elect-leader printed %q, want leader=%d", out, fresh)
	}
	tc.lastLeader = nil
	produce("after", 50)
	// A new leader's high watermark can trail what the old one acknowledged (the old leader
	// counted the new one's last fetch; the new one learns it when a follower fetches from it).
	// A produce the old leader answered NOT_LEADER after the new one had copied it is
	// committed and retried (these raw produces are not idempotent): the log may hold it
	// twice, so only the acknowledged offsets are checked.
	end := int64(0)
	for off := range want {
		end = max(end, off+1)
	}
	got, hwm := readAll(t, tc.c, tc.node(fresh).addr, "moved")
	for deadline := time.Now().Add(10 * time.Second); hwm < end && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
		got, hwm = readAll(t, tc.c, tc.node(fresh).addr, "moved")
	}
	if hwm < end {
		t.Fatalf("new leader's high watermark %d, want %d; produced %v", hwm, end, by)
	}
	for off, value := range want {
		if string(got[off]) != string(value) {
			t.Fatalf("offset %d on the new leader: %q, want %q", off, got[off], value)
		}
	}
	if extra := hwm - int64(len(want)); extra > 0 {
		t.Logf("%d record(s) in the log were not acknowledged (answered NOT_LEADER, committed, retried)", extra)
	}
	t.Logf("moved %v -> %v, preferred leader %d elected; %d records read back", old, target, fresh, len(want))
}

// logBytes is the size of the segment files of partition 0 of topic in b's data directory.
func logBytes(t *testing.T, b *broker, topic string) int64 {
	t.Helper()
	return partitionBytes(t, b, topic, 0)
}

// partitionBytes is logBytes of partition p.
func partitionBytes(t *testing.T, b *broker, topic string, p int) int64 {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(b.dataDir, topic+"-"+strconv.Itoa(p), "*.log"))
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, f := range files {
		if st, err := os.Stat(f); err == nil {
			n += st.Size()
		}
	}
	return n
}

// TestReplicationThrottle: with --replication-throttled-bytes-per-second on every broker,
// the new replica of a reassignment copies the partition at the throttle's rate (within
// 10 % above it; slower is logged, not failed: a loaded machine slows the copy, to 61 % of
// the rate once at load 30, and replication/cluster TestThrottle checks the budget both
// ways on an injected clock), measured on the new replica's segment files from its first
// fetched chunk to its last; the in-sync follower before the move was not throttled.
func TestReplicationThrottle(t *testing.T) {
	const rate = 2 << 20
	const total = 6 << 20
	tc := startCluster(t, 3, "--replication-throttled-bytes-per-second", strconv.Itoa(rate))
	ctx := testContext(t, 2*time.Minute)
	if err := tc.c.CreateReplicatedTopic(ctx, "copied", 1, 2, nil); err != nil {
		t.Fatal(err)
	}
	v := tc.waitFor("a leader with a full ISR", func(v *cluster.View) bool {
		p := partitionOf(v, "copied")
		return p != nil && p.Leader > 0 && len(p.ISR) == 2
	}, tc.brokers[0])
	old := partitionOf(v, "copied").Replicas
	var fresh int32
	for id := int32(1); id <= 3; id++ {
		if !slices.Contains(old, id) {
			fresh = id
		}
	}
	value := make([]byte, 64<<10)
	started := time.Now()
	for i := 0; i < total/len(value); i++ {
		value[0] = byte(i)
		if _, err := tc.produce(ctx, "copied", wire.AcksAll, value); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d MiB produced with acks=all at RF=2 (the in-sync follower unthrottled) in %v", total>>20, time.Since(started).Round(time.Millisecond))
	leaderBytes := logBytes(t, tc.node(partitionOf(v, "copied").Leader), "copied")

	ok(t, "", nil, "--broker", tc.brokers[0].addr, "partition", "reassign", "copied", "--partition", "0",
		"--replicas", strconv.Itoa(int(fresh))+","+strconv.Itoa(int(old[0])))
	target := tc.node(fresh)
	var t0, t1 time.Time
	var s0, s1 int64
	deadline := time.Now().Add(60 * time.Second)
	for s1 < leaderBytes {
		if time.Now().After(deadline) {
			t.Fatalf("the new replica holds %d of %d bytes after a minute", s1, leaderBytes)
		}
		time.Sleep(10 * time.Millisecond)
		n := logBytes(t, target, "copied")
		if n > 0 && t0.IsZero() {
			t0, s0 = time.Now(), n
		}
		if n > s1 {
			t1, s1 = time.Now(), n
		}
	}
	got := float64(s1-s0) / t1.Sub(t0).Seconds()
	t.Logf("new replica copied %d bytes in %v after its first chunk of %d: %.2f MiB/s, throttle %.2f MiB/s (%.1f %%)",
		s1-s0, t1.Sub(t0).Round(time.Millisecond), s0, got/(1<<20), float64(rate)/(1<<20), 100*got/rate)
	if got > 1.1*rate {
		t.Fatalf("copy rate %.0f B/s, want at most 10 %% above the throttle %d B/s", got, rate)
	}
	if got < 0.5*rate {
		t.Logf("copy rate %.0f B/s, below half the throttle %d B/s: the machine slowed the copy", got, rate)
	}
	tc.waitFor("the reassignment complete", func(v *cluster.View) bool {
		p := partitionOf(v, "copied")
		return p != nil && p.TargetReplicas == nil && slices.Contains(p.ISR, fresh)
	}, tc.brokers[0])
}

// TestReplicationThrottleLists: Kafka's per-replica throttle lists, on each side. Every
// broker runs the side's throttle at 2 MiB/s; the partitions of an RF=2 topic hold 6 MiB
// (partition 0) and 12 MiB (partition 1) and are reassigned onto the broker that lacks them
// at once. The topic's leader.replication.throttled.replicas (naming partition 0's leader)
// or follower.replication.throttled.replicas (naming partition 0's new replica) lists only
// partition 0: its new replica copies at most 10 % above the rate (slower is logged: at
// load 30 it copied at 61 % once), while partition 1's, not listed, copies unthrottled: from the reassign
// command to its last byte it takes less time than the throttle lets any copy of its bytes
// take (throttledSecondsMin: 5.8 s; unthrottled it took 0.6-1.7 s at load 21-25 on 2
// vCPUs, 3.5 s once at load 30, the CLI's start included). The test used to ask for twice
// the rate over 6 MiB, 1.5 s.
func TestReplicationThrottleLists(t *testing.T) {
	const rate = 2 << 20
	const total = 6 << 20
	// throttledSecondsMin is the least time a throttled copy of n bytes takes: the throttle
	// lets at most rate × time plus two responses of a tenth of a second's budget through
	// (replication/cluster/throttle.go).
	throttledSecondsMin := func(n int64) float64 { return float64(n-2*rate/10) / rate }
	for _, side := range []struct{ name, flag, key string }{
		{"leader", "--leader-replication-throttled-rate", engine.ConfigLeaderThrottledReplicas},
		{"follower", "--replication-throttled-bytes-per-second", engine.ConfigFollowerThrottledReplicas},
	} {
		t.Run(side.name, func(t *testing.T) {
			tc := startCluster(t, 3, side.flag, strconv.Itoa(rate))
			ctx := testContext(t, 2*time.Minute)
			const topic = "lists"
			if err := tc.c.CreateReplicatedTopic(ctx, topic, 2, 2, nil); err != nil {
				t.Fatal(err)
			}
			v := tc.waitFor("leaders with full ISRs", func(v *cluster.View) bool {
				tt := v.Metadata.Topics[topic]
				return tt != nil && len(tt.Partitions) == 2 && tt.Partitions[0].Leader > 0 && tt.Partitions[1].Leader > 0 &&
					len(tt.Partitions[0].ISR) == 2 && len(tt.Partitions[1].ISR) == 2
			}, tc.brokers[0])
			parts := v.Metadata.Topics[topic].Partitions
			value := make([]byte, 64<<10)
			var fresh [2]int32
			var leaderBytes [2]int64
			for p := range 2 {
				for id := int32(1); id <= 3; id++ {
					if !slices.Contains(parts[p].Replicas, id) {
						fresh[p] = id
					}
				}
				leader := tc.node(parts[p].Leader)
				for i := 0; i < (1+p)*total/len(value); i++ {
					value[0] = byte(i)
					// The leader may not have opened the new topic yet: retry what is retriable.
					for retry := 0; ; retry++ {
						res, err := producePartition(ctx, tc.c, leader.addr, topic, int32(p), wire.AcksAll, value)
						if err == nil && res.ErrorCode == wire.ErrNone {
							break
						}
						if err == nil {
							err = fmt.Errorf("%s: %s", res.ErrorCode.Name(), res.ErrorMessage)
						}
						if retry == 300 || err != nil && res.ErrorCode == wire.ErrNone || !res.ErrorCode.Retriable() {
							t.Fatalf("produce to partition %d: %v", p, err)
						}
						time.Sleep(100 * time.Millisecond)
					}
				}
				leaderBytes[p] = partitionBytes(t, leader, topic, p)
			}
			listed := parts[0].Leader // the leader's side lists the leader's replica
			if side.name == "follower" {
				listed = fresh[0] // the follower's side the replica that copies
			}
			ok(t, "", nil, "--broker", tc.brokers[0].addr, "topic", "config", topic, "--set", fmt.Sprintf("%s=0:%d", side.key, listed))
			var asked [2]time.Time
			for p := range 2 {
				asked[p] = time.Now()
				ok(t, "", nil, "--broker", tc.brokers[0].addr, "partition", "reassign", topic, "--partition", strconv.Itoa(p),
					"--replicas", fmt.Sprintf("%d,%d", fresh[p], parts[p].Replicas[0]))
			}
			// Each new replica's segment bytes from its first chunk to its last (the
			// unlisted one's from the reassignment's request: at full speed its first chunk
			// may be all of it).
			var t0, t1 [2]time.Time
			var s0, s1 [2]int64
			deadline := time.Now().Add(60 * time.Second)
			for s1[0] < leaderBytes[0] || s1[1] < leaderBytes[1] {
				if time.Now().After(deadline) {
					t.Fatalf("the new replicas hold %v of %v bytes after a minute", s1, leaderBytes)
				}
				time.Sleep(10 * time.Millisecond)
				for p := range 2 {
					n := partitionBytes(t, tc.node(fresh[p]), topic, p)
					if n > 0 && t0[p].IsZero() {
						t0[p], s0[p] = time.Now(), n
					}
					if n > s1[p] {
						t1[p], s1[p] = time.Now(), n
					}
				}
			}
			var got [2]float64
			got[0] = float64(s1[0]-s0[0]) / max(t1[0].Sub(t0[0]).Seconds(), 0.001)
			t.Logf("partition 0 (listed): new replica on broker %d copied %d bytes in %v after its first chunk of %d: %.2f MiB/s, throttle %.2f MiB/s (%.1f %%)",
				fresh[0], s1[0]-s0[0], t1[0].Sub(t0[0]).Round(time.Millisecond), s0[0], got[0]/(1<<20), float64(rate)/(1<<20), 100*got[0]/rate)
			got[1] = float64(s1[1]) / max(t1[1].Sub(asked[1]).Seconds(), 0.001)
			t.Logf("partition 1 (not listed): new replica on broker %d copied %d bytes in %v from the reassign command: %.2f MiB/s, throttle %.2f MiB/s (%.1f %%)",
				fresh[1], s1[1], t1[1].Sub(asked[1]).Round(time.Millisecond), got[1]/(1<<20), float64(rate)/(1<<20), 100*got[1]/rate)
			if got[0] > 1.1*rate {
				t.Errorf("listed replica copied at %.0f B/s, want at most 10 %% above the throttle %d B/s", got[0], rate)
			}
			if got[0] < 0.5*rate {
				t.Logf("listed replica copied at %.0f B/s, below half the throttle %d B/s: the machine slowed the copy", got[0], rate)
			}
			if took, least := t1[1].Sub(asked[1]).Seconds(), throttledSecondsMin(s1[1]); took >= least {
				t.Errorf("unlisted replica copied %d bytes in %.2f s, want it unthrottled (faster than the %.2f s the throttle's %d B/s allows)", s1[1], took, least, rate)
			}
			tc.waitFor("both reassignments complete", func(v *cluster.View) bool {
				tt := v.Metadata.Topics[topic]
				return tt != nil && tt.Partitions[0].TargetReplicas == nil && tt.Partitions[1].TargetReplicas == nil &&
					slices.Contains(tt.Partitions[0].ISR, fresh[0]) && slices.Contains(tt.Partitions[1].ISR, fresh[1])
			}, tc.brokers[0])
		})
	}
}
