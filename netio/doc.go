// Package netio owns the broker's connection handling for the ringlog protocol: the server
// that reads pipelined frames, hands decoded requests to a Handler and writes responses in
// order (server.go), its two I/O drivers — Go's net package with sendfile egress
// (conn_net.go) and a shard's ring.Reactor with linked-splice egress (conn_ring.go) — and
// the mapping of requests onto the broker core (brokerhandler.go). Security on this listener
// (Config.TLS, Config.Security) is mapped here too: TLS connections (conn_net.go only: the
// ring driver moves plain bytes, so a TLS server serves through Serve), per-connection
// sessions, the SASL/SCRAM exchange and user/ACL administration (security.go), ACL
// decisions on requests (authorize.go) and quota throttling (quota.go); the parts that know
// no wire format live in netio/security, for the other listeners to reuse.
//
// The wire codec (frames, schemas, error codes) lives in netio/wire, which the server and
// the bundled client (netio/client) both import; the client never imports this package.
// netio/fakebroker is an in-memory Handler for tests only.
//
// It must not touch segment files except through engine: a Handler (the broker core)
// decides what to read and hands the server open file ranges to send.
package netio
