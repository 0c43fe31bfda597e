package e2e

import (
	"fmt"
	"os/exec"
	"regexp"
	"runtime"
	"testing"
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
	if runtime.NumCPU() < 2 {
		t.Skip("needs at least 2 CPUs")
	}
	cpu := runtime.NumCPU() - 1
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
