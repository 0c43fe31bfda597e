package engine

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// Batch maps: the guard against a torn batch header over a recycled segment file
// (recycle.go; docs/storage.md, "Recycled segment files").
//
// A Kafka batch's CRC covers only its bytes from attributes (byte 21) on; the base offset,
// length, leader epoch, magic and the CRC itself are outside it. A recycled file still holds
// its previous life's batches past the logical end, and a new batch written over an old one
// that starts at the same position can be torn so that its first bytes (a new base offset)
// reach the disk and the rest does not: the old body under its old, valid CRC then reads as
// a valid batch at the expected offset. What tells the two apart is the CRC field: a batch
// whose CRC-covered bytes are the new batch's carries the new CRC; one whose body and CRC
// are the old batch's carries the old CRC, stored at the same position. So recovery needs,
// for a recycled file, the (position, CRC) of every batch of its previous life: a batch map.
//
// Two kinds of batch map file per partition directory, named by the .log file's inode
// (stable across the renames into and out of the pool):
//
//	batches.<inode>   the map of the file's current content, written (not synced) when the
//	                  segment is sealed by a roll; read when retention retires the segment
//	recycled.<inode>  the map of the file's previous life; made durable (file and directory
//	                  fsync, after an fdatasync of the .log) before the file enters the pool,
//	                  so before any byte of its next life is written; used by recovery
//
// Layout of both (part of the on-disk format; big-endian):
//
//	 0  magic      [4]byte "RLBM"
//	 4  inode      u64     the .log file's inode
//	12  base       i64     base offset of the segment the map describes
//	20  size       i64     its logical size in bytes (the batches cover [0, size))
//	28  next       i64     its next offset
//	36  count      u32     number of entries
//	40  entries    count × (position u32, crc u32), positions ascending
//	 .  checksum   u32     CRC-32C of every byte before it
//
// Recovery (Log.rescan) refuses a re-scanned batch of a segment whose inode has a
// recycled.<inode> map describing another base offset when the batch's stored CRC equals
// the map's CRC at the batch's position: its body and CRC are the previous life's, whatever
// its header says. A new batch can carry that CRC legitimately only if its CRC-covered bytes
// are byte-identical to the old batch's (same producer id, sequence, timestamps and records)
// or by a 2^-32 coincidence; the appender forces an index entry at such a batch, so once
// synced it lies before the re-scan (see segment.noteRecycled).

// batchMapMagic opens every batch map file.
const batchMapMagic = "RLBM"

const (
	batchMapHeaderBytes = 40
	batchMapEntryBytes  = 8
	batchMapOwnPrefix   = "batches."
	batchMapOldPrefix   = "recycled."
)

// batchMapEntriesMax bounds a batch map: 256 Ki batches (2 MiB in memory and on disk). A
// segment with more batches (below 4 KiB a batch on average in a 1 GiB segment) is not
// recycled: its retired file is freed as without recycling.
const batchMapEntriesMax = 256 << 10

var errBatchMapCorrupt = errors.New("batch map corrupt")

// batchMap is the (position, CRC) of every batch of one life of a .log file.
type batchMap struct {
	inode      uint64
	base       int64
	size, next int64
	entries    []uint64 // position<<32 | crc, positions ascending
}

func batchMapEntry(position int64, crc uint32) uint64 { return uint64(position)<<32 | uint64(crc) }

// crcAt returns the CRC of the batch that started at position in this life, if one did.
func crcAt(entries []uint64, position int64) (uint32, bool) {
	i := sort.Search(len(entries), func(i int) bool { return int64(entries[i]>>32) >= position })
	if i < len(entries) && int64(entries[i]>>32) == position {
		return uint32(entries[i]), true
	}
	return 0, false
}

