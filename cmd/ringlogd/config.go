package main

// Configuration of ringlogd. Every flag is also a key of the YAML file named by --config
// (or $RINGLOG_CONFIG) and an environment variable RINGLOG_<KEY> (upper case, "-" as "_").
// Precedence: flag > environment > file > built-in default. A key set at a higher level
// replaces the lower levels' value whole (topic-defaults included, not merged key by key).
// Unknown keys in the file are refused with their name and line; unknown RINGLOG_*
// variables are ignored (the CLI reads RINGLOG_BROKER from the same environment).

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/ringlog/ringlog/engine"
	"github.com/ringlog/ringlog/internal/textdist"
	"github.com/ringlog/ringlog/netio/wire"
	"github.com/ringlog/ringlog/replication/controller"
	"github.com/ringlog/ringlog/ring"
	"github.com/ringlog/ringlog/tuning"
)

// Errors of configuration loading, for callers (and tests) that tell refusals apart.
var (
	ErrUnknownKey = errors.New("unknown configuration key")
	ErrBadValue   = errors.New("bad configuration value")
	ErrConflict   = errors.New("conflicting configuration")
)

// configError is a refusal: Error is the one-line message naming the key and where it was
// set, Unwrap the kind (ErrUnknownKey, ErrBadValue, ErrConflict).
type configError struct {
	kind error
	msg  string
}

func (e *configError) Error() string { return e.msg }
func (e *configError) Unwrap() error { return e.kind }

func refuse(kind error, format string, a ...any) error {
	return &configError{kind: kind, msg: fmt.Sprintf(format, a...)}
}

const (
	configEnv    = "RINGLOG_CONFIG"
	envPrefix    = "RINGLOG_"
	keyTopicDefs = "topic-defaults"
	// configFileBytesMax bounds the config file read into memory: a real one is a few KiB.
	configFileBytesMax = 1 << 20
	// frameBytesLimit is what --max-frame-bytes can hold (the server compares it to a u32).
	frameBytesLimit = math.MaxUint32
	portMax         = 65535
)

// commandOnly flags act on this invocation and are not configuration keys.
// testing-protocol-versions is one too: a testing flag, never a configuration key.
var commandOnly = map[string]bool{"config": true, "print-config": true, "version": true, flagTestingProtocol: true}

// flagTestingProtocol narrows the inter-broker protocol versions this broker registers
// with (MIN-MAX) to simulate a broker of an older release in tests
// (e2e.TestReplicationProtocolVersionRefused). Testing only: a real broker speaks its
// build's range.
const flagTestingProtocol = "testing-protocol-versions"

// options is the broker's effective configuration.
type options struct {
	dataDir       string
	listen        string
	shards        int
	cpus          string
	tunePlan      string
	storage       string
	io            string
	flushAlways   bool
	frameBytesMax uint
	connsMax      int
	limits        limitFlags
	shutdownGrace time.Duration
	sysRoot       string
	pin           bool
	debugAddr     string
	net           string
	fileIO        string
	deferTaskrun  bool
	syncInline    string
	loopSpin      time.Duration
	shardPorts    string
	advertise     string
	// The Kafka protocol listener (netio/kafka): off while kafkaListen is empty.
	kafkaListen     string
	kafkaAdvertise  string
	kafkaAutoCreate bool
	diskFreeMin     int64
	writebackBytes  int64
	verify          bool
	scrubRate       int64
	cleanerEnable   bool
	cleanerRate     int64
	cleanerMap      int64
	cleanerEvery    time.Duration
	// retentionEvery is how often each shard enforces retention (log.retention.check.interval.ms).
	retentionEvery time.Duration
	// directWriteGroups is engine.DirectWriteGroupsMax: write groups in flight per direct-mode log.
	directWriteGroups int
	// producerIDExpiration is the broker default of producer.id.expiration.ms (0: one day).
	producerIDExpiration time.Duration
	// Consumer groups: bounds of a member's session timeout, members per group, and the
	// partition count of __consumer_offsets when this broker creates it.
	groupSessionMin   time.Duration
	groupSessionMax   time.Duration
	groupMembersMax   int
	groupPendingMax   int
	groupStateBytes   int64
	offsetsPartitions int
	// offsetsRF is the replication factor of __consumer_offsets on a cluster.
	offsetsRF     int
	logLevel      string
	topicDefaults topicDefaults
	// Cluster membership (replication/cluster); nodeID 0 is a single broker.
	nodeID           int
	controllerVoters string
	clusterSeeds     string
	rack             string
	sessionTimeout   time.Duration
	replicaLagMax    time.Duration
	replThrottle     int64
	leaderThrottle   int64
	// testingProtocol is --testing-protocol-versions (MIN-MAX; empty: this build's range).
	testingProtocol string
	security        securityFlags
	admin           adminFlags
}

// topicDefaults is the topic-defaults key: broker-wide topic configs (the same keys as
// `ringlog topic create --config`), in force for every topic that does not set them.
// As a flag or environment variable: k=v[,k=v...], the flag repeatable.
type topicDefaults map[string]string

