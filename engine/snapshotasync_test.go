package engine

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ringlog/ringlog/engine/faultio"
	"github.com/ringlog/ringlog/ring"
)

// snapshotTestConfig rolls every ~28 batches of appendIdem's 10 records.
func snapshotTestConfig(mode StorageMode) LogConfig {
	return LogConfig{Storage: mode, SegmentBytes: 32 << 10, IndexIntervalBytes: 512, RecycleSegments: -1, Logger: quietLogger}
}

// appendUntilRoll appends producer id's batches of 10 records until the log rolls, and
// returns the next sequence.
func appendUntilRoll(t *testing.T, l *Log, id int64, seq int32) int32 {
	t.Helper()
	for n := l.SegmentCount(); l.SegmentCount() == n; {
		seq = appendIdem(t, l, id, seq, 1, 10, time.Now().UnixMilli())
	}
	return seq
}

// snapshotTemps lists the temporary snapshot files in dir.
func snapshotTemps(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var temps []string
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), producerSnapshotSuffix+tmpSuffix) {
			temps = append(temps, e.Name())
		}
	}
	return temps
}

// producersFromHeaders is the producer state the log's batches say, read from its start.
func producersFromHeaders(t *testing.T, l *Log) producerState {
	t.Helper()
	want := newProducerState()
	for data := readAll(t, l, 1<<20); len(data) > 0; {
		h, err := validateFirst(data)
		if err != nil {
			t.Fatal(err)
		}
		want.update(h)
		data = data[h.Size():]
	}
	return want
}

// checkRecoveredProducers checks a recovered log's producer state against its batches'
// headers read from the start: every producer it holds is as the headers say, its batches
// the newest of theirs (a snapshot never claims state the log does not hold; batches before
// where a recovery started reading may be forgotten), and every producer with a batch at or
// after where recovery started reading (the snapshot it used, or the second-to-last
// segment's base without one) is there. Producers seen only before that may be missing: a
// recovery without a snapshot forgets them by design (producersnapshot.go), and the snapshots
// written after it carry that on.
func checkRecoveredProducers(t *testing.T, l *Log, rep RecoveryReport) error {
	t.Helper()
	want := producersFromHeaders(t, l)
	from := rep.ProducerSnapshot
	if from < 0 {
		from = l.segments[max(0, len(l.segments)-2)].baseOffset
	}
	for id, e := range l.producers.producers {
		w := want.producers[id]
		if w == nil || e.epoch != w.epoch || e.lastTimestamp != w.lastTimestamp || len(e.batches) > len(w.batches) ||
			fmt.Sprint(e.batches) != fmt.Sprint(w.batches[len(w.batches)-len(e.batches):]) {
			return fmt.Errorf("recovered producer %d as %+v, the log's headers say %v", id, *e, w)
		}
	}
	for id, w := range want.producers {
		if w.batches[len(w.batches)-1].lastOffset >= from && l.producers.producers[id] == nil {
			return fmt.Errorf("producer %d (last batch %+v, at or after %d where recovery started) was not recovered", id, w.batches[len(w.batches)-1], from)
		}
	}
	return nil
}

