package ring

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// TestLostWakeStress hunts lost wake-ups in io_uring waits on O_DIRECT file writes, the
// stall session 14 met in engine's TestCrashSIGKILLAsync (docs/benchmarks.md, "Session 15:
// lost wake-ups"). It drives a bare uringRing (no reactor) the way the reactor does: an
// eventfd read armed, n writes in flight, waits for one completion at a time. A watcher
// goroutine reads the mmap'd CQ tail and SQ flags every lostWakeWatchEvery and notes when a
// completion became visible (posted in the CQ, or parked as task work: IORING_SQ_TASKRUN)
// while the owner was inside io_uring_enter. A wait that sat past lostWakeSatMin after its
// completion was visible is a lost wake-up; a wait that ended at its timeout and found
// completions that the watcher never saw is counted too (task work of a ring without
// TASKRUN_FLAG is invisible from user space). Waits without a timeout are kicked by the
// watcher after lostWakeKickAfter: first an eventfd write (the reactor's wake-up), then
// SIGURG to the thread, and what each kick found is counted.
//
// wait=bound waits as the reactor does with file ops in flight (fileOpWaitMax) and counts
// what the reactor would count as lost wake-ups next to what the watcher saw.
//
// It only logs counts (no timing-dependent assertion). Short by default (one round of the
// wait=bound cases with 3 writes in flight); RINGLOG_LOSTWAKE_ROUNDS=N runs N rounds of
// every case, RINGLOG_LOSTWAKE_LOAD=K starts K `yes >/dev/null` processes beside it,
// RINGLOG_LOSTWAKE_CASES=substring picks cases, RINGLOG_LOSTWAKE_SEED fixes the seed.
func TestLostWakeStress(t *testing.T) {
	if why := uringUnavailable(); why != "" {
		t.Skipf("io_uring unavailable: %s", why)
	}
	// By default one round of the cases the reactor meets (3 writes in flight, its 10 ms
	// bound): about a second. RINGLOG_LOSTWAKE_ROUNDS runs every case.
	rounds, inflights, waits := 1, []int{3}, []string{"bound"}
	if v := os.Getenv("RINGLOG_LOSTWAKE_ROUNDS"); v != "" {
		rounds, _ = strconv.Atoi(v)
		inflights, waits = []int{1, 3, 8}, []string{"timeout", "none", "bound"}
	}
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("RINGLOG_LOSTWAKE_SEED"); v != "" {
		seed, _ = strconv.ParseUint(v, 10, 64)
	}
	t.Logf("seed %d, %d rounds per case", seed, rounds)
	if v := os.Getenv("RINGLOG_LOSTWAKE_LOAD"); v != "" {
		n, _ := strconv.Atoi(v)
		startYesLoad(t, n)
	}
	pick := os.Getenv("RINGLOG_LOSTWAKE_CASES")
	dir := t.TempDir()
	if !directSupported(dir) {
		t.Skipf("O_DIRECT unavailable in %s", dir)
	}
	var total lostWakeTally
	for _, flags := range []string{"plain", "coop", "defer"} {
		for _, shape := range []string{"new", "repeat", "prealloc", "overwrite"} {
			for _, inflight := range inflights {
				for _, wait := range waits {
					name := fmt.Sprintf("%s/%s/inflight=%d/wait=%s", flags, shape, inflight, wait)
					if pick != "" && !strings.Contains(name, pick) {
						continue
					}
					c := lostWakeCase{flags: flags, shape: shape, inflight: inflight, waitKind: wait}
					rng := rand.New(rand.NewPCG(seed, uint64(len(name))))
					tally, err := c.run(dir, rounds, rng)
					if err != nil {
						t.Fatalf("%s: %v", name, err)
					}
					t.Logf("%s: %s", name, tally)
					total.add(tally)
				}
			}
		}
	}
	t.Logf("total: %s", total)
}