func (d topicDefaults) String() string {
	keys := make([]string, 0, len(d))
	for k := range d {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for i, k := range keys {
		keys[i] = k + "=" + d[k]
	}
	return strings.Join(keys, ",")
}

func (d topicDefaults) Set(s string) error {
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok || k == "" {
			return fmt.Errorf("%q: want key=value[,key=value...]", kv)
		}
		d[k] = v
	}
	return nil
}

// sourceKind says which level a value came from, lowest first.
type sourceKind int

const (
	sourceDefault sourceKind = iota
	sourceFile
	sourceEnv
	sourceFlag
)

type source struct {
	kind  sourceKind
	where string // sourceFile: the file's path; sourceEnv: the variable's name
	line  int    // sourceFile
}

// String is how --print-config names a source.
func (s source) String() string {
	switch s.kind {
	case sourceFile:
		return fmt.Sprintf("file %s:%d", s.where, s.line)
	case sourceEnv:
		return "env " + s.where
	case sourceFlag:
		return "flag"
	}
	return "default"
}

// label names key as the user wrote it, for error messages.
func (s source) label(key string) string {
	switch s.kind {
	case sourceFile:
		return fmt.Sprintf("%s:%d: %s", s.where, s.line, key)
	case sourceEnv:
		return envName(key)
	case sourceFlag:
		return "--" + key
	}
	return key + " (default)"
}

// envName is the environment variable of a key: RINGLOG_MAX_FRAME_BYTES for max-frame-bytes.
func envName(key string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(key, "-", "_"))
}

// settings is a loaded configuration: the options, where each came from, and what the
// command line asked for besides running.
type settings struct {
	o           options
	configFile  string
	printConfig bool
	version     bool
	sources     map[string]source
	fs          *flag.FlagSet
}

