package engine

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ringlog/ringlog/internal/textdist"
	"github.com/ringlog/ringlog/ring"
)

// StorageMode selects how a partition log writes its segment files.
type StorageMode string

const (
	// StoragePageCache writes through the kernel page cache (buffered pwritev) and serves
	// fetches as file ranges for sendfile/splice. Kafka's model; the default.
	StoragePageCache StorageMode = "page-cache"
	// StorageDirect writes with O_DIRECT from block-aligned buffers, keeps the partial tail
	// block in memory and rewrites it, and serves recent data from its own chunk cache.
	StorageDirect StorageMode = "direct"
)

// Defaults and limits. Sizes are bytes, durations milliseconds unless the name says otherwise.
const (
	segmentBytesDefault       = 1 << 30 // 1 GiB, Kafka's segment.bytes
	segmentBytesMin           = 1 << 10
	segmentBytesMax           = math.MaxInt32 // index positions are u32; Kafka caps at Int.Max too
	indexIntervalBytesDefault = 4096
	retentionMsDefault        = 7 * 24 * 60 * 60 * 1000
	// deleteRetentionMsDefault is Kafka's delete.retention.ms default: one day.
	deleteRetentionMsDefault = 24 * 60 * 60 * 1000
	// minCleanableDirtyRatioDefault is Kafka's min.cleanable.dirty.ratio default.
	minCleanableDirtyRatioDefault = 0.5

	// directChunkBytesDefault is the size of one aligned staging chunk in direct mode. 1 MiB
	// keeps a 1 MiB produce batch in at most two pwritev iovecs.
	directChunkBytesDefault = 1 << 20
	// directCacheChunksDefault is how many written chunks per partition stay in memory to serve
	// tail reads (8 MiB per partition with the default chunk size).
	directCacheChunksDefault = 8
	// blockBytes is the O_DIRECT alignment for buffer address, file offset and length. 4096
	// covers every logical block size we expect (ext4/xfs on NVMe report 512 or 4096).
	blockBytes = 4096
	// iovecsPerWriteMax bounds one pwritev call (Linux UIO_MAXIOV).
	iovecsPerWriteMax = 1024
)

// CleanupPolicy is a topic's cleanup.policy: what happens to old closed segments.
type CleanupPolicy string

const (
	// CleanupDelete: retention.ms and retention.bytes delete whole old segments (default).
	CleanupDelete CleanupPolicy = "delete"
	// CleanupCompact: the background cleaner keeps the newest record per key (compact.go);
	// retention.ms and retention.bytes delete nothing.
	CleanupCompact CleanupPolicy = "compact"
	// CleanupCompactDelete: both.
	CleanupCompactDelete CleanupPolicy = "compact,delete"
)

// parseCleanupPolicy accepts Kafka's spellings: a comma-separated list of delete and
// compact, in either order, spaces ignored.
func parseCleanupPolicy(v string) (CleanupPolicy, error) {
	var compact, del bool
	for _, part := range strings.Split(v, ",") {
		switch strings.TrimSpace(part) {
		case "compact":
			compact = true
		case "delete":
			del = true
		default:
			return "", fmt.Errorf("want delete, compact or compact,delete")
		}
	}
	switch {
	case compact && del:
		return CleanupCompactDelete, nil
	case compact:
		return CleanupCompact, nil
	default:
		return CleanupDelete, nil
	}
}

// Compacts reports whether the policy runs the cleaner.
func (p CleanupPolicy) Compacts() bool { return p == CleanupCompact || p == CleanupCompactDelete }

// Deletes reports whether retention.ms and retention.bytes delete segments.
func (p CleanupPolicy) Deletes() bool {
	return p == "" || p == CleanupDelete || p == CleanupCompactDelete
}

