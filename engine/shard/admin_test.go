package shard

import (
	"errors"
	"fmt"
	"github.com/ringlog/ringlog/engine/group"
	"log/slog"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ringlog/ringlog/engine"
	"github.com/ringlog/ringlog/engine/faultio"
	"github.com/ringlog/ringlog/ring"
	"golang.org/x/sys/unix"
)

// faultBroker opens a broker whose shard file I/O (and catalog file I/O, index -1 in the
// returned map) go through faultio wrappers.
func faultBroker(t *testing.T, dir string, shards int) (*Broker, map[int]*faultio.FileIO) {
	t.Helper()
	fios := map[int]*faultio.FileIO{}
	b, err := Open(Config{DataDir: dir, Shards: shards, Ring: ring.Config{Backend: "syscall"},
		RetentionCheckInterval: time.Hour, FlushCheckInterval: time.Hour, Logger: quietLogger(),
		WrapFileIO: func(shard int, fio ring.FileIO) ring.FileIO {
			f := faultio.New(fio)
			fios[shard] = f
			return f
		}})
	if err != nil {
		t.Fatalf("open broker: %v", err)
	}
	return b, fios
}

// topicLeftovers lists what of topic is on disk: partition directories and catalog entry.
func topicLeftovers(t *testing.T, dir, topic string) []string {
	t.Helper()
	var out []string
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), topic+"-") || strings.HasSuffix(e.Name(), ".tmp") {
			out = append(out, e.Name())
		}
	}
	cat, err := engine.LoadCatalog(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := cat.Topic(topic); ok {
		out = append(out, "catalog entry")
	}
	return out
}

// TestCreateTopicFailsWhole: creating a 200-partition topic fails at partition ~150 (the
// directory fsync of one shard fails, as an fd limit or a full disk would); nothing of the
// topic stays in metadata, catalog or on disk, the create can be retried, and a restart
// serves the retried topic. The same when the catalog write, the commit point, fails.
func TestCreateTopicFailsWhole(t *testing.T) {
	for _, tc := range []struct {
		name       string
		partitions int
		shard      int // whose file I/O fails
		rule       faultio.Rule
	}{
		// Each new partition fsyncs the data directory and its own: shard 0 holds 100
		// partitions, so its 151st fsync is in its 76th partition.
		{"partition dir fsync", 200, 0, faultio.Rule{Op: faultio.OpFsync, Errno: unix.EMFILE, After: 150}},
		{"catalog fsync", 20, -1, faultio.Rule{Op: faultio.OpFsync, Errno: unix.EIO}},
	} {
		partitions := tc.partitions
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			b, fios := faultBroker(t, dir, 2)
			fios[tc.shard].Inject(tc.rule)
			err := b.CreateTopic("big", partitions, nil)
			if err == nil || !errors.Is(err, tc.rule.Errno) {
				t.Fatalf("create with failing %s: %v", tc.rule.Op, err)
			}
			if fios[tc.shard].Injected(tc.rule.Op) == 0 {
				t.Fatal("the fault was never hit")
			}
			if b.Topic("big") != nil {
				t.Fatal("failed create left the topic in metadata")
			}
			if left := topicLeftovers(t, dir, "big"); len(left) > 0 {
				t.Fatalf("failed create left %v", left)
			}
			if err := b.DeleteTopic("big"); !errors.Is(err, ErrUnknownTopicOrPartition) {
				t.Fatalf("delete after failed create: %v", err)
			}
			fios[tc.shard].Clear()
			if err := b.CreateTopic("big", partitions, nil); err != nil {
				t.Fatalf("retried create: %v", err)
			}
			if r := produce(t, b, TopicPartition{"big", int32(partitions - 1)}, AcksAll, buildBatch(t, "x", 3)); r.Err != nil {
				t.Fatal(r.Err)
			}
			if err := b.Close(); err != nil {
				t.Fatal(err)
			}
			b = openBroker(t, dir, "syscall", 2)
			defer b.Close()
			if got := b.Topic("big"); got == nil || len(got.Partitions) != partitions {
				t.Fatalf("after restart: topic %+v", got)
			}
		})
	}
}

