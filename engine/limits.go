package engine

// Limits shared by the broker, the catalog and the CLI. Each is part of the
// operator-visible contract (docs/operations.md, "Limits and storage conditions"); the CLI
// checks its input against the same constants so that it never accepts what the broker
// refuses, or refuses what the broker accepts.
const (
	// PartitionsPerTopicMax bounds the partitions of one topic: each partition holds at
	// least three open descriptors (.log, .index, .timeindex of its active segment).
	PartitionsPerTopicMax = 10_000
	// PartitionsPerBrokerDefault bounds the partitions (so the topics) one broker holds
	// unless ringlogd --max-partitions says otherwise: every partition keeps at least three
	// descriptors open and a reactor entry on its shard, so an unbounded count let any
	// client that may create topics exhaust the broker's descriptors.
	PartitionsPerBrokerDefault = 10_000
	// TopicNameBytesMax is Kafka's limit: a partition directory name ("<topic>-<n>") must
	// fit in 255 bytes.
	TopicNameBytesMax = 249
	// TopicConfigEntriesMax bounds the config entries of one topic.
	TopicConfigEntriesMax = 64
	// SegmentMsMin is the smallest non-zero segment.ms (milliseconds): every roll creates
	// three files and keeps the sealed segment open, so segment.ms=1 let any client make a
	// partition create thousands of files a second. One minute still rolls 10 080 segments
	// a week; time-based rolling is for retention granularity, not a throughput knob.
	SegmentMsMin = 60_000
	// DiskFreeMinBytesDefault is ringlogd's default --disk-free-min-bytes: produces are
	// refused with STORAGE_ERROR while the data directory's file system has less free.
	// 64 MiB leaves room for index files, the catalog and a roll's new segment files.
	DiskFreeMinBytesDefault = 64 << 20
	// CleanerDedupeBufferBytesDefault is each shard's compaction offset map unless ringlogd
	// --cleaner-dedupe-buffer-bytes says otherwise: 24 bytes a key, filled to 90 %, so about
	// 1.2 million distinct keys per pass (Kafka's log.cleaner.dedupe.buffer.size is 128 MiB
	// for all its cleaner threads together).
	CleanerDedupeBufferBytesDefault = 32 << 20
	// CleanerDedupeBufferBytesMax bounds the flag: the map is allocated whole, per shard.
	CleanerDedupeBufferBytesMax = 4 << 30
	// CleanerDedupeBufferBytesMin is the smallest map (1024 slots).
	CleanerDedupeBufferBytesMin = OffsetMapBytesMin
	// CleanerIOBytesPerSecondDefault is what each shard's cleaner reads plus writes per
	// second unless ringlogd --cleaner-io-max-bytes-per-second says otherwise.
	CleanerIOBytesPerSecondDefault = 32 << 20
)
