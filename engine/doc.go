// Package engine owns the partition log on disk: Kafka v2 record batches, segments (.log,
// .index, .timeindex), recovery, retention, the topic catalog, and the shard-owned partition
// state. It must not open sockets.
package engine
