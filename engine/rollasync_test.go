package engine

import (
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ringlog/ringlog/engine/batch"
	"github.com/ringlog/ringlog/ring"
	"golang.org/x/sys/unix"
)

// completeWhere completes, in queue order, the queued ops that match (and those their
// completions queue that match too), at most limit of them, and reports how many it did.
func (w *queuedWrites) completeWhere(limit int, match func(queuedWrite) bool) int {
	n := 0
	for n < limit {
		i := -1
		for k, x := range w.q {
			if match(x) {
				i = k
				break
			}
		}
		if i < 0 {
			return n
		}
		x := w.q[i]
		w.q = append(w.q[:i], w.q[i+1:]...)
		x.done(w.apply(x, x.data))
		n++
	}
	return n
}

// isRollRename matches the renames of a roll's spare files to a segment's names.
func isRollRename(x queuedWrite) bool { return x.rename != nil && x.noReplace }

// isSpareOpen matches the opens of a spare's preparation: its .log (new or a pool file's)
// and its index files.
func isSpareOpen(x queuedWrite) bool {
	if x.open == nil {
		return false
	}
	for _, suffix := range []string{logSuffix + tmpSuffix, indexSuffix + tmpSuffix, timeIndexSuffix + tmpSuffix, recycleSuffix} {
		if strings.HasSuffix(x.open.path, suffix) {
			return true
		}
	}
	return false
}

// isMapOpen matches the open of a sealed segment's batch map write.
func isMapOpen(x queuedWrite) bool {
	return x.open != nil && strings.HasPrefix(filepath.Base(x.open.path), batchMapOwnPrefix)
}

// heldRollOp matches what TestAsyncRollFiles holds in flight.
func heldRollOp(x queuedWrite) bool { return isRollRename(x) || isSpareOpen(x) || isMapOpen(x) }

// rollFilesLog opens a direct-mode log whose writes and file ops all go through qw (as the
// shard's reactor does), with a pool of recycle files (0: none).
func rollFilesLog(t *testing.T, dir string, qw *queuedWrites, recycle int, written func()) *Log {
	t.Helper()
	cfg := LogConfig{Storage: StorageDirect, SegmentBytes: 64 << 10, IndexIntervalBytes: 512,
		DirectChunkBytes: 8 << 10, RetentionBytes: 1, RecycleSegments: recycle, Logger: quietLogger}
	l, _ := openLog(t, dir, cfg, ring.Syscalls{})
	if l.Mode() != StorageDirect {
		l.Close()
		skipUnlessDirect(t, l, dir, StorageDirect)
	}
	l.SetAsyncWriter(qw, written)
	l.SetAsyncRetention(qw, func() {})
	l.SetAsyncSnapshots(qw)
	return l
}

