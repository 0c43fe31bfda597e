package tuning

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Proposed values and their reasons. Each is a judgement for a log broker that appends
// sequentially and serves mostly-sequential reads; docs/tuning.md explains them.
const (
	readAheadKBSSD          = 256      // a catching-up consumer reads sequentially; more evicts hot tails
	readAheadKBRotational   = 1024     // a seek costs ~8 ms: read more per seek
	socketBufferBytesMax    = 16 << 20 // 16 MiB: a 25 Gbit/s flow with 5 ms RTT needs ~15 MiB in flight
	somaxconnMin            = 4096
	swappinessMax           = 10
	dirtyBackgroundBytesMin = 64 << 20
	dirtyBackgroundBytesMax = 1 << 30
	dirtyBytesMin           = 256 << 20
	dirtyBytesMax           = 8 << 30
	// guestHaltPollNs is the KVM guest's idle polling window the plan proposes when it is
	// off: the kernel's own default for the haltpoll driver (200 µs).
	guestHaltPollNs = 200000
)

type planBuilder struct {
	topo *Topology
	plan *Plan
}

func (b *planBuilder) add(item Item) {
	switch {
	case item.Action != "":
	case item.Current == item.Proposed:
		item.Action = ActionKeep
	case item.Path == "":
		item.Action = ActionAdvise
	default:
		item.Action = ActionSet
	}
	b.plan.Items = append(b.plan.Items, item)
}

// shardsOfQueue returns the CPUs of the shards that use queue q of n (shard s uses queue s mod n).
func (b *planBuilder) shardsOfQueue(q, n int) []int {
	var cpus []int
	for s, cpu := range b.plan.ShardCPUs {
		if s%n == q {
			cpus = append(cpus, cpu)
		}
	}
	return cpus
}

func (b *planBuilder) nic(nic NIC) {
	irqCPUs := b.plan.IRQCPUs
	if b.plan.IRQMode == IRQModeDedicated {
		// Keep a NIC's interrupts on its own node when the IRQ CPUs span several.
		var local []int
		for _, cpu := range irqCPUs {
			if c, _ := b.topo.CPU(cpu); c.Node == nic.Node {
				local = append(local, cpu)
			}
		}
		if len(local) > 0 {
			irqCPUs = local
		}
	}
	for _, irq := range nic.IRQs {
		var target int
		var why string
		if b.plan.IRQMode == IRQModeShared {
			target = b.plan.ShardCPUs[irq.Queue%len(b.plan.ShardCPUs)]
			why = fmt.Sprintf("shared mode: queue %d is served by the shard on CPU %d; taking its interrupt there keeps the packet in that core's cache", irq.Queue, target)
		} else {
			target = irqCPUs[irq.Queue%len(irqCPUs)]
			why = fmt.Sprintf("dedicated mode: interrupts and their softirq work stay off the shard CPUs (%s)", FormatCPUList(b.plan.ShardCPUs))
		}
		b.add(Item{
			Kind: "irq", Target: fmt.Sprintf("%s queue %d: irq %d %s", nic.Name, irq.Queue, irq.IRQ, irq.Name),
			Path:    fmt.Sprintf("/proc/irq/%d/smp_affinity_list", irq.IRQ),
			Current: FormatCPUList(irq.Affinity), Proposed: strconv.Itoa(target), Why: why, Important: true,
		})
	}
	for _, queue := range nic.RXQueues {
		if queue.HasMask {
			b.rps(nic, queue)
		}
	}
	if len(nic.TXQueues) > 1 {
		for _, queue := range nic.TXQueues {
			if queue.HasMask {
				b.xps(nic, queue)
			}
		}
	}
}

func (b *planBuilder) rps(nic NIC, queue Queue) {
	var proposed []int
	var why string
	switch {
	case b.plan.IRQMode == IRQModeDedicated:
		why = "dedicated mode: receive processing stays on the CPU that took the interrupt, never on a shard"
	case len(nic.RXQueues) >= len(b.plan.ShardCPUs):
		why = "the NIC has a receive queue per shard: hardware RSS spreads flows, RPS would only add inter-processor interrupts"
	default:
		proposed = b.shardsOfQueue(queue.Index, len(nic.RXQueues))
		why = fmt.Sprintf("fewer receive queues (%d) than shards (%d): RPS spreads this queue's flows over the shards it serves", len(nic.RXQueues), len(b.plan.ShardCPUs))
		if len(proposed) < 2 {
			proposed = nil
			why = "this queue serves one shard: RPS would only add inter-processor interrupts"
		}
	}
	b.add(Item{
		Kind: "rps", Target: fmt.Sprintf("%s rx queue %d", nic.Name, queue.Index),
		Path:    fmt.Sprintf("%s/%s/queues/rx-%d/rps_cpus", netClassDir, nic.Name, queue.Index),
		Current: FormatCPUMask(queue.CPUs), Proposed: FormatCPUMask(proposed), Why: why,
	})
}

