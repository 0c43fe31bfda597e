package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ringlog/ringlog/engine"
	"github.com/ringlog/ringlog/netio/wire"
	"github.com/ringlog/ringlog/replication/cluster"
	"github.com/ringlog/ringlog/replication/controller"
)

// catalogTopic is a topic's entry in a broker's catalog.json (engine/catalog.go's format).
type catalogTopic struct {
	Config map[string]string `json:"config"`
	ID     string            `json:"id"`
}

// catalogOf reads broker b's catalog from its data directory.
func catalogOf(t *testing.T, b *broker) map[string]catalogTopic {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(b.dataDir, "catalog.json"))
	if err != nil {
		t.Fatalf("read catalog: %v", err)
	}
	var cf struct {
		Topics map[string]catalogTopic `json:"topics"`
	}
	if err := json.Unmarshal(data, &cf); err != nil {
		t.Fatalf("decode catalog: %v", err)
	}
	return cf.Topics
}

// waitUntil polls ok until it holds, failing the test after a minute.
func waitUntil(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(soakScaled(60 * time.Second)); !ok(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// hasPartitionDir reports whether b's data directory holds partition 0 of topic.
func hasPartitionDir(b *broker, topic string) bool {
	_, err := os.Stat(engine.PartitionDir(b.dataDir, topic, 0))
	return err == nil
}

// TestReplicationDeleteRecreate: 3 brokers, an RF=3 topic with records. One broker is
// killed; `ringlog topic delete` on another deletes the topic through the controller and
// every running broker's data directory loses it; the killed broker deletes its copy when
// it returns. The topic is recreated under the same name (a new topic ID) and only the new
// records are read. Then `ringlog topic config` changes the topic's config on every broker.
func TestReplicationDeleteRecreate(t *testing.T) {
	tc := startCluster(t, 3)
	ctx := testContext(t, 4*time.Minute)
	const topic = "gone"
	tc.createReplicated(ctx, topic, map[string]string{"min.insync.replicas": "2"})
	for i := range 20 {
		if _, err := tc.produce(ctx, topic, wire.AcksAll, []byte(fmt.Sprintf("old-%d", i))); err != nil {
			t.Fatalf("produce old-%d: %v", i, err)
		}
	}
	oldID := tc.view(tc.brokers[0]).Metadata.Topics[topic].ID
	for _, b := range tc.brokers {
		waitUntil(t, fmt.Sprintf("node %d holds the old records' directory", tc.idOf(b)), func() bool { return hasPartitionDir(b, topic) })
		if id := catalogOf(t, b)[topic].ID; id != oldID {
			t.Fatalf("node %d's catalog names topic id %q, the controller %q", tc.idOf(b), id, oldID)
		}
	}

	seed, down := tc.brokers[0], tc.brokers[2]
	down.kill()
	deleteStart := time.Now()
	out := ok(t, "", nil, "--broker", seed.addr, "topic", "delete", topic).stdout
	t.Logf("topic delete answered in %v", time.Since(deleteStart).Round(time.Millisecond))
	if !strings.Contains(out, "deleted topic "+topic) {
		t.Fatalf("topic delete printed %q", out)
	}
	if hasPartitionDir(seed, topic) {
		t.Fatal("the broker that answered the delete still holds the partition directory")
	}
	for _, b := range tc.brokers[:2] {
		waitUntil(t, fmt.Sprintf("node %d deleted its copy", tc.idOf(b)), func() bool {
			_, inCatalog := catalogOf(t, b)[topic]
			return !hasPartitionDir(b, topic) && !inCatalog
		})
	}
	t.Logf("every running broker deleted its copy %v after the delete was sent", time.Since(deleteStart).Round(time.Millisecond))
	if !hasPartitionDir(down, topic) {
		t.Fatal("the killed broker's copy vanished while it was down")
	}
	v := tc.view(seed)
	if n := len(v.Metadata.DeletedTopics); n != 1 || v.Metadata.DeletedTopics[0].ID != oldID {
		t.Fatalf("tombstones %+v, want the old topic id %s", v.Metadata.DeletedTopics, oldID)
	}

	restartAt := time.Now()
	down.restart()
	waitUntil(t, "the returning broker deleted its copy", func() bool {
		_, inCatalog := catalogOf(t, down)[topic]
		return !hasPartitionDir(down, topic) && !inCatalog
	})
	t.Logf("the returning broker deleted its copy %v after its restart began", time.Since(restartAt).Round(time.Millisecond))
	tc.waitFor("every broker live again", func(v *cluster.View) bool {
		return !v.Metadata.Brokers[tc.idOf(down)].Fenced
	}, seed)

	tc.createReplicated(ctx, topic, map[string]string{"min.insync.replicas": "2"})
	newID := tc.view(seed).Metadata.Topics[topic].ID
	if newID == oldID || len(newID) != 32 {
		t.Fatalf("recreated topic id %q (old %q)", newID, oldID)
	}
	tc.lastLeader = nil
	want := map[int64][]byte{}
	for i := range 5 {
		value := []byte(fmt.Sprintf("new-%d", i))
		res, err := tc.produce(ctx, topic, wire.AcksAll, value)
		if err != nil {
			t.Fatalf("produce %s: %v", value, err)
		}
		want[res.BaseOffset] = value
	}
	got, _ := readAll(t, tc.c, tc.leader(topic).addr, topic)
	if len(got) != len(want) {
		t.Fatalf("read %d records after the recreate, want %d: %v", len(got), len(want), got)
	}
	for off, value := range want {
		if string(got[off]) != string(value) {
			t.Fatalf("offset %d holds %q, want %q", off, got[off], value)
		}
	}
	for _, b := range tc.brokers {
		waitUntil(t, fmt.Sprintf("node %d holds the new incarnation", tc.idOf(b)), func() bool {
			return catalogOf(t, b)[topic].ID == newID
		})
	}

	// A config change reaches every replica's catalog.
	ok(t, "", nil, "--broker", tc.brokers[1].addr, "topic", "config", topic, "--set", "retention.ms=123456", "--delete", "min.insync.replicas")
	for _, b := range tc.brokers {
		waitUntil(t, fmt.Sprintf("node %d applied the config", tc.idOf(b)), func() bool {
			cfg := catalogOf(t, b)[topic].Config
			_, mis := cfg["min.insync.replicas"]
			return cfg["retention.ms"] == "123456" && !mis
		})
	}
	if cfg := tc.view(seed).Metadata.Topics[topic].Config; cfg["retention.ms"] != "123456" {
		t.Fatalf("controller config %v", cfg)
	}
	fails(t, "INVALID_CONFIG", nil, "--broker", seed.addr, "topic", "config", topic, "--set", "retention.ms=soon")

	// A client's controller command sent to a broker whose voter does not lead is
	// forwarded to the leader's broker.
	leaderID := tc.view(seed).ControllerLeader
	var other *broker
	for _, b := range tc.brokers {
		if tc.idOf(b) != leaderID {
			other = b
		}
	}
	cmd, _ := json.Marshal(&controller.Command{Type: controller.CmdElectPreferred, Reassign: &controller.ReassignRequest{Topic: topic}})
	answer, err := tc.c.ControllerSubmitAt(ctx, other.addr, cmd)
	if err != nil {
		t.Fatalf("controller command at node %d (leader %d): %v", tc.idOf(other), leaderID, err)
	}
	var p controller.Partition
	if err := json.Unmarshal(answer, &p); err != nil || p.Leader != p.Replicas[0] {
		t.Fatalf("elect-preferred through node %d answered %s (%v)", tc.idOf(other), answer, err)
	}
	// One a broker marks as forwarded is never forwarded again.
	cmd, _ = json.Marshal(&controller.Command{Type: controller.CmdElectPreferred, Forwarded: true, Reassign: &controller.ReassignRequest{Topic: topic}})
	if _, err := tc.c.ControllerSubmitAt(ctx, other.addr, cmd); !errors.Is(err, wire.ErrNotController) {
		t.Fatalf("a forwarded command at a broker that does not lead: %v, want NOT_CONTROLLER", err)
	}
}

// TestReplicationNonVoter: 3 controller voters and a fourth broker outside the quorum (no
// raft: it follows the metadata from the brokers). An RF=3 topic placed with the
// non-voter as leader takes acks=all produces; kill -9 of the non-voter moves leadership to
// the ISR, and the non-voter returns, registers again and rejoins the ISR; every
// acknowledged record reads back.
func TestReplicationNonVoter(t *testing.T) {
	tc := startClusterWith(t, 3, 1, nil)
	ctx := testContext(t, 3*time.Minute)
	observer := tc.node(4)
	if _, err := os.Stat(filepath.Join(observer.dataDir, "controller")); err == nil {
		t.Fatal("the broker outside the quorum keeps a raft directory")
	}
	// The controller places partition 0 starting at fnv32a(name) % brokers in id order:
	// pick a name whose leader is node 4.
	topic := ""
	for i := 0; topic == ""; i++ {
		h := fnv.New32a()
		name := fmt.Sprintf("observed-%d", i)
		h.Write([]byte(name))
		if h.Sum32()%4 == 3 {
			topic = name
		}
	}
	if err := tc.c.CreateReplicatedTopic(ctx, topic, 1, 3, map[string]string{"min.insync.replicas": "2"}); err != nil {
		t.Fatal(err)
	}
	tc.waitFor("node 4 leading with a full ISR", func(v *cluster.View) bool {
		p := partitionOf(v, topic)
		return p != nil && p.Leader == 4 && len(p.ISR) == 3
	}, observer)
	want := map[int64][]byte{}
	produce := func(what string, n int) {
		for i := range n {
			value := []byte(fmt.Sprintf("%s-%d", what, i))
			res, err := tc.produce(ctx, topic, wire.AcksAll, value)
			if err != nil {
				t.Fatalf("produce %s: %v", value, err)
			}
			want[res.BaseOffset] = value
		}
	}
	produce("on-4", 50)
	if tc.lastLeader != observer {
		t.Fatalf("the produces went to node %d, not the non-voter", tc.idOf(tc.lastLeader))
	}

	observer.kill()
	killedAt := time.Now()
	tc.lastLeader = nil
	v := tc.waitFor("a new leader from the ISR", func(v *cluster.View) bool {
		p := partitionOf(v, topic)
		return p != nil && p.Leader > 0 && p.Leader != 4
	}, tc.brokers[0])
	t.Logf("kill -9 of the non-voter: node %d leads %v later", partitionOf(v, topic).Leader, time.Since(killedAt).Round(time.Millisecond))
	produce("after-kill", 50)

	restartAt := time.Now()
	observer.restart()
	tc.waitFor("the non-voter live and back in the ISR", func(v *cluster.View) bool {
		p := partitionOf(v, topic)
		return !v.Metadata.Brokers[4].Fenced && p != nil && len(p.ISR) == 3
	}, tc.brokers[0])
	t.Logf("the non-voter is back in the ISR %v after its restart began", time.Since(restartAt).Round(time.Millisecond))
	if v := tc.view(observer); v == nil || v.ControllerLeader == 0 || v.Metadata.Topics[topic] == nil {
		t.Fatalf("the non-voter's own view after its return: %+v", v)
	}
	produce("rejoined", 20)
	got, _ := readAll(t, tc.c, tc.leader(topic).addr, topic)
	for off, value := range want {
		if string(got[off]) != string(value) {
			t.Fatalf("offset %d holds %q, want %q", off, got[off], value)
		}
	}
}
