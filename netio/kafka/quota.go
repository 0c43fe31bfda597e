package kafka

// Quotas on the Kafka listener (docs/security.md "Quotas"): every request but ApiVersions
// and the SASL exchange is charged, when its response is encoded, to its client's buckets
// through security.Quotas.Charge — the ringlog listener's accounting (netio/quota.go),
// keyed the same way (the principal, else "client-id:" and the Kafka client id), so a
// client is held to one rate whichever protocol it speaks. A client over its rate gets the
// throttle time in the response's ThrottleMillis and waits as Kafka makes it wait:
//
//   - a response version whose client throttles itself after it (KIP-219: Produce v6+,
//     Fetch v8+, and the like; kmsg's ThrottleResponse says which) is sent at once, and
//     the connection's reads are then muted for the throttle time, so a client that
//     ignores it is held back all the same (requests it already sent, at most the
//     in-flight limit, are still read and served);
//   - an older version, or a response without the field, is held back for the throttle
//     time before it is written (and the responses after it on the connection with it).
//
// An acks=0 produce has no response: its connection is muted. Nothing is dropped or refused.

import (
	"time"

	"github.com/ringlog/ringlog/netio/security"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// quotas is the Quotas in force, nil when none is set.
func (s *Server) quotas() *security.Quotas {
	sec := s.cfg.Security
	if sec == nil || sec.Quotas == nil || !sec.Quotas.Active() {
		return nil
	}
	return sec.Quotas
}

// quotaKey is p's quota bucket ("" when it is not charged). The reader's, at dispatch: the
// session is the reader's alone.
func (s *Server) quotaKey(p *pending) string {
	if preAuth(p.hdr.key) || s.quotas() == nil {
		return ""
	}
	return security.QuotaKey(p.c.sess.principal, p.hdr.clientID)
}

// finish completes resp (nil: no response) just before the writer encodes it: the ACL
// step's denied entries go in (authorize.go), then the reply is charged to the client's
// quotas with the fetch record bytes it carries, and its throttle time is set.
func (p *pending) finish(resp kmsg.Response, fetchBytes int64) {
	if p.amend != nil && resp != nil {
		p.amend(resp)
	}
	if p.quotaKey == "" {
		return
	}
	q := p.c.s.quotas()
	if q == nil { // switched off since dispatch (SIGHUP)
		return
	}
	var produceBytes int64
	if p.hdr.key == keyProduce {
		produceBytes = p.frameBytes
	}
	delay := q.Charge(p.quotaKey, produceBytes, fetchBytes)
	if delay <= 0 {
		return
	}
	p.c.s.throttled.Add(1)
	clientWaits := false
	if t, ok := resp.(kmsg.ThrottleResponse); ok {
		resp.(kmsg.SetThrottleResponse).SetThrottle(security.ThrottleMillis(delay))
		_, clientWaits = t.Throttle()
	}
	if resp == nil || clientWaits {
		p.mute = delay
	} else {
		p.hold = delay
	}
}

// holdBack waits out the longest hold of batch before the writer sends it, or until the
// connection fails or the server shuts down (then the batch goes at once: a graceful
// shutdown does not wait out throttles).
func (c *conn) holdBack(batch []*pending) {
	var hold time.Duration
	for _, q := range batch {
		hold = max(hold, q.hold)
	}
	if hold > 0 {
		sleep(hold, c.quit, c.s.closing)
	}
}

// muteAfter mutes the connection's reads for the longest mute of batch, from now (just
// before the batch is written).
func (c *conn) muteAfter(batch []*pending) {
	var mute time.Duration
	for _, q := range batch {
		mute = max(mute, q.mute)
	}
	if mute <= 0 {
		return
	}
	until := time.Now().Add(mute).UnixNano()
	for {
		cur := c.mutedUntil.Load()
		if cur >= until || c.mutedUntil.CompareAndSwap(cur, until) {
			return
		}
	}
}

// waitMuted holds the reader while the connection is muted; false when the connection
// fails or the server shuts down meanwhile.
func (c *conn) waitMuted() bool {
	d := time.Until(time.Unix(0, c.mutedUntil.Load()))
	return d <= 0 || sleep(d, c.quit, c.s.closing)
}

// sleep waits d; false when quit or closing closes first.
func sleep(d time.Duration, quit, closing <-chan struct{}) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-quit:
		return false
	case <-closing:
		return false
	}
}