func defineFlags(s *settings) *flag.FlagSet {
	o := &s.o
	o.topicDefaults = topicDefaults{}
	fs := flag.NewFlagSet("ringlogd", flag.ContinueOnError)
	fs.StringVar(&s.configFile, "config", "", "read configuration from this YAML file (env "+configEnv+"); flags and RINGLOG_* variables override it")
	fs.BoolVar(&s.printConfig, "print-config", false, "print the effective configuration, with the source of every value, as YAML and exit")
	fs.BoolVar(&s.version, "version", false, "print the version and commit and exit")
	fs.StringVar(&o.dataDir, "data", "./data", "data directory (created if missing)")
	fs.StringVar(&o.listen, "listen", "127.0.0.1:9400", "address every shard accepts on (one socket owned by this process: a second broker on it fails with address in use)")
	fs.IntVar(&o.shards, "shards", 0, "number of shards (default: one per CPU, or one per --cpus entry)")
	fs.StringVar(&o.cpus, "cpus", "", "pin shard i to the i-th CPU of this list, e.g. 0-3,8")
	fs.StringVar(&o.tunePlan, "tune-plan", "", "pin shards as planned in this `FILE`, written by ringlog tune plan --format json --out FILE")
	fs.StringVar(&o.storage, "storage", "page-cache", "storage mode: page-cache or direct")
	fs.StringVar(&o.io, "io", "auto", "I/O backend: auto, uring or syscall")
	fs.BoolVar(&o.flushAlways, "flush-always", false, "fdatasync before acknowledging every produce (topics may override with flush.always)")
	fs.UintVar(&o.frameBytesMax, "max-frame-bytes", uint(wire.FrameBytesMaxDefault), "largest request frame accepted")
	fs.IntVar(&o.connsMax, "max-connections", 4096, "open connections accepted at once")
	o.limits.register(fs)
	o.security.register(fs)
	o.admin.register(fs)
	fs.DurationVar(&o.shutdownGrace, "shutdown-grace", shutdownGraceDefault, "time in-flight requests get on SIGTERM")
	fs.StringVar(&o.sysRoot, "sys-root", "/sys", "sysfs root (for NUMA lookups)")
	fs.StringVar(&o.debugAddr, "debug-addr", "", "serve Go pprof profiles on this address (e.g. 127.0.0.1:6060); off by default")
	fs.StringVar(&o.net, "net", "ring", "connection driver: ring (accept/recv/send on each shard's io_uring loop) or go (Go's netpoller goroutines)")
	fs.StringVar(&o.fileIO, "file-io", "inline", "blocking data reads/writes: inline (pread/pwritev on the shard thread; fsyncs still go async on the ring), ring (submit and wait on the shard's ring) or auto (time both on the data dir at start-up, log the choice)")
	fs.DurationVar(&o.loopSpin, "loop-spin", 0, "after a loop turn that did work, a shard polls for the next completion this long before sleeping in the kernel (0: sleeps at once; at most 1ms); trades CPU for the sleep and wake-up of one-at-a-time requests")
	fs.StringVar(&o.syncInline, "sync-inline", "auto", "auto: the one fdatasync of a shard loop turn with nothing else to do (a lone flush.always or acks=all producer) runs on the shard's thread, skipping io_uring's worker hand-offs, and blocks the loop for the device time; off: every sync goes to the ring")
	fs.BoolVar(&o.deferTaskrun, "defer-taskrun", false, "set IORING_SETUP_SINGLE_ISSUER|DEFER_TASKRUN on shard rings (completion work runs only when the shard waits). Measured: no difference within noise on sync produce (p50 210-354 µs either way)")
	fs.StringVar(&o.shardPorts, "shard-ports", "auto", "per-shard listeners advertised in metadata so shard-aware clients reach a partition's owner directly: auto (ephemeral ports on the --listen host), off, or a base port (shard i on BASE+i)")
	fs.StringVar(&o.advertise, "advertise", "", "host clients are told to connect to (metadata: the broker and every shard port); default: the --listen host")
	fs.StringVar(&o.kafkaListen, "kafka-listen", "", "serve the Apache Kafka protocol on this HOST:PORT too (same topics, offsets and producer ids; see docs/kafka-compatibility.md); empty: off")
	fs.StringVar(&o.kafkaAdvertise, "kafka-advertise", "", "HOST:PORT Kafka clients are told to connect to (Kafka's advertised.listeners); default: the --kafka-listen address, with the --advertise host when set")
	fs.BoolVar(&o.kafkaAutoCreate, "kafka-auto-create-topics", false, "create a topic a Kafka Metadata request names and the broker lacks (Kafka's auto.create.topics.enable), with 1 partition and the topic defaults")
	fs.Int64Var(&o.diskFreeMin, "disk-free-min-bytes", engine.DiskFreeMinBytesDefault, "refuse produces (STORAGE_ERROR naming the disk) while the data directory's file system has fewer free bytes than this; 0 refuses only when it is full")
	fs.Int64Var(&o.writebackBytes, "writeback-bytes", engine.WritebackBytesDefault, "start the kernel's write-back of page-cache appends (sync_file_range, off the shard threads) every this many bytes per partition, so that no burst of dirty data (a follower's catch-up copy) meets the group-commit fdatasyncs 30 s later; 0 leaves it to the kernel")
	fs.BoolVar(&o.verify, "verify-segments", false, "verify the CRC of every batch in every sealed segment at start-up (reads the whole log); bad batches are logged and shown by topic describe")
	fs.Int64Var(&o.scrubRate, "scrub-bytes-per-sec", 8<<20, "bytes of sealed segments each shard re-verifies per second in the background; 0 turns the scrubber off")
	fs.BoolVar(&o.cleanerEnable, "cleaner-enable", true, "run the log cleaner: each shard compacts its partitions whose cleanup.policy includes compact")
	fs.Int64Var(&o.cleanerRate, "cleaner-io-max-bytes-per-second", engine.CleanerIOBytesPerSecondDefault, "bytes each shard's log cleaner reads plus writes per second")
	fs.Int64Var(&o.cleanerMap, "cleaner-dedupe-buffer-bytes", engine.CleanerDedupeBufferBytesDefault, "memory of each shard's compaction offset map (24 bytes a key); a pass deduplicates as many records as fit")
	fs.DurationVar(&o.cleanerEvery, "cleaner-interval", 15*time.Second, "how often each shard looks for compacted partitions to clean when no pass is under way")
	fs.IntVar(&o.directWriteGroups, "direct-write-groups", 1, fmt.Sprintf("write groups a direct-mode partition keeps in flight at once (1..%d); more than 1 lost on a virtio disk, measure it on yours", engine.DirectWriteGroupsLimit))
	fs.DurationVar(&o.retentionEvery, "retention-check-interval", 30*time.Second, "how often each shard deletes segments past retention.ms / retention.bytes (Kafka's log.retention.check.interval.ms)")
	fs.DurationVar(&o.producerIDExpiration, "producer-id-expiration", 0, "broker default of producer.id.expiration.ms: how long an idempotent producer's dedup state outlives its last write (0: 24h; topics may override)")
	fs.DurationVar(&o.groupSessionMin, "group-min-session-timeout", 6*time.Second, "shortest session timeout a consumer group member may ask for (INVALID_SESSION_TIMEOUT below it)")
	fs.DurationVar(&o.groupSessionMax, "group-max-session-timeout", 30*time.Minute, "longest session timeout a consumer group member may ask for (INVALID_SESSION_TIMEOUT above it)")
	fs.IntVar(&o.groupMembersMax, "group-max-size", 1000, "members one consumer group may have (GROUP_MAX_SIZE_REACHED beyond it)")
	fs.Int64Var(&o.groupStateBytes, "group-max-state-bytes", 256<<20, "bytes of state the consumer groups of one coordinator shard may keep in memory: members' protocol metadata and assignments, committed offsets with their metadata (COORDINATOR_NOT_AVAILABLE for a JoinGroup, a leader's SyncGroup or an OffsetCommit beyond it)")
	fs.IntVar(&o.groupPendingMax, "group-max-pending-members", 100_000, "member ids handed out with MEMBER_ID_REQUIRED and not yet used, per coordinator shard (COORDINATOR_NOT_AVAILABLE for a new member beyond it; each expires after its session timeout)")
	fs.IntVar(&o.offsetsPartitions, "offsets-partitions", 8, "partitions of __consumer_offsets (offsets.topic.num.partitions) when this broker creates it (first start; on a cluster, through the controller at the first group coordinator lookup); an existing topic keeps its count. They count against --max-partitions")
	fs.IntVar(&o.offsetsRF, "offsets-replication-factor", 3, "offsets.topic.replication.factor: replicas of each __consumer_offsets partition on a cluster (--node-id), lowered to the live brokers when the topic is created; unused by a single broker")
	fs.BoolVar(&o.pin, "pin", true, "pin shard i to the i-th CPU this process may run on when neither --cpus nor --tune-plan is given")
	fs.StringVar(&o.logLevel, "log-level", "info", "log level: debug, info, warn or error (SIGHUP reloads it)")
	fs.IntVar(&o.nodeID, "node-id", 0, "this broker's id in a replicated cluster (with --controller-voters); 0: a single broker with no replication")
	fs.StringVar(&o.controllerVoters, "controller-voters", "", "the controller quorum, ID@HOST:PORT,... (1, 3 or 5 voters; raft ports, not client ports); a broker among them runs its voter, one outside follows the metadata over the network (--cluster-seeds)")
	fs.StringVar(&o.clusterSeeds, "cluster-seeds", "", "HOST:PORT,... client addresses of brokers of the cluster that a broker outside the controller quorum asks for the metadata; required for such a broker")
	fs.StringVar(&o.rack, "rack", "", "this broker's rack: replicas of a partition are placed on different racks where there are enough")
	fs.DurationVar(&o.sessionTimeout, "broker-session-timeout", 6*time.Second, "a broker that has not heartbeated to the controller for this long loses its leaderships and leaves every ISR")
	fs.DurationVar(&o.replicaLagMax, "replica-lag-time-max", 10*time.Second, "replica.lag.time.max: a follower that has not caught up with its leader for this long leaves the ISR")
	fs.Int64Var(&o.replThrottle, "replication-throttled-bytes-per-second", 0, "replication.throttled.bytes.per.second: the rate at which this broker copies partitions whose ISR it is not in (catching up after a failure, a reassignment's new replica); in-sync replicas are never throttled; 0: unthrottled")
	fs.Int64Var(&o.leaderThrottle, "leader-replication-throttled-rate", 0, "leader.replication.throttled.rate in bytes per second: the rate at which this broker, as leader, serves followers that are not in their partition's ISR (those the topic's leader.replication.throttled.replicas lists, every one when unset); in-sync followers are never throttled; 0: unthrottled")
	fs.StringVar(&o.testingProtocol, flagTestingProtocol, "", "TESTING ONLY: register with inter-broker protocol versions MIN-MAX instead of this build's, to simulate a broker of an older release (command line only)")
	fs.Var(o.topicDefaults, keyTopicDefs, "broker-wide topic config k=v[,k=v...] (repeatable) for topics that do not set the key, e.g. retention.ms=86400000 (SIGHUP reloads it)")
	return fs
}

