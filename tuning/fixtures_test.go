package tuning

import (
	"bytes"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// rewrite regenerates golden files and the synthetic fixture trees:
//
//	go test ./tuning -rewrite
var rewrite = flag.Bool("rewrite", false, "rewrite golden files and synthetic fixture trees under testdata/")

// The fixture trees under testdata/hosts:
//
//	vm2    this 2-CPU VM, copied once with `ringlog tune snapshot --out tuning/testdata/hosts/vm2`;
//	       its mount table (/ is ext4 on vda, no journal, mounted discard) copied the same way
//	       in session 9
//	numa2  synthetic: 2 sockets, 2 NUMA nodes, 4 cores each with SMT (16 CPUs), an 8-queue
//	       mlx5 NIC on node 1, nvme0 on node 0 and nvme1 on node 1, irqbalance running
//	isol8  synthetic: 1 socket, 4 cores with SMT (8 CPUs), isolcpus=1-3,5-7, a 4-queue NIC
//
// The synthetic trees are written by the generators below; TestSyntheticFixturesUpToDate
// fails when the committed trees drift from them.
var fixtureHosts = []string{"vm2", "numa2", "isol8"}

// fixtureDataDevices is where each fixture host's data directory is: a mounted partition.
var fixtureDataDevices = map[string]string{"vm2": "254:0", "numa2": "259:9", "isol8": "259:1"}

func fixtureRoots(host string) Roots {
	dir := filepath.Join("testdata", "hosts", host)
	return Roots{Sys: filepath.Join(dir, "sys"), Proc: filepath.Join(dir, "proc")}
}

// hostTree is a synthetic host: logical path → file content, and logical path → link target.
type hostTree struct {
	files map[string]string
	links map[string]string
}

func newHostTree() *hostTree {
	return &hostTree{files: map[string]string{}, links: map[string]string{}}
}

func (h *hostTree) file(logical, content string) { h.files[logical] = content + "\n" }

func (h *hostTree) write(dir string) error {
	roots := Roots{Sys: filepath.Join(dir, "sys"), Proc: filepath.Join(dir, "proc")}
	for logical, content := range h.files {
		real, err := roots.Resolve(logical)
		if err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Dir(real), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(real, []byte(content), 0o644); err != nil {
			return err
		}
	}
	for logical, target := range h.links {
		real, err := roots.Resolve(logical)
		if err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Dir(real), 0o755); err != nil {
			return err
		}
		if err := os.Symlink(target, real); err != nil {
			return err
		}
	}
	return nil
}

type cpuSpec struct{ id, core, pkg int }

func (h *hostTree) cpus(specs []cpuSpec) {
	byCore := map[[2]int][]int{}
	var ids []int
	for _, s := range specs {
		byCore[[2]int{s.pkg, s.core}] = append(byCore[[2]int{s.pkg, s.core}], s.id)
		ids = append(ids, s.id)
	}
	h.file("/sys/devices/system/cpu/online", FormatCPUList(ids))
	for _, s := range specs {
		dir := fmt.Sprintf("/sys/devices/system/cpu/cpu%d/topology", s.id)
		h.file(dir+"/core_id", fmt.Sprint(s.core))
		h.file(dir+"/physical_package_id", fmt.Sprint(s.pkg))
		h.file(dir+"/thread_siblings_list", FormatCPUList(byCore[[2]int{s.pkg, s.core}]))
	}
}

func (h *hostTree) node(id int, cpus []int, memKB int) {
	dir := fmt.Sprintf("/sys/devices/system/node/node%d", id)
	h.file(dir+"/cpulist", FormatCPUList(cpus))
	h.file(dir+"/meminfo", fmt.Sprintf("Node %d MemTotal:       %d kB\nNode %d MemFree:        %d kB", id, memKB, id, memKB/2))
}

// interrupts renders /proc/interrupts for ncpu columns; rows are "N: chip hwirq-edge name".
func interruptsText(ncpu int, rows []irqRow) string {
	var b strings.Builder
	b.WriteString("    ")
	for cpu := range ncpu {
		fmt.Fprintf(&b, "       CPU%-3d", cpu)
	}
	b.WriteString("\n")
	for _, row := range rows {
		fmt.Fprintf(&b, "%4d:", row.number)
		for cpu := range ncpu {
			count := 0
			if cpu == row.hotCPU {
				count = row.count
			}
			fmt.Fprintf(&b, " %10d", count)
		}
		fmt.Fprintf(&b, "  %-22s %s  %s\n", row.chip, row.hwirq, row.name)
	}
	for _, name := range []string{"NMI", "LOC"} {
		fmt.Fprintf(&b, "%4s:", name)
		for range ncpu {
			fmt.Fprintf(&b, " %10d", 100)
		}
		b.WriteString("   Non-maskable interrupts\n")
	}
	b.WriteString(" ERR:          0\n MIS:          0")
	return b.String()
}

