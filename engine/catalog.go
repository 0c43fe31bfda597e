package engine

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"unicode/utf8"

	"github.com/ringlog/ringlog/ring"
)

// Catalog file format. The catalog is one JSON document, replaced atomically (write
// catalog.json.tmp, fsync it, rename over catalog.json, fsync the directory), so a reader
// sees either the old or the new catalog, never a mix:
//
//	{
//	  "version": 1,
//	  "topics": {
//	    "orders": {"shards": [0, 1, 0], "config": {"retention.ms": "86400000"},
//	               "id": "5f0c...e1", "incarnation": 4711}
//	  }
//	}
//
// shards[i] is the shard that owns partition i, so the partition count is len(shards) (the
// same document engine/shard's broker reads and writes). id and incarnation are optional
// and opaque here: whoever creates the topic may name its incarnation (a replicated
// cluster's controller assigns a random topic ID and the metadata version it was created
// at), so that a later deletion or recreation of the same name can be told apart from this
// topic. The engine only stores them. version must be 1; unknown fields
// are rejected so that a newer file is never half-understood.
const (
	catalogFileName    = "catalog.json"
	catalogVersion     = 1
	catalogBytesMax    = 64 << 20 // refuse to read a larger file: ~100 k topics with configs fit in a few MiB
	topicNameBytesMax  = TopicNameBytesMax
	partitionsMax      = PartitionsPerTopicMax
	shardIndexMax      = 1 << 12
	configEntriesMax   = TopicConfigEntriesMax
	configValueBytes   = 1024
	topicIDBytesMax    = 64
	partitionDirFormat = "%s-%d"
)

// Catalog errors callers act on.
var (
	ErrTopicExists     = errors.New("topic already exists")
	ErrUnknownTopic    = errors.New("unknown topic")
	ErrInvalidTopic    = errors.New("invalid topic")
	ErrCatalogCorrupt  = errors.New("catalog file corrupt")
	errCatalogTooLarge = errors.New("catalog file too large")
)

// TopicMeta is one topic's entry.
type TopicMeta struct {
	Partitions int               `json:"-"` // len(Placement)
	Placement  []int             `json:"shards"`
	Config     map[string]string `json:"config,omitempty"`
	// ID and Incarnation identify this incarnation of the name for its creator (both
	// optional, opaque to the engine; see the format comment).
	ID          string `json:"id,omitempty"`
	Incarnation uint64 `json:"incarnation,omitempty"`
}

type catalogFile struct {
	Version int                  `json:"version"`
	Topics  map[string]TopicMeta `json:"topics"`
}

// Catalog is the set of topics stored in a data directory. It is owned by one goroutine
// (the broker's metadata owner); it is not safe for concurrent use. Every mutation is
// persisted before it returns, and is undone in memory if persisting fails.
type Catalog struct {
	dir    string
	fio    ring.FileIO // every fsync of the catalog and of the data directory
	topics map[string]TopicMeta
}

// LoadCatalog reads dir/catalog.json with plain system calls; see OpenCatalog.
func LoadCatalog(dir string) (*Catalog, error) { return OpenCatalog(dir, ring.Syscalls{}) }

// OpenCatalog reads dir/catalog.json; a missing file is an empty catalog. Every fsync the
// catalog issues later (its own file, the data directory) goes through fio.
func OpenCatalog(dir string, fio ring.FileIO) (*Catalog, error) {
	c := &Catalog{dir: dir, fio: fio, topics: map[string]TopicMeta{}}
	f, err := os.Open(filepath.Join(dir, catalogFileName))
	if errors.Is(err, os.ErrNotExist) {
		return c, nil
	}
	if err != nil {
		return nil, fmt.Errorf("load catalog: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, catalogBytesMax+1))
	if err != nil {
		return nil, fmt.Errorf("load catalog: %w", err)
	}
	if len(b) > catalogBytesMax {
		return nil, fmt.Errorf("load catalog: %w (over %d bytes)", errCatalogTooLarge, catalogBytesMax)
	}
	if c.topics, err = decodeCatalog(b); err != nil {
		return nil, fmt.Errorf("load catalog %s: %w", f.Name(), err)
	}
	return c, nil
}

// decodeCatalog parses and validates a catalog document.
func decodeCatalog(b []byte) (map[string]TopicMeta, error) {
	if len(b) > catalogBytesMax {
		return nil, errCatalogTooLarge
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var cf catalogFile
	if err := dec.Decode(&cf); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCatalogCorrupt, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%w: trailing data", ErrCatalogCorrupt)
	}
	if cf.Version != catalogVersion {
		return nil, fmt.Errorf("%w: version %d, want %d", ErrCatalogCorrupt, cf.Version, catalogVersion)
	}
	if cf.Topics == nil {
		cf.Topics = map[string]TopicMeta{}
	}
	for name, t := range cf.Topics {
		t.Partitions = len(t.Placement)
		cf.Topics[name] = t
		if err := validateTopic(name, t); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrCatalogCorrupt, err)
		}
	}
	return cf.Topics, nil
}

