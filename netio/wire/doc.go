// Package wire owns the ringlog wire codec: the frame layout and its header parsers
// (frame.go), one request/response schema per API (messages.go; groups.go, producer.go,
// replication.go, fetchwake.go, security.go and quota.go for the consumer-group,
// InitProducerId, inter-broker, security and QuotaGroup APIs), the primitive encoders behind
// them (wire.go) and the error-code table (errors.go). docs_test.go holds docs/protocol.md's
// API and error tables to the code.
//
// It is the one package that the broker server (netio), the broker adapter and the bundled
// client (netio/client) all share, so it must stay small in what it links: it imports
// nothing of ringlog's but engine/batch (a test enforces this, see imports_test.go at the
// repository root). It must not open sockets, start goroutines or know about shards.
//
// Decoders are sticky-error readers (read everything, check once at the end) and bound
// every length by the bytes that remain before allocating; every decoder has a fuzz target
// with committed seeds under testdata/fuzz.
//
// docs/protocol.md is the specification of everything encoded here; the two change
// together.
package wire