type irqRow struct {
	number, hotCPU, count int
	chip, hwirq, name     string
	affinity              string
}

func (h *hostTree) irqs(ncpu int, rows []irqRow) {
	h.file("/proc/interrupts", interruptsText(ncpu, rows))
	for _, row := range rows {
		h.file(fmt.Sprintf("/proc/irq/%d/smp_affinity_list", row.number), row.affinity)
	}
}

func (h *hostTree) nic(name, pciDir string, node, queues int, rps, xps func(q int) string, firstIRQ int) {
	dev := pciDir + "/net/" + name
	h.links["/sys/class/net/"+name] = "../../" + strings.TrimPrefix(dev, "/sys/")
	h.file(pciDir+"/numa_node", fmt.Sprint(node))
	for q := range queues {
		h.file(fmt.Sprintf("%s/queues/rx-%d/rps_cpus", dev, q), rps(q))
		h.file(fmt.Sprintf("%s/queues/tx-%d/xps_cpus", dev, q), xps(q))
	}
	for irq := firstIRQ; irq <= firstIRQ+queues; irq++ {
		h.file(fmt.Sprintf("%s/msi_irqs/%d", pciDir, irq), "msix")
	}
}

func (h *hostTree) nvme(controller, pciDir string, node, ioQueues, firstIRQ int, scheduler string, nrRequests int) {
	disk := controller + "n1"
	dev := fmt.Sprintf("%s/nvme/%s/%s", pciDir, controller, disk)
	index := int(controller[len(controller)-1] - '0')
	h.file(dev+"/dev", fmt.Sprintf("259:%d", index*8))
	h.file(fmt.Sprintf("%s/%sp1/dev", dev, disk), fmt.Sprintf("259:%d", index*8+1))
	h.file(fmt.Sprintf("%s/%sp1/partition", dev, disk), "1")
	h.links["/sys/block/"+disk] = "../" + strings.TrimPrefix(dev, "/sys/")
	h.file(pciDir+"/numa_node", fmt.Sprint(node))
	h.file(dev+"/queue/rotational", "0")
	h.file(dev+"/queue/scheduler", scheduler)
	h.file(dev+"/queue/nr_requests", fmt.Sprint(nrRequests))
	h.file(dev+"/queue/read_ahead_kb", "128")
	h.file(dev+"/queue/rq_affinity", "1")
	for q := range ioQueues {
		h.file(fmt.Sprintf("%s/mq/%d/cpu_list", dev, q), fmt.Sprint(q))
	}
	h.file(dev+"/mq/0/nr_tags", "1023")
	for irq := firstIRQ; irq <= firstIRQ+ioQueues; irq++ {
		h.file(fmt.Sprintf("%s/msi_irqs/%d", pciDir, irq), "msix")
	}
}

func (h *hostTree) common(hostname, cmdline, memKB string) {
	h.file("/proc/sys/kernel/hostname", hostname)
	h.file("/proc/sys/kernel/osrelease", "6.8.0-45-generic")
	h.file("/proc/cmdline", cmdline)
	h.file("/proc/meminfo", "MemTotal:       "+memKB+" kB\nMemFree:        1000000 kB")
	h.links["/sys/class/net/lo"] = "../../devices/virtual/net/lo"
	h.links["/sys/block/loop0"] = "../devices/virtual/block/loop0"
}

func mask16(cpus ...int) string {
	var m uint32
	for _, c := range cpus {
		m |= 1 << c
	}
	return fmt.Sprintf("%04x", m)
}

