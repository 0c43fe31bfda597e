// Package netio owns the ringlog wire protocol and the broker's connection handling: the
// frame codec (frame.go), one schema per API (messages.go), the error-code table
// (errors.go), the broker server that reads pipelined frames, hands decoded requests to a
// Handler and writes responses in order (server.go), its two I/O drivers — Go's net package
// with sendfile egress (conn_net.go) and a shard's ring.Reactor with linked-splice egress
// (conn_ring.go) — and the mapping of requests onto the broker core (brokerhandler.go).
// The bundled client lives in netio/client; netio/fakebroker is an in-memory Handler for
// tests only.
//
// It must not touch segment files except through engine: a Handler (the broker core)
// decides what to read and hands the server open file ranges to send.
//
// docs/protocol.md is the specification of everything encoded here; the two change
// together.
package netio
