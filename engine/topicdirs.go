package engine

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/ringlog/ringlog/ring"
)

// Topic directories and the catalog commit. The catalog is the single commit point of
// every topic admin operation; partition directories follow it:
//
//   - create: every partition directory is created durably (mkdir, fsync of the data
//     directory, first segment, fsync of the partition directory) and opened, and only then
//     is the topic written to the catalog. A failure or crash before that write leaves
//     directories that no catalog entry names; Sweep removes them.
//   - delete: the topic leaves the catalog first; its directories are removed afterwards,
//     and Sweep removes whatever a failure or crash left.
//
// So the catalog never names a directory that is missing, and a directory the catalog does
// not name is garbage.

// RemovePartitionDir removes a partition's directory so that a power loss cannot bring it
// back (see removeDirDurable); a missing directory is not an error. Only for directories no
// catalog entry names.
func RemovePartitionDir(fio ring.FileIO, dataDir, topic string, partition int) error {
	return removeDirDurable(fio, PartitionDir(dataDir, topic, partition))
}

// Sweep removes what interrupted admin operations left in the catalog's directory: partition
// directories of topics the catalog does not hold or past their partition count, directories
// whose removal was committed (*.deleting), and the catalog's temporary file. A directory is
// only removed when it holds nothing but log files, so an operator's own directory that
// happens to be named like a partition is left alone. It returns the names removed.
func (c *Catalog) Sweep() ([]string, error) {
	entries, err := os.ReadDir(c.dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("sweep %s: %w", c.dir, err)
	}
	var removed []string
	for _, e := range entries {
		name := e.Name()
		path := filepath.Join(c.dir, name)
		switch {
		case name == catalogFileName+tmpSuffix && !e.IsDir():
			if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
				return removed, fmt.Errorf("sweep: %w", err)
			}
		case e.IsDir() && c.orphanDir(name) && onlyLogFiles(path):
			doomed := strings.TrimSuffix(path, deletingSuffix)
			if err := removeDirDurable(c.fio, doomed); err != nil {
				return removed, fmt.Errorf("sweep: %w", err)
			}
		default:
			continue
		}
		removed = append(removed, name)
	}
	if len(removed) > 0 {
		if err := syncDir(c.fio, c.dir); err != nil {
			return removed, fmt.Errorf("sweep: %w", err)
		}
	}
	return removed, nil
}

// orphanDir reports whether a directory name is a partition directory no catalog entry
// names, or a committed removal.
func (c *Catalog) orphanDir(name string) bool {
	base, deleting := strings.CutSuffix(name, deletingSuffix)
	topic, partition, ok := parsePartitionDir(base)
	if !ok {
		return false
	}
	if deleting {
		return true
	}
	t, known := c.topics[topic]
	return !known || partition >= t.Partitions
}

// parsePartitionDir splits "<topic>-<partition>".
func parsePartitionDir(name string) (topic string, partition int, ok bool) {
	i := strings.LastIndexByte(name, '-')
	if i <= 0 {
		return "", 0, false
	}
	topic, digits := name[:i], name[i+1:]
	p, err := strconv.Atoi(digits)
	if err != nil || p < 0 || p >= partitionsMax || strconv.Itoa(p) != digits || ValidTopicName(topic) != nil {
		return "", 0, false
	}
	return topic, p, true
}

// onlyLogFiles reports whether dir holds nothing but files a partition log writes.
func onlyLogFiles(dir string) bool {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() {
			return false
		}
		stem, _ := leftoverStem(name)
		if _, _, ok := parseSegmentName(stem); ok {
			continue
		}
		if _, ok := parseProducerSnapshotName(stem); ok {
			continue
		}
		if _, _, ok := parseBatchMapName(stem); ok {
			continue
		}
		if stem == startOffsetFileName || stem == cleanShutdownFileName || stem == directProbeFileName {
			continue
		}
		return false
	}
	return true
}
