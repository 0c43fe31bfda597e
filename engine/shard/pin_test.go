package shard

import "testing"

func TestDefaultShardCPU(t *testing.T) {
	for _, tc := range []struct {
		shard   int
		allowed []int
		want    int
	}{
		{0, []int{0, 1, 2, 3}, 0},
		{3, []int{0, 1, 2, 3}, 3},
		{0, []int{2, 3}, 2}, // a cpuset that does not start at CPU 0
		{1, []int{2, 3}, 3},
		{2, []int{2, 3}, 2}, // more shards than CPUs wrap
		{5, []int{7}, 7},
	} {
		if got := defaultShardCPU(tc.shard, tc.allowed); got != tc.want {
			t.Errorf("defaultShardCPU(%d, %v) = %d, want %d", tc.shard, tc.allowed, got, tc.want)
		}
	}
}

func TestAllowedCPUs(t *testing.T) {
	cpus := allowedCPUs()
	if len(cpus) == 0 {
		t.Fatal("no CPUs in this process's affinity mask")
	}
	for i := 1; i < len(cpus); i++ {
		if cpus[i] <= cpus[i-1] {
			t.Fatalf("allowed CPUs not increasing: %v", cpus)
		}
	}
}
