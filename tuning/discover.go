package tuning

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Topology is what discovery found on a host. Every field comes from a file under the roots;
// nothing is guessed from the running process.
type Topology struct {
	Hostname string `json:"hostname,omitempty"`
	Kernel   string `json:"kernel,omitempty"`
	// CPUs holds the online CPUs in ID order.
	CPUs  []CPU  `json:"cpus"`
	Nodes []Node `json:"nodes"`
	// Isolated and NohzFull come from /sys/devices/system/cpu/{isolated,nohz_full}
	// (the kernel's view of the isolcpus= and nohz_full= boot parameters).
	Isolated []int  `json:"isolated,omitempty"`
	NohzFull []int  `json:"nohz_full,omitempty"`
	Cmdline  string `json:"cmdline,omitempty"`
	// MemTotalBytes is the host's RAM (/proc/meminfo), used to size dirty-page limits.
	MemTotalBytes uint64 `json:"mem_total_bytes"`
	NICs          []NIC  `json:"nics"`
	Disks         []Disk `json:"disks"`
	// Settings holds sysctls and other single-file knobs by logical path.
	Settings []Setting `json:"settings"`
	// Governors maps CPU → cpufreq scaling governor, when cpufreq is present.
	Governors map[int]Setting `json:"governors,omitempty"`
	// IRQBalancePIDs lists running irqbalance processes, which would undo any IRQ affinity.
	IRQBalancePIDs []int `json:"irqbalance_pids,omitempty"`
	// Mounts are the mounts of block devices (/proc/self/mountinfo), for advice about the
	// file system holding the data directory.
	Mounts     []Mount     `json:"mounts,omitempty"`
	Interrupts *Interrupts `json:"-"`
}

// CPU is one online logical CPU.
type CPU struct {
	ID      int `json:"id"`
	Core    int `json:"core"`    // topology/core_id, unique within a package
	Package int `json:"package"` // topology/physical_package_id (socket)
	Node    int `json:"node"`
	// Siblings are the SMT threads sharing this CPU's physical core, itself included.
	Siblings []int `json:"siblings"`
}

// Node is one NUMA node.
type Node struct {
	ID            int    `json:"id"`
	CPUs          []int  `json:"cpus"`
	MemTotalBytes uint64 `json:"mem_total_bytes"`
}

// QueueIRQ is one interrupt that serves a device queue.
type QueueIRQ struct {
	IRQ      int    `json:"irq"`
	Name     string `json:"name"`
	Queue    int    `json:"queue"`
	Affinity []int  `json:"affinity"` // /proc/irq/N/smp_affinity_list
	// Managed IRQs (NVMe, virtio-blk) are spread by the kernel and refuse affinity writes.
	Managed bool `json:"managed,omitempty"`
}

// NIC is one physical network interface.
type NIC struct {
	Name       string     `json:"name"`
	DevicePath string     `json:"device_path"`
	Node       int        `json:"node"` // -1 when the firmware does not say
	RXQueues   []Queue    `json:"rx_queues"`
	TXQueues   []Queue    `json:"tx_queues"`
	IRQs       []QueueIRQ `json:"irqs"`
}

// Queue is one rx-N or tx-N directory of a NIC, with its RPS (rx) or XPS (tx) CPUs.
// HasMask is false when the kernel offers no rps_cpus/xps_cpus for it.
type Queue struct {
	Index   int   `json:"index"`
	HasMask bool  `json:"has_mask"`
	CPUs    []int `json:"cpus"`
}

