package engine

import (
	"errors"
	"fmt"
)

// Sealed segments' indexes are not all kept in memory: a 1 GiB segment's .index holds ~262 k
// entries (2 MiB), so a partition with hundreds of segments would pin hundreds of MiB. Once
// every entry of a sealed segment is in its files, the in-memory copy is dropped and reloaded
// on the next lookup; at most sealedIndexesLoadedMax sealed segments per log stay loaded
// (least recently loaded dropped first). The active segment's index always stays in memory.
const sealedIndexesLoadedMax = 8

// releaseIndex drops the in-memory index of sealed segment s, and closes its index files,
// when its files hold every entry.
func (l *Log) releaseIndex(s *segment) {
	if s == l.active() || s.indexReleased ||
		s.index.onDisk != len(s.index.entries) || s.timeIndex.onDisk != len(s.timeIndex.entries) {
		return
	}
	s.index.entries, s.timeIndex.entries = nil, nil
	s.indexReleased = true
	l.forgetLoaded(s)
	if err := s.closeIndexFiles(); err != nil { // written out: nothing more to write
		l.cfg.Logger.Warn("close index files", "dir", l.dir, "segment", s.baseOffset, "err", err)
	}
}

func (l *Log) forgetLoaded(s *segment) {
	for i, x := range l.loadedIndexes {
		if x == s {
			l.loadedIndexes = append(l.loadedIndexes[:i], l.loadedIndexes[i+1:]...)
			return
		}
	}
}

// ensureIndex reloads a released index (checked again: it was valid when released, so a
// failure now is damage to the file) and evicts the oldest loaded one beyond the limit.
func (l *Log) ensureIndex(s *segment) error {
	if !s.indexReleased {
		return nil
	}
	err := l.loadIndexes(s, s.nextOffset-s.baseOffset, s.size)
	if s != l.active() {
		err = errors.Join(err, s.closeIndexFiles()) // a sealed segment's files are only read here
	}
	if err != nil {
		return fmt.Errorf("segment %d: reload index: %w: %w", s.baseOffset, ErrCorruptLog, err)
	}
	s.indexReleased = false
	l.loadedIndexes = append(l.loadedIndexes, s)
	for i := 0; len(l.loadedIndexes) > sealedIndexesLoadedMax && i < len(l.loadedIndexes); {
		victim := l.loadedIndexes[i]
		if victim == s || victim == l.active() {
			i++
			continue
		}
		l.releaseIndex(victim) // removes it from loadedIndexes
	}
	return nil
}
