package engine

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"

	"github.com/ringlog/ringlog/engine/batch"
	"github.com/ringlog/ringlog/engine/faultio"
	"github.com/ringlog/ringlog/ring"
)

// recoveryFixture is a closed log whose files can be restored between damage rounds.
type recoveryFixture struct {
	dir        string
	cfg        LogConfig
	fio        ring.FileIO
	active     int64  // base offset of the active segment
	closedData []byte // bytes of every closed segment
	activeLog  []byte // the active segment's .log as closed
	index      []byte
	timeIndex  []byte
	batchPos   []int64 // positions of the active segment's batches, plus its size
	batchBase  []int64 // their base offsets, plus the end offset
}

func newRecoveryFixture(t *testing.T, inner ring.FileIO, mode StorageMode) *recoveryFixture {
	fio := faultio.New(inner)
	fio.SkipSyncs = true // thousands of reopens; durability is the crash test's job
	f := &recoveryFixture{dir: t.TempDir(), cfg: testConfig(mode), fio: fio}
	f.cfg.SegmentBytes = 16 << 10
	f.cfg.IndexIntervalBytes = 2048
	l, _ := openLog(t, f.dir, f.cfg, fio)
	all := appendSome(t, l, 0, 70, 5000)
	f.active = l.active().baseOffset
	activeStart := int64(len(all)) - l.active().size
	f.closedData = all[:activeStart]
	if l.SegmentCount() < 2 {
		t.Fatalf("fixture wants closed segments too, has %d", l.SegmentCount())
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	read := func(suffix string) []byte {
		b, err := os.ReadFile(segmentFile(f.dir, f.active, suffix))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	f.activeLog, f.index, f.timeIndex = read(logSuffix), read(indexSuffix), read(timeIndexSuffix)
	if len(f.index) == 0 {
		t.Fatal("fixture's active segment has no index entries")
	}
	for pos := int64(0); pos < int64(len(f.activeLog)); {
		h, err := validateFirst(f.activeLog[pos:])
		if err != nil {
			t.Fatal(err)
		}
		f.batchPos = append(f.batchPos, pos)
		f.batchBase = append(f.batchBase, h.BaseOffset)
		pos += batchSize(h)
	}
	f.batchPos = append(f.batchPos, int64(len(f.activeLog)))
	f.batchBase = append(f.batchBase, f.batchBase[len(f.batchBase)-1]+1) // placeholder, fixed below
	h, _ := batch.ParseHeader(f.activeLog[f.batchPos[len(f.batchPos)-2]:])
	f.batchBase[len(f.batchBase)-1] = h.LastOffset() + 1
	return f
}

// install writes the active segment's files with log bytes logBytes.
func (f *recoveryFixture) install(t *testing.T, logBytes []byte) {
	t.Helper()
	for suffix, b := range map[string][]byte{logSuffix: logBytes, indexSuffix: f.index, timeIndexSuffix: f.timeIndex} {
		if err := overwriteFile(segmentFile(f.dir, f.active, suffix), b); err != nil {
			t.Fatal(err)
		}
	}
}

// expectIntactPrefix reopens and checks that the log ends after batch k-1 of the active
// segment and reads back identical.
func (f *recoveryFixture) expectIntactPrefix(t *testing.T, k int, what string) RecoveryReport {
	t.Helper()
	l, rep := openLog(t, f.dir, f.cfg, f.fio)
	defer l.closeFiles()
	if l.EndOffset() != f.batchBase[k] {
		t.Fatalf("%s: end offset %d, want %d (report %+v)", what, l.EndOffset(), f.batchBase[k], rep)
	}
	want := append(append([]byte(nil), f.closedData...), f.activeLog[:f.batchPos[k]]...)
	mustEqualBytes(t, what, readAll(t, l, 1<<20), want)
	return rep
}

// TestRecoveryCutAtEveryByte cuts the active segment at every byte position of its last
// batches: the log must end exactly at the last intact batch and read back identical.
func TestRecoveryCutAtEveryByte(t *testing.T) {
	forEachBackend(t, func(t *testing.T, inner ring.FileIO, mode StorageMode) {
		f := newRecoveryFixture(t, inner, mode)
		n := len(f.batchPos) - 1
		from := f.batchPos[max(0, n-2)]
		for cut := from; cut <= int64(len(f.activeLog)); cut++ {
			f.install(t, f.activeLog[:cut])
			k := n
			for k > 0 && f.batchPos[k] > cut {
				k--
			}
			rep := f.expectIntactPrefix(t, k, "cut")
			if rep.DroppedBytes != cut-f.batchPos[k] {
				t.Fatalf("cut at %d: dropped %d bytes, want %d", cut, rep.DroppedBytes, cut-f.batchPos[k])
			}
			allZero := true
			for _, c := range f.activeLog[f.batchPos[k]:cut] {
				allZero = allZero && c == 0
			}
			if (rep.DroppedBytes > 0 && !allZero) != (rep.DroppedBatches > 0) {
				t.Fatalf("cut at %d: report %+v", cut, rep)
			}
		}
		// Zero padding (a direct-mode crash before the final truncate) is dropped as padding.
		padded := append(append([]byte(nil), f.activeLog...), make([]byte, blockBytes-len(f.activeLog)%blockBytes)...)
		f.install(t, padded)
		rep := f.expectIntactPrefix(t, n, "zero padded")
		if rep.DroppedBatches != 0 || rep.DroppedBytes != int64(len(padded)-len(f.activeLog)) {
			t.Fatalf("padding report %+v", rep)
		}
	})
}

// TestRecoveryFlipEveryByte flips each byte of the batches recovery re-scans (from the
// active segment's last index entry on; bytes before it were fdatasync'ed before the entry
// was written and are trusted): the log ends before the damaged batch, except for a flip in
// the leader epoch, which Kafka's format leaves outside the CRC.
func TestRecoveryFlipEveryByte(t *testing.T) {
	forEachBackend(t, func(t *testing.T, inner ring.FileIO, mode StorageMode) {
		f := newRecoveryFixture(t, inner, mode)
		n := len(f.batchPos) - 1
		lastIndexed := int64(binary.BigEndian.Uint32(f.index[len(f.index)-4:]))
		first := 0
		for f.batchPos[first] < lastIndexed {
			first++
		}
		if n-first < 2 {
			t.Fatalf("only %d batches after the last index entry", n-first)
		}
		// The batch at the last index entry (recovery must step back past it) and the last two.
		for k := first; k < n; k++ {
			if k != first && k < n-2 {
				continue
			}
			for pos := f.batchPos[k]; pos < f.batchPos[k+1]; pos++ {
				damaged := append([]byte(nil), f.activeLog...)
				damaged[pos] ^= 0x5a
				f.install(t, damaged)
				inEpoch := pos-f.batchPos[k] >= 12 && pos-f.batchPos[k] < 16
				if inEpoch {
					l, _ := openLog(t, f.dir, f.cfg, f.fio)
					if l.EndOffset() != f.batchBase[n] {
						t.Fatalf("epoch flip at %d cut the log to %d", pos, l.EndOffset())
					}
					l.closeFiles()
					continue
				}
				rep := f.expectIntactPrefix(t, k, "flip")
				if rep.DroppedBytes != f.batchPos[n]-f.batchPos[k] || rep.Corruption == "" {
					t.Fatalf("flip at %d: report %+v", pos, rep)
				}
			}
		}
	})
}

func TestRecoveryRebuildsClosedSegmentIndex(t *testing.T) {
	forEachBackend(t, func(t *testing.T, fio ring.FileIO, mode StorageMode) {
		dir := t.TempDir()
		cfg := testConfig(mode)
		l, _ := openLog(t, dir, cfg, fio)
		all := appendSome(t, l, 0, 400, 0)
		first := l.segments[0].baseOffset
		second := l.segments[1].baseOffset
		l.Close()
		wantIndex, _ := os.ReadFile(segmentFile(dir, first, indexSuffix))
		wantTime, _ := os.ReadFile(segmentFile(dir, first, timeIndexSuffix))
		if len(wantIndex) == 0 || len(wantTime) == 0 {
			t.Fatal("closed segment without index entries")
		}
		// Missing index on one segment, garbage on another.
		os.Remove(segmentFile(dir, first, indexSuffix))
		os.WriteFile(segmentFile(dir, second, indexSuffix), []byte("not an index at all!!!!"), 0o644)
		l2, rep := openLog(t, dir, cfg, fio)
		if len(rep.RebuiltIndexes) != 2 || rep.RebuiltIndexes[0] != first || rep.RebuiltIndexes[1] != second || rep.DroppedBytes != 0 {
			t.Fatalf("report %+v", rep)
		}
		mustEqualBytes(t, "after rebuild", readAll(t, l2, 1000), all)
		checkEveryOffset(t, l2, all)
		l2.Close()
		gotIndex, _ := os.ReadFile(segmentFile(dir, first, indexSuffix))
		gotTime, _ := os.ReadFile(segmentFile(dir, first, timeIndexSuffix))
		mustEqualBytes(t, "rebuilt index", gotIndex, wantIndex)
		mustEqualBytes(t, "rebuilt time index", gotTime, wantTime)
	})
}

// TestRecoveryCorruptClosedSegmentIsFenced: damage in the middle of a sealed segment whose
// index is gone (so recovery re-scans it all) after a clean shutdown is media damage under
// synced records: it is recorded and fenced, and nothing is cut or deleted (this test used to
// expect the log to end there, with every later segment deleted).
func TestRecoveryCorruptClosedSegmentIsFenced(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(StoragePageCache)
	l, _ := openLog(t, dir, cfg, ring.Syscalls{})
	all := appendSome(t, l, 0, 400, 0)
	segs, end := l.SegmentCount(), l.EndOffset()
	first := l.segments[0]
	firstSize := first.size
	second := l.segments[1].baseOffset
	l.Close()
	// Damage the middle of the first segment and drop its index so the rebuild finds it.
	path := segmentFile(dir, first.baseOffset, logSuffix)
	b, _ := os.ReadFile(path)
	b[firstSize/2] ^= 0xff
	os.WriteFile(path, b, 0o644)
	os.Remove(segmentFile(dir, first.baseOffset, indexSuffix))
	l2, rep := openLog(t, dir, cfg, ring.Syscalls{})
	defer l2.Close()
	if len(rep.DeletedSegments) != 0 || rep.DroppedBytes != 0 || l2.SegmentCount() != segs || l2.EndOffset() != end ||
		len(rep.Corruptions) != 1 || rep.Corruptions[0].NextOffset != second || rep.Corruptions[0].Position > firstSize/2 {
		t.Fatalf("report %+v, %d segments", rep, l2.SegmentCount())
	}
	c := rep.Corruptions[0]
	mustEqualBytes(t, "prefix", readUntil(t, l2, l2.StartOffset(), c.Offset), all[:c.Position])
	mustEqualBytes(t, "later segments", readUntil(t, l2, second, end), all[firstSize:])
	if _, err := l2.Append(makeBatch(t, 9999, 1, 10, 0)); err != nil {
		t.Fatalf("append after recovery: %v", err)
	}
}

// overwriteFile replaces a file's contents without truncating it to zero first (ext4 flushes
// a file truncated to zero on close, which made thousands of rounds slow).
func overwriteFile(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.WriteAt(b, 0); err != nil {
		f.Close()
		return err
	}
	if err := f.Truncate(int64(len(b))); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// TestReadsSkipTornActiveIndexEntry: a power loss can tear an unsynced index write in the
// middle of the active segment's .index while later entries survive, leaving an entry that
// still decodes in order but points inside a batch (seen as TestPowerLossKeepsSyncedData
// failing with "unsupported magic" for seed 20946). Lookups must not trust it: every offset
// stays readable after the reopen.
func TestReadsSkipTornActiveIndexEntry(t *testing.T) {
	dir := t.TempDir()
	cfg := LogConfig{SegmentBytes: 64 << 10, IndexIntervalBytes: 256, Logger: quietLogger}
	l, _ := openLog(t, dir, cfg, ring.Syscalls{})
	for i := range 40 {
		if _, err := l.Append(makeBatch(t, i, 3, 40, int64(i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	path := segmentFile(dir, 0, indexSuffix)
	b, err := os.ReadFile(path)
	if err != nil || len(b) < 4*indexEntryBytes {
		t.Fatalf("index of %d bytes: %v", len(b), err)
	}
	// Entry 1's position loses its low byte, as a write torn after its first seven bytes
	// would leave it: still between entries 0 and 2, no longer at a batch.
	e0 := binary.BigEndian.Uint32(b[4:])
	e1 := binary.BigEndian.Uint32(b[indexEntryBytes+4:])
	torn := e1 &^ 0xff
	if torn <= e0 || torn == e1 {
		torn = e0 + 1
	}
	binary.BigEndian.PutUint32(b[indexEntryBytes+4:], torn)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(dir, cleanShutdownFileName))
	l, _ = openLog(t, dir, cfg, ring.Syscalls{})
	defer l.Close()
	for off := int64(0); off < l.EndOffset(); off++ {
		if _, err := l.Read(off, 1); err != nil {
			t.Fatalf("read at %d after a torn index entry: %v", off, err)
		}
	}
	readAll(t, l, 1<<20)
}

// TestReadsSkipTornSealedIndexEntry: the same torn entry in a sealed segment's index, which
// recovery does not check entry by entry: lookups verify the entry they land on and fall back
// to an earlier one, so every offset stays readable and offset-for-timestamp stays right.
func TestReadsSkipTornSealedIndexEntry(t *testing.T) {
	dir := t.TempDir()
	cfg := LogConfig{SegmentBytes: 8 << 10, IndexIntervalBytes: 256, Logger: quietLogger}
	l, _ := openLog(t, dir, cfg, ring.Syscalls{})
	for i := range 80 {
		if _, err := l.Append(makeBatch(t, i, 3, 40, int64(1000+3*i))); err != nil {
			t.Fatal(err)
		}
	}
	if l.SegmentCount() < 3 {
		t.Fatalf("%d segments", l.SegmentCount())
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	path := segmentFile(dir, 0, indexSuffix)
	b, err := os.ReadFile(path)
	if err != nil || len(b) < 4*indexEntryBytes {
		t.Fatalf("index of %d bytes: %v", len(b), err)
	}
	e0 := binary.BigEndian.Uint32(b[4:])
	binary.BigEndian.PutUint32(b[2*indexEntryBytes+4:], binary.BigEndian.Uint32(b[indexEntryBytes+4:])+1)
	if binary.BigEndian.Uint32(b[2*indexEntryBytes+4:]) <= e0 {
		t.Fatal("test setup: torn entry out of order")
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	l, _ = openLog(t, dir, cfg, ring.Syscalls{})
	defer l.Close()
	for off := int64(0); off < l.EndOffset(); off++ {
		if _, err := l.Read(off, 1); err != nil {
			t.Fatalf("read at %d after a torn sealed index entry: %v", off, err)
		}
		if got, err := l.OffsetForTimestamp(1000 + off); err != nil || got != off {
			t.Fatalf("offset for timestamp %d: %d %v", 1000+off, got, err)
		}
	}
	readAll(t, l, 1<<20)
}
