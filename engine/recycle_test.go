package engine

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/ringlog/ringlog/engine/batch"
	"github.com/ringlog/ringlog/engine/faultio"
	"github.com/ringlog/ringlog/ring"
)

// recycleConfig is testConfig (64 KiB segments) with a pool of 2 recycled files and
// retention that retires every sealed segment once the active one holds 1 KiB.
func recycleConfig(mode StorageMode) LogConfig {
	cfg := testConfig(mode)
	cfg.RecycleSegments, cfg.RetentionBytes = 2, 1<<10
	return cfg
}

// appendCrashBatches appends n batches of records records each whose values encode their
// offsets (crashValue); every batch has the same size, so a recycled file's old batch
// boundaries line up with the new ones.
func appendCrashBatches(t *testing.T, l *Log, n, records int) {
	t.Helper()
	b := batch.NewBuilder(batch.BuilderOptions{})
	for ; n > 0; n-- {
		next := l.EndOffset()
		b.Reset()
		for r := 0; r < records; r++ {
			b.Append(next, nil, []byte(fmt.Sprintf("offset=%012d;", next)), nil)
			next++
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

// checkOffsetRecords reads the whole log and checks that it is one contiguous run of the
// records appendCrashBatches wrote, from StartOffset to EndOffset.
func checkOffsetRecords(t *testing.T, l *Log) {
	t.Helper()
	if err := offsetRecordsErr(t, l); err != nil {
		t.Fatal(err)
	}
}

// errOldRecord: a record appendCrashBatches wrote for an older offset was read at a newer one.
var errOldRecord = errors.New("an older offset's record under a new offset")

// offsetRecordsErr is checkOffsetRecords returning what it found wrong.
func offsetRecordsErr(t *testing.T, l *Log) error {
	t.Helper()
	next := l.StartOffset()
	data := readAll(t, l, 1<<20)
	for len(data) > 0 {
		h, err := validateFirst(data)
		if err != nil {
			return fmt.Errorf("batch at offset %d: %w", next, err)
		}
		err = batch.Decode(data[:h.Size()], func(offset, ts int64, r *batch.Record) error {
			if offset != next || string(r.Value) != fmt.Sprintf("offset=%012d;", offset) {
				var old int64
				if _, err := fmt.Sscanf(string(r.Value), "offset=%d;", &old); err == nil && old < offset && offset == next {
					return fmt.Errorf("%w: record at %d holds the record of %d", errOldRecord, offset, old)
				}
				return fmt.Errorf("record at %d (want %d): %q", offset, next, r.Value)
			}
			next++
			return nil
		})
		if err != nil {
			return err
		}
		data = data[h.Size():]
	}
	if next != l.EndOffset() {
		return fmt.Errorf("records end at %d, log end %d", next, l.EndOffset())
	}
	return nil
}

func inodeOf(t *testing.T, path string) uint64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Ino
}

// recycledLog returns a log whose active segment took a retired segment's file and holds a
// few batches, with that file's old bytes past its logical end.
func recycledLog(t *testing.T, dir string, cfg LogConfig) *Log {
	t.Helper()
	return recycledLogIO(t, dir, cfg, ring.Syscalls{})
}

// recycledLogIO is recycledLog writing through fio.
func recycledLogIO(t *testing.T, dir string, cfg LogConfig, fio ring.FileIO) *Log {
	t.Helper()
	l, _ := openLog(t, dir, cfg, fio)
	for l.SegmentCount() < 3 {
		appendCrashBatches(t, l, 1, 8)
	}
	retired := []int64{l.segments[0].baseOffset, l.segments[1].baseOffset}
	inodes := []uint64{inodeOf(t, segmentFile(dir, retired[0], logSuffix)), inodeOf(t, segmentFile(dir, retired[1], logSuffix))}
	reused0 := RecycleStats().Reused
	if n, err := l.EnforceRetention(time.Now()); err != nil || n != 2 {
		t.Fatalf("retention: %d segments, %v", n, err)
	}
	l.settlePool() // the preparations run in the background
	if len(l.recyclePool) != 2 {
		t.Fatalf("pool %v, want both retired files", l.recyclePool)
	}
	for i, base := range retired {
		if ino := inodeOf(t, segmentFile(dir, base, logSuffix)+recycleSuffix); ino != inodes[i] {
			t.Fatalf("pool file of segment %d is inode %d, the segment's was %d", base, ino, inodes[i])
		}
		if _, err := os.Stat(segmentFile(dir, base, indexSuffix)); !os.IsNotExist(err) {
			t.Fatalf("retired index file still there: %v", err)
		}
	}
	for segments := l.SegmentCount(); l.SegmentCount() == segments; {
		appendCrashBatches(t, l, 1, 8)
	}
	appendCrashBatches(t, l, 3, 8)
	s := l.active()
	if RecycleStats().Reused != reused0+1 || !s.stale || len(l.recyclePool) != 1 {
		t.Fatalf("the roll took no pool file: reused %d -> %d, stale %v, pool of %d", reused0, RecycleStats().Reused, s.stale, len(l.recyclePool))
	}
	// The roll took one retired file (the pool is a stack in the order the background
	// preparations finished), the other waits in the pool under its retired name.
	ino, waiting := inodeOf(t, segmentFile(dir, s.baseOffset, logSuffix)), l.recyclePool[0]
	if !(ino == inodes[0] && waiting.inode == inodes[1] && waiting.path == segmentFile(dir, retired[1], logSuffix)+recycleSuffix ||
		ino == inodes[1] && waiting.inode == inodes[0] && waiting.path == segmentFile(dir, retired[0], logSuffix)+recycleSuffix) {
		t.Fatalf("active segment is inode %d, pool holds %s (inode %d); retired inodes %v", ino, waiting.path, waiting.inode, inodes)
	}
	if fileBytes := logFileSize(t, dir, s.baseOffset); fileBytes <= s.size+blockBytes {
		t.Fatalf("recycled file is %d bytes, log %d: no old bytes past the end", fileBytes, s.size)
	}
	checkOffsetRecords(t, l)
	return l
}

// TestRecycleOverwritesRetiredFile: retention keeps retired .log files in the pool (their
// index files go), a roll renames one into place, reads stop at the logical end although old
// batches follow it in the file, and Close cuts the file to its logical size.
func TestRecycleOverwritesRetiredFile(t *testing.T) {
	for _, mode := range storageModes {
		t.Run(string(mode), func(t *testing.T) {
			dir := t.TempDir()
			cfg := recycleConfig(mode)
			l := recycledLog(t, dir, cfg)
			s := l.active()
			tail := tailOf(t, dir, s.baseOffset, alignUp(s.size))
			if bytes.Count(tail, []byte{0}) == len(tail) {
				t.Fatal("the recycled file's tail is all zeros: nothing old to hide")
			}
			end, base, size := l.EndOffset(), s.baseOffset, s.size
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			if got := logFileSize(t, dir, base); got != size {
				t.Fatalf("Close left the file at %d bytes, the log holds %d", got, size)
			}
			l, rep := openLog(t, dir, cfg, ring.Syscalls{})
			defer l.Close()
			if l.EndOffset() != end || rep.DroppedBytes != 0 {
				t.Fatalf("reopen: end %d (want %d), report %+v", l.EndOffset(), end, rep)
			}
			checkOffsetRecords(t, l)
		})
	}
}

// TestRecycleRecoveryCutsStaleTail: the process dies with a recycled active segment whose
// file holds the old segment's batches past the log's end; in page-cache mode the first of
// them is a whole batch with a valid CRC right at the end (same batch sizes in both lives).
// Recovery must end the log at the last new batch, never serve an old one, and cut the file.
// The "copied" cases recover a copy of the directory (new inodes, as after a restore or a
// move to another disk): the recycled file's batch map (batchmap.go) names the old inode and
// no longer applies, so recovery's base-offset check alone refuses the old batch (a check
// relaxed to accept lower offsets fails them; with the map in place it is refused anyway).
func TestRecycleRecoveryCutsStaleTail(t *testing.T) {
	for _, tc := range []struct {
		mode   StorageMode
		copied bool
	}{{StoragePageCache, false}, {StorageDirect, false}, {StoragePageCache, true}, {StorageDirect, true}} {
		mode := tc.mode
		t.Run(string(mode)+map[bool]string{true: "/copied"}[tc.copied], func(t *testing.T) {
			dir := t.TempDir()
			cfg := recycleConfig(mode)
			l := recycledLog(t, dir, cfg)
			if err := l.Sync(); err != nil {
				t.Fatal(err)
			}
			s := l.active()
			end, base, size := l.EndOffset(), s.baseOffset, s.size
			if mode == StoragePageCache {
				h, err := batch.ParseHeader(tailOf(t, dir, base, size))
				if err != nil || h.LastOffset() >= base {
					t.Fatalf("no whole old batch right after the end: %+v %v", h, err)
				}
				if _, err := batch.ValidateStored(tailOf(t, dir, base, size)[:h.Size()]); err != nil {
					t.Fatalf("the old batch after the end fails its CRC, the test proves less: %v", err)
				}
			}
			fileBytes := logFileSize(t, dir, base)
			l.closeFiles() // the process dies
			if tc.copied {
				copied := t.TempDir()
				copyFiles(t, dir, copied)
				dir = copied
			}
			l, rep := openLog(t, dir, cfg, ring.Syscalls{})
			if l.EndOffset() != end || rep.DroppedBytes != fileBytes-size {
				t.Fatalf("recovery: end %d (want %d), report %+v (file %d, log %d bytes)", l.EndOffset(), end, rep, fileBytes, size)
			}
			if got := logFileSize(t, dir, base); got != size {
				t.Fatalf("recovery left the file at %d bytes, the log holds %d", got, size)
			}
			checkOffsetRecords(t, l)
			appendCrashBatches(t, l, 4, 8)
			checkOffsetRecords(t, l)
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestRecyclePoolEmptiedBelowStart: a truncation below the log's start (ResetTo, TruncateTo
// past the start) lets offsets go below those the pool files hold, so it empties the pool:
// a later roll creates a fresh file. OpenLog removes pool files a previous run left.
func TestRecyclePoolEmptiedBelowStart(t *testing.T) {
	for _, reset := range []string{"ResetTo", "TruncateTo"} {
		t.Run(reset, func(t *testing.T) {
			dir := t.TempDir()
			cfg := recycleConfig(StorageDirect)
			l := recycledLog(t, dir, cfg)
			pool := append([]pooledFile(nil), l.recyclePool...)
			released := RecycleStats().Released
			var err error
			if reset == "ResetTo" {
				err = l.ResetTo(0)
			} else {
				err = l.TruncateTo(l.StartOffset())
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(l.recyclePool) != 0 || RecycleStats().Released != released+int64(len(pool)) {
				t.Fatalf("pool %v after %s, released %d -> %d", l.recyclePool, reset, released, RecycleStats().Released)
			}
			reused := RecycleStats().Reused
			for l.SegmentCount() < 2 {
				appendCrashBatches(t, l, 1, 8)
			}
			if RecycleStats().Reused != reused || l.active().stale {
				t.Fatal("a roll after the truncation took a pool file")
			}
			checkOffsetRecords(t, l)
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
	t.Run("OpenLog", func(t *testing.T) {
		dir := t.TempDir()
		cfg := recycleConfig(StorageDirect)
		l := recycledLog(t, dir, cfg)
		left := l.recyclePool[0].path
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(left); err != nil {
			t.Fatalf("Close removed the pool file: %v", err)
		}
		l, _ = openLog(t, dir, cfg, ring.Syscalls{})
		defer l.Close()
		if _, err := os.Stat(left); !os.IsNotExist(err) || len(l.recyclePool) != 0 {
			t.Fatalf("OpenLog kept the pool file %s: %v, pool %v", left, err, l.recyclePool)
		}
	})
}

// TestRecycleConfig: the default is on (4) in direct mode and off in page-cache mode; -1 is
// off; the bound is enforced.
func TestRecycleConfig(t *testing.T) {
	for _, tc := range []struct {
		mode StorageMode
		in   int
		want int
		bad  bool
	}{
		{StorageDirect, 0, recycleSegmentsDirect, false},
		{StoragePageCache, 0, -1, false},
		{StorageDirect, -1, -1, false},
		{StoragePageCache, 3, 3, false},
		{StorageDirect, recycleSegmentsMax + 1, 0, true},
		{StorageDirect, -2, 0, true},
	} {
		c, err := LogConfig{Storage: tc.mode, RecycleSegments: tc.in}.Resolved()
		if (err != nil) != tc.bad || !tc.bad && c.RecycleSegments != tc.want {
			t.Errorf("%s %d: got %d, %v", tc.mode, tc.in, c.RecycleSegments, err)
		}
	}
	c, err := LogConfigFromMap(LogConfig{}, map[string]string{ConfigRecycleSegments: "7"})
	if err != nil || c.RecycleSegments != 7 {
		t.Fatalf("LogConfigFromMap: %+v %v", c.RecycleSegments, err)
	}
}

// TestRecycleKeepsNothingWhenDiskTight: with the free-space estimate below twice the guard,
// retired files are freed, not kept for reuse.
func TestRecycleKeepsNothingWhenDiskTight(t *testing.T) {
	dir := t.TempDir()
	probe, err := NewDiskSpace(dir, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Appends fit, pooling does not; the frozen clock keeps the estimate from being re-read
	// (other processes' writes cannot move it).
	frozen := time.Now()
	disk, err := NewDiskSpace(dir, probe.FreeBytes()/2+1<<20, func() time.Time { return frozen })
	if err != nil {
		t.Fatal(err)
	}
	cfg := recycleConfig(StorageDirect)
	cfg.Disk = disk
	l, _ := openLog(t, dir, cfg, ring.Syscalls{})
	defer l.Close()
	for l.SegmentCount() < 3 {
		appendCrashBatches(t, l, 1, 8)
	}
	if n, err := l.EnforceRetention(time.Now()); err != nil || n != 2 {
		t.Fatalf("retention: %d segments, %v", n, err)
	}
	l.settlePool()
	if len(l.recyclePool) != 0 {
		t.Fatalf("pool %v with the disk below twice its guard", l.recyclePool)
	}
}

// TestRecycleTornHeaderServesNoOldRecord: a write of new batches over a recycled file is
// torn (faultio.CrashFS.CrashTearing) keep bytes into the header of one of them, a batch
// that starts where the file's previous life had a batch of the same length, with a valid
// CRC. A batch's CRC covers only its bytes from attributes (byte 21) on, so for keep 8–16 the
// file then holds the new base offset (and, from 12 on, the new length and epoch) over the
// old batch's body and CRC: a valid batch at the expected offset. Recovery must end the log
// right before it (every earlier batch of the write survived whole) and never serve the old
// records under new offsets. The keeps cover each field's edges: the base offset's last
// byte (7, 8), the length (11, 12), the epoch (15, 16), the magic (17), the CRC (18, 21), in
// both storage modes. Without the batch-map guard (batchmap.go) keeps 8–17 fail.
func TestRecycleTornHeaderServesNoOldRecord(t *testing.T) {
	for _, mode := range storageModes {
		for _, keep := range []int64{7, 8, 11, 12, 15, 16, 17, 18, 21} {
			t.Run(fmt.Sprintf("%s/keep=%d", mode, keep), func(t *testing.T) {
				tornHeaderOverRecycled(t, mode, keep)
			})
		}
	}
}

// tornHeaderFixed turns TestRecycleTornHeaderServesNoOldRecord's known-issue skip off.
const tornHeaderFixed = true

func tornHeaderOverRecycled(t *testing.T, mode StorageMode, keep int64) {
	dir := t.TempDir()
	cfg := recycleConfig(mode)
	fs := faultio.NewCrashFS(ring.Syscalls{})
	l := recycledLogIO(t, dir, cfg, fs)
	if err := l.Sync(); err != nil { // only the torn write below is unsynced
		t.Fatal(err)
	}
	s := l.active()
	base, size, end := s.baseOffset, s.size, l.EndOffset()
	first, err := validateFirst(tailOf(t, dir, base, 0))
	if err != nil {
		t.Fatal(err)
	}
	batchBytes, records := int64(first.Size()), first.LastOffset()-first.BaseOffset+1
	// The target: a batch of the next write that starts past the block direct mode padded
	// with zeros after the log's end, where the file still holds its previous life's bytes.
	torn := size + batchBytes
	for torn < alignUp(size) {
		torn += batchBytes
	}
	old := tailOf(t, dir, base, torn)
	h, err := batch.ParseHeader(old)
	if err != nil || int64(h.Size()) != batchBytes || h.LastOffset() >= base {
		t.Fatalf("no old batch of %d bytes at %d: %+v %v", batchBytes, torn, h, err)
	}
	if _, err := batch.ValidateStored(old[:batchBytes]); err != nil {
		t.Fatalf("the old batch at %d fails its CRC, the test proves less: %v", torn, err)
	}
	before := (torn - size) / batchBytes // whole new batches before the torn one
	t.Logf("log end %d, size %d, batch %d bytes of %d records, torn batch at %d, %d whole before it", end, size, batchBytes, records, torn, before)
	b := batch.NewBuilder(batch.BuilderOptions{})
	var group [][]byte
	for next := end; int64(len(group)) < before+2; {
		group = append(group, crashBatchFixed(t, b, &next, int(records)))
	}
	if _, err := l.AppendBatches(group); err != nil {
		t.Fatal(err)
	}
	path := segmentFile(dir, base, logSuffix)
	l.closeFiles() // the process dies; the power fails with the write in flight
	tear := func(file string, off int64, n int) int {
		if file != path {
			return n
		}
		return int(torn + keep - off) // whole before the torn header, nothing after its keep bytes
	}
	if err := fs.CrashTearing(tear, nil); err != nil {
		t.Fatal(err)
	}
	l, rep := openLog(t, dir, cfg, ring.Syscalls{})
	defer l.Close()
	if err := offsetRecordsErr(t, l); errors.Is(err, errOldRecord) && !tornHeaderFixed {
		// Known, not fixed yet (docs/storage.md, "Recycled segment files", "Known issue"):
		// fails for keep 8–17 in both modes without this skip.
		t.Skipf("KNOWN ISSUE (torn header over a recycled file): %v; report %+v", err, rep)
	} else if err != nil {
		t.Fatal(err)
	}
	if want := end + before*records; l.EndOffset() != want {
		t.Fatalf("recovered log ends at %d, want %d (the batches before the torn one); report %+v", l.EndOffset(), want, rep)
	}
}

// crashBatchFixed builds a batch of n records from *next whose values are fixed-width
// (appendCrashBatches's), so every such batch of n records has the same size.
func crashBatchFixed(t *testing.T, b *batch.Builder, next *int64, n int) []byte {
	t.Helper()
	b.Reset()
	for ; n > 0; n-- {
		b.Append(*next, nil, []byte(fmt.Sprintf("offset=%012d;", *next)), nil)
		*next++
	}
	bb, err := b.Build(nil)
	if err != nil {
		t.Fatal(err)
	}
	return bb
}