const (
	lostWakeWatchEvery = 200 * time.Microsecond
	lostWakeSatMin     = 100 * time.Millisecond // a completion visible this long before its wait ended
	lostWakeTimeout    = 500 * time.Millisecond // the EXT_ARG timeout of wait=timeout
	lostWakeKickAfter  = 500 * time.Millisecond // wait=none: the watcher kicks a wait this long
	lostWakeSteps      = 64                     // write steps (n writes each) per round
	lostWakeBlockBytes = 4096
	// lostWakeAsleepAfter: how long after a completion became visible the watcher looks at
	// the owner's scheduler state (a woken owner is runnable within microseconds).
	lostWakeAsleepAfter = 2 * time.Millisecond
)

type lostWakeCase struct {
	flags, shape, waitKind string
	inflight               int
}

// lostWakeTally counts what the waits of a case met.
type lostWakeTally struct {
	waits, writes uint64
	// lost: waits that ended at their timeout (or by a kick) although a completion had been
	// visible for lostWakeSatMin; hidden: waits that ended at their timeout (or by a kick)
	// and found completions the watcher had never seen.
	lost, hidden uint64
	// timeouts: waits that ended at their timeout with nothing found; kicksEventfd and
	// kicksSignal: kicks of wait=none waits that were needed.
	timeouts, kicksEventfd, kicksSignal uint64
	eintr                               uint64
	// asleep: waits whose owner the watcher found asleep lostWakeAsleepAfter after a
	// completion was visible (lost wake-ups, rescued by a later event); maxAsleepSat the
	// longest such completion sat.
	asleep       uint64
	maxAsleepSat time.Duration
	// wait=bound (the reactor's 10 ms bound): waits that ran to it and found a write's
	// completion (the reactor's LostWakeups), and those of them whose owner the watcher
	// saw asleep past a visible completion.
	boundFound, boundFoundAsleep uint64
	maxSat                       time.Duration // longest a visible completion waited for its waiter
	maxWait                      time.Duration
	delays                       []time.Duration // submit to reap, per write
	workers                      []string        // io-wq workers at the first waits that found nothing
}

func (a *lostWakeTally) add(b lostWakeTally) {
	a.waits += b.waits
	a.writes += b.writes
	a.lost += b.lost
	a.hidden += b.hidden
	a.timeouts += b.timeouts
	a.kicksEventfd += b.kicksEventfd
	a.kicksSignal += b.kicksSignal
	a.eintr += b.eintr
	a.asleep += b.asleep
	a.boundFound += b.boundFound
	a.boundFoundAsleep += b.boundFoundAsleep
	a.maxAsleepSat = max(a.maxAsleepSat, b.maxAsleepSat)
	a.maxSat = max(a.maxSat, b.maxSat)
	a.maxWait = max(a.maxWait, b.maxWait)
	a.delays = append(a.delays, b.delays...)
	a.workers = append(a.workers, b.workers...)
}

func (a lostWakeTally) String() string {
	p := func(q float64) time.Duration {
		if len(a.delays) == 0 {
			return 0
		}
		d := slices.Clone(a.delays)
		slices.Sort(d)
		return d[min(len(d)-1, int(q*float64(len(d))))]
	}
	return fmt.Sprintf("waits %d writes %d lost %d hidden %d timeouts-empty %d kicks eventfd %d signal %d eintr %d; asleep past a visible completion %d (longest %v); bound expired with a write found %d (owner asleep %d); max sat %v, max wait %v; write p50 %v p99 %v max %v; io-wq at empty ends %v",
		a.waits, a.writes, a.lost, a.hidden, a.timeouts, a.kicksEventfd, a.kicksSignal, a.eintr, a.asleep, a.maxAsleepSat.Round(time.Microsecond), a.boundFound, a.boundFoundAsleep,
		a.maxSat.Round(time.Microsecond), a.maxWait.Round(time.Microsecond), p(0.5).Round(time.Microsecond), p(0.99).Round(time.Microsecond), p(1).Round(time.Microsecond), a.workers)
}