func encodeBatchMap(m batchMap) []byte {
	b := make([]byte, batchMapHeaderBytes, batchMapHeaderBytes+batchMapEntryBytes*len(m.entries)+4)
	copy(b, batchMapMagic)
	binary.BigEndian.PutUint64(b[4:], m.inode)
	binary.BigEndian.PutUint64(b[12:], uint64(m.base))
	binary.BigEndian.PutUint64(b[20:], uint64(m.size))
	binary.BigEndian.PutUint64(b[28:], uint64(m.next))
	binary.BigEndian.PutUint32(b[36:], uint32(len(m.entries)))
	for _, e := range m.entries {
		b = binary.BigEndian.AppendUint64(b, e)
	}
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, batchMapCRC))
}

var batchMapCRC = crc32.MakeTable(crc32.Castagnoli)

// decodeBatchMap accepts exactly what encodeBatchMap writes for a map whose entries are
// ascending positions inside [0, size).
func decodeBatchMap(b []byte) (batchMap, error) {
	if len(b) < batchMapHeaderBytes+4 || string(b[:4]) != batchMapMagic {
		return batchMap{}, fmt.Errorf("%w: %d bytes, no header", errBatchMapCorrupt, len(b))
	}
	count := int64(binary.BigEndian.Uint32(b[36:]))
	if count > batchMapEntriesMax || int64(len(b)) != batchMapHeaderBytes+batchMapEntryBytes*count+4 {
		return batchMap{}, fmt.Errorf("%w: %d entries in %d bytes", errBatchMapCorrupt, count, len(b))
	}
	body := b[:len(b)-4]
	if crc32.Checksum(body, batchMapCRC) != binary.BigEndian.Uint32(b[len(body):]) {
		return batchMap{}, fmt.Errorf("%w: checksum", errBatchMapCorrupt)
	}
	m := batchMap{inode: binary.BigEndian.Uint64(b[4:]), base: int64(binary.BigEndian.Uint64(b[12:])),
		size: int64(binary.BigEndian.Uint64(b[20:])), next: int64(binary.BigEndian.Uint64(b[28:]))}
	if m.base < 0 || m.size < 0 || m.size > maxSegmentPosition || m.next < m.base {
		return batchMap{}, fmt.Errorf("%w: base %d, size %d, next %d", errBatchMapCorrupt, m.base, m.size, m.next)
	}
	m.entries = make([]uint64, count)
	for i := range m.entries {
		e := binary.BigEndian.Uint64(b[batchMapHeaderBytes+batchMapEntryBytes*i:])
		if int64(e>>32) >= m.size || i > 0 && e>>32 <= m.entries[i-1]>>32 {
			return batchMap{}, fmt.Errorf("%w: entry %d at position %d", errBatchMapCorrupt, i, e>>32)
		}
		m.entries[i] = e
	}
	return m, nil
}

// maxSegmentPosition: positions are u32 in the index, and so in a batch map.
const maxSegmentPosition = 1<<32 - 1

func batchMapName(prefix string, inode uint64) string {
	return prefix + strconv.FormatUint(inode, 10)
}

// parseBatchMapName returns the inode and prefix of a batch map file name.
func parseBatchMapName(name string) (inode uint64, prefix string, ok bool) {
	for _, p := range []string{batchMapOwnPrefix, batchMapOldPrefix} {
		if rest, found := strings.CutPrefix(name, p); found {
			n, err := strconv.ParseUint(rest, 10, 64)
			if err != nil || batchMapName(p, n) != name {
				return 0, "", false
			}
			return n, p, true
		}
	}
	return 0, "", false
}

// readBatchMap reads and decodes dir/name; it checks that the map belongs to inode.
func readBatchMap(dir, name string, inode uint64) (batchMap, error) {
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		return batchMap{}, err
	}
	if int64(len(b)) > batchMapHeaderBytes+batchMapEntryBytes*batchMapEntriesMax+4 {
		return batchMap{}, fmt.Errorf("%w: %s is %d bytes", errBatchMapCorrupt, name, len(b))
	}
	m, err := decodeBatchMap(b)
	if err == nil && m.inode != inode {
		err = fmt.Errorf("%w: %s names inode %d", errBatchMapCorrupt, name, m.inode)
	}
	return m, err
}

