package engine

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ringlog/ringlog/engine/batch"
	"github.com/ringlog/ringlog/ring"
)

func TestBatchMapRoundTrip(t *testing.T) {
	for _, m := range []batchMap{
		{inode: 1, base: 0, size: 0, next: 0},
		{inode: 77, base: 1000, size: 400, next: 1010, entries: []uint64{batchMapEntry(0, 0xdeadbeef), batchMapEntry(200, 7)}},
	} {
		b := encodeBatchMap(m)
		got, err := decodeBatchMap(b)
		if err != nil {
			t.Fatal(err)
		}
		if got.inode != m.inode || got.base != m.base || got.size != m.size || got.next != m.next || len(got.entries) != len(m.entries) {
			t.Fatalf("decoded %+v, want %+v", got, m)
		}
		for i := range m.entries {
			if got.entries[i] != m.entries[i] {
				t.Fatalf("entry %d: %x, want %x", i, got.entries[i], m.entries[i])
			}
		}
		for cut := 0; cut < len(b); cut++ {
			if _, err := decodeBatchMap(b[:cut]); !errors.Is(err, errBatchMapCorrupt) {
				t.Fatalf("%d of %d bytes decoded: %v", cut, len(b), err)
			}
		}
	}
	if crc, ok := crcAt([]uint64{batchMapEntry(0, 5), batchMapEntry(90, 6)}, 90); !ok || crc != 6 {
		t.Fatalf("crcAt 90: %d %v", crc, ok)
	}
	if _, ok := crcAt([]uint64{batchMapEntry(0, 5), batchMapEntry(90, 6)}, 45); ok {
		t.Fatal("crcAt found a batch at 45")
	}
	for _, name := range []string{"batches.12", "recycled.0", "recycled.18446744073709551615"} {
		if _, _, ok := parseBatchMapName(name); !ok {
			t.Errorf("%s not parsed", name)
		}
	}
	for _, name := range []string{"batches.", "batches.012", "recycled.-1", "recycled.1x", "batches.18446744073709551616", "00000000000000000000.log"} {
		if _, _, ok := parseBatchMapName(name); ok {
			t.Errorf("%s parsed as a batch map", name)
		}
	}
}

// FuzzDecodeBatchMap: the decoder never panics, bounds what it allocates by the input's
// length, and accepts exactly its own encoding.
func FuzzDecodeBatchMap(f *testing.F) {
	f.Add([]byte{})
	f.Add(encodeBatchMap(batchMap{inode: 3}))
	f.Add(encodeBatchMap(batchMap{inode: 3, base: 5, size: 300, next: 9, entries: []uint64{batchMapEntry(0, 1), batchMapEntry(100, 2)}}))
	huge := encodeBatchMap(batchMap{inode: 3})
	huge[36], huge[37] = 0xff, 0xff // a count far beyond the bytes
	f.Add(huge)
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeBatchMap(b)
		if err != nil {
			if !errors.Is(err, errBatchMapCorrupt) {
				t.Fatalf("error not errBatchMapCorrupt: %v", err)
			}
			return
		}
		if !bytes.Equal(encodeBatchMap(m), b) {
			t.Fatalf("accepted %x, which re-encodes differently", b)
		}
	})
}