// TestDeleteTopicCatalogFailure: when the catalog write (the commit point) fails, the
// topic stays whole and usable.
func TestDeleteTopicCatalogFailure(t *testing.T) {
	dir := t.TempDir()
	b, fios := faultBroker(t, dir, 2)
	defer b.Close()
	if err := b.CreateTopic("keep", 4, nil); err != nil {
		t.Fatal(err)
	}
	tp := TopicPartition{"keep", 3}
	if r := produce(t, b, tp, AcksAll, buildBatch(t, "a", 2)); r.Err != nil {
		t.Fatal(r.Err)
	}
	fios[-1].Inject(faultio.Rule{Op: faultio.OpFsync, Errno: unix.EIO})
	if err := b.DeleteTopic("keep"); !errors.Is(err, unix.EIO) {
		t.Fatalf("delete with failing catalog: %v", err)
	}
	fios[-1].Clear()
	if b.Topic("keep") == nil {
		t.Fatal("failed delete removed the topic from metadata")
	}
	if r := produce(t, b, tp, AcksAll, buildBatch(t, "b", 2)); r.Err != nil || r.BaseOffset != 2 {
		t.Fatalf("produce after failed delete: %+v", r)
	}
	if err := b.DeleteTopic("keep"); err != nil {
		t.Fatal(err)
	}
	if left := topicLeftovers(t, dir, "keep"); len(left) > 0 {
		t.Fatalf("delete left %v", left)
	}
}

// TestAlterConfigFailsWhole: when reopening one partition with the new config fails, or
// the catalog write fails, every partition serves under the old config again, and so does
// a restart.
func TestAlterConfigFailsWhole(t *testing.T) {
	for _, tc := range []struct {
		name  string
		shard int
		rule  faultio.Rule
	}{
		// Reopening a partition re-reads its log: one failed read fails that reopen.
		{"partition reopen", 0, faultio.Rule{Op: faultio.OpPread, Errno: unix.EIO, After: 3, Times: 1}},
		{"catalog fsync", -1, faultio.Rule{Op: faultio.OpFsync, Errno: unix.EIO}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			b, fios := faultBroker(t, dir, 2)
			old := map[string]string{engine.ConfigSegmentBytes: "1048576"}
			if err := b.CreateTopic("cfg", 8, old); err != nil {
				t.Fatal(err)
			}
			for p := int32(0); p < 8; p++ {
				if r := produce(t, b, TopicPartition{"cfg", p}, AcksAll, buildBatch(t, "v", 4)); r.Err != nil {
					t.Fatal(r.Err)
				}
			}
			fios[tc.shard].Inject(tc.rule)
			err := b.AlterTopicConfig("cfg", map[string]string{engine.ConfigSegmentBytes: "2097152"}, nil)
			if !errors.Is(err, tc.rule.Errno) {
				t.Fatalf("alter with failing %s: %v", tc.rule.Op, err)
			}
			fios[tc.shard].Clear()
			if got := b.Topic("cfg").Config; !maps.Equal(got, old) {
				t.Fatalf("metadata config after failed alter: %v", got)
			}
			_, states, err := b.DescribeTopic("cfg")
			if err != nil {
				t.Fatalf("describe after failed alter: %v", err)
			}
			for _, st := range states {
				if st.LogEndOffset != 4 || st.Err != "" {
					t.Fatalf("partition %d after failed alter: %+v", st.Partition, st)
				}
				if r := produce(t, b, TopicPartition{"cfg", st.Partition}, AcksAll, buildBatch(t, "w", 1)); r.Err != nil {
					t.Fatalf("produce to %d after failed alter: %v", st.Partition, r.Err)
				}
			}
			if err := b.Close(); err != nil {
				t.Fatal(err)
			}
			b = openBroker(t, dir, "syscall", 2)
			defer b.Close()
			if got := b.Topic("cfg").Config; !maps.Equal(got, old) {
				t.Fatalf("config after restart: %v", got)
			}
		})
	}
}

func quietLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// adminOp is one admin operation run against a prepared broker (topics "base" with 2
// partitions holding acknowledged records, and "gone" to delete).
type adminOp struct {
	name string
	run  func(b *Broker) error
	// before and after are the catalog states the operation moves between (topic ->
	// partition count and one config value); a crash must leave one of them.
	before, after map[string]string
}