func (b *planBuilder) xps(nic NIC, queue Queue) {
	proposed := b.shardsOfQueue(queue.Index, len(nic.TXQueues))
	why := fmt.Sprintf("shard s transmits on queue s mod %d: one queue per shard avoids queue lock contention and keeps completions local", len(nic.TXQueues))
	if len(proposed) == 0 {
		why = "no shard transmits on this queue"
	}
	b.add(Item{
		Kind: "xps", Target: fmt.Sprintf("%s tx queue %d", nic.Name, queue.Index),
		Path:    fmt.Sprintf("%s/%s/queues/tx-%d/xps_cpus", netClassDir, nic.Name, queue.Index),
		Current: FormatCPUMask(queue.CPUs), Proposed: FormatCPUMask(proposed), Why: why,
	})
}

func (b *planBuilder) disk(disk Disk) {
	queue := fmt.Sprintf("%s/%s/queue", blockDir, disk.Name)
	want, why := "none", "flash with its own queues: an I/O scheduler only adds latency and a lock per request"
	if disk.Rotational {
		want, why = "mq-deadline", "a rotational disk benefits from sorting and deadline merging"
	}
	schedulerItem := Item{Kind: "disk", Target: disk.Name + " scheduler", Path: queue + "/scheduler",
		Current: disk.Scheduler, Proposed: want, Why: why, Important: !disk.Rotational}
	if !slices.Contains(disk.Schedulers, want) {
		schedulerItem.Proposed = disk.Scheduler
		schedulerItem.Why = fmt.Sprintf("%s is not offered by this kernel (%s)", want, strings.Join(disk.Schedulers, " "))
	}
	b.add(schedulerItem)

	requests := Item{Kind: "disk", Target: disk.Name + " nr_requests", Path: queue + "/nr_requests",
		Current: strconv.Itoa(disk.NrRequests), Proposed: strconv.Itoa(disk.NrRequests),
		Why: "the scheduler's default queue depth is right for it"}
	if schedulerItem.Proposed == "none" && disk.HWQueueDepth > disk.NrRequests {
		requests.Proposed = strconv.Itoa(disk.HWQueueDepth)
		requests.Why = fmt.Sprintf("without a scheduler let each queue hold as many requests as the hardware queue (mq/0/nr_tags = %d), so deep io_uring submission is not throttled", disk.HWQueueDepth)
	}
	b.add(requests)

	readAhead, why := readAheadKBSSD, "a consumer catching up reads segments sequentially; 256 KiB keeps the next chunk ready without evicting hot log tails"
	if disk.Rotational {
		readAhead, why = readAheadKBRotational, "each seek costs milliseconds: read 1 MiB ahead per seek for sequential catch-up reads"
	}
	b.add(Item{Kind: "disk", Target: disk.Name + " read_ahead_kb", Path: queue + "/read_ahead_kb",
		Current: strconv.Itoa(disk.ReadAheadKB), Proposed: strconv.Itoa(readAhead), Why: why})

	if disk.RQAffinity >= 0 {
		b.add(Item{Kind: "disk", Target: disk.Name + " rq_affinity", Path: queue + "/rq_affinity",
			Current: strconv.Itoa(disk.RQAffinity), Proposed: "2",
			Why: "2 completes each request on the CPU that submitted it, i.e. on the shard that owns the file"})
	}
	if len(disk.IRQs) > 0 {
		var spread []string
		for _, irq := range disk.IRQs {
			spread = append(spread, fmt.Sprintf("%d:%s", irq.IRQ, orNone(FormatCPUList(irq.Affinity))))
		}
		summary := strings.Join(spread, " ")
		b.add(Item{Kind: "irq", Target: fmt.Sprintf("%s queue IRQs (%d)", disk.Name, len(disk.IRQs)),
			Current: summary, Proposed: summary,
			Why: "managed interrupts: the kernel gives each hardware queue a CPU set and refuses affinity writes; a shard's requests complete on its own queue's CPU"})
	}
}

func (b *planBuilder) setting(logical, proposed, why string, important bool) {
	setting, ok := b.topo.Setting(logical)
	if !ok {
		return
	}
	b.add(Item{Kind: "sysctl", Target: setting.Name, Path: logical, Current: setting.Value, Proposed: proposed, Why: why, Important: important})
}

func (b *planBuilder) current(logical string) (string, bool) {
	setting, ok := b.topo.Setting(logical)
	return setting.Value, ok
}

func (b *planBuilder) currentInt(logical string) (int64, bool) {
	value, ok := b.current(logical)
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(value, 10, 64)
	return n, err == nil
}

