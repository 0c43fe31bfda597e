package engine

import (
	"bufio"
	"bytes"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ringlog/ringlog/engine/batch"
	"github.com/ringlog/ringlog/ring"
	"golang.org/x/sys/unix"
)

// TestCrashSIGKILLAsync is TestCrashSIGKILL for the direct-mode paths that only run with a
// ring: a child process runs a real io_uring reactor loop the way engine/shard wires a
// partition (SetAsyncWriter, SetAsyncRetention, SetAsyncSnapshots; syncs as
// BeginSync + IORING_OP_FSYNC + EndSync, some inline), with recycling on and 32 KiB
// segments, so that several writes are in flight, rolls take "spare" files opened through
// the ring and name them with RENAME_NOREPLACE (rollasync.go), retired files go through the
// pool (recycle.go) and sealed segments' batch maps are written as file jobs — many times
// per child. The parent kills it with SIGKILL, reopens the log and checks every record the
// child reported.
//
// The child prints "ack <synced> <written> <flags> <counters>" whenever its synced offset
// (what a flush.always produce is acknowledged at) or its written end (acks=1) moved. After
// a kill every synced record must be back, intact and contiguous, and nothing else may be
// served; in the "offsets" shape the written end must be back too (kill -9 loses no
// completed write; the repeat shape's recovery may cut written, unsynced batches by design,
// see below).
//
// Kills: in the first round of every crashAsyncTargets cycle the parent kills at a random
// acknowledgement while the child runs free. In the other rounds the child, after a random
// number of acknowledgements, steers towards one state (the spare ready before the roll,
// the pool's preparations collected) and kills itself (SIGKILL, so the kernel tears the
// ring down with the ops in flight) the moment it is in it: a roll's renames in flight
// ("names"), a sealed segment's batch map write in flight ("maps"), a spare's opens in
// flight ("spare"), a seal's writes or cut in flight ("seal"), a recycled active segment
// with writes in flight ("stale"), a retention checkpoint in flight ("retention"), a
// retirement's unlinks or pool rename in flight ("jobs"), a pool preparation not collected
// ("pool"), a ring fdatasync in flight ("sync"), several write ops in flight ("writes").
// Half of those kills first hand the queued ops to the kernel (io_uring_enter), so the kill
// races them; the others die with them still in the submission queue. Every such round
// must end in its self-kill (the steering makes the state certain, not the timing).
//
// Two shapes of data, each its own log:
//
//   - "offsets": 4 KiB batches (a block each) whose values encode their offsets. Every
//     batch boundary of a file's previous life lines up with the new ones, and no write
//     group ends inside a block, so in a recycled file an old segment's valid batch lies
//     right after the log's end (no zero padding between).
//   - "repeat": 256-byte batches whose bytes (all but the base offset) depend only on their
//     position in the segment, so a recycled file gets byte-identical batches at the same
//     positions, with the very CRCs of its previous life; the batch-map guard refuses them
//     unless an index entry lies at or after them (batchmap.go, "the residual case"), which
//     the appender forces (segment.noteRecycled) and the sync writes. A segment's first
//     batch encodes its offset (a synced first batch has no index entry to protect it).
//     IndexIntervalBytes is 4 KiB, so a forced entry is the only one near most batches.
//
// Each kill is checked twice: on the directory itself, and first on a copy of it (new
// inodes, as after a restore or a move to another disk), where the recycled files' batch
// maps no longer apply and recovery's base-offset check alone must refuse the old batches.
//
// RINGLOG_CRASH_ASYNC_ROUNDS=N runs N rounds per shape (default crashAsyncRoundsDefault,
// a few seconds); the seed (RINGLOG_CRASH_ASYNC_SEED replays the children's data and
// choices, not the kills' timing) is printed.
func TestCrashSIGKILLAsync(t *testing.T) {
	if os.Getenv(crashAsyncDirEnv) != "" {
		t.Skip("in the child")
	}
	probeReactor(t)
	seed := uint64(os.Getpid())
	if v, err := strconv.ParseUint(os.Getenv(crashAsyncSeedEnv), 10, 64); err == nil {
		seed = v
	}
	rounds := crashAsyncRoundsDefault
	if v, err := strconv.Atoi(os.Getenv(crashAsyncRoundsEnv)); err == nil && v > 0 {
		rounds = v
	}
	t.Logf("seed %d (%s replays the children's data and choices), %d rounds per shape", seed, crashAsyncSeedEnv, rounds)
	for _, shape := range []string{"offsets", "repeat"} {
		t.Run(shape, func(t *testing.T) {
			crashAsyncRounds(t, shape, seed, rounds)
		})
	}
}

