package shard

import (
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ringlog/ringlog/engine"
	"github.com/ringlog/ringlog/engine/shard/core"
	"github.com/ringlog/ringlog/ring"
	"golang.org/x/sys/unix"
)

// Sentinel errors the protocol layer maps to error codes.
var (
	ErrUnknownTopicOrPartition = errors.New("unknown topic or partition")
	ErrTopicExists             = engine.ErrTopicExists
	ErrInvalidTopic            = engine.ErrInvalidTopic
	ErrInvalidPartitions       = errors.New("invalid partition count")
	ErrInvalidConfig           = errors.New("invalid topic config")
	ErrNotEnoughReplicas       = core.ErrNotEnoughReplicas
	ErrThrottled               = errors.New("shard mailbox full, retry later")
	ErrShuttingDown            = errors.New("broker is shutting down")
	// ErrDataDirInUse: another broker (process or Broker) holds the data directory's lock.
	ErrDataDirInUse = errors.New("data directory in use by another broker")
)

// dataDirLockName is the file in the data directory that a broker holds an exclusive
// flock on for as long as it is open, so that two brokers never write the same segment
// files. The kernel drops the lock when the process dies, so kill -9 leaves nothing stale.
const dataDirLockName = ".lock"

// Limits. Part of the operator-visible contract; see docs/operations.md.
const (
	partitionsPerTopicMax = engine.PartitionsPerTopicMax
	retentionCheckDefault = 30 * time.Second
	flushCheckDefault     = 50 * time.Millisecond
	adminWaitMax          = 30 * time.Second
)

// Config configures a Broker.
type Config struct {
	DataDir string
	// Shards is the number of shards; 0 means one per CPU the process may run on.
	Shards int
	// CPUs pins shard i to CPUs[i % len(CPUs)]. Empty with Pin set pins shard i to the
	// i-th CPU (wrapping) of the process's affinity mask at Open, so a cgroup cpuset or
	// taskset restriction is respected.
	CPUs []int
	// Pin pins shard threads with sched_setaffinity.
	Pin bool
	// Ring configures each shard's reactor (backend auto|uring|syscall, entries, flags).
	Ring ring.Config
	// Log holds the broker-wide defaults of every partition log (storage mode, flush
	// policy, segment size); topic configs override them per topic.
	Log engine.LogConfig
	// RetentionCheckInterval is how often each shard enforces retention. 0 means 30 s.
	RetentionCheckInterval time.Duration
	// FlushCheckInterval is how often each shard applies time-based flush policies
	// (flush.ms). 0 means 50 ms.
	FlushCheckInterval time.Duration
	// ScrubBytesPerSecond is how many bytes of sealed segments each shard verifies per
	// second in the background (scrub.go). 0 means 8 MiB/s; negative turns scrubbing off.
	ScrubBytesPerSecond int64
	// CleanerDisabled turns off log compaction (compact.go): topics with cleanup.policy
	// compact keep every record until it is turned back on.
	CleanerDisabled bool
	// CleanerIOBytesPerSecond bounds the bytes each shard's cleaner reads and writes per
	// second. 0 means 32 MiB/s.
	CleanerIOBytesPerSecond int64
	// CleanerDedupeBufferBytes is the memory of each shard's offset map (key hash -> newest
	// offset, 24 bytes a key); a pass deduplicates as many records as fit. 0 means 32 MiB.
	CleanerDedupeBufferBytes int64
	// CleanerInterval is how often each shard looks for compacted partitions to clean when
	// no pass is under way. 0 means 15 s.
	CleanerInterval time.Duration
	// FetchFilesMax bounds the segment descriptors held by fetch results not yet sent
	// (each result dups its segment's descriptor so retention cannot pull the file from
	// under the send). 0 means a quarter of the process's RLIMIT_NOFILE.
	FetchFilesMax int64
	// PartitionsMax bounds the partitions of all topics together; a create beyond it is
	// refused with ErrInvalidPartitions. 0 means engine.PartitionsPerBrokerDefault.
	PartitionsMax int
	// Groups configures the consumer group coordinators (groups.go).
	Groups GroupsConfig
	Logger *slog.Logger

	// Replicator is what each shard's core asks for a partition's high watermark, committed
	// offset and ISR size. nil means core.Local (this broker is the only replica). Its
	// methods run on the shard loops; see core.Replicator. replication/ implements it and
	// netio/node (the one broker constructor, used by cmd/ringlogd) wires it in; report its
	// high-watermark moves with Broker.OffsetsMoved.
	Replicator core.Replicator
	// ProducerIDBlocks, when set, is where InitProducerID's fresh ids come from (a cluster's
	// controller, so that no two brokers hand out the same id); nil: the data directory's
	// own allocator (engine.ProducerIDs).
	ProducerIDBlocks engine.ProducerIDBlockSource
	// ProducerNames, when set, keeps producer names cluster-wide (a cluster's controller;
	// see engine.ProducerNameSource); nil: names live in the data directory's file.
	ProducerNames engine.ProducerNameSource
	// PartitionListeners are told on the owning shard's loop when a partition opens on this
	// broker and when it closes: the attachment point of a group coordinator that lives
	// next to the partitions of __consumer_offsets (it loads a partition's groups when it
	// opens and stops serving them when it closes).
	PartitionListeners []PartitionListener

	// WrapFileIO, when set, wraps the file I/O of each shard's partition logs (shard >= 0:
	// the shard's reactor, and its pipelined fdatasyncs then go through the wrapper one by
	// one) and of the catalog and data directory (shard -1: plain system calls). The seam of
	// fault drills and crash tests (engine/faultio); nil in production.
	WrapFileIO func(shard int, fio ring.FileIO) ring.FileIO

	// ErrorCode maps an error of a produce or fetch to the protocol's error code, so the
	// shards' counters (Stats) count failures by code. nil counts every failure as
	// ErrorCodeUnknown. It runs on the shard loops: no blocking, no allocation.
	ErrorCode func(err error) int

	// WriteEachAppend turns off staged page-cache appends (stagedwrite.go): every produce
	// then writes its batches at once, one pwritev per produce and partition, instead of one
	// per partition per loop turn. For A/B measurements; false in production.
	WriteEachAppend bool

	// SyncInlineOff sends every pipelined fdatasync to the ring (an io-wq worker), even the
	// one sync of a quiet loop turn that the shard otherwise runs inline on its own thread
	// (shard.go, syncInlineNow): for A/B measurements and hosts whose fdatasync is slow
	// enough that blocking the loop for it costs the other connections more than it saves
	// the syncing producer. false (auto) in production.
	SyncInlineOff bool

	hooks *testHooks // seams for this package's tests; nil in production
}

