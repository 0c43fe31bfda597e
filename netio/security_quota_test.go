package netio_test

import (
	"context"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/ringlog/ringlog/engine/batch"
	"github.com/ringlog/ringlog/netio"
	"github.com/ringlog/ringlog/netio/client"
	"github.com/ringlog/ringlog/netio/internal/brokertest"
	"github.com/ringlog/ringlog/netio/node"
	"github.com/ringlog/ringlog/netio/security"
	"github.com/ringlog/ringlog/netio/wire"
)

// TestProduceQuota over real sockets: a greedy tenant pipelining 64 KiB produces as fast
// as it can is held to its produce quota within 10% (measured after its burst is spent),
// its replies carry the throttle time, and a calm tenant's produce latency on the same
// broker stays flat (a loose bound: within 4x its own baseline median plus 10 ms; the
// numbers are logged). About 3 s.
func TestProduceQuota(t *testing.T) {
	const (
		rate       = 2 << 20 // bytes per second per client
		recordSize = 64 << 10
		window     = 8 // greedy's requests in flight
		warmup     = 500 * time.Millisecond
		measure    = 2500 * time.Millisecond
	)
	creds, err := security.OpenCredentials(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	addUser(t, creds, "greedy", testPassword)
	addUser(t, creds, "calm", testPassword)
	quotas := security.NewQuotas(security.QuotaConfig{ProduceBytesPerSec: rate, Burst: 100 * time.Millisecond})
	rb := brokertest.Start(t, brokertest.Options{NoClient: true, Node: func(cfg *node.Config) {
		cfg.Server.Security = &netio.Security{Credentials: creds, AuthRequired: true, Quotas: quotas}
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	login := func(user string) *client.Client {
		c, err := client.New(ctx, client.Config{Broker: rb.Addr, SASL: &client.SASLConfig{User: user, Password: testPassword}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	greedy, calm := login("greedy"), login("calm")
	for _, topic := range []string{"bulk", "orders"} {
		if err := greedy.CreateTopic(ctx, topic, 1, nil); err != nil {
			t.Fatal(err)
		}
	}

	b := batch.NewBuilder(batch.BuilderOptions{})
	b.Append(1, nil, make([]byte, recordSize), nil)
	records, err := b.Build(nil)
	if err != nil {
		t.Fatal(err)
	}
	bulk := &wire.ProduceRequest{Acks: wire.AcksLeader, Topics: []wire.ProduceTopic{{Topic: "bulk", Partitions: []wire.ProducePartition{{Records: records}}}}}
	frameBytes := int64(len(wire.AppendRequest(nil, 0, bulk)) - wire.FrameLengthBytes) // what the quota charges

	calmLatencies := func(n int) []time.Duration {
		var out []time.Duration
		req := &wire.ProduceRequest{Acks: wire.AcksLeader, Topics: []wire.ProduceTopic{{Topic: "orders", Partitions: []wire.ProducePartition{{Records: oneBatch(t)}}}}}
		for range n {
			start := time.Now()
			var resp wire.ProduceResponse
			if err := calm.Call(ctx, rb.Addr, req, &resp); err != nil || resp.Topics[0].Partitions[0].ErrorCode != wire.ErrNone {
				t.Fatalf("calm produce: %v %+v", err, resp)
			}
			out = append(out, time.Since(start))
			time.Sleep(10 * time.Millisecond) // a paced tenant, not a measurement clock
		}
		return out
	}
	baseline := calmLatencies(30)

	var mu sync.Mutex
	var acks []time.Time
	var throttleMsMax int32
	start := time.Now()
	stop := start.Add(warmup + measure + 200*time.Millisecond)
	var wg sync.WaitGroup
	for range window {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stop) {
				var resp wire.ProduceResponse
				if err := greedy.Call(ctx, rb.Addr, bulk, &resp); err != nil || resp.Topics[0].Partitions[0].ErrorCode != wire.ErrNone {
					t.Errorf("greedy produce: %v %+v", err, resp)
					return
				}
				mu.Lock()
				acks = append(acks, time.Now())
				throttleMsMax = max(throttleMsMax, resp.ThrottleMs)
				mu.Unlock()
			}
		}()
	}
	time.Sleep(warmup)
	during := calmLatencies(60)
	wg.Wait()

	from, to := start.Add(warmup), start.Add(warmup+measure)
	var n int64
	first, last := time.Time{}, time.Time{}
	for _, a := range acks {
		if a.After(from) && !a.After(to) {
			if first.IsZero() {
				first = a
			} else {
				n++ // bytes acknowledged after the first ack of the window
			}
			last = a
		}
	}
	got := float64(n*frameBytes) / last.Sub(first).Seconds()
	t.Logf("greedy: %.0f B/s acknowledged over %v (quota %d B/s, %.1f%%), max throttle %d ms, %d replies throttled",
		got, last.Sub(first).Round(time.Millisecond), rate, 100*got/rate, throttleMsMax, rb.Node.Server.Stats().Throttled)
	if got < 0.9*rate || got > 1.1*rate {
		t.Errorf("greedy tenant at %.0f B/s, want %d +-10%%", got, rate)
	}
	if throttleMsMax == 0 {
		t.Error("no reply carried a throttle time")
	}
	p50 := func(d []time.Duration) time.Duration {
		s := append([]time.Duration(nil), d...)
		sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
		return s[len(s)/2]
	}
	base, busy := p50(baseline), p50(during)
	t.Logf("calm tenant produce latency p50: %v alone, %v beside the throttled greedy tenant", base, busy)
	if busy > 4*base+10*time.Millisecond {
		t.Errorf("calm tenant's latency went from %v to %v", base, busy)
	}
}
