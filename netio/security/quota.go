package security

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Quotas hold each client to byte and request rates. A client is its principal once
// authenticated, else its client id (Kafka's quota entities). Each (client, kind) pair is
// a GCRA bucket ("theoretical arrival time"): recording n units moves the bucket's time
// n/rate forward from max(then, now); a client that runs more than Burst ahead of the
// clock is told to wait the difference. The caller (a listener) delays its reply by that
// long and reports it as the throttle time, so the client slows down without anything
// being dropped; a client that keeps its own in-flight window bounded (every Kafka client,
// the bundled one) is held to the rate.
//
// Cost: one map lookup and one mutex per recorded request. Memory: at most
// QuotaClientsMax clients; beyond them, clients idle for a burst are dropped, and new
// clients share one overflow bucket until room frees up (the table is swept for idle
// clients at most once a burst).
type Quotas struct {
	cfg atomic.Pointer[QuotaConfig] // replaced whole by SetRates
	now func() time.Time

	mu        sync.Mutex
	clients   map[string]*quotaClient // guarded by mu
	lastSweep time.Time               // guarded by mu: when idle clients were last dropped
}

// QuotaKind names what a bucket counts.
type QuotaKind int

const (
	QuotaProduceBytes QuotaKind = iota // request bytes of produce requests
	QuotaFetchBytes                    // record bytes of fetch responses
	QuotaRequests                      // requests of any kind
	quotaKinds
)

func (k QuotaKind) String() string {
	return [...]string{"produce bytes", "fetch bytes", "requests"}[k]
}

// QuotaRates are the rates of one client; 0 leaves a kind unlimited.
type QuotaRates struct {
	ProduceBytesPerSec int64
	FetchBytesPerSec   int64
	RequestsPerSec     int64
}

// QuotaConfig sets the rates: Default for every client, Overrides for the clients named
// (by QuotaKey: "User:NAME" or "client-id:ID"), whose every kind then comes from the
// override (0 in it: unlimited).
type QuotaConfig struct {
	Default QuotaRates
	// GroupFetchBytesPerSec is the fetch rate of every consumer group (QuotaGroupKey)
	// without an override: all the fetches its members charge to it together; 0:
	// unlimited.
	GroupFetchBytesPerSec int64
	// Overrides name clients ("User:NAME", "client-id:ID") or groups ("group:NAME", fetch
	// only).
	Overrides map[string]QuotaRates
	// Burst is how far ahead of its rate a client may run before it is throttled;
	// default 1s (a client may send a second's worth at once).
	Burst time.Duration
	// Now is the clock; default time.Now (tests inject one).
	Now func() time.Time
}

// Limits of the quota state.
const (
	QuotaClientsMax = 10000
	// ThrottleMax caps one delay: a client far over its rate waits this long per
	// response, and its debt is not carried beyond it (Kafka caps at its quota window).
	ThrottleMax   = 10 * time.Second
	overflowKey   = "\x00overflow"
	burstDefault  = time.Second
	clientNameMax = 256
)

type quotaClient struct {
	tat [quotaKinds]time.Time // theoretical arrival time per kind
}

// NewQuotas returns quotas with cfg's rates (all unlimited when none is set: SetRates can
// set them later).
func NewQuotas(cfg QuotaConfig) *Quotas {
	if cfg.Burst <= 0 {
		cfg.Burst = burstDefault
	}
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	q := &Quotas{now: now, clients: map[string]*quotaClient{}}
	q.cfg.Store(&cfg)
	return q
}

// Config returns the rates in force.
func (q *Quotas) Config() QuotaConfig { return *q.cfg.Load() }

// SetRates replaces the default rates, the groups' default fetch rate and the overrides
// (SIGHUP); what clients and groups owe is kept.
func (q *Quotas) SetRates(def QuotaRates, groupFetchBytesPerSec int64, overrides map[string]QuotaRates) {
	cfg := *q.cfg.Load()
	cfg.Default, cfg.GroupFetchBytesPerSec, cfg.Overrides = def, groupFetchBytesPerSec, overrides
	q.cfg.Store(&cfg)
}

// Active reports whether any rate is set: a listener skips all quota work otherwise.
func (q *Quotas) Active() bool {
	cfg := q.cfg.Load()
	return cfg.Default != (QuotaRates{}) || cfg.GroupFetchBytesPerSec > 0 || len(cfg.Overrides) > 0
}

// Get returns rates' rate of kind.
func (r QuotaRates) Get(kind QuotaKind) int64 {
	switch kind {
	case QuotaProduceBytes:
		return r.ProduceBytesPerSec
	case QuotaFetchBytes:
		return r.FetchBytesPerSec
	}
	return r.RequestsPerSec
}

func (q *Quotas) rates(client string) (QuotaRates, time.Duration) {
	cfg := q.cfg.Load()
	if r, ok := cfg.Overrides[client]; ok {
		return r, cfg.Burst
	}
	if strings.HasPrefix(client, groupPrefix) {
		return QuotaRates{FetchBytesPerSec: cfg.GroupFetchBytesPerSec}, cfg.Burst
	}
	return cfg.Default, cfg.Burst
}

// groupPrefix starts the key of a consumer group's bucket.
const groupPrefix = "group:"

// QuotaGroupBytesMax bounds a group name a connection may charge its fetches to.
const QuotaGroupBytesMax = clientNameMax

// QuotaGroupKey is the bucket of consumer group group: every connection that stated the
// group (the QuotaGroup request) charges its fetches to it as well as to its own client.
func QuotaGroupKey(group string) string { return groupPrefix + group }

