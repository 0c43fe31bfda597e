package kafka

import (
	"github.com/twmb/franz-go/pkg/kmsg"
)

// SaslAuthenticate (key 36), v0-v2: one SCRAM message each way (client-first, then
// client-final, after a SaslHandshake). A failure is answered with
// SASL_AUTHENTICATION_FAILED (ILLEGAL_SASL_STATE out of order) and the connection closed.
// SessionLifetimeMillis is 0: a session does not expire (no re-authentication, KIP-368).
var saslAuthenticateAPI = api{
	key: keySaslAuthenticate, min: 0, max: 2,
	serve: func(s *Server, p *pending, req kmsg.Request) {
		r := req.(*kmsg.SASLAuthenticateRequest)
		resp := r.ResponseKind().(*kmsg.SASLAuthenticateResponse)
		var msg string
		resp.SASLAuthBytes, resp.ErrorCode, msg = s.stepSASL(p.c, r.SASLAuthBytes)
		if resp.ErrorCode != 0 {
			resp.ErrorMessage, p.fatal = &msg, true
		}
		p.reply(resp, nil)
	},
	fail: func(req kmsg.Request, code int16, msg string) kmsg.Response {
		resp := req.ResponseKind().(*kmsg.SASLAuthenticateResponse)
		resp.ErrorCode, resp.ErrorMessage = code, &msg
		return resp
	},
}