// TestAsyncRollFiles: with a ring that opens and renames (the shard's reactor), a roll
// creates no file on the owner's thread. Its new segment's files are opened ahead, off the
// loop, once the active segment is half full (a "spare": the .log, its O_DIRECT descriptor,
// the two index files, under temporary names or a pool file's), and the roll only renames
// them to the segment's names through the ring (RENAME_NOREPLACE), the sealed segment's batch
// map written through the ring too. While those renames are held in flight the loop goes on
// serving: appends to the new segment are issued at once and complete, and every record
// below the new segment reads back; but the written end (every acknowledgement) stays at the
// new segment's base, and nothing in it counts as synced, until the renames complete. While
// the batch map's write is held, retention does not retire the sealed segment. Records
// survive a close and reopen. Both with a fresh spare and with a pool file. Fails without
// the spare (the roll creates the segment's files under their names on the loop), if a
// write or acknowledgement in the new segment comes before its file is open or its names
// are in place, or if the sealed segment retires with its map unwritten.
func TestAsyncRollFiles(t *testing.T) {
	seed := asyncSeed(t)
	for _, recycle := range []int{-1, 1} {
		name := map[int]string{-1: "fresh", 1: "recycled"}[recycle]
		t.Run(name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, uint64(40+recycle)))
			dir := t.TempDir()
			qw := &queuedWrites{fio: ring.Syscalls{}, rng: rng}
			var l *Log
			acked := int64(0)
			l = rollFilesLog(t, dir, qw, recycle, func() {
				if l.EndOffset() < acked {
					t.Fatalf("written end went back from %d to %d", acked, l.EndOffset())
				}
				acked = l.EndOffset()
				checkOnDisk(t, l, acked)
			})
			defer func() {
				if l != nil {
					qw.completeSome(10_000)
					l.Close()
				}
			}()
			held := func(queuedWrite) bool { return false }
			batchesMax := 3 // per append
			appendUntil := func(done func() bool) {
				t.Helper()
				for steps := 0; !done(); steps++ {
					if steps > 2_000 { // half a 64 KiB segment takes tens of appends
						t.Fatal("appends do not get there")
					}
					if _, err := appendCountedUpTo(t, l, rng, batchesMax); err != nil {
						t.Fatal(err)
					}
					// Complete data writes and the other file work, never a roll's own file
					// ops: those are what the test holds.
					qw.completeWhere(100, func(x queuedWrite) bool { return !held(x) })
				}
			}
			if recycle > 0 {
				// Three segments and a retention pass: a retired .log goes to the pool.
				appendUntil(func() bool { return l.SegmentCount() >= 3 })
				qw.completeSome(10_000)
				retireAll(t, l, qw)
				qw.completeSome(10_000)
				l.settlePool()
				if len(l.recyclePool) != 1 {
					t.Fatalf("pool %v after a retention pass, want one file", l.recyclePool)
				}
				// A sync's directory fsync makes the file's map name durable: the spare
				// may take it (dirsync.go; TestPoolMapNameWaitsForDirSync).
				if err := l.Sync(); err != nil {
					t.Fatal(err)
				}
			}
			if l.spare.state == spareReady {
				l.dropSpare() // made before the pool had a file
				qw.completeSome(10_000)
			}
			held = heldRollOp
			// Half a segment: the spare's first open goes out, nothing is created here. One
			// batch per append (under half a segment): the spare is prepared after an append,
			// so an append that crossed half the segment and also rolled it would roll the
			// blocking way, into the pool's file (seed 8094 did, session 15).
			batchesMax = 1
			appendUntil(func() bool { return l.spare.state == sparePreparing })
			batchesMax = 3
			active := l.active()
			wantLog := segmentPath(dir, active.baseOffset, logSuffix) + tmpSuffix
			if recycle > 0 {
				wantLog = l.spare.logPath
				if !strings.HasSuffix(wantLog, recycleSuffix) || len(l.recyclePool) != 0 {
					t.Fatalf("spare %s, pool %v: want the pool's file", wantLog, l.recyclePool)
				}
			}
			opens := 0
			for _, x := range qw.q {
				if x.open != nil {
					opens++
					if x.open.path != wantLog {
						t.Fatalf("spare's first op opens %s, want %s", x.open.path, wantLog)
					}
				}
			}
			if opens != 1 {
				t.Fatalf("%d opens in flight for the spare, want 1", opens)
			}
			if _, err := os.Stat(wantLog); recycle < 0 && !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("spare .log exists before its open completed: %v", err)
			}
			// Its four opens, one after another.
			if n := qw.completeWhere(10, isSpareOpen); n != 4 || l.spare.state != spareReady {
				t.Fatalf("spare after %d opens: state %d, want ready after 4", n, l.spare.state)
			}
			// The roll: no file created under the segment's names, renames in flight.
			before := RollFileStats()
			old := active
			appendUntil(func() bool { return l.SegmentCount() > 0 && l.active() != old })
			s := l.active()
			if RollFileStats().Spare != before.Spare+1 || !s.namesPending {
				t.Fatalf("the roll did not take the spare (stats %+v -> %+v, names pending %v)", before, RollFileStats(), s.namesPending)
			}
			for _, suffix := range []string{logSuffix, indexSuffix, timeIndexSuffix} {
				if _, err := os.Stat(segmentPath(dir, s.baseOffset, suffix)); !errors.Is(err, os.ErrNotExist) {
					t.Fatalf("new segment's %s exists with its rename in flight: %v", suffix, err)
				}
			}
			renames := 0
			for _, x := range qw.q {
				if isRollRename(x) {
					renames++
					if x.rename[0] != wantLog || x.rename[1] != segmentPath(dir, s.baseOffset, logSuffix) {
						t.Fatalf("first rename %s -> %s, want the .log's", x.rename[0], x.rename[1])
					}
				}
			}
			if renames != 1 {
				t.Fatalf("%d renames in flight, want the .log's alone (the index files' follow it)", renames)
			}
			mapWrite := old.mapWriting
			if recycle > 0 && !mapWrite {
				t.Fatal("sealed segment's batch map is not being written through the ring")
			}
			// The loop keeps serving: appends to the new segment go out and complete, the
			// old segment reads back whole, nothing of the new one is acknowledged.
			appendUntil(func() bool { return s.size > 8<<10 })
			qw.completeWhere(10_000, func(x queuedWrite) bool { return x.kind() == "write" && x.fd != -1 })
			if l.EndOffset() != s.baseOffset || acked != s.baseOffset {
				t.Fatalf("written end %d (acknowledged %d) with the new segment's names in flight, want its base %d",
					l.EndOffset(), acked, s.baseOffset)
			}
			if got := readAll(t, l, 1<<20); len(batchOffsets(t, got)) == 0 {
				t.Fatal("nothing reads back below the new segment")
			}
			var hdr [batch.HeaderSize]byte // the new segment's first batch is on disk already
			if err := preadFull(ring.Syscalls{}, s.logFd(), hdr[:], 0); err != nil {
				t.Fatalf("no append to the new segment was written while its names were in flight: %v", err)
			} else if h, err := batch.ParseHeader(hdr[:]); err != nil || h.BaseOffset != s.baseOffset {
				t.Fatalf("new segment's first batch on disk: %+v, %v; want base %d", h, err, s.baseOffset)
			}
			if s.direct.writtenPos != 0 {
				t.Fatalf("new segment counts as written up to %d", s.direct.writtenPos)
			}
			if tk, ok, err := l.BeginSync(); err != nil {
				t.Fatal(err)
			} else if ok {
				for _, c := range tk.covers {
					if c.s == s {
						t.Fatalf("a sync covers the new segment (%d bytes) with its names in flight", c.size)
					}
				}
				endSync(t, l, tk, ring.Syscalls{}, func() {})
			}
			// Retention does not retire the sealed segment while its map is written.
			if mapWrite {
				if l.segments[0] != old {
					t.Fatalf("sealed segment %d is not the first", old.baseOffset)
				}
				if l.firstRetirable(s.baseOffset) {
					t.Fatalf("retention may retire segment %d with its batch map in flight", old.baseOffset)
				}
			}
			gen := l.dirGen
			// Names in place: the written end crosses, the files are where they belong.
			qw.completeWhere(10, isRollRename)
			if l.EndOffset() != l.StagedEndOffset() && l.groups.ops == 0 {
				t.Fatalf("written end %d, staged %d: the finished writes were not acknowledged at the names' completion", l.EndOffset(), l.StagedEndOffset())
			}
			if s.namesPending || l.dirGen != gen+1 {
				t.Fatalf("names pending %v, dirGen %d -> %d after the renames", s.namesPending, gen, l.dirGen)
			}
			qw.completeSome(10_000)
			if l.EndOffset() != l.StagedEndOffset() || acked != l.EndOffset() {
				t.Fatalf("written end %d, acknowledged %d, staged %d after everything completed", l.EndOffset(), acked, l.StagedEndOffset())
			}
			for _, suffix := range []string{logSuffix, indexSuffix, timeIndexSuffix} {
				if _, err := os.Stat(segmentPath(dir, s.baseOffset, suffix)); err != nil {
					t.Fatalf("new segment's %s: %v", suffix, err)
				}
			}
			if old.mapWriting {
				t.Fatal("batch map write still marked after its completion")
			}
			if recycle > 0 {
				if _, err := os.Stat(filepath.Join(dir, batchMapName(batchMapOwnPrefix, old.inode))); err != nil {
					t.Fatalf("sealed segment's batch map: %v", err)
				}
			}
			want := readAll(t, l, 1<<20)
			end := l.EndOffset()
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			l = nil
			r, _ := openLog(t, dir, LogConfig{Storage: StorageDirect, Logger: quietLogger}, ring.Syscalls{})
			defer r.Close()
			if r.EndOffset() != end || string(readAll(t, r, 1<<20)) != string(want) {
				t.Fatalf("reopened log ends at %d, want %d, or reads differently", r.EndOffset(), end)
			}
			leftovers, _ := filepath.Glob(filepath.Join(dir, "*"+tmpSuffix))
			if len(leftovers) != 0 {
				t.Fatalf("temporary files left: %v", leftovers)
			}
		})
	}
}