// TestAsyncSnapshotDoesNotWait: with asynchronous file ops a roll returns with its producer
// snapshot's write in flight and waits for nothing; the write, then the rename, run one
// after the other; the snapshot exists under its name, and joins the log's books (the next
// sync's to flush), only after the rename; a roll meanwhile starts no second one; the
// snapshot holds the state as of the new segment's base. TruncateTo and Close with a
// snapshot in flight wait for it and leave no snapshot beyond the log end and no temporary
// file.
func TestAsyncSnapshotDoesNotWait(t *testing.T) {
	seed := asyncSeed(t)
	for _, mode := range storageModes {
		t.Run(string(mode), func(t *testing.T) {
			dir := t.TempDir()
			qw := &countingWrites{queuedWrites: &queuedWrites{fio: ring.Syscalls{}, rng: rand.New(rand.NewPCG(seed, 21))}}
			l, _ := openLog(t, dir, snapshotTestConfig(mode), ring.Syscalls{})
			defer l.Close()
			l.SetAsyncSnapshots(qw)
			seq := appendUntilRoll(t, l, 1, 0)
			base := l.segments[1].baseOffset
			final := producerSnapshotPath(dir, base)
			for step, want := range []string{"open", "write", "rename"} {
				if qw.awaits != 0 {
					t.Fatalf("step %d: the roll waited for its snapshot (%d AwaitWrites)", step, qw.awaits)
				}
				if len(qw.q) != 1 || qw.q[0].kind() != want {
					t.Fatalf("step %d: %d ops in flight, want one: the snapshot's %s", step, len(qw.q), want)
				}
				if !l.SnapshotPending() || l.unsyncedSnapshot >= 0 || len(l.snapshots) != 0 {
					t.Fatalf("step %d: pending %v, unsynced %d, books %v before the rename", step, l.SnapshotPending(), l.unsyncedSnapshot, l.snapshots)
				}
				if _, err := os.Stat(final); !os.IsNotExist(err) {
					t.Fatalf("step %d: %s exists (%v) before its rename", step, final, err)
				}
				if temps := snapshotTemps(t, dir); len(temps) != min(step, 1) {
					t.Fatalf("step %d: temporary files %v, want the snapshot's once its open completed", step, temps)
				}
				if step == 0 { // a roll with the write in flight starts no second snapshot
					seq = appendUntilRoll(t, l, 1, seq)
					if l.SnapshotsSkipped() != 1 || len(qw.q) != 1 {
						t.Fatalf("a roll with a snapshot in flight: %d skipped, %d ops in flight", l.SnapshotsSkipped(), len(qw.q))
					}
				}
				qw.completeOne()
			}
			if l.SnapshotPending() || len(qw.q) != 0 || l.unsyncedSnapshot != base || fmt.Sprint(l.snapshots) != fmt.Sprint([]int64{base}) {
				t.Fatalf("after the rename: pending %v, %d ops, unsynced %d, books %v; want snapshot %d", l.SnapshotPending(), len(qw.q), l.unsyncedSnapshot, l.snapshots, base)
			}
			ps, off, err := readProducerSnapshot(final)
			if err != nil || off != base {
				t.Fatalf("snapshot %s: offset %d, %v", final, off, err)
			}
			if e := ps.producers[1]; e == nil || e.batches[len(e.batches)-1].lastOffset != base-1 {
				t.Fatalf("snapshot at %d holds %v: want producer 1's batches up to %d", base, producerInfos(&ps), base-1)
			}
			if err := l.Sync(); err != nil || l.durableSnapshot != base {
				t.Fatalf("sync: %v; durable snapshot %d, want %d", err, l.durableSnapshot, base)
			}

			// TruncateTo below a snapshot in flight: it completes first, then goes.
			seq = appendUntilRoll(t, l, 1, seq)
			inFlight := l.active().baseOffset
			if !l.SnapshotPending() {
				t.Fatal("no snapshot in flight")
			}
			if err := l.TruncateTo(inFlight - 5); err != nil {
				t.Fatal(err)
			}
			if l.SnapshotPending() || len(qw.q) != 0 || len(snapshotTemps(t, dir)) != 0 {
				t.Fatalf("after TruncateTo: pending %v, %d ops, temporary files %v", l.SnapshotPending(), len(qw.q), snapshotTemps(t, dir))
			}
			snaps, _ := listProducerSnapshots(dir)
			if len(snaps) == 0 || snaps[len(snaps)-1] > l.EndOffset() {
				t.Fatalf("snapshots %v after a truncation to %d", snaps, l.EndOffset())
			}
			want := producersFromHeaders(t, l)
			if got, exp := encodeProducerSnapshot(&l.producers, 0), encodeProducerSnapshot(&want, 0); string(got) != string(exp) {
				t.Fatalf("producer state after TruncateTo %v, the headers say %v", producerInfos(&l.producers), producerInfos(&want))
			}

			// Close with a snapshot in flight: it completes, Close writes its own.
			appendUntilRoll(t, l, 2, 0)
			if !l.SnapshotPending() {
				t.Fatal("no snapshot in flight")
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			if len(qw.q) != 0 || len(snapshotTemps(t, dir)) != 0 {
				t.Fatalf("after Close: %d ops, temporary files %v", len(qw.q), snapshotTemps(t, dir))
			}
			l2, rep := openLog(t, dir, snapshotTestConfig(mode), ring.Syscalls{})
			defer l2.Close()
			if rep.ProducerSnapshot != l2.EndOffset() || rep.ProducerBatchesScanned != 0 || rep.Producers != 2 {
				t.Fatalf("after a clean close: %+v, want the close snapshot at %d, 2 producers, nothing read", rep, l2.EndOffset())
			}
		})
	}
}

// TestAsyncSnapshotCrash: kill -9 and power loss (faultio.CrashFS) at random points of a log
// that rolls, syncs and truncates with its producer snapshots' writes and renames in flight
// (each lost, applied, or, for a write, applied in part): the reopened log holds every record
// reported written (kill -9) or synced (power loss), and its producer state agrees with its
// batches' headers (checkRecoveredProducers): no snapshot claims state the log does not
// hold, and a lost or partial one falls back to an older one or to the headers.
//
// Two kinds of crash are not left to chance: every round with round%4 == 1 ends with a
// roll's snapshot in flight, every round with round%4 == 3 with a pruned snapshot's unlink
// in flight (both queued on qw, which is the log's ring here: SetAsyncSnapshots routes the
// fileJobs to it), the unlink applied but unreported in rounds 3 and 11 and lost in round 7,
// and a kill -9 there must recover from the newest snapshot in place (a prune that unlinked
// the wrong one fails it). The guards require those deterministic
// crashes; what the random rounds hit besides is counted. The appends' timestamps count up
// from one clock reading, so that a seed replays the same rounds (wall-clock timestamps
// moved the time index's writes, and with them CrashFS's draws, run to run).
func TestAsyncSnapshotCrash(t *testing.T) {
	seed := asyncSeed(t)
	for _, mode := range storageModes {
		for _, powerLoss := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/powerloss=%v", mode, powerLoss), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(seed, 23))
				dir := t.TempDir()
				cfg := snapshotTestConfig(mode)
				clock := time.Now().UnixMilli()
				tick := func() int64 { clock++; return clock }
				// Crashes with a snapshot in flight; with a pruned snapshot's unlink in flight;
				// recoveries that did not use the newest.
				inFlight, pruning, fellBack := 0, 0, 0
				const rounds = 12
				for round := 0; round < rounds; round++ {
					fs := faultio.NewCrashFS(ring.Syscalls{})
					if err := fs.TrackDir(dir); err != nil {
						t.Fatal(err)
					}
					l, _ := openLog(t, dir, cfg, fs)
					skipUnlessDirect(t, l, dir, mode)
					qw := &queuedWrites{fio: fs, rng: rng}
					l.SetAsyncSnapshots(qw)
					// Fresh producer ids per round: each starts at sequence 0.
					ids := [2]int64{int64(1000 * round), int64(1000*round + 1)}
					var seq [2]int32
					for i, n := 0, 20+rng.IntN(80); i < n; i++ {
						p := rng.IntN(2)
						seq[p] = appendIdem(t, l, ids[p], seq[p], 1, 1+rng.IntN(10), tick())
						switch rng.IntN(10) {
						case 0:
							if err := l.Sync(); err != nil {
								t.Fatal(err)
							}
						case 1, 2:
							qw.completeSome(1)
						case 3:
							if rng.IntN(6) == 0 && l.EndOffset() > l.StartOffset() {
								if err := l.TruncateTo(l.StartOffset() + rng.Int64N(l.EndOffset()-l.StartOffset())); err != nil {
									t.Fatal(err)
								}
								ids[0], ids[1], seq = ids[0]+2, ids[1]+2, [2]int32{} // sequences restart with new ids
							}
						}
						mustInvariants(t, l)
					}
					switch round % 4 {
					case 1:
						seq[0] = snapshotInFlight(t, l, ids[0], seq[0], tick)
					case 3:
						seq[0] = pruneInFlight(t, l, qw, ids[0], seq[0], tick)
						// The unlink reached the directory, its completion not the log (rounds
						// 3, 11), or it is lost (round 7): neither left to dieMidway's draw.
						qw.settleUnreported("unlink", round%8 == 3)
					}
					written, synced := l.EndOffset(), l.SyncedOffset()
					newest := int64(-1)
					if n := len(l.snapshots); n > 0 {
						newest = l.snapshots[n-1]
					}
					snapshotting, pruned := l.SnapshotPending(), l.FileJobsPending() > 0
					if snapshotting {
						inFlight++
						newest = l.snapshot.offset
					}
					if pruned {
						pruning++
					}
					qw.dieMidway()
					l.closeFiles()
					want := written
					if powerLoss {
						if err := fs.Crash(rng); err != nil {
							t.Fatal(err)
						}
						want = synced
					}
					l2, rep := openLog(t, dir, cfg, ring.Syscalls{})
					if l2.EndOffset() < want || !powerLoss && l2.EndOffset() != written {
						t.Fatalf("round %d: log ends at %d; written %d, synced %d (report %+v)", round, l2.EndOffset(), written, synced, rep)
					}
					if err := checkRecoveredProducers(t, l2, rep); err != nil {
						names, _ := filepath.Glob(filepath.Join(dir, "*.snapshot*"))
						t.Fatalf("round %d: %v (recovery %+v, snapshot files %v)", round, err, rep, names)
					}
					if rep.ProducerSnapshot > l2.EndOffset() {
						t.Fatalf("round %d: recovery used snapshot %d beyond the end %d", round, rep.ProducerSnapshot, l2.EndOffset())
					}
					if pruned && !snapshotting && !powerLoss && rep.ProducerSnapshot != newest {
						names, _ := filepath.Glob(filepath.Join(dir, "*.snapshot*"))
						t.Fatalf("round %d: kill -9 with a pruned snapshot's unlink in flight: recovery used snapshot %d, want the newest in place %d (snapshot files %v)",
							round, rep.ProducerSnapshot, newest, names)
					}
					if rep.ProducerSnapshot != newest {
						fellBack++
					}
					if err := l2.Close(); err != nil {
						t.Fatal(err)
					}
				}
				if forced := rounds / 4; inFlight < forced || pruning < forced {
					t.Fatalf("crashes with a snapshot in flight %d, with a pruned snapshot's unlink in flight %d; want at least %d of each (the rounds that make one)",
						inFlight, pruning, forced)
				}
				t.Logf("crashes with a snapshot in flight %d, with a pruned snapshot's unlink in flight %d; recoveries that did not start from the newest snapshot %d",
					inFlight, pruning, fellBack)
			})
		}
	}
}

