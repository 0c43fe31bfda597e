package netio_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
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
// as it can is held to its produce quota after its burst — the bytes the broker charged
// it, dated by the replies it held back (brokertest.HeldRate, the broker's own account,
// not a wall-clock rate of acknowledgements, which a stall of the loaded machine sways),
// are within 10 % of the quota, and its debt never runs past its requests in flight —
// its replies carry the throttle time, and a calm tenant's produce latency on the same
// broker stays flat (a loose bound: within 4x its own baseline median plus one greedy
// request's throttle, 31 ms; the numbers are logged). About 4 s.
func TestProduceQuota(t *testing.T) {
	const (
		rate       = 2 << 20 // bytes per second per client
		recordSize = 64 << 10
		window     = 8 // greedy's requests in flight
		// measure is how much of the broker's account (HeldRate's span) the verdict
		// covers; measureMax bounds the wall time spent collecting it on a loaded machine.
		measure    = 3 * time.Second
		measureMax = time.Minute
		// measureMin is the least account a verdict is given over once measureMax has
		// passed: the account grows only while the greedy client runs past its quota, and
		// a starved machine holds it back (-race at load 35: 2.7 s in a minute). Over the
		// first second of account the fit read 99.2-100.6 % of the quota in 69 recorded
		// runs (session 14). With less, nothing was tested: the test says so and skips.
		measureMin = time.Second
		settle     = 500 * time.Millisecond
	)
	creds, err := security.OpenCredentials(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	addUser(t, creds, "greedy", testPassword)
	addUser(t, creds, "calm", testPassword)
	quotas := security.NewQuotas(security.QuotaConfig{Default: security.QuotaRates{ProduceBytesPerSec: rate}})
	rb := brokertest.Start(t, brokertest.Options{NoClient: true, Node: func(cfg *node.Config) {
		cfg.Server.Security = &netio.Security{Credentials: creds, AuthRequired: true, Quotas: quotas}
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*measureMax)
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
	var reads []brokertest.ThrottledRead // guarded by mu
	account := func(from time.Time) (float64, time.Duration) {
		mu.Lock()
		sorted := brokertest.SortedReads(reads)
		mu.Unlock()
		return brokertest.HeldRate(sorted, from)
	}
	var stop, throttled atomic.Bool
	var greedyErr brokertest.FirstError
	var wg sync.WaitGroup
	for range window {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				var resp wire.ProduceResponse
				if err := greedy.Call(ctx, rb.Addr, bulk, &resp); err != nil || resp.Topics[0].Partitions[0].ErrorCode != wire.ErrNone {
					greedyErr.Set(fmt.Errorf("greedy produce: %v %+v", err, resp))
					return
				}
				at := time.Now()
				mu.Lock()
				reads = append(reads, brokertest.ThrottledRead{At: at, Bytes: frameBytes, Throttle: time.Duration(resp.ThrottleMs) * time.Millisecond})
				mu.Unlock()
				if resp.ThrottleMs > 0 {
					throttled.Store(true)
				}
			}
		}()
	}
	defer func() { stop.Store(true); wg.Wait() }()
	// The window opens once the greedy tenant has spent its burst (its first throttle),
	// and then settles more: its debt grows until it covers its requests in flight. It
	// closes once the broker's account covers measure.
	for !throttled.Load() {
		if greedyErr.Reported(t) || ctx.Err() != nil {
			t.Fatal("the greedy tenant stopped before it was throttled")
		}
		time.Sleep(5 * time.Millisecond) // a poll, not a measurement clock
	}
	time.Sleep(settle)
	from := time.Now()
	during := calmLatencies(60)
	for _, span := account(from); span < measure && time.Since(from) < measureMax; _, span = account(from) {
		if greedyErr.Reported(t) {
			t.FailNow()
		}
		time.Sleep(20 * time.Millisecond) // a poll, not a measurement clock
	}
	stop.Store(true)
	wg.Wait()
	if greedyErr.Reported(t) {
		t.FailNow()
	}
	got, span := account(from)
	if span < measureMin {
		t.Skipf("the broker's account of the greedy tenant covers %v after %v (want %v, at least %v): the machine did not let it run past its quota long enough to measure",
			span, time.Since(from).Round(time.Millisecond), measure, measureMin)
	}
	var throttleMax time.Duration
	for _, r := range reads {
		throttleMax = max(throttleMax, r.Throttle)
	}
	t.Logf("greedy: held to %.0f B/s over %v of the broker's account (%v of wall time; quota %d B/s, %.1f%%), max throttle %v, %d replies throttled",
		got, span.Round(time.Millisecond), time.Since(from).Round(time.Millisecond), rate, 100*got/rate, throttleMax, rb.Node.Server.Stats().Throttled)
	if throttleMax == 0 {
		t.Error("no reply carried a throttle time")
	}
	// Held: the tenant's debt past its burst is what it has in flight at most (each
	// request is charged when read, and it sends the next only after a reply).
	if owedMax := time.Duration(window*frameBytes) * time.Second / rate; throttleMax > owedMax {
		t.Errorf("the greedy tenant was throttled up to %v; want at most %v (%d requests of %d bytes at %d B/s)",
			throttleMax, owedMax, window, frameBytes, rate)
	}
	brokertest.CheckTenants(t, got, rate, frameBytes, baseline, during)
}

// TestFetchQuota: an anonymous consumer (keyed by its client id) that fetches more than
// its fetch quota's burst gets the reply held back and told so in ThrottleMs; a second
// client id is not affected.
func TestFetchQuota(t *testing.T) {
	const rate = 4 << 20
	quotas := security.NewQuotas(security.QuotaConfig{Default: security.QuotaRates{FetchBytesPerSec: rate}, Burst: 100 * time.Millisecond})
	rb := brokertest.Start(t, brokertest.Options{Client: client.Config{ClientID: "reader"}, Node: func(cfg *node.Config) {
		cfg.Server.Security = &netio.Security{Quotas: quotas}
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := rb.Client
	if err := c.CreateTopic(ctx, "bulk", 1, nil); err != nil {
		t.Fatal(err)
	}
	p := c.NewProducer(client.ProducerConfig{Acks: client.AckLeader, Compression: batch.CodecNone})
	for range 16 {
		if err := p.Send(ctx, &client.Record{Topic: "bulk", Value: make([]byte, 64<<10)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	fetch := func(c *client.Client, maxBytes int32) (wire.FetchResponse, time.Duration) {
		t.Helper()
		var resp wire.FetchResponse
		req := &wire.FetchRequest{MaxBytes: maxBytes, Topics: []wire.FetchTopic{{Topic: "bulk", Partitions: []wire.FetchPartition{{MaxBytes: maxBytes}}}}}
		start := time.Now()
		if err := c.Call(ctx, c.BrokerAddr(), req, &resp); err != nil {
			t.Fatal(err)
		}
		if n := len(resp.Topics[0].Partitions[0].Records); n < int(maxBytes)/2 {
			t.Fatalf("fetched %d bytes, want about %d", n, maxBytes)
		}
		return resp, time.Since(start)
	}
	resp, took := fetch(c, 1<<20)
	// About 1 MiB at 4 MiB/s with a 100 ms burst: about 150 ms owed.
	throttle := time.Duration(resp.ThrottleMs) * time.Millisecond
	if throttle <= 0 || took < throttle {
		t.Fatalf("first fetch: throttle %v, took %v (want a throttle, and the reply held back that long)", throttle, took)
	}
	other, err := client.New(ctx, client.Config{Broker: rb.Addr, ClientID: "someone-else"})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	// 128 KiB: within its own burst (400 KiB at 4 MiB/s and 100 ms).
	if resp, _ := fetch(other, 128<<10); resp.ThrottleMs != 0 {
		t.Fatalf("another client id was throttled %d ms", resp.ThrottleMs)
	}
	t.Logf("first fetch throttled %v, answered after %v", throttle, took)
}

// BenchmarkBrokerSecured: the produce and fetch benchmarks on a broker without security
// and on one with everything on the request path switched on (SCRAM login, ACLs with a
// prefix grant among 1,000 other rules, quotas set high enough never to throttle), in one
// run: the cost of the per-request checks.
func BenchmarkBrokerSecured(b *testing.B) {
	for _, mode := range []string{"plain", "secured"} {
		start := func(b *testing.B) *brokertest.Broker {
			if mode == "plain" {
				return brokertest.Start(b, brokertest.Options{})
			}
			creds, err := security.OpenCredentials(b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			addUser(b, creds, "bench", testPassword)
			authz, err := security.OpenAuthorizer(b.TempDir(), true, nil)
			if err != nil {
				b.Fatal(err)
			}
			rules := []security.ACL{
				{Resource: security.ResourceTopic, Name: "ben", Pattern: security.PatternPrefixed, Principal: "User:bench", Operation: security.OpAll, Permission: security.Allow},
				{Resource: security.ResourceCluster, Pattern: security.PatternLiteral, Principal: "User:bench", Operation: security.OpCreate, Permission: security.Allow},
			}
			for i := range 1000 {
				rules = append(rules, security.ACL{Resource: security.ResourceTopic, Name: "t", Pattern: security.PatternLiteral,
					Principal: fmt.Sprintf("User:other%d", i), Operation: security.OpRead, Permission: security.Allow})
			}
			if err := authz.Add(rules); err != nil {
				b.Fatal(err)
			}
			quotas := security.NewQuotas(security.QuotaConfig{Default: security.QuotaRates{ProduceBytesPerSec: 1 << 40, FetchBytesPerSec: 1 << 40, RequestsPerSec: 1 << 30}})
			return brokertest.Start(b, brokertest.Options{Client: client.Config{SASL: &client.SASLConfig{User: "bench", Password: testPassword}},
				Node: func(cfg *node.Config) {
					cfg.Server.Security = &netio.Security{Credentials: creds, AuthRequired: true, Authorizer: authz, Quotas: quotas}
				}})
		}
		b.Run("produce/"+mode, func(b *testing.B) {
			rb := start(b)
			defer rb.Stop()
			benchProduceOn(b, rb.Client, client.AckLeader)
		})
		b.Run("fetch/"+mode, func(b *testing.B) {
			rb := start(b)
			defer rb.Stop()
			benchFetchOn(b, rb.Client)
		})
	}
}