// ValidTopicName reports whether name is a legal topic name: 1 to 249 bytes of
// [a-zA-Z0-9._-], not "." or "..".
func ValidTopicName(name string) error {
	if name == "" || len(name) > topicNameBytesMax || name == "." || name == ".." {
		return fmt.Errorf("%w: name %q: want 1 to %d characters, not . or ..", ErrInvalidTopic, name, topicNameBytesMax)
	}
	for i, c := range name { // runes, so a non-ASCII character is named whole, not by its first byte
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			if c == utf8.RuneError {
				return fmt.Errorf("%w: name %q: byte %#02x at %d is not UTF-8, want [a-zA-Z0-9._-]", ErrInvalidTopic, name, name[i], i)
			}
			return fmt.Errorf("%w: name %q: character %q (%U) at byte %d not in [a-zA-Z0-9._-]", ErrInvalidTopic, name, c, c, i)
		}
	}
	return nil
}

func validateTopic(name string, t TopicMeta) error {
	if err := ValidTopicName(name); err != nil {
		return err
	}
	if t.Partitions < 1 || t.Partitions > partitionsMax {
		return fmt.Errorf("%w: topic %q: %d partitions, want 1 to %d", ErrInvalidTopic, name, t.Partitions, partitionsMax)
	}
	if len(t.Placement) != t.Partitions {
		return fmt.Errorf("%w: topic %q: placement lists %d shards for %d partitions", ErrInvalidTopic, name, len(t.Placement), t.Partitions)
	}
	for p, shard := range t.Placement {
		if shard < 0 || shard >= shardIndexMax {
			return fmt.Errorf("%w: topic %q partition %d: shard %d out of range", ErrInvalidTopic, name, p, shard)
		}
	}
	if len(t.ID) > topicIDBytesMax {
		return fmt.Errorf("%w: topic %q: id longer than %d bytes", ErrInvalidTopic, name, topicIDBytesMax)
	}
	if len(t.Config) > configEntriesMax {
		return fmt.Errorf("%w: topic %q: %d config entries, at most %d", ErrInvalidTopic, name, len(t.Config), configEntriesMax)
	}
	for k, v := range t.Config {
		if len(v) > configValueBytes {
			return fmt.Errorf("%w: topic %q: config %s longer than %d bytes", ErrInvalidTopic, name, k, configValueBytes)
		}
	}
	if _, err := LogConfigFromMap(LogConfig{}, t.Config); err != nil {
		return fmt.Errorf("%w: topic %q: %w", ErrInvalidTopic, name, err)
	}
	return nil
}

// Topic returns a copy of a topic's entry.
func (c *Catalog) Topic(name string) (TopicMeta, bool) {
	t, ok := c.topics[name]
	if !ok {
		return TopicMeta{}, false
	}
	return cloneTopic(t), true
}

