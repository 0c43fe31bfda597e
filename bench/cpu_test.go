package bench

import (
	"math"
	"os"
	"os/exec"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestParseStatCPU(t *testing.T) {
	// A command name with spaces and a ')' must not shift the fields: utime 250, stime 50.
	stat := "4242 (ring log) d) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 3 0 1000 1 1 18446744073709551615"
	got, err := parseStatCPU(stat)
	if err != nil || got != 3.0 {
		t.Fatalf("parseStatCPU = %v, %v; want 3 s", got, err)
	}
	for _, bad := range []string{"", "1 (x) S 1 2", "1 (x) S 1 1 1 0 -1 0 0 0 0 0 -5 1 0", "1 (x) S 1 1 1 0 -1 0 0 0 0 0 a 1 0"} {
		if _, err := parseStatCPU(bad); err == nil {
			t.Errorf("parseStatCPU(%q) accepted", bad)
		}
	}
	if _, err := ReadCPUSeconds(-1); err == nil {
		t.Fatal("ReadCPUSeconds(-1) accepted")
	}
}

// CPU read from /proc grows while this process burns CPU (bounded: 5 s of wall time).
func TestReadCPUSecondsOfThisProcessGrows(t *testing.T) {
	before, err := ReadCPUSeconds(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	x := uint64(1)
	for time.Now().Before(deadline) {
		for range 1 << 16 {
			x = x*6364136223846793005 + 1442695040888963407
		}
		if now, err := ReadCPUSeconds(os.Getpid()); err == nil && now > before {
			return
		}
	}
	t.Fatalf("CPU seconds stayed at %v after 5 s of spinning (x=%d)", before, x)
}

// ReadCPUSeconds resolves less than a /proc tick (10 ms), of this process and of another
// one: a short window (the floor's 0.3 s) would otherwise read a server's CPU as 0 or as
// a few ticks (TestBenchFloor failed so under load). A child that only started and went to
// sleep has used some CPU, far less than a tick.
func TestReadCPUSecondsResolvesBelowATick(t *testing.T) {
	var ts unix.Timespec
	if err := unix.ClockGettime(processCPUClock(os.Getpid()), &ts); err != nil {
		t.Skipf("no process CPU clock here (ReadCPUSeconds reads /proc ticks): %v", err)
	}
	const tick = 1.0 / userHZ
	fine := false
	for attempt := 0; attempt < 100 && !fine; attempt++ {
		before, err := ReadCPUSeconds(os.Getpid())
		if err != nil {
			t.Fatal(err)
		}
		after, err := ReadCPUSeconds(os.Getpid())
		if err != nil {
			t.Fatal(err)
		}
		fine = after > before && after-before < tick/2
	}
	if !fine {
		t.Error("this process's CPU time never advanced by less than half a tick between two reads")
	}
	child := exec.Command("sleep", "10")
	if err := child.Start(); err != nil {
		t.Skipf("no sleep(1) to start: %v", err)
	}
	defer func() { child.Process.Kill(); child.Wait() }()
	var got float64
	var err error
	// Until the child has run: on a loaded machine its first slice can come many
	// milliseconds after Start (1,000 Gosched rounds were not enough in CI at 6882e18).
	for deadline := time.Now().Add(10 * time.Second); got == 0 && time.Now().Before(deadline); {
		if got, err = ReadCPUSeconds(child.Process.Pid); err != nil {
			t.Fatal(err)
		}
		if got == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	if got <= 0 || got >= tick || math.Mod(got, tick) == 0 {
		t.Fatalf("a child that started and sleeps read as %v CPU-s; want a few hundred µs, below a tick", got)
	}
	t.Logf("child sleep(1): %.6f CPU-s", got)
}