// Disk is one physical block device.
type Disk struct {
	Name       string `json:"name"`
	DevicePath string `json:"device_path"`
	// Dev is the disk's device number ("259:0") and PartitionDevs its partitions'; they
	// match st_dev of files stored on the disk (see PlanOptions.DataDevice).
	Dev           string     `json:"dev,omitempty"`
	PartitionDevs []string   `json:"partition_devs,omitempty"`
	Node          int        `json:"node"`
	Rotational    bool       `json:"rotational"`
	Scheduler     string     `json:"scheduler"`
	Schedulers    []string   `json:"schedulers"`
	NrRequests    int        `json:"nr_requests"`
	ReadAheadKB   int        `json:"read_ahead_kb"`
	RQAffinity    int        `json:"rq_affinity"` // -1 when absent
	HWQueues      int        `json:"hw_queues"`
	HWQueueDepth  int        `json:"hw_queue_depth"` // mq/0/nr_tags, 0 when unknown
	IRQs          []QueueIRQ `json:"irqs"`
}

// Setting is one single-value knob: a sysctl under /proc/sys or a sysfs file.
type Setting struct {
	Name string `json:"name"` // "vm.swappiness", "transparent_hugepage.enabled"
	Path string `json:"path"` // logical path
	// Value is the current value normalized: white space collapsed to single spaces, and for
	// choice files ("always [madvise] never") the selected choice.
	Value   string   `json:"value"`
	Choices []string `json:"choices,omitempty"`
}

// Setting returns the setting at a logical path.
func (t *Topology) Setting(logical string) (Setting, bool) {
	for _, s := range t.Settings {
		if s.Path == logical {
			return s, true
		}
	}
	return Setting{}, false
}

// CPU returns the online CPU with the given ID.
func (t *Topology) CPU(id int) (CPU, bool) {
	i, found := slices.BinarySearchFunc(t.CPUs, id, func(c CPU, id int) int { return c.ID - id })
	if !found {
		return CPU{}, false
	}
	return t.CPUs[i], true
}

// CPUIDs returns the online CPU IDs.
func (t *Topology) CPUIDs() []int {
	ids := make([]int, len(t.CPUs))
	for i, c := range t.CPUs {
		ids[i] = c.ID
	}
	return ids
}

// DiscoverOptions configure Discover.
type DiscoverOptions struct {
	Roots Roots
	// FS reads the files; nil means the operating system.
	FS  FileSystem
	rec *recorder
}

// sysctlPaths are the kernel knobs the plan checks, in plan order.
var sysctlPaths = []string{
	"/proc/sys/vm/swappiness",
	"/proc/sys/vm/dirty_background_bytes",
	"/proc/sys/vm/dirty_background_ratio",
	"/proc/sys/vm/dirty_bytes",
	"/proc/sys/vm/dirty_ratio",
	"/proc/sys/net/core/somaxconn",
	"/proc/sys/net/core/rmem_max",
	"/proc/sys/net/core/wmem_max",
	"/proc/sys/net/ipv4/tcp_rmem",
	"/proc/sys/net/ipv4/tcp_wmem",
}

const (
	thpEnabledPath       = "/sys/kernel/mm/transparent_hugepage/enabled"
	clocksourcePath      = "/sys/devices/system/clocksource/clocksource0/current_clocksource"
	clocksourceAvailPath = "/sys/devices/system/clocksource/clocksource0/available_clocksource"
	// cpuidleDriverPath names the idle driver; "haltpoll" is a KVM guest's, whose
	// guestHaltPollPath says how long an idle vCPU polls for work before it halts.
	cpuidleDriverPath = "/sys/devices/system/cpu/cpuidle/current_driver"
	guestHaltPollPath = "/sys/module/haltpoll/parameters/guest_halt_poll_ns"
)

// processesScannedMax bounds the /proc/PID scan for irqbalance.
const processesScannedMax = 1 << 17

