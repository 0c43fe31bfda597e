package tuning

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

func discoverFixture(t *testing.T, host string) *Topology {
	t.Helper()
	topo, err := Discover(DiscoverOptions{Roots: fixtureRoots(host)})
	if err != nil {
		t.Fatalf("discover %s: %v", host, err)
	}
	return topo
}

func irqNumbers(irqs []QueueIRQ) []int {
	var numbers []int
	for _, irq := range irqs {
		numbers = append(numbers, irq.IRQ)
	}
	return numbers
}

// TestDiscoverVM checks discovery against the snapshot of the 2-CPU VM: a virtio NIC whose
// MSI-X vectors sit on the parent PCI device, and a virtio disk.
func TestDiscoverVM(t *testing.T) {
	topo := discoverFixture(t, "vm2")
	if got := topo.CPUIDs(); !slices.Equal(got, []int{0, 1}) {
		t.Errorf("cpus %v, want [0 1]", got)
	}
	if len(topo.Nodes) != 1 || !slices.Equal(topo.Nodes[0].CPUs, []int{0, 1}) {
		t.Errorf("nodes %+v, want one node with CPUs 0-1", topo.Nodes)
	}
	if len(topo.NICs) != 1 || topo.NICs[0].Name != "eth0" {
		t.Fatalf("nics %+v, want eth0 only (lo and ifb are virtual)", topo.NICs)
	}
	if got := irqNumbers(topo.NICs[0].IRQs); !slices.Equal(got, []int{38, 39}) {
		t.Errorf("eth0 queue IRQs %v, want [38 39] (virtio2-input.0, virtio2-output.0; not config 37)", got)
	}
	if len(topo.Disks) != 1 || topo.Disks[0].Name != "vda" {
		t.Fatalf("disks %+v, want vda only (loop and zram are virtual)", topo.Disks)
	}
	vda := topo.Disks[0]
	if vda.Scheduler != "mq-deadline" || !slices.Contains(vda.Schedulers, "none") || !vda.Rotational {
		t.Errorf("vda %+v", vda)
	}
	if got := irqNumbers(vda.IRQs); !slices.Equal(got, []int{36}) {
		t.Errorf("vda IRQs %v, want [36] (virtio1-req.0)", got)
	}
	if len(topo.Isolated) != 0 || len(topo.IRQBalancePIDs) != 0 {
		t.Errorf("isolated %v irqbalance %v, want none", topo.Isolated, topo.IRQBalancePIDs)
	}
}

func TestDiscoverTwoSocketHost(t *testing.T) {
	topo := discoverFixture(t, "numa2")
	if len(topo.CPUs) != 16 || len(topo.Nodes) != 2 {
		t.Fatalf("%d cpus %d nodes, want 16 and 2", len(topo.CPUs), len(topo.Nodes))
	}
	cpu12, _ := topo.CPU(12)
	if cpu12.Node != 1 || cpu12.Package != 1 || !slices.Equal(cpu12.Siblings, []int{4, 12}) {
		t.Errorf("cpu 12 = %+v, want node 1, package 1, siblings 4,12", cpu12)
	}
	nic := topo.NICs[0]
	if nic.Name != "ens1f0" || nic.Node != 1 || len(nic.RXQueues) != 8 || len(nic.TXQueues) != 8 {
		t.Errorf("nic %s node %d rx %d tx %d", nic.Name, nic.Node, len(nic.RXQueues), len(nic.TXQueues))
	}
	if got := irqNumbers(nic.IRQs); !slices.Equal(got, []int{121, 122, 123, 124, 125, 126, 127, 128}) {
		t.Errorf("nic IRQs %v, want the 8 completion vectors without mlx5_async0 (120)", got)
	}
	if nic.IRQs[3].Queue != 3 || !slices.Equal(nic.IRQs[3].Affinity, []int{3}) {
		t.Errorf("irq %+v, want queue 3 on cpu 3", nic.IRQs[3])
	}
	if len(topo.Disks) != 2 || topo.Disks[0].Node != 0 || topo.Disks[1].Node != 1 {
		t.Fatalf("disks %+v", topo.Disks)
	}
	nvme0 := topo.Disks[0]
	if len(nvme0.IRQs) != 16 || nvme0.IRQs[0].IRQ != 41 || !nvme0.IRQs[0].Managed {
		t.Errorf("nvme0 IRQs %v, want 41-56 managed (not the admin queue 40)", irqNumbers(nvme0.IRQs))
	}
	if nvme0.HWQueues != 16 || nvme0.HWQueueDepth != 1023 {
		t.Errorf("nvme0 hw queues %d depth %d", nvme0.HWQueues, nvme0.HWQueueDepth)
	}
	if !slices.Equal(topo.IRQBalancePIDs, []int{4242}) {
		t.Errorf("irqbalance %v, want [4242]", topo.IRQBalancePIDs)
	}
	if g := topo.Governors[5]; g.Value != "powersave" || !slices.Contains(g.Choices, "performance") {
		t.Errorf("cpu5 governor %+v", g)
	}
	if thp, _ := topo.Setting(thpEnabledPath); thp.Value != "always" {
		t.Errorf("thp %+v", thp)
	}
	if rmem, _ := topo.Setting("/proc/sys/net/ipv4/tcp_rmem"); rmem.Value != "4096 131072 6291456" {
		t.Errorf("tcp_rmem %q", rmem.Value)
	}
}

