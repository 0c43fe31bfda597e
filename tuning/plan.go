package tuning

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// IRQMode says where NIC queue interrupts go.
type IRQMode string

const (
	// IRQModeDedicated puts NIC interrupts (and their softirq work) on CPUs that run no
	// shard, so shard loops are never preempted by packet processing.
	IRQModeDedicated IRQMode = "dedicated"
	// IRQModeShared puts each queue's interrupt on the CPU of the shard that serves that
	// queue, so a packet is processed and consumed on one core with a warm cache.
	IRQModeShared IRQMode = "shared"
)

// ParseIRQMode parses "dedicated" or "shared".
func ParseIRQMode(s string) (IRQMode, error) {
	switch IRQMode(s) {
	case IRQModeDedicated, IRQModeShared:
		return IRQMode(s), nil
	}
	return "", fmt.Errorf("%w %q: want dedicated or shared", ErrBadIRQMode, s)
}

// Action says what apply does with a plan item.
type Action string

const (
	ActionSet    Action = "set"    // apply writes Proposed to Path
	ActionKeep   Action = "keep"   // already as proposed, or nothing to change
	ActionAdvise Action = "advise" // the operator must act (boot parameter, a daemon); apply skips it
)

// Item is one knob of a plan: what it is now, what the plan proposes, and why.
type Item struct {
	Kind   string `json:"kind"`   // irq, rps, xps, disk, fs, sysctl, kernel, service, boot
	Target string `json:"target"` // what the knob belongs to, for humans
	// Path is the logical file apply writes (under /sys or /proc); empty for advice.
	Path      string `json:"path,omitempty"`
	Current   string `json:"current"`
	Proposed  string `json:"proposed"`
	Why       string `json:"why"`
	Important bool   `json:"important,omitempty"`
	Action    Action `json:"action"`
}

// PlanVersion is the version of the plan file format written by this package.
const PlanVersion = 1

// Plan is a complete tuning plan for one host.
type Plan struct {
	Version int     `json:"version"`
	Host    string  `json:"host,omitempty"`
	IRQMode IRQMode `json:"irq_mode"`
	// ShardCPUs is the CPU of each shard, in shard order: ringlogd pins shard i to
	// ShardCPUs[i].
	ShardCPUs []int `json:"shard_cpus"`
	// ShardNodes is the NUMA node of each shard's CPU.
	ShardNodes []int `json:"shard_nodes"`
	// IRQCPUs are the CPUs that take NIC interrupts.
	IRQCPUs []int `json:"irq_cpus"`
	// Summary describes the host in a few lines.
	Summary []string `json:"summary"`
	Items   []Item   `json:"items"`
}

// Changes returns the items apply would write.
func (p *Plan) Changes() []Item {
	var changes []Item
	for _, item := range p.Items {
		if item.Action == ActionSet {
			changes = append(changes, item)
		}
	}
	return changes
}

// Problems returns the important items that are not as proposed (what `tune check` fails on).
func (p *Plan) Problems() []Item {
	var problems []Item
	for _, item := range p.Items {
		if item.Important && item.Action != ActionKeep {
			problems = append(problems, item)
		}
	}
	return problems
}

// PlanOptions configure BuildPlan.
type PlanOptions struct {
	// Shards is the number of shards; 0 means one per available physical core.
	Shards int
	// IRQMode defaults to dedicated.
	IRQMode IRQMode
	// CPUs, when set, are the shard CPUs (as with ringlogd --cpus); Shards is then ignored.
	CPUs []int
	// NICs and Disks restrict the plan to these devices; empty means every physical one.
	NICs  []string
	Disks []string
	// DataDevice ("major:minor", the st_dev of the data directory) picks the data disk: the
	// only disk tuned, and the second NUMA preference after the NIC.
	DataDevice string
}

var (
	// ErrBadIRQMode reports an IRQ mode other than dedicated or shared.
	ErrBadIRQMode = errors.New("bad irq mode")
	// ErrCPUNotOnline reports a requested CPU the host does not have online.
	ErrCPUNotOnline = errors.New("cpu not online")
	// ErrTooManyShards reports more shards than the host has CPUs for.
	ErrTooManyShards = errors.New("too many shards")
	// ErrNoIRQCPU reports that dedicated mode leaves no CPU for interrupts.
	ErrNoIRQCPU = errors.New("no cpu left for interrupts")
	// ErrUnknownDevice reports a --nic or --disk name that discovery did not find.
	ErrUnknownDevice = errors.New("unknown device")
)

