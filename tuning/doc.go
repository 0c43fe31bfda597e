// Package tuning owns host discovery (CPU/NUMA/IRQ topology from sysfs and procfs), shard and
// IRQ affinity plans, sysctl checks, and applying a plan (dry run by default). It never runs
// unless asked: nothing in the broker's start-up path discovers or writes anything here
// except through the small API below, and it must not touch files outside the tunable parts
// of /sys and /proc.
//
// # Flow
//
//	Discover(roots) ──► *Topology ──► BuildPlan(topo, opts) ──► *Plan ──► Apply(plan, opts)
//	  reads /sys, /proc             pure: no I/O                 JSON plan    dry run unless Yes;
//	  (roots configurable)                                       file         revert script first
//
// Every path inside the package is a logical path beginning with /sys or /proc; Roots maps
// it onto the real trees, so tests and `ringlog tune --sys-root DIR --proc-root DIR` run
// against the fixture trees in testdata/hosts (made with Snapshot, or generated).
//
// # API for the broker
//
// ringlogd pins its shards from a CPU list or a plan file and logs where each shard runs:
//
//	cpus, err := tuning.ParseCPUList("2-5,8")     // ringlogd --cpus LIST
//	plan, err := tuning.LoadPlan("plan.json")      // ringlogd --tune-plan FILE
//	cpus = plan.ShardCPUs                          // shard i pins to ShardCPUs[i]
//	node, err := tuning.NUMANodeOfCPU("/sys", cpu) // log "shard 3: cpu 5, numa node 1"
//
// LoadPlan validates the file (version, shard CPUs, and that every write target is a
// tunable path) and returns ErrBadPlan otherwise. NUMANodeOfCPU returns ErrCPUNotOnline for
// a CPU the host does not have; the broker should refuse to start rather than pin elsewhere.
//
// # Apply safety
//
// Apply reads every target before writing anything, then writes and fsyncs a revert
// script (sh) that restores each original byte for byte, then writes in plan order. A
// failed write rolls back the earlier ones in reverse order and reports
// ErrPartiallyApplied; any failure before the first write reports ErrNothingApplied. Against
// the live /sys and /proc, Apply needs root (ErrNeedRoot).
package tuning
