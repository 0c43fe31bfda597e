package engine

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
)

// On-disk index formats. These constants are part of the file format and must not change.
//
// .index — sparse offset index, one entry per IndexIntervalBytes of log, big-endian,
// entries strictly increasing in both fields (same layout as Kafka's offset index):
//
//	+----------------------+----------------------+
//	| relativeOffset  u32  | position        u32  |   8 bytes per entry
//	+----------------------+----------------------+
//	relativeOffset = batch base offset - segment base offset
//	position       = byte position of that batch in the .log file
//
// .timeindex — sparse time index, written at the same points as .index but only when the
// segment's maximum timestamp grew, big-endian, strictly increasing timestamps:
//
//	+---------------------------------------------+----------------------+
//	| timestamp                              i64  | relativeOffset  u32  |   12 bytes per entry
//	+---------------------------------------------+----------------------+
//	timestamp      = largest MaxTimestamp of all batches before relativeOffset
//	relativeOffset = base offset of the next batch - segment base offset
//
// So every batch before relativeOffset has timestamps <= timestamp: a lookup for the first
// record at or after T starts at the last entry with timestamp < T. When a segment is
// closed, one final entry (segment max timestamp, next offset - base) is appended, so the
// last entry of a closed segment carries its maximum timestamp.
//
// Index files are written only for log bytes that are already fdatasync'ed (the last
// entry is the recovery point) and never preallocated: file length = entries x entry size.
const (
	indexEntryBytes     = 8
	timeIndexEntryBytes = 12
)

// errIndexCorrupt marks an index file that fails its sanity checks; the segment's index is
// then rebuilt from the log.
var errIndexCorrupt = errors.New("index corrupt")

type indexEntry struct {
	relativeOffset uint32
	position       uint32
}

type timeIndexEntry struct {
	timestamp      int64
	relativeOffset uint32
}

// offsetIndex is the in-memory copy of a segment's .index; entries[:onDisk] are in the file.
// Owned by the log's goroutine.
type offsetIndex struct {
	entries []indexEntry
	onDisk  int
}

type timeIndex struct {
	entries []timeIndexEntry
	onDisk  int
}

// decodeIndex parses and sanity-checks a .index file against its log's size. It never
// allocates more than len(b) implies.
func decodeIndex(b []byte, logSize int64) ([]indexEntry, error) {
	if len(b)%indexEntryBytes != 0 {
		return nil, fmt.Errorf("%w: length %d not a multiple of %d", errIndexCorrupt, len(b), indexEntryBytes)
	}
	entries := make([]indexEntry, 0, len(b)/indexEntryBytes)
	for i := 0; i < len(b); i += indexEntryBytes {
		e := indexEntry{
			relativeOffset: binary.BigEndian.Uint32(b[i:]),
			position:       binary.BigEndian.Uint32(b[i+4:]),
		}
		if int64(e.position) >= logSize {
			return nil, fmt.Errorf("%w: entry %d position %d beyond log size %d", errIndexCorrupt, len(entries), e.position, logSize)
		}
		if n := len(entries); n > 0 {
			prev := entries[n-1]
			if e.relativeOffset <= prev.relativeOffset || e.position <= prev.position {
				return nil, fmt.Errorf("%w: entry %d (%d,%d) not after (%d,%d)", errIndexCorrupt, n,
					e.relativeOffset, e.position, prev.relativeOffset, prev.position)
			}
		}
		entries = append(entries, e)
	}
	return entries, nil
}

func appendIndexEntries(dst []byte, entries []indexEntry) []byte {
	for _, e := range entries {
		dst = binary.BigEndian.AppendUint32(dst, e.relativeOffset)
		dst = binary.BigEndian.AppendUint32(dst, e.position)
	}
	return dst
}