// Discover reads the host's topology from the roots. Files every Linux host has
// (/sys/devices/system/cpu/online, each CPU's topology, /proc/interrupts) are required and
// their absence is an error; the rest are optional and simply leave their part empty.
func Discover(opts DiscoverOptions) (*Topology, error) {
	if opts.Roots == (Roots{}) {
		opts.Roots = DefaultRoots()
	}
	if opts.FS == nil {
		opts.FS = osFS{}
	}
	d := &discoverer{r: &reader{roots: opts.Roots, fsys: opts.FS, rec: opts.rec}, topo: &Topology{}}
	steps := []struct {
		name string
		run  func() error
	}{
		{"host", d.host},
		{"cpus", d.cpus},
		{"numa nodes", d.nodes},
		{"isolated cpus", d.isolation},
		{"interrupts", d.interrupts},
		{"nics", d.nics},
		{"disks", d.disks},
		{"mounts", d.mounts},
		{"settings", d.settings},
		{"irqbalance", d.irqbalance},
	}
	for _, step := range steps {
		if err := step.run(); err != nil {
			return nil, fmt.Errorf("discover %s: %w", step.name, err)
		}
	}
	return d.topo, nil
}

type discoverer struct {
	r    *reader
	topo *Topology
}

func (d *discoverer) host() error {
	var err error
	if d.topo.Hostname, _, err = d.r.readOptional("/proc/sys/kernel/hostname"); err != nil {
		return err
	}
	if d.topo.Kernel, _, err = d.r.readOptional("/proc/sys/kernel/osrelease"); err != nil {
		return err
	}
	if d.topo.Cmdline, err = d.cmdline(); err != nil {
		return err
	}
	meminfo, ok, err := d.r.readOptional("/proc/meminfo")
	if err != nil || !ok {
		return err
	}
	d.topo.MemTotalBytes = parseMemTotal(meminfo)
	return nil
}

// cmdline reads the kernel's boot parameters. Arguments after " -- " belong to init, not
// the kernel, and are neither kept nor copied into a snapshot.
func (d *discoverer) cmdline() (string, error) {
	real, err := d.r.resolve("/proc/cmdline")
	if err != nil {
		return "", err
	}
	data, err := d.r.fsys.ReadFile(real)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read /proc/cmdline: %w", err)
	}
	kernel, _, _ := strings.Cut(strings.TrimSpace(string(data)), " -- ")
	d.r.rec.file("/proc/cmdline", []byte(kernel+"\n"))
	return kernel, nil
}

// parseMemTotal finds "MemTotal: N kB" in /proc/meminfo or a node's meminfo
// ("Node 0 MemTotal: N kB"). It returns 0 when absent or malformed.
func parseMemTotal(text string) uint64 {
	for line := range strings.SplitSeq(text, "\n") {
		fields := strings.Fields(line)
		for i, field := range fields {
			if field == "MemTotal:" && i+1 < len(fields) {
				kib, err := strconv.ParseUint(fields[i+1], 10, 64)
				if err != nil || kib > 1<<50 {
					return 0
				}
				return kib << 10
			}
		}
	}
	return 0
}

const cpuDir = "/sys/devices/system/cpu"

func (d *discoverer) cpus() error {
	text, err := d.r.readString(cpuDir + "/online")
	if err != nil {
		return err
	}
	online, err := ParseCPUList(text)
	if err != nil {
		return fmt.Errorf("%s/online: %w", cpuDir, err)
	}
	if len(online) == 0 {
		return fmt.Errorf("%s/online lists no CPUs", cpuDir)
	}
	for _, id := range online {
		cpu, err := d.cpu(id)
		if err != nil {
			return err
		}
		d.topo.CPUs = append(d.topo.CPUs, cpu)
	}
	return nil
}

func (d *discoverer) cpu(id int) (CPU, error) {
	dir := fmt.Sprintf("%s/cpu%d/topology", cpuDir, id)
	cpu := CPU{ID: id}
	var err error
	if cpu.Core, err = d.readInt(dir + "/core_id"); err != nil {
		return CPU{}, err
	}
	if cpu.Package, err = d.readInt(dir + "/physical_package_id"); err != nil {
		return CPU{}, err
	}
	siblings, err := d.r.readString(dir + "/thread_siblings_list")
	if err != nil {
		return CPU{}, err
	}
	if cpu.Siblings, err = ParseCPUList(siblings); err != nil {
		return CPU{}, fmt.Errorf("%s/thread_siblings_list: %w", dir, err)
	}
	if !slices.Contains(cpu.Siblings, id) {
		return CPU{}, fmt.Errorf("%s/thread_siblings_list %q does not hold cpu %d", dir, siblings, id)
	}
	return cpu, nil
}

