package netio

// Security on the ringlog protocol listener: the per-connection Session (who the client
// is), the SASL/SCRAM exchange (SaslHandshake, SaslAuthenticate) answered by the server
// itself, the authentication gate, and the administration of users and ACLs. The parts
// that know no wire format (credentials, ACLs, quotas, TLS) are in netio/security; this
// file maps the protocol onto them. ACL decisions on data requests are in authorize.go.

import (
	"errors"
	"fmt"
	"sync"

	"github.com/ringlog/ringlog/netio/security"
	"github.com/ringlog/ringlog/netio/security/scram"
	"github.com/ringlog/ringlog/netio/wire"
)

// Security is what the server enforces. A nil Config.Security enforces nothing: every
// connection is security.Anonymous and the security APIs are refused.
type Security struct {
	// Credentials answers SCRAM exchanges and holds the users AlterUsers changes; nil:
	// SASL is not offered.
	Credentials *security.Credentials
	// AuthRequired closes, after a SASL_AUTHENTICATION_FAILED reply, a connection that
	// sends any request but ApiVersions, SaslHandshake or SaslAuthenticate before it has
	// authenticated (by SCRAM, or by a client certificate under mutual TLS).
	AuthRequired bool
	// Authorizer decides ACLs and knows the super-users; nil: everything is allowed and
	// the ACL APIs are refused.
	Authorizer *security.Authorizer
	// Quotas, if set, throttles produce, fetch and request rates (quota.go).
	Quotas *security.Quotas
}

// Session is the security state of one connection, shared by its requests
// (ConnInfo.Session). It is set by the TLS handshake (mutual TLS) or the SASL exchange,
// which the server answers in request order on the connection's reading goroutine or loop.
type Session struct {
	mu        sync.Mutex
	principal string        // guarded by mu: "" until authenticated
	clientID  string        // guarded by mu: from ApiVersions
	conv      *scram.Server // guarded by mu: the SCRAM exchange under way
	stage     int           // guarded by mu: SCRAM messages received (0, 1, 2)
	key       string        // guarded by mu: the quota key, "" until first asked or after a change
	group     string        // guarded by mu: the quota group's key (QuotaGroup request); "": none
}

// quotaKey is the connection's quota bucket (security.QuotaKey), computed once per change
// of principal or client id.
func (s *Session) quotaKey() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.key == "" {
		s.key = security.QuotaKey(s.principal, s.clientID)
	}
	return s.key
}

// Principal is the authenticated principal, or security.Anonymous.
func (s *Session) Principal() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.principal == "" {
		return security.Anonymous
	}
	return s.principal
}

// Authenticated reports whether the connection proved who it is.
func (s *Session) Authenticated() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.principal != ""
}

// ClientID is the client id the connection gave in ApiVersions.
func (s *Session) ClientID() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.clientID
}

func (s *Session) setPrincipal(p string) {
	s.mu.Lock()
	s.principal, s.key = p, ""
	s.mu.Unlock()
}

// serveSecurity answers the security APIs and enforces authentication; it returns true if
// it took the request (replied or handed it on), false to serve it as usual.
func (s *Server) serveSecurity(req *Request) bool {
	sess := req.Conn.Session
	sec := s.cfg.Security
	switch body := req.Body.(type) {
	case *wire.APIVersionsRequest:
		sess.mu.Lock()
		sess.clientID, sess.key = body.ClientID, ""
		sess.mu.Unlock()
		return false
	case *wire.SaslHandshakeRequest:
		s.saslHandshake(req, body)
		return true
	case *wire.SaslAuthenticateRequest:
		s.saslAuthenticate(req, body)
		return true
	}
	if sec != nil && sec.AuthRequired && !sess.Authenticated() {
		req.markFatal()
		req.ReplyError(wire.ErrSaslAuthenticationFailed, "authenticate first: this broker requires SASL/SCRAM (SaslHandshake, SaslAuthenticate) or a client certificate")
		return true
	}
	switch body := req.Body.(type) {
	case *wire.QuotaGroupRequest:
		req.ReplyMessage(s.quotaGroup(sess, body))
		return true
	case *wire.DescribeUsersRequest, *wire.AlterUsersRequest, *wire.DescribeAclsRequest, *wire.CreateAclsRequest, *wire.DeleteAclsRequest:
		// Changes write files (fsync): never on a shard loop.
		go req.ReplyMessage(s.securityAdmin(req))
		return true
	}
	return s.authorize(req)
}

