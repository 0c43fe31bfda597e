// Package netio owns the ringlog wire protocol: the frame codec, the broker server
// (connections on the shard reactors) and zero-copy egress. The bundled client lives in
// netio/client. It must not touch segment files except through engine.
package netio