func (d *discoverer) readInt(logical string) (int, error) {
	text, err := d.r.readString(logical)
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(text)
	if err != nil {
		return 0, fmt.Errorf("%s: %q is not an integer", logical, clip(text))
	}
	return n, nil
}

// readOptionalInt reads an integer file that may be absent; absent gives missing.
func (d *discoverer) readOptionalInt(logical string, missing int) (int, error) {
	if !d.r.exists(logical) {
		return missing, nil
	}
	return d.readInt(logical)
}

const nodeDir = "/sys/devices/system/node"

func (d *discoverer) nodes() error {
	entries, err := d.r.readDir(nodeDir)
	if errors.Is(err, fs.ErrNotExist) {
		// A kernel built without NUMA: one node holding every CPU.
		d.topo.Nodes = []Node{{ID: 0, CPUs: d.topo.CPUIDs(), MemTotalBytes: d.topo.MemTotalBytes}}
		return nil
	}
	if err != nil {
		return err
	}
	for _, entry := range entries {
		digits, ok := strings.CutPrefix(entry.Name(), "node")
		id, err := strconv.Atoi(digits)
		if !ok || err != nil || id < 0 {
			continue
		}
		node, err := d.node(id)
		if err != nil {
			return err
		}
		d.topo.Nodes = append(d.topo.Nodes, node)
	}
	if len(d.topo.Nodes) == 0 {
		return fmt.Errorf("%s holds no nodeN directory", nodeDir)
	}
	sort.Slice(d.topo.Nodes, func(i, j int) bool { return d.topo.Nodes[i].ID < d.topo.Nodes[j].ID })
	for i := range d.topo.CPUs {
		d.topo.CPUs[i].Node = -1
		for _, node := range d.topo.Nodes {
			if slices.Contains(node.CPUs, d.topo.CPUs[i].ID) {
				d.topo.CPUs[i].Node = node.ID
			}
		}
		if d.topo.CPUs[i].Node < 0 {
			return fmt.Errorf("cpu %d is online but in no node's cpulist", d.topo.CPUs[i].ID)
		}
	}
	return nil
}

func (d *discoverer) node(id int) (Node, error) {
	dir := fmt.Sprintf("%s/node%d", nodeDir, id)
	text, err := d.r.readString(dir + "/cpulist")
	if err != nil {
		return Node{}, err
	}
	node := Node{ID: id}
	if node.CPUs, err = ParseCPUList(text); err != nil {
		return Node{}, fmt.Errorf("%s/cpulist: %w", dir, err)
	}
	meminfo, ok, err := d.r.readOptional(dir + "/meminfo")
	if err != nil {
		return Node{}, err
	}
	if ok {
		node.MemTotalBytes = parseMemTotal(meminfo)
	}
	return node, nil
}

func (d *discoverer) isolation() error {
	for _, file := range []struct {
		name string
		into *[]int
	}{{"isolated", &d.topo.Isolated}, {"nohz_full", &d.topo.NohzFull}} {
		text, ok, err := d.r.readOptional(cpuDir + "/" + file.name)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		if *file.into, err = ParseCPUList(text); err != nil {
			return fmt.Errorf("%s/%s: %w", cpuDir, file.name, err)
		}
	}
	return nil
}

func (d *discoverer) interrupts() error {
	text, err := d.r.readFile("/proc/interrupts")
	if err != nil {
		return err
	}
	d.topo.Interrupts, err = ParseInterrupts(string(text))
	return err
}

