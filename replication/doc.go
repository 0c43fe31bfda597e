// Package replication is the home of ringlog's replication: its sub-packages own the
// per-partition ISR, high-watermark and leader-epoch state machines (isr) and the
// Raft-replicated cluster metadata (controller), and one broker's membership in a cluster
// (cluster: the controller voter, registration, metadata reconciliation, the leader side
// of replication as the broker core's Replicator, follower fetchers). Packages under
// replication may import engine and its sub-packages (cluster plugs into the broker core,
// engine/shard), never netio, cmd or bench; the network
// reaches them through cluster.Dialer, which netio implements.
package replication
