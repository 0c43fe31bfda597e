package e2e

import (
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/ringlog/ringlog/engine/batch"
	"github.com/ringlog/ringlog/netio/wire"
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
