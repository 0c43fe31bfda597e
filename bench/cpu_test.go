package bench

import (
	"os"
	"testing"
	"time"
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