// lostWakeWatch is what the owner and its watcher share.
type lostWakeWatch struct {
	inWait    atomic.Bool
	waitStart atomic.Int64 // unix nanos of the wait in progress
	visibleAt atomic.Int64 // first time the watcher saw a completion during it (0: none)
	kicked    atomic.Int32 // 1: eventfd written, 2: signal sent
	// asleep: the watcher found the owner's thread sleeping (state S) lostWakeAsleepAfter
	// after a completion became visible: its wake-up was lost (a runnable owner, R, only
	// waits for a CPU).
	asleep atomic.Bool
	stop   atomic.Bool
	tid    int
}

func (c lostWakeCase) config() Config {
	cfg := Config{Entries: 64}.withDefaults()
	switch c.flags {
	case "coop":
		cfg.CoopTaskrun = true
	case "defer":
		cfg.SingleIssuer, cfg.DeferTaskrun = true, true
	}
	return cfg
}

func (c lostWakeCase) run(dir string, rounds int, rng *rand.Rand) (lostWakeTally, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var tally lostWakeTally
	r, err := newUringRing(c.config())
	if err != nil {
		return tally, err
	}
	defer r.Close()
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return tally, err
	}
	defer unix.Close(efd)
	scratch := new([8]byte)
	var pin runtime.Pinner
	pin.Pin(scratch)
	defer pin.Unpin()
	bufMem, err := unix.Mmap(-1, 0, 16*lostWakeBlockBytes, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		return tally, err
	}
	defer unix.Munmap(bufMem)
	for i := range bufMem {
		bufMem[i] = byte(rng.Uint32())
	}
	w := &lostWakeWatch{tid: unix.Gettid()}
	done := make(chan struct{})
	go c.watch(r, w, efd, done)
	defer func() { w.stop.Store(true); <-done }()
	armed := false
	for round := 0; round < rounds; round++ {
		path := filepath.Join(dir, fmt.Sprintf("seg-%s-%d", c.shape, round))
		fd, err := c.openFile(path, bufMem)
		if err != nil {
			return tally, err
		}
		err = c.round(r, w, fd, efd, scratch, bufMem, &armed, &tally, rng)
		unix.Close(fd)
		os.Remove(path)
		if err != nil {
			return tally, err
		}
	}
	return tally, nil
}

func directSupported(dir string) bool {
	fd, err := unix.Open(filepath.Join(dir, "probe"), unix.O_RDWR|unix.O_CREAT|unix.O_DIRECT|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return false
	}
	unix.Close(fd)
	return true
}

// openFile creates the round's file: empty (new, repeat: every write extends it),
// fallocated (prealloc: unwritten extents inside i_size) or written and synced (overwrite).
func (c lostWakeCase) openFile(path string, buf []byte) (int, error) {
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_TRUNC|unix.O_DIRECT|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return -1, err
	}
	size := int64(lostWakeSteps * 16 * lostWakeBlockBytes)
	switch c.shape {
	case "prealloc":
		err = unix.Fallocate(fd, 0, 0, size)
	case "overwrite":
		for off := int64(0); off < size && err == nil; off += int64(len(buf)) {
			_, err = unix.Pwrite(fd, buf, off)
		}
		if err == nil {
			err = unix.Fdatasync(fd)
		}
	}
	if err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// round runs lostWakeSteps steps of c.inflight writes. repeat rewrites the previous step's