// loadSettings parses the command line, reads the config file it names (or
// $RINGLOG_CONFIG), applies RINGLOG_* variables from getenv, and validates the result.
func loadSettings(args []string, getenv func(string) (string, bool)) (*settings, error) {
	s := &settings{sources: map[string]source{}}
	fs := defineFlags(s)
	s.fs = fs
	if err := parseFlags(fs, args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	onCommandLine := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { onCommandLine[f.Name] = true })
	if s.configFile == "" {
		if path, ok := getenv(configEnv); ok && path != "" {
			s.configFile = path
		}
	}
	var file map[string]fileValue
	if s.configFile != "" {
		var err error
		if file, err = readConfigFile(s.configFile, fs); err != nil {
			return nil, err
		}
	}
	var firstErr error
	fs.VisitAll(func(f *flag.Flag) {
		if firstErr != nil || commandOnly[f.Name] {
			return
		}
		fv, inFile := file[f.Name]
		env, inEnv := getenv(envName(f.Name))
		switch {
		case onCommandLine[f.Name]:
			s.sources[f.Name] = source{kind: sourceFlag}
		case inEnv:
			firstErr = s.set(f, env, source{kind: sourceEnv, where: envName(f.Name)})
		case inFile:
			firstErr = s.setFromFile(f, fv)
		default:
			s.sources[f.Name] = source{kind: sourceDefault}
		}
	})
	if firstErr != nil {
		return nil, firstErr
	}
	if err := s.validate(); err != nil {
		return nil, err
	}
	return s, nil
}

// set gives flag f the text value from src.
func (s *settings) set(f *flag.Flag, value string, src source) error {
	s.sources[f.Name] = src
	if err := f.Value.Set(value); err != nil {
		return refuse(ErrBadValue, "%s %q: want %s", src.label(f.Name), value, wantOf(f))
	}
	return nil
}