// Names returns the topic names in order.
func (c *Catalog) Names() []string {
	names := make([]string, 0, len(c.topics))
	for n := range c.topics {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Create adds a topic and persists the catalog. placement may be nil: partition i then goes
// to shard i % shards (shards <= 0 means 1).
func (c *Catalog) Create(name string, partitions int, config map[string]string, placement []int, shards int) error {
	return c.CreateIdentified(name, partitions, config, placement, shards, "", 0)
}

// CreateIdentified is Create with the topic's ID and incarnation stored in its entry.
func (c *Catalog) CreateIdentified(name string, partitions int, config map[string]string, placement []int, shards int, id string, incarnation uint64) error {
	if _, ok := c.topics[name]; ok {
		return fmt.Errorf("create topic %q: %w", name, ErrTopicExists)
	}
	if placement == nil && partitions > 0 && partitions <= partitionsMax {
		shards = max(shards, 1)
		placement = make([]int, partitions)
		for i := range placement {
			placement[i] = i % shards
		}
	}
	t := cloneTopic(TopicMeta{Partitions: partitions, Config: config, Placement: placement, ID: id, Incarnation: incarnation})
	if err := validateTopic(name, t); err != nil {
		return fmt.Errorf("create topic: %w", err)
	}
	c.topics[name] = t
	if err := c.Save(); err != nil {
		delete(c.topics, name)
		return fmt.Errorf("create topic %q: %w", name, c.undoSave(err))
	}
	return nil
}

// Delete removes a topic and persists the catalog. Removing its partition directories is the
// caller's job once no shard uses them (see PartitionDir).
func (c *Catalog) Delete(name string) error {
	t, ok := c.topics[name]
	if !ok {
		return fmt.Errorf("delete topic %q: %w", name, ErrUnknownTopic)
	}
	delete(c.topics, name)
	if err := c.Save(); err != nil {
		c.topics[name] = t
		return fmt.Errorf("delete topic %q: %w", name, c.undoSave(err))
	}
	return nil
}

// SetConfig replaces a topic's config map and persists the catalog.
func (c *Catalog) SetConfig(name string, config map[string]string) error {
	t, ok := c.topics[name]
	if !ok {
		return fmt.Errorf("set config of %q: %w", name, ErrUnknownTopic)
	}
	next := cloneTopic(t)
	next.Config = config
	next = cloneTopic(next)
	if err := validateTopic(name, next); err != nil {
		return fmt.Errorf("set config: %w", err)
	}
	c.topics[name] = next
	if err := c.Save(); err != nil {
		c.topics[name] = t
		return fmt.Errorf("set config of %q: %w", name, c.undoSave(err))
	}
	return nil
}

// Save writes the catalog atomically through the catalog's FileIO (writeFileAtomic: temp
// file, fsync, rename, fsync of the directory): when it returns nil the new catalog survives a
// power loss; when it fails, the file on disk is the old catalog or (only if the final
// directory fsync failed) possibly the new one.
func (c *Catalog) Save() error {
	b, err := json.MarshalIndent(catalogFile{Version: catalogVersion, Topics: c.topics}, "", "  ")
	if err != nil {
		return fmt.Errorf("save catalog: %w", err)
	}
	if err := os.MkdirAll(c.dir, 0o755); err != nil {
		return fmt.Errorf("save catalog: %w", err)
	}
	if err := writeFileAtomic(c.fio, c.dir, catalogFileName, append(b, '\n')); err != nil {
		return fmt.Errorf("save catalog: %w", err)
	}
	return nil
}

// undoSave writes the (restored) in-memory catalog back after a failed Save: when the
// failure was the final directory fsync, the new file is already renamed into place, and
// without this a restart would read a change the caller was told had failed. Best effort:
// its own error is joined to saveErr.
func (c *Catalog) undoSave(saveErr error) error {
	if err := c.Save(); err != nil {
		return errors.Join(saveErr, fmt.Errorf("restore previous catalog: %w", err))
	}
	return saveErr
}

// PartitionDir is the directory of one partition's log: <dataDir>/<topic>-<partition>.
func PartitionDir(dataDir, topic string, partition int) string {
	return filepath.Join(dataDir, fmt.Sprintf(partitionDirFormat, topic, partition))
}

// TopicLogConfig is the LogConfig of a topic: base overridden by the topic's config map.
func (c *Catalog) TopicLogConfig(name string, base LogConfig) (LogConfig, error) {
	t, ok := c.topics[name]
	if !ok {
		return base, fmt.Errorf("topic %q: %w", name, ErrUnknownTopic)
	}
	return LogConfigFromMap(base, t.Config)
}

func cloneTopic(t TopicMeta) TopicMeta {
	out := TopicMeta{Partitions: t.Partitions, Placement: append([]int(nil), t.Placement...), ID: t.ID, Incarnation: t.Incarnation}
	if t.Config != nil {
		out.Config = make(map[string]string, len(t.Config))
		for k, v := range t.Config {
			out.Config[k] = v
		}
	}
	return out
}