// TestAsyncRollFilesKilled: a process killed (kill -9) with a roll's renames in flight —
// each rename done or not — and the new segment's writes done: its records were never
// acknowledged, and a reopen keeps every acknowledged record, leaves no spare file behind
// and serves nothing that was not appended. Seeds printed.
func TestAsyncRollFilesKilled(t *testing.T) {
	seed := asyncSeed(t)
	hit := 0
	for round := 0; round < 12; round++ {
		rng := rand.New(rand.NewPCG(seed, uint64(70+round)))
		dir := t.TempDir()
		qw := &queuedWrites{fio: ring.Syscalls{}, rng: rng}
		var l *Log
		acked := int64(0)
		l = rollFilesLog(t, dir, qw, []int{-1, 1}[round%2], func() { acked = max(acked, l.EndOffset()) })
		rolls := 2 + rng.IntN(3)
		for steps := 0; l.SegmentCount() < rolls || l.spare.names == 0; steps++ {
			if steps > 10_000 {
				t.Fatalf("round %d: no roll with its names in flight", round)
			}
			if _, err := appendCounted(t, l, rng); err != nil {
				t.Fatal(err)
			}
			if l.spare.names == 0 {
				qw.completeSome(rng.IntN(60))
			}
		}
		if l.spare.names > 0 {
			hit++
		}
		// Data writes complete, the renames are where they are; then the kill.
		qw.completeWhere(10_000, func(x queuedWrite) bool { return x.kind() == "write" && x.fd != -1 })
		qw.dieMidway()
		r, _ := openLog(t, dir, LogConfig{Storage: StorageDirect, Logger: quietLogger}, ring.Syscalls{})
		if r.EndOffset() < acked {
			t.Fatalf("round %d: reopened log ends at %d, %d were acknowledged", round, r.EndOffset(), acked)
		}
		got := batchOffsets(t, readAll(t, r, 1<<20))
		for i := 1; i < len(got); i++ {
			if got[i] <= got[i-1] {
				t.Fatalf("round %d: offsets out of order after the kill: %v", round, got)
			}
		}
		leftovers, _ := filepath.Glob(filepath.Join(dir, "*"+tmpSuffix))
		if len(leftovers) != 0 {
			t.Fatalf("round %d: spare files left: %v", round, leftovers)
		}
		r.Close()
	}
	if hit == 0 {
		t.Fatal("no round killed a roll with its names in flight")
	}
}