func (s *Server) mechanismNames() []string {
	if s.cfg.Security == nil || s.cfg.Security.Credentials == nil {
		return []string{}
	}
	return scram.Names()
}

func (s *Server) saslHandshake(req *Request, body *wire.SaslHandshakeRequest) {
	resp := &wire.SaslHandshakeResponse{Mechanisms: s.mechanismNames()}
	sess := req.Conn.Session
	m := scram.ByName(body.Mechanism)
	sess.mu.Lock()
	switch {
	case s.cfg.Security == nil || s.cfg.Security.Credentials == nil || m == nil:
		resp.ErrorCode, resp.ErrorMessage = wire.ErrUnsupportedSaslMechanism, fmt.Sprintf("mechanism %q is not offered", truncateForLog(body.Mechanism))
	case sess.principal != "" || sess.conv != nil:
		resp.ErrorCode, resp.ErrorMessage = wire.ErrIllegalSaslState, "already authenticated or authenticating on this connection"
		req.markFatal()
	default:
		creds := s.cfg.Security.Credentials
		sess.conv = m.NewServer(creds.Lookup, creds.Fake)
	}
	sess.mu.Unlock()
	req.ReplyMessage(resp)
}

func (s *Server) saslAuthenticate(req *Request, body *wire.SaslAuthenticateRequest) {
	sess := req.Conn.Session
	resp := &wire.SaslAuthenticateResponse{}
	sess.mu.Lock()
	conv, stage := sess.conv, sess.stage
	sess.stage++
	sess.mu.Unlock()
	var out string
	var err error
	switch {
	case conv == nil || stage > 1:
		resp.ErrorCode, resp.ErrorMessage = wire.ErrIllegalSaslState, "SaslAuthenticate without a SaslHandshake, or after the exchange ended"
		req.markFatal()
		req.ReplyMessage(resp)
		return
	case stage == 0:
		out, err = conv.First(string(body.AuthBytes))
	default:
		out, err = conv.Final(string(body.AuthBytes))
	}
	if err != nil {
		// The message names the user (never a password or a proof), so that an operator
		// can tell a typo from an attack; the client learns only that it failed.
		s.cfg.Logf("netio: conn %d from %s: SASL authentication failed for user %q: %v", req.Conn.ID, req.Conn.RemoteAddr, truncateForLog(conv.User()), err)
		s.stats.authFailures.Add(1)
		resp.ErrorCode, resp.ErrorMessage = wire.ErrSaslAuthenticationFailed, "authentication failed"
		if errors.Is(err, scram.ErrMalformed) {
			resp.ErrorMessage = err.Error()
		}
		req.markFatal()
		req.ReplyMessage(resp)
		return
	}
	resp.AuthBytes = []byte(out)
	if stage == 1 {
		p := security.UserPrincipal(conv.User())
		sess.mu.Lock()
		sess.principal, sess.conv, sess.key = p, nil, ""
		sess.mu.Unlock()
		resp.Principal = p
	}
	req.ReplyMessage(resp)
}

// truncateForLog bounds untrusted text in a log line or an error message.
func truncateForLog(s string) string {
	const max = 64
	if len(s) > max {
		return s[:max] + "..."
	}
	return s
}

// clusterAdmin decides administration (users, ACLs): a super-user always; with ACLs on,
// whoever has op on the cluster; with ACLs off, anyone when authentication is off too and
// nobody else (users cannot grant themselves rights on a broker that requires logins).
func (s *Server) clusterAdmin(principal string, op security.Operation) bool {
	sec := s.cfg.Security
	a := sec.Authorizer
	if a != nil && a.IsSuperUser(principal) {
		return true
	}
	if a != nil && a.Enabled() {
		return a.Authorize(principal, op, security.ResourceCluster, security.ClusterName)
	}
	return !sec.AuthRequired
}

