package tuning

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

type planCase struct {
	name string
	host string
	opts PlanOptions
}

var planCases = []planCase{
	{"vm2-dedicated", "vm2", PlanOptions{}},
	{"vm2-shared", "vm2", PlanOptions{IRQMode: IRQModeShared}},
	{"numa2-dedicated", "numa2", PlanOptions{}},
	{"numa2-shared-4", "numa2", PlanOptions{IRQMode: IRQModeShared, Shards: 4}},
	{"numa2-dedicated-10", "numa2", PlanOptions{Shards: 10}},
	{"isol8-dedicated", "isol8", PlanOptions{}},
	{"isol8-shared", "isol8", PlanOptions{IRQMode: IRQModeShared}},
	{"vm2-datadir", "vm2", PlanOptions{IRQMode: IRQModeShared, DataDevice: "254:0"}},
	{"numa2-datadir", "numa2", PlanOptions{DataDevice: "259:9"}},
	{"isol8-datadir", "isol8", PlanOptions{DataDevice: "259:1"}},
}

// TestPlanGolden compares each fixture's plan, as text and as JSON, with
// testdata/golden/NAME.{txt,json}. Regenerate with: go test ./tuning -rewrite
func TestPlanGolden(t *testing.T) {
	for _, tc := range planCases {
		t.Run(tc.name, func(t *testing.T) {
			plan, err := BuildPlan(discoverFixture(t, tc.host), tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			var text, data bytes.Buffer
			if err := plan.WriteText(&text, true); err != nil {
				t.Fatal(err)
			}
			if err := plan.WriteJSON(&data); err != nil {
				t.Fatal(err)
			}
			checkGolden(t, filepath.Join("testdata", "golden", tc.name+".txt"), text.Bytes())
			checkGolden(t, filepath.Join("testdata", "golden", tc.name+".json"), data.Bytes())
		})
	}
}

func checkGolden(t *testing.T, path string, got []byte) {
	t.Helper()
	if *rewrite {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./tuning -rewrite to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the plan (go test ./tuning -rewrite regenerates it after review):\n%s", path, firstDiff(string(want), string(got)))
	}
}

func firstDiff(want, got string) string {
	wantLines, gotLines := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := range max(len(wantLines), len(gotLines)) {
		var w, g string
		if i < len(wantLines) {
			w = wantLines[i]
		}
		if i < len(gotLines) {
			g = gotLines[i]
		}
		if w != g {
			return "line " + itoa(i+1) + ":\n want: " + w + "\n  got: " + g
		}
	}
	return ""
}

func itoa(n int) string { return FormatCPUList([]int{n}) }

// TestPlanInvariants checks the placement rules on every fixture and mode, independent of
// the golden text.
func TestPlanInvariants(t *testing.T) {
	for _, tc := range planCases {
		t.Run(tc.name, func(t *testing.T) {
			topo := discoverFixture(t, tc.host)
			plan, err := BuildPlan(topo, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			cores := map[int]int{} // cpu → index of its first sibling
			for _, cpu := range topo.CPUs {
				cores[cpu.ID] = cpu.Siblings[0]
			}
			seenCores := map[int]bool{}
			usesSibling := false
			for i, cpu := range plan.ShardCPUs {
				c, ok := topo.CPU(cpu)
				if !ok {
					t.Fatalf("shard on cpu %d which is not online", cpu)
				}
				if plan.ShardNodes[i] != c.Node {
					t.Errorf("shard %d: node %d, cpu %d is on node %d", i, plan.ShardNodes[i], cpu, c.Node)
				}
				if seenCores[cores[cpu]] {
					usesSibling = true
				}
				seenCores[cores[cpu]] = true
				if len(topo.Isolated) > 0 && !slices.Contains(topo.Isolated, cpu) {
					t.Errorf("shard on cpu %d, outside isolcpus %v", cpu, topo.Isolated)
				}
			}
			if usesSibling && (tc.opts.Shards == 0 || tc.opts.Shards <= len(seenCores)) {
				t.Errorf("shards %v share a physical core while free cores remain", plan.ShardCPUs)
			}
			for _, item := range plan.Items {
				if item.Kind != "irq" || item.Path == "" {
					continue
				}
				target, err := ParseCPUList(item.Proposed)
				if err != nil || len(target) != 1 {
					t.Fatalf("irq item %q proposes %q", item.Target, item.Proposed)
				}
				onShard := slices.Contains(plan.ShardCPUs, target[0])
				if plan.IRQMode == IRQModeDedicated && onShard {
					t.Errorf("dedicated mode put %s on shard cpu %d", item.Target, target[0])
				}
				if plan.IRQMode == IRQModeShared && !onShard {
					t.Errorf("shared mode put %s on cpu %d, which runs no shard", item.Target, target[0])
				}
			}
			if plan.IRQMode == IRQModeDedicated {
				for _, cpu := range plan.IRQCPUs {
					if slices.Contains(plan.ShardCPUs, cpu) {
						t.Errorf("irq cpu %d is also a shard cpu", cpu)
					}
				}
			}
		})
	}
}

// TestPlanPrefersDeviceNode: with few shards on the two-socket host every shard lands on the
// NIC's node (1), one per physical core.
func TestPlanPrefersDeviceNode(t *testing.T) {
	topo := discoverFixture(t, "numa2")
	plan, err := BuildPlan(topo, PlanOptions{Shards: 3})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(plan.ShardCPUs, []int{5, 6, 7}) || !slices.Equal(plan.IRQCPUs, []int{4, 12}) {
		t.Errorf("shards %v irq cpus %v, want shards 5,6,7 and IRQs on core 4/12 of node 1", plan.ShardCPUs, plan.IRQCPUs)
	}
	plan, err = BuildPlan(topo, PlanOptions{Shards: 3, NICs: []string{"ens1f0"}, Disks: []string{"nvme0n1"}, IRQMode: IRQModeShared})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(plan.ShardCPUs, []int{4, 5, 6}) {
		t.Errorf("shared: shards %v, want 4,5,6 (NIC node first)", plan.ShardCPUs)
	}
	// All 16 CPUs: every primary thread first, then the SMT siblings.
	plan, err = BuildPlan(topo, PlanOptions{Shards: 16, IRQMode: IRQModeShared})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(plan.ShardCPUs[:8], []int{4, 5, 6, 7, 0, 1, 2, 3}) {
		t.Errorf("16 shards %v, want the 8 primary threads first", plan.ShardCPUs)
	}
}

func TestPlanGivenCPUs(t *testing.T) {
	topo := discoverFixture(t, "numa2")
	plan, err := BuildPlan(topo, PlanOptions{CPUs: []int{8, 9}})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(plan.ShardCPUs, []int{8, 9}) || slices.Contains(plan.IRQCPUs, 0) || slices.Contains(plan.IRQCPUs, 8) {
		t.Errorf("shards %v irq cpus %v: IRQs must avoid the shards' cores (0/8, 1/9)", plan.ShardCPUs, plan.IRQCPUs)
	}
}

func TestPlanBadInput(t *testing.T) {
	vm := discoverFixture(t, "vm2")
	numa2 := discoverFixture(t, "numa2")
	isol8 := discoverFixture(t, "isol8")
	cases := []struct {
		name string
		topo *Topology
		opts PlanOptions
		is   error
		want string
	}{
		{"cpu list that does not exist", vm, PlanOptions{CPUs: []int{1, 2, 3, 63}}, ErrCPUNotOnline, "2-3,63 (online: 0-1)"},
		{"too many shards", vm, PlanOptions{Shards: 2}, ErrTooManyShards, "2 shards asked, 1 CPUs"},
		{"too many shards shared", numa2, PlanOptions{Shards: 17, IRQMode: IRQModeShared}, ErrTooManyShards, "17 shards"},
		{"more shards than isolated CPUs", isol8, PlanOptions{Shards: 7}, ErrTooManyShards, "7 shards"},
		{"dedicated with every cpu a shard", vm, PlanOptions{CPUs: []int{0, 1}}, ErrNoIRQCPU, "--irq-mode shared"},
		{"bad irq mode", vm, PlanOptions{IRQMode: "spread"}, ErrBadIRQMode, "spread"},
		{"negative shards", vm, PlanOptions{Shards: -1}, ErrTooManyShards, "-1"},
		{"unknown nic", numa2, PlanOptions{NICs: []string{"eth9"}}, ErrUnknownDevice, "found: ens1f0"},
		{"unknown disk", numa2, PlanOptions{Disks: []string{"sdz"}}, ErrUnknownDevice, "nvme0n1, nvme1n1"},
		{"cpu twice", numa2, PlanOptions{CPUs: []int{3, 3}}, ErrBadCPUList, "twice"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			plan, err := BuildPlan(tc.topo, tc.opts)
			if !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want %v mentioning %q (plan %+v)", err, tc.is, tc.want, plan)
			}
		})
	}
	single := *vm
	single.CPUs = vm.CPUs[:1]
	if _, err := BuildPlan(&single, PlanOptions{}); !errors.Is(err, ErrNoIRQCPU) {
		t.Errorf("dedicated on one core: %v, want ErrNoIRQCPU", err)
	}
}