// PartitionListener observes partitions opening and closing on the broker's shards. Its
// methods run on the loop of the shard that owns tp and must not block; to act on the
// partition (read it, append to it) they use the Broker's ordinary API, or Exec.
type PartitionListener interface {
	PartitionOpened(shard int, tp TopicPartition)
	PartitionClosed(shard int, tp TopicPartition)
}

// testHooks replace what the tests of this package cannot otherwise reach.
type testHooks struct {
	// fdatasyncAsync replaces the ring submission of a pipelined sync's fdatasync; done must
	// run on s's loop.
	fdatasyncAsync func(s *Shard, fd int, done func(error))
	// fdatasyncInline replaces the fdatasync system call of an inline sync (on s's loop).
	fdatasyncInline func(s *Shard, fd int) error
	// syncDirectWrites keeps direct-mode appends synchronous; unregisteredDirectWrites hides
	// the reactor's fixed-buffer table from the logs (the A/Bs of directwrite.go).
	syncDirectWrites, unregisteredDirectWrites bool
}

// TopicPartition names one partition.
type TopicPartition struct {
	Topic     string
	Partition int32
}

// Topic is an immutable snapshot of one topic's metadata.
type Topic struct {
	Name       string
	Partitions []int // partition index -> shard index
	Config     map[string]string
	// ID and Incarnation name this incarnation of the topic for its creator (a replicated
	// cluster's controller); empty and 0 for a topic created without them.
	ID          string
	Incarnation uint64
	logConfig   engine.LogConfig
	minInsync   int
}

// metadata is an immutable snapshot; replaced whole (copy-on-write) under metaMu.
type metadata struct {
	topics map[string]*Topic
}

// Broker owns the shards and the topic metadata.
type Broker struct {
	cfg     Config
	log     *slog.Logger
	shards  []*Shard
	allowed []int    // CPUs the process may run on, read once at Open (default pinning)
	dirLock *os.File // holds the flock on DataDir/.lock until Close

	meta   atomic.Pointer[metadata]
	metaMu sync.Mutex      // admin operations only; never taken on the data path
	cat    *engine.Catalog // guarded by metaMu
	catFIO ring.FileIO     // the catalog's and the data directory's file I/O
	// wrapped[i] is Config.WrapFileIO's FileIO for shard i; nil without WrapFileIO. Set
	// in Open before any partition opens, read-only afterwards.
	wrapped []ring.FileIO

	scrubFound atomic.Int64    // corrupt batches found by the background scrubbers
	offLoop    offLoopCounters // refusals decided before reaching a shard (stats.go)

	rep         core.Replicator     // cfg.Replicator or core.Local
	producerIDs *engine.ProducerIDs // InitProducerId and fencing (idempotence.go)

	closing  atomic.Bool
	draining atomic.Bool // set by Drain: fetches answer at once instead of parking
	files    *Quota      // descriptors held by unsent fetch results (Config.FetchFilesMax)

	logDefaults atomic.Pointer[engine.LogConfig] // cfg.Log, then SetLogDefaults (defaults.go)

	groups *Groups // routes group requests to the coordinator shards (groups.go)
}

