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
func TestReplicationProduceTimeout(t *testing.T) {
	tc := startCluster(t, 3)
	ctx := testContext(t, 2*time.Minute)
	tc.createReplicated(ctx, "slow", nil)
	if _, err := tc.produce(ctx, "slow", wire.AcksAll, []byte("before")); err != nil {
		t.Fatal(err)
	}
	leader := tc.leader("slow")
	fs := tc.followers(leader)
	for _, f := range fs {
		f.signal(t, syscall.SIGSTOP)
	}
	conn, err := net.DialTimeout("tcp", leader.addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(30 * time.Second))
	const timeout = time.Second
	var out []byte
	out = wire.AppendRequest(out, 1, produceRequest(t, "slow", wire.AcksAll, timeout, []byte("never replicated")))
	out = wire.AppendRequest(out, 2, produceRequest(t, "slow", wire.AcksLeader, timeout, []byte("behind it")))
	sent := time.Now()
	if _, err := conn.Write(out); err != nil {
		t.Fatal(err)
	}
	res := readProduceResponse(t, conn, 1)
	took := time.Since(sent)
	if res.ErrorCode != wire.ErrRequestTimedOut {
		t.Fatalf("acks=all with both followers frozen: %s %s, want REQUEST_TIMED_OUT", res.ErrorCode.Name(), res.ErrorMessage)
	}
	if took < timeout || took > timeout+5*time.Second {
		t.Fatalf("REQUEST_TIMED_OUT after %v, want about %v", took, timeout)
	}
	t.Logf("acks=all answered REQUEST_TIMED_OUT after %v (timeout %v): %s", took.Round(time.Millisecond), timeout, res.ErrorMessage)
	if res := readProduceResponse(t, conn, 2); res.ErrorCode != wire.ErrNone {
		t.Fatalf("acks=1 behind the timed-out produce: %s %s", res.ErrorCode.Name(), res.ErrorMessage)
	}
	for _, f := range fs {
		f.signal(t, syscall.SIGCONT)
	}
	if _, err := tc.produce(ctx, "slow", wire.AcksAll, []byte("after")); err != nil {
		t.Fatalf("acks=all after SIGCONT: %v", err)
	}
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
	files, err := filepath.Glob(filepath.Join(b.dataDir, topic+"-0", "*.log"))
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
// 10 % above it; the test also fails below half of it, which would mean the copy is not
// shaped by the throttle at all), measured on the new replica's segment files from its
// first fetched chunk to its last; the in-sync follower before the move was not throttled.
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
	if got > 1.1*rate || got < 0.5*rate {
		t.Fatalf("copy rate %.0f B/s, want within 10 %% of the throttle %d B/s", got, rate)
	}
	tc.waitFor("the reassignment complete", func(v *cluster.View) bool {
		p := partitionOf(v, "copied")
		return p != nil && p.TargetReplicas == nil && slices.Contains(p.ISR, fresh)
	}, tc.brokers[0])
}
