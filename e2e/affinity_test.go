package e2e

import (
	"fmt"
	"os/exec"
	"regexp"
	"testing"

	"golang.org/x/sys/unix"
)

// TestDefaultPinningStaysInAffinityMask starts ringlogd restricted to one CPU that is not
// CPU 0 (as a cgroup cpuset or taskset does): default pinning must place every shard on an
// allowed CPU, not on CPU i of the machine. Inside a cpuset the latter fails with EINVAL;
// under taskset it silently escapes the operator's restriction.
func TestDefaultPinningStaysInAffinityMask(t *testing.T) {
	taskset, err := exec.LookPath("taskset")
	if err != nil {
		t.Skip("taskset (util-linux) not installed")
	}
	// The highest CPU this test may run on, when it is not the only one (then a shard on
	// "CPU i" of the machine would land outside the set).
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		t.Skipf("read the affinity mask: %v", err)
	}
	if set.Count() < 2 {
		t.Skip("needs at least 2 allowed CPUs")
	}
	cpu := -1
	for i := range 1024 {
		if set.IsSet(i) {
			cpu = i
		}
	}
	b := newBroker(t)
	b.wrap = []string{taskset, "-c", fmt.Sprint(cpu)}
	b.addr = freeAddr(t)
	if err := b.tryStart(); err != nil {
		t.Fatalf("start ringlogd under taskset -c %d: %v", cpu, err)
	}
	shardLine := regexp.MustCompile(`msg=shard index=(\d+) cpu=(-?\d+)`)
	matches := shardLine.FindAllStringSubmatch(b.logText(), -1)
	if len(matches) != 2 {
		t.Fatalf("want 2 shard lines in the log, got %d", len(matches))
	}
	for _, m := range matches {
		if m[2] != fmt.Sprint(cpu) {
			t.Errorf("shard %s pinned to cpu %s, outside the allowed set {%d}", m[1], m[2], cpu)
		}
	}
	b.stop()
}
