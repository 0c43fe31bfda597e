package bench

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// ErrBadWorkload is returned for a workload file that does not parse or fails validation.
var ErrBadWorkload = errors.New("bad workload")

// Limits on a workload, so a typo cannot ask for a million topics or a 1 TiB message.
const (
	workloadFileBytesMax = 1 << 20
	topicsMax            = 10_000
	partitionsMax        = 100_000
	messageBytesMin      = 16 // the payload carries its 8-byte send timestamp and a magic
	messageBytesMax      = 16 << 20
	clientsPerTopicMax   = 1_000
	producerRateMax      = 100_000_000
	inFlightMax          = 1 << 20
	durationMax          = 24 * time.Hour
	retentionBytesMin    = 1 << 20
	replicationFactorMax = 16 // the controller's limit on replicas per partition
	batchBytesMax        = 16 << 20
)

// Key distributions: none sends null keys and lets the client place them, as a Kafka
// application does (partition -1 to a driver whose client has a partitioner, see
// NullKeyPlacer; the bundled client and kgo place them in sticky runs of their batch size,
// KIP-794); a driver without one gets them round-robin. roundrobin sends null keys to
// partitions round-robin, message by message, chosen by the bench (what every figure
// before session 6 called none). sticky sends null keys in runs of 16 KiB chosen by the
// bench (Kafka's default batch.size, KIP-480/KIP-794: one partition until 16 KiB went to it,
// then a random other one). random draws keys uniformly from keySpaceSize, hot sends
// HotKeyShare of messages with one key.
const (
	KeysNone       = "none"
	KeysRoundRobin = "roundrobin"
	KeysSticky     = "sticky"
	KeysRandom     = "random"
	KeysHot        = "hot"
)

// Workload is an OpenMessaging-Benchmark-style description of a run. Counts of producers and
// consumers are per topic; ProducerRate is the total over all producers (0 = as fast as
// possible). Consumers of a topic split its partitions between them, as one group would.
type Workload struct {
	Name               string   `yaml:"name" json:"name"`
	Topics             int      `yaml:"topics" json:"topics"`
	PartitionsPerTopic int      `yaml:"partitionsPerTopic" json:"partitionsPerTopic"`
	MessageSize        ByteSize `yaml:"messageSize" json:"messageSize"`
	KeyDistribution    string   `yaml:"keyDistribution" json:"keyDistribution"`
	HotKeyShare        float64  `yaml:"hotKeyShare,omitempty" json:"hotKeyShare,omitempty"`
	Producers          int      `yaml:"producers" json:"producers"`
	Consumers          int      `yaml:"consumers" json:"consumers"`
	ProducerRate       int      `yaml:"producerRate" json:"producerRate"`
	MaxInFlight        int      `yaml:"maxInFlight,omitempty" json:"maxInFlight,omitempty"`
	// BatchBytes is the producers' batch size (Kafka's batch.size; with keyDistribution
	// none also the client's sticky run); 0 leaves the client's default.
	BatchBytes  ByteSize `yaml:"batchBytes,omitempty" json:"batchBytes,omitempty"`
	BacklogSize ByteSize `yaml:"backlogSize,omitempty" json:"backlogSize,omitempty"`
	// RetentionBytes caps each partition's log (Kafka's retention.bytes) so long runs keep
	// deleting old segments, as production does; 0 leaves the system's default.
	RetentionBytes ByteSize `yaml:"retentionBytes,omitempty" json:"retentionBytes,omitempty"`
	Warmup         Duration `yaml:"warmup" json:"warmup"`
	Duration       Duration `yaml:"duration" json:"duration"`
	Acks           string   `yaml:"acks" json:"acks"`
	Compression    string   `yaml:"compression" json:"compression"`
	// Durability is the broker's storage sync policy: "none" (page cache, background flush)
	// or "fsync" (data is synced before the acknowledgement).
	Durability string `yaml:"durability,omitempty" json:"durability,omitempty"`
	// ReplicationFactor is the replicas of each partition, on different brokers of a
	// cluster; 0 leaves the system's default (one replica on a single broker).
	ReplicationFactor int `yaml:"replicationFactor,omitempty" json:"replicationFactor,omitempty"`
}

// maxInFlightDefault bounds unacknowledged sends per producer when the workload is silent.
const maxInFlightDefault = 1024

// ByteSize is a size that a workload file may write as a number of bytes or as "1KiB".
type ByteSize int64

