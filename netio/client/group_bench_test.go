package client_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ringlog/ringlog/engine/shard"
	"github.com/ringlog/ringlog/netio/client"
	"github.com/ringlog/ringlog/netio/internal/brokertest"
	"github.com/ringlog/ringlog/netio/wire"
)

// Costs of consumer groups against the real broker in-process (ring driver, per-shard
// listeners, 2 shards, page-cache storage): rebalance times, offset-commit latency and
// rate, and group consumption against partition-assigned consumption. Results and the
// commands are in docs/benchmarks.md.

func startBenchGroupBroker(b *testing.B) *brokertest.Broker {
	b.Helper()
	return brokertest.Start(b, brokertest.Options{Shards: 2, Driver: "ring", ShardListeners: true,
		Groups: shard.GroupsConfig{SessionTimeoutMin: 300 * time.Millisecond}})
}

// Rebalance benchmark settings: members heartbeat every 100 ms, so a running member
// learns of a rebalance within 100 ms (Kafka's default heartbeat is 3 s: its rebalances
// take correspondingly longer).
const (
	rebalancePartitions = 20
	rebalanceMembers    = 10
	rebalanceHeartbeat  = 100 * time.Millisecond
	rebalanceSession    = 3 * time.Second
)

// benchMember is one group member polling on its own goroutine with its own connections.
type benchMember struct {
	c    *client.Client
	g    *client.GroupConsumer
	stop chan struct{}
	done chan struct{}
}

func startBenchMember(b *testing.B, addr, groupID, instance, assignor string) *benchMember {
	c, err := client.New(context.Background(), client.Config{Broker: addr})
	if err != nil {
		b.Fatal(err)
	}
	g, err := c.NewGroupConsumer(client.GroupConfig{Group: groupID, InstanceID: instance, SessionTimeout: rebalanceSession,
		HeartbeatInterval: rebalanceHeartbeat, Assignors: []string{assignor}, AutoOffsetReset: "earliest",
		Consumer: client.ConsumerConfig{MaxWait: 20 * time.Millisecond}})
	if err != nil {
		b.Fatal(err)
	}
	g.Subscribe("orders")
	m := &benchMember{c: c, g: g, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(m.done)
		for {
			select {
			case <-m.stop:
				return
			default:
			}
			if _, err := g.Poll(context.Background()); err != nil {
				b.Error(err)
				return
			}
		}
	}()
	return m
}

// leave stops the member and leaves the group (a dynamic member sends LeaveGroup).
func (m *benchMember) leave() {
	close(m.stop)
	<-m.done
	m.g.Close(context.Background())
	m.c.Close()
}

// vanish stops the member without leaving (a static member's process exiting).
func (m *benchMember) vanish() {
	close(m.stop)
	<-m.done
	m.g.Abandon()
	m.c.Close()
}

// waitSettled waits until groupID is Stable with n members, every partition owned once
// and, when member is set, that member id among them; it returns the generation.
func waitSettled(b *testing.B, c *client.Client, groupID string, n int, member func() string) int32 {
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		d, err := c.DescribeGroup(context.Background(), groupID)
		if err == nil && d.State == "Stable" && len(d.Members) == n {
			owned := 0
			found := member == nil
			want := ""
			if member != nil {
				want = member()
			}
			for _, m := range d.Members {
				tps, _ := client.DecodeMemberAssignment(m.Assignment)
				owned += len(tps)
				found = found || (want != "" && m.MemberID == want)
			}
			if owned == rebalancePartitions && found {
				return d.Generation
			}
		}
		time.Sleep(500 * time.Microsecond)
	}
	b.Fatalf("group %s did not settle with %d members", groupID, n)
	return 0
}