// shardsMax bounds the shard count a plan accepts (matches the CPU bound).
const shardsMax = cpuIDMax + 1

// BuildPlan chooses shard CPUs and IRQ CPUs for topo and lists every knob with its current
// and proposed value. It reads nothing: all input is in topo.
func BuildPlan(topo *Topology, opts PlanOptions) (*Plan, error) {
	if opts.IRQMode == "" {
		opts.IRQMode = IRQModeDedicated
	}
	if _, err := ParseIRQMode(string(opts.IRQMode)); err != nil {
		return nil, err
	}
	if opts.Shards < 0 || opts.Shards > shardsMax {
		return nil, fmt.Errorf("%w: %d shards (want 0..%d)", ErrTooManyShards, opts.Shards, shardsMax)
	}
	nics, err := selectNICs(topo, opts.NICs)
	if err != nil {
		return nil, err
	}
	disks, err := selectDisks(topo, opts.Disks, opts.DataDevice)
	if err != nil {
		return nil, err
	}
	p := &Plan{Version: PlanVersion, Host: topo.Hostname, IRQMode: opts.IRQMode}
	if err := p.chooseCPUs(topo, opts, preferredNodes(nics, disks)); err != nil {
		return nil, err
	}
	for _, cpu := range p.ShardCPUs {
		c, _ := topo.CPU(cpu)
		p.ShardNodes = append(p.ShardNodes, c.Node)
	}
	p.Summary = summarize(topo, p)
	b := &planBuilder{topo: topo, plan: p}
	for _, nic := range nics {
		b.nic(nic)
	}
	for _, disk := range disks {
		b.disk(disk)
	}
	if mount, ok := dataMount(topo, opts.DataDevice); ok {
		b.fileSystem(mount)
	}
	b.sysctls()
	b.kernel()
	b.services()
	return p, nil
}

func selectNICs(topo *Topology, names []string) ([]NIC, error) {
	if len(names) == 0 {
		return topo.NICs, nil
	}
	var selected []NIC
	for _, name := range names {
		i := slices.IndexFunc(topo.NICs, func(n NIC) bool { return n.Name == name })
		if i < 0 {
			return nil, fmt.Errorf("%w: nic %q (found: %s)", ErrUnknownDevice, name, nicNames(topo))
		}
		selected = append(selected, topo.NICs[i])
	}
	return selected, nil
}

func selectDisks(topo *Topology, names []string, dataDevice string) ([]Disk, error) {
	if dataDevice != "" {
		if len(names) > 0 {
			return nil, fmt.Errorf("%w: give the data disk by name or by data directory, not both", ErrUnknownDevice)
		}
		for _, disk := range topo.Disks {
			if disk.Dev == dataDevice || slices.Contains(disk.PartitionDevs, dataDevice) {
				return []Disk{disk}, nil
			}
		}
		return nil, fmt.Errorf("%w: the data directory is on device %s, which is not a physical disk (LVM, RAID, tmpfs?); name its disks with --disk (found: %s)",
			ErrUnknownDevice, dataDevice, diskNames(topo))
	}
	if len(names) == 0 {
		return topo.Disks, nil
	}
	var selected []Disk
	for _, name := range names {
		i := slices.IndexFunc(topo.Disks, func(d Disk) bool { return d.Name == name })
		if i < 0 {
			return nil, fmt.Errorf("%w: disk %q (found: %s)", ErrUnknownDevice, name, diskNames(topo))
		}
		selected = append(selected, topo.Disks[i])
	}
	return selected, nil
}

func nicNames(topo *Topology) string {
	var names []string
	for _, n := range topo.NICs {
		names = append(names, n.Name)
	}
	return orNone(strings.Join(names, ", "))
}

