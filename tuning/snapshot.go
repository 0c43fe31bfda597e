package tuning

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// ErrSnapshotExists reports a snapshot directory that already holds files.
var ErrSnapshotExists = errors.New("snapshot directory not empty")

// Snapshot discovers the host at roots and copies exactly the files, directories and
// symlinks discovery read into outDir/sys and outDir/proc, so that Discover with
// Roots{outDir/sys, outDir/proc} sees the same host. It is how the fixture trees under
// tuning/testdata were made, and what an operator attaches to a bug report.
// Only irqbalance's /proc/PID/comm is copied from the process list.
func Snapshot(opts DiscoverOptions, outDir string) (*Topology, error) {
	if entries, err := os.ReadDir(outDir); err == nil && len(entries) > 0 {
		return nil, fmt.Errorf("%w: %s", ErrSnapshotExists, outDir)
	}
	rec := newRecorder()
	opts.rec = rec
	topo, err := Discover(opts)
	if err != nil {
		return nil, err
	}
	out := Roots{Sys: filepath.Join(outDir, "sys"), Proc: filepath.Join(outDir, "proc")}
	if err := rec.write(out); err != nil {
		return nil, fmt.Errorf("write snapshot %s: %w", outDir, err)
	}
	return topo, nil
}

func (rec *recorder) write(out Roots) error {
	for _, root := range []string{out.Sys, out.Proc} {
		if err := os.MkdirAll(root, 0o755); err != nil {
			return err
		}
	}
	dirs := sortedKeys(rec.dirs)
	for _, logical := range dirs {
		real, err := out.Resolve(logical)
		if err != nil {
			return err
		}
		if err := os.MkdirAll(real, 0o755); err != nil {
			return err
		}
	}
	for _, logical := range sortedKeys(rec.links) {
		real, err := out.Resolve(logical)
		if err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Dir(real), 0o755); err != nil {
			return err
		}
		if err := os.Symlink(rec.links[logical], real); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
	}
	for _, logical := range sortedKeys(rec.files) {
		real, err := out.Resolve(logical)
		if err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Dir(real), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(real, rec.files[logical], 0o644); err != nil {
			return err
		}
	}
	// git does not keep empty directories (a tx-N queue without xps_cpus): mark them.
	for _, logical := range dirs {
		real, _ := out.Resolve(logical)
		if entries, err := os.ReadDir(real); err == nil && len(entries) == 0 {
			if err := os.WriteFile(filepath.Join(real, emptyDirMarker), nil, 0o644); err != nil {
				return err
			}
		}
	}
	return nil
}

// emptyDirMarker keeps an otherwise empty snapshot directory in git. Discovery ignores it.
const emptyDirMarker = ".keep"

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for key := range m {
		keys = append(keys, key)
	}
	sort.Strings(keys)
	return keys
}

// NUMANodeOfCPU returns the NUMA node of an online CPU, read from sysRoot (normally "/sys").
// A kernel without NUMA support (no devices/system/node) puts every CPU on node 0.
func NUMANodeOfCPU(sysRoot string, cpu int) (int, error) {
	if cpu < 0 || cpu > cpuIDMax {
		return 0, fmt.Errorf("numa node of cpu %d: %w", cpu, ErrCPUNotOnline)
	}
	r := &reader{roots: Roots{Sys: sysRoot, Proc: "/proc"}, fsys: osFS{}}
	online, err := r.readString(cpuDir + "/online")
	if err != nil {
		return 0, fmt.Errorf("numa node of cpu %d: %w", cpu, err)
	}
	cpus, err := ParseCPUList(online)
	if err != nil {
		return 0, fmt.Errorf("numa node of cpu %d: %s/online: %w", cpu, cpuDir, err)
	}
	if _, found := sortSearch(cpus, cpu); !found {
		return 0, fmt.Errorf("numa node of cpu %d: %w (online: %s)", cpu, ErrCPUNotOnline, FormatCPUList(cpus))
	}
	entries, err := r.readDir(nodeDir)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("numa node of cpu %d: %w", cpu, err)
	}
	for _, entry := range entries {
		name := entry.Name()
		digits, ok := strings.CutPrefix(name, "node")
		if !ok {
			continue
		}
		var node int
		if _, err := fmt.Sscanf(digits, "%d", &node); err != nil || fmt.Sprint(node) != digits {
			continue
		}
		list, err := r.readString(nodeDir + "/" + name + "/cpulist")
		if err != nil {
			return 0, fmt.Errorf("numa node of cpu %d: %w", cpu, err)
		}
		nodeCPUs, err := ParseCPUList(list)
		if err != nil {
			return 0, fmt.Errorf("numa node of cpu %d: %s/%s/cpulist: %w", cpu, nodeDir, name, err)
		}
		if _, found := sortSearch(nodeCPUs, cpu); found {
			return node, nil
		}
	}
	return 0, fmt.Errorf("numa node of cpu %d: in no node's cpulist under %s", cpu, nodeDir)
}

func sortSearch(sorted []int, v int) (int, bool) {
	i := sort.SearchInts(sorted, v)
	return i, i < len(sorted) && sorted[i] == v
}
