// Package controller owns the cluster's metadata — brokers and their sessions, topics,
// partition assignments (rack-aware), leaders, ISRs, leader and partition epochs, each
// topic's unclean.leader.election.enable, and the producer id counter — replicated by 1, 3
// or 5 voters with github.com/hashicorp/raft (consensus is never home-made here) and stored
// with raft-boltdb.
//
// The state machine (Metadata.apply through FSM) is deterministic: commands carry the
// proposer's clock, so that every voter computes the same leaders. Its rules:
//
//   - a broker registers (a new session epoch each time; a re-registration while the old
//     session was open counts as that session's expiry) and heartbeats with its epoch;
//   - the controller leader proposes ExpireSessions periodically; a broker silent for longer
//     than the session timeout is fenced: it leaves every ISR (a partition's last member
//     stays), and partitions it led elect the first live ISR member of their assignment at
//     the next leader epoch, or any live replica when the topic allows unclean election, or
//     go offline (leader -1) until an ISR member returns;
//   - an ISR change is accepted only from the partition's current leader at its current
//     leader and partition epochs, may add only live replicas, and must keep the leader;
//   - a topic gets a random 128-bit ID at creation (drawn by the leader's Submit, so it is
//     in the log) and its creation version; a delete leaves a tombstone with the ID and
//     raises the leader epoch floor of later topics; Metadata.TopicDeleted says when a
//     broker may delete its local copy of an incarnation (never merely because a possibly
//     stale view lacks it);
//   - a reassignment adds the target replicas, and completes (dropping the others) once
//     every target replica is in the ISR; a preferred-leader election moves leadership to
//     the first replica of the assignment when it is live and in sync;
//   - producer ids are handed out in blocks (AllocateProducerIDs): a counter in the
//     metadata, so no two blocks overlap across leader changes, restarts and snapshots;
//   - a producer name's (id, epoch) is kept here (InitProducerName, producers.go): the
//     name initialised at any broker gets the next epoch, so that partition leaders fence
//     the older one cluster-wide; at most 4,096 names of at most 255 bytes.
//
// Reading the metadata costs nothing whatever its size: the FSM publishes every applied
// state whole and read-only, and FSM.Metadata (Controller.Metadata) returns it by one
// atomic load, without a lock or a copy. Apply is copy-on-write (state.go): a command
// copies only the brokers and topics it changes (a topic with its partition array) and
// shares the rest with the states before it. The contract on readers is that nothing
// reached from a returned *Metadata is ever written (Clone gives a copy to change); the
// invariants build tag checks it at every command, and TestCopyOnWriteMatchesInPlace checks
// apply against in-place application over random commands with lock-free readers under
// -race.
//
// Controller runs one voter: raft over TCP (over mutual TLS with Config.TLS:
// transport.go), the log and stable store in bolt, snapshots in files. It must not import netio, cmd or bench; replication/cluster runs it inside each
// broker and forwards brokers' commands to the leader voter.
package controller
