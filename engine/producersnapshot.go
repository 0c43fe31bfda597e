package engine

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Producer state snapshots. At each segment roll (and at Close) the log writes its producer
// state as it stands at the log end offset to <20-digit offset>.snapshot (temp file, rename;
// the next Sync or BeginSync fdatasyncs the file and the directory with the new segment's). Recovery loads the newest snapshot at or below the recovered end offset and
// reads batch headers from its offset to the end, so start-up reads the headers of the
// active segment only. A snapshot that fails its CRC is deleted and the next older one is
// used; with none, headers are read from the start of the second-to-last segment (as Kafka
// does for logs without snapshots), so producers seen only before that are forgotten.
//
// Snapshot file format, big-endian. It is part of the on-disk format and must not change;
// a new layout takes a new version:
//
//	+-------------+-----------+-----------+--------------+-----------+
//	| magic u32   | version   | crc32c    | offset i64   | count u32 |
//	| "RLPS"      | u16 = 1   | u32       |              |           |
//	+-------------+-----------+-----------+--------------+-----------+
//	then count entries, by increasing producer id:
//	+----------------+-----------+--------------------+-----------+
//	| producerId i64 | epoch i16 | lastTimestamp i64  | batches u8|
//	+----------------+-----------+--------------------+-----------+
//	then batches x
//	+--------------+-------------+------------------+-----------------+
//	| firstSeq i32 | lastSeq i32 | firstOffset i64  | lastOffset i64  |
//	+--------------+-------------+------------------+-----------------+
//
// The CRC-32C covers every byte after the crc field. offset is the log end offset the
// snapshot describes (the file name says it too).
const (
	producerSnapshotSuffix  = ".snapshot"
	producerSnapshotMagic   = 0x524c5053 // "RLPS"
	producerSnapshotVersion = 1
	producerSnapshotHeader  = 4 + 2 + 4 + 8 + 4
	producerEntryBytes      = 8 + 2 + 8 + 1
	producerBatchBytes      = 4 + 4 + 8 + 8
	// producerSnapshotBytesMax bounds a snapshot read at recovery: 64 MiB is ~450 k
	// producers with five batches each, far past any sane partition.
	producerSnapshotBytesMax = 64 << 20
	// producerSnapshotsKept is how many snapshots a log keeps: the newest, and one older to
	// fall back to when the newest is damaged.
	producerSnapshotsKept = 2
	// producerSnapshotsMax bounds the snapshots kept while none is known durable (a log
	// that is never synced, the page-cache default without a flush policy).
	producerSnapshotsMax = 8
)

var producerSnapshotCRC = crc32.MakeTable(crc32.Castagnoli)

var errProducerSnapshotCorrupt = errors.New("producer snapshot corrupt")

func producerSnapshotPath(dir string, offset int64) string {
	return filepath.Join(dir, fmt.Sprintf("%020d%s", offset, producerSnapshotSuffix))
}

// encodeProducerSnapshot serialises ps as of end offset offset.
func encodeProducerSnapshot(ps *producerState, offset int64) []byte {
	return appendProducerSnapshot(nil, ps, offset)
}

// appendProducerSnapshot is encodeProducerSnapshot into dst[:0]'s storage.
func appendProducerSnapshot(dst []byte, ps *producerState, offset int64) []byte {
	ids := ps.ids()
	b := append(dst[:0], make([]byte, producerSnapshotHeader)...)
	binary.BigEndian.PutUint32(b[0:], producerSnapshotMagic)
	binary.BigEndian.PutUint16(b[4:], producerSnapshotVersion)
	binary.BigEndian.PutUint64(b[10:], uint64(offset))
	binary.BigEndian.PutUint32(b[18:], uint32(len(ids)))
	for _, id := range ids {
		e := ps.producers[id]
		b = binary.BigEndian.AppendUint64(b, uint64(id))
		b = binary.BigEndian.AppendUint16(b, uint16(e.epoch))
		b = binary.BigEndian.AppendUint64(b, uint64(e.lastTimestamp))
		b = append(b, byte(len(e.batches)))
		for _, pb := range e.batches {
			b = binary.BigEndian.AppendUint32(b, uint32(pb.firstSeq))
			b = binary.BigEndian.AppendUint32(b, uint32(pb.lastSeq))
			b = binary.BigEndian.AppendUint64(b, uint64(pb.firstOffset))
			b = binary.BigEndian.AppendUint64(b, uint64(pb.lastOffset))
		}
	}
	binary.BigEndian.PutUint32(b[6:], crc32.Checksum(b[10:], producerSnapshotCRC))
	return b
}