const (
	crashAsyncDirEnv    = "RINGLOG_CRASH_ASYNC_DIR"    // the child's log directory (set: this is the child)
	crashAsyncShapeEnv  = "RINGLOG_CRASH_ASYNC_SHAPE"  // "offsets" or "repeat"
	crashAsyncSeedEnv   = "RINGLOG_CRASH_ASYNC_SEED"   // parent: the test's seed; child: its own
	crashAsyncTargetEnv = "RINGLOG_CRASH_ASYNC_TARGET" // the state the child kills itself in ("": none)
	crashAsyncAfterEnv  = "RINGLOG_CRASH_ASYNC_AFTER"  // acknowledgements before the child steers to it
	crashAsyncGroupsEnv = "RINGLOG_CRASH_ASYNC_GROUPS" // DirectWriteGroupsMax
	crashAsyncRoundsEnv = "RINGLOG_CRASH_ASYNC_ROUNDS" // rounds per shape (the long loop)

	crashAsyncRoundsDefault = 11 // each of crashAsyncTargets once per shape
	// crashAsyncAcksMax bounds a child's acknowledgements before its kill: a random kill lands
	// in [crashAsyncAcksMin, crashAsyncAcksMax), a self-kill steers from there.
	crashAsyncAcksMin = 20
	crashAsyncAcksMax = 90
	// crashAsyncSteerAcksMax bounds how many acknowledgements a steering child may take to
	// reach its state: a roll comes every ~13 appends, a retention pass every 8.
	crashAsyncSteerAcksMax = 400
	crashAsyncTurnsMax     = 100_000 // bound on a child's loop if nobody kills it
	// crashAsyncHang is how long a child may run: a child takes well under a second.
	crashAsyncHang = time.Minute
	crashAsyncTick = 50 * time.Millisecond // engine/shard's flushCheckDefault
	// crashAsyncStagedMax bounds the bytes a child stages ahead of its written end before it
	// waits for completions instead of appending (the produces of a busy partition).
	crashAsyncStagedMax = 16 << 10
)

// crashAsyncTargets are the states a child kills itself in ("": the parent kills it at a
// random acknowledgement).
var crashAsyncTargets = []string{"", "names", "maps", "spare", "seal", "stale", "retention", "jobs", "pool", "sync", "writes"}

// crashAsyncShape is the data and log shape of a TestCrashSIGKILLAsync log.
type crashAsyncShape struct {
	batchBytes    int64 // every batch is exactly this long
	indexInterval int64
}

func crashAsyncShapeOf(name string) crashAsyncShape {
	if name == "repeat" {
		return crashAsyncShape{batchBytes: 256, indexInterval: 4 << 10}
	}
	return crashAsyncShape{batchBytes: 4 << 10, indexInterval: 4 << 10}
}

// crashAsyncConfig is the log of both the child and the parent's checks: direct mode, 32 KiB
// segments, 8 KiB staging chunks (a write group is several ops), two recycled files and a
// retention limit every sealed segment is over.
func crashAsyncConfig(shape crashAsyncShape, logger *slog.Logger) LogConfig {
	return LogConfig{Storage: StorageDirect, SegmentBytes: 32 << 10, IndexIntervalBytes: shape.indexInterval,
		DirectChunkBytes: 8 << 10, RecycleSegments: 2, RetentionBytes: 1 << 10, Logger: logger}
}

// probeReactor skips the test where io_uring is unavailable.
func probeReactor(t *testing.T) {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	r, err := ring.NewReactor(ring.Config{Backend: "uring", Entries: 8})
	if err != nil {
		t.Skipf("io_uring reactor unavailable: %v", err)
	}
	r.Close()
}

// crashAsyncTally sums what the kills of a shape met.
type crashAsyncTally struct {
	kills, selfKills, submitted int
	at                          map[string]int // kills by the state the child was in (its flags)
	rolls, spare, reused        int64
	pooled, blocking, sameCRC   int64
	copyDropped                 int64 // bytes the copies' recoveries cut
	copyOld                     int   // copies whose recovery stopped at an old batch by its offset
}