func (b *planBuilder) atLeast(logical string, floor int64, why string, important bool) {
	current, ok := b.currentInt(logical)
	if !ok {
		return
	}
	b.setting(logical, strconv.FormatInt(max(current, floor), 10), why, important && current < floor)
}

func (b *planBuilder) sysctls() {
	if current, ok := b.currentInt("/proc/sys/vm/swappiness"); ok {
		b.setting("/proc/sys/vm/swappiness", strconv.FormatInt(min(current, swappinessMax), 10),
			"the log's working set is the page cache; swapping the broker's heap out to keep cold pages in costs far more than it saves", false)
	}
	memory := b.topo.MemTotalBytes
	if memory > 0 {
		background := clampUint(memory/100, dirtyBackgroundBytesMin, dirtyBackgroundBytesMax) &^ (1<<20 - 1)
		dirty := clampUint(memory/10, dirtyBytesMin, dirtyBytesMax) &^ (1<<20 - 1)
		b.setting("/proc/sys/vm/dirty_background_bytes", strconv.FormatUint(background, 10),
			fmt.Sprintf("page-cache mode: start background writeback early (1%% of RAM, %s) so flushing is steady instead of bursty", formatBytes(background)), false)
		b.setting("/proc/sys/vm/dirty_bytes", strconv.FormatUint(dirty, 10),
			fmt.Sprintf("page-cache mode: block writers only past 10%% of RAM (%s) so a slow flush throttles appends late, not at every burst", formatBytes(dirty)), false)
	}
	b.atLeast("/proc/sys/net/core/somaxconn", somaxconnMin, "accept backlog for connection storms when many clients reconnect at once", true)
	b.atLeast("/proc/sys/net/core/rmem_max", socketBufferBytesMax, "lets TCP autotuning grow receive windows to 16 MiB for fast producers over long links", false)
	b.atLeast("/proc/sys/net/core/wmem_max", socketBufferBytesMax, "lets TCP autotuning grow send buffers to 16 MiB for fast consumers over long links", false)
	for _, name := range []string{"tcp_rmem", "tcp_wmem"} {
		logical := "/proc/sys/net/ipv4/" + name
		current, ok := b.current(logical)
		if !ok {
			continue
		}
		fields := strings.Fields(current)
		if len(fields) != 3 {
			continue
		}
		maxBytes, err := strconv.ParseInt(fields[2], 10, 64)
		if err != nil {
			continue
		}
		fields[2] = strconv.FormatInt(max(maxBytes, socketBufferBytesMax), 10)
		b.setting(logical, strings.Join(fields, " "), "raise the autotuning ceiling (third value) to 16 MiB; the minimum and default stay", false)
	}
}

func clampUint(v, low, high uint64) uint64 { return min(max(v, low), high) }

func (b *planBuilder) kernel() {
	if thp, ok := b.topo.Setting(thpEnabledPath); ok {
		proposed := thp.Value
		why := "madvise or never: huge pages only where a program asks for them"
		if thp.Value == "always" && slices.Contains(thp.Choices, "madvise") {
			proposed = "madvise"
			why = "always makes khugepaged compact memory behind the shards (latency spikes) and bloats page-cache-heavy processes; madvise leaves it to code that asks"
		}
		b.add(Item{Kind: "kernel", Target: thp.Name, Path: thp.Path, Current: thp.Value, Proposed: proposed, Why: why})
	}
	if clock, ok := b.topo.Setting(clocksourcePath); ok {
		proposed, why := clock.Value, "reads in the vDSO without a system call"
		important := false
		if !slices.Contains([]string{"tsc", "kvm-clock", "arch_sys_counter"}, clock.Value) {
			why = fmt.Sprintf("%s needs a system call or a slow device read per timestamp; every batch is timestamped", clock.Value)
			important = true
			if slices.Contains(clock.Choices, "tsc") {
				proposed = "tsc"
			}
		}
		b.add(Item{Kind: "kernel", Target: clock.Name, Path: clock.Path, Current: clock.Value, Proposed: proposed, Why: why, Important: important})
	}
	if driver, ok := b.current(cpuidleDriverPath); ok && driver == "haltpoll" {
		if poll, ok := b.topo.Setting(guestHaltPollPath); ok {
			proposed, why, important := poll.Value, "an idle vCPU polls for work this long before it halts", false
			if n, err := strconv.ParseInt(poll.Value, 10, 64); err == nil && n < guestHaltPollNs {
				proposed, important = strconv.Itoa(guestHaltPollNs), true
				why = "KVM guest with halt polling off: every wake-up of an idle vCPU (a request reaching a waiting shard, a reply reaching a waiting client) costs a halt exit and an IPI through the host, tens of µs; polling up to 200 µs first (the kernel's default) cut one-record produce latency by 60 % on a 2-vCPU guest (docs/benchmarks.md), at the price of idle vCPU time spent polling"
			}
			b.add(Item{Kind: "kernel", Target: poll.Name, Path: poll.Path, Current: poll.Value, Proposed: proposed, Why: why, Important: important})
		}
	}
	cpus := slices.Sorted(slices.Values(append(slices.Clone(b.plan.ShardCPUs), b.plan.IRQCPUs...)))
	for _, cpu := range slices.Compact(cpus) {
		governor, ok := b.topo.Governors[cpu]
		if !ok {
			continue
		}
		proposed := governor.Value
		if slices.Contains(governor.Choices, "performance") {
			proposed = "performance"
		}
		b.add(Item{Kind: "kernel", Target: governor.Name, Path: governor.Path, Current: governor.Value, Proposed: proposed,
			Why: "a busy-polling shard looks idle to ondemand/powersave and gets clocked down between bursts"})
	}
}

