// Package group owns consumer groups on the broker side: the group coordinator of Kafka's
// classic protocol (JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch,
// ListGroups, DescribeGroups, DeleteGroups), the records it keeps in the compacted
// __consumer_offsets topic, rebuilding its state from them, the placement of a group on a
// partition of that topic, and the lag arithmetic of `group describe`. The assignors run in
// the group's leader (a client) and live in engine/group/assign.
//
// It must not open sockets, start goroutines, read a clock, or touch files: it imports only
// engine (for its error values) and engine/batch. It does not import engine/shard either;
// the shard drives it (see "Driving a Coordinator").
//
// # The coordinator is a state machine
//
// A Coordinator serves the groups of the __consumer_offsets partitions it has loaded. Its
// inputs are requests (Handle), the passage of time (Tick) and the completion of its appends
// (AppendDone), each carrying the current time; its outputs (Ready) are replies and appends.
// Nothing else happens inside it, so a test can run any interleaving, with any clock, without
// sockets or sleeps (testdata/*.txt are such scripts).
//
//	    Handle(now, JoinGroup|SyncGroup|…)      Tick(now)      AppendDone(now, id, err)
//	                   │                           │                    │
//	                   ▼                           ▼                    ▼
//	         ┌──────────────────────────────────────────────────────────────┐
//	         │ Coordinator: groups (state, generation, members, offsets)     │
//	         └──────────────────────────────────────────────────────────────┘
//	                   │ Ready()
//	                   ▼
//	Reply{ReqID, Response}            Append{ID, Partition, Records}
//	(to the connection that asked)    (to __consumer_offsets; then AppendDone)
//
// A JoinGroup's reply may come much later than the request (when the join phase ends); an
// OffsetCommit's reply, a leader's SyncGroup reply and a static member's rejoin reply come
// after their records are appended (AppendDone), never before.
//
// # Group states
//
//	            JoinGroup            every known member rejoined
//	┌───────┐ (first member) ┌───────────┐ (or the rebalance timeout) ┌─────────────┐
//	│ Empty │ ─────────────► │ Preparing │ ─────────────────────────► │ Completing  │
//	│       │ ◄───────────── │ Rebalance │ ◄───────────────────────── │ Rebalance   │
//	└───────┘ nobody rejoined└───────────┘ join, leave, expiry        └─────────────┘
//	                               ▲                                        │ the leader's
//	                               │ join, leave, session or sync expiry    │ assignment
//	                               │                                        ▼ is stored
//	                               └─────────────────────────────────── ┌────────┐
//	                                                                     │ Stable │
//	                                                                     └────────┘
//	Dead: deleted (DeleteGroups), expired (offsets retention), or its partition unloaded.
//
// Each completed join phase starts a new generation. Requests name their generation; one
// from an older generation is refused (ILLEGAL_GENERATION), from a removed member
// UNKNOWN_MEMBER_ID, and an offset commit while the generation is being assigned
// REBALANCE_IN_PROGRESS. A commit of the current generation is accepted while the next
// rebalance is being prepared, so members can commit what they processed before they
// rejoin.
//
// Members are removed when their session timeout passes without a heartbeat, when they do
// not rejoin within the rebalance timeout (the consumers' max.poll.interval.ms: a member
// whose poll loop is stuck stops rejoining although its heartbeats go on), and when they do
// not fetch their assignment within the rebalance timeout after a join phase. A static
// member (group.instance.id) that restarts rejoins under a new member id, fencing the old
// one (FENCED_INSTANCE_ID), and, in a Stable group, gets its old assignment back without a
// rebalance.
//
// # Records (Kafka's __consumer_offsets format; must not change)
//
// See records.go for the byte layouts. Key version 1 is an offset commit keyed by (group,
// topic, partition), valued by (offset, leader epoch, metadata, commit time); key version 2
// is a group's metadata keyed by group, valued by (protocol type, generation, protocol,
// leader, state time, members with their subscription and assignment). A nil value is a
// tombstone. Replaying a partition's records in offset order (Rebuild) gives the state to
// Load; with compaction, only the newest record per key is needed.
//
// # Driving a Coordinator
//
// One Coordinator per shard, on the shard's loop, serving the __consumer_offsets partitions
// that shard owns (engine/shard's PartitionListener says when one opens or closes):
//
//   - partition opened: BeginLoad(p); ReplayLog(the partition's engine.Log) (or feed its
//     batches to a Replayer); Load(now, p, snapshot). Requests for its groups meanwhile get
//     COORDINATOR_LOAD_IN_PROGRESS. Partition closed: Unload(now, p).
//   - a request: Handle(now, req); then carry out Ready().
//   - Append: EncodeBatch the records and append them to partition p of __consumer_offsets
//     with acks=all; call AppendDone(now, id, err) when that completes. Appends must be
//     done in order.
//   - time: arm a timer for NextDeadline (or tick every few hundred milliseconds) and call
//     Tick(now).
//
// Which broker coordinates a group is PartitionFor(group, P): Kafka's
// abs(javaStringHashCode(group)) % P, so that a Kafka client's FindCoordinator and a Kafka
// cluster agree with ringlog on where a group lives.
package group
