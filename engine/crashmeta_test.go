package engine

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/ringlog/ringlog/engine/batch"
	"github.com/ringlog/ringlog/engine/faultio"
	"github.com/ringlog/ringlog/ring"
	"golang.org/x/sys/unix"
)

// metaCrashSeeds is how many random crashes each fsync point of a metadata write gets.
const metaCrashSeeds = 4

// crashPoints runs work once to count its fsyncs, then once more per fsync point (and once
// past the last, a power loss right after work returned), each time from a fresh directory
// made by setup, with the power failing at that fsync; check gets the disk image and work's
// error.
func crashPoints(t *testing.T, rng *rand.Rand, seeds int, setup func(dir string), work func(dir string, fio ring.FileIO) error,
	check func(image string, at int, workErr error)) {
	t.Helper()
	count := faultio.NewCrashFS(ring.Syscalls{})
	dir := filepath.Join(t.TempDir(), "d")
	os.Mkdir(dir, 0o755)
	setup(dir)
	if err := work(dir, count); err != nil {
		t.Fatal(err)
	}
	total := count.Syncs()
	for at := 1; at <= total+1; at++ {
		for range seeds {
			root := t.TempDir()
			dir := filepath.Join(root, "d")
			os.Mkdir(dir, 0o755)
			setup(dir)
			fs := faultio.NewCrashFS(ring.Syscalls{})
			if err := fs.TrackDir(dir); err != nil {
				t.Fatal(err)
			}
			fs.CrashAtSync, fs.CrashRand, fs.CrashImage = at, rng, filepath.Join(root, "image")
			err := work(dir, fs)
			if at > total {
				if err != nil {
					t.Fatal(err)
				}
				fd, oerr := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
				if oerr != nil {
					t.Fatal(oerr)
				}
				ferr := fs.Fsync(fd) // the power loss
				unix.Close(fd)
				if !errors.Is(ferr, faultio.ErrCrashed) {
					t.Fatalf("power loss after the last fsync: %v", ferr)
				}
			}
			check(fs.CrashImage, at, err)
		}
	}
}

// powerLossSeed seeds a power-loss test's random crash images (which unsynced writes
// survive): the process id, or RINGLOG_POWERLOSS_SEED to replay a failed run. It is
// logged, so a failure says how to replay it.
func powerLossSeed(t *testing.T) uint64 {
	seed := uint64(os.Getpid())
	if v, err := strconv.ParseUint(os.Getenv("RINGLOG_POWERLOSS_SEED"), 10, 64); err == nil {
		seed = v
	}
	t.Logf("seed %d (RINGLOG_POWERLOSS_SEED replays it)", seed)
	return seed
}

// TestCatalogPowerLoss: a power loss at any fsync of a catalog change leaves the catalog
// exactly as before or exactly as after it, readable, and after it once the change returned.
func TestCatalogPowerLoss(t *testing.T) {
	rng := rand.New(rand.NewPCG(powerLossSeed(t), 5))
	initial := func(dir string) {
		c, err := LoadCatalog(dir)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Create("a", 2, nil, nil, 1); err != nil {
			t.Fatal(err)
		}
		if err := c.Create("b", 1, map[string]string{ConfigRetentionMs: "1"}, nil, 1); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name   string
		change func(c *Catalog) error
		after  []string
	}{
		{"create", func(c *Catalog) error { return c.Create("c", 3, nil, nil, 1) }, []string{"a:2:", "b:1:1", "c:3:"}},
		{"delete", func(c *Catalog) error { return c.Delete("b") }, []string{"a:2:"}},
		{"set config", func(c *Catalog) error { return c.SetConfig("a", map[string]string{ConfigRetentionMs: "7"}) }, []string{"a:2:7", "b:1:1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := []string{"a:2:", "b:1:1"}
			seen := map[string]int{}
			crashPoints(t, rng, metaCrashSeeds, initial, func(dir string, fio ring.FileIO) error {
				c, err := OpenCatalog(dir, fio)
				if err != nil {
					return err
				}
				return tc.change(c)
			}, func(image string, at int, workErr error) {
				c, err := LoadCatalog(image)
				if err != nil {
					t.Fatalf("crash at fsync %d: catalog unreadable: %v", at, err)
				}
				var got []string
				for _, n := range c.Names() {
					tm, _ := c.Topic(n)
					got = append(got, fmt.Sprintf("%s:%d:%s", n, tm.Partitions, tm.Config[ConfigRetentionMs]))
				}
				switch {
				case reflect.DeepEqual(got, before):
					if workErr == nil {
						t.Fatalf("crash at fsync %d: the change returned success but was lost: %v", at, got)
					}
					seen["before"]++
				case reflect.DeepEqual(got, tc.after):
					seen["after"]++
				default:
					t.Fatalf("crash at fsync %d: catalog %v is neither %v nor %v", at, got, before, tc.after)
				}
			})
			if seen["before"] == 0 || seen["after"] == 0 {
				t.Fatalf("outcomes %v: want both", seen)
			}
		})
	}
}