// removeBatchMaps unlinks both batch maps of inode (best effort: a leftover is removed by
// the next OpenLog, and a map names its inode and base offset, so it is never taken for
// another file's).
func removeBatchMaps(dir string, inode uint64) {
	for _, p := range []string{batchMapOwnPrefix, batchMapOldPrefix} {
		os.Remove(filepath.Join(dir, batchMapName(p, inode)))
	}
}

// loadOldBatchMaps reads every previous-life map (recycled.<inode>) in l.dir, by inode, for
// recovery, and returns the names of all batch-map files it listed, which sweepBatchMaps
// removes or keeps at the end of recovery (recovery writes none, so one listing serves
// both). A map that fails its checks is left out with a warning (it was fsynced before its
// file took new writes, so only media damage can make it so): the file's re-scan then runs
// without the guard, as before batch maps existed.
func (l *Log) loadOldBatchMaps() (maps map[uint64]batchMap, names []string) {
	entries, err := os.ReadDir(l.dir)
	if err != nil {
		l.cfg.Logger.Warn("list batch maps", "dir", l.dir, "err", err)
		return nil, nil
	}
	for _, e := range entries {
		inode, prefix, ok := parseBatchMapName(e.Name())
		if !ok {
			continue
		}
		names = append(names, e.Name())
		if prefix != batchMapOldPrefix {
			continue
		}
		if maps == nil {
			maps = map[uint64]batchMap{}
		}
		m, err := readBatchMap(l.dir, e.Name(), inode)
		if err != nil {
			l.cfg.Logger.Warn("unreadable batch map of a recycled segment file", "dir", l.dir, "file", e.Name(), "err", err)
			continue
		}
		maps[inode] = m
	}
	return maps, names
}

// oldBatchesOf returns the previous life's map entries that guard s's re-scan: those of the
// recycled.<inode> map of s's file when it describes another life than s's own (a power loss
// that took back the rename into the pool leaves the map describing the segment itself).
func oldBatchesOf(maps map[uint64]batchMap, s *segment) []uint64 {
	if m, ok := maps[s.inode]; ok && s.inode != 0 && m.base != s.baseOffset {
		return m.entries
	}
	return nil
}

// sweepBatchMaps ends recovery: of the batch-map files loadOldBatchMaps listed, every
// previous-life map goes (recovery cut every old byte past a segment's end and synced the
// cut, so no file holds an old life any more), and so does every own map but a sealed
// segment's (checked against the segment when retention retires it).
func (l *Log) sweepBatchMaps(names []string) {
	l.adoptOwnBatchMap(l.active())
	if len(names) > 0 {
		sealed := map[uint64]bool{}
		for _, s := range l.segments[:len(l.segments)-1] {
			sealed[s.inode] = s.inode != 0
		}
		for _, name := range names {
			inode, prefix, _ := parseBatchMapName(name)
			if !(prefix == batchMapOwnPrefix && sealed[inode]) {
				os.Remove(filepath.Join(l.dir, name)) // best effort: the next OpenLog sweeps again
			}
		}
	}
	l.trackBatches(l.active())
}

// adoptOwnBatchMap continues the own map of s, the active segment after recovery, from the
// batches.<inode> that Close wrote, when it describes s exactly as recovered: the segment
// stays recyclable across a clean restart. After a crash there is none (or an older one that
// no longer matches), and the segment will not be recycled.
func (l *Log) adoptOwnBatchMap(s *segment) {
	if l.cfg.RecycleSegments <= 0 || s.inode == 0 || s.size == 0 {
		return
	}
	m, err := readBatchMap(l.dir, batchMapName(batchMapOwnPrefix, s.inode), s.inode)
	if err == nil && m.base == s.baseOffset && m.size == s.size && m.next == s.nextOffset {
		s.batches = append(make([]uint64, 0, len(m.entries)+64), m.entries...)
	}
}
