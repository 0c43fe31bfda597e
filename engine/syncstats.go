package engine

import "sync/atomic"

// Counts of the fsyncs and fdatasyncs the engine issues on a log's behalf, by what each
// makes durable (session 14, issue 14). On ext4 every fsync and fdatasync ends in a device
// cache flush (without a journal, ext4_sync_file issues one whatever was written), and on
// this project's virtio disk a flush beside a stream of O_DIRECT overwrites cut them from
// 5.7–7.0 GB/s to 1.4–1.9 GB/s (docs/benchmarks.md, "device cache flushes"): these counters
// say how many a workload pays and for what. A sync is counted when it is issued (on the
// ring, by the owner's FileIO or by a background job), whether or not it succeeds.
// Not counted: those of opening, recovering, truncating and compacting a log, and of the
// topic catalog (rare, and not on the append path).

// SyncCounters are process-wide counts of the engine's syncs, by purpose.
type SyncCounters struct {
	// SegmentData: fdatasyncs of segment .log files by Sync and the pipelined group commit
	// (BeginSync hands one descriptor per segment it covers to the owner).
	SegmentData int64
	// SegmentDir: directory fsyncs by Sync and BeginSync (a roll's new names, a producer
	// snapshot's).
	SegmentDir int64
	// Snapshot: fdatasyncs of a roll's producer snapshot by Sync and BeginSync.
	Snapshot int64
	// CheckpointFile and CheckpointDir: the log start offset checkpoint's atomic write
	// (retention, DeleteRecordsBefore): its temporary file's fsync and the directory's.
	CheckpointFile, CheckpointDir int64
	// PoolLog, PoolMapFile and PoolMapDir: a retired .log's preparation for the recycle pool
	// (recycle.go): the .log's fdatasync, the recycled.<inode> map's fsync, and the
	// directory fsync that makes the map's name durable (0 since session 14: the log's next
	// directory fsync does it, dirsync.go).
	PoolLog, PoolMapFile, PoolMapDir int64
}

// Total is the sum of every count.
func (c SyncCounters) Total() int64 {
	return c.SegmentData + c.SegmentDir + c.Snapshot + c.CheckpointFile + c.CheckpointDir +
		c.PoolLog + c.PoolMapFile + c.PoolMapDir
}

// syncKind indexes syncStats.
type syncKind uint8

const (
	syncSegmentData syncKind = iota
	syncSegmentDir
	syncSnapshot
	syncCheckpointFile
	syncCheckpointDir
	syncPoolLog
	syncPoolMapFile
	syncPoolMapDir
	syncKinds
)

var syncStats [syncKinds]atomic.Int64

// noteSyncs counts n syncs of kind k.
func noteSyncs(k syncKind, n int) { syncStats[k].Add(int64(n)) }

// SyncStats returns the process-wide sync counters.
func SyncStats() SyncCounters {
	return SyncCounters{
		SegmentData: syncStats[syncSegmentData].Load(), SegmentDir: syncStats[syncSegmentDir].Load(),
		Snapshot: syncStats[syncSnapshot].Load(), CheckpointFile: syncStats[syncCheckpointFile].Load(),
		CheckpointDir: syncStats[syncCheckpointDir].Load(), PoolLog: syncStats[syncPoolLog].Load(),
		PoolMapFile: syncStats[syncPoolMapFile].Load(), PoolMapDir: syncStats[syncPoolMapDir].Load(),
	}
}