// numa2Host: Intel-style numbering, node 0 = CPUs 0-3,8-11, node 1 = CPUs 4-7,12-15; CPU n
// and n+8 are SMT siblings. The NIC sits on node 1 and irqbalance has spread its IRQs over
// both nodes; nvme1 still runs mq-deadline.
func numa2Host() *hostTree {
	h := newHostTree()
	h.common("db-numa2", "BOOT_IMAGE=/vmlinuz-6.8.0-45-generic root=/dev/sda1 ro quiet", "263852032")
	var specs []cpuSpec
	for id := range 16 {
		specs = append(specs, cpuSpec{id: id, core: id % 4, pkg: (id / 4) % 2})
	}
	h.cpus(specs)
	h.node(0, []int{0, 1, 2, 3, 8, 9, 10, 11}, 131926016)
	h.node(1, []int{4, 5, 6, 7, 12, 13, 14, 15}, 131926016)
	h.file("/sys/devices/system/cpu/isolated", "")
	h.file("/sys/devices/system/cpu/nohz_full", "(null)")
	for id := range 16 {
		dir := fmt.Sprintf("/sys/devices/system/cpu/cpu%d/cpufreq", id)
		h.file(dir+"/scaling_governor", "powersave")
		h.file(dir+"/scaling_available_governors", "performance powersave")
	}
	nicPCI := "/sys/devices/pci0000:80/0000:80:02.0/0000:81:00.0"
	h.nic("ens1f0", nicPCI, 1, 8, func(int) string { return "0000" }, func(q int) string { return mask16(q) }, 120)
	rows := []irqRow{
		{number: 0, chip: "IR-IO-APIC", hwirq: "2-edge", name: "timer", affinity: "0-15", count: 40},
		{number: 8, chip: "IR-IO-APIC", hwirq: "8-edge", name: "rtc0", affinity: "0-15"},
		{number: 120, chip: "IR-PCI-MSIX-0000:81:00.0", hwirq: "0-edge", name: "mlx5_async0@pci:0000:81:00.0", affinity: "0-15", count: 12},
	}
	for q := range 8 {
		rows = append(rows, irqRow{number: 121 + q, hotCPU: q, count: 100000 + q, chip: "IR-PCI-MSIX-0000:81:00.0",
			hwirq: fmt.Sprintf("%d-edge", q+1), name: fmt.Sprintf("mlx5_comp%d@pci:0000:81:00.0", q), affinity: fmt.Sprint(q)})
	}
	for i, d := range []struct {
		controller, pci string
		node, firstIRQ  int
		scheduler       string
		nrRequests      int
	}{
		{"nvme0", "/sys/devices/pci0000:00/0000:00:1d.0/0000:3d:00.0", 0, 40, "[none] mq-deadline kyber bfq", 1023},
		{"nvme1", "/sys/devices/pci0000:80/0000:80:03.0/0000:82:00.0", 1, 60, "none [mq-deadline] kyber bfq", 64},
	} {
		h.nvme(d.controller, d.pci, d.node, 16, d.firstIRQ, d.scheduler, d.nrRequests)
		pciAddr := filepath.Base(d.pci)
		rows = append(rows, irqRow{number: d.firstIRQ, chip: "IR-PCI-MSIX-" + pciAddr, hwirq: "0-edge", name: d.controller + "q0", affinity: "0-15", count: 30})
		for q := 1; q <= 16; q++ {
			rows = append(rows, irqRow{number: d.firstIRQ + q, hotCPU: q - 1, count: 5000 * (i + 1), chip: "IR-PCI-MSIX-" + pciAddr,
				hwirq: fmt.Sprintf("%d-edge", q), name: fmt.Sprintf("%sq%d", d.controller, q), affinity: fmt.Sprint(q - 1)})
		}
	}
	h.irqs(16, rows)
	// The root on nvme0n1p1 (ext4 with a journal); the data on nvme1n1p1 (XFS mounted with
	// online discard), bind-mounted a second time under a longer path with an escaped space.
	h.file(mountinfoPath, strings.Join([]string{
		`22 1 259:1 / / rw,relatime shared:1 - ext4 /dev/nvme0n1p1 rw,errors=remount-ro`,
		`23 22 0:21 / /proc rw,nosuid,nodev,noexec,relatime shared:12 - proc proc rw`,
		`24 22 0:22 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw`,
		`25 22 0:5 / /run rw,nosuid,nodev,noexec,relatime shared:2 - tmpfs tmpfs rw,size=26385204k,mode=755`,
		`31 22 259:9 / /var/lib/ringlog rw,noatime shared:30 - xfs /dev/nvme1n1p1 rw,attr2,discard,inode64,logbufs=8,logbsize=32k,noquota`,
		`32 25 259:9 /brokers/a /run/ringlog\040data rw,noatime shared:30 - xfs /dev/nvme1n1p1 rw,attr2,discard,inode64,logbufs=8,logbsize=32k,noquota`,
	}, "\n"))
	h.ext4("259:1", "/sys/devices/pci0000:00/0000:00:1d.0/0000:3d:00.0/nvme/nvme0/nvme0n1/nvme0n1p1", "812")
	h.sysctls(map[string]string{
		"vm/swappiness": "60", "vm/dirty_background_bytes": "0", "vm/dirty_background_ratio": "10",
		"vm/dirty_bytes": "0", "vm/dirty_ratio": "20", "net/core/somaxconn": "128",
		"net/core/rmem_max": "212992", "net/core/wmem_max": "212992",
		"net/ipv4/tcp_rmem": "4096\t131072\t6291456", "net/ipv4/tcp_wmem": "4096\t16384\t4194304",
	})
	h.file(thpEnabledPath, "[always] madvise never")
	h.file(clocksourcePath, "hpet")
	h.file(clocksourceAvailPath, "tsc hpet acpi_pm ")
	h.file("/proc/4242/comm", "irqbalance")
	return h
}

