package engine

import (
	"errors"
	"fmt"
	"sort"

	"github.com/ringlog/ringlog/engine/batch"
)

// Scrubbing: finding corruption in sealed segments before a consumer does.
//
// Recovery re-checks each segment only from its last index entry (a sealed segment's bad
// batch found there is recorded here too, not cut); before that, sealed segments are trusted
// by their index, and a fetch hands their bytes to the socket without reading them. A flipped bit in
// the middle of an old segment would otherwise surface only as a CRC error in some
// consumer, which could do nothing about it. Scrub walks sealed segments batch by batch
// (CRC-32C, header, offsets continuing), a bounded number of bytes per call so that the
// owner can throttle it, and records what it finds:
//
//   - the log keeps a list of Corruption (logged once, counted, shown by Corruptions and in
//     the broker's topic describe);
//   - a read whose range reaches a known bad batch stops before it, and a read that starts
//     at it fails with ErrCorruptBatch naming the offset and the next readable offset, which
//     a consumer can act on (seek past it) and an operator can repair (truncate to the bad
//     offset, or delete records before the next readable one).
//
// After a bad batch the rest of its segment is not trusted (its length field may be the
// damaged part): the scrubber resumes at the next segment, and Corruption.NextOffset is
// that segment's base offset.

// ErrCorruptBatch: a read reached a stored batch that failed verification. It always comes
// wrapped together with ErrCorruptLog; the message names the offset and the next readable
// offset.
var ErrCorruptBatch = errors.New("corrupt stored batch")

// Corruption is one bad batch found in a sealed segment, by the scrubber or by recovery's
// re-scan of the segment's tail (see recover in recovery.go).
type Corruption struct {
	Segment    int64  // base offset of the segment file
	Position   int64  // byte position of the bad batch in the segment (its size: bytes missing)
	Offset     int64  // first offset the bad batch holds (the one after the last good batch)
	NextOffset int64  // first offset known readable after it (the next segment's base)
	Reason     string // what failed (crc mismatch, bad header, offsets out of order, read error)
}

func (c Corruption) String() string {
	return fmt.Sprintf("segment %020d position %d: offsets [%d, %d) unreadable: %s", c.Segment, c.Position, c.Offset, c.NextOffset, c.Reason)
}

// ScrubProgress reports one Scrub call.
type ScrubProgress struct {
	BytesVerified int64 // batch bytes read and checked by this call
	Found         int   // new corruptions found by this call
	PassComplete  bool  // the call reached the end of the sealed segments (the next starts over)
}

// scrubCursor is where the next Scrub continues. Owned by the log's goroutine.
type scrubCursor struct {
	segment  int64 // base offset of the segment being verified; -1: start over
	position int64 // next batch position in it
	expected int64 // offset the next batch must start at or after
	scratch  []byte
	passes   int64 // completed passes over all sealed segments
}

// Corruptions returns the known bad batches that are still in the log (truncation,
// retention and DeleteRecordsBefore drop the ones they remove), oldest first.
func (l *Log) Corruptions() []Corruption {
	l.pruneCorruptions()
	return append([]Corruption(nil), l.corruptions...)
}

// ScrubPasses is the number of completed verification passes over the sealed segments.
func (l *Log) ScrubPasses() int64 { return l.scrub.passes }

// VerifySealed verifies every sealed segment now (ringlogd --verify-segments): a whole
// Scrub pass, whatever it costs.
func (l *Log) VerifySealed() (ScrubProgress, error) {
	l.scrub.segment = -1
	var total ScrubProgress
	for {
		p, err := l.Scrub(segmentBytesMax)
		total.BytesVerified += p.BytesVerified
		total.Found += p.Found
		if err != nil || p.PassComplete {
			total.PassComplete = p.PassComplete
			return total, err
		}
	}
}

// Scrub verifies up to budgetBytes of sealed segments from where the last call stopped
// (at least one batch per call), and records any bad batch it finds (see Corruption). It
// returns an error only when the log is closed; what it finds is not an error of the call.
func (l *Log) Scrub(budgetBytes int64) (ScrubProgress, error) {
	var p ScrubProgress
	if l.closed {
		return p, ErrClosed
	}
	c := &l.scrub
	for p.BytesVerified < budgetBytes || p.BytesVerified == 0 {
		i := l.scrubSegmentIndex()
		if i < 0 {
			c.segment = -1
			c.passes++
			p.PassComplete = true
			return p, nil
		}
		s := l.segments[i]
		if c.position >= s.size {
			c.segment, c.position, c.expected = l.segments[i+1].baseOffset, 0, l.segments[i+1].baseOffset
			continue
		}
		size, bad := l.verifyBatchAt(s, c.position, c.expected)
		p.BytesVerified += max(size, batch.HeaderSize)
		if bad != "" {
			if l.recordCorruption(Corruption{Segment: s.baseOffset, Position: c.position, Offset: c.expected,
				NextOffset: s.nextOffset, Reason: bad}) {
				p.Found++
			}
			c.position = s.size // the rest of this segment is not trusted
			continue
		}
		c.position += size
	}
	return p, nil
}