// decodeProducerSnapshot parses and checks a snapshot file's bytes.
func decodeProducerSnapshot(b []byte) (producerState, int64, error) {
	ps := newProducerState()
	if len(b) < producerSnapshotHeader {
		return ps, 0, fmt.Errorf("%w: %d bytes, header needs %d", errProducerSnapshotCorrupt, len(b), producerSnapshotHeader)
	}
	if m := binary.BigEndian.Uint32(b[0:]); m != producerSnapshotMagic {
		return ps, 0, fmt.Errorf("%w: magic %#x", errProducerSnapshotCorrupt, m)
	}
	if v := binary.BigEndian.Uint16(b[4:]); v != producerSnapshotVersion {
		return ps, 0, fmt.Errorf("%w: version %d, want %d", errProducerSnapshotCorrupt, v, producerSnapshotVersion)
	}
	if want, got := binary.BigEndian.Uint32(b[6:]), crc32.Checksum(b[10:], producerSnapshotCRC); want != got {
		return ps, 0, fmt.Errorf("%w: crc %#08x, computed %#08x", errProducerSnapshotCorrupt, want, got)
	}
	offset := int64(binary.BigEndian.Uint64(b[10:]))
	count := int(binary.BigEndian.Uint32(b[18:]))
	rest := b[producerSnapshotHeader:]
	if offset < 0 || count > len(rest)/producerEntryBytes {
		return ps, 0, fmt.Errorf("%w: offset %d, %d entries in %d bytes", errProducerSnapshotCorrupt, offset, count, len(rest))
	}
	for i := 0; i < count; i++ {
		if len(rest) < producerEntryBytes {
			return ps, 0, fmt.Errorf("%w: entry %d truncated", errProducerSnapshotCorrupt, i)
		}
		id := int64(binary.BigEndian.Uint64(rest[0:]))
		e := &producerEntry{epoch: int16(binary.BigEndian.Uint16(rest[8:])), lastTimestamp: int64(binary.BigEndian.Uint64(rest[10:]))}
		n := int(rest[18])
		rest = rest[producerEntryBytes:]
		if id < 0 || n < 1 || n > producerBatchesKept || len(rest) < n*producerBatchBytes || ps.producers[id] != nil {
			return ps, 0, fmt.Errorf("%w: entry %d (producer %d, %d batches)", errProducerSnapshotCorrupt, i, id, n)
		}
		for j := 0; j < n; j++ {
			pb := producerBatch{
				firstSeq: int32(binary.BigEndian.Uint32(rest[0:])), lastSeq: int32(binary.BigEndian.Uint32(rest[4:])),
				firstOffset: int64(binary.BigEndian.Uint64(rest[8:])), lastOffset: int64(binary.BigEndian.Uint64(rest[16:])),
			}
			if pb.firstOffset < 0 || pb.lastOffset < pb.firstOffset || pb.lastOffset >= offset {
				return ps, 0, fmt.Errorf("%w: producer %d batch offsets [%d, %d] at end offset %d", errProducerSnapshotCorrupt, id, pb.firstOffset, pb.lastOffset, offset)
			}
			e.batches = append(e.batches, pb)
			rest = rest[producerBatchBytes:]
		}
		ps.producers[id] = e
	}
	if len(rest) != 0 {
		return ps, 0, fmt.Errorf("%w: %d trailing bytes", errProducerSnapshotCorrupt, len(rest))
	}
	return ps, offset, nil
}

// parseProducerSnapshotName returns the offset of a snapshot file name.
func parseProducerSnapshotName(name string) (int64, bool) {
	stem, ok := strings.CutSuffix(name, producerSnapshotSuffix)
	if !ok || len(stem) != baseOffsetDigits {
		return 0, false
	}
	n, err := strconv.ParseInt(stem, 10, 64)
	if err != nil || n < 0 || stem[0] < '0' || stem[0] > '9' {
		return 0, false // a sign ("+0000000000000000007"): not a name producerSnapshotPath makes
	}
	return n, true
}

// listProducerSnapshots returns the offsets of the snapshot files in dir, ascending, and
// removes leftover temp files.
func listProducerSnapshots(dir string) ([]int64, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("list snapshots in %s: %w", dir, err)
	}
	var offsets []int64
	for _, e := range entries {
		name := e.Name()
		if strings.HasSuffix(name, producerSnapshotSuffix+tmpSuffix) {
			os.Remove(filepath.Join(dir, name))
			continue
		}
		if n, ok := parseProducerSnapshotName(name); ok {
			offsets = append(offsets, n)
		}
	}
	sort.Slice(offsets, func(i, j int) bool { return offsets[i] < offsets[j] })
	return offsets, nil
}