// BenchmarkGroupRebalance: per iteration, 10 members (one static) join a new group at
// once; then one dynamic member leaves; then the static member restarts. Each phase is
// timed from its start until the group is Stable with every partition assigned (and, for
// the restart, the new process holding its member's place).
func BenchmarkGroupRebalance(b *testing.B) {
	for _, assignor := range []string{"range", "cooperative-sticky"} {
		b.Run(assignor, func(b *testing.B) {
			br := startBenchGroupBroker(b)
			ctx := context.Background()
			if err := br.Client.CreateTopic(ctx, "orders", rebalancePartitions, nil); err != nil {
				b.Fatal(err)
			}
			var join, leave, restart time.Duration
			var restartRebalances int
			b.ResetTimer()
			for i := range b.N {
				groupID := fmt.Sprintf("rebalance-%s-%d", assignor, i)
				start := time.Now()
				members := make([]*benchMember, rebalanceMembers)
				for j := range members {
					instance := ""
					if j == 0 {
						instance = "static-0"
					}
					members[j] = startBenchMember(b, br.Addr, groupID, instance, assignor)
				}
				waitSettled(b, br.Client, groupID, rebalanceMembers, nil)
				join += time.Since(start)

				start = time.Now()
				members[rebalanceMembers-1].leave()
				members = members[:rebalanceMembers-1]
				generation := waitSettled(b, br.Client, groupID, rebalanceMembers-1, nil)
				leave += time.Since(start)

				start = time.Now()
				members[0].vanish()
				members[0] = startBenchMember(b, br.Addr, groupID, "static-0", assignor)
				restarted := members[0]
				after := waitSettled(b, br.Client, groupID, rebalanceMembers-1, func() string {
					id, _ := restarted.g.Member()
					return id
				})
				restart += time.Since(start)
				if after != generation {
					restartRebalances++
				}
				for _, m := range members {
					m.leave()
				}
			}
			b.StopTimer()
			n := float64(b.N)
			b.ReportMetric(float64(join.Milliseconds())/n, "ms-join10")
			b.ReportMetric(float64(leave.Milliseconds())/n, "ms-leave1")
			b.ReportMetric(float64(restart.Milliseconds())/n, "ms-static-restart")
			b.ReportMetric(float64(restartRebalances)/n, "static-restart-rebalances")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// groupsOnShard returns n group ids coordinated by shard (FindCoordinator).
func groupsOnShard(b *testing.B, c *client.Client, addr string, shardIndex int32, n int) []string {
	var out []string
	for i := 0; len(out) < n && i < 100*n; i++ {
		id := fmt.Sprintf("commit-%d", i)
		var resp wire.FindCoordinatorResponse
		if err := c.Call(context.Background(), addr, &wire.FindCoordinatorRequest{Group: id}, &resp); err != nil {
			b.Fatal(err)
		}
		if resp.ErrorCode == wire.ErrNone && resp.Shard == shardIndex {
			out = append(out, id)
		}
	}
	return out
}

// BenchmarkGroupOffsetCommit: one-partition offset commits (acks=all appends to
// __consumer_offsets, so each waits for an fdatasync shared by everything that arrived in
// the same loop turn), to groups that all live on shard 0, from `committers` goroutines
// each committing synchronously in a loop: latency percentiles and commits/s of one shard.
func BenchmarkGroupOffsetCommit(b *testing.B) {
	for _, committers := range []int{1, 16} {
		b.Run(fmt.Sprintf("committers=%d", committers), func(b *testing.B) {
			br := startBenchGroupBroker(b)
			ctx := context.Background()
			if err := br.Client.CreateTopic(ctx, "orders", 4, nil); err != nil {
				b.Fatal(err)
			}
			groups := groupsOnShard(b, br.Client, br.Addr, 0, committers)
			latencies := make([][]time.Duration, committers)
			var wg sync.WaitGroup
			per := b.N/committers + 1
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			for w := range committers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					offsets := []client.CommittedOffset{{TopicPartition: client.TopicPartition{Topic: "orders", Partition: 1}}}
					for k := range per {
						offsets[0].Offset = int64(k)
						t0 := time.Now()
						if err := br.Client.CommitOffsets(ctx, groups[w], offsets); err != nil {
							b.Error(err)
							return
						}
						latencies[w] = append(latencies[w], time.Since(t0))
					}
				}()
			}
			wg.Wait()
			elapsed := time.Since(start)
			b.StopTimer()
			all := slices.Concat(latencies...)
			slices.Sort(all)
			pct := func(p float64) float64 { return float64(all[int(p*float64(len(all)-1))].Microseconds()) }
			b.ReportMetric(pct(0.50), "p50-µs")
			b.ReportMetric(pct(0.99), "p99-µs")
			b.ReportMetric(float64(len(all))/elapsed.Seconds(), "commits/s")
		})
	}
}

// BenchmarkGroupCatchUp: a backlog of 64 MiB of 1 KiB records over 12 partitions, read from
// the start by one consumer that assigns all partitions itself, then by a one-member group
// (join, sync, fetch committed offsets, auto commit every 5 s): the cost of group
// membership on catch-up throughput, with the join and without it (from the first record).
const (
	catchUpPartitions = 12
	catchUpRecords    = 64 << 10 // 64 MiB of values
	catchUpValueBytes = 1 << 10
)

// catchUpGroups numbers the groups of BenchmarkGroupCatchUp across runs (-count).
var catchUpGroups int

func BenchmarkGroupCatchUp(b *testing.B) {
	br := startBenchGroupBroker(b)
	ctx := context.Background()
	if err := br.Client.CreateTopic(ctx, "orders", catchUpPartitions, nil); err != nil {
		b.Fatal(err)
	}
	p := br.Client.NewProducer(client.ProducerConfig{Acks: client.AckLeader})
	value := make([]byte, catchUpValueBytes)
	for i := range catchUpRecords {
		if err := p.Send(ctx, &client.Record{Topic: "orders", Partition: int32(i % catchUpPartitions), Value: value}, nil); err != nil {
			b.Fatal(err)
		}
	}
	if err := p.Close(ctx); err != nil {
		b.Fatal(err)
	}
	consumerCfg := client.ConsumerConfig{MaxWait: 100 * time.Millisecond}
	// The two ways alternate within each iteration, so that load from the rest of the
	// machine falls on both alike.
	var assigned, assignedSteady, grouped, steady time.Duration
	b.SetBytes(2 * catchUpRecords * catchUpValueBytes)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		co := br.Client.NewConsumer(consumerCfg)
		for part := range int32(catchUpPartitions) {
			co.Assign("orders", part, client.Earliest())
		}
		start := time.Now()
		first := drain(b, co.Poll)
		assigned += time.Since(start)
		assignedSteady += time.Since(first)

		catchUpGroups++ // a fresh group each time: a used one starts at its committed end
		g, err := br.Client.NewGroupConsumer(client.GroupConfig{Group: fmt.Sprintf("catch-up-%d", catchUpGroups), AutoCommit: true,
			AutoOffsetReset: "earliest", Consumer: consumerCfg})
		if err != nil {
			b.Fatal(err)
		}
		g.Subscribe("orders")
		start = time.Now()
		first = drain(b, g.Poll)
		grouped += time.Since(start)
		steady += time.Since(first)
		g.Close(ctx)
	}
	b.StopTimer()
	mbps := func(d time.Duration) float64 {
		return float64(b.N) * catchUpRecords * catchUpValueBytes / d.Seconds() / 1e6
	}
	b.ReportMetric(mbps(assigned), "assigned-MB/s")
	b.ReportMetric(mbps(grouped), "group-MB/s")
	b.ReportMetric(mbps(assignedSteady), "assigned-after-first-MB/s")
	b.ReportMetric(mbps(steady), "group-after-first-MB/s")
	b.ReportMetric(100*(1-assigned.Seconds()/grouped.Seconds()), "group-cost-%")
	b.ReportMetric(100*(1-assignedSteady.Seconds()/steady.Seconds()), "group-cost-after-first-%")
}

// drain polls until catchUpRecords records came back; it returns when the first came.
func drain(b *testing.B, poll func(context.Context) ([]client.ConsumedRecord, error)) (first time.Time) {
	got := 0
	for got < catchUpRecords {
		recs, err := poll(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		if got == 0 && len(recs) > 0 {
			first = time.Now()
		}
		got += len(recs)
	}
	return first
}
