package security

import (
	"sync"
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
	cfg QuotaConfig
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

// QuotaConfig sets the per-client rates; 0 leaves a kind unlimited.
type QuotaConfig struct {
	ProduceBytesPerSec int64
	FetchBytesPerSec   int64
	RequestsPerSec     int64
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

// NewQuotas returns quotas with cfg's rates; nil if every rate is 0.
func NewQuotas(cfg QuotaConfig) *Quotas {
	if cfg.ProduceBytesPerSec <= 0 && cfg.FetchBytesPerSec <= 0 && cfg.RequestsPerSec <= 0 {
		return nil
	}
	if cfg.Burst <= 0 {
		cfg.Burst = burstDefault
	}
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	return &Quotas{cfg: cfg, now: now, clients: map[string]*quotaClient{}}
}

// Config returns the rates in force.
func (q *Quotas) Config() QuotaConfig { return q.cfg }

func (q *Quotas) rate(kind QuotaKind) int64 {
	switch kind {
	case QuotaProduceBytes:
		return q.cfg.ProduceBytesPerSec
	case QuotaFetchBytes:
		return q.cfg.FetchBytesPerSec
	}
	return q.cfg.RequestsPerSec
}

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
	rate := q.rate(kind)
	if rate <= 0 || n <= 0 {
		return 0
	}
	now := q.now()
	q.mu.Lock()
	defer q.mu.Unlock()
	c := q.clientLocked(client, now)
	tat := c.tat[kind]
	if tat.Before(now) {
		tat = now
	}
	tat = tat.Add(time.Duration(float64(n) / float64(rate) * float64(time.Second)))
	// Debt beyond the longest throttle is forgiven: it could never be waited out.
	if limit := now.Add(q.cfg.Burst + ThrottleMax); tat.After(limit) {
		tat = limit
	}
	c.tat[kind] = tat
	delay := tat.Sub(now) - q.cfg.Burst
	if delay <= 0 {
		return 0
	}
	return delay
}

func (q *Quotas) clientLocked(key string, now time.Time) *quotaClient {
	if c := q.clients[key]; c != nil {
		return c
	}
	// A full table is swept for idle clients at most once a burst, so that a flood of new
	// client ids costs one O(QuotaClientsMax) sweep per burst, not one per request.
	if len(q.clients) >= QuotaClientsMax && now.Sub(q.lastSweep) >= q.cfg.Burst {
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
