// Package assign owns the partition assignors of consumer groups — range, round-robin,
// sticky and cooperative-sticky — and the "consumer" protocol's subscription and assignment
// encodings that carry their inputs and outputs through JoinGroup and SyncGroup.
//
// In Kafka's classic group protocol the coordinator never assigns: it picks one member as
// the leader, hands it every member's subscription in the JoinGroup reply, and relays the
// leader's SyncGroup assignments to the others. So the assignors run in a client. They are
// pure functions (no I/O, no clock, no state between calls, deterministic for a given input)
// and this package imports nothing of ours, so the bundled client can link it without
// linking the broker.
//
// # Assignors
//
//   - range: per topic, members subscribed to it in a fixed order (group.instance.id first,
//     then member id) each take a contiguous range; the first (partitions mod members) take
//     one more. Balanced within 1 per topic, not across topics.
//   - roundrobin: every subscribed partition, sorted by (topic, partition), dealt to the
//     members in the same fixed order, skipping members not subscribed to its topic.
//   - sticky: keeps every partition a member validly owns (see Member.Owned) as long as
//     balance allows, and moves as few as possible: with identical subscriptions the result
//     is balanced within 1 and the number of moved partitions is the minimum any balanced
//     assignment needs.
//   - cooperative-sticky (KIP-429): the sticky plan, minus every partition that would move
//     from one live owner to another. Those are revoked by their owner in this round and
//     handed out in the follow-up rebalance the revoking member starts by rejoining, so no
//     partition ever has two owners and members keep consuming the partitions that do not
//     move.
//
// # Consumer protocol encodings (Kafka wire format; must not change)
//
// All integers big-endian; string = int16 length + bytes; bytes = int32 length + bytes
// (-1 = null); array = int32 count + elements.
//
//	Subscription (ConsumerProtocolSubscription), written as version 3:
//	  version int16 | topics [string] | user_data bytes
//	  | owned_partitions [topic string, partitions [int32]]   (v1+)
//	  | generation_id int32                                   (v2+, -1 = none)
//	  | rack_id nullable string                               (v3+)
//
//	Assignment (ConsumerProtocolAssignment), written as version 1:
//	  version int16 | assigned_partitions [topic string, partitions [int32]] | user_data bytes
//
// Decoders accept every version from 0 and ignore bytes after the fields they know (a newer
// version's additions), as Kafka's consumer does. They never allocate from a length before
// checking it against the bytes that remain.
package assign
