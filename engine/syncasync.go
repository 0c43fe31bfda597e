package engine

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// SyncTicket is one asynchronous sync in progress: what it covers and the descriptors the
// owner must fdatasync. See BeginSync.
type SyncTicket struct {
	// Fds are the descriptors to fdatasync, oldest segment first, then a roll's producer
	// snapshot and the directory. From BeginSync they are duplicates that stay valid
	// whatever the log does meanwhile (retention may close the originals); EndSync closes
	// them. From BeginSyncInline the first Borrowed are the segments' own descriptors,
	// which EndSync leaves open.
	Fds []int
	// Borrowed is how many of Fds, from the first, belong to the log (BeginSyncInline).
	Borrowed int

	covers []syncedPoint
	dirGen uint64 // the roll count the directory fsync in Fds covers (0: none in Fds)
	dirSeq uint64 // the directory fsync's number (dirsync.go)
	// snapshot is the producer snapshot whose file Fds includes (-1: none).
	snapshot int64
	// Offset is the log end offset the sync covers: once EndSync succeeds, SyncedOffset is
	// at least this.
	Offset int64
}

type syncedPoint struct {
	s          *segment
	size       int64
	nextOffset int64
	sealed     bool
}

// BeginSync starts a sync of everything appended so far, for an owner that issues the
// fdatasyncs itself — on its ring, concurrently with other partitions' syncs and with later
// appends to this log (the pipelined group commit). ok is false when nothing is unsynced.
// The owner fdatasyncs every descriptor in t.Fds and then calls EndSync(t, firstErr) exactly
// once. Appends made after BeginSync are not covered by t.
func (l *Log) BeginSync() (t SyncTicket, ok bool, err error) { return l.beginSync(false) }

// BeginSyncInline is BeginSync for an owner that fdatasyncs t.Fds at once, on the log's
// own goroutine, and calls EndSync before anything else touches the log (engine/shard's
// inline sync of a quiet loop): the segments' descriptors are used as they are, without a
// duplicate and its close per sync. Only what BeginSync opens for the ticket (a roll's
// producer snapshot, the directory) is closed by EndSync.
func (l *Log) BeginSyncInline() (t SyncTicket, ok bool, err error) { return l.beginSync(true) }

func (l *Log) beginSync(borrow bool) (t SyncTicket, ok bool, err error) {
	if err := l.writable(); err != nil {
		return t, false, err
	}
	// The arrays of the last ticket EndSync finished (one sync runs at a time per log; a
	// second BeginSync before EndSync allocates its own).
	t.covers, t.Fds = l.syncCoversSpare, l.syncFdsSpare
	l.syncCoversSpare, l.syncFdsSpare = nil, nil
	s := l.active()
	for _, u := range l.unsyncedSegments {
		if u.direct != nil && u.direct.pending() {
			// A roll left its writes in flight (asyncwrite.go, "Rolls"): cover what completed,
			// and nothing after it (the written end is inside it). It stays unsynced.
			s = u
			break
		}
		t.covers = append(t.covers, syncedPoint{s: u, size: u.size, nextOffset: u.nextOffset, sealed: true})
	}
	size, next := s.size, s.nextOffset
	if s.direct != nil && s.direct.pending() {
		// Asynchronous writes in flight (asyncwrite.go): cover only what completed.
		size, next = s.direct.writtenPos, l.writtenNext
	}
	if l.staged.pending() { // staged page-cache appends (stagedwrite.go): only what is written
		size, next = l.staged.pos, l.writtenNext
	}
	if s.syncedSize != size || s.syncedNextOffset != next {
		t.covers = append(t.covers, syncedPoint{s: s, size: size, nextOffset: next})
	}
	if len(t.covers) == 0 && l.dirGen == l.dirSyncedGen {
		l.keepTicketArrays(t)
		return SyncTicket{}, false, nil
	}
	for _, c := range t.covers {
		if borrow {
			t.Fds = append(t.Fds, c.s.logFd())
			t.Borrowed++
			continue
		}
		fd, err := unix.FcntlInt(uintptr(c.s.logFd()), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			closeFds(t.Fds)
			return SyncTicket{}, false, fmt.Errorf("begin sync: dup segment %d: %w", c.s.baseOffset, err)
		}
		l.syncDups++
		t.Fds = append(t.Fds, fd)
	}
	t.snapshot = -1
	if fd, offset, err := l.openUnsyncedSnapshot(); err != nil || fd >= 0 {
		if err != nil {
			closeFds(t.Fds[t.Borrowed:])
			return SyncTicket{}, false, fmt.Errorf("begin sync: %w", err)
		}
		t.Fds = append(t.Fds, fd) // a roll's producer snapshot (producersnapshot.go)
		t.snapshot = offset
	}
	if l.dirGen > l.dirSyncedGen {
		// New segment files since the last directory sync: their entries must be durable
		// before their bytes count as synced.
		fd, err := unix.Open(l.dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			closeFds(t.Fds[t.Borrowed:])
			return SyncTicket{}, false, fmt.Errorf("begin sync: open %s: %w", l.dir, err)
		}
		t.Fds = append(t.Fds, fd)
		t.dirGen, t.dirSeq = l.dirGen, l.dirs.start()
	}
	noteSyncs(syncSegmentData, len(t.covers))
	if t.snapshot >= 0 {
		noteSyncs(syncSnapshot, 1)
	}
	if t.dirGen > 0 {
		noteSyncs(syncSegmentDir, 1)
	}
	t.Offset = l.EndOffset()
	return t, true, nil
}