func TestDiscoverIsolatedHost(t *testing.T) {
	topo := discoverFixture(t, "isol8")
	if !slices.Equal(topo.Isolated, []int{1, 2, 3, 5, 6, 7}) || !slices.Equal(topo.NohzFull, topo.Isolated) {
		t.Errorf("isolated %v nohz_full %v", topo.Isolated, topo.NohzFull)
	}
	if got := irqNumbers(topo.NICs[0].IRQs); !slices.Equal(got, []int{50, 51, 52, 53}) {
		t.Errorf("eth0 IRQs %v, want 50-53 without the link IRQ 54", got)
	}
	if !strings.Contains(topo.Cmdline, "isolcpus=managed_irq,domain,1-3,5-7") {
		t.Errorf("cmdline %q", topo.Cmdline)
	}
}

// faultFS fails reads of one real path with a chosen error (Pebble errorfs style).
type faultFS struct {
	osFS
	path string
	err  error
}

func (f faultFS) ReadFile(name string) ([]byte, error) {
	if name == f.path {
		return nil, &fs.PathError{Op: "open", Path: name, Err: f.err}
	}
	return f.osFS.ReadFile(name)
}

func (f faultFS) ReadDir(name string) ([]fs.DirEntry, error) {
	if name == f.path {
		return nil, &fs.PathError{Op: "open", Path: name, Err: f.err}
	}
	return f.osFS.ReadDir(name)
}

// patchFS serves a fixture tree with some files replaced, failing or turned into symlinks,
// without copying the tree (copies are slow on a busy disk).
type patchFS struct {
	osFS
	content map[string]string
	errs    map[string]error
	links   map[string]string
}

func (p patchFS) fail(op, name string) error {
	if err, ok := p.errs[name]; ok {
		return &fs.PathError{Op: op, Path: name, Err: err}
	}
	return nil
}

func (p patchFS) ReadFile(name string) ([]byte, error) {
	if err := p.fail("open", name); err != nil {
		return nil, err
	}
	if content, ok := p.content[name]; ok {
		return []byte(content), nil
	}
	return p.osFS.ReadFile(name)
}

func (p patchFS) ReadDir(name string) ([]fs.DirEntry, error) {
	if err := p.fail("open", name); err != nil {
		return nil, err
	}
	return p.osFS.ReadDir(name)
}

func (p patchFS) Lstat(name string) (fs.FileInfo, error) {
	if err := p.fail("lstat", name); err != nil {
		return nil, err
	}
	if _, ok := p.links[name]; ok {
		return symlinkInfo{name: filepath.Base(name)}, nil
	}
	return p.osFS.Lstat(name)
}

func (p patchFS) Readlink(name string) (string, error) {
	if target, ok := p.links[name]; ok {
		return target, nil
	}
	return p.osFS.Readlink(name)
}

type symlinkInfo struct{ name string }

func (s symlinkInfo) Name() string       { return s.name }
func (s symlinkInfo) Size() int64        { return 0 }
func (s symlinkInfo) Mode() fs.FileMode  { return fs.ModeSymlink | 0o777 }
func (s symlinkInfo) ModTime() time.Time { return time.Time{} }
func (s symlinkInfo) IsDir() bool        { return false }
func (s symlinkInfo) Sys() any           { return nil }