func TestPlanFileRoundTrip(t *testing.T) {
	plan, err := BuildPlan(discoverFixture(t, "numa2"), PlanOptions{Shards: 4})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "plan.json")
	var data bytes.Buffer
	if err := plan.WriteJSON(&data); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	loaded, err := LoadPlan(path)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(loaded.ShardCPUs, plan.ShardCPUs) || len(loaded.Items) != len(plan.Items) || loaded.Items[3] != plan.Items[3] {
		t.Errorf("loaded plan differs: shards %v items %d", loaded.ShardCPUs, len(loaded.Items))
	}
	if _, err := LoadPlan(filepath.Join(t.TempDir(), "absent.json")); err == nil {
		t.Error("absent plan file loaded")
	}
}

func TestDecodePlanRejects(t *testing.T) {
	valid := `{"version":1,"irq_mode":"dedicated","shard_cpus":[1],"shard_nodes":[0],"irq_cpus":[0],"summary":[],"items":[%s]}`
	item := func(path, proposed string) string {
		return strings.NewReplacer("%s", `{"kind":"sysctl","target":"t","path":"`+path+`","current":"1","proposed":"`+proposed+`","why":"w","action":"set"}`).Replace(valid)
	}
	cases := map[string]string{
		"not json":            "{",
		"trailing data":       strings.Replace(valid, "%s", "", 1) + "{}",
		"unknown field":       `{"version":1,"bogus":true}`,
		"wrong version":       strings.Replace(strings.Replace(valid, "%s", "", 1), `"version":1`, `"version":2`, 1),
		"no shards":           strings.Replace(strings.Replace(valid, "%s", "", 1), `[1]`, `[]`, 1),
		"repeated shard":      strings.Replace(strings.Replace(valid, "%s", "", 1), `[1]`, `[1,1]`, 1),
		"huge shard cpu":      strings.Replace(strings.Replace(valid, "%s", "", 1), `[1]`, `[99999]`, 1),
		"bad mode":            strings.Replace(strings.Replace(valid, "%s", "", 1), `dedicated`, `both`, 1),
		"path outside":        item("/etc/passwd", "x"),
		"path climbing out":   item("/proc/sys/../../etc/shadow", "x"),
		"untunable sys path":  item("/sys/firmware/efi/efivars/x", "x"),
		"multi-line proposal": item("/proc/sys/vm/swappiness", `1\n2`),
		"bad action":          strings.Replace(item("/proc/sys/vm/swappiness", "1"), `"set"`, `"explode"`, 1),
	}
	for name, text := range cases {
		if plan, err := DecodePlan([]byte(text)); !errors.Is(err, ErrBadPlan) && !errors.Is(err, ErrBadPath) {
			t.Errorf("%s: error %v plan %+v, want ErrBadPlan", name, err, plan)
		}
	}
	if _, err := DecodePlan([]byte(item("/proc/sys/vm/swappiness", "1"))); err != nil {
		t.Errorf("valid plan rejected: %v", err)
	}
}

