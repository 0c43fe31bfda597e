package isr

import (
	"errors"
	"fmt"
	"slices"
)

// Leader-epoch bookkeeping (Kafka's KIP-101 and KIP-279).
//
// Every batch carries the epoch of the leader that appended it. The EpochCache of a replica
// remembers, for each epoch that appended anything to its log, the offset of the first
// record of that epoch. From it a leader answers OffsetsForLeaderEpoch ("where does your log
// stop holding records of epoch E?") and a follower that comes back after a leader change
// finds the point where its log diverged from the new leader's, instead of cutting blindly
// at its old high watermark (which loses records that were committed, or keeps records that
// the new leader never had, after two leader changes in a row).

// UndefinedEpoch and UndefinedOffset are the "I know nothing about it" answers of
// OffsetsForLeaderEpoch (Kafka's UNDEFINED_EPOCH and UNDEFINED_EPOCH_OFFSET).
const (
	UndefinedEpoch  int32 = -1
	UndefinedOffset int64 = -1
)

// ErrEpochRegression is returned when an epoch entry would move the cache backwards.
var ErrEpochRegression = errors.New("leader epoch cache: epoch or start offset goes backwards")

// EpochEntry says that records from StartOffset on were appended by the leader of Epoch (up
// to the next entry's StartOffset).
type EpochEntry struct {
	Epoch       int32
	StartOffset int64
}

// EpochEndOffset is the OffsetsForLeaderEpoch answer for one partition: the largest epoch
// not above the requested one that the answering replica knows, and the offset its log
// stops holding records of it (the start of the next epoch, or the log end offset).
type EpochEndOffset struct {
	Epoch     int32
	EndOffset int64
}

func (e EpochEndOffset) String() string { return fmt.Sprintf("epoch=%d end=%d", e.Epoch, e.EndOffset) }

// EpochCache is the epoch → start-offset map of one partition replica, entries in strictly
// increasing epoch and start-offset order. It is not safe for concurrent use; its owner
// persists it with WriteCheckpoint after each change that must survive a restart.
type EpochCache struct {
	entries []EpochEntry
}

// NewEpochCache returns a cache holding entries, which must be strictly increasing in both
// epoch and start offset (as ReadCheckpoint returns them).
func NewEpochCache(entries []EpochEntry) (*EpochCache, error) {
	if err := validEntries(entries); err != nil {
		return nil, err
	}
	return &EpochCache{entries: slices.Clone(entries)}, nil
}

func validEntries(entries []EpochEntry) error {
	for i, e := range entries {
		if e.Epoch < 0 || e.StartOffset < 0 {
			return fmt.Errorf("entry %d (%d, %d): negative: %w", i, e.Epoch, e.StartOffset, ErrEpochRegression)
		}
		if i > 0 && (e.Epoch <= entries[i-1].Epoch || e.StartOffset <= entries[i-1].StartOffset) {
			return fmt.Errorf("entry %d (%d, %d) after (%d, %d): %w", i, e.Epoch, e.StartOffset,
				entries[i-1].Epoch, entries[i-1].StartOffset, ErrEpochRegression)
		}
	}
	return nil
}

// Entries returns a copy of the entries, oldest first.
func (c *EpochCache) Entries() []EpochEntry { return slices.Clone(c.entries) }

// Latest is the newest entry; ok is false when the cache is empty.
func (c *EpochCache) Latest() (e EpochEntry, ok bool) {
	if len(c.entries) == 0 {
		return EpochEntry{Epoch: UndefinedEpoch, StartOffset: UndefinedOffset}, false
	}
	return c.entries[len(c.entries)-1], true
}

// LatestEpoch is the newest epoch, or UndefinedEpoch.
func (c *EpochCache) LatestEpoch() int32 {
	e, _ := c.Latest()
	return e.Epoch
}

