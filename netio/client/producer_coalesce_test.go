package client_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ringlog/ringlog/netio/wire"

	"github.com/ringlog/ringlog/engine/batch"
	"github.com/ringlog/ringlog/netio"
	"github.com/ringlog/ringlog/netio/client"
	"github.com/ringlog/ringlog/netio/fakebroker"
)

// gatedBroker holds the first produce request until the gate opens and records how many
// record batches each produce request carried.
type gatedBroker struct {
	fake    *fakebroker.Broker
	gate    chan struct{}
	arrived chan struct{}
	once    sync.Once
	mu      sync.Mutex
	batches []int
}

func (g *gatedBroker) Serve(req *netio.Request) {
	body, ok := req.Body.(*wire.ProduceRequest)
	if !ok {
		g.fake.Serve(req)
		return
	}
	n := 0
	for _, t := range body.Topics {
		for _, p := range t.Partitions {
			for rest := p.Records; len(rest) > 0; n++ {
				h, err := batch.ParseHeader(rest)
				if err != nil {
					panic(err)
				}
				rest = rest[h.Size():]
			}
		}
	}
	g.mu.Lock()
	g.batches = append(g.batches, n)
	first := len(g.batches) == 1
	g.mu.Unlock()
	if first {
		g.once.Do(func() { close(g.arrived) })
		go func() { <-g.gate; g.fake.Serve(req) }()
		return
	}
	g.fake.Serve(req)
}

// Without idempotence (one request per partition in flight): while a partition's request is
// in flight, the batches sealed meanwhile queue; the next request must carry all of them,
// with offsets assigned in order. (An idempotent producer pipelines them instead; the gate
// here answers requests out of order, which only a broker checking sequences can sort out,
// so that case is tested against the real broker: idempotence_test.go and e2e/.)
func TestProducerCoalescesQueuedBatches(t *testing.T) { testProducerCoalesces(t, false) }

func testProducerCoalesces(t *testing.T, idempotent bool) {
	g := &gatedBroker{fake: fakebroker.New(t.TempDir(), nil), gate: make(chan struct{}), arrived: make(chan struct{})}
	defer g.fake.Close()
	srv := netio.NewServer(g, netio.Config{})
	ln, err := netio.ListenShard(context.Background(), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln, 0)
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := client.New(ctx, client.Config{Broker: ln.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.CreateTopic(ctx, "t", 1, nil); err != nil {
		t.Fatal(err)
	}
	// BatchBytes 1: every record is a batch of its own.
	p := c.NewProducer(client.ProducerConfig{Acks: client.AckLeader, BatchBytes: 1, Linger: -1, DisableIdempotence: !idempotent})
	records := make([]*client.Record, 5)
	var wg sync.WaitGroup
	send := func(i int) {
		records[i] = &client.Record{Topic: "t", Partition: 0, Value: []byte(fmt.Sprint(i))}
		wg.Add(1)
		if err := p.Send(ctx, records[i], func(_ *client.Record, err error) {
			if err != nil {
				t.Error(err)
			}
			wg.Done()
		}); err != nil {
			t.Fatal(err)
		}
	}
	send(0)
	<-g.arrived // request 1 (record 0) is held by the broker
	for i := 1; i < 5; i++ {
		send(i)
	}
	close(g.gate)
	wg.Wait()
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.batches) != 2 || g.batches[0] != 1 || g.batches[1] != 4 {
		t.Fatalf("batches per produce request = %v, want [1 4]: the four batches queued behind the first request go in one", g.batches)
	}
	for i, r := range records {
		if r.Offset != int64(i) {
			t.Fatalf("record %d got offset %d", i, r.Offset)
		}
	}
}