// securityAdmin answers the user and ACL administration APIs.
func (s *Server) securityAdmin(req *Request) wire.Message {
	sec := s.cfg.Security
	principal := req.Conn.Session.Principal()
	op := security.OpAlter
	switch req.Body.(type) {
	case *wire.DescribeUsersRequest, *wire.DescribeAclsRequest:
		op = security.OpDescribe
	}
	var code wire.ErrorCode
	var msg string
	switch {
	case sec == nil:
		code, msg = wire.ErrSecurityDisabled, "this broker runs without security"
	case !s.clusterAdmin(principal, op):
		code, msg = wire.ErrClusterAuthorizationFailed, fmt.Sprintf("%s may not %s users or ACLs (a super-user, or %s on the cluster)", principal, op, op)
		s.cfg.Logf("netio: conn %d from %s: %s refused %s", req.Conn.ID, req.Conn.RemoteAddr, principal, req.Header.API)
	}
	switch body := req.Body.(type) {
	case *wire.DescribeUsersRequest:
		return describeUsers(sec, body, code, msg)
	case *wire.AlterUsersRequest:
		return s.alterUsers(req, body, code, msg)
	case *wire.DescribeAclsRequest:
		return describeACLs(sec, body, code, msg)
	case *wire.CreateAclsRequest:
		return s.createACLs(req, body, code, msg)
	case *wire.DeleteAclsRequest:
		return s.deleteACLs(req, body, code, msg)
	}
	panic(fmt.Sprintf("netio: securityAdmin given %s", req.Header.API))
}

func describeUsers(sec *Security, body *wire.DescribeUsersRequest, code wire.ErrorCode, msg string) *wire.DescribeUsersResponse {
	if code == wire.ErrNone && sec.Credentials == nil {
		code, msg = wire.ErrSecurityDisabled, "SCRAM is not configured"
	}
	if code != wire.ErrNone {
		return &wire.DescribeUsersResponse{ErrorCode: code, ErrorMessage: msg}
	}
	resp := &wire.DescribeUsersResponse{}
	for _, u := range sec.Credentials.Describe(body.Users) {
		d := wire.UserDescription{User: u.User}
		for _, m := range scram.Mechanisms {
			if it, ok := u.Mechanisms[m.Name]; ok {
				d.Mechanisms = append(d.Mechanisms, wire.UserMechanism{Mechanism: m.Name, Iterations: int32(it)})
			}
		}
		resp.Users = append(resp.Users, d)
	}
	return resp
}

func (s *Server) alterUsers(req *Request, body *wire.AlterUsersRequest, code wire.ErrorCode, msg string) *wire.AlterUsersResponse {
	sec := s.cfg.Security
	if code == wire.ErrNone && sec.Credentials == nil {
		code, msg = wire.ErrSecurityDisabled, "SCRAM is not configured"
	}
	resp := &wire.AlterUsersResponse{}
	result := func(user string, err error) {
		r := wire.UserResult{User: user, ErrorCode: code, ErrorMessage: msg}
		if code == wire.ErrNone && err != nil {
			r.ErrorCode, r.ErrorMessage = wire.ErrInvalidRequest, err.Error()
		}
		resp.Results = append(resp.Results, r)
	}
	for _, u := range body.Upsertions {
		if code != wire.ErrNone {
			result(u.User, nil)
			continue
		}
		m := scram.ByName(u.Mechanism)
		if m == nil {
			result(u.User, fmt.Errorf("mechanism %q unknown", truncateForLog(u.Mechanism)))
			continue
		}
		err := sec.Credentials.Set(u.User, m, u.Salt, int(u.Iterations), u.SaltedPassword)
		if err == nil {
			s.cfg.Logf("netio: %s set the %s credential of user %q", req.Conn.Session.Principal(), m.Name, u.User)
		}
		result(u.User, err)
	}
	for _, d := range body.Deletions {
		if code != wire.ErrNone {
			result(d.User, nil)
			continue
		}
		err := sec.Credentials.Delete(d.User, d.Mechanism)
		if err == nil {
			s.cfg.Logf("netio: %s deleted user %q (%s)", req.Conn.Session.Principal(), d.User, orAll(d.Mechanism))
		}
		result(d.User, err)
	}
	return resp
}

