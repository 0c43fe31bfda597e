// Package cluster runs one broker's part of a replicated cluster: its controller voter
// (replication/controller, in process) or, on a broker outside the controller quorum, a
// follower of the controller leader's metadata over the network (remoteQuorum: no raft),
// its registration and heartbeats, and the replication state of every partition it holds
// a replica of. A Manager
//
//   - is the broker core's core.Replicator: a leader's high watermark is the minimum log
//     end offset over the ISR (replication/isr's Leader), acks=all is answered once the
//     high watermark and the leader's own fdatasync cover the batch, and acks=all is
//     refused while the committed ISR is smaller than min.insync.replicas;
//   - reconciles the controller's metadata into local state: deletes local topics whose
//     incarnation (topic ID) the metadata proves deleted, creates the local partitions
//     of topics this broker is a replica of, applies their config changes, becomes leader (stamping its leader epoch on
//     every batch, engine.Log.SetLeaderEpoch, and recording it in the partition's epoch
//     checkpoint) or follower at each leader epoch;
//   - answers followers' fetches and OffsetsForLeaderEpoch questions as leader (Handle*),
//     shrinks and expands the ISR after replica.lag.time.max and publishes the change
//     through the controller (AlterISR);
//   - runs one fetcher goroutine per leader broker it follows, on its own connection
//     (separate from client traffic): it truncates a partition to where its log diverged
//     from the leader's (isr.Follower, KIP-101/279) before fetching, appends the leader's
//     batches as they are (offsets and epochs kept, engine.Log.AppendReplicated) and
//     reports its log end offset with the next fetch; with a replication throttle
//     (Config.ThrottledBytesPerSecond) the replicas outside their ISR that their topic's
//     follower.replication.throttled.replicas lists share one byte budget, and with a
//     leader throttle (Config.LeaderThrottledBytesPerSecond) the leader paces its replies
//     to the catching-up followers that leader.replication.throttled.replicas lists;
//   - replicates consumer groups (groups.go): creates __consumer_offsets through the
//     controller at the first coordinator lookup, names a group's coordinator (the leader
//     of its partition), and tells the broker's group coordinators when this broker starts
//     or stops leading one of its partitions (shard.Groups.Lead and Resign);
//
// It reaches the network only through the Dialer it is given (netio implements it): this
// package must not import netio, cmd or bench. The state of a partition's replica is
// guarded by a mutex of its own; the broker core's hot path reads only atomics from it
// (high watermark, ISR size, whether the ISR is the leader alone).
package cluster
