// Package replication is the home of ringlog's replication: its sub-packages own the
// per-partition ISR, high-watermark and leader-epoch state machines (isr) and the
// Raft-replicated cluster metadata (controller). Follower fetchers on dedicated rings and
// the wiring into the broker are not built yet: ringlogd runs single-node. Packages under
// replication may import engine and engine/batch, never netio, cmd or bench.
package replication