// SyncDups is the number of segment descriptors BeginSync has duplicated for this log since
// it was opened (one per segment per asynchronous sync; BeginSyncInline makes none). Owner
// goroutine.
func (l *Log) SyncDups() uint64 { return l.syncDups }

func closeFds(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// EndSync completes t. A non-nil syncErr (the first fdatasync failure) fails the log for
// good, as a failed Sync does. Otherwise the covered bytes count as synced, sealed segments
// covered leave the unsynced list, and their index entries are persisted.
func (l *Log) EndSync(t SyncTicket, syncErr error) error {
	closeFds(t.Fds[t.Borrowed:])
	defer l.keepTicketArrays(t)
	if syncErr != nil {
		return l.fail(fmt.Errorf("fdatasync: %w", syncErr))
	}
	if l.closed || l.failed != nil {
		return l.failed
	}
	l.dirSyncedGen = max(l.dirSyncedGen, t.dirGen)
	if t.dirGen > 0 {
		l.dirs.done(t.dirSeq)
	}
	for _, c := range t.covers {
		s := c.s
		// Only ever raise the synced marks; a truncation meanwhile may have cut s below them.
		if size := min(c.size, s.size); size > s.syncedSize {
			s.syncedSize = size
		}
		if next := min(c.nextOffset, s.nextOffset); next > s.syncedNextOffset {
			s.syncedNextOffset = next
		}
		if c.sealed && l.forgetUnsyncedIfPresent(s) {
			s.addFinalTimeEntry()
		}
		var err error
		if l.indexScratch, err = s.persistIndexes(l.fio, l.indexScratch); err != nil {
			l.cfg.Logger.Warn("index write failed", "dir", l.dir, "err", err)
		}
		if c.sealed {
			l.releaseIndex(s) // see indexcache.go; refuses if s became active again
		}
	}
	if t.snapshot >= 0 && t.dirGen > 0 && t.snapshot <= t.Offset {
		// The file, its directory entry and the log up to its offset are durable now.
		l.snapshotDurable(t.snapshot)
	}
	l.unsyncedMessages = max(l.EndOffset()-l.SyncedOffset(), 0)
	if l.unsyncedMessages > 0 {
		l.oldestUnsynced = l.cfg.Clock()
	}
	return nil
}

// forgetUnsyncedIfPresent removes s from the unsynced sealed segments and reports whether it
// was there.
func (l *Log) forgetUnsyncedIfPresent(s *segment) bool {
	for _, u := range l.unsyncedSegments {
		if u == s {
			l.forgetUnsynced(s)
			return true
		}
	}
	return false
}

// keepTicketArrays keeps a finished ticket's arrays for the next BeginSync, so a sync per
// produce (acks=all, flush.always) allocates nothing for them.
func (l *Log) keepTicketArrays(t SyncTicket) {
	clear(t.covers)
	l.syncCoversSpare, l.syncFdsSpare = t.covers[:0], t.Fds[:0]
}