func orAll(mechanism string) string {
	if mechanism == "" {
		return "every mechanism"
	}
	return mechanism
}

func aclOf(b wire.ACLBinding) security.ACL {
	return security.ACL{Resource: security.ResourceType(b.ResourceType), Name: b.ResourceName, Pattern: security.PatternType(b.PatternType),
		Principal: b.Principal, Operation: security.Operation(b.Operation), Permission: security.Permission(b.Permission)}
}

func bindingOf(a security.ACL) wire.ACLBinding {
	return wire.ACLBinding{ResourceType: int8(a.Resource), ResourceName: a.Name, PatternType: int8(a.Pattern),
		Principal: a.Principal, Operation: int8(a.Operation), Permission: int8(a.Permission)}
}

func aclsUnavailable(sec *Security, code wire.ErrorCode, msg string) (wire.ErrorCode, string) {
	if code == wire.ErrNone && sec.Authorizer == nil {
		return wire.ErrSecurityDisabled, "ACLs are not configured"
	}
	return code, msg
}

func describeACLs(sec *Security, body *wire.DescribeAclsRequest, code wire.ErrorCode, msg string) *wire.DescribeAclsResponse {
	if code, msg = aclsUnavailable(sec, code, msg); code != wire.ErrNone {
		return &wire.DescribeAclsResponse{ErrorCode: code, ErrorMessage: msg}
	}
	resp := &wire.DescribeAclsResponse{ACLs: []wire.ACLBinding{}}
	for _, a := range sec.Authorizer.List(aclOf(body.Filter)) {
		resp.ACLs = append(resp.ACLs, bindingOf(a))
	}
	return resp
}

func (s *Server) createACLs(req *Request, body *wire.CreateAclsRequest, code wire.ErrorCode, msg string) *wire.CreateAclsResponse {
	sec := s.cfg.Security
	code, msg = aclsUnavailable(sec, code, msg)
	resp := &wire.CreateAclsResponse{Results: make([]wire.TopicResult, len(body.ACLs))}
	var rules []security.ACL
	for _, b := range body.ACLs {
		rules = append(rules, aclOf(b))
	}
	if code == wire.ErrNone {
		if err := sec.Authorizer.Add(rules); err != nil {
			code, msg = wire.ErrInvalidRequest, err.Error()
		} else {
			for _, r := range rules {
				s.cfg.Logf("netio: %s added ACL %s", req.Conn.Session.Principal(), r)
			}
		}
	}
	for i := range resp.Results {
		resp.Results[i] = wire.TopicResult{ErrorCode: code, ErrorMessage: msg}
	}
	return resp
}

func (s *Server) deleteACLs(req *Request, body *wire.DeleteAclsRequest, code wire.ErrorCode, msg string) *wire.DeleteAclsResponse {
	sec := s.cfg.Security
	if code, msg = aclsUnavailable(sec, code, msg); code != wire.ErrNone {
		return &wire.DeleteAclsResponse{ErrorCode: code, ErrorMessage: msg}
	}
	filters := make([]security.ACL, 0, len(body.Filters))
	for _, f := range body.Filters {
		filters = append(filters, aclOf(f))
	}
	removed, err := sec.Authorizer.Remove(filters)
	if err != nil {
		return &wire.DeleteAclsResponse{ErrorCode: wire.ErrStorage, ErrorMessage: err.Error()}
	}
	resp := &wire.DeleteAclsResponse{Deleted: []wire.ACLBinding{}}
	for _, r := range removed {
		s.cfg.Logf("netio: %s removed ACL %s", req.Conn.Session.Principal(), r)
		resp.Deleted = append(resp.Deleted, bindingOf(r))
	}
	return resp
}
