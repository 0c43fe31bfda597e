package kafka

// Authentication on the Kafka listener: the per-connection session (who the client is),
// the gate that refuses requests before login, and the SCRAM exchange shared by
// SaslHandshake and SaslAuthenticate. The parts that know no wire format (credentials,
// the SCRAM mechanism, principals) are netio/security's, as on the ringlog listener
// (netio/security.go); the enforcement settings are the ringlog server's netio.Security,
// so one configuration secures both listeners.

import (
	"errors"
	"fmt"
	"reflect"

	"github.com/ringlog/ringlog/netio/security"
	"github.com/ringlog/ringlog/netio/security/scram"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// session is the security state of one connection. Only the connection's reader
// goroutine touches it: the TLS handshake and the SASL APIs (which answer synchronously
// in serve) set it, and dispatch reads it before handing a request on.
type session struct {
	principal string        // "" until authenticated (SCRAM or client certificate)
	conv      *scram.Server // the SCRAM exchange under way, after SaslHandshake
	stage     int           // SaslAuthenticate messages received in this exchange
}

// Principal is the connection's authenticated principal, or security.Anonymous.
func (ss *session) Principal() string {
	if ss.principal == "" {
		return security.Anonymous
	}
	return ss.principal
}

// preAuth reports whether an API may be sent before authentication (Kafka's rule: the
// version probe and the SASL exchange itself).
func preAuth(key int16) bool {
	return key == keyApiVersions || key == keySaslHandshake || key == keySaslAuthenticate
}

// authRequired reports whether unauthenticated connections are refused.
func (s *Server) authRequired() bool {
	return s.cfg.Security != nil && s.cfg.Security.AuthRequired
}

// refuseUnauthenticated answers a request sent before login and closes the connection
// after it. A Kafka broker closes a SASL connection that sends anything but the SASL
// exchange first, without an answer; here a response whose version has a top-level error
// code carries SASL_AUTHENTICATION_FAILED first, so that the client can say why (a
// per-entry code could go unseen: a Metadata request for all topics has no entries).
func (s *Server) refuseUnauthenticated(p *pending, req kmsg.Request) {
	s.logf("kafka: closing connection from %s (client id %q): %s before authenticating", p.c.remote, truncateForLog(p.hdr.clientID), kmsg.NameForKey(p.hdr.key))
	p.fatal = true
	resp := req.ResponseKind()
	resp.SetVersion(req.GetVersion())
	if !setTopLevelError(resp, kerr.SaslAuthenticationFailed.Code) || !encodesTopLevelError(resp) {
		resp = nil
	}
	p.reply(resp, nil)
}

// encodesTopLevelError reports whether resp's version carries its top-level error code
// (kmsg structs have the field at every version; older versions drop it on the wire).
func encodesTopLevelError(resp kmsg.Response) bool {
	back := kmsg.ResponseForKey(resp.Key())
	back.SetVersion(resp.GetVersion())
	if back.ReadFrom(resp.AppendTo(nil)) != nil {
		return false
	}
	return reflect.ValueOf(back).Elem().FieldByName("ErrorCode").Int() != 0
}

// mechanismNames are the SASL mechanisms offered: the SCRAM ones when the broker has a
// credentials store, none otherwise.
func (s *Server) mechanismNames() []string {
	if s.cfg.Security == nil || s.cfg.Security.Credentials == nil {
		return []string{}
	}
	return scram.Names()
}

// startSASL begins a SCRAM exchange with mechanism; it returns the Kafka error code and
// whether the connection must close after the reply.
func (s *Server) startSASL(c *conn, mechanism string) (code int16, msg string, fatal bool) {
	m := scram.ByName(mechanism)
	switch {
	case s.cfg.Security == nil || s.cfg.Security.Credentials == nil || m == nil:
		return kerr.UnsupportedSaslMechanism.Code, fmt.Sprintf("mechanism %q is not offered", truncateForLog(mechanism)), true
	case c.sess.principal != "" || c.sess.conv != nil:
		return kerr.IllegalSaslState.Code, "already authenticated or authenticating on this connection", true
	}
	creds := s.cfg.Security.Credentials
	c.sess.conv, c.sess.stage = m.NewServer(creds.Lookup, creds.Fake), 0
	return 0, "", false
}

// stepSASL feeds one SaslAuthenticate message to the exchange under way and returns the
// server's message; on failure the code to answer and the connection closes after it.
// The log line names the user (never a password or a proof), so that an operator can
// tell a typo from an attack; the client learns only that it failed.
func (s *Server) stepSASL(c *conn, in []byte) (out []byte, code int16, msg string) {
	conv, stage := c.sess.conv, c.sess.stage
	c.sess.stage++
	var reply string
	var err error
	switch {
	case conv == nil || stage > 1:
		return nil, kerr.IllegalSaslState.Code, "SaslAuthenticate without a SaslHandshake, or after the exchange ended"
	case stage == 0:
		reply, err = conv.First(string(in))
	default:
		reply, err = conv.Final(string(in))
	}
	if err != nil {
		s.logf("kafka: conn from %s: SASL authentication failed for user %q: %v", c.remote, truncateForLog(conv.User()), err)
		c.sess.conv = nil
		msg = "authentication failed"
		if errors.Is(err, scram.ErrMalformed) {
			msg = err.Error()
		}
		return nil, kerr.SaslAuthenticationFailed.Code, msg
	}
	if stage == 1 {
		c.sess.principal, c.sess.conv = security.UserPrincipal(conv.User()), nil
	}
	return []byte(reply), 0, ""
}

// truncateForLog bounds untrusted text in a log line or an error message.
func truncateForLog(s string) string {
	const max = 64
	if len(s) > max {
		return s[:max] + "..."
	}
	return s
}
