package engine

import (
	"bufio"
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ringlog/ringlog/engine/batch"
	"github.com/ringlog/ringlog/ring"
)

// The crash test runs this test binary as a child process (os.Args[0] -test.run
// TestCrashChild) with these variables set.
const (
	crashChildDirEnv  = "RINGLOG_CRASH_CHILD_DIR"
	crashChildModeEnv = "RINGLOG_CRASH_CHILD_MODE"
	crashChildIOEnv   = "RINGLOG_CRASH_CHILD_IO"
	// crashChildPreallocEnv, when set, is the child's PreallocateBytes.
	crashChildPreallocEnv = "RINGLOG_CRASH_CHILD_PREALLOC"
	// crashChildRecycleEnv, when "1", makes the child recycle retired segment files
	// (RecycleSegments 2) under retention.bytes 1 KiB, enforced every 4 appends: the log
	// is often killed with an old segment's batches past the end of its active file.
	crashChildRecycleEnv = "RINGLOG_CRASH_CHILD_RECYCLE"
	crashRounds          = 24
	crashAcksMax         = 25    // a child is killed after 1..crashAcksMax acknowledgements
	crashChildBatches    = 50000 // bound on a child's loop if nobody kills it
)

// crashValue is the value of the record at offset: a reader can check any record alone.
func crashValue(offset int64) []byte {
	v := fmt.Appendf(nil, "offset=%d;", offset)
	for i := 0; i < int(offset%97); i++ {
		v = append(v, byte('a'+(offset+int64(i))%26))
	}
	return v
}

// TestCrashChild is the child: it appends with flush=always and prints "ack N" once every
// offset below N is durable. It runs only when started by TestCrashSIGKILL.
func TestCrashChild(t *testing.T) {
	dir := os.Getenv(crashChildDirEnv)
	if dir == "" {
		t.Skip("child of TestCrashSIGKILL only")
	}
	var fio ring.FileIO = ring.Syscalls{}
	if os.Getenv(crashChildIOEnv) == "reactor" {
		runtime.LockOSThread()
		if r, err := ring.NewReactor(ring.Config{Backend: "uring", Entries: 64}); err == nil {
			fio = r
		}
	}
	cfg := LogConfig{Storage: StorageMode(os.Getenv(crashChildModeEnv)), SegmentBytes: 32 << 10,
		IndexIntervalBytes: 1024, FlushAlways: true, Logger: quietLogger, DirectChunkBytes: 16 << 10,
		Writeback: NewWriteback(4 << 10)} // killed with write-back requests in flight
	cfg.PreallocateBytes, _ = strconv.ParseInt(os.Getenv(crashChildPreallocEnv), 10, 64)
	recycle := os.Getenv(crashChildRecycleEnv) == "1"
	cfg.RecycleSegments = -1
	if recycle {
		cfg.RecycleSegments, cfg.RetentionBytes = 2, 1<<10
	}
	l, _, err := OpenLog(dir, cfg, fio)
	if err != nil {
		fmt.Println("error", err)
		os.Exit(3)
	}
	// With the ring, retention writes its checkpoint off the loop (retention.go) as in the
	// broker; its chain of ops advances one op at a random append, and the segments retire
	// at the next EnforceRetention, so kills hit a pass at every step.
	r, async := fio.(*ring.Reactor)
	if async && recycle {
		l.SetAsyncRetention(r, func() {})
	}
	out := bufio.NewWriter(os.Stdout)
	rng := rand.New(rand.NewPCG(uint64(os.Getpid()), 1))
	b := batch.NewBuilder(batch.BuilderOptions{})
	for i := 0; i < crashChildBatches; i++ {
		groups := 1 + rng.IntN(4)
		batches := make([][]byte, 0, groups)
		next := l.EndOffset()
		for g := 0; g < groups; g++ {
			b.Reset()
			for r := 1 + rng.IntN(5); r > 0; r-- {
				b.Append(next, nil, crashValue(next), nil)
				next++
			}
			bb, err := b.Build(nil)
			if err != nil {
				fmt.Println("error", err)
				os.Exit(3)
			}
			batches = append(batches, bb)
		}
		if _, err := l.AppendBatches(batches); err != nil {
			fmt.Println("error", err)
			os.Exit(3)
		}
		if err := l.Flush(); err != nil {
			fmt.Println("error", err)
			os.Exit(3)
		}
		if recycle && i%4 == 3 {
			if _, err := l.EnforceRetention(time.Now()); err != nil {
				fmt.Println("error", err)
				os.Exit(3)
			}
		}
		if async && recycle && l.retention.inFlight() && rng.IntN(8) == 0 {
			// The next op of the pass's chain completes (the ring delivers completions
			// only when the child waits: it runs no loop).
			phase := l.retention.file.phase
			if err := r.AwaitWrites(func() bool { return l.retention.file.phase != phase }); err != nil {
				fmt.Println("error", err)
				os.Exit(3)
			}
		}
		flags := "" // " stale": the active segment is a recycled file with old batches past its end
		if l.active().stale {
			flags += " stale"
		}
		if l.RetentionPending() { // " retention": a retention pass is in flight or not yet retired
			flags += " retention"
		}
		if l.FileJobsPending() > 0 { // " unlinks": a retired segment's unlinks or rename into the pool in flight
			flags += " unlinks"
		}
		fmt.Fprintf(out, "ack %d%s\n", l.SyncedOffset(), flags)
		out.Flush()
	}
	os.Exit(0)
}