// scrubSegmentIndex returns the index of the sealed segment the cursor is in (moving it to
// the next surviving segment when retention removed its own), or -1 at the end of a pass.
func (l *Log) scrubSegmentIndex() int {
	c := &l.scrub
	sealed := len(l.segments) - 1 // the active segment is recovery's business
	if c.segment < 0 {
		if sealed == 0 {
			return -1
		}
		c.segment, c.position, c.expected = l.segments[0].baseOffset, 0, l.segments[0].baseOffset
	}
	i := sort.Search(sealed, func(i int) bool { return l.segments[i].baseOffset >= c.segment })
	if i >= sealed {
		return -1
	}
	if l.segments[i].baseOffset != c.segment { // c.segment was deleted: start the next one
		c.segment, c.position, c.expected = l.segments[i].baseOffset, 0, l.segments[i].baseOffset
	}
	return i
}

// verifyBatchAt reads and checks the batch at pos of sealed segment s. It returns the
// batch size and "" when good, or a reason.
func (l *Log) verifyBatchAt(s *segment, pos, expected int64) (int64, string) {
	if pos+batch.HeaderSize > s.size {
		return 0, fmt.Sprintf("%d trailing bytes, less than a batch header", s.size-pos)
	}
	var header [batch.HeaderSize]byte
	if err := s.readAt(l.fio, header[:], pos); err != nil {
		return 0, fmt.Sprintf("read error: %v", err)
	}
	h, err := batch.ParseHeader(header[:])
	if err != nil {
		return 0, fmt.Sprintf("bad header: %v", err)
	}
	size := batchSize(h)
	if pos+size > s.size {
		return 0, fmt.Sprintf("batch of %d bytes runs past the segment end %d", size, s.size)
	}
	if h.BaseOffset < expected || h.LastOffset() >= s.nextOffset {
		return size, fmt.Sprintf("batch offsets [%d, %d] out of order (expected from %d, segment ends at %d)", h.BaseOffset, h.LastOffset(), expected, s.nextOffset)
	}
	if int64(cap(l.scrub.scratch)) < size {
		l.scrub.scratch = make([]byte, size)
	}
	b := l.scrub.scratch[:size]
	if err := s.readAt(l.fio, b, pos); err != nil {
		return size, fmt.Sprintf("read error: %v", err)
	}
	if _, err := batch.ValidateStored(b); err != nil {
		return size, err.Error()
	}
	l.scrub.expected = h.LastOffset() + 1
	if int64(cap(l.scrub.scratch)) > scrubScratchBytesMax {
		l.scrub.scratch = nil // one huge batch must not pin its buffer
	}
	return size, ""
}

// scrubScratchBytesMax bounds the read buffer a log keeps between Scrub calls.
const scrubScratchBytesMax = 1 << 20

// recordCorruption adds c unless already known, logging it; it reports whether c is new.
func (l *Log) recordCorruption(c Corruption) bool {
	for _, known := range l.corruptions {
		if known.Segment == c.Segment && known.Position == c.Position {
			return false
		}
	}
	l.corruptions = append(l.corruptions, c)
	sort.Slice(l.corruptions, func(i, j int) bool { return l.corruptions[i].Offset < l.corruptions[j].Offset })
	l.cfg.Logger.Error("corrupt batch in sealed segment; reads stop before it",
		"dir", l.dir, "segment", c.Segment, "position", c.Position, "offset", c.Offset,
		"next_readable_offset", c.NextOffset, "reason", c.Reason)
	return true
}

// pruneCorruptions drops corruptions whose segment or offsets are no longer in the log.
func (l *Log) pruneCorruptions() {
	live := l.corruptions[:0]
	for _, c := range l.corruptions {
		i := l.segmentFor(c.Offset)
		s := l.segments[i]
		// Position == size: recovery found the file ending short of the next segment.
		if s.baseOffset == c.Segment && c.Position <= s.size && c.Offset < s.nextOffset && c.NextOffset > l.startOffset {
			live = append(live, c)
		}
	}
	clear(l.corruptions[len(live):])
	l.corruptions = live
}

// fenceFor returns the first known bad batch of segment s, if any: reads of s stop at its
// position, and no offset from its Offset to the segment's end is served (the rest of the
// segment is not trusted). The caller has pruned l.corruptions.
func (l *Log) fenceFor(s *segment) (Corruption, bool) {
	for _, c := range l.corruptions { // by offset, so the first of s is its lowest position
		if c.Segment == s.baseOffset {
			return c, true
		}
	}
	return Corruption{}, false
}

// corruptReadError is what a read that starts at a bad batch returns.
func (l *Log) corruptReadError(c Corruption) error {
	return fmt.Errorf("%w: %w: offsets [%d, %d) of %s are unreadable (%s); the next readable offset is %d",
		ErrCorruptLog, ErrCorruptBatch, c.Offset, c.NextOffset, l.dir, c.Reason, c.NextOffset)
}