// LogConfig configures one partition log. The zero value means "defaults"; see each field.
type LogConfig struct {
	// SegmentBytes rolls the active segment when the next batch would make it larger.
	// 0 means 1 GiB. Must be in [1 KiB, 2 GiB).
	SegmentBytes int64
	// MaxMessageBytes refuses a produced batch larger than this (Kafka's max.message.bytes,
	// counted as Kafka does: the whole batch as sent, compressed); batches a follower copies
	// are not checked. 0 means unset: only SegmentBytes bounds a batch. Must be in
	// [0, 2 GiB).
	MaxMessageBytes int64
	// SegmentMs rolls the active segment once it is this old (measured from its first append).
	// 0 disables time-based rolling; otherwise at least SegmentMsMin.
	SegmentMs int64
	// IndexIntervalBytes is the spacing of sparse .index entries. 0 means 4096.
	IndexIntervalBytes int64
	// RetentionMs deletes closed segments whose newest timestamp is older than this.
	// 0 means 7 days; -1 means keep forever; below -1 is refused.
	RetentionMs int64
	// RetentionBytes deletes the oldest closed segments while the log stays at least this
	// large without them. 0 or -1 means no size limit; below -1 is refused.
	RetentionBytes int64
	// FlushMessages: Flush syncs once this many messages are unsynced. 0 disables; negative
	// is refused.
	FlushMessages int64
	// FlushMs: Flush syncs once the oldest unsynced append is this old. 0 disables; negative
	// is refused.
	FlushMs int64
	// FlushAlways: every Flush with unsynced data calls fdatasync, so an append is durable
	// before it is acknowledged.
	FlushAlways bool
	// CleanupPolicy: delete (default), compact or compact,delete. See compact.go.
	CleanupPolicy CleanupPolicy
	// DeleteRetentionMs is how long a tombstone (a record with a null value) survives
	// compaction, counted from the last modification of the segment holding it. 0 means one
	// day; negative is refused.
	DeleteRetentionMs int64
	// MinCleanableDirtyRatio: a compacted log is cleaned once the bytes not yet cleaned are at
	// least this share of its closed segments. 0 means 0.5; must be in (0, 1].
	MinCleanableDirtyRatio float64
	// Storage selects page-cache (default) or direct mode. Direct falls back to page-cache
	// (with a log line) when the directory's file system lacks O_DIRECT.
	Storage StorageMode
	// DirectChunkBytes and DirectCacheChunks size the direct-mode staging chunks and the
	// in-memory cache of recently written chunks. 0 means 1 MiB and 8.
	DirectChunkBytes  int
	DirectCacheChunks int
	// PreallocateBytes keeps the active segment's file written with zeros up to this many
	// bytes past the log's end, so appends overwrite existing blocks instead of extending the
	// file (prealloc.go: cheaper fdatasyncs on ext4). The zeros are written and synced by a
	// background goroutine, never read, and cut off when the segment is sealed or closed.
	// At most 256 MiB, rounded up to 4 KiB; -1 turns it off. 0 means the default: 4 MiB for
	// a page-cache log with FlushAlways (where it was measured to win), off (-1) otherwise.
	PreallocateBytes int64
	// RecycleSegments is how many retired segment .log files the log keeps to become its
	// next segments (recycle.go): appends then overwrite written blocks instead of extending
	// a new file. At most 64; -1 turns it off. 0 means the default: 4 in direct mode, off (-1)
	// in page-cache mode.
	RecycleSegments int
	// ZeroFileIO is the FileIO that work off the log's goroutine writes and syncs through:
	// background zeroing (prealloc.go) and the preparation of a retired file for the pool of
	// recycled files (recycle.go). It must be safe for use from another goroutine. nil means
	// plain system calls (tests pass a faultio.CrashFS).
	ZeroFileIO ring.FileIO
	// ProducerIDExpirationMs is how long an idempotent producer's state (its sequences for
	// dedup) is kept after its last batch's timestamp. 0 means one day, Kafka's
	// producer.id.expiration.ms default.
	ProducerIDExpirationMs int64
	// Disk, when set, is the free-space guard of the data directory: an append that would
	// leave less than its FreeMinBytes free is refused with ErrDiskFull before anything is
	// written. Shared by every log of a data directory; nil means no threshold (a full disk
	// is still reported as ErrDiskFull when a write meets it).
	Disk *DiskSpace
	// VerifySegments makes OpenLog verify every sealed segment (CRC of every batch, see
	// Log.VerifySealed) before returning, instead of trusting them until the background
	// scrubber or a read gets to them. Costs one read of the whole log.
	VerifySegments bool
	// Writeback, when set, starts the write-back of page-cache appends every
	// Writeback.Every() bytes per segment (writeback.go); shared by every log of a process.
	// nil leaves dirty pages to the kernel's flushers.
	Writeback *Writeback
	// Clock is injectable for tests; nil means time.Now.
	Clock func() time.Time
	// Logger receives recovery and fallback notices; nil means slog.Default().
	Logger *slog.Logger
}

