package security_test

import (
	"testing"
	"time"

	"github.com/ringlog/ringlog/netio/security"
)

// fakeClock is a clock the test moves.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

// TestQuotaDelays: within burst nothing waits; past it each client waits exactly its debt
// over its rate; clients and kinds are separate; debt is capped at ThrottleMax.
func TestQuotaDelays(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1_000_000, 0)}
	q := security.NewQuotas(security.QuotaConfig{Default: security.QuotaRates{ProduceBytesPerSec: 1000, RequestsPerSec: 10}, Burst: time.Second, Now: clock.now})
	for i, c := range []struct {
		advance time.Duration
		client  string
		kind    security.QuotaKind
		n       int64
		want    time.Duration
	}{
		{0, "a", security.QuotaProduceBytes, 500, 0},
		{0, "a", security.QuotaProduceBytes, 500, 0},                                            // exactly a burst
		{0, "a", security.QuotaProduceBytes, 500, 500 * time.Millisecond},                       // half a second over
		{0, "b", security.QuotaProduceBytes, 1000, 0},                                           // another client
		{0, "a", security.QuotaFetchBytes, 1 << 30, 0},                                          // fetch unlimited
		{500 * time.Millisecond, "a", security.QuotaProduceBytes, 0, 0},                         // nothing charged
		{500 * time.Millisecond, "a", security.QuotaProduceBytes, 1000, 500 * time.Millisecond}, // owed until t=2.5s at t=1s: 0.5 s over the burst
		{3 * time.Second, "a", security.QuotaProduceBytes, 100, 0},                              // paid off
		{0, "a", security.QuotaProduceBytes, 1 << 40, security.ThrottleMax},                     // capped
		{0, "a", security.QuotaProduceBytes, 1 << 40, security.ThrottleMax},                     // and not piled up
		{0, "c", security.QuotaRequests, 10, 0},                                                 // 10 requests in a burst
		{0, "c", security.QuotaRequests, 1, 100 * time.Millisecond},                             // the 11th waits 1/10 s
	} {
		clock.t = clock.t.Add(c.advance)
		if got := q.Record(c.client, c.kind, c.n); got != c.want {
			t.Errorf("step %d (%s %s %d): delay %v, want %v", i, c.client, c.kind, c.n, got, c.want)
		}
	}
	if d := security.NewQuotas(security.QuotaConfig{}).Record("a", security.QuotaRequests, 1<<40); d != 0 {
		t.Errorf("quotas without a rate delayed %v", d)
	}
	if k := security.QuotaKey(security.Anonymous, "app-1"); k != "client-id:app-1" {
		t.Errorf("anonymous key %q", k)
	}
	if k := security.QuotaKey("User:alice", "app-1"); k != "User:alice" {
		t.Errorf("principal key %q", k)
	}
}

// TestQuotaCharge: Charge counts one request and both byte kinds and returns the longest
// of the three delays; ThrottleMillis is capped at ThrottleMax.
func TestQuotaCharge(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1_000_000, 0)}
	q := security.NewQuotas(security.QuotaConfig{Default: security.QuotaRates{ProduceBytesPerSec: 1000, FetchBytesPerSec: 100, RequestsPerSec: 2},
		Burst: time.Second, Now: clock.now})
	for i, c := range []struct {
		produce, fetch int64
		want           time.Duration
	}{
		{1000, 0, 0},                        // a burst of produce bytes, the first request
		{0, 100, 0},                         // a burst of fetch bytes, the second request
		{0, 0, 500 * time.Millisecond},      // the third request: half a second over 2/s
		{500, 0, 1000 * time.Millisecond},   // requests owe 1 s over, produce 0.5 s: the longer
		{0, 1000, 10000 * time.Millisecond}, // fetch owes 10 s over: the longest
	} {
		if got := q.Charge("a", c.produce, c.fetch); got != c.want {
			t.Errorf("step %d (produce %d, fetch %d): delay %v, want %v", i, c.produce, c.fetch, got, c.want)
		}
	}
	if ms := security.ThrottleMillis(time.Hour); ms != int32(security.ThrottleMax.Milliseconds()) {
		t.Errorf("ThrottleMillis(1h) = %d", ms)
	}
}

// TestQuotaClientsBounded: a flood of client ids stays within QuotaClientsMax buckets.
func TestQuotaClientsBounded(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1_000_000, 0)}
	q := security.NewQuotas(security.QuotaConfig{Default: security.QuotaRates{RequestsPerSec: 1}, Burst: time.Second, Now: clock.now})
	for i := range security.QuotaClientsMax * 2 {
		q.Record(security.QuotaKey("", string(rune(i))+"-id"), security.QuotaRequests, 5)
	}
	// Every bucket is in debt, so the overflow bucket took the rest: it is deep in debt.
	if d := q.Record(security.QuotaKey("", "one-more"), security.QuotaRequests, 1); d == 0 {
		t.Error("the overflow bucket owes nothing after 10,000 clients")
	}
	clock.t = clock.t.Add(time.Hour) // everyone idle: room again
	if d := q.Record(security.QuotaKey("", "fresh"), security.QuotaRequests, 1); d != 0 {
		t.Errorf("a fresh client after the idle ones were dropped: %v", d)
	}
}

