package netio_test

import (
	"context"
	"fmt"
	"slices"
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

// TestGroupFetchQuota over real sockets: two members of consumer group "replay" — each a
// client whose connection states the group (QuotaGroup, as the bundled GroupConsumer's
// fetch connections do) and reads its own partition of a backlog round and round, eight
// fetches of one 64 KiB batch in flight — are held together to the group's fetch quota
// after its burst: the bytes the broker charged the group, dated by the replies it held
// back (brokertest.HeldRate over both members' replies, the broker's own account), are
// within 10 % of the quota; the group's debt never runs past the fetches in flight; and
// what the members read in the window is at most what the quota lets through in it. A
// wall-clock rate of what the members received inside a window failed on a loaded machine
// (1818624 B/s, 86.7 %, under -race at load 35, session 14): a starved member reads less,
// and a stall before the window leaves credit spent inside it. A client outside the group
// reading the same partitions meanwhile is never throttled. The group consumer's own part
// (that it states its group) is TestGroupConsumerChargesItsGroup. About 5 s.
func TestGroupFetchQuota(t *testing.T) {
	const (
		rate         = 2 << 20 // the group's bytes per second
		recordBytes  = 16 << 10
		batchRecords = 4 // a batch of 64 KiB: every fetch answers one, of the same size
		partitions   = 2
		batches      = 32 // per partition (2 MiB); the members read it round and round
		// window is each member's fetches in flight: the group's debt past its burst
		// (window x 2 x 64 KiB at rate: 500 ms) is how long the members may stall
		// without the account breaking off. With 4 a loaded machine broke it into up to 8
		// runs in 3 s, each ending in the stall that broke it, and the account read
		// 91.0 % and 91.6 % of the quota (2 of 42 -race verdicts at load 20-28).
		window = 8
		// measure, measureMax, measureMin and settle as in TestProduceQuota.
		measure    = 3 * time.Second
		measureMax = time.Minute
		measureMin = time.Second
		settle     = 500 * time.Millisecond
	)
	overrides, err := security.ParseQuotaOverrides("group:replay=fetch:2097152")
	if err != nil {
		t.Fatal(err)
	}
	quotas := security.NewQuotas(security.QuotaConfig{Overrides: overrides, GroupFetchBytesPerSec: 1 << 40})
	burst := quotas.Config().Burst
	rb := brokertest.Start(t, brokertest.Options{Node: func(cfg *node.Config) {
		cfg.Server.Security = &netio.Security{Quotas: quotas}
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*measureMax)
	defer cancel()
	if err := rb.Client.CreateTopic(ctx, "history", partitions, nil); err != nil {
		t.Fatal(err)
	}
	b := batch.NewBuilder(batch.BuilderOptions{})
	for range batchRecords {
		b.Append(1, nil, make([]byte, recordBytes), nil)
	}
	records, err := b.Build(nil)
	if err != nil {
		t.Fatal(err)
	}
	batchBytes := int64(len(records)) // what the quota charges for one fetch
	for part := range int32(partitions) {
		req := &wire.ProduceRequest{Acks: wire.AcksLeader, Topics: []wire.ProduceTopic{{Topic: "history",
			Partitions: []wire.ProducePartition{{Partition: part, Records: records}}}}}
		for range batches {
			var resp wire.ProduceResponse
			if err := rb.Client.Call(ctx, rb.Addr, req, &resp); err != nil || resp.Topics[0].Partitions[0].ErrorCode != wire.ErrNone {
				t.Fatalf("produce: %v %+v", err, resp)
			}
		}
	}

	newClient := func(id, group string) *client.Client {
		c, err := client.New(ctx, client.Config{Broker: rb.Addr, ClientID: id})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if group != "" {
			var resp wire.QuotaGroupResponse
			if err := c.Call(ctx, rb.Addr, &wire.QuotaGroupRequest{Group: group}, &resp); err != nil || resp.ErrorCode != wire.ErrNone {
				t.Fatalf("%s: QuotaGroup: %v %s", id, err, resp.ErrorCode.Name())
			}
		}
		return c
	}
	// fetch reads the batch at index i of partition part, round the backlog.
	fetch := func(c *client.Client, part int32, i int64) (brokertest.ThrottledRead, error) {
		req := &wire.FetchRequest{MaxBytes: int32(batchBytes), Topics: []wire.FetchTopic{{Topic: "history",
			Partitions: []wire.FetchPartition{{Partition: part, FetchOffset: i % batches * batchRecords, MaxBytes: int32(batchBytes)}}}}}
		var resp wire.FetchResponse
		if err := c.Call(ctx, rb.Addr, req, &resp); err != nil {
			return brokertest.ThrottledRead{}, err
		}
		at := time.Now()
		p := resp.Topics[0].Partitions[0]
		if p.ErrorCode != wire.ErrNone || int64(len(p.Records)) != batchBytes {
			return brokertest.ThrottledRead{}, fmt.Errorf("fetch %d/%d: %s, %d bytes (want one batch, %d)", part, req.Topics[0].Partitions[0].FetchOffset, p.ErrorCode.Name(), len(p.Records), batchBytes)
		}
		return brokertest.ThrottledRead{At: at, Bytes: batchBytes, Throttle: time.Duration(resp.ThrottleMs) * time.Millisecond}, nil
	}

	var stop atomic.Bool
	var firstErr brokertest.FirstError
	var wg sync.WaitGroup
	defer func() { stop.Store(true); wg.Wait() }()
	// reader runs n goroutines fetching partition part on c until stop, each sending the
	// next fetch when its reply is read; record is given every reply.
	reader := func(c *client.Client, part int32, n int, record func(brokertest.ThrottledRead)) {
		var next atomic.Int64
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for !stop.Load() {
					r, err := fetch(c, part, next.Add(1)-1)
					if err != nil {
						if ctx.Err() == nil {
							firstErr.Set(err)
						}
						return
					}
					record(r)
				}
			}()
		}
	}

	var mu sync.Mutex
	var reads []brokertest.ThrottledRead          // both members', guarded by mu
	var memberReads [2][]brokertest.ThrottledRead // guarded by mu
	account := func(from time.Time) (float64, time.Duration) {
		mu.Lock()
		sorted := brokertest.SortedReads(reads)
		mu.Unlock()
		return brokertest.HeldRate(sorted, from)
	}
	// throttledSince reports whether every member has had a reply throttled at or after from.
	throttledSince := func(from time.Time) bool {
		mu.Lock()
		defer mu.Unlock()
		for _, rs := range memberReads {
			if !slices.ContainsFunc(rs, func(r brokertest.ThrottledRead) bool { return r.Throttle > 0 && !r.At.Before(from) }) {
				return false
			}
		}
		return true
	}
	start := time.Now()
	for i, id := range []string{"member-1", "member-2"} {
		reader(newClient(id, "replay"), int32(i), window, func(r brokertest.ThrottledRead) {
			mu.Lock()
			reads = append(reads, r)
			memberReads[i] = append(memberReads[i], r)
			mu.Unlock()
		})
	}
	// The window opens once the group has spent its burst (its first throttle), and then
	// settles more. Unthrottled, the members can read no more than the burst, the quota
	// since they started and their fetches in flight: more than that is a quota not kept.
	inflightBytes := int64(len(memberReads)*window) * batchBytes
	for !throttledSince(start) {
		mu.Lock()
		var unthrottled int64
		for _, r := range reads {
			unthrottled += r.Bytes
		}
		mu.Unlock()
		if allowed := int64((time.Since(start)+burst).Seconds()*rate) + inflightBytes; unthrottled > allowed {
			t.Fatalf("the group's members read %d B unthrottled in %v; the quota allows at most %d", unthrottled, time.Since(start).Round(time.Millisecond), allowed)
		}
		if firstErr.Reported(t) {
			t.Fatal("a member stopped before the group was throttled")
		}
		if ctx.Err() != nil {
			t.Fatal("the members were not both throttled before the test's context ran out")
		}
		time.Sleep(5 * time.Millisecond) // a poll, not a measurement clock
	}
	// The client outside the group reads the same partitions beside the members until the
	// verdict, pacing itself: spinning, it took the CPU the members need to stay in debt.
	var outsiderReads, outsiderThrottled atomic.Int64
	outsider := newClient("outsider", "")
	for part := range int32(partitions) {
		reader(outsider, part, 1, func(r brokertest.ThrottledRead) {
			outsiderReads.Add(1)
			if r.Throttle > 0 {
				outsiderThrottled.Add(1)
			}
			time.Sleep(10 * time.Millisecond) // a paced client, not a measurement clock
		})
	}
	time.Sleep(settle)
	from := time.Now()
	// The window closes once the broker's account covers measure and both members were
	// held in it (a starved member may have read nothing yet), or after measureMax.
	for _, span := account(from); (span < measure || !throttledSince(from) || outsiderReads.Load() == 0) && time.Since(from) < measureMax; _, span = account(from) {
		if firstErr.Reported(t) {
			t.FailNow()
		}
		time.Sleep(20 * time.Millisecond) // a poll, not a measurement clock
	}
	to := time.Now()
	stop.Store(true)
	wg.Wait()
	if firstErr.Reported(t) {
		t.FailNow()
	}
	got, span := account(from)
	if span < measureMin || !throttledSince(from) {
		t.Skipf("the broker's account of the group covers %v after %v (want %v, at least %v), members held in it: %v: the machine did not let the members run past their quota together long enough to measure",
			span, to.Sub(from).Round(time.Millisecond), measure, measureMin, throttledSince(from))
	}
	var throttleMax time.Duration
	var inWindow [2]int64
	for i, rs := range memberReads {
		for _, r := range rs {
			throttleMax = max(throttleMax, r.Throttle)
			if !r.At.Before(from) && !r.At.After(to) {
				inWindow[i] += r.Bytes
			}
		}
	}
	wall := to.Sub(from)
	t.Logf("group replay (2 members): held to %.0f B/s over %v of the broker's account (quota %d B/s, %.1f%%), max throttle %v; read %d + %d B in the %v window (%.0f B/s); outsider: %d replies, %d throttled",
		got, span.Round(time.Millisecond), rate, 100*got/rate, throttleMax, inWindow[0], inWindow[1], wall.Round(time.Millisecond),
		float64(inWindow[0]+inWindow[1])/wall.Seconds(), outsiderReads.Load(), outsiderThrottled.Load())
	if got < 0.9*rate || got > 1.1*rate {
		t.Errorf("the group's members together were held to %.0f B/s, want %d B/s within 10%%", got, rate)
	}
	// Held: the group's debt past its burst is what its members have in flight at most.
	if owedMax := time.Duration(inflightBytes) * time.Second / rate; throttleMax > owedMax {
		t.Errorf("the group was throttled up to %v; want at most %v (%d fetches of %d bytes at %d B/s)",
			throttleMax, owedMax, 2*window, batchBytes, rate)
	}
	// A reply read in the window was charged in it (but those in flight when it opened),
	// and held until the group's account, which runs at rate from at least the window's
	// start, came within a burst of the clock.
	if allowed := int64((wall+burst).Seconds()*rate) + inflightBytes; inWindow[0]+inWindow[1] > allowed {
		t.Errorf("the group's members read %d B in %v; the quota allows at most %d", inWindow[0]+inWindow[1], wall.Round(time.Millisecond), allowed)
	}
	if n := outsiderThrottled.Load(); n > 0 {
		t.Errorf("the client outside the group had %d of %d replies throttled", n, outsiderReads.Load())
	}
}

// TestGroupConsumerChargesItsGroup: the bundled GroupConsumer states its group on its fetch
// connections, so that the broker charges its fetches to the group's quota, and a plain
// consumer's fetches are not. The quota's clock stands still, so what the broker charged
// is never forgiven and the verdict does not hang on how fast the machine runs: a consumer
// that reads more than the burst from a group quota is throttled, the broker counts it.
func TestGroupConsumerChargesItsGroup(t *testing.T) {
	const (
		rate        = 1 << 20
		burst       = 100 * time.Millisecond // 102 KiB at rate
		readBytes   = 256 << 10
		recordBytes = 16 << 10
	)
	overrides, err := security.ParseQuotaOverrides("group:replay=fetch:1048576")
	if err != nil {
		t.Fatal(err)
	}
	epoch := time.Now()
	quotas := security.NewQuotas(security.QuotaConfig{Overrides: overrides, Burst: burst, Now: func() time.Time { return epoch }})
	rb := brokertest.Start(t, brokertest.Options{Node: func(cfg *node.Config) {
		cfg.Server.Security = &netio.Security{Quotas: quotas}
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := rb.Client.CreateTopic(ctx, "history", 1, nil); err != nil {
		t.Fatal(err)
	}
	p := rb.Client.NewProducer(client.ProducerConfig{Acks: client.AckLeader, Compression: batch.CodecNone})
	for range readBytes / recordBytes {
		if err := p.Send(ctx, &client.Record{Topic: "history", Value: make([]byte, recordBytes)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	newClient := func(id string) *client.Client {
		c, err := client.New(ctx, client.Config{Broker: rb.Addr, ClientID: id})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	fetchSize := client.ConsumerConfig{MaxWait: 50 * time.Millisecond, MaxBytes: 64 << 10, PartitionMaxBytes: 64 << 10}
	readAll := func(poll func(context.Context) ([]client.ConsumedRecord, error)) {
		t.Helper()
		var n int64
		for n < readBytes {
			recs, err := poll(ctx)
			if err != nil {
				t.Fatal(err)
			}
			n += valueBytes(recs)
		}
	}
	outsider := newClient("outsider").NewConsumer(fetchSize)
	outsider.Assign("history", 0, client.Earliest())
	readAll(outsider.Poll)
	if n := rb.Node.Server.Stats().Throttled; n != 0 {
		t.Fatalf("a consumer outside the group had %d replies throttled", n)
	}
	g, err := newClient("member").NewGroupConsumer(client.GroupConfig{Group: "replay", AutoOffsetReset: "earliest", Consumer: fetchSize})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close(context.Background())
	g.Subscribe("history")
	readAll(g.Poll)
	n := rb.Node.Server.Stats().Throttled
	t.Logf("the group consumer read %d B (the group's burst: %d B): %d replies throttled", readBytes, int64(rate*burst.Seconds()), n)
	if n == 0 {
		t.Errorf("the group consumer read %d B, past its group's burst, and no reply was throttled: its fetches were not charged to the group", readBytes)
	}
}

// TestQuotaGroupRequest: QuotaGroup is answered; a name too long is refused; under ACLs a
// principal without read on the group is refused.
func TestQuotaGroupRequest(t *testing.T) {
	creds, err := security.OpenCredentials(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	addUser(t, creds, "reader", testPassword)
	authz, err := security.OpenAuthorizer(t.TempDir(), true, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := authz.Add([]security.ACL{{Resource: security.ResourceGroup, Name: "mine", Pattern: security.PatternLiteral,
		Principal: "User:reader", Operation: security.OpRead, Permission: security.Allow}}); err != nil {
		t.Fatal(err)
	}
	rb := brokertest.Start(t, brokertest.Options{NoClient: true, Node: func(cfg *node.Config) {
		cfg.Server.Security = &netio.Security{Credentials: creds, AuthRequired: true, Authorizer: authz}
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.New(ctx, client.Config{Broker: rb.Addr, SASL: &client.SASLConfig{User: "reader", Password: testPassword}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, tc := range []struct {
		group string
		want  wire.ErrorCode
	}{
		{"mine", wire.ErrNone},
		{"", wire.ErrNone},
		{"theirs", wire.ErrGroupAuthorizationFailed},
		{string(make([]byte, security.QuotaGroupBytesMax+1)), wire.ErrInvalidGroupID},
	} {
		var resp wire.QuotaGroupResponse
		if err := c.Call(ctx, rb.Addr, &wire.QuotaGroupRequest{Group: tc.group}, &resp); err != nil || resp.ErrorCode != tc.want {
			t.Errorf("QuotaGroup %.10q: %v %s %s, want %s", tc.group, err, resp.ErrorCode.Name(), resp.ErrorMessage, tc.want.Name())
		}
	}
}

func valueBytes(recs []client.ConsumedRecord) int64 {
	var n int64
	for _, r := range recs {
		n += int64(len(r.Value))
	}
	return n
}