func crashAsyncRounds(t *testing.T, shape string, seed uint64, rounds int) {
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(seed, uint64(len(shape))))
	tally := crashAsyncTally{at: map[string]int{}}
	synced, written := int64(0), int64(0)
	for round := 0; round < rounds; round++ {
		target := crashAsyncTargets[round%len(crashAsyncTargets)]
		groups := []int{1, 4}[(round+round/len(crashAsyncTargets))%2] // each target with both over two cycles
		after := crashAsyncAcksMin + rng.IntN(crashAsyncAcksMax-crashAsyncAcksMin)
		res := runCrashAsyncChild(t, dir, shape, rng.Uint64(), target, after, groups)
		tally.add(res)
		what := target
		if what == "" {
			what = "random"
		}
		t.Logf("round %d (%s, groups %d): killed after %d acks at synced %d, written %d; flags%s; counters %v",
			round, what, groups, res.acks, res.synced, res.written, res.flags, res.counters)
		if res.synced < synced {
			t.Fatalf("round %d: child synced %d after %d was synced before", round, res.synced, synced)
		}
		synced, written = res.synced, 0
		if shape == "offsets" {
			written = res.written // a repeat log may lose unsynced writes (see the test's comment)
		}
		copyDir := t.TempDir()
		copyFiles(t, dir, copyDir)
		rep := verifyCrashAsyncLog(t, copyDir, shape, round, "copy", synced, written, res.stderr)
		tally.copyDropped += rep.DroppedBytes
		if strings.Contains(rep.Corruption, ", expected ") {
			tally.copyOld++ // an old batch at the end, refused by its offset
		}
		verifyCrashAsyncLog(t, dir, shape, round, "log", synced, written, res.stderr)
		os.RemoveAll(copyDir)
	}
	if synced == 0 {
		t.Fatalf("children synced nothing in %d rounds", rounds)
	}
	t.Logf("%d kills (%d self-kills, %d of them after handing the queued ops to the kernel); by the child's state at the kill: %v",
		tally.kills, tally.selfKills, tally.submitted, tally.at)
	t.Logf("over all children: %d rolls, %d took a spare (%d created the files the blocking way), %d took a recycled file, %d files pooled, %d same-CRC batches; the copies' recoveries cut %d bytes, %d of them at an old batch refused by its offset",
		tally.rolls, tally.spare, tally.blocking, tally.reused, tally.pooled, tally.sameCRC, tally.copyDropped, tally.copyOld)
}

func (ty *crashAsyncTally) add(res crashAsyncResult) {
	ty.kills++
	if res.self {
		ty.selfKills++
	}
	if res.submitted {
		ty.submitted++
	}
	for _, f := range strings.Fields(res.flags) {
		ty.at[f]++
	}
	c := res.counters
	ty.rolls += c["rolls"]
	ty.spare += c["spare"]
	ty.blocking += c["blocking"]
	ty.reused += c["reused"]
	ty.pooled += c["pooled"]
	ty.sameCRC += c["samecrc"]
}

// crashAsyncResult is what the parent read from one child.
type crashAsyncResult struct {
	acks            int
	synced, written int64
	flags           string           // the child's state at its last line: at the kill for a self-kill
	counters        map[string]int64 // the child's process-wide counters at its last line
	self            bool             // the child killed itself in its target state
	submitted       bool             // ... after handing the queued ops to the kernel
	stderr          *bytes.Buffer
}