// TestStartOffsetPowerLoss: a power loss at any fsync of DeleteRecordsBefore or of a
// retention pass leaves a log that recovers, starts at the old or the new start offset (the
// new one once the call returned), and holds every synced record from there on.
func TestStartOffsetPowerLoss(t *testing.T) {
	rng := rand.New(rand.NewPCG(powerLossSeed(t), 6))
	cfg := LogConfig{SegmentBytes: 2 << 10, IndexIntervalBytes: 256, Logger: quietLogger}
	var end, oldStart int64
	setup := func(dir string) {
		l, _ := openLog(t, dir, cfg, ring.Syscalls{})
		for i := 0; l.SegmentCount() < 6; i++ {
			if _, err := l.Append(makeBatch(t, i, 3, 100, 0)); err != nil {
				t.Fatal(err)
			}
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		end, oldStart = l.EndOffset(), l.StartOffset()
	}
	for _, tc := range []struct {
		name string
		run  func(l *Log) (newStart int64, err error)
	}{
		{"delete records mid-segment", func(l *Log) (int64, error) {
			to := l.segments[2].baseOffset + 1
			_, err := l.DeleteRecordsBefore(to)
			return to, err
		}},
		{"retention", func(l *Log) (int64, error) {
			l.cfg.RetentionBytes = l.Size() / 2
			_, err := l.EnforceRetention(time.Now())
			return l.StartOffset(), err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var newStart int64
			seen := map[string]int{}
			crashPoints(t, rng, metaCrashSeeds, setup, func(dir string, fio ring.FileIO) error {
				l, _, err := OpenLog(dir, cfg, fio)
				if err != nil {
					return err
				}
				defer l.closeFiles() // the process dies
				start, err := tc.run(l)
				if err == nil {
					newStart = start
				}
				return err
			}, func(image string, at int, workErr error) {
				l, rep, err := OpenLog(image, cfg, ring.Syscalls{})
				if err != nil {
					t.Fatalf("crash at fsync %d: reopen: %v", at, err)
				}
				defer l.Close()
				switch l.StartOffset() {
				case oldStart:
					if workErr == nil {
						t.Fatalf("crash at fsync %d: start offset %d lost after the call returned", at, newStart)
					}
					seen["before"]++
				case newStart:
					seen["after"]++
				default:
					t.Fatalf("crash at fsync %d: start %d, want %d or %d (report %+v)", at, l.StartOffset(), oldStart, newStart, rep)
				}
				if l.EndOffset() != end {
					t.Fatalf("crash at fsync %d: log ends at %d, want %d (report %+v)", at, l.EndOffset(), end, rep)
				}
				offsets := batchOffsets(t, readAll(t, l, 1<<20))
				if len(offsets) == 0 || offsets[len(offsets)-1] >= end || !slices.IsSorted(offsets) {
					t.Fatalf("crash at fsync %d: batches %v", at, offsets)
				}
			})
			if seen["after"] == 0 {
				t.Fatalf("outcomes %v: the new start offset never survived", seen)
			}
		})
	}
}

// TestCatalogSaveFailureKeepsOldFile: when the directory fsync after the rename fails, the
// catalog on disk is put back to what the caller still sees.
func TestCatalogSaveFailureKeepsOldFile(t *testing.T) {
	dir := t.TempDir()
	fio := faultio.New(ring.Syscalls{})
	c, err := OpenCatalog(dir, fio)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Create("a", 1, nil, nil, 1); err != nil {
		t.Fatal(err)
	}
	// Save = fsync of the temp file, then of the directory: fail the second only.
	fio.Inject(faultio.Rule{Op: faultio.OpFsync, Errno: unix.EIO, After: 1, Times: 1})
	if err := c.Create("b", 1, nil, nil, 1); !errors.Is(err, unix.EIO) {
		t.Fatalf("create with failing dir fsync: %v", err)
	}
	disk, err := LoadCatalog(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := disk.Names(); !reflect.DeepEqual(got, []string{"a"}) || !reflect.DeepEqual(c.Names(), got) {
		t.Fatalf("on disk %v, in memory %v; want [a] both", got, c.Names())
	}
}

// TestCatalogSweep: Sweep removes partition directories no catalog entry names, committed
// removals and the temp file, and leaves everything else alone.
func TestCatalogSweep(t *testing.T) {
	dir := t.TempDir()
	c, _ := LoadCatalog(dir)
	if err := c.Create("a", 2, nil, nil, 1); err != nil {
		t.Fatal(err)
	}
	mk := func(name string, files ...string) {
		os.Mkdir(filepath.Join(dir, name), 0o755)
		for _, f := range files {
			if err := os.WriteFile(filepath.Join(dir, name, f), nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	seg := "00000000000000000000.log"
	mk("a-0", seg)
	mk("a-1", seg, "00000000000000000000.index", cleanShutdownFileName)
	mk("a-2", seg)                                                          // past the partition count
	mk("b-0", seg, startOffsetFileName, "00000000000000000007.log.deleted", // topic not in catalog
		"00000000000000000003.log.recycle") // a retired file kept for reuse (recycle.go)
	mk("b-1")                   // empty
	mk("c-0", seg, "notes.txt") // not only log files: kept
	mk("d-0.deleting", seg)     // committed removal
	mk("lost+found")
	mk("backup-x", seg) // not a partition name
	os.WriteFile(filepath.Join(dir, catalogFileName+tmpSuffix), []byte("{"), 0o644)
	removed, err := c.Sweep()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(removed)
	want := []string{"a-2", "b-0", "b-1", "catalog.json.tmp", "d-0.deleting"}
	if !reflect.DeepEqual(removed, want) {
		t.Fatalf("removed %v, want %v", removed, want)
	}
	entries, _ := os.ReadDir(dir)
	var left []string
	for _, e := range entries {
		left = append(left, e.Name())
	}
	if wantLeft := []string{"a-0", "a-1", "backup-x", "c-0", "catalog.json", "lost+found"}; !reflect.DeepEqual(left, wantLeft) {
		t.Fatalf("left %v, want %v", left, wantLeft)
	}
}

// TestRollPowerLoss: appends that roll segments, each followed by a Sync, with the power
// failing at every fsync they issue (segment data, new directory entries): the log recovers,
// keeps every record that was synced when the power failed, and is one contiguous run of
// valid records.
func TestRollPowerLoss(t *testing.T) {
	rng := rand.New(rand.NewPCG(powerLossSeed(t), 8))
	cfg := LogConfig{SegmentBytes: 1 << 10, IndexIntervalBytes: 256, Logger: quietLogger}
	var setupEnd, synced int64
	setup := func(dir string) {
		l, _ := openLog(t, dir, cfg, ring.Syscalls{})
		appendCrashRecords(t, l, 10)
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		setupEnd = l.EndOffset()
	}
	crashPoints(t, rng, 1, setup, func(dir string, fio ring.FileIO) error {
		l, _, err := OpenLog(dir, cfg, fio)
		if err != nil {
			return err
		}
		defer l.closeFiles() // the process dies
		defer func() { synced = l.SyncedOffset() }()
		for i := 0; i < 4; i++ {
			appendCrashRecords(t, l, 12) // about one segment
			if err := l.Sync(); err != nil {
				return err
			}
		}
		if l.SegmentCount() < 3 {
			t.Fatalf("only %d segments: the test rolls too little", l.SegmentCount())
		}
		return nil
	}, func(image string, at int, workErr error) {
		verifyPowerLoss(t, image, cfg, at, synced, setupEnd, synced > setupEnd)
	})
}

// appendCrashRecords appends n records whose values encode their offsets, one per batch.
func appendCrashRecords(t *testing.T, l *Log, n int) {
	t.Helper()
	b := batch.NewBuilder(batch.BuilderOptions{})
	for i := 0; i < n; i++ {
		b.Reset()
		b.Append(l.EndOffset(), nil, crashValue(l.EndOffset()), nil)
		bb, err := b.Build(nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.Append(bb); err != nil {
			t.Fatal(err)
		}
	}
}