func (s *settings) setFromFile(f *flag.Flag, fv fileValue) error {
	src := source{kind: sourceFile, where: s.configFile, line: fv.line}
	if f.Name != keyTopicDefs {
		return s.set(f, fv.scalar, src)
	}
	s.sources[f.Name] = src
	for k, v := range fv.mapping {
		s.o.topicDefaults[k] = v
	}
	return nil
}

// wantOf describes the values flag f accepts, from its type.
func wantOf(f *flag.Flag) string {
	if f.Name == keyTopicDefs {
		return "key=value[,key=value...]"
	}
	switch f.Value.(flag.Getter).Get().(type) {
	case bool:
		return "true or false"
	case int, int64:
		return "an integer"
	case uint:
		return "a non-negative integer"
	case time.Duration:
		return "a duration such as 10s or 1m30s"
	}
	return "a string"
}

// fileValue is one key of the config file.
type fileValue struct {
	line    int
	scalar  string
	mapping map[string]string // topic-defaults only
}

// readConfigFile reads path as one YAML mapping of configuration keys (the flag names of
// fs). Unknown keys, repeated keys, lists, and mappings where a single value belongs are
// refused with the file, line and key.
func readConfigFile(path string, fs *flag.FlagSet) (map[string]fileValue, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("config file: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, configFileBytesMax+1))
	if err != nil {
		return nil, fmt.Errorf("config file %s: %w", path, err)
	}
	if len(data) > configFileBytesMax {
		return nil, refuse(ErrBadValue, "config file %s: larger than %d bytes", path, configFileBytesMax)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil // empty file: every key at its default
		}
		return nil, refuse(ErrBadValue, "config file %s: %v", path, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, refuse(ErrBadValue, "config file %s: want one YAML document (a second one starts at line %d)", path, extra.Line)
	}
	root := doc.Content[0]
	if root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
		return nil, nil
	}
	if root.Kind != yaml.MappingNode {
		return nil, refuse(ErrBadValue, "%s:%d: want a mapping of configuration keys to values", path, root.Line)
	}
	out := map[string]fileValue{}
	for i := 0; i+1 < len(root.Content); i += 2 {
		keyNode, valueNode := root.Content[i], resolveAlias(root.Content[i+1])
		key := keyNode.Value
		at := fmt.Sprintf("%s:%d", path, keyNode.Line)
		if keyNode.Kind != yaml.ScalarNode {
			return nil, refuse(ErrUnknownKey, "%s: want a key name", at)
		}
		if f := fs.Lookup(key); f == nil || commandOnly[key] {
			return nil, refuse(ErrUnknownKey, "%s: unknown key %q%s", at, key, suggest(key, fs))
		}
		if prev, dup := out[key]; dup {
			return nil, refuse(ErrConflict, "%s: key %q is already set on line %d", at, key, prev.line)
		}
		fv := fileValue{line: keyNode.Line}
		if key == keyTopicDefs {
			m, err := readTopicDefaults(path, valueNode)
			if err != nil {
				return nil, err
			}
			fv.mapping = m
		} else {
			if valueNode.Kind != yaml.ScalarNode {
				return nil, refuse(ErrBadValue, "%s: %s: want a single value, not a %s", at, key, kindName(valueNode.Kind))
			}
			fv.scalar = valueNode.Value
		}
		out[key] = fv
	}
	return out, nil
}

func resolveAlias(n *yaml.Node) *yaml.Node {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		return n.Alias
	}
	return n
}

func kindName(k yaml.Kind) string {
	switch k {
	case yaml.SequenceNode:
		return "list"
	case yaml.MappingNode:
		return "mapping"
	}
	return "value of that kind"
}

// topicConfigKeys are the keys topic-defaults accepts: the topic configs the broker-wide
// partition defaults can hold (min.insync.replicas is per topic only).
var topicConfigKeys = []string{
	engine.ConfigSegmentBytes, engine.ConfigSegmentMs, engine.ConfigIndexIntervalBytes,
	engine.ConfigRetentionMs, engine.ConfigRetentionBytes, engine.ConfigFlushMessages,
	engine.ConfigFlushMs, engine.ConfigFlushAlways, engine.ConfigStorageMode,
	engine.ConfigCleanupPolicy, engine.ConfigDeleteRetentionMs, engine.ConfigMinCleanableDirtyRatio,
	engine.ConfigPreallocateBytes, engine.ConfigRecycleSegments,
}

func isTopicConfigKey(k string) bool {
	for _, known := range topicConfigKeys {
		if k == known {
			return true
		}
	}
	return false
}