// TestDiscoverBadInput breaks one file at a time and checks that discovery answers with an
// error naming the file, not a panic or a half-filled topology.
func TestDiscoverBadInput(t *testing.T) {
	missing := func(err error) func(*patchFS, string) {
		return func(p *patchFS, real string) { p.errs[real] = err }
	}
	text := func(content string) func(*patchFS, string) {
		return func(p *patchFS, real string) { p.content[real] = content }
	}
	cases := []struct {
		name    string
		logical string
		damage  func(p *patchFS, real string)
		want    string
		is      error
	}{
		{"missing online", "/sys/devices/system/cpu/online", missing(syscall.ENOENT), "/sys/devices/system/cpu/online", fs.ErrNotExist},
		{"missing interrupts", "/proc/interrupts", missing(syscall.ENOENT), "/proc/interrupts", fs.ErrNotExist},
		{"missing siblings", "/sys/devices/system/cpu/cpu5/topology/thread_siblings_list", missing(syscall.ENOENT), "thread_siblings_list", fs.ErrNotExist},
		{"missing node cpulist", "/sys/devices/system/node/node1/cpulist", missing(syscall.ENOENT), "node1/cpulist", fs.ErrNotExist},
		{"directory instead of file", "/sys/devices/system/cpu/cpu3/topology/core_id", missing(syscall.EISDIR), "core_id", syscall.EISDIR},
		{"malformed interrupts", "/proc/interrupts", text("           CPU0       CPU1\n 24:   1   zero   IO-APIC 5-edge x\n"), "line 2", ErrBadInterrupts},
		{"interrupts without header", "/proc/interrupts", text(""), "header", ErrBadInterrupts},
		{"interrupts short row", "/proc/interrupts", text("   CPU0 CPU1\n 24: 1\n"), "line 2", ErrBadInterrupts},
		{"garbage online list", "/sys/devices/system/cpu/online", text("0-banana"), "online", ErrBadCPUList},
		{"online cpu without topology", "/sys/devices/system/cpu/online", text("0-31"), "cpu16", fs.ErrNotExist},
		{"online list names no cpu", "/sys/devices/system/cpu/online", text("\n"), "no CPUs", nil},
		{"cpu in no node", "/sys/devices/system/node/node1/cpulist", text("4-7"), "no node", nil},
		{"bad core id", "/sys/devices/system/cpu/cpu0/topology/core_id", text("zero"), "not an integer", nil},
		{"bad isolated list", "/sys/devices/system/cpu/isolated", text("3-1"), "isolated", ErrBadCPUList},
		{"bad irq affinity", "/proc/irq/121/smp_affinity_list", text("0-"), "smp_affinity_list", ErrBadCPUList},
		{"link leaving the tree", "/sys/class/net/ens1f0", func(p *patchFS, real string) { p.links[real] = "../../../../../etc" }, "leaves the tree", ErrBadPath},
		{"link loop", "/sys/class/net/ens1f0", func(p *patchFS, real string) { p.links[real] = "ens1f0" }, "symlinks", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			roots := fixtureRoots("numa2")
			real, err := roots.Resolve(tc.logical)
			if err != nil {
				t.Fatal(err)
			}
			patched := &patchFS{content: map[string]string{}, errs: map[string]error{}, links: map[string]string{}}
			tc.damage(patched, real)
			topo, err := Discover(DiscoverOptions{Roots: roots, FS: patched})
			if err == nil {
				t.Fatalf("no error; topology %+v", topo)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not mention %q", err, tc.want)
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("error %q is not %v", err, tc.is)
			}
		})
	}
}

// TestDiscoverBadRPSMask damages a sysfs file reached through the NIC's device link.
func TestDiscoverBadRPSMask(t *testing.T) {
	roots := fixtureRoots("numa2")
	real := filepath.Join(roots.Sys, "devices/pci0000:80/0000:80:02.0/0000:81:00.0/net/ens1f0/queues/rx-2/rps_cpus")
	patched := &patchFS{content: map[string]string{real: "xyz"}}
	if _, err := Discover(DiscoverOptions{Roots: roots, FS: patched}); !errors.Is(err, ErrBadCPUList) || !strings.Contains(err.Error(), "rx-2/rps_cpus") {
		t.Errorf("bad rps mask: %v", err)
	}
}

