package group

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/ringlog/ringlog/engine"
	"github.com/ringlog/ringlog/engine/batch"
)

// TopicPartition names one partition of a consumed topic.
type TopicPartition struct {
	Topic     string
	Partition int32
}

// LoadedGroup is what the records of one group say after replay.
type LoadedGroup struct {
	// Metadata is the newest group metadata; nil when there is none or it was deleted.
	Metadata *GroupValue
	// Offsets are the newest committed offsets that were not deleted.
	Offsets map[TopicPartition]OffsetValue
}

// Snapshot is the state replayed from one __consumer_offsets partition.
type Snapshot struct {
	Groups map[string]*LoadedGroup
	// Records counts the records applied; Skipped those whose key version names a record
	// type this coordinator does not serve (Kafka's consumer-protocol records, KIP-848).
	Records, Skipped int
	// NextOffset is one past the last offset replayed (0 when nothing was).
	NextOffset int64
}

// GroupIDs returns the groups of the snapshot, sorted.
func (s *Snapshot) GroupIDs() []string { return slices.Sorted(maps.Keys(s.Groups)) }

// Replayer rebuilds group state from the records of a __consumer_offsets partition, read in
// offset order — as a compacted partition is read back, so any subset of superseded
// records may be missing: the newest record per key wins, and a tombstone (nil value)
// deletes its key. Replaying the same records again, or a compacted subset of them that
// keeps every key's newest record, gives the same Snapshot.
type Replayer struct {
	snap Snapshot
}

// NewReplayer returns a Replayer with an empty snapshot.
func NewReplayer() *Replayer {
	return &Replayer{snap: Snapshot{Groups: map[string]*LoadedGroup{}}}
}

func (r *Replayer) group(id string) *LoadedGroup {
	g := r.snap.Groups[id]
	if g == nil {
		g = &LoadedGroup{Offsets: map[TopicPartition]OffsetValue{}}
		r.snap.Groups[id] = g
	}
	return g
}

// Apply replays one record. An unknown key version is counted in Skipped; a key or value
// that does not decode is an error (and the record is not applied).
func (r *Replayer) Apply(rec Record) error {
	key, err := DecodeKey(rec.Key)
	if errors.Is(err, ErrUnsupportedVersion) {
		r.snap.Skipped++
		return nil
	}
	if err != nil {
		return err
	}
	switch key.Kind {
	case KeyOffset:
		tp := TopicPartition{key.Topic, key.Partition}
		if rec.Value == nil {
			if g := r.snap.Groups[key.Group]; g != nil {
				delete(g.Offsets, tp)
				r.dropIfEmpty(key.Group)
			}
			break
		}
		v, err := DecodeOffsetValue(rec.Value)
		if err != nil {
			return fmt.Errorf("group %q %s/%d: %w", key.Group, key.Topic, key.Partition, err)
		}
		r.group(key.Group).Offsets[tp] = v
	case KeyGroup:
		if rec.Value == nil {
			if g := r.snap.Groups[key.Group]; g != nil {
				g.Metadata = nil
				r.dropIfEmpty(key.Group)
			}
			break
		}
		v, err := DecodeGroupValue(rec.Value)
		if err != nil {
			return fmt.Errorf("group %q: %w", key.Group, err)
		}
		r.group(key.Group).Metadata = &v
	}
	r.snap.Records++
	return nil
}

func (r *Replayer) dropIfEmpty(id string) {
	if g := r.snap.Groups[id]; g.Metadata == nil && len(g.Offsets) == 0 {
		delete(r.snap.Groups, id)
	}
}

// ApplyBatch replays every record of one stored batch.
func (r *Replayer) ApplyBatch(b []byte) error {
	return DecodeBatch(b, func(offset int64, rec Record) error {
		if err := r.Apply(rec); err != nil {
			return fmt.Errorf("offset %d: %w", offset, err)
		}
		r.snap.NextOffset = offset + 1
		return nil
	})
}

// ApplyBatches replays concatenated stored batches (what a log read returns).
func (r *Replayer) ApplyBatches(b []byte) error {
	for len(b) > 0 {
		h, err := batch.ParseHeader(b)
		if err != nil {
			return fmt.Errorf("__consumer_offsets batch after offset %d: %w", r.snap.NextOffset, err)
		}
		if h.Size() > len(b) {
			return fmt.Errorf("__consumer_offsets batch at offset %d: %w: %d of %d bytes", h.BaseOffset, batch.ErrLength, len(b), h.Size())
		}
		if err := r.ApplyBatch(b[:h.Size()]); err != nil {
			return err
		}
		r.snap.NextOffset = max(r.snap.NextOffset, h.LastOffset()+1)
		b = b[h.Size():]
	}
	return nil
}

// replayReadBytesMax bounds one read of ReplayLog (a read returns at least one whole batch,
// so a larger batch is still read whole).
const replayReadBytesMax = 1 << 20

// ReplayLog replays a __consumer_offsets partition's log from its start to its end, on the
// log's goroutine. The coordinator's driver calls it when the partition opens here.
func ReplayLog(l *engine.Log) (*Snapshot, error) {
	r := NewReplayer()
	var buf []byte
	for offset := l.StartOffset(); offset < l.EndOffset(); {
		res, err := l.Read(offset, replayReadBytesMax)
		if err != nil {
			return nil, fmt.Errorf("replay %s at %d: %w", l.Dir(), offset, err)
		}
		if res.NextOffset <= offset {
			return nil, fmt.Errorf("replay %s: no progress at offset %d", l.Dir(), offset)
		}
		if buf, err = res.AppendTo(buf[:0]); err != nil {
			return nil, fmt.Errorf("replay %s: %w", l.Dir(), err)
		}
		if err := r.ApplyBatches(buf); err != nil {
			return nil, fmt.Errorf("replay %s: %w", l.Dir(), err)
		}
		offset = res.NextOffset
	}
	return r.Snapshot(), nil
}

// Snapshot returns the state replayed so far. The Replayer must not be used afterwards.
func (r *Replayer) Snapshot() *Snapshot { return &r.snap }

// Rebuild replays stored batches of one __consumer_offsets partition, in offset order.
func Rebuild(batches [][]byte) (*Snapshot, error) {
	r := NewReplayer()
	for i, b := range batches {
		if err := r.ApplyBatch(b); err != nil {
			return nil, fmt.Errorf("rebuild: batch %d: %w", i, err)
		}
	}
	return r.Snapshot(), nil
}
