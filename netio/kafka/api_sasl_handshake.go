package kafka

import (
	"github.com/twmb/franz-go/pkg/kmsg"
)

// SaslHandshake (key 17), v0-v1: picks the SCRAM mechanism and lists those offered. The
// exchange itself must follow as SaslAuthenticate requests (what clients do when
// ApiVersions lists key 36); v0's raw, unframed SASL tokens are not read (their first
// bytes are no Kafka API: the connection closes). An unknown mechanism, or a second
// handshake, is answered and the connection closed, as a Kafka broker does.
var saslHandshakeAPI = api{
	key: keySaslHandshake, min: 0, max: 1,
	serve: func(s *Server, p *pending, req kmsg.Request) {
		r := req.(*kmsg.SASLHandshakeRequest)
		resp := r.ResponseKind().(*kmsg.SASLHandshakeResponse)
		resp.SupportedMechanisms = s.mechanismNames()
		resp.ErrorCode, _, p.fatal = s.startSASL(p.c, r.Mechanism)
		p.reply(resp, nil)
	},
	fail: func(req kmsg.Request, code int16, _ string) kmsg.Response {
		resp := req.ResponseKind().(*kmsg.SASLHandshakeResponse)
		resp.ErrorCode = code
		return resp
	},
}
