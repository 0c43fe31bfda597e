package client_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ringlog/ringlog/engine/shard"
	"github.com/ringlog/ringlog/netio/client"
	"github.com/ringlog/ringlog/netio/internal/brokertest"
	"github.com/ringlog/ringlog/netio/wire"
)

// Group consumers against the real broker in-process (the e2e suite runs the same against
// ringlogd processes).

func startGroupBroker(t *testing.T, dir string) *brokertest.Broker {
	t.Helper()
	return brokertest.Start(t, brokertest.Options{Shards: 2, Dir: dir, Driver: "ring",
		Groups: shard.GroupsConfig{SessionTimeoutMin: 300 * time.Millisecond, OffsetsPartitions: 4}})
}

func produceN(t *testing.T, c *client.Client, topic string, n int) {
	t.Helper()
	ctx := ctxT(t)
	p := c.NewProducer(client.ProducerConfig{})
	for i := range n {
		if err := p.Send(ctx, &client.Record{Topic: topic, Partition: -1, Key: []byte(fmt.Sprint(i)), Value: []byte(fmt.Sprint(i))}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

func newMember(t *testing.T, addr, groupID string, assignors ...string) (*client.Client, *client.GroupConsumer) {
	t.Helper()
	c, err := client.New(context.Background(), client.Config{Broker: addr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	g, err := c.NewGroupConsumer(client.GroupConfig{Group: groupID, SessionTimeout: 1500 * time.Millisecond, AutoCommit: true,
		AutoCommitInterval: 100 * time.Millisecond, AutoOffsetReset: "earliest", Assignors: assignors,
		Consumer: client.ConsumerConfig{MaxWait: 50 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	g.Subscribe("orders")
	return c, g
}

// TestGroupConsumersSharePartitions: three members of one group read every record
// exactly once between them, with eager and cooperative assignors.
func TestGroupConsumersSharePartitions(t *testing.T) {
	for _, assignor := range []string{"range", "cooperative-sticky"} {
		t.Run(assignor, func(t *testing.T) {
			b := startGroupBroker(t, t.TempDir())
			ctx := ctxT(t)
			if err := b.Client.CreateTopic(ctx, "orders", 6, nil); err != nil {
				t.Fatal(err)
			}
			const records = 900
			produceN(t, b.Client, "orders", records)
			var mu sync.Mutex
			seen := map[string]int{}
			var wg sync.WaitGroup
			stop := make(chan struct{})
			errs := make(chan error, 3)
			for i := range 3 {
				_, g := newMember(t, b.Addr, "billing", assignor)
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer g.Close(context.Background())
					time.Sleep(time.Duration(i) * 200 * time.Millisecond) // join one after another
					for {
						select {
						case <-stop:
							return
						default:
						}
						recs, err := g.Poll(ctx)
						if err != nil {
							errs <- err
							return
						}
						mu.Lock()
						for _, r := range recs {
							seen[fmt.Sprintf("%d@%d", r.Partition, r.Offset)]++
						}
						mu.Unlock()
					}
				}()
			}
			deadline := time.Now().Add(20 * time.Second)
			for {
				mu.Lock()
				n := len(seen)
				mu.Unlock()
				if n == records {
					break
				}
				select {
				case err := <-errs:
					t.Fatal(err)
				default:
				}
				if time.Now().After(deadline) {
					t.Fatalf("read %d of %d records", n, records)
				}
				time.Sleep(20 * time.Millisecond)
			}
			// Stop the members once they have settled into one generation that assigns
			// every partition (a cooperative rebalance first revokes, then assigns in a
			// generation of its own): stopped in a rebalance, a member's last commit may
			// be refused. A sleep of 500 ms stood for this wait before.
			deadline = time.Now().Add(20 * time.Second)
			for !settled(ctx, t, b.Client, "billing", 3, 6) {
				select {
				case err := <-errs:
					t.Fatal(err)
				default:
				}
				if time.Now().After(deadline) {
					t.Fatal("the members did not settle into a generation that assigns every partition")
				}
				time.Sleep(20 * time.Millisecond) // a poll
			}
			close(stop)
			wg.Wait()
			for k, n := range seen {
				if n != 1 {
					t.Errorf("record %s read %d times", k, n)
				}
			}
			d, err := b.Client.DescribeGroup(ctx, "billing")
			if err != nil || (d.State != "Empty" && d.State != "PreparingRebalance") {
				t.Fatalf("after every member left: %+v, %v", d, err)
			}
			committed, err := b.Client.FetchCommitted(ctx, "billing")
			if err != nil {
				t.Fatal(err)
			}
			var total int64
			for _, o := range committed {
				total += o.Offset
			}
			if total != records {
				t.Fatalf("committed offsets sum to %d, want %d: %+v", total, records, committed)
			}
		})
	}
}

// settled reports whether group is Stable with members members whose assignments hold
// partitions partitions between them.
func settled(ctx context.Context, t *testing.T, c *client.Client, group string, members, partitions int) bool {
	t.Helper()
	d, err := c.DescribeGroup(ctx, group)
	if err != nil {
		t.Fatal(err)
	}
	if d.State != "Stable" || len(d.Members) != members {
		return false
	}
	n := 0
	for _, m := range d.Members {
		owned, err := client.DecodeMemberAssignment(m.Assignment)
		if err != nil {
			t.Fatalf("member %s's assignment: %v", m.MemberID, err)
		}
		n += len(owned)
	}
	return n == partitions
}

// TestGroupAdminCalls: list, describe, reset (commit outside the group) and delete.
func TestGroupAdminCalls(t *testing.T) {
	b := startGroupBroker(t, t.TempDir())
	ctx := ctxT(t)
	if err := b.Client.CreateTopic(ctx, "orders", 2, nil); err != nil {
		t.Fatal(err)
	}
	err := b.Client.CommitOffsets(ctx, "ops", []client.CommittedOffset{{TopicPartition: client.TopicPartition{Topic: "orders", Partition: 1}, Offset: 5}})
	if err != nil {
		t.Fatal(err)
	}
	groups, err := b.Client.ListGroups(ctx)
	if err != nil || len(groups) != 1 || groups[0].Group != "ops" || groups[0].State != "Empty" {
		t.Fatalf("list: %+v, %v", groups, err)
	}
	got, err := b.Client.FetchCommitted(ctx, "ops", client.TopicPartition{Topic: "orders", Partition: 1}, client.TopicPartition{Topic: "orders", Partition: 0})
	if err != nil || len(got) != 2 || got[0].Offset != 5 || got[1].Offset != -1 {
		t.Fatalf("fetch committed: %+v, %v", got, err)
	}
	_, g := newMember(t, b.Addr, "ops")
	if _, err := g.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.Client.DeleteGroup(ctx, "ops"); !errors.Is(err, wire.ErrNonEmptyGroup) {
		t.Fatalf("delete a group with a member: %v, want NON_EMPTY_GROUP", err)
	}
	err = b.Client.CommitOffsets(ctx, "ops", []client.CommittedOffset{{TopicPartition: client.TopicPartition{Topic: "orders", Partition: 1}, Offset: 0}})
	if !errors.Is(err, wire.ErrUnknownMemberID) && !errors.Is(err, wire.ErrIllegalGeneration) {
		t.Fatalf("reset of a group with a member: %v, want refused", err)
	}
	if err := g.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.Client.DeleteGroup(ctx, "ops"); err != nil {
		t.Fatal(err)
	}
	if err := b.Client.DeleteGroup(ctx, "ops"); !errors.Is(err, wire.ErrGroupIDNotFound) {
		t.Fatalf("delete again: %v, want GROUP_ID_NOT_FOUND", err)
	}
}

// TestCooperativeRevokesOnlyMovedPartitions: when a second member joins, an eager (range)
// member revokes everything it owned; a cooperative-sticky member revokes only the
// partitions that move to the newcomer and keeps reading the rest.
func TestCooperativeRevokesOnlyMovedPartitions(t *testing.T) {
	for _, tc := range []struct {
		assignor    string
		wantRevoked int // of the first member's 6 partitions
	}{{"range", 6}, {"cooperative-sticky", 3}} {
		t.Run(tc.assignor, func(t *testing.T) {
			b := startGroupBroker(t, t.TempDir())
			ctx := ctxT(t)
			if err := b.Client.CreateTopic(ctx, "orders", 6, nil); err != nil {
				t.Fatal(err)
			}
			var mu sync.Mutex
			var revoked []client.TopicPartition
			c, err := client.New(ctx, client.Config{Broker: b.Addr})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			first, err := c.NewGroupConsumer(client.GroupConfig{Group: "g", SessionTimeout: 1500 * time.Millisecond, Assignors: []string{tc.assignor},
				AutoOffsetReset: "earliest", Consumer: client.ConsumerConfig{MaxWait: 20 * time.Millisecond},
				OnRevoked: func(_ context.Context, tps []client.TopicPartition) {
					mu.Lock()
					revoked = append(revoked, tps...)
					mu.Unlock()
				}})
			if err != nil {
				t.Fatal(err)
			}
			first.Subscribe("orders")
			if _, err := first.Poll(ctx); err != nil {
				t.Fatal(err)
			}
			if n := len(first.Assignment()); n != 6 {
				t.Fatalf("alone, the first member owns %d partitions", n)
			}
			_, second := newMember(t, b.Addr, "g", tc.assignor)
			done := make(chan error, 1)
			go func() {
				for len(second.Assignment()) != 3 {
					if _, err := second.Poll(ctx); err != nil {
						done <- err
						return
					}
				}
				done <- nil
			}()
			deadline := time.Now().Add(15 * time.Second)
			for len(first.Assignment()) != 3 {
				if time.Now().After(deadline) {
					t.Fatalf("first member still owns %v", first.Assignment())
				}
				if _, err := first.Poll(ctx); err != nil {
					t.Fatal(err)
				}
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(revoked) != tc.wantRevoked {
				t.Fatalf("%s: the first member revoked %v, want %d partitions", tc.assignor, revoked, tc.wantRevoked)
			}
		})
	}
}

// TestAutoOffsetReset: without a committed offset, "none" reports ErrNoCommittedOffset
// until Seek; a committed offset outside the log is reported under "none" (nothing is
// skipped) and restarts at the log start under "earliest".
func TestAutoOffsetReset(t *testing.T) {
	b := startGroupBroker(t, t.TempDir())
	ctx := ctxT(t)
	if err := b.Client.CreateTopic(ctx, "orders", 1, nil); err != nil {
		t.Fatal(err)
	}
	produceN(t, b.Client, "orders", 10)
	member := func(groupID, reset string) *client.GroupConsumer {
		g, err := b.Client.NewGroupConsumer(client.GroupConfig{Group: groupID, SessionTimeout: time.Second, AutoOffsetReset: reset,
			Consumer: client.ConsumerConfig{MaxWait: 20 * time.Millisecond}})
		if err != nil {
			t.Fatal(err)
		}
		g.Subscribe("orders")
		t.Cleanup(func() { g.Close(context.Background()) })
		return g
	}
	g := member("fresh", "none")
	if _, err := g.Poll(ctx); !errors.Is(err, client.ErrNoCommittedOffset) {
		t.Fatalf("no committed offset under none: %v", err)
	}
	if err := g.Seek(client.TopicPartition{Topic: "orders", Partition: 0}, 4); err != nil {
		t.Fatal(err)
	}
	recs, err := g.Poll(ctx)
	if err != nil || len(recs) == 0 || recs[0].Offset != 4 {
		t.Fatalf("after seek to 4: %d records, %v", len(recs), err)
	}
	beyond := []client.CommittedOffset{{TopicPartition: client.TopicPartition{Topic: "orders", Partition: 0}, Offset: 1000}}
	for _, id := range []string{"strict", "lenient"} {
		if err := b.Client.CommitOffsets(ctx, id, beyond); err != nil {
			t.Fatal(err)
		}
	}
	strict := member("strict", "none")
	if _, err := strict.Poll(ctx); !errors.Is(err, wire.ErrOffsetOutOfRange) {
		t.Fatalf("committed offset outside the log under none: %v, want OFFSET_OUT_OF_RANGE", err)
	}
	lenient := member("lenient", "earliest")
	var got []client.ConsumedRecord
	for range 50 {
		recs, err := lenient.Poll(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got = append(got, recs...); len(got) >= 10 {
			break
		}
	}
	if len(got) != 10 || got[0].Offset != 0 {
		t.Fatalf("under earliest: %d records from %v", len(got), got)
	}
}

// TestCommitAsyncAndSeek: CommitAsync commits the positions of what Poll returned; Seek
// moves a position and the next commit stores it.
func TestCommitAsyncAndSeek(t *testing.T) {
	b := startGroupBroker(t, t.TempDir())
	ctx := ctxT(t)
	if err := b.Client.CreateTopic(ctx, "orders", 1, nil); err != nil {
		t.Fatal(err)
	}
	produceN(t, b.Client, "orders", 20)
	g, err := b.Client.NewGroupConsumer(client.GroupConfig{Group: "async", SessionTimeout: time.Second, AutoOffsetReset: "earliest",
		Consumer: client.ConsumerConfig{MaxWait: 20 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close(ctx)
	g.Subscribe("orders")
	var read int
	for read < 20 {
		recs, err := g.Poll(ctx)
		if err != nil {
			t.Fatal(err)
		}
		read += len(recs)
	}
	committed := func() int64 {
		offs, err := b.Client.FetchCommitted(ctx, "async", client.TopicPartition{Topic: "orders"})
		if err != nil || len(offs) != 1 {
			t.Fatalf("fetch committed: %+v, %v", offs, err)
		}
		return offs[0].Offset
	}
	done := make(chan error, 1)
	g.CommitAsync(ctx, func(err error) { done <- err })
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := committed(); got != 20 {
		t.Fatalf("after CommitAsync: committed %d, want 20", got)
	}
	if err := g.Seek(client.TopicPartition{Topic: "orders"}, 7); err != nil {
		t.Fatal(err)
	}
	if err := g.CommitSync(ctx); err != nil {
		t.Fatal(err)
	}
	if got := committed(); got != 7 {
		t.Fatalf("after Seek(7) and CommitSync: committed %d", got)
	}
}

// TestStuckMemberLeaves: a member that stops calling Poll for longer than its
// RebalanceTimeout (max.poll.interval) leaves the group by itself although its heartbeats
// would keep it in; its next Poll joins again.
func TestStuckMemberLeaves(t *testing.T) {
	b := startGroupBroker(t, t.TempDir())
	ctx := ctxT(t)
	if err := b.Client.CreateTopic(ctx, "orders", 2, nil); err != nil {
		t.Fatal(err)
	}
	g, err := b.Client.NewGroupConsumer(client.GroupConfig{Group: "stuck", SessionTimeout: 3 * time.Second, HeartbeatInterval: 50 * time.Millisecond,
		RebalanceTimeout: 300 * time.Millisecond, AutoOffsetReset: "earliest", Consumer: client.ConsumerConfig{MaxWait: 20 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close(ctx)
	g.Subscribe("orders")
	if _, err := g.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	first, _ := g.Member()
	deadline := time.Now().Add(10 * time.Second) // well before the 3 s session would matter twice
	for {
		d, err := b.Client.DescribeGroup(ctx, "stuck")
		if err != nil {
			t.Fatal(err)
		}
		if len(d.Members) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("stuck member still in the group: %+v", d)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := g.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	if again, _ := g.Member(); again == "" || again == first {
		t.Fatalf("after the next Poll: member %q (was %q)", again, first)
	}
	if n := len(g.Assignment()); n != 2 {
		t.Fatalf("after rejoining: %d partitions", n)
	}
}