// writeProducerSnapshot writes the producer state as of the log end offset: temp file,
// rename. Like a roll's new segment files it is made durable by the next Sync or BeginSync,
// which fdatasyncs it together with the directory (no fsync on the owner's thread in the
// middle of an append). A crash before that loses the snapshot or leaves one that fails its
// CRC; recovery then falls back to the older one, which costs time, not correctness.
func (l *Log) writeProducerSnapshot() error {
	offset := l.EndOffset()
	path := producerSnapshotPath(l.dir, offset)
	tmp := path + tmpSuffix
	fd, err := unix.Open(tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return fmt.Errorf("write producer snapshot %d: %w", offset, err)
	}
	l.snapshotScratch = appendProducerSnapshot(l.snapshotScratch, &l.producers, offset)
	werr := pwriteFull(l.fio, fd, l.snapshotScratch, 0)
	cerr := unix.Close(fd)
	if err := errors.Join(werr, cerr); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write producer snapshot %d: %w", offset, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write producer snapshot %d: %w", offset, err)
	}
	return l.snapshotInPlace(offset)
}

// snapshotInPlace records the snapshot at offset, renamed in place: the next Sync or
// BeginSync makes it and its directory entry durable, and older ones may be pruned.
func (l *Log) snapshotInPlace(offset int64) error {
	l.dirGen++
	l.unsyncedSnapshot = offset
	if n := len(l.snapshots); n == 0 || l.snapshots[n-1] != offset {
		l.snapshots = append(l.snapshots, offset)
	}
	return l.pruneProducerSnapshots()
}

// pruneProducerSnapshots keeps the newest producerSnapshotsKept snapshots, and never one at
// or after the newest snapshot a sync has covered: until a newer one is durable it is what
// recovery falls back to after a power loss (l.snapshots mirrors the files, so a roll does
// not list the directory). With the ring (fileJobs) the unlinks go to it and the books
// forget the snapshot at once: nothing reads a pruned snapshot, a pruned one that a crash
// brings back is older than one kept, and what could create its name again (a truncation
// below it) or list the directory waits for the unlink first (awaitFileJobs).
func (l *Log) pruneProducerSnapshots() error {
	for len(l.snapshots) > producerSnapshotsKept && (l.snapshots[0] < l.durableSnapshot || len(l.snapshots) > producerSnapshotsMax) {
		path := producerSnapshotPath(l.dir, l.snapshots[0])
		if l.fileJobsAsync() {
			l.startFileJob([]fileStep{{from: path}}, nil)
		} else if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("remove producer snapshot %d: %w", l.snapshots[0], err)
		}
		l.snapshots = append(l.snapshots[:0], l.snapshots[1:]...)
	}
	return nil
}

// snapshotAfterRoll writes a snapshot at the new segment's base: with SetAsyncSnapshots
// without waiting (snapshotasync.go), none while one is in flight. A failure is logged, not
// fatal: recovery falls back to an older snapshot or to reading headers.
func (l *Log) snapshotAfterRoll() {
	if l.snapshot.ops != nil {
		if l.snapshot.file.busy() {
			l.snapshot.skipped++
			return
		}
		if l.startSnapshot() {
			return
		}
	}
	l.snapshotBlocking()
}

// snapshotBlocking writes a snapshot at the log end offset on the owner's thread (Close, or
// a ring that refused the write), logging a failure.
func (l *Log) snapshotBlocking() {
	if err := l.writeProducerSnapshot(); err != nil {
		l.cfg.Logger.Warn("producer snapshot failed", "dir", l.dir, "err", err)
	}
}

// readProducerSnapshot reads and decodes one snapshot file.
func readProducerSnapshot(path string) (producerState, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return newProducerState(), 0, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, producerSnapshotBytesMax+1))
	if err != nil {
		return newProducerState(), 0, err
	}
	if len(b) > producerSnapshotBytesMax {
		return newProducerState(), 0, fmt.Errorf("%w: larger than %d bytes", errProducerSnapshotCorrupt, producerSnapshotBytesMax)
	}
	return decodeProducerSnapshot(b)
}