// ext4 makes dev (a partition at the logical device directory partition) an ext4 file
// system whose journal thread has pid journalTask ("<none>": no journal).
func (h *hostTree) ext4(dev, partition, journalTask string) {
	h.links["/sys/dev/block/"+dev] = "../../" + strings.TrimPrefix(partition, "/sys/")
	h.file("/sys/fs/ext4/"+filepath.Base(partition)+"/journal_task", journalTask)
}

func (h *hostTree) sysctls(values map[string]string) {
	for name, value := range values {
		h.file("/proc/sys/"+name, value)
	}
}

// isol8Host: 4 cores with SMT (CPU n and n+4 are siblings), isolcpus=1-3,5-7 leaving core 0
// for the kernel, a 4-queue ixgbe-style NIC and one NVMe drive, already partly tuned.
func isol8Host() *hostTree {
	h := newHostTree()
	h.common("edge-isol8", "BOOT_IMAGE=/vmlinuz-6.8.0-45-generic root=/dev/nvme0n1p2 ro isolcpus=managed_irq,domain,1-3,5-7 nohz_full=1-3,5-7 irqaffinity=0,4", "65843200")
	var specs []cpuSpec
	for id := range 8 {
		specs = append(specs, cpuSpec{id: id, core: id % 4, pkg: 0})
	}
	h.cpus(specs)
	h.node(0, []int{0, 1, 2, 3, 4, 5, 6, 7}, 65843200)
	h.file("/sys/devices/system/cpu/isolated", "1-3,5-7")
	h.file("/sys/devices/system/cpu/nohz_full", "1-3,5-7")
	nicPCI := "/sys/devices/pci0000:00/0000:00:03.0/0000:03:00.0"
	h.nic("eth0", nicPCI, -1, 4, func(int) string { return "00" }, func(q int) string { return fmt.Sprintf("%02x", 1<<q) }, 50)
	rows := []irqRow{{number: 0, chip: "IO-APIC", hwirq: "2-edge", name: "timer", affinity: "0,4", count: 40}}
	for q := range 4 {
		rows = append(rows, irqRow{number: 50 + q, count: 7000, chip: "PCI-MSI-0000:03:00.0", hwirq: fmt.Sprintf("%d-edge", q),
			name: fmt.Sprintf("eth0-TxRx-%d", q), affinity: "0,4"})
	}
	rows = append(rows, irqRow{number: 54, chip: "PCI-MSI-0000:03:00.0", hwirq: "4-edge", name: "eth0", affinity: "0,4", count: 3})
	nvmePCI := "/sys/devices/pci0000:00/0000:00:1d.0/0000:3d:00.0"
	h.nvme("nvme0", nvmePCI, -1, 8, 70, "[none] mq-deadline", 1023)
	rows = append(rows, irqRow{number: 70, chip: "PCI-MSIX-0000:3d:00.0", hwirq: "0-edge", name: "nvme0q0", affinity: "0,4", count: 20})
	for q := 1; q <= 8; q++ {
		rows = append(rows, irqRow{number: 70 + q, hotCPU: q - 1, count: 900, chip: "PCI-MSIX-0000:3d:00.0",
			hwirq: fmt.Sprintf("%d-edge", q), name: fmt.Sprintf("nvme0q%d", q), affinity: fmt.Sprint(q - 1)})
	}
	h.irqs(8, rows)
	h.file(mountinfoPath, "1 0 259:1 / / rw,noatime - ext4 /dev/nvme0n1p1 rw,errors=remount-ro\n"+
		"2 1 0:21 / /proc rw,relatime - proc proc rw")
	h.ext4("259:1", nvmePCI+"/nvme/nvme0/nvme0n1/nvme0n1p1", "431")
	h.sysctls(map[string]string{
		"vm/swappiness": "1", "vm/dirty_background_bytes": "0", "vm/dirty_background_ratio": "5",
		"vm/dirty_bytes": "0", "vm/dirty_ratio": "20", "net/core/somaxconn": "4096",
		"net/core/rmem_max": "16777216", "net/core/wmem_max": "16777216",
		"net/ipv4/tcp_rmem": "4096\t131072\t16777216", "net/ipv4/tcp_wmem": "4096\t16384\t16777216",
	})
	h.file(thpEnabledPath, "always [madvise] never")
	h.file(clocksourcePath, "tsc")
	h.file(clocksourceAvailPath, "tsc hpet acpi_pm ")
	return h
}

