package shard

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/ringlog/ringlog/engine"
	"github.com/ringlog/ringlog/ring"
)

// Offline partition repair (`ringlog topic repair`): the way past a corrupt batch that the
// scrubber or --verify-segments reported. It runs on a stopped broker's data directory (it
// takes the same lock a running broker holds, so it refuses to run beside one), opens the
// one partition log with every sealed segment verified, applies the repair and closes it.

// RepairMode says how a repair gets a partition past a bad batch.
type RepairMode int

const (
	// RepairTruncateTo removes every batch at or after the offset (the bad batch and all
	// that follow it; Kafka's truncation).
	RepairTruncateTo RepairMode = iota + 1
	// RepairSkipTo advances the log start offset to the offset (Kafka's DeleteRecords):
	// everything before it, the bad batch included, is no longer served.
	RepairSkipTo
)

// ErrNothingToRepair: a repair was asked for an offset that removes nothing.
var ErrNothingToRepair = errors.New("nothing to repair")

// RepairResult says what a repair found and did.
type RepairResult struct {
	Before, After          []engine.Corruption // bad batches before and after the repair
	StartBefore, EndBefore int64
	StartAfter, EndAfter   int64
}

// RepairPartition applies mode at offset to one partition of the broker data directory
// dataDir, which no broker may be running on.
func RepairPartition(dataDir string, tp TopicPartition, mode RepairMode, offset int64, logger *slog.Logger) (RepairResult, error) {
	var res RepairResult
	if logger == nil {
		logger = slog.Default()
	}
	lock, err := lockDataDir(dataDir)
	if err != nil {
		return res, fmt.Errorf("repair needs the broker stopped: %w", err)
	}
	defer lock.Close()
	cat, err := engine.LoadCatalog(dataDir)
	if err != nil {
		return res, err
	}
	meta, ok := cat.Topic(tp.Topic)
	if !ok || tp.Partition < 0 || int(tp.Partition) >= meta.Partitions {
		return res, fmt.Errorf("%w: %s/%d", ErrUnknownTopicOrPartition, tp.Topic, tp.Partition)
	}
	cfg, err := engine.LogConfigFromMap(engine.LogConfig{Logger: logger}, meta.Config)
	if err != nil {
		return res, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	cfg.VerifySegments = true
	l, _, err := engine.OpenLog(engine.PartitionDir(dataDir, tp.Topic, int(tp.Partition)), cfg, ring.Syscalls{})
	if err != nil {
		return res, err
	}
	res.Before, res.StartBefore, res.EndBefore = l.Corruptions(), l.StartOffset(), l.EndOffset()
	switch mode {
	case RepairTruncateTo:
		if offset >= l.EndOffset() {
			err = fmt.Errorf("%w: truncate to %d, the log ends at %d", ErrNothingToRepair, offset, l.EndOffset())
		} else {
			err = l.TruncateTo(offset)
		}
	case RepairSkipTo:
		if offset <= l.StartOffset() {
			err = fmt.Errorf("%w: skip to %d, the log starts at %d", ErrNothingToRepair, offset, l.StartOffset())
		} else {
			_, err = l.DeleteRecordsBefore(offset)
		}
	default:
		err = fmt.Errorf("repair mode %d unknown", mode)
	}
	res.After, res.StartAfter, res.EndAfter = l.Corruptions(), l.StartOffset(), l.EndOffset()
	return res, errors.Join(err, l.Close())
}