// UnmarshalYAML accepts 1024 or "1KiB".
func (b *ByteSize) UnmarshalYAML(node *yaml.Node) error {
	if node.Kind != yaml.ScalarNode {
		return fmt.Errorf("%w: line %d: size must be a number or a string like 1KiB", ErrBadWorkload, node.Line)
	}
	n, err := ParseBytes(node.Value)
	if err != nil {
		return fmt.Errorf("line %d: %w", node.Line, err)
	}
	*b = ByteSize(n)
	return nil
}

// UnmarshalJSON accepts 1024 or "1KiB".
func (b *ByteSize) UnmarshalJSON(data []byte) error {
	text := strings.Trim(string(data), `"`)
	n, err := ParseBytes(text)
	if err != nil {
		return err
	}
	*b = ByteSize(n)
	return nil
}

// MarshalYAML writes the size in bytes.
func (b ByteSize) MarshalYAML() (any, error) { return int64(b), nil }

// Duration is a time.Duration that a workload file writes as "30s" or "5m".
type Duration time.Duration

// UnmarshalYAML accepts "30s".
func (d *Duration) UnmarshalYAML(node *yaml.Node) error {
	parsed, err := time.ParseDuration(node.Value)
	if err != nil {
		return fmt.Errorf("%w: line %d: duration %q: want a Go duration like 30s or 5m", ErrBadWorkload, node.Line, node.Value)
	}
	*d = Duration(parsed)
	return nil
}

// UnmarshalJSON accepts "30s".
func (d *Duration) UnmarshalJSON(data []byte) error {
	var text string
	if err := json.Unmarshal(data, &text); err != nil {
		return fmt.Errorf("%w: duration must be a string like \"30s\"", ErrBadWorkload)
	}
	parsed, err := time.ParseDuration(text)
	if err != nil {
		return fmt.Errorf("%w: duration %q: want a Go duration like 30s or 5m", ErrBadWorkload, text)
	}
	*d = Duration(parsed)
	return nil
}

// MarshalJSON writes "30s".
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// MarshalYAML writes "30s".
func (d Duration) MarshalYAML() (any, error) { return time.Duration(d).String(), nil }

