package e2e

import (
	"net"
	"testing"
	"time"

	"github.com/ringlog/ringlog/netio/wire"
	"github.com/ringlog/ringlog/replication/cluster"
)

// TestReplicaFetchWake: a follower's ReplicaFetch parked on a real leader (three ringlogd
// processes, an RF=3 topic, nothing new to copy) is answered when a ReplicaFetchWake
// follows it on the same connection — long before its five-minute long-poll — and the
// connection stays: the wake is answered after the fetch, and the next fetch on it is
// served. This is what a follower's lane kick sends (cluster.FetchWaker) instead of
// dropping the lane's connection.
func TestReplicaFetchWake(t *testing.T) {
	tc := startCluster(t, 3)
	ctx := testContext(t, 2*time.Minute)
	const topic = "lane-wake"
	tc.createReplicated(ctx, topic, nil)
	if _, err := tc.produce(ctx, topic, wire.AcksAll, []byte("one")); err != nil {
		t.Fatal(err)
	}
	var p *cluster.View
	p = tc.waitFor("the record replicated to the whole ISR", func(v *cluster.View) bool {
		pt := partitionOf(v, topic)
		return pt != nil && pt.Leader > 0 && len(pt.ISR) == 3 && v.HighWatermarks[topic+"/0"] == 1
	}, tc.leader(topic))
	part := partitionOf(p, topic)
	follower := int32(1 + part.Leader%3)

	nc, err := net.Dial("tcp", tc.node(part.Leader).addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if dl, ok := ctx.Deadline(); ok {
		nc.SetDeadline(dl) // a hang guard: the long-poll is five minutes, the test's context two
	}
	fetch := &wire.ReplicaFetchRequest{ReplicaID: follower, MaxWaitMs: int32((5 * time.Minute).Milliseconds()), MinBytes: 1, MaxBytes: 1 << 20,
		ProtocolVersion: 2, Topics: []wire.ReplicaFetchTopic{{Topic: topic, Partitions: []wire.ReplicaFetchPartition{
			{Partition: 0, CurrentLeaderEpoch: part.LeaderEpoch, FetchOffset: 1, MaxBytes: 1 << 20}}}}}
	var frames []byte
	frames = wire.AppendRequest(frames, 1, fetch)
	frames = wire.AppendRequest(frames, 2, &wire.ReplicaFetchWakeRequest{ReplicaID: follower})
	if _, err := nc.Write(frames); err != nil {
		t.Fatal(err)
	}
	read := func(corr uint32, resp wire.Message) {
		t.Helper()
		h, payload, _, err := wire.ReadResponse(nc, nil, 64<<20)
		if err != nil {
			t.Fatalf("read answer %d: %v (the parked fetch was not woken)", corr, err)
		}
		if h.CorrelationID != corr || h.ErrorCode != wire.ErrNone {
			msg, _ := wire.DecodeErrorPayload(payload)
			t.Fatalf("answer %+v %q, want correlation id %d without error", h, msg, corr)
		}
		wire.SetWireVersion(resp, h.Version)
		if err := resp.ReadFrom(payload); err != nil {
			t.Fatal(err)
		}
	}
	var fr wire.ReplicaFetchResponse
	read(1, &fr)
	if len(fr.Topics) != 1 || len(fr.Topics[0].Partitions) != 1 || fr.Topics[0].Partitions[0].ErrorCode != wire.ErrNone ||
		len(fr.Topics[0].Partitions[0].Records) != 0 {
		t.Fatalf("woken fetch answered %+v, want partition 0 without error and without records", fr)
	}
	var wr wire.ReplicaFetchWakeResponse
	read(2, &wr)
	t.Logf("wake answered, woken=%v (false: it arrived before the fetch parked, which then answered at once)", wr.Woken)

	// The connection serves on: a fetch that does not wait is answered.
	fetch.MaxWaitMs = 0
	if _, err := nc.Write(wire.AppendRequest(nil, 3, fetch)); err != nil {
		t.Fatal(err)
	}
	read(3, &fr)
}