// QuotaKey is the bucket name of a connection: its principal when it authenticated,
// else "client-id:" and the client id it gave.
func QuotaKey(principal, clientID string) string {
	if principal != "" && principal != Anonymous {
		return principal
	}
	if len(clientID) > clientNameMax {
		clientID = clientID[:clientNameMax]
	}
	return "client-id:" + clientID
}

// Record charges n units of kind to client and returns how long its reply should wait
// (0 when it is within its rate).
func (q *Quotas) Record(client string, kind QuotaKind, n int64) time.Duration {
	rates, burst := q.rates(client)
	rate := rates.Get(kind)
	if rate <= 0 || n <= 0 {
		return 0
	}
	now := q.now()
	q.mu.Lock()
	defer q.mu.Unlock()
	c := q.clientLocked(client, now, burst)
	tat := c.tat[kind]
	if tat.Before(now) {
		tat = now
	}
	tat = tat.Add(time.Duration(float64(n) / float64(rate) * float64(time.Second)))
	// Debt beyond the longest throttle is forgiven: it could never be waited out.
	if limit := now.Add(burst + ThrottleMax); tat.After(limit) {
		tat = limit
	}
	c.tat[kind] = tat
	delay := tat.Sub(now) - burst
	if delay <= 0 {
		return 0
	}
	return delay
}

// Charge records one request of client with the produce request bytes and fetch record
// bytes it carries (0 for other requests) and returns how long its reply should wait: the
// longest delay of the three buckets. Both listeners charge through it (netio/quota.go,
// netio/kafka/quota.go), so a client is held to one rate whichever protocol it speaks.
func (q *Quotas) Charge(client string, produceBytes, fetchBytes int64) time.Duration {
	delay := q.Record(client, QuotaRequests, 1)
	delay = max(delay, q.Record(client, QuotaProduceBytes, produceBytes))
	return max(delay, q.Record(client, QuotaFetchBytes, fetchBytes))
}

// ThrottleMillis is delay as a response's throttle-time field.
func ThrottleMillis(delay time.Duration) int32 {
	return int32(min(delay, ThrottleMax).Milliseconds())
}

func (q *Quotas) clientLocked(key string, now time.Time, burst time.Duration) *quotaClient {
	if c := q.clients[key]; c != nil {
		return c
	}
	// A full table is swept for idle clients at most once a burst, so that a flood of new
	// client ids costs one O(QuotaClientsMax) sweep per burst, not one per request.
	if len(q.clients) >= QuotaClientsMax && now.Sub(q.lastSweep) >= burst {
		q.lastSweep = now
		for k, c := range q.clients { // drop clients with nothing owed
			idle := true
			for _, t := range c.tat {
				idle = idle && !t.After(now)
			}
			if idle {
				delete(q.clients, k)
			}
		}
	}
	if len(q.clients) >= QuotaClientsMax {
		key = overflowKey
		if c := q.clients[key]; c != nil {
			return c
		}
	}
	c := &quotaClient{}
	q.clients[key] = c
	return c
}

// ParseQuotaOverrides reads overrides as the --quota-overrides flag spells them:
//
//	ENTITY=KIND:RATE[,KIND:RATE...][;ENTITY=...]
//
// ENTITY is "User:NAME", "client-id:ID" or "group:NAME", KIND is produce, fetch or
// requests (a group's only kind is fetch), RATE a non-negative integer (bytes or requests
// per second; 0: unlimited). Kinds an override does not name are unlimited for that
// client.
func ParseQuotaOverrides(s string) (map[string]QuotaRates, error) {
	out := map[string]QuotaRates{}
	for _, entry := range strings.Split(s, ";") {
		if entry = strings.TrimSpace(entry); entry == "" {
			continue
		}
		entity, spec, ok := strings.Cut(entry, "=")
		entity = strings.TrimSpace(entity)
		group := strings.HasPrefix(entity, groupPrefix) && len(entity) > len(groupPrefix) && len(entity) <= len(groupPrefix)+QuotaGroupBytesMax
		if !ok || !(ValidPrincipal(entity) || group || strings.HasPrefix(entity, "client-id:") && len(entity) > len("client-id:")) {
			return nil, fmt.Errorf("quota override %q: want User:NAME=KIND:RATE, client-id:ID=KIND:RATE or group:NAME=fetch:RATE", entry)
		}
		if _, dup := out[entity]; dup {
			return nil, fmt.Errorf("quota override for %s given twice", entity)
		}
		var r QuotaRates
		for _, kv := range strings.Split(spec, ",") {
			kind, value, ok := strings.Cut(strings.TrimSpace(kv), ":")
			rate, err := strconv.ParseInt(value, 10, 64)
			if !ok || err != nil || rate < 0 {
				return nil, fmt.Errorf("quota override %q: %q: want KIND:RATE with a rate >= 0", entry, kv)
			}
			switch {
			case kind == "fetch":
				r.FetchBytesPerSec = rate
			case group:
				return nil, fmt.Errorf("quota override %q: kind %q: a group's only quota is fetch", entry, kind)
			case kind == "produce":
				r.ProduceBytesPerSec = rate
			case kind == "requests":
				r.RequestsPerSec = rate
			default:
				return nil, fmt.Errorf("quota override %q: kind %q: want produce, fetch or requests", entry, kind)
			}
		}
		out[entity] = r
	}
	return out, nil
}
