package netio_test

import (
	"context"
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

// TestGroupFetchQuota over real sockets: two members of consumer group "replay" (bundled
// GroupConsumers on clients of their own, reading a backlog from the start) are held
// together to the group's fetch quota within 10% (measured after the burst is spent),
// while a consumer outside the group reading the same backlog at the same time (the
// members read until it is done) is not slowed. About 5 s.
func TestGroupFetchQuota(t *testing.T) {
	const (
		rate        = 2 << 20 // the group's bytes per second
		recordBytes = 16 << 10
		partitions  = 2
		backlog     = 12 << 20 // per partition: more than the group can read in the test
		warmup      = 1500 * time.Millisecond
		measure     = 3 * time.Second
	)
	overrides, err := security.ParseQuotaOverrides("group:replay=fetch:2097152")
	if err != nil {
		t.Fatal(err)
	}
	quotas := security.NewQuotas(security.QuotaConfig{Overrides: overrides, GroupFetchBytesPerSec: 1 << 40})
	rb := brokertest.Start(t, brokertest.Options{Node: func(cfg *node.Config) {
		cfg.Server.Security = &netio.Security{Quotas: quotas}
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := rb.Client.CreateTopic(ctx, "history", partitions, nil); err != nil {
		t.Fatal(err)
	}
	p := rb.Client.NewProducer(client.ProducerConfig{Acks: client.AckLeader, Compression: batch.CodecNone})
	for i := range partitions * backlog / recordBytes {
		if err := p.Send(ctx, &client.Record{Topic: "history", Partition: int32(i % partitions), Value: make([]byte, recordBytes)}, nil); err != nil {
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
	// Small fetches, so that the bytes in flight are a small part of what is measured.
	fetchSize := client.ConsumerConfig{MaxWait: 50 * time.Millisecond, MaxBytes: 128 << 10, PartitionMaxBytes: 64 << 10}

	start := time.Now()
	from, to := start.Add(warmup), start.Add(warmup+measure)
	var memberBytes [2]atomic.Int64 // received by each member within [from, to)
	// The members read until the window closes and the outsider is done, so that it always
	// reads beside them, however slowly the machine lets it (under -race at load 9 it took
	// 4.4 s, and the members had stopped before it was done).
	var outsiderDone atomic.Bool
	var wg sync.WaitGroup
	for i, id := range []string{"member-1", "member-2"} {
		g, err := newClient(id).NewGroupConsumer(client.GroupConfig{Group: "replay",
			AutoOffsetReset: "earliest", Consumer: fetchSize})
		if err != nil {
			t.Fatal(err)
		}
		g.Subscribe("history")
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer g.Close(context.Background())
			for time.Now().Before(to) || !outsiderDone.Load() {
				recs, err := g.Poll(ctx)
				if err != nil {
					t.Errorf("%s: %v", id, err)
					return
				}
				if now := time.Now(); !now.Before(from) && now.Before(to) {
					memberBytes[i].Add(valueBytes(recs))
				}
			}
		}()
	}
	// Once the members are held to their quota, the outsider reads the whole backlog on
	// its own, beside them.
	outsider := newClient("outsider").NewConsumer(fetchSize)
	time.Sleep(time.Until(from))
	outsiderStart := time.Now()
	for part := range int32(partitions) {
		outsider.Assign("history", part, client.Earliest())
	}
	var outsiderBytes int64
	for outsiderBytes < partitions*backlog {
		recs, err := outsider.Poll(ctx)
		if err != nil {
			t.Fatal(err)
		}
		outsiderBytes += valueBytes(recs)
	}
	outsiderTook := time.Since(outsiderStart)
	outsiderDone.Store(true)
	wg.Wait()

	got := float64(memberBytes[0].Load()+memberBytes[1].Load()) / measure.Seconds()
	outsiderRate := float64(outsiderBytes) / outsiderTook.Seconds()
	t.Logf("group replay (2 members, %d + %d B): %.0f B/s over %v after a %v warm-up (%.1f%% of its %d B/s quota); outsider: %d B in %v (%.0f B/s)",
		memberBytes[0].Load(), memberBytes[1].Load(), got, measure, warmup, 100*got/rate, rate, outsiderBytes, outsiderTook.Round(time.Millisecond), outsiderRate)
	if memberBytes[0].Load() == 0 || memberBytes[1].Load() == 0 {
		t.Errorf("a member read nothing while measured: the test did not share the quota between two members")
	}
	if got < 0.9*rate || got > 1.1*rate {
		t.Errorf("the group's members together fetched %.0f B/s, want %d B/s within 10%%", got, rate)
	}
	if outsiderRate < 2*rate {
		t.Errorf("the consumer outside the group fetched %.0f B/s: slowed to near the group's quota", outsiderRate)
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
