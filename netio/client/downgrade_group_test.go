package client_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ringlog/ringlog/netio/client"
	"github.com/ringlog/ringlog/netio/wire"
)

// TestGroupJoinsOlderCoordinator: a coordinator that answers JoinGroup version 1 (KIP-394's
// MEMBER_ID_REQUIRED round trip) UNSUPPORTED_VERSION, an older release than the broker the
// client handshook with, is joined at version 0, and the group reads every record; so are
// the rejoins of a rebalance (a second member).
func TestGroupJoinsOlderCoordinator(t *testing.T) {
	c, b := downgradedBroker(t, map[wire.APIKey]uint16{wire.APIJoinGroup: 0})
	ctx := ctxT(t)
	if err := c.CreateTopic(ctx, "orders", 4, nil); err != nil {
		t.Fatal(err)
	}
	const records = 200
	produceN(t, c, "orders", records)
	newGroupMember := func(c *client.Client) *client.GroupConsumer {
		g, err := c.NewGroupConsumer(client.GroupConfig{Group: "billing", SessionTimeout: 6 * time.Second, AutoOffsetReset: "earliest",
			Consumer: client.ConsumerConfig{MaxWait: 50 * time.Millisecond}})
		if err != nil {
			t.Fatal(err)
		}
		g.Subscribe("orders")
		t.Cleanup(func() { g.Close(context.Background()) })
		return g
	}
	g := newGroupMember(c)
	seen := map[string]bool{}
	for polls := 0; len(seen) < records; polls++ {
		if polls > 2000 {
			t.Fatalf("read %d of %d records", len(seen), records)
		}
		recs, err := g.Poll(ctx)
		if err != nil {
			t.Fatalf("poll with a coordinator that serves JoinGroup version 0 only: %v", err)
		}
		for _, r := range recs {
			seen[fmt.Sprintf("%d@%d", r.Partition, r.Offset)] = true
		}
	}
	if member, generation := g.Member(); member == "" || generation < 1 {
		t.Fatalf("member %q generation %d", member, generation)
	}

	// A second member (its own client, handshaken with the older broker: version 0 from the
	// start) makes the first rejoin, through the fallback again. Each member polls on its own
	// goroutine (a join waits for every member) and reports its assignment's size.
	other, err := client.New(ctx, client.Config{Broker: b.Addr})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	g2 := newGroupMember(other)
	type report struct {
		member, owned int
		err           error
	}
	reports := make(chan report, 64)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i, m := range []*client.GroupConsumer{g, g2} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				_, err := m.Poll(ctx)
				select {
				case reports <- report{i, len(m.Assignment()), err}:
				case <-stop:
					return
				}
				if err != nil {
					return
				}
			}
		}()
	}
	defer wg.Wait()
	defer close(stop)
	var owned [2]int
	for owned[0] == 0 || owned[1] == 0 || owned[0]+owned[1] != 4 {
		select {
		case r := <-reports:
			if r.err != nil {
				t.Fatalf("member %d: %v", r.member, r.err)
			}
			owned[r.member] = r.owned
		case <-ctx.Done():
			t.Fatalf("no rebalance to two members: they own %v partitions", owned)
		}
	}
}