// deviceIRQs finds the MSI/MSI-X interrupts of the device at dir (a logical path under
// /sys/devices) by walking up to the first ancestor with msi_irqs, and returns those whose
// action name passes keep, sorted by queue then IRQ number.
//
// Without msi_irqs (legacy INTx, some virtual functions) every row of /proc/interrupts is a
// candidate, so only names containing fallbackName (the NIC or controller name) are kept.
func (d *discoverer) deviceIRQs(dir string, keep func(action string) bool, managed bool, fallbackName string) ([]QueueIRQ, error) {
	msiDir := ""
	for current := dir; strings.HasPrefix(current, "/sys/devices/"); current = path.Dir(current) {
		if d.r.exists(current + "/msi_irqs") {
			msiDir = current + "/msi_irqs"
			break
		}
	}
	var numbers []int
	if msiDir != "" {
		entries, err := d.r.readDir(msiDir)
		if err != nil {
			return nil, err
		}
		for _, entry := range entries {
			n, err := strconv.Atoi(entry.Name())
			if err != nil {
				continue
			}
			// The file says msi or msix; reading it also puts it in a snapshot.
			if _, err := d.r.readFile(msiDir + "/" + entry.Name()); err != nil {
				return nil, err
			}
			numbers = append(numbers, n)
		}
	} else if fallbackName != "" {
		for _, irq := range d.topo.Interrupts.IRQs {
			if strings.Contains(irq.Actions, fallbackName) {
				numbers = append(numbers, irq.Number)
			}
		}
	}
	var irqs []QueueIRQ
	for _, n := range numbers {
		row := d.topo.Interrupts.Find(n)
		if row == nil || !keep(row.Actions) {
			continue
		}
		queue, _ := queueIndex(row.Actions)
		irq := QueueIRQ{IRQ: n, Name: row.Actions, Queue: queue, Managed: managed}
		affinity, ok, err := d.r.readOptional(fmt.Sprintf("/proc/irq/%d/smp_affinity_list", n))
		if err != nil {
			return nil, err
		}
		if ok {
			if irq.Affinity, err = ParseCPUList(affinity); err != nil {
				return nil, fmt.Errorf("/proc/irq/%d/smp_affinity_list: %w", n, err)
			}
		}
		irqs = append(irqs, irq)
	}
	sort.Slice(irqs, func(i, j int) bool {
		if irqs[i].Queue != irqs[j].Queue {
			return irqs[i].Queue < irqs[j].Queue
		}
		return irqs[i].IRQ < irqs[j].IRQ
	})
	return irqs, nil
}

// deviceNode walks up from dir to the first numa_node file. -1 means unknown.
func (d *discoverer) deviceNode(dir string) (int, error) {
	for current := dir; strings.HasPrefix(current, "/sys/devices/"); current = path.Dir(current) {
		if d.r.exists(current + "/numa_node") {
			return d.readInt(current + "/numa_node")
		}
	}
	return -1, nil
}

// ancestorNamed returns the name of the nearest ancestor directory of dir whose name is
// prefix followed by digits ("virtio2", "nvme0"), or "".
func ancestorNamed(dir, prefix string) string {
	for current := dir; strings.HasPrefix(current, "/sys/devices/"); current = path.Dir(current) {
		digits, ok := strings.CutPrefix(path.Base(current), prefix)
		if _, err := strconv.Atoi(digits); ok && err == nil {
			return path.Base(current)
		}
	}
	return ""
}

// nicQueueIRQ reports whether an IRQ action names a NIC data queue rather than a control,
// mailbox or config vector.
func nicQueueIRQ(action, virtio string) bool {
	lower := strings.ToLower(action)
	if virtio != "" {
		return strings.HasPrefix(lower, virtio+"-input") || strings.HasPrefix(lower, virtio+"-output")
	}
	for _, control := range []string{"config", "misc", "async", "ctrl", "cmd", "event", "mgmnt", "fdir", "lsc"} {
		if strings.Contains(lower, control) {
			return false
		}
	}
	for _, data := range []string{"rx", "tx", "comp", "input", "output", "ntfy", "queue"} {
		if strings.Contains(lower, data) {
			return true
		}
	}
	return false
}