var syntheticHosts = map[string]func() *hostTree{"numa2": numa2Host, "isol8": isol8Host}

// TestSyntheticFixturesUpToDate regenerates each synthetic tree in a temporary directory and
// compares it, file by file and link by link, with the committed one.
func TestSyntheticFixturesUpToDate(t *testing.T) {
	for name, build := range syntheticHosts {
		committed := filepath.Join("testdata", "hosts", name)
		if *rewrite {
			if err := os.RemoveAll(committed); err != nil {
				t.Fatal(err)
			}
			if err := build().write(committed); err != nil {
				t.Fatalf("write %s: %v", committed, err)
			}
			continue
		}
		fresh := t.TempDir()
		if err := build().write(fresh); err != nil {
			t.Fatal(err)
		}
		want, got := treeContents(t, fresh), treeContents(t, committed)
		for path, content := range want {
			if got[path] != content {
				t.Errorf("%s: %s differs from the generator; run go test ./tuning -rewrite", name, path)
			}
		}
		for path := range got {
			if _, ok := want[path]; !ok {
				t.Errorf("%s: %s is not made by the generator", name, path)
			}
		}
	}
}

// treeContents maps every file and symlink under dir to its content or "-> target".
func treeContents(t *testing.T, dir string) map[string]string {
	t.Helper()
	contents := map[string]string{}
	err := filepath.WalkDir(dir, func(path string, entry fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		switch {
		case entry.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(path)
			contents[rel] = "-> " + target
			return err
		case entry.Type().IsRegular():
			data, err := os.ReadFile(path)
			contents[rel] = string(data)
			return err
		}
		return nil
	})
	if err != nil {
		t.Fatalf("walk %s: %v", dir, err)
	}
	return contents
}

// copyTree copies a fixture tree (files, directories, relative symlinks) into a new
// temporary directory and returns its roots.
func copyTree(t *testing.T, host string) (Roots, string) {
	t.Helper()
	src := filepath.Join("testdata", "hosts", host)
	dst := t.TempDir()
	err := filepath.WalkDir(src, func(path string, entry fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		target := filepath.Join(dst, rel)
		switch {
		case entry.IsDir():
			return os.MkdirAll(target, 0o755)
		case entry.Type()&fs.ModeSymlink != 0:
			link, err := os.Readlink(path)
			if err != nil {
				return err
			}
			return os.Symlink(link, target)
		default:
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			return os.WriteFile(target, data, 0o644)
		}
	})
	if err != nil {
		t.Fatalf("copy %s: %v", src, err)
	}
	return Roots{Sys: filepath.Join(dst, "sys"), Proc: filepath.Join(dst, "proc")}, dst
}

func mustEqualTrees(t *testing.T, want, got string) {
	t.Helper()
	wantFiles, gotFiles := treeContents(t, want), treeContents(t, got)
	for path, content := range wantFiles {
		if gotContent, ok := gotFiles[path]; !ok {
			t.Errorf("%s missing after revert", path)
		} else if !bytes.Equal([]byte(gotContent), []byte(content)) {
			t.Errorf("%s: got %q, want %q (byte for byte)", path, gotContent, content)
		}
	}
	for path := range gotFiles {
		if _, ok := wantFiles[path]; !ok {
			t.Errorf("%s appeared", path)
		}
	}
}