// Open starts the shards, loads the catalog and opens every partition on its shard.
func Open(cfg Config) (*Broker, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Shards <= 0 {
		cfg.Shards = runtime.NumCPU()
	}
	if cfg.RetentionCheckInterval <= 0 {
		cfg.RetentionCheckInterval = retentionCheckDefault
	}
	if cfg.FlushCheckInterval <= 0 {
		cfg.FlushCheckInterval = flushCheckDefault
	}
	if cfg.Log.Logger == nil {
		cfg.Log.Logger = cfg.Logger
	}
	if cfg.FetchFilesMax <= 0 {
		cfg.FetchFilesMax = fetchFilesMaxDefault()
	}
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return nil, fmt.Errorf("create data dir: %w", err)
	}
	dirLock, err := lockDataDir(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	var catFIO ring.FileIO = ring.Syscalls{}
	if cfg.WrapFileIO != nil {
		catFIO = cfg.WrapFileIO(-1, catFIO)
	}
	cat, err := engine.OpenCatalog(cfg.DataDir, catFIO)
	if err != nil {
		dirLock.Close()
		return nil, err
	}
	// Finish what interrupted admin operations left: directories of topics that never
	// reached the catalog or have left it.
	swept, err := cat.Sweep()
	if err != nil {
		dirLock.Close()
		return nil, err
	}
	if len(swept) > 0 {
		cfg.Logger.Warn("removed leftovers of interrupted topic operations", "dir", cfg.DataDir, "names", swept)
	}
	producerIDs, err := engine.OpenProducerIDs(cfg.DataDir, catFIO)
	if err != nil {
		dirLock.Close()
		return nil, err
	}
	if cfg.ProducerIDBlocks != nil {
		producerIDs.SetBlockSource(cfg.ProducerIDBlocks)
	}
	if cfg.ProducerNames != nil {
		producerIDs.SetNameSource(cfg.ProducerNames)
	}
	b := &Broker{cfg: cfg, log: cfg.Logger, cat: cat, catFIO: catFIO, allowed: allowedCPUs(), dirLock: dirLock, rep: cfg.Replicator, producerIDs: producerIDs, files: NewQuota(cfg.FetchFilesMax)}
	b.logDefaults.Store(&cfg.Log)
	if b.rep == nil {
		b.rep = core.Local{}
	}
	meta, err := b.metadataFromCatalog(cat)
	if err != nil {
		dirLock.Close()
		return nil, err
	}
	b.meta.Store(meta)
	offsetsPartitions, err := b.offsetsPartitionCount(meta)
	if err != nil {
		dirLock.Close()
		return nil, err
	}
	b.groups = &Groups{b: b}
	b.groups.partitions.Store(offsetsPartitions)
	for i := 0; i < cfg.Shards; i++ {
		s, err := startShard(b, i)
		if err != nil {
			b.Close()
			return nil, err
		}
		b.shards = append(b.shards, s)
		if cfg.WrapFileIO != nil {
			b.wrapped = append(b.wrapped, cfg.WrapFileIO(i, s.r))
		}
	}
	// Open every partition on its shard, all shards in parallel.
	var opens []func() error
	for _, t := range meta.topics {
		for p, shardIndex := range t.Partitions {
			s, tp, lc := b.shards[shardIndex], TopicPartition{t.Name, int32(p)}, t.logConfig
			opens = append(opens, func() error { return s.openPartition(tp, lc, t.minInsync) })
		}
	}
	if err := runAll(opens); err != nil {
		b.Close()
		return nil, err
	}
	if err := b.createOffsetsTopic(); err != nil {
		b.Close()
		return nil, err
	}
	return b, nil
}

// onPartitions runs fn for every partition of t with the shard that owns it and returns the
// first error.
//
// Shards work in parallel; each shard's partitions go one after another, so a topic of
// thousands of partitions neither floods a shard's mailbox nor starts every partition's
// admin deadline (adminWaitMax, counted from each post) at once, and the shard's loop
// serves traffic between them. Every partition is tried; the first error is returned.
func (b *Broker) onPartitions(t *Topic, fn func(s *Shard, tp TopicPartition) error) error {
	byShard := make([][]int32, len(b.shards))
	for p, si := range t.Partitions {
		byShard[si] = append(byShard[si], int32(p))
	}
	var fns []func() error
	for si, parts := range byShard {
		if len(parts) == 0 {
			continue
		}
		s := b.shards[si]
		fns = append(fns, func() error {
			var first error
			for _, p := range parts {
				if err := fn(s, TopicPartition{t.Name, p}); err != nil && first == nil {
					first = err
				}
			}
			return first
		})
	}
	return runAll(fns)
}

