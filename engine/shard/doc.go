// Package shard owns the broker core: the shards (one pinned goroutine and one ring.Reactor
// each), the partitions placed on them, and the operations the protocol layer asks of them
// (produce, fetch with long-poll, list offsets, topic admin).
//
// Threading contract:
//
//   - Every partition belongs to exactly one shard. Its engine.Log, pending acknowledgements
//     and fetch waiters are touched only by that shard's loop goroutine. There is no mutex on
//     the append or fetch path.
//   - Callers on other goroutines (connection handlers) reach a partition through
//     Reactor.Post: a bounded multi-producer mailbox. A full mailbox is back-pressure and
//     surfaces as ErrThrottled, never as an unbounded queue.
//   - Completion callbacks given to Produce, Fetch and ListOffsets run on the owning shard's
//     loop goroutine. They must not block; hand the result to the connection and return.
//   - Topic metadata (the catalog) is copy-on-write: readers load an immutable snapshot
//     through an atomic pointer; admin operations serialise on metaMu, which the data path
//     never takes.
//
// Group commit (pipelined): a produce appends to the log at once (one pwritev for the
// batches of that request). When its acknowledgement needs an fdatasync (flush.always, or
// acks=all) it parks; after the loop turn's mailbox drain the shard starts one sync per
// dirty partition (engine.Log.BeginSync), submits all their fdatasyncs on the ring without
// waiting, and answers the parked produces when they complete (EndSync). Produces arriving
// meanwhile park for the next sync, which starts as soon as the one in flight ends.
//
// It must not open sockets.
package shard
