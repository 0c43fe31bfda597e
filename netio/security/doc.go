// Package security owns the broker's security parts that do not depend on one listener:
// TLS configuration with certificate reload (tls.go), the principal of a connection
// (principal.go), SCRAM credentials stored salted and iterated in the data directory
// (credentials.go; the SCRAM exchange itself is in netio/security/scram, which the bundled
// client links too), ACLs with their store and the authorizer (acl.go), and
// byte-rate and request-rate quotas (quota.go).
//
// The ringlog protocol server (netio) attaches these parts to its listener; the Kafka and
// admin HTTP listeners attach the same values: a *ServerTLS gives any listener its
// tls.Config, a *Credentials answers any SCRAM exchange, an *Authorizer any
// (principal, operation, resource) question, and *Quotas any byte count. None of them
// knows a wire format.
//
// It must not import netio (the server) or engine: it is a library the listeners use,
// not a listener. Secrets (passwords, salted passwords, keys) are never logged or
// formatted by anything here; errors name users and files, never credentials.
package security