// runCrashAsyncChild starts a child and reads its lines until it killed itself (a target)
// or, with no target, until after acknowledgements, when the parent kills it.
func runCrashAsyncChild(t *testing.T, dir, shape string, seed uint64, target string, after, groups int) crashAsyncResult {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashAsyncChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), crashAsyncDirEnv+"="+dir, crashAsyncShapeEnv+"="+shape,
		crashAsyncSeedEnv+"="+strconv.FormatUint(seed, 10), crashAsyncTargetEnv+"="+target,
		crashAsyncAfterEnv+"="+strconv.Itoa(after), crashAsyncGroupsEnv+"="+strconv.Itoa(groups))
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	res := crashAsyncResult{stderr: &bytes.Buffer{}}
	cmd.Stderr = res.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// A hung child gets SIGQUIT (its goroutines' stacks go to stderr, which the failure
	// prints), not a wait forever.
	hang := time.AfterFunc(crashAsyncHang, func() { cmd.Process.Signal(syscall.SIGQUIT) })
	defer hang.Stop()
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		line := sc.Text()
		word, rest, _ := strings.Cut(line, " ")
		switch word {
		case "ack", "kill":
			res.parse(t, rest)
			if word == "kill" {
				res.self, res.submitted = true, strings.HasPrefix(res.flags, " submitted")
				res.flags = strings.TrimPrefix(res.flags, " submitted")
				continue // the child is dead: read to EOF
			}
			res.acks++
		case "note":
			t.Logf("child: %s", rest)
		case "nodirect":
			cmd.Process.Kill()
			cmd.Wait()
			if err := directRefused(dir); err != nil {
				t.Skipf("direct mode unavailable: the child's log came up in page-cache mode, and %v", err)
			}
			t.Fatalf("the child's log came up in page-cache mode, but %s's file system takes O_DIRECT", dir)
		default:
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("child: %s (stderr %s)", line, res.stderr)
		}
		if target == "" && res.acks >= after {
			break
		}
		if target != "" && res.acks > after+crashAsyncSteerAcksMax {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("child steering to %q did not get there in %d acknowledgements (flags%s, stderr %s)", target, crashAsyncSteerAcksMax, res.flags, res.stderr)
		}
	}
	if target == "" {
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatalf("kill child: %v", err)
		}
	}
	err = cmd.Wait()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("child did not die by SIGKILL: %v (stderr %s)", err, res.stderr)
	}
	if target != "" && !res.self {
		t.Fatalf("child steering to %q died without killing itself there (stderr %s)", target, res.stderr)
	}
	return res
}

// parse reads "<synced> <written> [flag...] [name=count...]".
func (res *crashAsyncResult) parse(t *testing.T, rest string) {
	t.Helper()
	fields := strings.Fields(rest)
	if len(fields) < 2 {
		t.Fatalf("bad child line %q", rest)
	}
	var err1, err2 error
	res.synced, err1 = strconv.ParseInt(fields[0], 10, 64)
	res.written, err2 = strconv.ParseInt(fields[1], 10, 64)
	if err1 != nil || err2 != nil {
		t.Fatalf("bad child line %q", rest)
	}
	res.flags, res.counters = "", map[string]int64{}
	for _, f := range fields[2:] {
		if name, v, ok := strings.Cut(f, "="); ok {
			res.counters[name], _ = strconv.ParseInt(v, 10, 64)
			continue
		}
		res.flags += " " + f
	}
}