// TestDiscoverUnreadable checks permission errors. Root reads through chmod 000, so the
// fault is injected at the file-system layer; without root a real chmod is tried too.
func TestDiscoverUnreadable(t *testing.T) {
	roots := fixtureRoots("numa2")
	for _, logical := range []string{"/proc/interrupts", "/sys/devices/system/node", "/proc/irq/124/smp_affinity_list", "/sys/block/nvme1n1/queue/scheduler"} {
		real, _ := roots.Resolve(logical)
		if logical == "/sys/block/nvme1n1/queue/scheduler" {
			// Discovery reads through the resolved device path.
			real = filepath.Join(roots.Sys, "devices/pci0000:80/0000:80:03.0/0000:82:00.0/nvme/nvme1/nvme1n1/queue/scheduler")
		}
		_, err := Discover(DiscoverOptions{Roots: roots, FS: faultFS{path: real, err: syscall.EACCES}})
		if !errors.Is(err, fs.ErrPermission) {
			t.Errorf("%s unreadable: error %v, want a permission error", logical, err)
		}
	}
	if os.Geteuid() != 0 {
		copied, _ := copyTree(t, "vm2")
		real, _ := copied.Resolve("/proc/interrupts")
		if err := os.Chmod(real, 0); err != nil {
			t.Fatal(err)
		}
		if _, err := Discover(DiscoverOptions{Roots: copied}); !errors.Is(err, fs.ErrPermission) {
			t.Errorf("chmod 000 /proc/interrupts: error %v, want permission denied", err)
		}
	}
}

// TestDiscoverOptionalFilesAbsent removes every optional file: discovery still succeeds.
func TestDiscoverOptionalFilesAbsent(t *testing.T) {
	roots := fixtureRoots("numa2")
	patched := &patchFS{errs: map[string]error{}}
	for _, logical := range []string{"/sys/class/net", "/sys/block", "/sys/devices/system/node", "/sys/kernel/mm/transparent_hugepage/enabled",
		"/sys/devices/system/clocksource/clocksource0/current_clocksource", "/proc/cmdline", "/proc/meminfo",
		"/sys/devices/system/cpu/isolated", "/sys/devices/system/cpu/nohz_full", "/proc/sys/kernel/hostname", "/proc/sys/kernel/osrelease"} {
		real, _ := roots.Resolve(logical)
		patched.errs[real] = syscall.ENOENT
	}
	for _, name := range sysctlPaths {
		real, _ := roots.Resolve(name)
		patched.errs[real] = syscall.ENOENT
	}
	topo, err := Discover(DiscoverOptions{Roots: roots, FS: patched})
	if err != nil {
		t.Fatalf("discover without optional files: %v", err)
	}
	if len(topo.Nodes) != 1 || len(topo.Nodes[0].CPUs) != 16 || len(topo.NICs) != 0 || len(topo.Disks) != 0 || len(topo.Settings) != 0 {
		t.Errorf("topology %+v, want one node with every CPU and no devices", topo)
	}
	if _, err := BuildPlan(topo, PlanOptions{}); err != nil {
		t.Errorf("plan on a bare host: %v", err)
	}
}

func TestSnapshotReproducesDiscovery(t *testing.T) {
	for _, host := range fixtureHosts {
		t.Run(host, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "snap")
			original, err := Snapshot(DiscoverOptions{Roots: fixtureRoots(host)}, out)
			if err != nil {
				t.Fatal(err)
			}
			copied, err := Discover(DiscoverOptions{Roots: Roots{Sys: filepath.Join(out, "sys"), Proc: filepath.Join(out, "proc")}})
			if err != nil {
				t.Fatalf("discover snapshot: %v", err)
			}
			for _, opts := range []PlanOptions{{}, {DataDevice: fixtureDataDevices[host]}} {
				a, b := planJSON(t, original, opts), planJSON(t, copied, opts)
				if a != b {
					t.Errorf("plan from snapshot differs:\n%s\nvs\n%s", a, b)
				}
			}
			if len(copied.Mounts) == 0 || !reflect.DeepEqual(original.Mounts, copied.Mounts) {
				t.Errorf("mounts from snapshot %+v, want %+v", copied.Mounts, original.Mounts)
			}
			if _, err := Snapshot(DiscoverOptions{Roots: fixtureRoots(host)}, out); !errors.Is(err, ErrSnapshotExists) {
				t.Errorf("second snapshot into %s: %v, want ErrSnapshotExists", out, err)
			}
		})
	}
}