const (
	netClassDir = "/sys/class/net"
	blockDir    = "/sys/block"
)

func (d *discoverer) nics() error {
	entries, err := d.r.readDir(netClassDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, entry := range entries {
		dev, err := d.r.resolveLinks(netClassDir + "/" + entry.Name())
		if err != nil {
			return err
		}
		if !strings.HasPrefix(dev, "/sys/devices/") || strings.HasPrefix(dev, "/sys/devices/virtual/") {
			continue // lo, bridges, tunnels, ifb: no hardware queues to steer
		}
		nic, err := d.nic(entry.Name(), dev)
		if err != nil {
			return fmt.Errorf("nic %s: %w", entry.Name(), err)
		}
		d.topo.NICs = append(d.topo.NICs, nic)
	}
	sort.Slice(d.topo.NICs, func(i, j int) bool { return d.topo.NICs[i].Name < d.topo.NICs[j].Name })
	return nil
}

func (d *discoverer) nic(name, dev string) (NIC, error) {
	nic := NIC{Name: name, DevicePath: dev}
	var err error
	if nic.Node, err = d.deviceNode(dev); err != nil {
		return NIC{}, err
	}
	entries, err := d.r.readDir(dev + "/queues")
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return NIC{}, err
	}
	for _, entry := range entries {
		kind, digits, _ := strings.Cut(entry.Name(), "-")
		index, err := strconv.Atoi(digits)
		if err != nil {
			continue
		}
		d.r.rec.dir(dev + "/queues/" + entry.Name()) // counted even when it has no mask file
		switch kind {
		case "rx":
			queue, err := d.queueMask(dev+"/queues/"+entry.Name()+"/rps_cpus", index)
			if err != nil {
				return NIC{}, err
			}
			nic.RXQueues = append(nic.RXQueues, queue)
		case "tx":
			queue, err := d.queueMask(dev+"/queues/"+entry.Name()+"/xps_cpus", index)
			if err != nil {
				return NIC{}, err
			}
			nic.TXQueues = append(nic.TXQueues, queue)
		}
	}
	byIndex := func(q []Queue) func(i, j int) bool { return func(i, j int) bool { return q[i].Index < q[j].Index } }
	sort.Slice(nic.RXQueues, byIndex(nic.RXQueues))
	sort.Slice(nic.TXQueues, byIndex(nic.TXQueues))
	virtio := ancestorNamed(dev, "virtio")
	nic.IRQs, err = d.deviceIRQs(dev, func(action string) bool { return nicQueueIRQ(action, virtio) }, false, name+"-")
	return nic, err
}

func (d *discoverer) queueMask(logical string, index int) (Queue, error) {
	text, ok, err := d.r.readOptional(logical)
	if err != nil || !ok {
		return Queue{Index: index}, err
	}
	cpus, err := ParseCPUMask(text)
	if err != nil {
		return Queue{}, fmt.Errorf("%s: %w", logical, err)
	}
	return Queue{Index: index, HasMask: true, CPUs: cpus}, nil
}