// appendSameBatches appends n byte-identical batches (records "same", timestamp 0): only the
// base offset differs, outside the CRC, so every one has the same CRC.
func appendSameBatches(t *testing.T, l *Log, n int) {
	t.Helper()
	b := batch.NewBuilder(batch.BuilderOptions{})
	for ; n > 0; n-- {
		b.Reset()
		for r := 0; r < 8; r++ {
			b.Append(0, nil, []byte("same-record-value"), nil)
		}
		bb, err := b.Build(nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.Append(bb); err != nil {
			t.Fatal(err)
		}
	}
}

// TestRecycleSameBatchSurvivesRecovery: a producer that appends byte-identical batches
// writes, over a recycled file, batches with the very CRC the previous life had at the same
// position. Recovery cannot tell such a batch from the old body under a torn header, so the
// appender forces an index entry at each (RecycleCounters.SameCRC), and a synced one lies
// before the re-scan: a process crash after a Sync keeps every synced record, in both modes.
func TestRecycleSameBatchSurvivesRecovery(t *testing.T) {
	for _, mode := range storageModes {
		t.Run(string(mode), func(t *testing.T) {
			dir := t.TempDir()
			cfg := recycleConfig(mode)
			l, _ := openLog(t, dir, cfg, ring.Syscalls{})
			for l.SegmentCount() < 3 {
				appendSameBatches(t, l, 1)
			}
			if n, err := l.EnforceRetention(time.Now()); err != nil || n != 2 {
				t.Fatalf("retention: %d segments, %v", n, err)
			}
			l.settlePool()
			same, reused := RecycleStats().SameCRC, RecycleStats().Reused
			for segments := l.SegmentCount(); l.SegmentCount() == segments; {
				appendSameBatches(t, l, 1)
			}
			appendSameBatches(t, l, 20)
			if RecycleStats().Reused == reused || !l.active().stale {
				t.Fatal("the roll took no pool file")
			}
			if RecycleStats().SameCRC < same+20 {
				t.Fatalf("SameCRC %d -> %d: the identical batches were not seen", same, RecycleStats().SameCRC)
			}
			if err := l.Sync(); err != nil {
				t.Fatal(err)
			}
			end := l.EndOffset()
			l.closeFiles() // the process dies after the sync
			l, rep := openLog(t, dir, cfg, ring.Syscalls{})
			defer l.Close()
			if l.EndOffset() != end {
				t.Fatalf("recovered log ends at %d, synced end %d; report %+v", l.EndOffset(), end, rep)
			}
		})
	}
}

// TestRecycleNeedsBatchMap: a retired file is recycled only with a batch map of its content:
// the segment active at a crash has none (it is freed, RecycleCounters.Unmapped), the one
// active at a clean Close keeps its map across the restart, and a sealed segment's map
// survives the restart. OpenLog removes previous-life maps and maps of files that are gone.
func TestRecycleNeedsBatchMap(t *testing.T) {
	for _, clean := range []bool{false, true} {
		name := map[bool]string{false: "crash", true: "close"}[clean]
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			cfg := recycleConfig(StorageDirect)
			l := recycledLog(t, dir, cfg)
			sealed := l.segments[len(l.segments)-2]
			if _, err := os.Stat(filepath.Join(dir, batchMapName(batchMapOwnPrefix, sealed.inode))); err != nil {
				t.Fatalf("sealed segment's batch map: %v", err)
			}
			active := l.active()
			if _, err := os.Stat(filepath.Join(dir, batchMapName(batchMapOldPrefix, active.inode))); err != nil {
				t.Fatalf("recycled file's previous-life map: %v", err)
			}
			stray := filepath.Join(dir, batchMapName(batchMapOwnPrefix, 1))
			if err := os.WriteFile(stray, []byte("x"), 0o644); err != nil {
				t.Fatal(err)
			}
			if clean {
				if err := l.Close(); err != nil {
					t.Fatal(err)
				}
			} else {
				l.closeFiles()
			}
			l, _ = openLog(t, dir, cfg, ring.Syscalls{})
			defer l.Close()
			for _, gone := range []string{stray, filepath.Join(dir, batchMapName(batchMapOldPrefix, active.inode))} {
				if _, err := os.Stat(gone); !os.IsNotExist(err) {
					t.Fatalf("%s after OpenLog: %v", gone, err)
				}
			}
			appendCrashBatches(t, l, 1, 8)
			for segments := l.SegmentCount(); l.SegmentCount() == segments; {
				appendCrashBatches(t, l, 1, 8)
			}
			pooled, unmapped := RecycleStats().Pooled, RecycleStats().Unmapped
			l.cfg.RetentionBytes = 1
			if _, err := l.EnforceRetention(time.Now()); err != nil {
				t.Fatal(err)
			}
			l.settlePool()
			// Retired: the segment sealed before the restart (mapped) and the one active at it.
			wantPooled, wantUnmapped := int64(2), int64(0)
			if !clean {
				wantPooled, wantUnmapped = 1, 1
			}
			if got := RecycleStats().Pooled - pooled; got != wantPooled {
				t.Errorf("pooled %d, want %d", got, wantPooled)
			}
			if got := RecycleStats().Unmapped - unmapped; got != wantUnmapped {
				t.Errorf("unmapped %d, want %d", got, wantUnmapped)
			}
			checkOffsetRecords(t, l)
		})
	}
}