func BenchmarkQuotaRecord(b *testing.B) {
	q := security.NewQuotas(security.QuotaConfig{Default: security.QuotaRates{ProduceBytesPerSec: 1 << 40}})
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		q.Record("User:alice", security.QuotaProduceBytes, 1024)
	}
}

// TestQuotaOverrides: an override replaces every rate of the client it names, parsing
// refuses what it cannot read, and SetRates applies at once.
func TestQuotaOverrides(t *testing.T) {
	overrides, err := security.ParseQuotaOverrides("User:bulk=produce:100 ; client-id:etl=fetch:0,requests:5")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]security.QuotaRates{"User:bulk": {ProduceBytesPerSec: 100}, "client-id:etl": {RequestsPerSec: 5}}
	if len(overrides) != 2 || overrides["User:bulk"] != want["User:bulk"] || overrides["client-id:etl"] != want["client-id:etl"] {
		t.Fatalf("parsed %+v", overrides)
	}
	for _, bad := range []string{"alice=produce:1", "User:a=produce", "User:a=produce:-1", "User:a=bytes:1", "User:a=produce:1;User:a=fetch:1", "client-id:=fetch:1"} {
		if _, err := security.ParseQuotaOverrides(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	clock := &fakeClock{t: time.Unix(1_000_000, 0)}
	q := security.NewQuotas(security.QuotaConfig{Default: security.QuotaRates{ProduceBytesPerSec: 1000}, Overrides: overrides, Burst: time.Second, Now: clock.now})
	if d := q.Record("User:bulk", security.QuotaProduceBytes, 200); d != time.Second {
		t.Errorf("override: %v, want 1s (200 B at 100 B/s, 1 s burst)", d)
	}
	if d := q.Record("client-id:etl", security.QuotaProduceBytes, 1<<30); d != 0 {
		t.Errorf("an override without a produce rate throttled produce: %v", d)
	}
	if d := q.Record("User:other", security.QuotaProduceBytes, 2000); d != time.Second {
		t.Errorf("default: %v", d)
	}
	q.SetRates(security.QuotaRates{}, 0, nil)
	if d := q.Record("User:other", security.QuotaProduceBytes, 1<<30); d != 0 {
		t.Errorf("after SetRates to unlimited: %v", d)
	}
}

// TestGroupQuota: a group's bucket takes the groups' default fetch rate or its override,
// is shared by every charge to it, limits fetch only, and does not touch a client's own.
func TestGroupQuota(t *testing.T) {
	overrides, err := security.ParseQuotaOverrides("group:replay=fetch:1000")
	if err != nil || overrides["group:replay"] != (security.QuotaRates{FetchBytesPerSec: 1000}) {
		t.Fatalf("parsed %+v, %v", overrides, err)
	}
	for _, bad := range []string{"group:replay=produce:1", "group:=fetch:1", "group:g=fetch:1,requests:2"} {
		if _, err := security.ParseQuotaOverrides(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	clock := &fakeClock{t: time.Unix(1_000_000, 0)}
	q := security.NewQuotas(security.QuotaConfig{GroupFetchBytesPerSec: 500, Overrides: overrides, Burst: time.Second, Now: clock.now})
	if !q.Active() {
		t.Fatal("a group rate alone is not active")
	}
	replay := security.QuotaGroupKey("replay")
	// Two members' charges add up in one bucket: 1,000 B/s and a 1 s burst.
	if d := q.Record(replay, security.QuotaFetchBytes, 1000); d != 0 {
		t.Errorf("first member within the burst: %v", d)
	}
	if d := q.Record(replay, security.QuotaFetchBytes, 1000); d != time.Second {
		t.Errorf("second member: %v, want 1s", d)
	}
	if d := q.Record(security.QuotaGroupKey("other"), security.QuotaFetchBytes, 1000); d != time.Second {
		t.Errorf("a group at the default 500 B/s: %v, want 1s", d)
	}
	if d := q.Record("User:member", security.QuotaFetchBytes, 1<<30); d != 0 {
		t.Errorf("the group rate throttled a client's own bucket: %v", d)
	}
	if d := q.Record(replay, security.QuotaProduceBytes, 1<<30); d != 0 {
		t.Errorf("a group's produce was throttled: %v", d)
	}
}
