package netio

// Quotas on the ringlog protocol listener (docs/security.md "Quotas"): every reply is
// charged to its client's buckets (security.Quotas) as the handler gives it, and a client
// over its rate has the reply held back for the throttle time, which produce and fetch
// responses carry in ThrottleMs. Nothing is dropped or refused. A connection that stated
// a consumer group (QuotaGroup) charges its fetches to the group's bucket as well, which
// every member's connections share.

import (
	"fmt"
	"time"

	"github.com/ringlog/ringlog/netio/security"
	"github.com/ringlog/ringlog/netio/wire"
)

// throttle charges req's reply to its client's quotas, writes the throttle time into the
// reply where the schema has the field, and returns how long to hold the reply back.
func (s *Server) throttle(req *Request, resp *Response) time.Duration {
	sec := s.cfg.Security
	if sec == nil || sec.Quotas == nil || req.Conn.Session == nil || !sec.Quotas.Active() {
		return 0
	}
	switch req.Header.API {
	case wire.APIVersions, wire.APISaslHandshake, wire.APISaslAuthenticate:
		return 0 // the handshake is never throttled
	}
	var produceBytes, fetchBytes int64
	switch m := resp.Body.(type) {
	case *wire.ProduceResponse:
		produceBytes = int64(req.Header.Length)
	case *wire.FetchResponse:
		fetchBytes = fetchRecordBytes(m)
	}
	delay := sec.Quotas.Charge(req.Conn.Session.quotaKey(), produceBytes, fetchBytes)
	if group := req.Conn.Session.quotaGroup(); group != "" && fetchBytes > 0 {
		delay = max(delay, sec.Quotas.Record(group, security.QuotaFetchBytes, fetchBytes))
	}
	if delay > 0 {
		switch m := resp.Body.(type) {
		case *wire.ProduceResponse:
			m.ThrottleMs = security.ThrottleMillis(delay)
		case *wire.FetchResponse:
			m.ThrottleMs = security.ThrottleMillis(delay)
		}
	}
	if delay > 0 {
		s.stats.throttled.Add(1)
	}
	return delay
}

// quotaGroup answers QuotaGroup: the connection's fetches are charged to the group from
// now on (an empty name: to no group). With ACLs on, the principal needs read on the
// group (as to join it): a connection cannot spend another group's budget.
func (s *Server) quotaGroup(sess *Session, body *wire.QuotaGroupRequest) *wire.QuotaGroupResponse {
	if len(body.Group) > security.QuotaGroupBytesMax {
		return &wire.QuotaGroupResponse{ErrorCode: wire.ErrInvalidGroupID,
			ErrorMessage: fmt.Sprintf("group name longer than %d bytes", security.QuotaGroupBytesMax)}
	}
	if sec := s.cfg.Security; body.Group != "" && sec != nil && sec.Authorizer != nil && sec.Authorizer.Enabled() {
		p := sess.Principal()
		if !sec.Authorizer.Authorize(p, security.OpRead, security.ResourceGroup, body.Group) {
			return &wire.QuotaGroupResponse{ErrorCode: wire.ErrGroupAuthorizationFailed,
				ErrorMessage: fmt.Sprintf("%s may not read group %q", p, body.Group)}
		}
	}
	key := ""
	if body.Group != "" {
		key = security.QuotaGroupKey(body.Group)
	}
	sess.mu.Lock()
	sess.group = key
	sess.mu.Unlock()
	return &wire.QuotaGroupResponse{}
}

// quotaGroup is the quota key of the group the connection stated; "" for none.
func (s *Session) quotaGroup() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.group
}

// fetchRecordBytes is the record bytes a fetch response carries, in memory or as file
// ranges.
func fetchRecordBytes(m *wire.FetchResponse) int64 {
	var n int64
	for i := range m.Topics {
		for j := range m.Topics[i].Partitions {
			p := &m.Topics[i].Partitions[j]
			n += int64(len(p.Records))
			for _, fr := range p.RecordsFile {
				n += fr.Length
			}
		}
	}
	return n
}
