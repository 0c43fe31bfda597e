package shard

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// catalogFile is the topic catalog's name inside the data dir.
//
// Format (JSON, version 1; part of the on-disk format):
//
//	{"version":1,"topics":{"orders":{"shards":[0,1,0],"config":{"retention.ms":"60000"}}}}
//
// shards[p] is the shard that owned partition p when the catalog was written: placement is
// stable across restarts with the same shard count, and remapped modulo the shard count
// otherwise.
const (
	catalogFile     = "catalog.json"
	catalogVersion  = 1
	catalogBytesMax = 64 << 20
)

type catalogTopic struct {
	Shards []int             `json:"shards"`
	Config map[string]string `json:"config,omitempty"`
}

type catalog struct {
	Version int                     `json:"version"`
	Topics  map[string]catalogTopic `json:"topics"`
}

func loadCatalog(dir string) (*catalog, error) {
	path := filepath.Join(dir, catalogFile)
	st, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return &catalog{Version: catalogVersion, Topics: map[string]catalogTopic{}}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("catalog: %w", err)
	}
	if st.Size() > catalogBytesMax {
		return nil, fmt.Errorf("catalog %s: %d bytes exceeds %d", path, st.Size(), catalogBytesMax)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("catalog: %w", err)
	}
	var c catalog
	if err := json.Unmarshal(data, &c); err != nil {
		return nil, fmt.Errorf("catalog %s is corrupt: %w", path, err)
	}
	if c.Version != catalogVersion {
		return nil, fmt.Errorf("catalog %s: version %d, this broker reads %d", path, c.Version, catalogVersion)
	}
	if c.Topics == nil {
		c.Topics = map[string]catalogTopic{}
	}
	for name, t := range c.Topics {
		if err := ValidateTopicName(name); err != nil {
			return nil, fmt.Errorf("catalog %s: %w", path, err)
		}
		if len(t.Shards) == 0 || len(t.Shards) > partitionsPerTopicMax {
			return nil, fmt.Errorf("catalog %s: topic %q has %d partitions", path, name, len(t.Shards))
		}
		for _, s := range t.Shards {
			if s < 0 {
				return nil, fmt.Errorf("catalog %s: topic %q has negative shard %d", path, name, s)
			}
		}
	}
	return &c, nil
}

func (c *catalog) clone() *catalog {
	out := &catalog{Version: c.Version, Topics: make(map[string]catalogTopic, len(c.Topics))}
	for k, v := range c.Topics {
		out.Topics[k] = v
	}
	return out
}

// save writes the catalog atomically: temp file, fsync, rename, fsync the directory.
func (c *catalog) save(dir string) error {
	data, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return fmt.Errorf("catalog: encode: %w", err)
	}
	path := filepath.Join(dir, catalogFile)
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("catalog: %w", err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("catalog: write %s: %w", tmp, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("catalog: fsync %s: %w", tmp, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("catalog: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("catalog: %w", err)
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("catalog: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("catalog: fsync dir %s: %w", dir, err)
	}
	return nil
}