func runAll(fns []func() error) error {
	errs := make(chan error, len(fns))
	for _, fn := range fns {
		go func() { errs <- fn() }()
	}
	var first error
	for range fns {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// Shards returns the shard count.
func (b *Broker) Shards() int { return len(b.shards) }

// ShardInfo describes a running shard for start-up logs and metadata.
type ShardInfo struct {
	Index   int
	CPU     int // -1 when not pinned
	Backend string
}

// ShardInfos lists the shards.
func (b *Broker) ShardInfos() []ShardInfo {
	out := make([]ShardInfo, len(b.shards))
	for i, s := range b.shards {
		out[i] = ShardInfo{Index: i, CPU: s.cpu, Backend: s.backend}
	}
	return out
}

func (b *Broker) shardCPU(i int) int {
	switch {
	case len(b.cfg.CPUs) > 0:
		return b.cfg.CPUs[i%len(b.cfg.CPUs)]
	case b.cfg.Pin:
		return defaultShardCPU(i, b.allowed)
	}
	return -1
}

// defaultShardCPU is the CPU of shard i under default pinning: the i-th allowed CPU,
// wrapping when there are more shards than CPUs. With no mask known it falls back to
// CPU i modulo the CPU count.
func defaultShardCPU(i int, allowed []int) int {
	if len(allowed) == 0 {
		return i % runtime.NumCPU()
	}
	return allowed[i%len(allowed)]
}

// allowedCPUs lists, in increasing order, the CPUs in the calling thread's affinity mask
// (the process's, when called before any shard thread is pinned); nil if it cannot be read.
func allowedCPUs() []int {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil
	}
	count := set.Count()
	cpus := make([]int, 0, count)
	for cpu := 0; len(cpus) < count && cpu < cpuSetBitsMax; cpu++ {
		if set.IsSet(cpu) {
			cpus = append(cpus, cpu)
		}
	}
	return cpus
}

// cpuSetBitsMax is the number of CPUs a unix.CPUSet describes (glibc's CPU_SETSIZE).
const cpuSetBitsMax = 1024

// fileIO is the file I/O of shard i's partition logs.
func (b *Broker) fileIO(i int) ring.FileIO {
	if b.wrapped != nil {
		return b.wrapped[i]
	}
	return b.shards[i].r
}

func (b *Broker) partitionDir(tp TopicPartition) string {
	return engine.PartitionDir(b.cfg.DataDir, tp.Topic, int(tp.Partition))
}

func (b *Broker) metadataFromCatalog(cat *engine.Catalog) (*metadata, error) {
	m := &metadata{topics: map[string]*Topic{}}
	for _, name := range cat.Names() {
		ct, _ := cat.Topic(name)
		t, err := b.newTopic(name, ct.Placement, ct.Config)
		if err != nil {
			return nil, fmt.Errorf("catalog topic %q: %w", name, err)
		}
		t.ID, t.Incarnation = ct.ID, ct.Incarnation
		m.topics[name] = t
	}
	return m, nil
}

func (b *Broker) newTopic(name string, shards []int, config map[string]string) (*Topic, error) {
	lc, err := engine.LogConfigFromMap(b.loadLogDefaults(), config)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	minInsync, err := engine.MinInsyncReplicas(config)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	placed := make([]int, len(shards))
	for i, s := range shards {
		// A catalog written by a broker with more shards is remapped, not rejected: the
		// partition's files do not depend on the shard that owns them.
		placed[i] = s % b.cfg.Shards
	}
	return &Topic{Name: name, Partitions: placed, Config: config, logConfig: lc, minInsync: minInsync}, nil
}

// Topic returns the topic's metadata snapshot, or nil.
func (b *Broker) Topic(name string) *Topic { return b.meta.Load().topics[name] }

// Topics returns every topic, sorted by name.
func (b *Broker) Topics() []*Topic {
	m := b.meta.Load()
	out := make([]*Topic, 0, len(m.topics))
	for _, t := range m.topics {
		out = append(out, t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// ShardOf returns the shard index owning tp.
func (b *Broker) ShardOf(tp TopicPartition) (int, error) {
	t := b.Topic(tp.Topic)
	if t == nil || tp.Partition < 0 || int(tp.Partition) >= len(t.Partitions) {
		return -1, fmt.Errorf("%w: %s/%d", ErrUnknownTopicOrPartition, tp.Topic, tp.Partition)
	}
	return t.Partitions[tp.Partition], nil
}

func (b *Broker) shardFor(tp TopicPartition) (*Shard, error) {
	if b.closing.Load() {
		return nil, ErrShuttingDown
	}
	i, err := b.ShardOf(tp)
	if err != nil {
		return nil, err
	}
	return b.shards[i], nil
}

// ValidateTopicName applies Kafka's topic name rules.
func ValidateTopicName(name string) error { return engine.ValidTopicName(name) }

// CreateTopic creates a topic with partitions partitions spread over the shards, all or
// nothing: every partition's directory is created durably and its log opened first, and
// the catalog write that follows is the commit point. If any step fails, the partitions
// already opened are closed and their directories removed; a crash before the commit leaves
// directories that the next Open sweeps (engine.Catalog.Sweep). Either way the topic does
// not exist and create can be retried.
func (b *Broker) CreateTopic(name string, partitions int, config map[string]string) error {
	return b.CreateTopicIdentified(name, partitions, config, "", 0)
}

// CreateTopicIdentified is CreateTopic with the topic's ID and incarnation (opaque here;
// a replicated cluster's controller assigns them) stored in the catalog and the Topic.
func (b *Broker) CreateTopicIdentified(name string, partitions int, config map[string]string, id string, incarnation uint64) error {
	if err := ValidateTopicName(name); err != nil {
		return err
	}
	if partitions < 1 || partitions > partitionsPerTopicMax {
		return fmt.Errorf("%w: %d (must be 1..%d)", ErrInvalidPartitions, partitions, partitionsPerTopicMax)
	}
	if config == nil {
		config = map[string]string{}
	}
	b.metaMu.Lock()
	defer b.metaMu.Unlock()
	if b.closing.Load() {
		return ErrShuttingDown
	}
	old := b.meta.Load()
	if old.topics[name] != nil {
		return fmt.Errorf("%w: %q", ErrTopicExists, name)
	}
	if held := old.partitionCount(); held+partitions > b.partitionsMax() {
		return fmt.Errorf("%w: %d more would make %d on this broker; its limit is %d (ringlogd --max-partitions)",
			ErrInvalidPartitions, partitions, held+partitions, b.partitionsMax())
	}
	shards := make([]int, partitions)
	h := fnv.New32a()
	h.Write([]byte(name))
	first := int(h.Sum32() % uint32(len(b.shards)))
	for p := range shards {
		shards[p] = (first + p) % len(b.shards)
	}
	t, err := b.newTopic(name, shards, config)
	if err != nil {
		return err
	}
	t.ID, t.Incarnation = id, incarnation
	// Directories left under this name by an interrupted create or delete are garbage
	// (the catalog does not name them): a new topic starts empty.
	for p := range shards {
		if err := engine.RemovePartitionDir(b.catFIO, b.cfg.DataDir, name, p); err != nil {
			return fmt.Errorf("create topic %q: %w", name, err)
		}
	}
	err = b.onPartitions(t, func(s *Shard, tp TopicPartition) error { return s.openPartition(tp, t.logConfig, t.minInsync) })
	if err == nil {
		err = b.cat.CreateIdentified(name, partitions, config, shards, len(b.shards), id, incarnation)
	}
	if err != nil {
		if derr := b.discardPartitions(t); derr != nil {
			b.log.Warn("create topic failed and its partitions were not all removed; the next start removes them",
				"topic", name, "err", derr)
		}
		return fmt.Errorf("create topic %q: %w", name, err)
	}
	b.publish(old, name, t)
	return nil
}

// discardPartitions closes every partition of t that a shard holds and removes every
// partition directory of t (t is not, or no longer, in the catalog).
func (b *Broker) discardPartitions(t *Topic) error {
	err := b.onPartitions(t, func(s *Shard, tp TopicPartition) error { return s.dropPartition(tp, b.partitionDir(tp)) })
	for p := range t.Partitions {
		err = errors.Join(err, engine.RemovePartitionDir(b.catFIO, b.cfg.DataDir, t.Name, p))
	}
	return err
}

// publish installs a new metadata snapshot with topic name set to t (nil deletes it).
func (b *Broker) publish(old *metadata, name string, t *Topic) {
	next := &metadata{topics: make(map[string]*Topic, len(old.topics)+1)}
	for k, v := range old.topics {
		next.topics[k] = v
	}
	if t == nil {
		delete(next.topics, name)
	} else {
		next.topics[name] = t
	}
	b.meta.Store(next)
}

// DeleteTopic removes a topic: it disappears from metadata first (new requests fail with
// unknown topic), then the catalog forgets it (the commit point: if that write fails, the
// topic is back in metadata, untouched), then each shard closes and deletes its
// partitions. Directories a failure or crash leaves after the commit are swept by the next
// Open, or by a create of the same name. Internal topics are refused.
func (b *Broker) DeleteTopic(name string) error { return b.deleteTopic(name, false) }

// DeleteReplicatedTopic is DeleteTopic for replication, which deletes the local copy of a
// topic whose incarnation the controller deleted or replaced: internal topics included
// (on a cluster __consumer_offsets is the controller's; a broker-local one left from a
// single-broker start is replaced by it).
func (b *Broker) DeleteReplicatedTopic(name string) error { return b.deleteTopic(name, true) }

func (b *Broker) deleteTopic(name string, internalToo bool) error {
	b.metaMu.Lock()
	defer b.metaMu.Unlock()
	old := b.meta.Load()
	t := old.topics[name]
	if t == nil {
		return fmt.Errorf("%w: %q", ErrUnknownTopicOrPartition, name)
	}
	if internalTopic(name) && !internalToo {
		return fmt.Errorf("%w: %q holds committed offsets and group metadata; it cannot be deleted", ErrInternalTopic, name)
	}
	b.publish(old, name, nil)
	if err := b.cat.Delete(name); err != nil {
		b.meta.Store(old)
		return err
	}
	if err := b.discardPartitions(t); err != nil {
		b.log.Warn("deleted topic's partitions were not all removed; the next start removes them", "topic", name, "err", err)
	}
	return nil
}

// AlterTopicConfig sets the configs in set and removes the keys in deletes (their
// defaults apply again), all or nothing: each partition's log is reopened with the new
// configuration on its shard, then the catalog write commits it. If a reopen or the write
// fails, every partition is put back on the old configuration (reopened if the failure
// closed it) and the catalog keeps the old one, so a restart also runs the old one. While
// the call runs, partitions already reopened serve under the new configuration.
func (b *Broker) AlterTopicConfig(name string, set map[string]string, deletes []string) error {
	b.metaMu.Lock()
	defer b.metaMu.Unlock()
	old := b.meta.Load()
	t := old.topics[name]
	if t == nil {
		return fmt.Errorf("%w: %q", ErrUnknownTopicOrPartition, name)
	}
	config := mergeConfig(t.Config, set, deletes)
	nt, err := b.newTopic(name, t.Partitions, config)
	if err != nil {
		return err
	}
	nt.ID, nt.Incarnation = t.ID, t.Incarnation
	err = b.onPartitions(nt, func(s *Shard, tp TopicPartition) error { return s.reconfigurePartition(tp, nt.logConfig, nt.minInsync) })
	if err == nil {
		err = b.cat.SetConfig(name, config)
	}
	if err != nil {
		rerr := b.onPartitions(t, func(s *Shard, tp TopicPartition) error {
			err := s.reconfigurePartition(tp, t.logConfig, t.minInsync)
			if errors.Is(err, ErrUnknownTopicOrPartition) { // the failed reopen closed it
				err = s.openPartition(tp, t.logConfig, t.minInsync)
			}
			return err
		})
		if rerr != nil {
			b.log.Error("alter config failed and not every partition is back on the old config; a restart restores it",
				"topic", name, "err", rerr)
		}
		return fmt.Errorf("alter config of %q: %w", name, errors.Join(err, rerr))
	}
	b.publish(old, name, nt)
	return nil
}

// PartitionState is a point-in-time view of one partition, read on its shard.
type PartitionState struct {
	Topic          string
	Partition      int32
	Shard          int
	LogStartOffset int64
	LogEndOffset   int64
	HighWatermark  int64
	SizeBytes      int64
	Segments       int
	Storage        string
	InSyncReplicas int    // the Replicator's ISR size, the leader included (1 on a lone broker)
	Err            string // non-empty when the log has failed (sticky fdatasync error)
	CorruptBatches int    // bad batches found in sealed segments (scrubber or --verify-segments)
	Corruption     string // the first of them and how to repair it; "" when none
}

// DescribeTopic returns the state of every partition of a topic.
func (b *Broker) DescribeTopic(name string) (*Topic, []PartitionState, error) {
	t := b.Topic(name)
	if t == nil {
		return nil, nil, fmt.Errorf("%w: %q", ErrUnknownTopicOrPartition, name)
	}
	states := make([]PartitionState, len(t.Partitions))
	err := b.onPartitions(t, func(s *Shard, tp TopicPartition) error { return s.describe(tp, &states[tp.Partition]) })
	return t, states, err
}

// Drain prepares a shutdown: every parked long-poll fetch is answered now with what its
// partitions hold, and fetches from here on answer at once instead of waiting for data, so
// that a server waiting for its in-flight requests is not held up by MaxWait. The group
// coordinators stop serving (parked JoinGroup and SyncGroup requests, and every group
// request from then on, are answered NOT_COORDINATOR). Produce and admin work carry on as
// before. Safe to call from any goroutine, more than once.
func (b *Broker) Drain() {
	if b.draining.Swap(true) {
		return
	}
	for _, s := range b.shards {
		// park checks draining too, so a waiter parked after this post runs still fires.
		// Group requests parked in a join or sync phase are answered NOT_COORDINATOR (the
		// client finds the coordinator again after the restart) instead of holding the
		// shutdown for their rebalance timeout. A full mailbox is retried (postRetrying):
		// a dropped post left parked fetches to their MaxWait and parked group requests
		// unanswered. An error now means the shard is stopped, with nothing parked.
		for _, fn := range []func(){s.core.WakeAll, s.unloadGroups} {
			if s.r.OnOwnerThread() {
				fn()
				continue
			}
			_ = postRetrying(s, fn)
		}
	}
}

// OffsetsMoved tells the core of tp's shard that its high watermark or committed offset
// may have moved (the Replicator's view changed: a follower fetched, the ISR changed):
// produces now committed are answered and long-polls past their offset fire. Any goroutine.
func (b *Broker) OffsetsMoved(tp TopicPartition) error {
	s, err := b.shardFor(tp)
	if err != nil {
		return err
	}
	err = s.r.Post(func() {
		if p := s.parts[tp]; p != nil {
			s.core.Moved(&p.c)
		}
	})
	if err != nil {
		return postErr(s, err)
	}
	return nil
}

func (b *Broker) now() time.Time {
	if b.cfg.Ring.Now != nil {
		return b.cfg.Ring.Now()
	}
	return time.Now()
}

// openLog opens tp's log on shard s (its loop) through the shard's file I/O.
func (b *Broker) openLog(s *Shard, tp TopicPartition, lc engine.LogConfig) (*engine.Log, engine.RecoveryReport, error) {
	return engine.OpenLog(b.partitionDir(tp), lc, b.fileIO(s.index))
}

func (b *Broker) partitionOpened(shard int, tp TopicPartition) {
	s := b.shards[shard]
	if p := s.parts[tp]; p != nil {
		s.groupsOpened(p)
	}
	for _, l := range b.cfg.PartitionListeners {
		l.PartitionOpened(shard, tp)
	}
}

func (b *Broker) partitionClosed(shard int, tp TopicPartition) {
	b.shards[shard].groupsClosed(tp)
	for _, l := range b.cfg.PartitionListeners {
		l.PartitionClosed(shard, tp)
	}
}

// Close stops accepting work, flushes every partition, closes the logs and stops the
// shards. Operations still queued in mailboxes run before their shard stops.
func (b *Broker) Close() error {
	if b.closing.Swap(true) {
		return nil
	}
	var errs []error
	for _, s := range b.shards {
		if err := s.stop(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := b.dirLock.Close(); err != nil { // releases the flock: every file is closed by now
		errs = append(errs, fmt.Errorf("release data dir lock: %w", err))
	}
	return errors.Join(errs...)
}

// lockDataDir takes the exclusive flock on dir/.lock, without waiting.
func lockDataDir(dir string) (*os.File, error) {
	path := filepath.Join(dir, dataDirLockName)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open data dir lock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s is locked (%s)", ErrDataDirInUse, dir, path)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return f, nil
}

// onShard runs fn on s's loop and waits for it (admin path only: blocks the caller).
func onShard(s *Shard, fn func() error) error {
	errc := make(chan error, 1)
	if err := postRetrying(s, func() { errc <- fn() }); err != nil {
		return err
	}
	select {
	case err := <-errc:
		return err
	case <-time.After(adminWaitMax):
		return fmt.Errorf("shard %d did not answer within %s", s.index, adminWaitMax)
	}
}

// ValidateTopic checks a create-topic request without creating anything.
func (b *Broker) ValidateTopic(name string, partitions int, config map[string]string) error {
	if err := ValidateTopicName(name); err != nil {
		return err
	}
	if partitions < 1 || partitions > partitionsPerTopicMax {
		return fmt.Errorf("%w: %d (must be 1..%d)", ErrInvalidPartitions, partitions, partitionsPerTopicMax)
	}
	if b.Topic(name) != nil {
		return fmt.Errorf("%w: %q", ErrTopicExists, name)
	}
	_, err := b.newTopic(name, make([]int, partitions), config)
	return err
}

// ValidateAlter checks an alter-config request without applying it.
func (b *Broker) ValidateAlter(name string, set map[string]string, deletes []string) error {
	t := b.Topic(name)
	if t == nil {
		return fmt.Errorf("%w: %q", ErrUnknownTopicOrPartition, name)
	}
	_, err := b.newTopic(name, t.Partitions, mergeConfig(t.Config, set, deletes))
	return err
}

func mergeConfig(base, set map[string]string, deletes []string) map[string]string {
	config := make(map[string]string, len(base)+len(set))
	for k, v := range base {
		config[k] = v
	}
	for k, v := range set {
		config[k] = v
	}
	for _, k := range deletes {
		delete(config, k)
	}
	return config
}

// EffectiveConfig returns every topic config key with the value in force for t: the
// topic's own, else the broker's, else the engine's default (engine.LogConfig.Resolved).
func (b *Broker) EffectiveConfig(t *Topic) map[string]string {
	c, err := t.logConfig.Resolved()
	if err != nil { // newTopic validated it; an error here is a bug
		panic(fmt.Sprintf("shard: topic %q holds an invalid log config: %v", t.Name, err))
	}
	m := map[string]string{
		engine.ConfigSegmentBytes:       strconv.FormatInt(c.SegmentBytes, 10),
		engine.ConfigSegmentMs:          strconv.FormatInt(c.SegmentMs, 10),
		engine.ConfigIndexIntervalBytes: strconv.FormatInt(c.IndexIntervalBytes, 10),
		engine.ConfigRetentionMs:        strconv.FormatInt(c.RetentionMs, 10),
		engine.ConfigRetentionBytes:     strconv.FormatInt(c.RetentionBytes, 10),
		engine.ConfigFlushMessages:      strconv.FormatInt(c.FlushMessages, 10),
		engine.ConfigFlushMs:            strconv.FormatInt(c.FlushMs, 10),
		engine.ConfigFlushAlways:        strconv.FormatBool(c.FlushAlways),
		engine.ConfigStorageMode:        string(c.Storage),
		engine.ConfigCleanupPolicy:      string(c.CleanupPolicy),
		engine.ConfigDeleteRetentionMs:  strconv.FormatInt(c.DeleteRetentionMs, 10),
		engine.ConfigMinInsyncReplicas:  strconv.Itoa(t.minInsync),
	}
	m[engine.ConfigProducerIDExpirationMs] = strconv.FormatInt(c.ProducerIDExpirationMs, 10)
	maxMessage := c.MaxMessageBytes
	if maxMessage == 0 { // unset: a batch is bounded by the segment size alone
		maxMessage = c.SegmentBytes
	}
	m[engine.ConfigMaxMessageBytes] = strconv.FormatInt(maxMessage, 10)
	m[engine.ConfigMinCleanableDirtyRatio] = strconv.FormatFloat(c.MinCleanableDirtyRatio, 'g', -1, 64)
	m[engine.ConfigPreallocateBytes] = strconv.FormatInt(c.PreallocateBytes, 10)
	m[engine.ConfigRecycleSegments] = strconv.Itoa(c.RecycleSegments)
	return m
}

// BrokerSetsConfig reports whether the broker's own configuration (flags, config file,
// SetLogDefaults) sets key.
func (b *Broker) BrokerSetsConfig(key string) bool { return b.brokerSetsConfig(key) }

// Exec runs fn on shard i's loop and waits for it: the way to start work that must live on
// that loop, such as serving connections on its reactor (netio.Server.ServeRing).
func (b *Broker) Exec(i int, fn func(r *ring.Reactor) error) error {
	if i < 0 || i >= len(b.shards) {
		return fmt.Errorf("no shard %d (have %d)", i, len(b.shards))
	}
	s := b.shards[i]
	return onShard(s, func() error { return fn(s.r) })
}

// partitionsMax is the broker-wide partition limit (Config.PartitionsMax or the default).
func (b *Broker) partitionsMax() int {
	if b.cfg.PartitionsMax > 0 {
		return b.cfg.PartitionsMax
	}
	return engine.PartitionsPerBrokerDefault
}

// partitionCount is the number of partitions of every topic in m.
func (m *metadata) partitionCount() int {
	n := 0
	for _, t := range m.topics {
		n += len(t.Partitions)
	}
	return n
}

// LockDataDir takes the data directory's broker lock for an offline tool (ringlog user
// add --data, like topic repair): it fails with ErrDataDirInUse while a broker runs on dir.
// Close the file to release it.
func LockDataDir(dir string) (*os.File, error) { return lockDataDir(dir) }
