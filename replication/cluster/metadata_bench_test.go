package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/ringlog/ringlog/engine/shard"
	"github.com/ringlog/ringlog/internal/testport"
	"github.com/ringlog/ringlog/replication/controller"
)

// metadataBenchPartitions are the topic sizes the metadata benchmarks run at: the
// 16-partition bench topic, 1,000, and issue 14's 10,000-partition topic.
var metadataBenchPartitions = []int32{16, 1000, 10000}

// benchVoter starts a real single-voter controller (raft on a loopback port, its log in a
// temp dir), registers brokers 1 and 2 and creates topic "big" of partitions partitions
// placed on broker 2 alone, then wraps it in a Manager of node 1: every partition of "big"
// is one this broker holds no replica of (a follower-side or foreign partition, the case
// CheckLeader answers from the controller's metadata).
func benchVoter(b *testing.B, partitions int32) *Manager {
	b.Helper()
	ctl, err := controller.Start(controller.Config{NodeID: 1, Voters: "1@" + testport.Loopback(b), Dir: b.TempDir(),
		SessionTimeout: time.Hour, HeartbeatTimeout: 100 * time.Millisecond, ElectionTimeout: 100 * time.Millisecond,
		LeaderLeaseTimeout: 50 * time.Millisecond, CommitTimeout: 5 * time.Millisecond, LogOutput: io.Discard})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ctl.Shutdown() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	submit := func(cmd *controller.Command) {
		for {
			res, err := ctl.Submit(cmd, 10*time.Second)
			if err == nil && res.Err == nil {
				return
			}
			if err == nil || !errors.Is(err, controller.ErrNotController) || ctx.Err() != nil {
				b.Fatalf("submit %+v: %v %v", cmd, err, res.Err)
			}
			time.Sleep(10 * time.Millisecond) // the single voter is electing itself
		}
	}
	submit(&controller.Command{Type: controller.CmdRegisterBroker, Broker: &controller.BrokerRegistration{ID: 2, Address: "127.0.0.1:2"}})
	submit(&controller.Command{Type: controller.CmdCreateTopic, Topic: &controller.TopicRequest{Name: "big", Partitions: partitions, ReplicationFactor: 1}})
	submit(&controller.Command{Type: controller.CmdRegisterBroker, Broker: &controller.BrokerRegistration{ID: 1, Address: "127.0.0.1:1"}})
	if n := len(ctl.Metadata().Topics["big"].Partitions); n != int(partitions) {
		b.Fatalf("topic has %d partitions, want %d", n, partitions)
	}
	return &Manager{cfg: Config{NodeID: 1}, ctl: ctl, log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		fetchers: map[fetcherKey]*fetcher{}, stop: make(chan struct{})}
}

// BenchmarkCheckLeaderNotLocal: CheckLeader of a partition of a replicated topic this
// broker holds no replica of, which every produce and fetch of such a partition asks (the
// answer is NOT_LEADER), at 16, 1,000 and 10,000 partitions in the topic.
func BenchmarkCheckLeaderNotLocal(b *testing.B) {
	for _, n := range metadataBenchPartitions {
		b.Run(fmt.Sprintf("partitions=%d", n), func(b *testing.B) {
			m := benchVoter(b, n)
			tp := shard.TopicPartition{Topic: "big", Partition: n / 2}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if err := m.CheckLeader(tp); !errors.Is(err, ErrNotLeader) {
					b.Fatalf("CheckLeader: %v, want ErrNotLeader", err)
				}
			}
		})
	}
}

// BenchmarkMetadataRequest: what one client Metadata request reads of the controller's
// metadata on each listener — the ringlog listener's View (leaders, replicas, ISR, brokers,
// the high watermarks of the partitions led here) and the Kafka listener's Metadata —
// walking every partition of the topic as the handlers do, at 16, 1,000 and 10,000
// partitions.
func BenchmarkMetadataRequest(b *testing.B) {
	for _, n := range metadataBenchPartitions {
		m := benchVoter(b, n)
		walk := func(md *controller.Metadata) int32 {
			var sum int32
			for _, p := range md.Topics["big"].Partitions {
				sum += p.Leader + p.LeaderEpoch + int32(len(p.ISR))
			}
			return sum
		}
		want := walk(m.Metadata())
		b.Run(fmt.Sprintf("listener=ringlog/partitions=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				if v := m.View(); walk(v.Metadata) != want {
					b.Fatal("the metadata changed")
				}
			}
		})
		b.Run(fmt.Sprintf("listener=kafka/partitions=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				if walk(m.Metadata()) != want {
					b.Fatal("the metadata changed")
				}
			}
		})
	}
}