// decodeTimeIndex parses and sanity-checks a .timeindex file. relativeEnd bounds the
// relative offsets (next offset - base of the segment).
func decodeTimeIndex(b []byte, relativeEnd int64) ([]timeIndexEntry, error) {
	if len(b)%timeIndexEntryBytes != 0 {
		return nil, fmt.Errorf("%w: time index length %d not a multiple of %d", errIndexCorrupt, len(b), timeIndexEntryBytes)
	}
	entries := make([]timeIndexEntry, 0, len(b)/timeIndexEntryBytes)
	for i := 0; i < len(b); i += timeIndexEntryBytes {
		e := timeIndexEntry{
			timestamp:      int64(binary.BigEndian.Uint64(b[i:])),
			relativeOffset: binary.BigEndian.Uint32(b[i+8:]),
		}
		if int64(e.relativeOffset) > relativeEnd {
			return nil, fmt.Errorf("%w: time entry %d offset %d beyond segment end %d", errIndexCorrupt, len(entries), e.relativeOffset, relativeEnd)
		}
		if n := len(entries); n > 0 {
			prev := entries[n-1]
			if e.timestamp <= prev.timestamp || e.relativeOffset < prev.relativeOffset {
				return nil, fmt.Errorf("%w: time entry %d (%d,%d) not after (%d,%d)", errIndexCorrupt, n,
					e.timestamp, e.relativeOffset, prev.timestamp, prev.relativeOffset)
			}
		}
		entries = append(entries, e)
	}
	return entries, nil
}

func appendTimeIndexEntries(dst []byte, entries []timeIndexEntry) []byte {
	for _, e := range entries {
		dst = binary.BigEndian.AppendUint64(dst, uint64(e.timestamp))
		dst = binary.BigEndian.AppendUint32(dst, e.relativeOffset)
	}
	return dst
}

// floorIndexByOffset is the index in entries of the last entry with relativeOffset <= rel,
// or -1 when none: the start of the segment is then the place to begin a scan.
func (x *offsetIndex) floorIndexByOffset(rel uint32) int {
	return sort.Search(len(x.entries), func(i int) bool { return x.entries[i].relativeOffset > rel }) - 1
}

// floorIndexByPosition is the index in entries of the last entry with position <= pos, or -1.
func (x *offsetIndex) floorIndexByPosition(pos uint32) int {
	return sort.Search(len(x.entries), func(i int) bool { return x.entries[i].position > pos }) - 1
}

// truncateAtPosition drops entries at or beyond pos.
func (x *offsetIndex) truncateAtPosition(pos int64) {
	i := sort.Search(len(x.entries), func(i int) bool { return int64(x.entries[i].position) >= pos })
	x.entries = x.entries[:i]
	x.onDisk = min(x.onDisk, i)
}

func (x *offsetIndex) last() (indexEntry, bool) {
	if len(x.entries) == 0 {
		return indexEntry{}, false
	}
	return x.entries[len(x.entries)-1], true
}

// lowerBound returns the relative offset of the last entry with timestamp < ts: every batch
// before it is older than ts. 0 when none.
func (x *timeIndex) lowerBound(ts int64) uint32 {
	i := sort.Search(len(x.entries), func(i int) bool { return x.entries[i].timestamp >= ts })
	if i == 0 {
		return 0
	}
	return x.entries[i-1].relativeOffset
}

// truncateAtOffset drops entries whose relative offset is beyond relativeEnd.
func (x *timeIndex) truncateAtOffset(relativeEnd int64) {
	i := sort.Search(len(x.entries), func(i int) bool { return int64(x.entries[i].relativeOffset) > relativeEnd })
	x.entries = x.entries[:i]
	x.onDisk = min(x.onDisk, i)
}

func (x *timeIndex) lastTimestamp() int64 {
	if len(x.entries) == 0 {
		return noTimestamp
	}
	return x.entries[len(x.entries)-1].timestamp
}

// noTimestamp is Kafka's "no timestamp" value.
const noTimestamp = -1
