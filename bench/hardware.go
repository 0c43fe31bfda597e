package bench

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Hardware is the machine line that every result carries: a number without it cannot be
// compared with anything.
type Hardware struct {
	CPUModel    string `json:"cpu_model"`
	Cores       int    `json:"cores"`
	MemoryBytes int64  `json:"memory_bytes"`
	Kernel      string `json:"kernel"`
	Hypervisor  string `json:"hypervisor,omitempty"`
	Disk        Disk   `json:"disk"`
	GoVersion   string `json:"go_version"`
	Revision    string `json:"ringlog_revision,omitempty"`
	// LoadAverage is /proc/loadavg's 1-minute figure when the run started: a number measured
	// on a machine already running other work is not a number about the system under test.
	LoadAverage float64 `json:"load_average_1m"`
}

// Disk describes the block device under a data directory.
type Disk struct {
	Dir        string `json:"dir"`
	Filesystem string `json:"filesystem"`
	Device     string `json:"device,omitempty"`
	Model      string `json:"model,omitempty"`
	Rotational *bool  `json:"rotational,omitempty"` // as the kernel reports it; virtio disks often claim 1
	Scheduler  string `json:"scheduler,omitempty"`
}

// String renders the one-line hardware summary printed above every table.
func (h Hardware) String() string {
	return fmt.Sprintf("%s, load %.1f at start", h.Machine(), h.LoadAverage)
}

// Machine is the hardware line without the load: what must match for two results to be
// comparable.
func (h Hardware) Machine() string {
	rot := "?"
	if h.Disk.Rotational != nil {
		rot = strconv.FormatBool(*h.Disk.Rotational)
	}
	virt := ""
	if h.Hypervisor != "" {
		virt = " (" + h.Hypervisor + " guest)"
	}
	return fmt.Sprintf("%s, %d cores%s, %s RAM, Linux %s, disk %s %s on %s (kernel rotational=%s), %s",
		h.CPUModel, h.Cores, virt, FormatBytes(h.MemoryBytes), h.Kernel,
		orUnknown(h.Disk.Device), h.Disk.Model, h.Disk.Filesystem, rot, h.GoVersion)
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

// DetectHardware reads /proc and /sys. Missing files leave fields empty rather than failing:
// a benchmark still runs in a container that hides them.
func DetectHardware(dataDir string) Hardware {
	h := Hardware{Cores: runtime.NumCPU(), GoVersion: runtime.Version()}
	h.CPUModel, h.Hypervisor = cpuInfo()
	h.MemoryBytes = memTotal()
	var uts unix.Utsname
	if unix.Uname(&uts) == nil {
		h.Kernel = unix.ByteSliceToString(uts.Release[:])
	}
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, setting := range info.Settings {
			if setting.Key == "vcs.revision" {
				h.Revision = setting.Value
			}
		}
	}
	h.Disk = DetectDisk(dataDir)
	if data, err := os.ReadFile("/proc/loadavg"); err == nil {
		if fields := strings.Fields(string(data)); len(fields) > 0 {
			h.LoadAverage, _ = strconv.ParseFloat(fields[0], 64)
		}
	}
	return h
}

func cpuInfo() (model, hypervisor string) {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "unknown", ""
	}
	defer f.Close()
	scanner := bufio.NewScanner(f)
	for scanner.Scan() {
		key, value, ok := strings.Cut(scanner.Text(), ":")
		if !ok {
			continue
		}
		key, value = strings.TrimSpace(key), strings.TrimSpace(value)
		switch {
		case key == "model name" && model == "":
			model = value
		case key == "flags" && strings.Contains(" "+value+" ", " hypervisor "):
			hypervisor = "virtual machine"
		}
	}
	if model == "" {
		model = "unknown"
	}
	return model, hypervisor
}

func memTotal() int64 {
	data, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			kib, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err == nil {
				return kib << 10
			}
		}
	}
	return 0
}

var filesystemNames = map[int64]string{
	0xef53:     "ext4",
	0x58465342: "xfs",
	0x9123683e: "btrfs",
	0x01021994: "tmpfs",
	0x794c7630: "overlayfs",
	0x2fc12fc1: "zfs",
	0x65735546: "fuse",
}

// DetectDisk finds the filesystem and block device under dir.
func DetectDisk(dir string) Disk {
	d := Disk{Dir: dir}
	var fs unix.Statfs_t
	if unix.Statfs(dir, &fs) == nil {
		name, ok := filesystemNames[int64(fs.Type)]
		if !ok {
			name = fmt.Sprintf("fs-0x%x", fs.Type)
		}
		d.Filesystem = name
	}
	var st unix.Stat_t
	if unix.Stat(dir, &st) != nil {
		return d
	}
	sysDir := fmt.Sprintf("/sys/dev/block/%d:%d", unix.Major(st.Dev), unix.Minor(st.Dev))
	resolved, err := filepath.EvalSymlinks(sysDir)
	if err != nil {
		return d
	}
	d.Device = filepath.Base(resolved)
	// A partition's queue/ and device/ live on its parent disk.
	if _, err := os.Stat(filepath.Join(resolved, "partition")); err == nil {
		resolved = filepath.Dir(resolved)
	}
	if v, err := os.ReadFile(filepath.Join(resolved, "queue/rotational")); err == nil {
		rotational := strings.TrimSpace(string(v)) == "1"
		d.Rotational = &rotational
	}
	if v, err := os.ReadFile(filepath.Join(resolved, "queue/scheduler")); err == nil {
		d.Scheduler = strings.TrimSpace(string(v))
	}
	if v, err := os.ReadFile(filepath.Join(resolved, "device/model")); err == nil {
		d.Model = strings.TrimSpace(string(v))
	} else if _, err := os.Stat(filepath.Join(resolved, "device/driver")); err == nil {
		if driver, err := filepath.EvalSymlinks(filepath.Join(resolved, "device/driver")); err == nil {
			d.Model = filepath.Base(driver)
		}
	}
	if d.Model == "" && strings.HasPrefix(d.Device, "vd") {
		d.Model = "virtio-blk"
	}
	return d
}