func diskNames(topo *Topology) string {
	var names []string
	for _, d := range topo.Disks {
		names = append(names, d.Name)
	}
	return orNone(strings.Join(names, ", "))
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// preferredNodes lists the NUMA nodes of the NICs, then of the disks, first seen first: the
// nodes shards should sit on so that packets and blocks land in local memory.
func preferredNodes(nics []NIC, disks []Disk) []int {
	var nodes []int
	add := func(node int) {
		if node >= 0 && !slices.Contains(nodes, node) {
			nodes = append(nodes, node)
		}
	}
	for _, nic := range nics {
		if len(nic.IRQs) > 0 {
			add(nic.Node)
		}
	}
	for _, disk := range disks {
		add(disk.Node)
	}
	return nodes
}

// core is one physical core: its SMT threads in ID order.
type core struct {
	node int
	cpus []int
}

// physicalCores groups CPUs into cores ordered by node preference, then by first CPU.
func physicalCores(topo *Topology, preferred []int) []core {
	byKey := map[[2]int]*core{}
	var cores []*core
	for _, cpu := range topo.CPUs {
		key := [2]int{cpu.Package, cpu.Core}
		c, ok := byKey[key]
		if !ok {
			c = &core{node: cpu.Node}
			byKey[key] = c
			cores = append(cores, c)
		}
		c.cpus = append(c.cpus, cpu.ID)
	}
	rank := func(node int) int {
		if i := slices.Index(preferred, node); i >= 0 {
			return i
		}
		return len(preferred) + node
	}
	sort.SliceStable(cores, func(i, j int) bool {
		ri, rj := rank(cores[i].node), rank(cores[j].node)
		if ri != rj {
			return ri < rj
		}
		return cores[i].cpus[0] < cores[j].cpus[0]
	})
	result := make([]core, len(cores))
	for i, c := range cores {
		result[i] = *c
	}
	return result
}

// restrictCores keeps only the CPUs in keep, dropping cores left empty.
func restrictCores(cores []core, keep func(cpu int) bool) []core {
	var result []core
	for _, c := range cores {
		var cpus []int
		for _, cpu := range c.cpus {
			if keep(cpu) {
				cpus = append(cpus, cpu)
			}
		}
		if len(cpus) > 0 {
			result = append(result, core{node: c.node, cpus: cpus})
		}
	}
	return result
}

// pickShards takes one CPU per core in order (the first SMT thread), and only when every core
// has a shard does it go round again on the second threads. n == 0 means one per core.
func pickShards(pool []core, n int) ([]int, error) {
	if n == 0 {
		n = len(pool)
	}
	var picked []int
	for thread := 0; len(picked) < n; thread++ {
		added := false
		for _, c := range pool {
			if thread < len(c.cpus) && len(picked) < n {
				picked = append(picked, c.cpus[thread])
				added = true
			}
		}
		if !added {
			break
		}
	}
	if len(picked) < n || n == 0 {
		return nil, fmt.Errorf("%w: %d shards asked, %d CPUs available for shards (%s)",
			ErrTooManyShards, n, len(picked), orNone(FormatCPUList(picked)))
	}
	return picked, nil
}

func (p *Plan) chooseCPUs(topo *Topology, opts PlanOptions, preferred []int) error {
	cores := physicalCores(topo, preferred)
	isolated := func(cpu int) bool { return slices.Contains(topo.Isolated, cpu) }
	if len(opts.CPUs) > 0 {
		return p.useGivenCPUs(topo, opts, cores)
	}
	pool := cores
	var irqCPUs []int
	switch {
	case len(topo.Isolated) > 0:
		// The operator isolated CPUs for pinned work: shards go there, interrupts go to
		// the housekeeping CPUs the kernel still balances.
		pool = restrictCores(cores, isolated)
		for _, cpu := range topo.CPUs {
			if !isolated(cpu.ID) {
				irqCPUs = append(irqCPUs, cpu.ID)
			}
		}
		if len(pool) == 0 {
			return fmt.Errorf("%w: isolated CPUs %s are not online", ErrTooManyShards, FormatCPUList(topo.Isolated))
		}
	case opts.IRQMode == IRQModeDedicated:
		// Reserve about one core in eight (at least one) on the preferred node for
		// interrupts: a 25 GbE NIC at line rate needs roughly one core of softirq time.
		reserved := max(1, len(cores)/8)
		if len(cores) <= reserved {
			return fmt.Errorf("%w: dedicated mode needs at least 2 physical cores, host has %d; use --irq-mode shared",
				ErrNoIRQCPU, len(cores))
		}
		for _, c := range cores[:reserved] {
			irqCPUs = append(irqCPUs, c.cpus...)
		}
		pool = cores[reserved:]
	}
	shards, err := pickShards(pool, opts.Shards)
	if err != nil {
		return err
	}
	p.ShardCPUs = shards
	if opts.IRQMode == IRQModeShared {
		irqCPUs = slices.Clone(shards)
	}
	if len(irqCPUs) == 0 {
		return fmt.Errorf("%w: every CPU is isolated; leave one for the kernel", ErrNoIRQCPU)
	}
	slices.Sort(irqCPUs)
	p.IRQCPUs = irqCPUs
	return nil
}

func (p *Plan) useGivenCPUs(topo *Topology, opts PlanOptions, cores []core) error {
	var missing []int
	seen := map[int]bool{}
	for _, cpu := range opts.CPUs {
		if _, ok := topo.CPU(cpu); !ok {
			missing = append(missing, cpu)
		}
		if seen[cpu] {
			return fmt.Errorf("%w: cpu %d given twice", ErrBadCPUList, cpu)
		}
		seen[cpu] = true
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: %s (online: %s)", ErrCPUNotOnline, FormatCPUList(missing), FormatCPUList(topo.CPUIDs()))
	}
	p.ShardCPUs = slices.Clone(opts.CPUs)
	if opts.IRQMode == IRQModeShared {
		p.IRQCPUs = slices.Sorted(slices.Values(opts.CPUs))
		return nil
	}
	// Dedicated: prefer whole cores without shards, outside isolcpus; then any CPU without a shard.
	var wholeCores, freeCPUs []int
	for _, c := range cores {
		hasShard := slices.ContainsFunc(c.cpus, func(cpu int) bool { return seen[cpu] })
		for _, cpu := range c.cpus {
			if seen[cpu] || slices.Contains(topo.Isolated, cpu) {
				continue
			}
			freeCPUs = append(freeCPUs, cpu)
			if !hasShard {
				wholeCores = append(wholeCores, cpu)
			}
		}
	}
	irqCPUs := wholeCores
	if len(irqCPUs) == 0 {
		irqCPUs = freeCPUs
	}
	if len(irqCPUs) == 0 {
		return fmt.Errorf("%w: shards on %s leave no CPU for interrupts; use --irq-mode shared",
			ErrNoIRQCPU, FormatCPUList(opts.CPUs))
	}
	slices.Sort(irqCPUs)
	p.IRQCPUs = irqCPUs
	return nil
}

func summarize(topo *Topology, p *Plan) []string {
	smt := "SMT off"
	for _, cpu := range topo.CPUs {
		if len(cpu.Siblings) > 1 {
			smt = fmt.Sprintf("SMT on, %d threads per core", len(cpu.Siblings))
			break
		}
	}
	cores := physicalCores(topo, nil)
	packages := map[int]bool{}
	for _, cpu := range topo.CPUs {
		packages[cpu.Package] = true
	}
	lines := []string{fmt.Sprintf("host %s, kernel %s: %s, %s (%s), %s, %s, %s RAM",
		orNone(topo.Hostname), orNone(topo.Kernel), plural(len(topo.CPUs), "CPU"), plural(len(cores), "physical core"), smt,
		plural(len(packages), "socket"), plural(len(topo.Nodes), "NUMA node"), formatBytes(topo.MemTotalBytes))}
	for _, node := range topo.Nodes {
		lines = append(lines, fmt.Sprintf("node %d: CPUs %s, %s", node.ID, orNone(FormatCPUList(node.CPUs)), formatBytes(node.MemTotalBytes)))
	}
	lines = append(lines, fmt.Sprintf("isolated CPUs: %s; nohz_full: %s", orNone(FormatCPUList(topo.Isolated)), orNone(FormatCPUList(topo.NohzFull))))
	for _, nic := range topo.NICs {
		lines = append(lines, fmt.Sprintf("nic %s: node %d, %d rx / %d tx queues, %d queue IRQs", nic.Name, nic.Node, len(nic.RXQueues), len(nic.TXQueues), len(nic.IRQs)))
	}
	for _, disk := range topo.Disks {
		kind := "ssd"
		if disk.Rotational {
			kind = "rotational"
		}
		lines = append(lines, fmt.Sprintf("disk %s: node %d, %s, %d hardware queues, %d queue IRQs", disk.Name, disk.Node, kind, disk.HWQueues, len(disk.IRQs)))
	}
	lines = append(lines,
		fmt.Sprintf("shards: %d on CPUs %s (NUMA nodes %s)", len(p.ShardCPUs), formatIntList(p.ShardCPUs), formatIntList(p.ShardNodes)),
		fmt.Sprintf("irq mode %s: NIC queue IRQs on CPUs %s", p.IRQMode, FormatCPUList(p.IRQCPUs)))
	return lines
}

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// formatIntList renders a list in order, without ranges ("3,1,2"): shard order matters.
func formatIntList(values []int) string {
	parts := make([]string, len(values))
	for i, v := range values {
		parts[i] = strconv.Itoa(v)
	}
	return strings.Join(parts, ",")
}

func formatBytes(n uint64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%d MiB", n>>20)
	default:
		return fmt.Sprintf("%d KiB", n>>10)
	}
}
