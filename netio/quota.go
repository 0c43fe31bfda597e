package netio

// Quotas on the ringlog protocol listener (docs/security.md "Quotas"): every reply is
// charged to its client's buckets (security.Quotas) as the handler gives it, and a client
// over its rate has the reply held back for the throttle time, which produce and fetch
// responses carry in ThrottleMs. Nothing is dropped or refused.

import (
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