// last block first (the partial tail block of a direct-mode segment), then extends.
func (c lostWakeCase) round(r *uringRing, w *lostWakeWatch, fd, efd int, scratch *[8]byte, buf []byte, armed *bool, tally *lostWakeTally, rng *rand.Rand) error {
	next := int64(0)
	for step := 0; step < lostWakeSteps; step++ {
		n := 1 + rng.IntN(c.inflight)
		submitted := make(map[uint64]time.Time, n)
		for i := 0; i < n; i++ {
			off := next
			if c.shape == "repeat" && i == 0 && next > 0 {
				off = next - lostWakeBlockBytes
			} else {
				next += lostWakeBlockBytes
			}
			sqe := r.GetSQE()
			b := buf[i*lostWakeBlockBytes : (i+1)*lostWakeBlockBytes]
			sqe.PrepWrite(fd, b, uint64(off))
			sqe.UserData = uint64(step)<<8 | uint64(i)
			submitted[sqe.UserData] = time.Now()
		}
		if !*armed {
			sqe := r.GetSQE()
			sqe.PrepRead(efd, scratch[:], noOffset)
			sqe.UserData = tokenWake
			*armed = true
		}
		for len(submitted) > 0 {
			if err := c.wait(r, w, tally); err != nil {
				return err
			}
			var cqes [32]CQE
			k := r.PeekCQEs(cqes[:])
			for _, cqe := range cqes[:k] {
				if cqe.UserData == tokenWake {
					*armed = false
					continue
				}
				at, ok := submitted[cqe.UserData]
				if !ok {
					return fmt.Errorf("completion for unknown user data %#x", cqe.UserData)
				}
				if cqe.Res != lostWakeBlockBytes {
					return fmt.Errorf("write %#x: res %d", cqe.UserData, cqe.Res)
				}
				delete(submitted, cqe.UserData)
				tally.writes++
				tally.delays = append(tally.delays, time.Since(at))
			}
			if !*armed {
				sqe := r.GetSQE()
				sqe.PrepRead(efd, scratch[:], noOffset)
				sqe.UserData = tokenWake
				*armed = true
			}
		}
	}
	return nil
}

// wait submits what is queued and waits for one completion as the reactor does, then
// classifies the wait by what the watcher saw.
func (c lostWakeCase) wait(r *uringRing, w *lostWakeWatch, tally *lostWakeTally) error {
	pending := r.flush()
	flags := enterGetEvents | enterExtArg
	r.waitArg = getEventsArg{}
	timeout := map[string]time.Duration{"timeout": lostWakeTimeout, "bound": fileOpWaitMax}[c.waitKind]
	if timeout > 0 {
		r.waitTs.SetDuration(int64(timeout))
		r.waitArg.Ts = uint64(uintptr(unsafe.Pointer(&r.waitTs)))
	}
	w.visibleAt.Store(0)
	w.kicked.Store(0)
	w.asleep.Store(false)
	start := time.Now()
	w.waitStart.Store(start.UnixNano())
	already := writePosted(r)
	w.inWait.Store(true)
	_, err := r.enter(pending, 1, flags, unsafe.Pointer(&r.waitArg), unsafe.Sizeof(r.waitArg))
	w.inWait.Store(false)
	end := time.Now()
	tally.waits++
	elapsed := end.Sub(start)
	tally.maxWait = max(tally.maxWait, elapsed)
	switch {
	case err == nil, errors.Is(err, unix.ETIME):
	case errors.Is(err, unix.EINTR):
		tally.eintr++
	default:
		return fmt.Errorf("io_uring_enter: %w", err)
	}
	found := writePosted(r)
	if !found && r.cqNeedsFlush() {
		r.enter(0, 0, enterGetEvents, nil, 0)
		found = writePosted(r)
	}
	if already {
		return nil
	}
	kicked := w.kicked.Load()
	switch kicked {
	case 1:
		tally.kicksEventfd++
	case 2:
		tally.kicksSignal++
	}
	endedLate := kicked != 0 || timeout > 0 && elapsed >= timeout
	if c.waitKind == "bound" && endedLate && found {
		// What the reactor counts as a lost wake-up (Stats.LostWakeups), against what the
		// watcher saw: the owner asleep past a visible completion.
		tally.boundFound++
		if w.asleep.Load() {
			tally.boundFoundAsleep++
		}
	}
	if v := w.visibleAt.Load(); v != 0 {
		sat := end.Sub(time.Unix(0, v))
		tally.maxSat = max(tally.maxSat, sat)
		if w.asleep.Load() {
			tally.asleep++
			tally.maxAsleepSat = max(tally.maxAsleepSat, sat)
		}
		if endedLate && sat >= lostWakeSatMin {
			tally.lost++
		}
		return nil
	}
	switch {
	case endedLate && found:
		tally.hidden++
	case endedLate:
		tally.timeouts++
		if tally.timeouts <= 3 {
			tally.workers = append(tally.workers, ioWorkerStates())
		}
	}
	return nil
}