// TestRecyclePreparationOutlivedByEmptyPool: files still being prepared for the pool when a
// truncation below the log start empties it are released when they come back, never
// pooled (their old batches may hold offsets the log reaches again).
func TestRecyclePreparationOutlivedByEmptyPool(t *testing.T) {
	dir := t.TempDir()
	l, _ := openLog(t, dir, recycleConfig(StorageDirect), ring.Syscalls{})
	defer l.Close()
	for l.SegmentCount() < 3 {
		appendCrashBatches(t, l, 1, 8)
	}
	released := RecycleStats().Released
	if n, err := l.EnforceRetention(time.Now()); err != nil || n != 2 {
		t.Fatalf("retention: %d segments, %v", n, err)
	}
	if err := l.ResetTo(0); err != nil { // before collectPooled: both still count as preparing
		t.Fatal(err)
	}
	l.settlePool()
	if len(l.recyclePool) != 0 || l.recyclePreparing != 0 || RecycleStats().Released-released != 2 {
		t.Fatalf("pool %v, preparing %d, released %d after the reset", l.recyclePool, l.recyclePreparing, RecycleStats().Released-released)
	}
	appendCrashBatches(t, l, 2, 8)
	checkOffsetRecords(t, l)
}

// TestRecycleSameBatchSurvivesRecoveryAsync is TestRecycleSameBatchSurvivesRecovery for a
// log whose rolls take prepared "spare" files (rollasync.go; the shard's reactor, here the
// tests' queued ring): the roll's spare is a pool file, and the segment made of it must
// carry that file's previous-life map (takeSpare) so that the appender forces an index entry
// at each batch with its previous life's CRC. Without the map the identical batches are not
// seen, and after a process crash following a Sync recovery refuses the synced batches past
// the last regular index entry. TestCrashSIGKILLAsync's repeat shape meets the same with
// real kills.
func TestRecycleSameBatchSurvivesRecoveryAsync(t *testing.T) {
	dir := t.TempDir()
	qw := &queuedWrites{fio: ring.Syscalls{}, rng: rand.New(rand.NewPCG(14, 2))}
	l := rollFilesLog(t, dir, qw, 2, func() {})
	appendSame := func(n int) {
		t.Helper()
		appendSameBatches(t, l, n)
		qw.completeSome(10_000)
	}
	for l.SegmentCount() < 3 {
		appendSame(1)
	}
	retireAll(t, l, qw)
	qw.completeSome(10_000)
	l.settlePool()
	if len(l.recyclePool) == 0 {
		t.Fatal("retention pooled no file")
	}
	// A pool file is taken only once a directory fsync covered its map's name
	// (dirsync.go); the next checkpoint's would, one roll later: issue it now.
	l.syncPoolDir()
	qw.completeSome(10_000)
	if l.poolWaitsForDir() {
		t.Fatal("the pool's directory fsync did not cover its files")
	}
	if l.spare.state == spareReady {
		l.dropSpare() // made before the pool had a file
		qw.completeSome(10_000)
	}
	same, reused, spares := RecycleStats().SameCRC, RecycleStats().Reused, RollFileStats().Spare
	for segments := l.SegmentCount(); l.SegmentCount() == segments; {
		appendSame(1)
	}
	appendSame(20)
	if RollFileStats().Spare == spares || RecycleStats().Reused == reused || !l.active().stale {
		t.Fatalf("the roll took no pool file as its spare (spare rolls %d -> %d, reused %d -> %d)",
			spares, RollFileStats().Spare, reused, RecycleStats().Reused)
	}
	if got := RecycleStats().SameCRC - same; got < 20 {
		t.Fatalf("SameCRC +%d: the identical batches over the recycled spare were not seen", got)
	}
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	end := l.EndOffset()
	l.closeFiles() // the process dies after the sync
	r, rep := openLog(t, dir, LogConfig{Storage: StorageDirect, Logger: quietLogger}, ring.Syscalls{})
	defer r.Close()
	if r.EndOffset() != end {
		t.Fatalf("recovered log ends at %d, synced end %d; report %+v", r.EndOffset(), end, rep)
	}
}