// settleUnreported takes the ops of kind off w's queue, as a crash finds them: applied
// without their completions reported (apply), or lost.
func (w *queuedWrites) settleUnreported(kind string, apply bool) {
	q := w.q[:0]
	for _, x := range w.q {
		switch {
		case x.kind() != kind:
			q = append(q, x)
		case apply:
			w.apply(x, x.data)
		}
	}
	w.q = q
}

// driveStepsMax bounds snapshotInFlight's and pruneInFlight's loops: each needs a few rolls.
const driveStepsMax = 64

// snapshotInFlight appends producer id's batches until a roll's snapshot is in flight (a
// roll starts one when none is), and returns the next sequence.
func snapshotInFlight(t *testing.T, l *Log, id int64, seq int32, tick func() int64) int32 {
	t.Helper()
	for step := 0; !l.SnapshotPending(); step++ {
		if step == driveStepsMax {
			t.Fatalf("no snapshot in flight after %d rolls", step)
		}
		for n := l.SegmentCount(); l.SegmentCount() == n; {
			seq = appendIdem(t, l, id, seq, 1, 10, tick())
		}
	}
	return seq
}

// pruneInFlight drives l until a pruned snapshot's unlink is queued on qw and returns
// producer id's next sequence: it completes qw's ops one at a time (a snapshot's rename
// prunes the oldest once more than producerSnapshotsKept are in place and a sync covered a
// newer one, queuing its unlink), syncs, and rolls (each roll starts a snapshot).
func pruneInFlight(t *testing.T, l *Log, qw *queuedWrites, id int64, seq int32, tick func() int64) int32 {
	t.Helper()
	for step := 0; l.FileJobsPending() == 0; step++ {
		if step == driveStepsMax {
			t.Fatalf("no pruned snapshot's unlink in flight after %d steps (snapshots %v, durable %d)", step, l.snapshots, l.durableSnapshot)
		}
		switch {
		case len(qw.q) > 0:
			qw.completeOne()
		case step%2 == 0:
			if err := l.Sync(); err != nil {
				t.Fatal(err)
			}
		default:
			for n := l.SegmentCount(); l.SegmentCount() == n; {
				seq = appendIdem(t, l, id, seq, 1, 10, tick())
			}
		}
	}
	return seq
}
