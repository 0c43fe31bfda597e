package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/ringlog/ringlog/netio/client"
	"github.com/ringlog/ringlog/netio/wire"
	"github.com/ringlog/ringlog/replication/cluster"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
	"golang.org/x/sys/unix"
)

// TestTopicKnownButNotOpened: a broker whose controller metadata holds a replicated topic
// it has not opened (its reconcile is under way; here it can never open it: an immutable
// file sits where the partition's directory goes, so the window stays open) answers as Kafka does
// for a partition its metadata cache knows: both listeners describe the topic from the
// controller's metadata with its leader, Produce is refused NOT_LEADER_OR_FOLLOWER (Kafka)
// / NOT_LEADER_OR_WRONG_SHARD (ringlog), on which clients refresh and retry at the leader,
// and the bundled client seeded with that broker alone sends to the leader. A partition
// the topic does not have is UNKNOWN_TOPIC_OR_PARTITION, at the leader and elsewhere, as
// is a topic nobody knows.
func TestTopicKnownButNotOpened(t *testing.T) {
	tc, kafkaAddrs := startKafkaCluster(t, 3)
	ctx := testContext(t, 2*time.Minute)
	blocked := tc.node(3)
	// Topics t-0..t-9 cannot be opened on node 3; the controller places replicas, so take
	// the first whose replicas leave node 3 out (a replica there could never catch up).
	const candidates = 10
	for i := range candidates {
		blockPath(t, filepath.Join(blocked.dataDir, fmt.Sprintf("unopened-%d-0", i)))
	}
	var topic string
	var leader int32
	for i := 0; i < candidates && topic == ""; i++ {
		name := fmt.Sprintf("unopened-%d", i)
		if err := tc.c.CreateReplicatedTopic(ctx, name, 1, 2, nil); err != nil {
			t.Fatalf("create %s: %v", name, err)
		}
		v := tc.waitFor("node 3 knows "+name+" and its leader", func(v *cluster.View) bool {
			p := partitionOf(v, name)
			return p != nil && p.Leader > 0
		}, blocked)
		if p := partitionOf(v, name); !slices.Contains(p.Replicas, 3) {
			topic, leader = name, p.Leader
		}
	}
	if topic == "" {
		t.Skipf("the controller placed a replica on node 3 for each of %d topics", candidates)
	}
	if tc.view(blocked) == nil {
		t.Fatal("node 3 stopped answering")
	}

	// The ringlog listener of node 3 describes the topic with its leader.
	var md wire.MetadataResponse
	if err := tc.c.Call(ctx, blocked.addr, &wire.MetadataRequest{Topics: []string{topic}, Version: 1}, &md); err != nil {
		t.Fatal(err)
	}
	if len(md.Topics) != 1 || md.Topics[0].ErrorCode != wire.ErrNone || len(md.Topics[0].Partitions) != 1 ||
		md.Topics[0].Partitions[0].Leader != leader || md.Topics[0].Partitions[0].Shard != -1 {
		t.Fatalf("node 3's metadata of %s: %+v, want one partition led by node %d on no shard of node 3", topic, md.Topics, leader)
	}
	// A produce straight to node 3 is refused as by a broker that does not lead it.
	produceAt := func(b *broker, partition int32) wire.ErrorCode {
		t.Helper()
		req := produceRequest(t, topic, wire.AcksLeader, 5*time.Second, []byte("direct"))
		req.Topics[0].Partitions[0].Partition = partition
		var resp wire.ProduceResponse
		if err := tc.c.Call(ctx, b.addr, req, &resp); err != nil {
			t.Fatal(err)
		}
		return resp.Topics[0].Partitions[0].ErrorCode
	}
	if code := produceAt(blocked, 0); code != wire.ErrNotLeaderOrWrongShard {
		t.Errorf("ringlog produce at node 3: %v, want NOT_LEADER_OR_WRONG_SHARD", code)
	}
	for _, b := range []*broker{blocked, tc.node(leader)} {
		if code := produceAt(b, 5); code != wire.ErrUnknownTopicOrPartition {
			t.Errorf("ringlog produce of partition 5 (of 1) at node %d: %v, want UNKNOWN_TOPIC_OR_PARTITION", tc.idOf(b), code)
		}
	}
	// The bundled client seeded with node 3 alone sends to the leader.
	c3 := blocked.client(t)
	p := c3.NewProducer(client.ProducerConfig{Acks: client.AckLeader})
	defer p.Close(context.Background())
	if _, err := p.SendSync(ctx, &client.Record{Topic: topic, Partition: 0, Value: []byte("through node 3")}); err != nil {
		t.Fatalf("SendSync through node 3: %v", err)
	}
	if _, err := p.SendSync(ctx, &client.Record{Topic: "nobody-knows", Partition: 0, Value: []byte("x")}); !errors.Is(err, wire.ErrUnknownTopicOrPartition) {
		t.Errorf("SendSync to a topic nobody knows: %v, want UNKNOWN_TOPIC_OR_PARTITION", err)
	}

	// The Kafka listener of node 3: NOT_LEADER_OR_FOLLOWER; an unknown partition or topic
	// UNKNOWN_TOPIC_OR_PARTITION.
	admin := newKgo(t, kafkaAddrs[2:3])
	waitKafkaPartition(ctx, t, admin.Broker(3), topic, 0, "node 3's Kafka metadata of "+topic, func(p kmsg.MetadataResponseTopicPartition) bool {
		return p.Leader == leader
	})
	if code := produceTo(ctx, t, admin, 3, topic, 0); code != kerr.NotLeaderForPartition.Code {
		t.Errorf("Kafka produce at node 3: code %d, want NOT_LEADER_OR_FOLLOWER", code)
	}
	if code := produceTo(ctx, t, admin, 3, topic, 5); code != kerr.UnknownTopicOrPartition.Code {
		t.Errorf("Kafka produce of partition 5 (of 1) at node 3: code %d, want UNKNOWN_TOPIC_OR_PARTITION", code)
	}
	if code := produceTo(ctx, t, admin, 3, "nobody-knows", 0); code != kerr.UnknownTopicOrPartition.Code {
		t.Errorf("Kafka produce to a topic nobody knows: code %d, want UNKNOWN_TOPIC_OR_PARTITION", code)
	}
}

// blockPath puts an immutable empty file at path (FS_IMMUTABLE_FL, chattr +i): a broker
// can neither create the partition directory there nor remove the file when its failed
// open cleans up. The flag comes off when the test ends. Skips where the file system or
// the process cannot set it.
func blockPath(t *testing.T, path string) {
	t.Helper()
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	const immutable = 0x10 // FS_IMMUTABLE_FL
	setFlags := func(on bool) error {
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		flags, err := unix.IoctlGetUint32(int(f.Fd()), unix.FS_IOC_GETFLAGS)
		if err != nil {
			return err
		}
		if on {
			flags |= immutable
		} else {
			flags &^= immutable
		}
		return unix.IoctlSetPointerInt(int(f.Fd()), unix.FS_IOC_SETFLAGS, int(flags))
	}
	if err := setFlags(true); err != nil {
		t.Skipf("cannot make %s immutable: %v", path, err)
	}
	t.Cleanup(func() {
		if err := setFlags(false); err != nil {
			t.Errorf("%s stays immutable: %v", path, err)
		}
	})
}