func readTopicDefaults(path string, n *yaml.Node) (map[string]string, error) {
	m := map[string]string{}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return m, nil
	}
	if n.Kind != yaml.MappingNode {
		return nil, refuse(ErrBadValue, "%s:%d: %s: want a mapping of topic config keys to values", path, n.Line, keyTopicDefs)
	}
	lines := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], resolveAlias(n.Content[i+1])
		at := fmt.Sprintf("%s:%d", path, k.Line)
		if !isTopicConfigKey(k.Value) {
			return nil, refuse(ErrUnknownKey, "%s: unknown key %s.%s (want one of %s)", at, keyTopicDefs, k.Value, strings.Join(topicConfigKeys, ", "))
		}
		if prev, dup := lines[k.Value]; dup {
			return nil, refuse(ErrConflict, "%s: key %s.%s is already set on line %d", at, keyTopicDefs, k.Value, prev)
		}
		if v.Kind != yaml.ScalarNode {
			return nil, refuse(ErrBadValue, "%s: %s.%s: want a single value, not a %s", at, keyTopicDefs, k.Value, kindName(v.Kind))
		}
		lines[k.Value] = k.Line
		m[k.Value] = v.Value
	}
	return m, nil
}

// parseFlags parses the command line. A mistake is one line naming it (with the flag
// meant, for a near miss), not the line followed by the usage of every flag; -h and
// --help print that usage (to stderr) and return flag.ErrHelp.
func parseFlags(fs *flag.FlagSet, args []string) error {
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fs.SetOutput(os.Stderr)
		fs.Usage()
		return err
	case err == nil:
		return nil
	}
	hint := ""
	if name, ok := strings.CutPrefix(err.Error(), "flag provided but not defined: -"); ok {
		hint = suggest(strings.TrimPrefix(name, "-"), fs)
	}
	return fmt.Errorf("%w%s; ringlogd --help lists the flags", err, hint)
}

// suggest names a known key close to an unknown one (a typo, or Kafka-style dots or
// underscores instead of dashes).
func suggest(key string, fs *flag.FlagSet) string {
	normal := strings.NewReplacer("_", "-", ".", "-").Replace(strings.ToLower(key))
	var names []string
	fs.VisitAll(func(f *flag.Flag) {
		if !commandOnly[f.Name] {
			names = append(names, f.Name)
		}
	})
	best := textdist.Nearest(normal, names, 2)
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}