// TestCrashSIGKILL kills a real child process with SIGKILL at random moments while it appends
// with flush=always, then reopens the log and checks that every acknowledged record is
// present and intact and that the log is a contiguous run of valid batches. The second half
// of the rounds runs retention and recycles retired segment files, so the child often dies
// with an old segment's valid batches past the end of its active file.
//
// What a kill meets is not left to the luck of killAfter where the test requires it: in the
// recycle rounds with round%4 == 0 the parent reads on past killAfter to the first
// acknowledgement whose child has a recycled active segment (" stale"), with round%4 == 2
// (the reactor, so the ring's retention) to the first with a retention pass in flight, each
// within crashFlagAcksMax more (the child recycles and retains every few appends, so a
// child that never shows it is a failure, not bad luck). With round%4 == 3 it reads on to a
// retired segment's unlinks or pool rename in flight on the child's ring for up to
// crashFlagAcksMax/4 more: whether one is still in flight at an acknowledgement is kernel
// timing (the child reaps completions whenever it waits), so those kills are counted, not
// required; TestAsyncRetentionCrash and TestAsyncSnapshotCrash crash with unlinks in flight
// on purpose. The flags are the child's state at its last acknowledgement: the kill lands
// a little later (the child keeps appending).
func TestCrashSIGKILL(t *testing.T) {
	if os.Getenv(crashChildDirEnv) != "" {
		t.Skip("in the child")
	}
	dir := t.TempDir()
	seed := uint64(os.Getpid())
	rng := rand.New(rand.NewPCG(seed, 2))
	t.Logf("seed %d", seed)
	acked := int64(0)
	staleKills, retentionKills, unlinkKills := 0, 0, 0
	for round := 0; round < crashRounds; round++ {
		mode := storageModes[round%2]
		io := []string{"syscalls", "reactor"}[(round/2)%2]
		prealloc := []int64{-1, 8 << 10}[(round/4)%2] // zero-filled space ahead of the end (-1: off)
		recycle := round >= crashRounds/2             // retired segment files reused (recycle.go)
		killAfter := 1 + rng.IntN(crashAcksMax)
		if recycle {
			killAfter += 60 + rng.IntN(120) // enough appends for rolls, retirements and reuse
		}
		want, wantAcks, required := "", 0, false
		switch {
		case recycle && round%4 == 0:
			want, wantAcks, required = " stale", crashFlagAcksMax, true
		case recycle && round%4 == 2 && io == "reactor":
			want, wantAcks, required = " retention", crashFlagAcksMax, true
		case recycle && round%4 == 3:
			want, wantAcks = " unlinks", crashFlagAcksMax/4
		}
		got, flags, stderr := runCrashChild(t, dir, mode, io, prealloc, recycle, killAfter, want, wantAcks)
		if required && !strings.Contains(flags, want) {
			t.Fatalf("round %d (%s, %s): no acknowledgement with%s in %d after the first %d", round, mode, io, want, wantAcks, killAfter)
		}
		if strings.Contains(flags, " stale") {
			staleKills++
		}
		if strings.Contains(flags, " retention") {
			retentionKills++
		}
		if strings.Contains(flags, " unlinks") {
			unlinkKills++
		}
		if got < acked {
			t.Fatalf("round %d: child acked %d after %d was acked before", round, got, acked)
		}
		acked = got
		verifyCrashLog(t, dir, round, acked, prealloc, stderr)
	}
	if acked < crashRounds {
		t.Fatalf("children acknowledged only %d records in %d rounds", acked, crashRounds)
	}
	t.Logf("children killed with a recycled active segment: %d, with a retention pass in flight: %d, with a retired segment's unlinks or pool rename in flight: %d",
		staleKills, retentionKills, unlinkKills)
	// staleKills and retentionKills are at least the rounds above that read on to them;
	// unlinkKills is reported, not required (see the test's comment).
}

