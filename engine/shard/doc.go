// Package shard owns the broker core: the shards (one pinned goroutine and one ring.Reactor
// each), the partitions placed on them, the operations the protocol layer asks of them
// (produce, fetch with long-poll, list offsets, topic admin), and the hosting of the
// consumer group coordinators (groups.go).
//
// Threading contract:
//
//   - Every partition belongs to exactly one shard. Its engine.Log and its core.Partition
//     (pending acknowledgements, fetch waiters) are touched only by that shard's loop
//     goroutine. There is no mutex on the append or fetch path.
//   - Callers on other goroutines (connection handlers) reach a partition through
//     Reactor.Post: a bounded multi-producer mailbox. A full mailbox is back-pressure and
//     surfaces as ErrThrottled, never as an unbounded queue.
//   - Completion callbacks given to Produce, Fetch and ListOffsets run on the owning shard's
//     loop goroutine. They must not block; hand the result to the connection and return.
//   - Topic metadata (the catalog) is copy-on-write: readers load an immutable snapshot
//     through an atomic pointer; admin operations serialise on metaMu, which the data path
//     never takes.
//
// The decisions — when a produce is acknowledged, when a sync starts, when a long-poll
// answers — are made by package core (engine/shard/core), one deterministic core.Core per
// shard with no goroutines, timers or clock of its own. The shard feeds it inputs (appends,
// sync completions, reactor timer ticks) and carries out its outputs on the reactor
// (coreDriver): core.Driver.ScheduleFlush and ArmTimer are reactor timers, StartSync
// submits fdatasyncs on the ring.
//
// Group commit (pipelined): a produce appends to the log at once (one pwritev for the
// batches of that request). When its acknowledgement needs an fdatasync (flush.always, or
// acks=all) it waits in the core; after the loop turn's mailbox drain the core starts one
// sync per dirty partition (engine.Log.BeginSync), the shard submits all their fdatasyncs on
// the ring without waiting, and the core answers the waiting produces when they complete
// (EndSync). Produces arriving meanwhile wait for the next sync, which starts as soon as the
// one in flight ends. A failed fdatasync fails the partition for good, and no path (not
// even a blocking Sync by AlterConfigs or shutdown) acknowledges what it covered.
//
// Seams (so that replication and consumer groups plug in without import cycles; this
// package never imports replication, netio or cmd):
//
//   - Config.Replicator (core.Replicator): the high watermark, committed offset and ISR
//     size of a partition. Default core.Local, this broker as the only replica.
//     replication/ implements it and reports changes with Broker.OffsetsMoved.
//   - Config.PartitionListeners (PartitionListener): told on the owning loop when a
//     partition opens or closes.
//
// Consumer groups (groups.go): every shard runs an engine/group.Coordinator for the
// partitions of the internal topic __consumer_offsets it owns (created at Open with
// Config.Groups.OffsetsPartitions partitions; clients may not produce to it or delete it).
// A group's coordinator is the shard owning partition group.PartitionFor(id, P). The one
// entry point for protocol adapters (the ringlog protocol's netio handler, a Kafka
// protocol adapter) is Broker.Groups():
//
//	groups.Do(caller, req, done)       // async; done(resp) runs on a shard loop, must not block
//	groups.Handle(ctx, req) (resp, err) // blocking; for goroutines that are not shard loops
//	groups.CoordinatorShard(groupID)    // FindCoordinator: the shard, or a group.Code
//
// req is one of engine/group's request types (JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
// OffsetCommit, OffsetFetch, ListGroups, DescribeGroups, DeleteGroups; ReqID is ignored)
// and resp the matching *Response value, carrying Kafka's error codes (group.Code).
// ListGroups asks every shard; DescribeGroups and DeleteGroups are split by coordinator. A
// JoinGroup's answer comes when its join phase ends; an OffsetCommit's once its records
// are appended (acks=all) to __consumer_offsets. Byte fields of req (metadata,
// assignments) are kept by the coordinator: the caller must not reuse them.
//
// On a replicated cluster (Config.Groups.Replicated) the topic is not created at Open and
// a partition's groups are served only while replication says this broker leads it:
//
//	groups.SetOffsetsPartitions(n) // the controller topic's partition count
//	groups.Lead(p)                 // load p's groups from its log (LOAD_IN_PROGRESS meanwhile)
//	groups.Resign(p)               // drop them (NOT_COORDINATOR)
//
// It must not open sockets.
package shard