// loadProducerState rebuilds the producer state of a recovered (or truncated) log: the
// newest usable snapshot at or below the end offset, then every batch header after it.
// Snapshots beyond the end offset (their batches were lost or truncated) are deleted.
func (l *Log) loadProducerState(report *RecoveryReport) error {
	l.producers = newProducerState()
	offsets, err := listProducerSnapshots(l.dir)
	if err != nil {
		return err
	}
	end := l.EndOffset()
	from := int64(-1)
	removed := false
	for i := len(offsets) - 1; i >= 0 && from < 0; i-- {
		path := producerSnapshotPath(l.dir, offsets[i])
		if offsets[i] > end {
			if err := os.Remove(path); err != nil {
				return fmt.Errorf("remove producer snapshot beyond the log end: %w", err)
			}
			removed = true
			continue
		}
		ps, off, err := readProducerSnapshot(path)
		if err == nil && off != offsets[i] {
			err = fmt.Errorf("%w: file %d holds offset %d", errProducerSnapshotCorrupt, offsets[i], off)
		}
		if err != nil {
			l.cfg.Logger.Warn("dropping producer snapshot", "dir", l.dir, "snapshot", offsets[i], "err", err)
			if err := os.Remove(path); err != nil {
				return fmt.Errorf("remove damaged producer snapshot: %w", err)
			}
			continue
		}
		l.producers, from = ps, off
		report.ProducerSnapshot = off
		// Read back, perhaps from the page cache only (a process crash): the next sync makes
		// it durable before older snapshots may go.
		l.unsyncedSnapshot, l.durableSnapshot = off, -1
	}
	if removed {
		// The removals are durable before anything is appended: a snapshot beyond the end
		// that a power loss brought back after the log grew past it again (a truncation,
		// then appends and a sync that need not flush the directory) would be loaded, with
		// producer state of batches the log no longer holds (TestAsyncSnapshotCrash found it).
		if err := syncDir(l.fio, l.dir); err != nil {
			return fmt.Errorf("remove producer snapshots beyond the log end: %w", err)
		}
	}
	// The files that remain, ascending: every snapshot above the one loaded was deleted.
	l.snapshots = l.snapshots[:0]
	for _, off := range offsets {
		if off <= from {
			l.snapshots = append(l.snapshots, off)
		}
	}
	if from < 0 {
		report.ProducerSnapshot = -1
		from = l.segments[max(0, len(l.segments)-2)].baseOffset
	}
	n, err := l.scanProducers(max(from, l.segments[0].baseOffset))
	report.ProducerBatchesScanned += n
	if err != nil {
		return fmt.Errorf("rebuild producer state: %w", err)
	}
	l.producers.expire(l.cfg.Clock().UnixMilli(), l.cfg.ProducerIDExpirationMs)
	report.Producers = len(l.producers.producers)
	return nil
}

// scanProducers applies the header of every batch from offset on to the producer state.
func (l *Log) scanProducers(from int64) (int, error) {
	scanned := 0
	if len(l.corruptions) > 0 {
		l.pruneCorruptions()
	}
	for _, s := range l.segments {
		if s.nextOffset <= from || s.size == 0 {
			continue
		}
		// A known bad batch (scrub.go): neither it nor the rest of its segment is read.
		limit := s.size
		if fence, fenced := l.fenceFor(s); fenced {
			if from >= fence.Offset {
				continue
			}
			limit = fence.Position
		}
		pos := int64(0)
		if from > s.baseOffset {
			if err := l.ensureIndex(s); err != nil {
				return scanned, err
			}
			p, _, err := s.findBatch(l.fio, &l.headers, from)
			if err != nil {
				return scanned, err
			}
			pos = p
		}
		for pos < limit {
			h, err := s.readHeaderAt(l.fio, &l.headers, pos)
			if err != nil {
				return scanned, err
			}
			if h.LastOffset() >= from {
				l.producers.update(h)
			}
			scanned++
			pos += batchSize(h)
		}
	}
	return scanned, nil
}

// ExpireProducers drops the producer state of producers idle for producer.id.expiration.ms
// (measured from their last batch's max timestamp) and returns how many it dropped. The
// shard calls it with retention.
func (l *Log) ExpireProducers(now int64) int {
	return l.producers.expire(now, l.cfg.ProducerIDExpirationMs)
}

// openUnsyncedSnapshot returns a descriptor of the snapshot written since the last sync and
// its offset, for the sync to fdatasync, or -1 when there is none (or it is gone: a
// truncation reloads them).
func (l *Log) openUnsyncedSnapshot() (fd int, offset int64, err error) {
	offset = l.unsyncedSnapshot
	if offset < 0 {
		return -1, -1, nil
	}
	fd, err = unix.Open(producerSnapshotPath(l.dir, offset), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	l.unsyncedSnapshot = -1
	if errors.Is(err, unix.ENOENT) {
		return -1, -1, nil
	}
	if err != nil {
		return -1, -1, fmt.Errorf("open producer snapshot: %w", err)
	}
	return fd, offset, nil
}

// snapshotDurable records that a sync covered the snapshot at offset (file and directory
// entry) and drops the snapshots it makes unnecessary.
func (l *Log) snapshotDurable(offset int64) {
	if offset <= l.durableSnapshot {
		return
	}
	l.durableSnapshot = offset
	if err := l.pruneProducerSnapshots(); err != nil {
		l.cfg.Logger.Warn("prune producer snapshots", "dir", l.dir, "err", err)
	}
}
