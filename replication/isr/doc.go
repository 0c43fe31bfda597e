// Package isr owns the replication state of one partition, as deterministic state machines
// in the style of etcd raft: no goroutines, sockets, disk or clock of their own. Inputs are
// method calls carrying the time; outputs are return values or queued Outputs for a driver
// to carry out. Disk (the log, the checkpoint file) and network (fetches, the controller)
// belong to the driver.
//
//   - Leader (on the partition's leader): each follower's log end offset and last caught-up
//     time; ISR shrink after replica.lag.time.max and expansion when a follower reaches the
//     high watermark, proposed to the controller as AlterISR and applied only once committed;
//     the high watermark (min LEO over the maximal ISR, never backwards); acks=all
//     completion; min.insync.replicas refusals before (ErrNotEnoughReplicas) and after
//     (ErrNotEnoughReplicasAfterAppend) the append; leader-epoch fencing of fetches;
//     OffsetsForLeaderEpoch answers.
//   - Follower (on each other replica): after a leader change it asks the leader where its
//     latest epoch ends and truncates to the divergence point (TruncationOffset, KIP-101 with
//     KIP-279), then fetches from its log end and learns the high watermark.
//   - EpochCache: epoch -> start offset per partition replica, with its checkpoint file
//     (WriteCheckpoint: temporary file, fsync, rename, directory fsync).
//
// replication/cluster drives it in the broker (engine/shard's core.Replicator seam). This
// package imports nothing of ringlog.
package isr
