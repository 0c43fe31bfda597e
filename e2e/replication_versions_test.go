package e2e

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ringlog/ringlog/netio"
	"github.com/ringlog/ringlog/netio/client"
	"github.com/ringlog/ringlog/netio/wire"
	"github.com/ringlog/ringlog/replication/cluster"
	"github.com/ringlog/ringlog/replication/controller"
)

// clusterFlag is the value of flag in broker b's command line.
func clusterFlag(t *testing.T, b *broker, flag string) string {
	t.Helper()
	i := slices.Index(b.flags, flag)
	if i < 0 || i+1 >= len(b.flags) {
		t.Fatalf("broker has no %s flag", flag)
	}
	return b.flags[i+1]
}

// TestReplicationProtocolVersionRefused: a broker whose protocol range excludes the
// cluster's finalized version (--testing-protocol-versions 1-1 simulates the previous
// release; the cluster finalized 2 at its first registration) is refused registration,
// with the error logged on its side and on the controller leader's; it takes no replica,
// leadership or ISR place while the cluster keeps creating topics and taking acks=all
// writes. A peer request carrying a version it does not speak gets
// UNSUPPORTED_PROTOCOL_VERSION, and cluster describe and finalize-version show and keep the
// finalized version.
func TestReplicationProtocolVersionRefused(t *testing.T) {
	tc := startCluster(t, 3)
	ctx := testContext(t, 3*time.Minute)
	voters := clusterFlag(t, tc.brokers[0], "--controller-voters")
	old := startBroker(t, "--node-id", "4", "--controller-voters", voters, "--cluster-seeds", tc.brokers[0].addr,
		"--broker-session-timeout", clusterSessionTimeout, "--shard-ports", "off", "--testing-protocol-versions", "1-1")
	waitLog(t, "the controller refused this broker's registration", old)
	waitLog(t, "refused a broker's registration", tc.brokers...)
	t.Logf("node 4: %s", logLine(old, "refused this broker's registration"))

	const topic = "versions"
	tc.createReplicated(ctx, topic, map[string]string{"min.insync.replicas": "2"})
	if _, err := tc.produce(ctx, topic, wire.AcksAll, []byte("while node 4 is refused")); err != nil {
		t.Fatalf("acks=all produce with a refused broker around: %v", err)
	}
	v := tc.view(tc.brokers[0])
	if b, ok := v.Metadata.Brokers[4]; ok {
		t.Fatalf("refused node 4 is in the metadata: %+v", b)
	}
	for _, p := range v.Metadata.Topics[topic].Partitions {
		if slices.Contains(p.Replicas, 4) || slices.Contains(p.ISR, 4) || p.Leader == 4 {
			t.Fatalf("refused node 4 holds a place in %+v", p)
		}
	}
	// A peer request at a protocol version the peer does not speak: refused, not misread.
	conn, err := netio.DialPeer(ctx, old.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, err = conn.Controller(ctx, cluster.OpMetadata, 2, nil)
	if !errors.Is(err, wire.ErrUnsupportedProtocolVersion) {
		t.Fatalf("Controller request at protocol 2 to a broker speaking 1-1: %v", err)
	}
	t.Logf("peer request refused: %v", err)

	addrs := tc.brokers[0].addr
	describe := ok(t, "", nil, "cluster", "describe", "--broker", addrs).stdout
	for _, want := range []string{"finalized protocol version: 2", "protocol=1-2  live"} {
		if !strings.Contains(describe, want) {
			t.Fatalf("cluster describe lacks %q:\n%s", want, describe)
		}
	}
	fails(t, "INVALID_FINALIZED_VERSION", nil, "cluster", "finalize-version", "1", "--broker", addrs)
	fails(t, "UNSUPPORTED_PROTOCOL_VERSION", nil, "cluster", "finalize-version", "3", "--broker", addrs)
	if out := ok(t, "", nil, "cluster", "finalize-version", "2", "--broker", addrs).stdout; !strings.Contains(out, "finalized protocol version: 2") {
		t.Fatalf("finalize-version 2: %q", out)
	}
}

// TestReplicationProtocolUpgrade runs the documented upgrade: a cluster of brokers that
// speak only version 1 (the previous release, simulated) keeps producer names in each
// broker's file and replicates with version 0 frames; the brokers are restarted one at a
// time on the full range (still finalized at 1, replication keeps working); then
// `ringlog cluster finalize-version 2`, after which a producer name is kept by the
// controller: initialised at two brokers, one id at two epochs.
func TestReplicationProtocolUpgrade(t *testing.T) {
	tc := startCluster(t, 3, "--testing-protocol-versions", "1-1")
	ctx := testContext(t, 4*time.Minute)
	const topic, name = "upgrade", "upgrader"
	tc.createReplicated(ctx, topic, nil)
	if f := tc.view(tc.brokers[0]).Metadata.Finalized(); f != 1 {
		t.Fatalf("cluster of version 1 brokers finalized at %d", f)
	}
	initAt := func(b *broker) client.ProducerIdentity {
		t.Helper()
		id, err := b.client(t).InitProducerID(ctx, name, client.ProducerIdentity{ID: -1, Epoch: -1})
		if err != nil {
			t.Fatalf("InitProducerId at node %d: %v", tc.idOf(b), err)
		}
		return id
	}
	if a, b := initAt(tc.brokers[0]), initAt(tc.brokers[1]); a.ID == b.ID || a.Epoch != 0 || b.Epoch != 0 {
		t.Fatalf("finalized at 1 names stay per broker: %+v at node 1, %+v at node 2", a, b)
	}

	for i, b := range tc.brokers { // roll: each broker restarted on this build's range
		epoch := tc.view(tc.brokers[(i+1)%3]).Metadata.Brokers[tc.idOf(b)].SessionEpoch
		b.stop()
		b.flags = slices.Delete(b.flags, slices.Index(b.flags, "--testing-protocol-versions"), slices.Index(b.flags, "--testing-protocol-versions")+2)
		b.restart()
		tc.waitFor("the restarted broker registered on the full range, the ISR full again", func(v *cluster.View) bool {
			me := v.Metadata.Brokers[tc.idOf(b)]
			p := partitionOf(v, topic)
			return me != nil && !me.Fenced && me.SessionEpoch > epoch && me.ProtocolMax == controller.ProtocolVersionMax && p != nil && len(p.ISR) == 3
		}, tc.brokers[(i+1)%3])
		if _, err := tc.produce(ctx, topic, wire.AcksAll, []byte("rolled "+b.addr)); err != nil {
			t.Fatalf("acks=all produce after rolling node %d: %v", tc.idOf(b), err)
		}
	}
	if f := tc.view(tc.brokers[0]).Metadata.Finalized(); f != 1 {
		t.Fatalf("finalized %d before the operator bumped it", f)
	}
	ok(t, "", nil, "cluster", "finalize-version", "2", "--broker", tc.brokers[2].addr)
	for _, b := range tc.brokers { // each broker keeps names in the controller from when its view has the finalize
		tc.waitFor("finalized at 2", func(v *cluster.View) bool { return v.Metadata.Finalized() == 2 }, b)
	}
	if _, err := tc.produce(ctx, topic, wire.AcksAll, []byte("after finalize")); err != nil {
		t.Fatalf("acks=all produce after the finalize (version 1 frames): %v", err)
	}
	a, b := initAt(tc.brokers[0]), initAt(tc.brokers[1])
	if a.ID != b.ID || b.Epoch != a.Epoch+1 {
		t.Fatalf("finalized at 2, names are the controller's: %+v at node 1, %+v at node 2", a, b)
	}
}