var crashOps = []adminOp{
	{
		name: "create",
		run: func(b *Broker) error {
			return b.CreateTopic("fresh", 3, map[string]string{engine.ConfigRetentionMs: "1000"})
		},
		before: map[string]string{"base": "2/", "gone": "2/"},
		after:  map[string]string{"base": "2/", "gone": "2/", "fresh": "3/1000"},
	},
	{
		name:   "delete",
		run:    func(b *Broker) error { return b.DeleteTopic("gone") },
		before: map[string]string{"base": "2/", "gone": "2/"},
		after:  map[string]string{"base": "2/"},
	},
	{
		name: "alter",
		run: func(b *Broker) error {
			return b.AlterTopicConfig("base", map[string]string{engine.ConfigRetentionMs: "5000"}, nil)
		},
		before: map[string]string{"base": "2/", "gone": "2/"},
		after:  map[string]string{"base": "2/5000", "gone": "2/"},
	},
}

// crashSeedsPerPoint is how many random crashes each fsync point gets.
const crashSeedsPerPoint = 2

// TestAdminPowerLoss cuts the power at every fsync an admin operation issues (CrashFS
// CrashAtSync: unsynced data and directory entries are lost, as a random subset) and
// restarts from what the disk then holds: the catalog must name only partitions whose
// directories exist, the topics must be exactly as before or exactly as after the
// operation, no directory of a topic outside the catalog may survive the restart, and
// every acknowledged record must be there.
func TestAdminPowerLoss(t *testing.T) {
	seed := uint64(os.Getpid())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 11))
	for _, op := range crashOps {
		t.Run(op.name, func(t *testing.T) {
			total := countSyncs(t, op)
			outcomes := map[string]int{}
			// total+1: the power fails right after the operation returned.
			for at := 1; at <= total+1; at++ {
				for range crashSeedsPerPoint {
					outcomes[crashAdminAt(t, op, at, rng)]++
				}
			}
			t.Logf("%d fsyncs; outcomes %v", total, outcomes)
			if outcomes["after"] == 0 || outcomes["before"] == 0 {
				t.Fatalf("outcomes %v: want both before and after among the crash points", outcomes)
			}
		})
	}
}

// prepareAdmin makes the starting state in dir through fs and returns the acknowledged
// records per partition.
func prepareAdmin(t *testing.T, dir string, fs *faultio.CrashFS) (*Broker, map[TopicPartition]int64) {
	t.Helper()
	b, err := Open(Config{DataDir: dir, Shards: 1, Ring: ring.Config{Backend: "syscall"},
		RetentionCheckInterval: time.Hour, FlushCheckInterval: time.Hour, Logger: quietLogger(),
		WrapFileIO: func(int, ring.FileIO) ring.FileIO { return fs }})
	if err != nil {
		t.Fatal(err)
	}
	acked := map[TopicPartition]int64{}
	for _, name := range []string{"base", "gone"} {
		if err := b.CreateTopic(name, 2, nil); err != nil {
			t.Fatal(err)
		}
		for p := int32(0); p < 2; p++ {
			tp := TopicPartition{name, p}
			r := produce(t, b, tp, AcksAll, buildBatch(t, name, 5))
			if r.Err != nil {
				t.Fatal(r.Err)
			}
			acked[tp] = 5
		}
	}
	return b, acked
}

func countSyncs(t *testing.T, op adminOp) int {
	t.Helper()
	fs := faultio.NewCrashFS(ring.Syscalls{})
	b, _ := prepareAdmin(t, t.TempDir(), fs)
	defer b.Close()
	before := fs.Syncs()
	if err := op.run(b); err != nil {
		t.Fatal(err)
	}
	return fs.Syncs() - before
}