// validate checks every value and the combinations, naming the keys and their sources.
func (s *settings) validate() error {
	o := &s.o
	bad := func(key, value, want string) error {
		return refuse(ErrBadValue, "%s %q: want %s", s.sources[key].label(key), value, want)
	}
	oneOf := func(key, value string, allowed ...string) error {
		for _, a := range allowed {
			if value == a {
				return nil
			}
		}
		return bad(key, value, strings.Join(allowed, ", "))
	}
	for _, err := range []error{
		oneOf("storage", o.storage, string(engine.StoragePageCache), string(engine.StorageDirect)),
		oneOf("io", o.io, "auto", "uring", "syscall"),
		oneOf("file-io", o.fileIO, "inline", "ring", "auto"),
		oneOf("sync-inline", o.syncInline, "auto", "off"),
		oneOf("net", o.net, "ring", "go"),
	} {
		if err != nil {
			return err
		}
	}
	if _, err := parseLogLevel(o.logLevel); err != nil {
		return bad("log-level", o.logLevel, "debug, info, warn or error")
	}
	if o.shards < 0 {
		return bad("shards", strconv.Itoa(o.shards), "0 (one per CPU) or more")
	}
	if o.nodeID < 0 || o.nodeID > math.MaxInt32 {
		return bad("node-id", strconv.Itoa(o.nodeID), "0 (single broker) or a positive id")
	}
	if (o.nodeID > 0) != (o.controllerVoters != "") {
		return refuse(ErrConflict, "%s and %s go together: set both for a cluster, neither for a single broker",
			s.sources["node-id"].label("node-id"), s.sources["controller-voters"].label("controller-voters"))
	}
	if o.sessionTimeout <= 0 {
		return bad("broker-session-timeout", o.sessionTimeout.String(), "a positive duration")
	}
	if o.replicaLagMax <= 0 {
		return bad("replica-lag-time-max", o.replicaLagMax.String(), "a positive duration")
	}
	if _, _, err := parseProtocolRange(o.testingProtocol); err != nil {
		return bad(flagTestingProtocol, o.testingProtocol, fmt.Sprintf("MIN-MAX within this build's %d-%d", controller.ProtocolVersionMin, controller.ProtocolVersionMax))
	}
	if o.replThrottle < 0 {
		return bad("replication-throttled-bytes-per-second", strconv.FormatInt(o.replThrottle, 10), "0 (unthrottled) or more")
	}
	if o.leaderThrottle < 0 {
		return bad("leader-replication-throttled-rate", strconv.FormatInt(o.leaderThrottle, 10), "0 (unthrottled) or more")
	}
	if o.scrubRate < 0 {
		return bad("scrub-bytes-per-sec", strconv.FormatInt(o.scrubRate, 10), "0 (off) or more")
	}
	if o.cleanerRate < 1 {
		return bad("cleaner-io-max-bytes-per-second", strconv.FormatInt(o.cleanerRate, 10), "at least 1 (turn the cleaner off with --cleaner-enable=false)")
	}
	if o.cleanerMap < engine.CleanerDedupeBufferBytesMin || o.cleanerMap > engine.CleanerDedupeBufferBytesMax {
		return bad("cleaner-dedupe-buffer-bytes", strconv.FormatInt(o.cleanerMap, 10), fmt.Sprintf("%d..%d", engine.CleanerDedupeBufferBytesMin, int64(engine.CleanerDedupeBufferBytesMax)))
	}
	if o.cleanerEvery <= 0 {
		return bad("cleaner-interval", o.cleanerEvery.String(), "a positive duration")
	}
	if o.directWriteGroups < 1 || o.directWriteGroups > engine.DirectWriteGroupsLimit {
		return bad("direct-write-groups", strconv.Itoa(o.directWriteGroups), fmt.Sprintf("1..%d", engine.DirectWriteGroupsLimit))
	}
	if o.retentionEvery < 10*time.Millisecond {
		return bad("retention-check-interval", o.retentionEvery.String(), "at least 10ms")
	}
	if o.diskFreeMin < 0 {
		return bad("disk-free-min-bytes", strconv.FormatInt(o.diskFreeMin, 10), "0 or more")
	}
	if o.writebackBytes < 0 {
		return bad("writeback-bytes", strconv.FormatInt(o.writebackBytes, 10), "0 or more")
	}
	if o.producerIDExpiration < 0 {
		return bad("producer-id-expiration", o.producerIDExpiration.String(), "0 (24h) or a positive duration")
	}
	if o.groupSessionMin <= 0 || o.groupSessionMax < o.groupSessionMin {
		return bad("group-max-session-timeout", o.groupSessionMax.String(), fmt.Sprintf("at least --group-min-session-timeout (%s), which must be positive", o.groupSessionMin))
	}
	if o.groupMembersMax < 1 {
		return bad("group-max-size", strconv.Itoa(o.groupMembersMax), "at least 1")
	}
	if o.groupPendingMax < 1 {
		return bad("group-max-pending-members", strconv.Itoa(o.groupPendingMax), "at least 1")
	}
	if o.groupStateBytes < 1 {
		return bad("group-max-state-bytes", strconv.FormatInt(o.groupStateBytes, 10), "at least 1")
	}
	if o.offsetsPartitions < 1 || o.offsetsPartitions > 1024 {
		return bad("offsets-partitions", strconv.Itoa(o.offsetsPartitions), "1..1024")
	}
	if o.offsetsRF < 1 || o.offsetsRF > 32 {
		return bad("offsets-replication-factor", strconv.Itoa(o.offsetsRF), "1..32")
	}
	if o.connsMax < 1 {
		return bad("max-connections", strconv.Itoa(o.connsMax), "at least 1")
	}
	if o.frameBytesMax < 1 || o.frameBytesMax > frameBytesLimit {
		return bad("max-frame-bytes", strconv.FormatUint(uint64(o.frameBytesMax), 10), fmt.Sprintf("1..%d", uint64(frameBytesLimit)))
	}
	if err := o.admin.check(); err != nil {
		return refuse(ErrBadValue, "%v", err)
	}
	if err := o.limits.check(); err != nil {
		return refuse(ErrBadValue, "%v", err)
	}
	if err := o.security.check(); err != nil {
		return refuse(ErrConflict, "%v", err)
	}
	if o.nodeID > 0 {
		if err := o.security.checkCluster(); err != nil {
			return refuse(ErrConflict, "%v", err)
		}
	}
	if o.loopSpin < 0 || o.loopSpin > ring.SpinBeforeWaitMax {
		return bad("loop-spin", o.loopSpin.String(), "a duration in 0..1ms")
	}
	if o.shutdownGrace < 0 {
		return bad("shutdown-grace", o.shutdownGrace.String(), "a duration >= 0")
	}
	if _, _, err := net.SplitHostPort(o.listen); err != nil {
		return bad("listen", o.listen, "HOST:PORT")
	}
	if o.kafkaListen != "" {
		if _, _, err := net.SplitHostPort(o.kafkaListen); err != nil {
			return bad("kafka-listen", o.kafkaListen, "HOST:PORT or empty")
		}
	}
	if o.kafkaAdvertise != "" {
		if _, port, err := net.SplitHostPort(o.kafkaAdvertise); err != nil || port == "" || port == "0" {
			return bad("kafka-advertise", o.kafkaAdvertise, "HOST:PORT with a port clients can reach, or empty")
		}
	}
	if o.shardPorts != "auto" && o.shardPorts != "off" {
		if base, err := strconv.Atoi(o.shardPorts); err != nil || base < 1 || base > portMax {
			return bad("shard-ports", o.shardPorts, "auto, off or a base port")
		}
	}
	if o.cpus != "" {
		if _, err := tuning.ParseCPUList(o.cpus); err != nil {
			return bad("cpus", o.cpus, "a CPU list such as 0-3,8")
		}
	}
	if err := s.checkConflicts(); err != nil {
		return err
	}
	for k := range o.topicDefaults {
		if !isTopicConfigKey(k) {
			return refuse(ErrUnknownKey, "%s: unknown topic config %q (want one of %s)", s.sources[keyTopicDefs].label(keyTopicDefs), k, strings.Join(topicConfigKeys, ", "))
		}
	}
	if _, err := s.logDefaultsOver(engine.LogConfig{}); err != nil {
		return refuse(ErrBadValue, "%s: %v", s.sources[keyTopicDefs].label(keyTopicDefs), err)
	}
	return nil
}