// Resolved returns the configuration OpenLog would run with: every zero field replaced by
// its default, or an error naming the first invalid field.
func (c LogConfig) Resolved() (LogConfig, error) { return c.withDefaults() }

func (c LogConfig) withDefaults() (LogConfig, error) {
	if c.SegmentBytes == 0 {
		c.SegmentBytes = segmentBytesDefault
	}
	if c.SegmentBytes < segmentBytesMin || c.SegmentBytes > segmentBytesMax {
		return c, fmt.Errorf("segment.bytes %d out of range [%d, %d]", c.SegmentBytes, segmentBytesMin, segmentBytesMax)
	}
	if c.MaxMessageBytes < 0 || c.MaxMessageBytes > math.MaxInt32 {
		return c, fmt.Errorf("max.message.bytes %d out of range [0, %d]", c.MaxMessageBytes, math.MaxInt32)
	}
	if c.SegmentMs < 0 || c.SegmentMs > 0 && c.SegmentMs < SegmentMsMin {
		return c, fmt.Errorf("segment.ms %d: want 0 (no time-based roll) or at least %d", c.SegmentMs, SegmentMsMin)
	}
	if c.IndexIntervalBytes == 0 {
		c.IndexIntervalBytes = indexIntervalBytesDefault
	}
	if c.IndexIntervalBytes < 0 {
		return c, fmt.Errorf("index.interval.bytes %d is negative", c.IndexIntervalBytes)
	}
	if c.RetentionMs == 0 {
		c.RetentionMs = retentionMsDefault
	}
	if c.RetentionMs < -1 {
		return c, fmt.Errorf("retention.ms %d: want -1 (keep forever) or a positive number of milliseconds", c.RetentionMs)
	}
	if c.RetentionBytes == 0 {
		c.RetentionBytes = -1
	}
	if c.RetentionBytes < -1 {
		return c, fmt.Errorf("retention.bytes %d: want -1 (no size limit) or a positive number of bytes", c.RetentionBytes)
	}
	if c.FlushMessages < 0 {
		return c, fmt.Errorf("flush.messages %d is negative: want 0 (off) or a message count", c.FlushMessages)
	}
	if c.FlushMs < 0 {
		return c, fmt.Errorf("flush.ms %d is negative: want 0 (off) or milliseconds", c.FlushMs)
	}
	switch c.CleanupPolicy {
	case "":
		c.CleanupPolicy = CleanupDelete
	case CleanupDelete, CleanupCompact, CleanupCompactDelete:
	default:
		return c, fmt.Errorf("cleanup.policy %q: want delete, compact or compact,delete", c.CleanupPolicy)
	}
	if c.DeleteRetentionMs == 0 {
		c.DeleteRetentionMs = deleteRetentionMsDefault
	}
	if c.DeleteRetentionMs < 0 {
		return c, fmt.Errorf("delete.retention.ms %d is negative", c.DeleteRetentionMs)
	}
	if c.MinCleanableDirtyRatio == 0 {
		c.MinCleanableDirtyRatio = minCleanableDirtyRatioDefault
	}
	if !(c.MinCleanableDirtyRatio > 0 && c.MinCleanableDirtyRatio <= 1) {
		return c, fmt.Errorf("min.cleanable.dirty.ratio %v: want a number in (0, 1]", c.MinCleanableDirtyRatio)
	}
	switch c.Storage {
	case "":
		c.Storage = StoragePageCache
	case StoragePageCache, StorageDirect:
	default:
		return c, fmt.Errorf("storage mode %q: want %q or %q", c.Storage, StoragePageCache, StorageDirect)
	}
	if c.DirectChunkBytes == 0 {
		c.DirectChunkBytes = directChunkBytesDefault
	}
	if c.DirectChunkBytes < blockBytes || c.DirectChunkBytes%blockBytes != 0 {
		return c, fmt.Errorf("direct chunk bytes %d: want a positive multiple of %d", c.DirectChunkBytes, blockBytes)
	}
	if c.DirectCacheChunks == 0 {
		c.DirectCacheChunks = directCacheChunksDefault
	}
	if c.DirectCacheChunks < 0 {
		return c, fmt.Errorf("direct cache chunks %d is negative", c.DirectCacheChunks)
	}
	switch {
	case c.PreallocateBytes == 0 && c.FlushAlways && c.Storage == StoragePageCache:
		c.PreallocateBytes = preallocateBytesFlushAlways
	case c.PreallocateBytes == 0 || c.PreallocateBytes == -1:
		c.PreallocateBytes = -1
	case c.PreallocateBytes < 0 || c.PreallocateBytes > preallocateBytesMax:
		return c, fmt.Errorf("preallocate.bytes %d: want -1 (off), 0 (default) or up to %d", c.PreallocateBytes, preallocateBytesMax)
	default:
		c.PreallocateBytes = alignUp(c.PreallocateBytes)
	}
	var err error
	if c.RecycleSegments, err = checkRecycleSegments(c.RecycleSegments, c.Storage); err != nil {
		return c, err
	}
	if c.ProducerIDExpirationMs == 0 {
		c.ProducerIDExpirationMs = producerIDExpirationMsDefault
	}
	if c.ProducerIDExpirationMs < 0 {
		return c, fmt.Errorf("producer.id.expiration.ms %d is negative", c.ProducerIDExpirationMs)
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c, nil
}

// Topic configuration keys understood by LogConfigFromMap (Kafka's names where Kafka has one).
const (
	ConfigSegmentBytes       = "segment.bytes"
	ConfigSegmentMs          = "segment.ms"
	ConfigIndexIntervalBytes = "index.interval.bytes"
	ConfigRetentionMs        = "retention.ms"
	ConfigRetentionBytes     = "retention.bytes"
	ConfigFlushMessages      = "flush.messages"
	ConfigFlushMs            = "flush.ms"
	ConfigFlushAlways        = "flush.always"
	ConfigStorageMode        = "storage.mode"
	// ConfigPreallocateBytes: bytes of zero-filled space kept written past the active
	// segment's end (LogConfig.PreallocateBytes; ringlog's own key: -1 off, unset 4 MiB for
	// page-cache flush.always topics and off otherwise). Kafka's preallocate (a boolean) only
	// sizes the file, which on ext4 leaves unwritten extents.
	ConfigPreallocateBytes = "preallocate.bytes"
	// ConfigRecycleSegments: retired segment files kept per partition to become its next
	// segments (LogConfig.RecycleSegments; ringlog's own key: -1 off, unset 4 for direct-mode
	// topics and off for page-cache ones).
	ConfigRecycleSegments = "recycle.segments"
	// ConfigMaxMessageBytes: the largest batch a producer may append (Kafka's
	// max.message.bytes); unset, segment.bytes bounds it.
	ConfigMaxMessageBytes = "max.message.bytes"
	// ConfigCleanupPolicy: delete, compact or compact,delete (Kafka's cleanup.policy).
	ConfigCleanupPolicy = "cleanup.policy"
	// ConfigDeleteRetentionMs: how long compaction keeps tombstones (Kafka's
	// delete.retention.ms), counted from the last modification of their segment.
	ConfigDeleteRetentionMs = "delete.retention.ms"
	// ConfigMinCleanableDirtyRatio: the share of not-yet-cleaned bytes that starts a cleaning
	// pass (Kafka's min.cleanable.dirty.ratio).
	ConfigMinCleanableDirtyRatio = "min.cleanable.dirty.ratio"
	// ConfigProducerIDExpirationMs: how long an idempotent producer's dedup state outlives
	// its last write (Kafka's producer.id.expiration.ms; a broker setting there, a topic
	// setting here too).
	ConfigProducerIDExpirationMs = "producer.id.expiration.ms"
	// ConfigMinInsyncReplicas is a broker-level key (acks=all needs this many in-sync
	// replicas); the log accepts and validates it, the broker core acts on it.
	ConfigMinInsyncReplicas = "min.insync.replicas"
	// ConfigLeaderThrottledReplicas and ConfigFollowerThrottledReplicas are Kafka's
	// leader.replication.throttled.replicas / follower.replication.throttled.replicas:
	// the replicas (PARTITION:BROKER,... or *) whose catch-up the replication throttles
	// pace, on the leader's and on the follower's side. Broker-level keys like
	// min.insync.replicas: the log accepts and validates them, the replication layer acts.
	ConfigLeaderThrottledReplicas   = "leader.replication.throttled.replicas"
	ConfigFollowerThrottledReplicas = "follower.replication.throttled.replicas"
)

// TopicConfigKeys lists every key LogConfigFromMap understands (TestTopicConfigKeysKnown
// keeps it so).
func TopicConfigKeys() []string {
	return []string{ConfigSegmentBytes, ConfigSegmentMs, ConfigIndexIntervalBytes, ConfigRetentionMs,
		ConfigRetentionBytes, ConfigFlushMessages, ConfigFlushMs, ConfigFlushAlways, ConfigStorageMode,
		ConfigPreallocateBytes, ConfigRecycleSegments, ConfigMaxMessageBytes, ConfigCleanupPolicy,
		ConfigDeleteRetentionMs, ConfigMinCleanableDirtyRatio, ConfigProducerIDExpirationMs,
		ConfigMinInsyncReplicas, ConfigLeaderThrottledReplicas, ConfigFollowerThrottledReplicas}
}

// nearestTopicConfigKey is a known key within 3 edits of key (a typo, underscores or
// dashes for dots), or "".
func nearestTopicConfigKey(key string) string {
	normal := strings.NewReplacer("_", ".", "-", ".").Replace(strings.ToLower(key))
	return textdist.Nearest(normal, TopicConfigKeys(), 3)
}

// ThrottledReplicas is a parsed *.replication.throttled.replicas value: every replica
// (All, Kafka's "*") or the listed PARTITION:BROKER pairs; an empty value lists none.
type ThrottledReplicas struct {
	All      bool
	Replicas []ThrottledReplica
}

// ThrottledReplica is one PARTITION:BROKER entry of a throttled-replicas list.
type ThrottledReplica struct{ Partition, Broker int32 }

// Contains reports whether the list names broker's replica of partition.
func (t ThrottledReplicas) Contains(partition, broker int32) bool {
	return t.All || slices.Contains(t.Replicas, ThrottledReplica{Partition: partition, Broker: broker})
}

// ParseThrottledReplicas parses "*", "" or "P:B,P:B,..." (spaces around entries allowed;
// partitions and brokers are non-negative integers).
func ParseThrottledReplicas(v string) (ThrottledReplicas, error) {
	v = strings.TrimSpace(v)
	switch v {
	case "*":
		return ThrottledReplicas{All: true}, nil
	case "":
		return ThrottledReplicas{}, nil
	}
	var out ThrottledReplicas
	for entry := range strings.SplitSeq(v, ",") {
		ps, bs, ok := strings.Cut(strings.TrimSpace(entry), ":")
		p, perr := strconv.ParseInt(ps, 10, 32)
		b, berr := strconv.ParseInt(bs, 10, 32)
		if !ok || perr != nil || berr != nil || p < 0 || b < 0 {
			return ThrottledReplicas{}, fmt.Errorf("entry %q: want PARTITION:BROKER (or the whole value *)", strings.TrimSpace(entry))
		}
		out.Replicas = append(out.Replicas, ThrottledReplica{Partition: int32(p), Broker: int32(b)})
	}
	return out, nil
}

// MinInsyncReplicas returns the topic's min.insync.replicas (1 when unset).
func MinInsyncReplicas(m map[string]string) (int, error) {
	v, ok := m[ConfigMinInsyncReplicas]
	if !ok {
		return 1, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("topic config %s=%q: want a positive integer", ConfigMinInsyncReplicas, v)
	}
	return n, nil
}

// LogConfigFromMap parses a topic's config map (as stored in the catalog) over base.
// Unknown keys are an error so that a typo never silently means "default".
func LogConfigFromMap(base LogConfig, m map[string]string) (LogConfig, error) {
	c := base
	for k, v := range m {
		var err error
		switch k {
		case ConfigSegmentBytes:
			c.SegmentBytes, err = strconv.ParseInt(v, 10, 64)
		case ConfigMaxMessageBytes:
			c.MaxMessageBytes, err = strconv.ParseInt(v, 10, 64)
		case ConfigSegmentMs:
			c.SegmentMs, err = strconv.ParseInt(v, 10, 64)
		case ConfigIndexIntervalBytes:
			c.IndexIntervalBytes, err = strconv.ParseInt(v, 10, 64)
		case ConfigRetentionMs:
			c.RetentionMs, err = strconv.ParseInt(v, 10, 64)
		case ConfigRetentionBytes:
			c.RetentionBytes, err = strconv.ParseInt(v, 10, 64)
		case ConfigFlushMessages:
			c.FlushMessages, err = strconv.ParseInt(v, 10, 64)
		case ConfigFlushMs:
			c.FlushMs, err = strconv.ParseInt(v, 10, 64)
		case ConfigFlushAlways:
			c.FlushAlways, err = strconv.ParseBool(v)
		case ConfigStorageMode:
			c.Storage = StorageMode(v)
		case ConfigPreallocateBytes:
			c.PreallocateBytes, err = strconv.ParseInt(v, 10, 64)
		case ConfigRecycleSegments:
			c.RecycleSegments, err = strconv.Atoi(v)
		case ConfigCleanupPolicy:
			c.CleanupPolicy, err = parseCleanupPolicy(v)
		case ConfigDeleteRetentionMs:
			c.DeleteRetentionMs, err = strconv.ParseInt(v, 10, 64)
		case ConfigMinCleanableDirtyRatio:
			c.MinCleanableDirtyRatio, err = strconv.ParseFloat(v, 64)
			if err == nil && !(c.MinCleanableDirtyRatio > 0 && c.MinCleanableDirtyRatio <= 1) {
				err = fmt.Errorf("want a number in (0, 1]")
			}
		case ConfigProducerIDExpirationMs:
			c.ProducerIDExpirationMs, err = strconv.ParseInt(v, 10, 64)
		case ConfigMinInsyncReplicas:
			_, err = MinInsyncReplicas(m)
		case ConfigLeaderThrottledReplicas, ConfigFollowerThrottledReplicas:
			_, err = ParseThrottledReplicas(v)
		default:
			if near := nearestTopicConfigKey(k); near != "" {
				return base, fmt.Errorf("unknown topic config %q (did you mean %q?)", k, near)
			}
			return base, fmt.Errorf("unknown topic config %q", k)
		}
		if err != nil {
			return base, fmt.Errorf("topic config %s=%q: %w", k, v, plainNumError(err))
		}
	}
	if _, err := c.withDefaults(); err != nil {
		return base, err
	}
	return c, nil
}

// plainNumError says what a config value should have been instead of strconv's
// `strconv.ParseInt: parsing "abc": invalid syntax`.
func plainNumError(err error) error {
	var ne *strconv.NumError
	if !errors.As(err, &ne) {
		return err
	}
	want := "an integer"
	switch ne.Func {
	case "ParseBool":
		return errors.New("want true or false")
	case "ParseFloat":
		want = "a number"
	}
	if errors.Is(ne.Err, strconv.ErrRange) {
		return fmt.Errorf("want %s in range", want)
	}
	return fmt.Errorf("want %s", want)
}