func (d *discoverer) disks() error {
	entries, err := d.r.readDir(blockDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, entry := range entries {
		dev, err := d.r.resolveLinks(blockDir + "/" + entry.Name())
		if err != nil {
			return err
		}
		if !strings.HasPrefix(dev, "/sys/devices/") || strings.HasPrefix(dev, "/sys/devices/virtual/") {
			continue // loop, zram, device-mapper: the plan tunes the physical disks under them
		}
		disk, err := d.disk(entry.Name(), dev)
		if err != nil {
			return fmt.Errorf("disk %s: %w", entry.Name(), err)
		}
		d.topo.Disks = append(d.topo.Disks, disk)
	}
	sort.Slice(d.topo.Disks, func(i, j int) bool { return d.topo.Disks[i].Name < d.topo.Disks[j].Name })
	return nil
}

func (d *discoverer) disk(name, dev string) (Disk, error) {
	disk := Disk{Name: name, DevicePath: dev}
	queue := dev + "/queue"
	var err error
	if disk.Node, err = d.deviceNode(dev); err != nil {
		return Disk{}, err
	}
	rotational, err := d.readInt(queue + "/rotational")
	if err != nil {
		return Disk{}, err
	}
	disk.Rotational = rotational != 0
	schedulers, err := d.r.readString(queue + "/scheduler")
	if err != nil {
		return Disk{}, err
	}
	disk.Scheduler, disk.Schedulers = parseChoices(schedulers)
	if disk.NrRequests, err = d.readInt(queue + "/nr_requests"); err != nil {
		return Disk{}, err
	}
	if disk.ReadAheadKB, err = d.readInt(queue + "/read_ahead_kb"); err != nil {
		return Disk{}, err
	}
	if disk.RQAffinity, err = d.readOptionalInt(queue+"/rq_affinity", -1); err != nil {
		return Disk{}, err
	}
	if err := d.hardwareQueues(&disk); err != nil {
		return Disk{}, err
	}
	if err := d.deviceNumbers(&disk); err != nil {
		return Disk{}, err
	}
	prefix := ""
	if controller := ancestorNamed(dev, "nvme"); controller != "" {
		prefix = controller + "q"
	} else if virtio := ancestorNamed(dev, "virtio"); virtio != "" {
		prefix = virtio + "-req"
	}
	disk.IRQs, err = d.deviceIRQs(dev, func(action string) bool {
		if prefix == "" || !strings.HasPrefix(action, prefix) {
			return false
		}
		return action != prefix+"0" || !strings.HasPrefix(prefix, "nvme") // nvmeNq0 is the admin queue
	}, true, prefix)
	return disk, err
}

func (d *discoverer) hardwareQueues(disk *Disk) error {
	entries, err := d.r.readDir(disk.DevicePath + "/mq")
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, entry := range entries {
		if _, err := strconv.Atoi(entry.Name()); err == nil {
			disk.HWQueues++
			d.r.rec.dir(disk.DevicePath + "/mq/" + entry.Name())
		}
	}
	if disk.HWQueues > 0 {
		depth, err := d.readOptionalInt(disk.DevicePath+"/mq/0/nr_tags", 0)
		if err != nil {
			return err
		}
		disk.HWQueueDepth = depth
	}
	return nil
}

// deviceNumbers reads the disk's dev file and those of its partitions (subdirectories
// holding a partition file).
func (d *discoverer) deviceNumbers(disk *Disk) error {
	var err error
	if disk.Dev, _, err = d.r.readOptional(disk.DevicePath + "/dev"); err != nil {
		return err
	}
	real, err := d.r.resolve(disk.DevicePath)
	if err != nil {
		return err
	}
	entries, err := d.r.fsys.ReadDir(real)
	if err != nil {
		return fmt.Errorf("list %s: %w", disk.DevicePath, err)
	}
	for _, entry := range entries {
		partition := disk.DevicePath + "/" + entry.Name()
		if !entry.IsDir() || !d.r.exists(partition+"/partition") {
			continue
		}
		dev, err := d.r.readString(partition + "/dev")
		if err != nil {
			return err
		}
		if _, err := d.r.readFile(partition + "/partition"); err != nil {
			return err
		}
		disk.PartitionDevs = append(disk.PartitionDevs, dev)
	}
	return nil
}

// parseChoices parses a sysfs choice file such as "none [mq-deadline] kyber bfq": the
// bracketed choice and all choices. A file holding one bare word selects it.
func parseChoices(text string) (selected string, choices []string) {
	fields := strings.Fields(text)
	for _, field := range fields {
		name := strings.TrimSuffix(strings.TrimPrefix(field, "["), "]")
		if name != field {
			selected = name
		}
		choices = append(choices, name)
	}
	if selected == "" && len(fields) == 1 {
		selected = fields[0]
	}
	return selected, choices
}

func (d *discoverer) settings() error {
	for _, logical := range sysctlPaths {
		text, ok, err := d.r.readOptional(logical)
		if err != nil {
			return err
		}
		if ok {
			name := strings.ReplaceAll(strings.TrimPrefix(logical, "/proc/sys/"), "/", ".")
			d.topo.Settings = append(d.topo.Settings, Setting{Name: name, Path: logical, Value: strings.Join(strings.Fields(text), " ")})
		}
	}
	if text, ok, err := d.r.readOptional(thpEnabledPath); err != nil {
		return err
	} else if ok {
		selected, choices := parseChoices(text)
		d.topo.Settings = append(d.topo.Settings, Setting{Name: "transparent_hugepage.enabled", Path: thpEnabledPath, Value: selected, Choices: choices})
	}
	current, ok, err := d.r.readOptional(clocksourcePath)
	if err != nil || !ok {
		return err
	}
	available, _, err := d.r.readOptional(clocksourceAvailPath)
	if err != nil {
		return err
	}
	d.topo.Settings = append(d.topo.Settings, Setting{Name: "clocksource", Path: clocksourcePath, Value: current, Choices: strings.Fields(available)})
	if err := d.idlePolling(); err != nil {
		return err
	}
	return d.governors()
}

// idlePolling records the cpuidle driver and, under the haltpoll driver (a KVM guest), the
// guest halt-polling window.
func (d *discoverer) idlePolling() error {
	driver, ok, err := d.r.readOptional(cpuidleDriverPath)
	if err != nil || !ok {
		return err
	}
	d.topo.Settings = append(d.topo.Settings, Setting{Name: "cpuidle.current_driver", Path: cpuidleDriverPath, Value: strings.TrimSpace(driver)})
	poll, ok, err := d.r.readOptional(guestHaltPollPath)
	if err != nil || !ok {
		return err
	}
	d.topo.Settings = append(d.topo.Settings, Setting{Name: "haltpoll.guest_halt_poll_ns", Path: guestHaltPollPath, Value: strings.TrimSpace(poll)})
	return nil
}

func (d *discoverer) governors() error {
	for _, cpu := range d.topo.CPUs {
		dir := fmt.Sprintf("%s/cpu%d/cpufreq", cpuDir, cpu.ID)
		governor, ok, err := d.r.readOptional(dir + "/scaling_governor")
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		available, _, err := d.r.readOptional(dir + "/scaling_available_governors")
		if err != nil {
			return err
		}
		if d.topo.Governors == nil {
			d.topo.Governors = map[int]Setting{}
		}
		d.topo.Governors[cpu.ID] = Setting{Name: fmt.Sprintf("cpu%d.scaling_governor", cpu.ID), Path: dir + "/scaling_governor", Value: governor, Choices: strings.Fields(available)}
	}
	return nil
}

// irqbalance finds running irqbalance daemons by /proc/PID/comm. Only matching comm files
// are recorded for a snapshot, so a fixture never carries the host's process list.
func (d *discoverer) irqbalance() error {
	real, err := d.r.resolve("/proc")
	if err != nil {
		return err
	}
	entries, err := d.r.fsys.ReadDir(real)
	if err != nil {
		return fmt.Errorf("list /proc: %w", err)
	}
	if len(entries) > processesScannedMax {
		entries = entries[:processesScannedMax]
	}
	for _, entry := range entries {
		pid, err := strconv.Atoi(entry.Name())
		if err != nil {
			continue
		}
		logical := fmt.Sprintf("/proc/%d/comm", pid)
		comm, err := d.r.fsys.ReadFile(path.Join(real, entry.Name(), "comm"))
		if err != nil || strings.TrimSpace(string(comm)) != "irqbalance" {
			continue // processes come and go while we scan
		}
		d.r.rec.file(logical, comm)
		d.topo.IRQBalancePIDs = append(d.topo.IRQBalancePIDs, pid)
	}
	return nil
}
