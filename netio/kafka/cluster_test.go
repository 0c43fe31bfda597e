package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ringlog/ringlog/internal/testport"
	"github.com/ringlog/ringlog/netio/internal/brokertest"
	"github.com/ringlog/ringlog/netio/node"
	"github.com/ringlog/ringlog/replication/cluster"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// startClusterOfOne starts a broker that is a replicated cluster of one (node 7, its own
// controller voter on a loopback port), with its Kafka listener.
func startClusterOfOne(t *testing.T) *brokertest.Broker {
	t.Helper()
	// Drawn below the ephemeral range: a ":0" port closed until the voter binds it can be
	// taken meanwhile by any process's connection.
	raftAddr := testport.Loopback(t)
	return startKafka(t, brokertest.Options{NoClient: true, Node: func(c *node.Config) {
		c.Cluster = &cluster.Config{NodeID: 7, Voters: "7@" + raftAddr, SessionTimeout: 3 * time.Second}
	}})
}

// TestKafkaClusterOfOne: the Kafka listener of a replicated cluster's broker (a cluster of
// one voter here; e2e.TestKafkaClusterFailover runs three processes) describes the cluster
// from the controller — this broker's node id at its Kafka address, the controller, the
// leader and leader epoch the controller assigned — creates topics through the controller,
// deletes through it, and answers OffsetForLeaderEpoch from the partition's epoch checkpoint
// with leader-epoch fencing.
func TestKafkaClusterOfOne(t *testing.T) {
	b := startClusterOfOne(t)
	cl := newClient(t, b)
	ctx := testContext(t)

	// The broker registers with its Kafka address once its voter leads.
	var md *kmsg.MetadataResponse
	for {
		resp, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl)
		if err != nil {
			t.Fatal(err)
		}
		if resp.ControllerID == 7 {
			md = resp
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("no controller: %+v", resp)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(md.Brokers) != 1 || md.Brokers[0].NodeID != 7 || fmt.Sprintf("%s:%d", md.Brokers[0].Host, md.Brokers[0].Port) != b.KafkaAddr {
		t.Fatalf("brokers %+v, want node 7 at %s", md.Brokers, b.KafkaAddr)
	}

	create := func(name string, rf int16, configs ...kmsg.CreateTopicsRequestTopicConfig) int16 {
		req := kmsg.NewPtrCreateTopicsRequest()
		rt := kmsg.NewCreateTopicsRequestTopic()
		rt.Topic, rt.NumPartitions, rt.ReplicationFactor, rt.Configs = name, 1, rf, configs
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			t.Fatal(err)
		}
		return resp.Topics[0].ErrorCode
	}
	for code := create("replicated", 1); code != 0; code = create("replicated", 1) {
		// While the voter settles: NOT_CONTROLLER, or INVALID_REPLICATION_FACTOR until this
		// broker's registration is applied (no live broker to place the replica on).
		if code != kerr.NotController.Code && code != kerr.InvalidReplicationFactor.Code || ctx.Err() != nil {
			t.Fatalf("create through the controller: code %d", code)
		}
	}
	if code := create("too-many", 3); code != kerr.InvalidReplicationFactor.Code {
		t.Fatalf("RF=3 on one broker: code %d, want INVALID_REPLICATION_FACTOR", code)
	}
	req := kmsg.NewPtrMetadataRequest()
	mt := kmsg.NewMetadataRequestTopic()
	mt.Topic = kmsg.StringPtr("replicated")
	req.Topics = append(req.Topics, mt)
	var p kmsg.MetadataResponseTopicPartition
	for {
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Topics) == 1 && resp.Topics[0].ErrorCode == 0 && resp.Topics[0].Partitions[0].Leader == 7 {
			p = resp.Topics[0].Partitions[0]
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("no leader for the replicated topic: %+v", resp.Topics)
		}
		time.Sleep(20 * time.Millisecond)
	}
	epoch := p.LeaderEpoch
	if len(p.Replicas) != 1 || p.Replicas[0] != 7 || len(p.ISR) != 1 || len(p.OfflineReplicas) != 0 {
		t.Fatalf("partition %+v, want replicas = ISR = [7]", p)
	}

	producer := newClient(t, b, kgo.DefaultProduceTopic("replicated"), kgo.RequiredAcks(kgo.AllISRAcks()))
	for i := 0; i < 3; i++ {
		if err := producer.ProduceSync(ctx, &kgo.Record{Value: []byte{byte(i)}}).FirstErr(); err != nil {
			t.Fatalf("acks=all produce: %v", err)
		}
	}
	got := consume(t, b, "replicated", 3)
	if got[0].LeaderEpoch != epoch {
		t.Errorf("records carry leader epoch %d, want the leader's %d", got[0].LeaderEpoch, epoch)
	}
	stale := epoch - 1
	if stale == -1 { // -1 means "unchecked"; any other epoch below the leader's is stale
		stale = -2
	}
	for _, tc := range []struct {
		name           string
		current, asked int32
		code           int16
		end            int64
	}{
		{"the current epoch ends at the log end", epoch, epoch, 0, 3},
		{"unchecked", -1, epoch, 0, 3},
		{"a newer epoch is unknown here", epoch, epoch + 1, 0, -1},
		{"stale current epoch", stale, epoch, kerr.FencedLeaderEpoch.Code, -1},
		{"future current epoch", epoch + 1, epoch, kerr.UnknownLeaderEpoch.Code, -1},
	} {
		got := offsetForLeaderEpoch(ctx, t, cl, "replicated", tc.current, tc.asked)
		if got.ErrorCode != tc.code || got.EndOffset != tc.end {
			t.Errorf("%s: %+v, want code %d end %d", tc.name, got, tc.code, tc.end)
		}
	}

	// acks=all takes the ringlog listener's path: min.insync.replicas above the ISR (one
	// broker here) is NOT_ENOUGH_REPLICAS; acks=1 is appended.
	if code := create("insync", 1, kmsg.CreateTopicsRequestTopicConfig{Name: "min.insync.replicas", Value: kmsg.StringPtr("2")}); code != 0 {
		t.Fatalf("create with min.insync.replicas=2: code %d", code)
	}
	strict := newClient(t, b, kgo.DefaultProduceTopic("insync"), kgo.RequiredAcks(kgo.AllISRAcks()), kgo.RecordRetries(0))
	err := strict.ProduceSync(ctx, &kgo.Record{Value: []byte("x")}).FirstErr()
	for errors.Is(err, kerr.NotLeaderForPartition) && ctx.Err() == nil {
		// The new topic's leadership reaches the broker's shard a moment after the create
		// answers (and this client does not retry).
		time.Sleep(20 * time.Millisecond)
		err = strict.ProduceSync(ctx, &kgo.Record{Value: []byte("x")}).FirstErr()
	}
	if !errors.Is(err, kerr.NotEnoughReplicas) {
		t.Fatalf("acks=all under min.insync.replicas=2 with one replica: %v, want NOT_ENOUGH_REPLICAS", err)
	}
	loose := newClient(t, b, kgo.DefaultProduceTopic("insync"), kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite())
	if err := loose.ProduceSync(ctx, &kgo.Record{Value: []byte("x")}).FirstErr(); err != nil {
		t.Fatalf("acks=1 under min.insync.replicas=2: %v", err)
	}

	dt := kmsg.NewPtrDeleteTopicsRequest()
	dt.TopicNames = []string{"replicated"}
	if resp, err := dt.RequestWith(ctx, cl); err != nil || resp.Topics[0].ErrorCode != 0 {
		t.Fatalf("delete through the controller: %v %+v", err, resp)
	}
	if b.Core.Topic("replicated") != nil {
		t.Fatal("the topic is still open here after DeleteTopics answered")
	}
}

func offsetForLeaderEpoch(ctx context.Context, t *testing.T, cl *kgo.Client, topic string, current, epoch int32) kmsg.OffsetForLeaderEpochResponseTopicPartition {
	t.Helper()
	req := kmsg.NewPtrOffsetForLeaderEpochRequest()
	rt := kmsg.NewOffsetForLeaderEpochRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewOffsetForLeaderEpochRequestTopicPartition()
	rp.CurrentLeaderEpoch, rp.LeaderEpoch = current, epoch
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil || len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		t.Fatalf("OffsetForLeaderEpoch: %v %+v", err, resp)
	}
	return resp.Topics[0].Partitions[0]
}
