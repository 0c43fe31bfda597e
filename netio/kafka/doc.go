// Package kafka owns the broker's Apache Kafka protocol listener: a second port
// (ringlogd --kafka-listen) on which unmodified Kafka clients (franz-go, librdkafka/kcat,
// the Java client) produce, consume and administer topics. It serves the same shard.Broker
// as the ringlog protocol — the same shards, partition logs, producer ids and idempotence
// state — through the broker core's entry points (ProduceFrom, FetchFrom, ListOffset,
// CreateTopic, InitProducerID, ...); it holds no partition state of its own.
//
// Layout:
//
//	server.go        listener, connections (reader and in-order writer goroutines), limits
//	header.go        the request header (key, version, correlation id, client id, tags)
//	registry.go      the table of served APIs and versions, dispatch, unsupported versions
//	errors.go        broker and engine errors mapped to Kafka error codes
//	session.go       authentication: the connection's principal, the gate before login, SCRAM
//	authorize.go     ACLs (netio/security's Authorizer) per request, with Kafka's error codes
//	quota.go         quotas (netio/security's Quotas, shared with the ringlog listener):
//	                 throttle times, muted connections, held-back replies
//	groups.go        the group APIs' translation to engine/group requests (shard.Groups)
//	cluster.go       on a replicated cluster: Metadata, leadership checks, the group
//	                 coordinator, topic creation and deletion through the controller
//	api_*.go         one file per API key: decode (kmsg), call the core, encode (kmsg;
//	                 Fetch's response is encoded by hand straight into the writer's buffer,
//	                 records as splices, and held to kmsg's bytes by a test)
//	docs_test.go     docs/kafka-compatibility.md's API table held to the served table
//
// Request and response bodies are github.com/twmb/franz-go/pkg/kmsg structs; only the
// request header, which kmsg does not model for servers, is read here, and only the Fetch
// response (the one whose records go by sendfile) is written here. Fetch and Produce keep
// their per-request state in pooled calls (fetchCall, produceCall) as the ringlog listener
// does, so each allocates about a dozen objects per request, none per partition or batch
// (BenchmarkKafkaRequestAllocs). ApiVersions is answered from the registry, so a version
// is advertised exactly when a handler serves it.
//
// Frames: int32 size, then the request; responses go out in request order per connection
// (Kafka clients rely on it), and an acks=0 produce gets none. A frame longer than the
// broker's frame limit closes the connection before any of it is buffered (Kafka does the
// same: the stream cannot be resynchronised); a frame of any API other than Produce is
// further bounded by adminFrameBytesMax so that decoded structs stay small.
//
// It must not touch segment files except through the broker core, and must not duplicate
// the core's produce or fetch logic.
package kafka