func TestPlanDataDevice(t *testing.T) {
	topo := discoverFixture(t, "numa2")
	if disk := topo.Disks[1]; disk.Dev != "259:8" || !slices.Equal(disk.PartitionDevs, []string{"259:9"}) {
		t.Fatalf("nvme1n1 dev %q partitions %v", disk.Dev, disk.PartitionDevs)
	}
	plan, err := BuildPlan(topo, PlanOptions{DataDevice: "259:9", IRQMode: IRQModeShared, Shards: 2})
	if err != nil {
		t.Fatal(err)
	}
	for _, item := range plan.Items {
		if item.Kind == "disk" && !strings.HasPrefix(item.Target, "nvme1n1") {
			t.Errorf("data dir on nvme1n1p1 but the plan tunes %s", item.Target)
		}
	}
	if !slices.Equal(plan.ShardNodes, []int{1, 1}) {
		t.Errorf("shard nodes %v, want node 1 (NIC and data disk)", plan.ShardNodes)
	}
	// Data on nvme0 (node 0), NIC on node 1: with 8 shards the NIC's node fills first.
	plan, err = BuildPlan(topo, PlanOptions{DataDevice: "259:0", IRQMode: IRQModeShared})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(plan.ShardNodes, []int{1, 1, 1, 1, 0, 0, 0, 0}) {
		t.Errorf("shard nodes %v", plan.ShardNodes)
	}
	for _, opts := range []PlanOptions{{DataDevice: "253:0"}, {DataDevice: "259:0", Disks: []string{"nvme0n1"}}} {
		if _, err := BuildPlan(topo, opts); !errors.Is(err, ErrUnknownDevice) {
			t.Errorf("%+v: %v, want ErrUnknownDevice", opts, err)
		}
	}
}
