// Package engine owns the partition log on disk: segments (.log, .index, .timeindex), the
// partition Log API (append, read, flush, truncate, retention, compaction: compact.go), recovery, the two storage
// modes, the topic catalog, and idempotent producers: per-partition producer state with its
// .snapshot files (producerstate.go, producersnapshot.go) and the broker-wide producer id
// registry (producerids.go). Record batches themselves are engine/batch's. It must not
// open sockets, and it must not be called concurrently: a Log belongs to one goroutine (its
// shard), which is why nothing on the append or read path takes a lock.
//
// All data I/O (pread, pwrite, pwritev) and every fsync or fdatasync — of segments, of the
// partition and data directories, of the start-offset checkpoint and the catalog — goes
// through a ring.FileIO: the one given to OpenLog (ring.Syscalls or a shard's *ring.Reactor)
// or to OpenCatalog. Namespace operations (open, mkdir, rename, unlink, ftruncate, stat) are
// plain system calls, and a name is durable only after an fsync of its directory (see
// atomicfile.go and docs/storage.md, "Crash model"). Direct mode's segment writes are the
// exception: given an AsyncWriter (Log.SetAsyncWriter; the shard's reactor), appends are
// staged and written asynchronously, and EndOffset follows the completed writes
// (asyncwrite.go). Page-cache appends can be staged too (Log.SetStagedWrites,
// AppendBatchesStaged): the owner writes each log's staged batches of a loop turn with one
// pwritev (WriteStaged), and EndOffset follows those writes (stagedwrite.go).
//
// # Directory layout
//
// One directory per partition (PartitionDir: <data>/<topic>-<partition>), one file triple per
// segment, named by the 20-digit zero-padded base offset (the offset of its first record):
//
//	orders-0/
//	  00000000000000000000.log        closed segment: batches with offsets [0, 52311)
//	  00000000000000000000.index
//	  00000000000000000000.timeindex
//	  00000000000000052311.log        active segment: appends go here
//	  00000000000000052311.index
//	  00000000000000052311.timeindex
//	  cleaner-offset-checkpoint       compacted topics only (compact.go), with the
//	                                  .cleaned/.swap files of a rewrite in progress
//	  batches.<inode>                 recycling logs only (recycle.segments): the batch map
//	                                  of a sealed segment's .log, by the file's inode
//	  recycled.<inode>                the batch map of a recycled .log's previous life
//	  00000000000000001000.log.recycle  a retired .log kept for the next segment (the pool)
//
// (plus log-start-offset, clean-shutdown, producer .snapshot files and leftovers of
// interrupted operations: *.deleted, *.tmp).
//
// # .log
//
// Kafka RecordBatch v2 batches back to back, exactly as produced except for the broker-owned
// baseOffset and partitionLeaderEpoch (see engine/batch for the 61-byte header). Offsets are
// contiguous: each batch's baseOffset is the previous batch's last offset + 1, and the first
// batch's is the segment's base offset — until compaction thins the segment: then a batch may
// start past the previous one's end (and the first past the base), never before, and only below
// the cleaner checkpoint's gap bound (compact.go); the last batch still ends where the next
// segment begins. Nothing else is in the file: no per-file header, no
// padding (direct mode pads its last block while the segment is active and cuts it on close).
//
//	+----------------+----------------+----------------+-- - -
//	| batch @ base   | batch          | batch          |
//	+----------------+----------------+----------------+-- - -
//	0                p1               p2                 positions are u32 (segments < 2 GiB)
//
// # .index and .timeindex
//
// Sparse, big-endian, no header, never preallocated (length = entries x entry size):
//
//	.index: one entry each time IndexIntervalBytes of log were appended since the last one,
//	        and one at each batch of a recycled file that carries, at its position, the CRC
//	        of the previous life's batch there (batchmap.go)
//	+----------------------+----------------------+
//	| relativeOffset  u32  | position        u32  |   8 bytes
//	+----------------------+----------------------+
//	relativeOffset = batch baseOffset - segment base offset; position = its byte position
//
//	.timeindex: at the same points, only when the segment's max timestamp grew
//	+---------------------------------------------+----------------------+
//	| timestamp                              i64  | relativeOffset  u32  |   12 bytes
//	+---------------------------------------------+----------------------+
//	every batch before relativeOffset has MaxTimestamp <= timestamp; a sealed segment ends
//	with (segment max timestamp, next offset - base)
//
// Index entries are written only for log bytes that are already fdatasync'ed, so the last
// entry on disk is a recovery point: recovery trusts the bytes before it and re-scans,
// CRC-checking every batch, from there to the end of the file.
//
// # Batch maps (batches.<inode>, recycled.<inode>)
//
// The (position, CRC) of every batch of one life of a .log file, which recovery needs to
// tell a torn new batch header over a recycled file's old batch from a new batch
// (batchmap.go has the reasoning; docs/storage.md, "Recycled segment files"). Big-endian:
//
//	+------+---------+--------+--------+--------+--------+---- - - ----+----------+
//	| RLBM | inode   | base   | size   | next   | count  | entries     | checksum |
//	| 4 B  | u64     | i64    | i64    | i64    | u32    | count × 8 B | u32      |
//	+------+---------+--------+--------+--------+--------+---- - - ----+----------+
//	entry = position u32, CRC u32 (the batch's stored CRC-32C), positions ascending;
//	checksum = CRC-32C of every byte before it
//
// # Durability
//
// AppendBatches writes (one pwritev per segment touched) before it returns; the bytes are
// then readable. They are durable once SyncedOffset passes them: Flush syncs when the flush
// policy says so (FlushAlways, FlushMessages, FlushMs), Sync always does. One fdatasync
// covers every append since the last one (group commit). A failed fdatasync fails the Log
// for good (ErrLogFailed): the kernel may have dropped the dirty pages, so a later successful
// fdatasync would not mean the data is on disk.
//
// docs/storage.md has the longer story: both storage modes, flush policies and recovery.
package engine