// checkConflicts refuses keys that cannot both be set, wherever each was set.
func (s *settings) checkConflicts() error {
	set := func(key string) bool { return s.sources[key].kind != sourceDefault }
	both := func(a, b string) error {
		return refuse(ErrConflict, "%s and %s cannot both be set", s.sources[a].label(a), s.sources[b].label(b))
	}
	if s.o.cpus != "" && s.o.tunePlan != "" {
		return both("cpus", "tune-plan")
	}
	for key, topicKey := range map[string]string{"flush-always": engine.ConfigFlushAlways, "storage": engine.ConfigStorageMode} {
		if _, dup := s.o.topicDefaults[topicKey]; dup && set(key) {
			return refuse(ErrConflict, "%s and %s.%s set the same default; keep one", s.sources[key].label(key), s.sources[keyTopicDefs].label(keyTopicDefs), topicKey)
		}
	}
	return nil
}

// logDefaultsOver is the broker-wide partition configuration: base (the process-wide
// fields such as the disk guard), --storage and --flush-always over it, then
// topic-defaults over them.
func (s *settings) logDefaultsOver(base engine.LogConfig) (engine.LogConfig, error) {
	base.Storage, base.FlushAlways = engine.StorageMode(s.o.storage), s.o.flushAlways
	lc, err := engine.LogConfigFromMap(base, s.o.topicDefaults)
	if err != nil {
		return base, err
	}
	return lc, nil
}

func parseLogLevel(s string) (slog.Level, error) {
	var level slog.Level
	switch strings.ToLower(s) {
	case "debug", "info", "warn", "error":
	default:
		return level, fmt.Errorf("log level %q: want debug, info, warn or error", s)
	}
	err := level.UnmarshalText([]byte(s))
	return level, err
}

// keys returns the configuration keys in order (the flags' lexical order).
func (s *settings) keys() []string {
	var keys []string
	s.fs.VisitAll(func(f *flag.Flag) {
		if !commandOnly[f.Name] {
			keys = append(keys, f.Name)
		}
	})
	return keys
}

// value returns key's effective value as text (topic-defaults as k=v,...).
func (s *settings) value(key string) string { return s.fs.Lookup(key).Value.String() }

// writeConfig prints the effective configuration as a YAML file that --config loads back,
// each value followed by a comment naming its source.
func (s *settings) writeConfig(w io.Writer) error {
	root := &yaml.Node{Kind: yaml.MappingNode, HeadComment: "ringlogd effective configuration (ringlogd --print-config).\n" +
		"Each line comment names the value's source: default, file PATH:LINE, env RINGLOG_<KEY> or flag.\n" +
		"Precedence: flag > env > file > default. This output loads back with --config."}
	for _, key := range s.keys() {
		k := &yaml.Node{Kind: yaml.ScalarNode, Value: key}
		v := s.yamlValue(key)
		if v.Kind == yaml.MappingNode && len(v.Content) > 0 {
			k.LineComment = s.sources[key].String()
		} else {
			v.LineComment = s.sources[key].String()
		}
		root.Content = append(root.Content, k, v)
	}
	enc := yaml.NewEncoder(w)
	enc.SetIndent(2)
	if err := enc.Encode(&yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{root}}); err != nil {
		return fmt.Errorf("print config: %w", err)
	}
	return enc.Close()
}

func (s *settings) yamlValue(key string) *yaml.Node {
	f := s.fs.Lookup(key)
	if key == keyTopicDefs {
		m := &yaml.Node{Kind: yaml.MappingNode}
		keys := make([]string, 0, len(s.o.topicDefaults))
		for k := range s.o.topicDefaults {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: k},
				&yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s.o.topicDefaults[k]})
		}
		return m
	}
	tag := "!!str"
	switch f.Value.(flag.Getter).Get().(type) {
	case bool:
		tag = "!!bool"
	case int, int64, uint:
		tag = "!!int"
	}
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: f.Value.String()}
}

// splitList splits a comma-separated flag value, dropping blanks around and between items.
func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// parseProtocolRange parses --testing-protocol-versions: "" (0, 0: this build's range) or
// MIN-MAX within this build's range.
func parseProtocolRange(text string) (lo, hi uint16, err error) {
	if text == "" {
		return 0, 0, nil
	}
	a, b, ok := strings.Cut(text, "-")
	x, errA := strconv.ParseUint(a, 10, 16)
	y, errB := strconv.ParseUint(b, 10, 16)
	if !ok || errA != nil || errB != nil || x < uint64(controller.ProtocolVersionMin) || x > y || y > uint64(controller.ProtocolVersionMax) {
		return 0, 0, fmt.Errorf("protocol versions %q: want MIN-MAX within %d-%d", text, controller.ProtocolVersionMin, controller.ProtocolVersionMax)
	}
	return uint16(x), uint16(y), nil
}