// copyFiles copies every regular file of from into to: same bytes, new inodes.
func copyFiles(t *testing.T, from, to string) {
	t.Helper()
	entries, err := os.ReadDir(from)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(from, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(to, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// verifyCrashAsyncLog reopens dir (blocking I/O, as an offline tool or a restart before
// its ring) and checks it: every record from the start offset is one contiguous run of
// intact records of the shape, up to at least synced and written. It closes the log
// cleanly and returns the recovery's report.
func verifyCrashAsyncLog(t *testing.T, dir, shape string, round int, what string, synced, written int64, stderr *bytes.Buffer) RecoveryReport {
	t.Helper()
	l, rep, err := OpenLog(dir, crashAsyncConfig(crashAsyncShapeOf(shape), quietLogger), ring.Syscalls{})
	if err != nil {
		t.Fatalf("round %d (%s): reopen: %v", round, what, err)
	}
	defer l.Close()
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("round %d (%s): %s; recovered [%d, %d), report %+v, child stderr %s", round, what,
			fmt.Sprintf(format, args...), l.StartOffset(), l.EndOffset(), rep, stderr)
	}
	if l.EndOffset() < synced || l.EndOffset() < written {
		fail("log ends at %d, the child synced %d and wrote %d", l.EndOffset(), synced, written)
	}
	next := l.StartOffset()
	data := readAll(t, l, 1<<20)
	for len(data) > 0 {
		h, err := validateFirst(data)
		if err != nil {
			fail("batch at offset %d: %v", next, err)
		}
		k := -1 // the batch's record index, for the repeat shape's values
		err = batch.Decode(data[:h.Size()], func(offset, ts int64, r *batch.Record) error {
			k++
			if offset != next {
				return fmt.Errorf("record at %d, want %d", offset, next)
			}
			next++
			return checkCrashAsyncValue(shape, offset, k, h.LastOffsetDelta+1, r.Value)
		})
		if err != nil {
			fail("batch at offset %d: %v", h.BaseOffset, err)
		}
		data = data[h.Size():]
	}
	if next != l.EndOffset() {
		fail("records end at %d, log end %d", next, l.EndOffset())
	}
	return rep
}

// The values of TestCrashSIGKILLAsync's records (crashFill is crashValue's filler).
//
//	offsets: "offset=<offset>;" + filler from <offset>
//	repeat:  "offset=<offset>;" + filler (a segment's first batch), or
//	         "k=<batch position / 256>;r=<record>/<records>;" + filler from <k>
func checkCrashAsyncValue(shape string, offset int64, record int, records int32, v []byte) error {
	bad := func() error { return fmt.Errorf("record at %d: value %q", offset, v) }
	if rest, ok := bytes.CutPrefix(v, fmt.Appendf(nil, "offset=%d;", offset)); ok {
		if !crashFilled(rest, offset) {
			return bad()
		}
		return nil
	}
	if shape != "repeat" {
		return bad()
	}
	var k int64
	var r, n int32
	if _, err := fmt.Sscanf(string(v), "k=%d;r=%d/%d;", &k, &r, &n); err != nil || int(r) != record || n != records {
		return bad()
	}
	if !crashFilled(v[len(fmt.Sprintf("k=%d;r=%d/%d;", k, r, n)):], k) {
		return bad()
	}
	return nil
}

// crashFill appends n filler bytes following from (crashValue's pattern).
func crashFill(v []byte, from int64, n int) []byte {
	for i := 0; i < n; i++ {
		v = append(v, byte('a'+(from+int64(i))%26))
	}
	return v
}

func crashFilled(b []byte, from int64) bool {
	for i, c := range b {
		if c != byte('a'+(from+int64(i))%26) {
			return false
		}
	}
	return true
}

// sizedBatch builds a batch of exactly size bytes of n records, record i with timestamp
// ts+i and value value(i, pad): pad filler bytes are added to the last record until the
// batch has the size.
func sizedBatch(b *batch.Builder, n int, ts int64, size int64, value func(i, pad int) []byte) ([]byte, error) {
	pad := 0
	for try := 0; try < 8; try++ {
		b.Reset()
		for i := 0; i < n; i++ {
			p := 0
			if i == n-1 {
				p = pad
			}
			b.Append(ts+int64(i), nil, value(i, p), nil)
		}
		out, err := b.Build(nil)
		if err != nil {
			return nil, err
		}
		if int64(len(out)) == size {
			return out, nil
		}
		if pad += int(size - int64(len(out))); pad < 0 {
			break
		}
	}
	return nil, fmt.Errorf("no batch of %d records of exactly %d bytes", n, size)
}

// TestCrashAsyncChild is TestCrashSIGKILLAsync's child; it runs only when started by it.
func TestCrashAsyncChild(t *testing.T) {
	dir := os.Getenv(crashAsyncDirEnv)
	if dir == "" {
		t.Skip("child of TestCrashSIGKILLAsync only")
	}
	c, err := newCrashAsyncChild(dir)
	if err == nil {
		err = c.run()
	}
	if err != nil {
		fmt.Println("error", strings.ReplaceAll(err.Error(), "\n", " "))
		os.Exit(3)
	}
	os.Exit(0)
}

// crashAsyncChild is the child's loop state. Its goroutine owns the reactor and the log.
type crashAsyncChild struct {
	r       *ring.Reactor
	l       *Log
	shape   crashAsyncShape
	repeat  bool
	rng     *rand.Rand
	out     *bufio.Writer
	b       *batch.Builder
	target  string
	after   int
	acks    int
	steer   bool // past after acknowledgements with a target: steer to it, kill there
	err     error
	syncing bool
	// the sync in flight (ring fdatasyncs): its ticket, the fdatasyncs still to complete
	// and the first one's failure.
	ticket    SyncTicket
	remaining int
	syncErr   error
	syncDone  func(res int32, flags uint32)
	complete  *ring.Timer
	lastSync  int64
	lastWrite int64
	// lostWakeups is the ring's count last reported in a note.
	lostWakeups uint64
}

func newCrashAsyncChild(dir string) (*crashAsyncChild, error) {
	runtime.LockOSThread()
	r, err := ring.NewReactor(ring.Config{Backend: "uring", Entries: 256})
	if err != nil {
		return nil, err
	}
	seed, _ := strconv.ParseUint(os.Getenv(crashAsyncSeedEnv), 10, 64)
	after, _ := strconv.Atoi(os.Getenv(crashAsyncAfterEnv))
	groups, _ := strconv.Atoi(os.Getenv(crashAsyncGroupsEnv))
	DirectWriteGroupsMax = max(groups, 1)
	if groups > 1 {
		DirectGroupMinBytes = 4 << 10 // groups beside the one in flight
	}
	c := &crashAsyncChild{r: r, shape: crashAsyncShapeOf(os.Getenv(crashAsyncShapeEnv)), repeat: os.Getenv(crashAsyncShapeEnv) == "repeat",
		rng: rand.New(rand.NewPCG(seed, 3)), out: bufio.NewWriter(os.Stdout), b: batch.NewBuilder(batch.BuilderOptions{}),
		target: os.Getenv(crashAsyncTargetEnv), after: after, lastSync: -1, lastWrite: -1}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	l, _, err := OpenLog(dir, crashAsyncConfig(c.shape, logger), r)
	if err != nil {
		return nil, err
	}
	if l.Mode() != StorageDirect {
		fmt.Println("nodirect")
		os.Exit(0)
	}
	c.l = l
	// As engine/shard wires a partition (directwrite.go, retention.go).
	l.SetAsyncWriter(r, func() {})
	l.SetAsyncSnapshots(r)
	l.SetAsyncRetention(r, func() {
		if c.complete == nil {
			c.complete = r.AfterFunc(0, c.completeRetention)
			return
		}
		c.complete.Reset(0)
	})
	c.syncDone = c.fdatasyncDone
	return c, nil
}

func (c *crashAsyncChild) completeRetention() {
	if _, err := c.l.CompleteRetention(); err != nil && c.err == nil {
		c.err = err
	}
	c.stopAt("jobs", "pool")
}

// run is the child's loop: append, retain, sync, run the reactor, report.
func (c *crashAsyncChild) run() error {
	l := c.l
	// The shard's loop always has its flush-check timer armed (50 ms by default), so its
	// waits end at least that often; so do the child's. Without it, a child sometimes
	// slept until its 20 s watchdog (session 14's branch crashdet14): a blocking index write
	// between turns had reaped the segment writes' completions, and RunOnce dispatched them
	// and then waited (fixed in session 15: ring's RunOnce, docs/ring.md "Bounded waits").
	var tick *ring.Timer
	tick = c.r.AfterFunc(crashAsyncTick, func() { tick.Reset(crashAsyncTick) })
	watchdog := c.r.AfterFunc(crashAsyncHang/3, func() {
		c.err = fmt.Errorf("stalled: no turn for %v, %d ops in flight, %s", crashAsyncHang/3, c.r.Stats().InFlight, c.state())
		fmt.Println("error", c.err)
		os.Exit(3)
	})
	for turn := 0; turn < crashAsyncTurnsMax && c.err == nil; turn++ {
		watchdog.Reset(crashAsyncHang / 3)
		if err := l.Err(); err != nil {
			return err
		}
		staged := l.StagedEndOffset() > l.EndOffset() && l.active().direct != nil &&
			l.active().direct.active.end()-l.active().direct.writtenPos > crashAsyncStagedMax
		if !staged {
			if err := c.appendGroup(); err != nil {
				return err
			}
		}
		if turn%8 == 7 {
			if _, err := l.EnforceRetention(time.Now()); err != nil {
				return err
			}
			c.stopAt("retention", "jobs", "pool")
		}
		if !c.syncing {
			if err := c.startSync(); err != nil {
				return err
			}
		}
		block := staged && (l.WritesPending() || c.syncing)
		if block && c.r.Stats().InFlight == 0 {
			return fmt.Errorf("stalled: nothing in flight, %s", c.state())
		}
		before, inflight, st := time.Now(), c.r.Stats().InFlight, c.state()
		if err := c.r.RunOnce(block); err != nil {
			return err
		}
		if d := time.Since(before); d > time.Second {
			fmt.Fprintf(c.out, "note slow wait %v, %d in flight before (%d after): %s\n", d, inflight, c.r.Stats().InFlight, st)
		}
		// A wait that ran to the ring's bound and found completions (ring.Stats.LostWakeups):
		// the stall session 14 saw, now at most 10 ms (docs/ring.md, "Bounded waits").
		if lost := c.r.Stats().LostWakeups; lost > c.lostWakeups {
			c.lostWakeups = lost
			fmt.Fprintf(c.out, "note lost wake-up %d: a wait ran to the ring's bound and found completions, %d in flight before: %s\n", lost, inflight, st)
		}
		c.stopAt("jobs", "pool", "sync", "writes", "spare", "maps", "seal")
		c.report("ack", "")
	}
	if c.err != nil {
		return c.err
	}
	return fmt.Errorf("not killed in %d turns", crashAsyncTurnsMax)
}

// appendGroup appends 1–4 batches of the shape. A steering child first lets the spare's
// opens and the pool's preparations complete when the next roll is near, so that the roll
// takes both.
func (c *crashAsyncChild) appendGroup() error {
	l := c.l
	s := l.active()
	if c.steer && c.target != "pool" {
		l.settlePool() // so that the spare (made at half a segment) takes a pool file
	}
	if c.steer && s.size+4*c.shape.batchBytes > int64(l.cfg.SegmentBytes) {
		if l.spare.state == sparePreparing {
			if err := c.r.AwaitWrites(func() bool { return l.spare.state != sparePreparing }); err != nil {
				return err
			}
		}
	}
	pos, next := s.size, l.StagedEndOffset()
	n := 1 + c.rng.IntN(4)
	batches := make([][]byte, 0, n)
	for range n {
		if pos+c.shape.batchBytes > int64(l.cfg.SegmentBytes) {
			pos = 0 // the roll (shouldRoll)
		}
		bb, err := c.batchAt(pos, next)
		if err != nil {
			return err
		}
		h, _ := batch.ParseHeader(bb)
		next += int64(h.LastOffsetDelta) + 1
		pos += c.shape.batchBytes
		batches = append(batches, bb)
	}
	if _, err := l.AppendBatches(batches); err != nil {
		return err
	}
	c.stopAt("names", "maps", "seal", "stale", "spare", "writes")
	return nil
}

// batchAt builds the shape's batch that lands at position pos of a segment with first
// offset next.
func (c *crashAsyncChild) batchAt(pos, next int64) ([]byte, error) {
	if !c.repeat || pos == 0 {
		n := 1 + c.rng.IntN(4)
		return sizedBatch(c.b, n, next, c.shape.batchBytes, func(i, pad int) []byte {
			o := next + int64(i)
			return crashFill(fmt.Appendf(nil, "offset=%d;", o), o, 16+pad)
		})
	}
	k := pos / c.shape.batchBytes
	n := 1 + int(k%3)
	return sizedBatch(c.b, n, 1_000+8*k, c.shape.batchBytes, func(i, pad int) []byte {
		return crashFill(fmt.Appendf(nil, "k=%d;r=%d/%d;", k, i, n), k, 8+pad)
	})
}

// startSync starts a sync as the shard's group commit does: on the ring (BeginSync, an
// IORING_OP_FSYNC per descriptor, EndSync at the last completion), or one in four inline
// (BeginSyncInline, fdatasync on this thread).
func (c *crashAsyncChild) startSync() error {
	l := c.l
	if c.rng.IntN(4) == 0 {
		t, ok, err := l.BeginSyncInline()
		if err != nil || !ok {
			return err
		}
		var syncErr error
		for _, fd := range t.Fds {
			if syncErr = unix.Fdatasync(fd); syncErr != nil {
				break
			}
		}
		return l.EndSync(t, syncErr)
	}
	t, ok, err := l.BeginSync()
	if err != nil || !ok {
		return err
	}
	c.ticket, c.remaining, c.syncErr, c.syncing = t, len(t.Fds), nil, true
	for _, fd := range t.Fds {
		if err := c.r.Submit(func(sqe *ring.SQE) { sqe.PrepFsync(fd, true) }, c.syncDone); err != nil {
			res := int32(0) // no room on the ring: the blocking way, as the shard does
			if err := unix.Fdatasync(fd); err != nil {
				res = -int32(err.(unix.Errno))
			}
			c.fdatasyncDone(res, 0)
		}
	}
	c.stopAt("sync")
	return nil
}

func (c *crashAsyncChild) fdatasyncDone(res int32, _ uint32) {
	if res < 0 && c.syncErr == nil {
		c.syncErr = unix.Errno(-res)
	}
	if c.remaining--; c.remaining > 0 {
		return
	}
	c.syncing = false
	if err := c.l.EndSync(c.ticket, c.syncErr); err != nil && c.err == nil {
		c.err = err
	}
	c.report("ack", "")
}

// state describes the log's writes for a stall's report.
func (c *crashAsyncChild) state() string {
	l := c.l
	s := l.active()
	out := fmt.Sprintf("active %d size %d written %d staged end %d, end %d staged %d, %d sealing, %d seals, spare %d names %d maps %d, syncing %v, groups %d ops %d:",
		s.baseOffset, s.size, s.direct.writtenPos, s.direct.active.end(), l.EndOffset(), l.StagedEndOffset(), len(l.sealing), l.sealsInFlight,
		l.spare.state, l.spare.names, l.spare.maps, c.syncing, l.groups.count, l.groups.ops)
	for k := 0; k < l.groups.count; k++ {
		g := &l.groups.g[l.groups.slot(k)]
		out += fmt.Sprintf(" [seg %d pos %d ops %d finished %v shared %d names pending %v sealing %v]", g.seg.baseOffset, g.pos, g.ops, g.finished, g.shared, g.seg.namesPending, g.seg.sealing)
	}
	for _, x := range l.sealing {
		out += fmt.Sprintf(" sealing %d written %d staged end %d", x.baseOffset, x.direct.writtenPos, x.direct.active.end())
	}
	return out
}

// flags names the states of the log that a kill now would meet.
func (c *crashAsyncChild) flags() []string {
	l := c.l
	var f []string
	add := func(name string, on bool) {
		if on {
			f = append(f, name)
		}
	}
	add("names", l.spare.names > 0)
	add("maps", l.spare.maps > 0)
	add("spare", l.spare.state == sparePreparing)
	add("seal", len(l.sealing) > 0 || l.sealsInFlight > 0)
	add("stale", l.active().stale && l.groups.ops > 0)
	add("retention", l.retention.inFlight())
	add("jobs", l.FileJobsPending() > 0)
	add("pool", l.recyclePreparing > 0)
	add("sync", c.syncing)
	add("writes", l.groups.ops > 1)
	return f
}

// report prints "<word> <synced> <written> <flags> <counters>" when the offsets moved (or
// always, for the kill line).
func (c *crashAsyncChild) report(word, extra string) {
	l := c.l
	synced, written := l.SyncedOffset(), l.EndOffset()
	if word == "ack" && synced == c.lastSync && written == c.lastWrite {
		return
	}
	c.lastSync, c.lastWrite = synced, written
	rolls, recycled := RollFileStats(), RecycleStats()
	fmt.Fprintf(c.out, "%s %d %d%s %s rolls=%d spare=%d blocking=%d reused=%d pooled=%d samecrc=%d\n", word, synced, written, extra,
		strings.Join(c.flags(), " "), rolls.Spare+rolls.Blocking, rolls.Spare, rolls.Blocking, recycled.Reused, recycled.Pooled, recycled.SameCRC)
	c.out.Flush()
	if word == "ack" {
		if c.acks++; c.acks >= c.after && c.target != "" {
			c.steer = true
		}
	}
}

// stopAt kills the child when it steers to its target, the target is one of states and the
// log is in it now: at once, or after handing the queued ops to the kernel.
func (c *crashAsyncChild) stopAt(states ...string) {
	if !c.steer {
		return
	}
	found := false
	for _, s := range states {
		found = found || s == c.target
	}
	if !found {
		return
	}
	in := false
	for _, f := range c.flags() {
		in = in || f == c.target
	}
	if !in {
		return
	}
	extra := ""
	if c.rng.IntN(2) == 0 {
		c.r.Ring().Submit() // the kill races the kernel's work on them
		extra = " submitted"
	}
	c.report("kill", extra)
	unix.Kill(os.Getpid(), unix.SIGKILL)
	select {} // SIGKILL is not caught
}