func (b *planBuilder) services() {
	if len(b.topo.IRQBalancePIDs) > 0 {
		b.add(Item{Kind: "service", Target: "irqbalance",
			Current: "running (pid " + formatIntList(b.topo.IRQBalancePIDs) + ")", Proposed: "stopped",
			Why:       "irqbalance rewrites IRQ affinity every 10 s and would undo this plan: systemctl disable --now irqbalance, or run it with --banirq=N for each NIC queue IRQ",
			Important: true})
	}
	current := "none"
	if len(b.topo.Isolated) > 0 {
		current = "isolcpus=" + FormatCPUList(b.topo.Isolated)
	}
	shards := FormatCPUList(b.plan.ShardCPUs)
	proposed := current
	why := "shard CPUs are isolated from the scheduler's load balancing"
	if len(b.topo.Isolated) == 0 && b.plan.IRQMode == IRQModeDedicated {
		proposed = fmt.Sprintf("isolcpus=managed_irq,domain,%s nohz_full=%s", shards, shards)
		why = "optional boot parameters: keep other tasks, timers and managed IRQs off the shard CPUs (needs a reboot; apply never edits the boot loader)"
	}
	b.add(Item{Kind: "boot", Target: "kernel command line", Current: current, Proposed: proposed, Why: why})
}

// dataMount finds the mount of the data directory's device: of several mounts of it (bind
// mounts), the one with the longest mount point.
func dataMount(topo *Topology, dataDevice string) (Mount, bool) {
	var found Mount
	ok := false
	for _, mount := range topo.Mounts {
		if mount.Dev == dataDevice && (!ok || len(mount.MountPoint) > len(found.MountPoint)) {
			found, ok = mount, true
		}
	}
	return found, ok
}

// fileSystem advises on the file system holding the data directory. Nothing here is
// written by apply: mount options and journals change only by remounting or reformatting.
func (b *planBuilder) fileSystem(mount Mount) {
	target := fmt.Sprintf("%s (%s on %s)", mount.MountPoint, mount.FSType, mount.Source)
	noJournal := mount.FSType == "ext4" && mount.Journal == "no"
	discard := Item{Kind: "fs", Target: target + " discard", Current: "nodiscard", Proposed: "nodiscard",
		Why: "freed blocks are trimmed in batches by fstrim, not at every ftruncate/unlink"}
	if mount.HasOption("discard") || mount.HasOption("discard=sync") {
		discard.Current, discard.Proposed, discard.Action = "discard", "nodiscard + periodic fstrim (fstrim.timer)", ActionAdvise
		discard.Why = "online discard trims the blocks every ftruncate/unlink frees: when a segment is sealed (direct mode cuts the file to size) or deleted by retention. "
		if noJournal {
			discard.Why += "On ext4 without a journal the discard is issued synchronously inside that call, on the shard loop (seen in the seal's ftruncate, blkdev_issue_discard, docs/benchmarks.md \"Direct mode: where the gap to qd64 is\")"
		} else {
			discard.Why += "With a journal or log the discards run at its commit, which fsyncs wait for"
		}
		discard.Why += "; remount with nodiscard and trim weekly with fstrim instead"
	}
	b.add(discard)
	if mount.FSType != "ext4" || mount.Journal == "" {
		return
	}
	journal := Item{Kind: "fs", Target: target + " journal", Current: "journal", Proposed: "journal",
		Why: "fdatasync of an overwrite commits nothing for timestamps"}
	if noJournal {
		journal.Current, journal.Proposed, journal.Action = "no journal", "a journal (tune2fs -O has_journal, unmounted), or XFS", ActionAdvise
		journal.Why = "flush.always topics: without a journal an fdatasync also writes the inode table block holding the segment's inode whenever any inode in that block changed (the segment's own mtime, its index files, other processes' files); on this project's VM that was 17-37 % of the broker's fdatasyncs, +55-340 µs at their p50 (docs/benchmarks.md \"flush.always: where the broker's CPU goes\"); lazytime did not avoid it"
	}
	b.add(journal)
}