// crashAdminAt runs op with the power failing at its at-th fsync, then checks the image.
func crashAdminAt(t *testing.T, op adminOp, at int, rng *rand.Rand) string {
	t.Helper()
	root := t.TempDir()
	dir := filepath.Join(root, "data")
	image := filepath.Join(root, "image")
	fs := faultio.NewCrashFS(ring.Syscalls{})
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := fs.TrackDir(dir); err != nil {
		t.Fatal(err)
	}
	b, acked := prepareAdmin(t, dir, fs)
	fs.CrashRand, fs.CrashImage = rng, image
	fs.CrashAtSync = fs.Syncs() + at
	err := op.run(b)
	if _, serr := os.Stat(image); errors.Is(serr, os.ErrNotExist) {
		// Past the operation's last fsync: the next one anywhere is the power loss.
		fd, oerr := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		if oerr != nil {
			t.Fatal(oerr)
		}
		ferr := fs.Fsync(fd)
		unix.Close(fd)
		if !errors.Is(ferr, faultio.ErrCrashed) {
			t.Fatalf("power loss after the last fsync: %v", ferr)
		}
	}
	b.Close() // the live tree is no longer of interest: the image is what the disk held
	if _, serr := os.Stat(image); serr != nil {
		t.Fatalf("crash at fsync %d of %s: no image (op returned %v)", at, op.name, err)
	}

	// No catalog entry may name a missing partition directory.
	cat, cerr := engine.LoadCatalog(image)
	if cerr != nil {
		t.Fatalf("crash at fsync %d of %s: catalog unreadable: %v", at, op.name, cerr)
	}
	state := map[string]string{}
	for _, name := range cat.Names() {
		tm, _ := cat.Topic(name)
		if name != group.OffsetsTopic { // created by every broker at Open, before op
			state[name] = fmt.Sprintf("%d/%s", tm.Partitions, tm.Config[engine.ConfigRetentionMs])
		}
		for p := 0; p < tm.Partitions; p++ {
			if _, err := os.Stat(engine.PartitionDir(image, name, p)); err != nil {
				t.Fatalf("crash at fsync %d of %s: catalog names %s-%d but: %v", at, op.name, name, p, err)
			}
		}
	}
	outcome := ""
	switch {
	case maps.Equal(state, op.before):
		outcome = "before"
	case maps.Equal(state, op.after):
		outcome = "after"
	default:
		t.Fatalf("crash at fsync %d of %s: catalog %v is neither %v nor %v", at, op.name, state, op.before, op.after)
	}

	// A restart must succeed, keep every acknowledged record and sweep the rest.
	rb := openBroker(t, image, "syscall", 1)
	defer rb.Close()
	for tp, n := range acked {
		if rb.Topic(tp.Topic) == nil {
			continue // deleted by op
		}
		_, states, err := rb.DescribeTopic(tp.Topic)
		if err != nil {
			t.Fatal(err)
		}
		if got := states[tp.Partition].LogEndOffset; got < n {
			t.Fatalf("crash at fsync %d of %s: %s/%d ends at %d, %d were acknowledged", at, op.name, tp.Topic, tp.Partition, got, n)
		}
	}
	entries, _ := os.ReadDir(image)
	for _, e := range entries {
		topic, _, found := strings.Cut(e.Name(), "-")
		if e.IsDir() && found && rb.Topic(topic) == nil {
			t.Fatalf("crash at fsync %d of %s: %s survived the restart, topic %q is not in the catalog", at, op.name, e.Name(), topic)
		}
	}
	if names := slices.Sorted(maps.Keys(state)); len(names) != len(userTopics(rb)) {
		t.Fatalf("crash at fsync %d of %s: catalog %v, broker serves %d topics", at, op.name, names, len(userTopics(rb)))
	}
	return outcome
}

// TestTopicIdentitySurvives: a topic's ID and incarnation survive a config change (also a
// change of the broker's defaults) and a restart; a topic created without them has none.
func TestTopicIdentitySurvives(t *testing.T) {
	dir := t.TempDir()
	b := openBroker(t, dir, "syscall", 2)
	const id = "00112233445566778899aabbccddeeff"
	if err := b.CreateTopicIdentified("orders", 2, nil, id, 7); err != nil {
		t.Fatal(err)
	}
	if err := b.CreateTopic("plain", 1, nil); err != nil {
		t.Fatal(err)
	}
	if err := b.AlterTopicConfig("orders", map[string]string{engine.ConfigRetentionMs: "1000"}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := b.SetLogDefaults(engine.LogConfig{RetentionMs: 5000}); err != nil {
		t.Fatal(err)
	}
	check := func(when string) {
		t.Helper()
		if o, p := b.Topic("orders"), b.Topic("plain"); o.ID != id || o.Incarnation != 7 || p.ID != "" || p.Incarnation != 0 {
			t.Fatalf("%s: orders %s/%d, plain %q/%d", when, o.ID, o.Incarnation, p.ID, p.Incarnation)
		}
	}
	check("before the restart")
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	b = openBroker(t, dir, "syscall", 2)
	defer b.Close()
	check("after the restart")
}