// TestPoolMapNameWaitsForDirSync (session 14): a retired file's preparation for the pool
// makes its recycled.<inode> map durable with the map's own fsync and no directory fsync;
// the file is taken for a spare only once a directory fsync that started after the map's
// rename completed — a sync's, or one issued for it (syncPoolDir) when two spares in a row
// find only waiting files. Fails if the preparation fsyncs the directory itself, or if a
// spare takes the file while its map's name is not yet durable (a power loss could then take the map back while
// the file's next life overwrites what the map describes: recycle.go).
func TestPoolMapNameWaitsForDirSync(t *testing.T) {
	rng := rand.New(rand.NewPCG(asyncSeed(t), 14))
	dir := t.TempDir()
	qw := &queuedWrites{fio: ring.Syscalls{}, rng: rng}
	l := rollFilesLog(t, dir, qw, 2, nil)
	defer func() {
		qw.completeSome(10_000)
		l.Close()
	}()
	isDirOp := func(x queuedWrite) bool { return x.open != nil && x.open.path == dir || x.flush && isDirFd(x.fd) }
	held := func(queuedWrite) bool { return false }
	appendUntil := func(done func() bool) {
		t.Helper()
		for steps := 0; !done(); steps++ {
			if steps > 2_000 {
				t.Fatal("appends do not get there")
			}
			if _, err := appendCounted(t, l, rng); err != nil {
				t.Fatal(err)
			}
			qw.completeWhere(100, func(x queuedWrite) bool { return !held(x) })
		}
	}
	// Retire into the pool: the checkpoint's directory fsync comes before the retirement,
	// so it cannot cover the map renamed after it.
	appendUntil(func() bool { return l.SegmentCount() >= 3 })
	qw.completeSome(10_000)
	if l.spare.state == spareReady {
		l.dropSpare() // made before the pool had a file
		qw.completeSome(10_000)
	}
	before := SyncStats()
	retireAll(t, l, qw)
	qw.completeSome(10_000)
	l.settlePool()
	after := SyncStats()
	if len(l.recyclePool) != 2 || after.PoolLog-before.PoolLog != 2 || after.PoolMapFile-before.PoolMapFile != 2 || after.PoolMapDir != before.PoolMapDir {
		t.Fatalf("pool %v; pool syncs %+v -> %+v: want 2 files, each with its .log's and its map's sync and no directory fsync", l.recyclePool, before, after)
	}
	if !l.poolWaitsForDir() {
		t.Fatal("a pool file can be taken before a directory fsync covered its map's name")
	}
	// Half a segment, directory ops held: the first spare that finds only waiting files
	// takes a new file (a retention checkpoint would cover them before the next one).
	held = isDirOp
	appendUntil(func() bool { return l.spare.state == spareReady })
	if l.spare.pooled != nil || len(l.recyclePool) != 2 || qw.completeWhere(1, isDirOp) != 0 {
		t.Fatalf("first spare %s, pool %v: want a new file, both pool files waiting, no directory op", l.spare.logPath, l.recyclePool)
	}
	old := l.active()
	appendUntil(func() bool { return l.active() != old })
	// The next one, with no directory fsync meanwhile, waits for one issued for the pool
	// and takes no new file.
	appendUntil(func() bool { return l.active().size >= int64(l.cfg.SegmentBytes)/2 })
	for range 3 {
		if _, err := appendCounted(t, l, rng); err != nil {
			t.Fatal(err)
		}
	}
	if l.spare.state != spareNone || len(l.recyclePool) != 2 || qw.completeWhere(1, isDirOp) != 1 {
		t.Fatalf("spare %d, pool %v, with the pool's directory fsync held: want no spare yet and one directory op in flight", l.spare.state, l.recyclePool)
	}
	if SyncStats().PoolMapDir != after.PoolMapDir+1 {
		t.Fatalf("pool directory fsyncs %d -> %d, want one", after.PoolMapDir, SyncStats().PoolMapDir)
	}
	if n := qw.completeWhere(10, isDirOp); n != 1 || l.poolWaitsForDir() {
		t.Fatalf("after the directory's fsync (%d ops): the pool still waits", n)
	}
	held = func(queuedWrite) bool { return false }
	appendUntil(func() bool { return l.spare.state == spareReady })
	// (A roll may come first and take the other pool file: the pool is then empty.)
	if l.spare.pooled == nil || len(l.recyclePool) > 1 {
		t.Fatalf("spare %s, pool %v: want a pool file", l.spare.logPath, l.recyclePool)
	}
	// A sync's directory fsync covers a later map too: no fsync of the pool's own.
	old = l.active()
	appendUntil(func() bool { return l.active() != old })
	qw.completeSome(10_000)
	if l.spare.state == spareReady {
		l.dropSpare()
		qw.completeSome(10_000)
	}
	retireAll(t, l, qw)
	qw.completeSome(10_000)
	l.settlePool()
	waiting := func() int {
		n := 0
		for _, f := range l.recyclePool {
			if !l.dirs.durableSince(f.dirMark) {
				n++
			}
		}
		return n
	}
	// One file or two (the retirement may take two segments, and the pool holds two):
	// each waits for a directory fsync.
	if n := waiting(); n == 0 {
		t.Fatalf("pool %v after a second retirement, %d waiting: want the retired files waiting for a directory fsync", l.recyclePool, n)
	}
	mark := SyncStats().PoolMapDir
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	if waiting() != 0 || SyncStats().PoolMapDir != mark {
		t.Fatalf("after a sync's directory fsync: pool %v, %d waiting, pool directory fsyncs %d -> %d", l.recyclePool, waiting(), mark, SyncStats().PoolMapDir)
	}
}

// isDirFd reports whether fd is an open directory.
func isDirFd(fd int) bool {
	var st unix.Stat_t
	return unix.Fstat(fd, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR
}