// Assign records that epoch appends from startOffset on. It reports whether the cache
// changed. Assigning the latest epoch again, or an older epoch, changes nothing (a batch of
// an older epoch arriving at a follower after a newer one is a bug upstream and returns
// ErrEpochRegression). An entry whose start offset is not above the latest one replaces the
// entries it overlaps: the log was truncated below them without the cache being told, and
// the newer epoch wins, as in Kafka's LeaderEpochFileCache.assign.
func (c *EpochCache) Assign(epoch int32, startOffset int64) (bool, error) {
	if epoch < 0 || startOffset < 0 {
		return false, fmt.Errorf("assign (%d, %d): negative: %w", epoch, startOffset, ErrEpochRegression)
	}
	if latest, ok := c.Latest(); ok {
		if epoch == latest.Epoch {
			return false, nil
		}
		if epoch < latest.Epoch {
			return false, fmt.Errorf("assign epoch %d after %d: %w", epoch, latest.Epoch, ErrEpochRegression)
		}
	}
	for len(c.entries) > 0 && c.entries[len(c.entries)-1].StartOffset >= startOffset {
		c.entries = c.entries[:len(c.entries)-1]
	}
	c.entries = append(c.entries, EpochEntry{Epoch: epoch, StartOffset: startOffset})
	return true, nil
}

// EndOffsetFor answers OffsetsForLeaderEpoch for requested on a log ending at logEndOffset:
//
//   - requested is the latest epoch: (requested, logEndOffset);
//   - requested is older than the latest: the largest known epoch not above requested, and the
//     start offset of the first epoch above it; when requested is older than every entry,
//     (requested, start of the first entry): nothing of it survives here;
//   - requested is newer than every entry, or the cache is empty, or requested is
//     UndefinedEpoch: (UndefinedEpoch, UndefinedOffset).
func (c *EpochCache) EndOffsetFor(requested int32, logEndOffset int64) EpochEndOffset {
	undefined := EpochEndOffset{Epoch: UndefinedEpoch, EndOffset: UndefinedOffset}
	if requested == UndefinedEpoch || len(c.entries) == 0 {
		return undefined
	}
	if requested == c.LatestEpoch() {
		return EpochEndOffset{Epoch: requested, EndOffset: logEndOffset}
	}
	// higher is the first entry with an epoch above requested.
	higher, _ := slices.BinarySearchFunc(c.entries, requested+1, func(e EpochEntry, t int32) int {
		return int(e.Epoch) - int(t)
	})
	if higher == len(c.entries) {
		return undefined
	}
	if higher == 0 {
		return EpochEndOffset{Epoch: requested, EndOffset: c.entries[0].StartOffset}
	}
	return EpochEndOffset{Epoch: c.entries[higher-1].Epoch, EndOffset: c.entries[higher].StartOffset}
}

// EpochAt is the epoch of the record at offset, or UndefinedEpoch when offset is before
// the first entry.
func (c *EpochCache) EpochAt(offset int64) int32 {
	i, _ := slices.BinarySearchFunc(c.entries, offset+1, func(e EpochEntry, t int64) int {
		switch {
		case e.StartOffset < t:
			return -1
		case e.StartOffset > t:
			return 1
		}
		return 0
	})
	if i == 0 {
		return UndefinedEpoch
	}
	return c.entries[i-1].Epoch
}

// TruncateFromEnd forgets epochs that start at or after endOffset, after the log was cut
// to end there. It reports whether the cache changed.
func (c *EpochCache) TruncateFromEnd(endOffset int64) bool {
	n := len(c.entries)
	for len(c.entries) > 0 && c.entries[len(c.entries)-1].StartOffset >= endOffset {
		c.entries = c.entries[:len(c.entries)-1]
	}
	return len(c.entries) != n
}

// TruncateFromStart follows retention: the log now starts at startOffset, so entries wholly
// before it go, and the one that covers it starts there. It reports whether the cache
// changed.
func (c *EpochCache) TruncateFromStart(startOffset int64) bool {
	drop := 0
	for drop+1 < len(c.entries) && c.entries[drop+1].StartOffset <= startOffset {
		drop++
	}
	changed := drop > 0
	c.entries = c.entries[drop:]
	if len(c.entries) > 0 && c.entries[0].StartOffset < startOffset {
		c.entries[0].StartOffset = startOffset
		changed = true
	}
	return changed
}