// D is the value as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// LoadWorkload reads and validates a workload file (.yaml, .yml or .json). A workload
// without a name is named after its file.
func LoadWorkload(path string) (Workload, error) {
	f, err := os.Open(path)
	if err != nil {
		return Workload{}, fmt.Errorf("load workload: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, workloadFileBytesMax+1))
	if err != nil {
		return Workload{}, fmt.Errorf("load workload %s: %w", path, err)
	}
	if len(data) > workloadFileBytesMax {
		return Workload{}, fmt.Errorf("%w: %s is larger than %d bytes", ErrBadWorkload, path, workloadFileBytesMax)
	}
	w, err := ParseWorkload(data)
	if err != nil {
		return Workload{}, fmt.Errorf("%s: %w", path, err)
	}
	if w.Name == "" {
		w.Name = strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
	}
	return w, nil
}

// ParseWorkload decodes YAML or JSON (sniffed: JSON starts with '{'), rejects unknown
// fields, fills defaults and validates.
func ParseWorkload(data []byte) (Workload, error) {
	if len(data) > workloadFileBytesMax {
		return Workload{}, fmt.Errorf("%w: larger than %d bytes", ErrBadWorkload, workloadFileBytesMax)
	}
	var w Workload
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 {
		return Workload{}, fmt.Errorf("%w: empty", ErrBadWorkload)
	}
	if trimmed[0] == '{' {
		decoder := json.NewDecoder(bytes.NewReader(trimmed))
		decoder.DisallowUnknownFields()
		if err := decoder.Decode(&w); err != nil {
			return Workload{}, fmt.Errorf("%w: %v", ErrBadWorkload, err)
		}
		if decoder.More() {
			return Workload{}, fmt.Errorf("%w: trailing data after the JSON object", ErrBadWorkload)
		}
	} else {
		decoder := yaml.NewDecoder(bytes.NewReader(trimmed))
		decoder.KnownFields(true)
		if err := decoder.Decode(&w); err != nil {
			return Workload{}, fmt.Errorf("%w: %v", ErrBadWorkload, err)
		}
	}
	w.fillDefaults()
	if err := w.Validate(); err != nil {
		return Workload{}, err
	}
	return w, nil
}

func (w *Workload) fillDefaults() {
	if w.KeyDistribution == "" {
		w.KeyDistribution = KeysNone
	}
	if w.Acks == "" {
		w.Acks = "1"
	}
	if w.Compression == "" {
		w.Compression = "none"
	}
	if w.Durability == "" {
		w.Durability = "none"
	}
	if w.MaxInFlight == 0 {
		w.MaxInFlight = maxInFlightDefault
	}
}

// Validate checks every field against its range and the fields against each other.
func (w Workload) Validate() error {
	var problems []string
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	if w.Topics < 1 || w.Topics > topicsMax {
		bad("topics %d: want 1..%d", w.Topics, topicsMax)
	}
	if w.PartitionsPerTopic < 1 || w.PartitionsPerTopic > partitionsMax {
		bad("partitionsPerTopic %d: want 1..%d", w.PartitionsPerTopic, partitionsMax)
	}
	if w.MessageSize < messageBytesMin || w.MessageSize > messageBytesMax {
		bad("messageSize %d: want %d..%d bytes", w.MessageSize, messageBytesMin, messageBytesMax)
	}
	switch w.KeyDistribution {
	case KeysNone, KeysRoundRobin, KeysSticky, KeysRandom:
		if w.HotKeyShare != 0 {
			bad("hotKeyShare is only meaningful with keyDistribution: hot")
		}
	case KeysHot:
		if !(w.HotKeyShare > 0 && w.HotKeyShare <= 1) {
			bad("hotKeyShare %v: want a share in (0, 1] with keyDistribution: hot", w.HotKeyShare)
		}
	default:
		bad("keyDistribution %q: want none, roundrobin, sticky, random or hot", w.KeyDistribution)
	}
	if w.Producers < 0 || w.Producers > clientsPerTopicMax || w.Consumers < 0 || w.Consumers > clientsPerTopicMax {
		bad("producers %d, consumers %d: want 0..%d each", w.Producers, w.Consumers, clientsPerTopicMax)
	}
	if w.Producers+w.Consumers == 0 {
		bad("no producers and no consumers")
	}
	if w.Consumers > w.PartitionsPerTopic {
		bad("consumers %d > partitionsPerTopic %d: the extra consumers would idle", w.Consumers, w.PartitionsPerTopic)
	}
	if w.ProducerRate < 0 || w.ProducerRate > producerRateMax {
		bad("producerRate %d: want 0 (max) ..%d msg/s", w.ProducerRate, producerRateMax)
	}
	if w.MaxInFlight < 1 || w.MaxInFlight > inFlightMax {
		bad("maxInFlight %d: want 1..%d", w.MaxInFlight, inFlightMax)
	}
	if w.RetentionBytes != 0 && (w.RetentionBytes < retentionBytesMin || w.RetentionBytes < w.MessageSize) {
		bad("retentionBytes %d: want 0 (default) or at least %d bytes", w.RetentionBytes, retentionBytesMin)
	}
	if w.BatchBytes < 0 || w.BatchBytes > batchBytesMax {
		bad("batchBytes %d: want 0 (the client's default) ..%d", w.BatchBytes, batchBytesMax)
	}
	if w.BacklogSize < 0 {
		bad("backlogSize %d: negative", w.BacklogSize)
	}
	if w.BacklogSize > 0 && (w.Producers == 0 || w.Consumers == 0 || w.ProducerRate == 0) {
		bad("backlogSize needs producers, consumers and a producerRate > 0 (at max rate a backlog never drains)")
	}
	if w.Duration.D() <= 0 || w.Duration.D() > durationMax || w.Warmup.D() < 0 || w.Warmup.D() > durationMax {
		bad("duration %v, warmup %v: want 0 < duration <= %v and 0 <= warmup <= %v", w.Duration.D(), w.Warmup.D(), durationMax, durationMax)
	}
	if w.ReplicationFactor < 0 || w.ReplicationFactor > replicationFactorMax {
		bad("replicationFactor %d: want 0 (default) or 1..%d", w.ReplicationFactor, replicationFactorMax)
	}
	switch w.Acks {
	case "0", "1", "all":
	default:
		bad("acks %q: want 0, 1 or all", w.Acks)
	}
	switch w.Compression {
	case "none", "gzip", "snappy", "lz4", "zstd":
	default:
		bad("compression %q: want none, gzip, snappy, lz4 or zstd", w.Compression)
	}
	switch w.Durability {
	case "none", "fsync":
	default:
		bad("durability %q: want none or fsync", w.Durability)
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w: %s", ErrBadWorkload, strings.Join(problems, "; "))
	}
	return nil
}