// writePosted reports whether a write's completion (anything but the eventfd read's) is in
// the CQ, without consuming it. The owner and the watcher both call it; the watcher's view
// may be stale by a CQE, which only delays its note.
func writePosted(r *uringRing) bool {
	tail := atomic.LoadUint32(r.cqTail)
	for head := atomic.LoadUint32(r.cqHead); head != tail; head++ {
		if r.cqes[head&r.cqMask].UserData != tokenWake {
			return true
		}
	}
	return false
}

// threadState is the scheduler state letter of thread tid of this process ('?' unknown).
func threadState(tid int) byte {
	stat, err := os.ReadFile("/proc/self/task/" + strconv.Itoa(tid) + "/stat")
	if err != nil {
		return '?'
	}
	if i := strings.LastIndexByte(string(stat), ')'); i >= 0 && i+2 < len(stat) {
		return stat[i+2]
	}
	return '?'
}

// ioWorkerStates lists this process's io-wq workers (iou-wrk-*) with their scheduler
// state and wait channel: a wait that found nothing at its end tells a worker stuck on the
// disk (D) from an idle one (S).
func ioWorkerStates() string {
	tasks, _ := os.ReadDir("/proc/self/task")
	var out []string
	for _, task := range tasks {
		comm, _ := os.ReadFile("/proc/self/task/" + task.Name() + "/comm")
		if !strings.HasPrefix(string(comm), "iou-wrk") {
			continue
		}
		stat, _ := os.ReadFile("/proc/self/task/" + task.Name() + "/stat")
		wchan, _ := os.ReadFile("/proc/self/task/" + task.Name() + "/wchan")
		state := "?"
		if i := strings.LastIndexByte(string(stat), ')'); i >= 0 && i+2 < len(stat) {
			state = string(stat[i+2])
		}
		out = append(out, fmt.Sprintf("%s:%s:%s", task.Name(), state, wchan))
	}
	return "[" + strings.Join(out, " ") + "]"
}

// watch polls the CQ tail and the SQ flags while the owner waits, notes when a completion
// became visible, and kicks wait=none waits that last past lostWakeKickAfter.
func (c lostWakeCase) watch(r *uringRing, w *lostWakeWatch, efd int, done chan<- struct{}) {
	defer close(done)
	for !w.stop.Load() {
		time.Sleep(lostWakeWatchEvery)
		if !w.inWait.Load() {
			continue
		}
		visible := writePosted(r) || atomic.LoadUint32(r.sqFlags)&sqTaskrun != 0
		if visible && w.visibleAt.Load() == 0 {
			w.visibleAt.CompareAndSwap(0, time.Now().UnixNano())
		}
		if v := w.visibleAt.Load(); v != 0 && !w.asleep.Load() && time.Since(time.Unix(0, v)) > lostWakeAsleepAfter &&
			w.inWait.Load() && threadState(w.tid) == 'S' {
			w.asleep.Store(true)
		}
		if c.waitKind != "none" {
			continue
		}
		waited := time.Since(time.Unix(0, w.waitStart.Load()))
		switch {
		case waited > 2*lostWakeKickAfter && w.kicked.Load() == 1:
			w.kicked.Store(2)
			unix.Tgkill(unix.Getpid(), w.tid, unix.SIGURG)
		case waited > lostWakeKickAfter && w.kicked.Load() == 0:
			w.kicked.Store(1)
			var one [8]byte
			one[0] = 1
			unix.Write(efd, one[:])
		}
	}
}

// startYesLoad starts n `yes >/dev/null` processes and stops them (by their pids) when the
// test ends.
func startYesLoad(t *testing.T, n int) {
	for i := 0; i < n; i++ {
		cmd := exec.Command("yes")
		devnull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stdout = devnull
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			cmd.Process.Kill()
			cmd.Wait()
			devnull.Close()
		})
	}
	t.Logf("started %d `yes >/dev/null` load processes", n)
}