// crashFlagAcksMax bounds how many acknowledgements past killAfter TestCrashSIGKILL reads
// while it waits for one with a flag: a recycle child shows " stale" within a few rolls
// (32 KiB segments, ~100 acks each) and " retention" within a few appends.
const crashFlagAcksMax = 2000

// runCrashChild starts the child, reads acknowledgements until killAfter of them arrived
// and then, with want set, on until one carries want or wantAcks more arrived, SIGKILLs it
// (it keeps appending in the meantime) and returns the last acknowledged offset and the
// flags of that acknowledgement (" stale": the child's active segment was a recycled file;
// " retention": a retention pass was in flight; " unlinks": a retirement's unlinks or pool
// rename in flight).
func runCrashChild(t *testing.T, dir string, mode StorageMode, io string, prealloc int64, recycle bool, killAfter int, want string, wantAcks int) (int64, string, *bytes.Buffer) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), crashChildDirEnv+"="+dir, crashChildModeEnv+"="+string(mode), crashChildIOEnv+"="+io,
		crashChildPreallocEnv+"="+strconv.FormatInt(prealloc, 10), crashChildRecycleEnv+"="+map[bool]string{true: "1"}[recycle])
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stdout)
	var last int64
	var flags string
	more := func(acks int) bool {
		return acks < killAfter || want != "" && !strings.Contains(flags, want) && acks < killAfter+wantAcks
	}
	for acks := 0; more(acks) && sc.Scan(); {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, "ack "); ok {
			rest, flags, _ = strings.Cut(rest, " ")
			flags = " " + flags
			n, err := strconv.ParseInt(rest, 10, 64)
			if err != nil {
				t.Fatalf("bad ack line %q", line)
			}
			last = n
			acks++
			continue
		}
		if strings.HasPrefix(line, "error") {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("child: %s (stderr %s)", line, stderr.String())
		}
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("kill child: %v", err)
	}
	err = cmd.Wait()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("child did not die by SIGKILL: %v (stderr %s)", err, stderr.String())
	}
	return last, flags, &stderr
}

// verifyCrashLog reopens the log (keeping a zero tail when prealloc > 0) and checks every
// record from the start.
func verifyCrashLog(t *testing.T, dir string, round int, acked, prealloc int64, stderr *bytes.Buffer) {
	t.Helper()
	l, rep, err := OpenLog(dir, LogConfig{SegmentBytes: 32 << 10, IndexIntervalBytes: 1024, PreallocateBytes: prealloc, Logger: quietLogger}, ring.Syscalls{})
	if err != nil {
		t.Fatalf("round %d: reopen: %v", round, err)
	}
	defer l.Close()
	t.Logf("round %d: acked %d, recovered [%d, %d), dropped %d bytes, kept %d zero bytes", round, acked, l.StartOffset(), l.EndOffset(), rep.DroppedBytes, rep.ZeroTailBytes)
	if l.EndOffset() < acked {
		t.Fatalf("round %d: log ends at %d but %d was acknowledged (report %+v, child stderr %s)", round, l.EndOffset(), acked, rep, stderr)
	}
	next := l.StartOffset() // retention (the recycling rounds) moves it
	data := readAll(t, l, 1<<20)
	for len(data) > 0 {
		h, err := validateFirst(data)
		if err != nil {
			t.Fatalf("round %d: batch at offset %d: %v", round, next, err)
		}
		err = batch.Decode(data[:h.Size()], func(offset, ts int64, r *batch.Record) error {
			if offset != next || ts != offset || !bytes.Equal(r.Value, crashValue(offset)) {
				return fmt.Errorf("record at %d (want %d): ts %d value %q", offset, next, ts, r.Value)
			}
			next++
			return nil
		})
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		data = data[h.Size():]
	}
	if next != l.EndOffset() {
		t.Fatalf("round %d: records end at %d, log end %d", round, next, l.EndOffset())
	}
}
