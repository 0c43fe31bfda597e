// Package tuning owns host discovery (CPU/NUMA/IRQ topology from sysfs and procfs), shard and
// IRQ affinity plans, sysctl checks, and applying a plan (dry run by default). It never runs
// unless asked.
package tuning