func planJSON(t *testing.T, topo *Topology, opts PlanOptions) string {
	t.Helper()
	plan, err := BuildPlan(topo, opts)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := plan.WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func TestNUMANodeOfCPU(t *testing.T) {
	numa2 := fixtureRoots("numa2").Sys
	for cpu, want := range map[int]int{0: 0, 3: 0, 4: 1, 11: 0, 12: 1, 15: 1} {
		got, err := NUMANodeOfCPU(numa2, cpu)
		if err != nil || got != want {
			t.Errorf("cpu %d: node %d, %v; want %d", cpu, got, err, want)
		}
	}
	if got, err := NUMANodeOfCPU(fixtureRoots("vm2").Sys, 1); err != nil || got != 0 {
		t.Errorf("vm2 cpu 1: %d, %v", got, err)
	}
	for _, cpu := range []int{16, -1, 1 << 20} {
		if _, err := NUMANodeOfCPU(numa2, cpu); !errors.Is(err, ErrCPUNotOnline) {
			t.Errorf("cpu %d: %v, want ErrCPUNotOnline", cpu, err)
		}
	}
	roots, _ := copyTree(t, "vm2")
	if err := os.RemoveAll(filepath.Join(roots.Sys, "devices/system/node")); err != nil {
		t.Fatal(err)
	}
	if got, err := NUMANodeOfCPU(roots.Sys, 1); err != nil || got != 0 {
		t.Errorf("kernel without NUMA: %d, %v; want node 0", got, err)
	}
	if _, err := NUMANodeOfCPU(t.TempDir(), 0); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("empty sys root: %v, want not-exist", err)
	}
}

// TestDiscoverNICWithoutMSIDirectory: without msi_irqs the NIC's queue IRQs are found by
// name in /proc/interrupts, and other devices' IRQs are not picked up.
func TestDiscoverNICWithoutMSIDirectory(t *testing.T) {
	roots := fixtureRoots("isol8")
	patched := &patchFS{errs: map[string]error{}}
	for _, dir := range []string{"devices/pci0000:00/0000:00:03.0/0000:03:00.0/msi_irqs", "devices/pci0000:00/0000:00:1d.0/0000:3d:00.0/msi_irqs"} {
		patched.errs[filepath.Join(roots.Sys, dir)] = syscall.ENOENT
	}
	topo, err := Discover(DiscoverOptions{Roots: roots, FS: patched})
	if err != nil {
		t.Fatal(err)
	}
	if got := irqNumbers(topo.NICs[0].IRQs); !slices.Equal(got, []int{50, 51, 52, 53}) {
		t.Errorf("eth0 IRQs by name %v, want 50-53", got)
	}
	if got := irqNumbers(topo.Disks[0].IRQs); len(got) != 8 || got[0] != 71 {
		t.Errorf("nvme0 IRQs by name %v, want 71-78", got)
	}
}

func TestRootsLive(t *testing.T) {
	link := filepath.Join(t.TempDir(), "sys")
	if err := os.Symlink("/sys", link); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		roots Roots
		live  bool
	}{
		{DefaultRoots(), true},
		{Roots{Sys: "/sys/", Proc: t.TempDir()}, true},
		{Roots{Sys: link, Proc: t.TempDir()}, true},
		{fixtureRoots("vm2"), false},
	} {
		if got := tc.roots.Live(); got != tc.live {
			t.Errorf("%+v live = %v, want %v", tc.roots, got, tc.live)
		}
	}
}

// TestDiscoverLiveHost reads the machine the tests run on (read only) and plans for it, so
// that real sysfs quirks (xps_cpus that refuses reads, dangling class links) are exercised.
func TestDiscoverLiveHost(t *testing.T) {
	if _, err := os.Stat("/sys/devices/system/cpu/online"); err != nil {
		t.Skipf("no sysfs here: %v", err)
	}
	topo, err := Discover(DiscoverOptions{})
	if errors.Is(err, fs.ErrNotExist) {
		t.Skipf("this sandbox's sysfs lacks a required file: %v", err)
	}
	if err != nil {
		t.Fatalf("discover the live host: %v", err)
	}
	if len(topo.CPUs) == 0 || len(topo.Nodes) == 0 || topo.Interrupts == nil || len(topo.Interrupts.CPUs) == 0 {
		t.Fatalf("live topology incomplete: %d cpus, %d nodes", len(topo.CPUs), len(topo.Nodes))
	}
	for _, node := range topo.Nodes {
		for _, cpu := range node.CPUs {
			got, err := NUMANodeOfCPU("/sys", cpu)
			if _, online := topo.CPU(cpu); online && (err != nil || got != node.ID) {
				t.Errorf("NUMANodeOfCPU(%d) = %d, %v; discovery says node %d", cpu, got, err, node.ID)
			}
		}
	}
	if _, err := BuildPlan(topo, PlanOptions{IRQMode: IRQModeShared}); err != nil {
		t.Errorf("plan for the live host: %v", err)
	}
}
