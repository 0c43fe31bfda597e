package tuning

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func TestParseCPUList(t *testing.T) {
	good := map[string][]int{
		"":              nil,
		"(null)":        nil,
		"0":             {0},
		"0-3":           {0, 1, 2, 3},
		"0-1,4,6-7\n":   {0, 1, 4, 6, 7},
		"3,1,2,1":       {1, 2, 3},
		" 8 , 9 ":       {8, 9},
		"8191":          {8191},
		"4094-4095,0-0": {0, 4094, 4095},
	}
	for in, want := range good {
		got, err := ParseCPUList(in)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("ParseCPUList(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{",", "1,", "a", "-1", "1-", "3-1", "0-8192", "99999999999", "1-2-3", "+1", "0-15:2/4", "1 2"} {
		if got, err := ParseCPUList(in); !errors.Is(err, ErrBadCPUList) {
			t.Errorf("ParseCPUList(%q) = %v, %v; want ErrBadCPUList", in, got, err)
		}
	}
}

func TestFormatCPUList(t *testing.T) {
	cases := map[string][]int{"": nil, "0": {0}, "0-3": {3, 2, 1, 0}, "0-1,4,6-8": {0, 1, 4, 6, 7, 8, 8}}
	for want, in := range cases {
		if got := FormatCPUList(in); got != want {
			t.Errorf("FormatCPUList(%v) = %q, want %q", in, got, want)
		}
	}
}

func TestCPUMask(t *testing.T) {
	good := map[string][]int{
		"0":                 nil,
		"00000000,00000000": nil,
		"3":                 {0, 1},
		"f0":                {4, 5, 6, 7},
		"1,00000000":        {32},
		"00000001,80000000": {31, 32},
		"ffff":              {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15},
	}
	for in, want := range good {
		got, err := ParseCPUMask(in)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("ParseCPUMask(%q) = %v, %v; want %v", in, got, err, want)
		}
		back, err := ParseCPUMask(FormatCPUMask(got))
		if err != nil || !slices.Equal(back, want) {
			t.Errorf("mask %q does not survive Format/Parse: %q", in, FormatCPUMask(got))
		}
	}
	for _, in := range []string{"", "g", "1,", ",1", "123456789", "-1", strings.Repeat("0,", 300) + "0"} {
		if _, err := ParseCPUMask(in); !errors.Is(err, ErrBadCPUList) {
			t.Errorf("ParseCPUMask(%q): %v, want ErrBadCPUList", in, err)
		}
	}
	if got := FormatCPUMask([]int{33, 0}); got != "2,00000001" {
		t.Errorf("FormatCPUMask = %q", got)
	}
}

func TestParseInterrupts(t *testing.T) {
	modern := "           CPU0       CPU1       \n" +
		" 24:          1          0  IO-APIC   5-edge      ACPI:Ged\n" +
		" 38:          0       2133 PCI-MSIX-0000:00:03.0   1-edge      virtio2-input.0\n" +
		" 50:          5          6  IR-PCI-MSI 524288-edge      eth0, eth0-fw\n" +
		"NMI:          0          0   Non-maskable interrupts\n" +
		"ERR:          0\n"
	in, err := ParseInterrupts(modern)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(in.CPUs, []int{0, 1}) || len(in.IRQs) != 3 {
		t.Fatalf("parsed %+v", in)
	}
	if irq := in.Find(38); irq == nil || irq.Actions != "virtio2-input.0" || irq.Counts[1] != 2133 || irq.Chip != "PCI-MSIX-0000:00:03.0" {
		t.Errorf("irq 38 = %+v", irq)
	}
	if irq := in.Find(50); irq == nil || irq.Actions != "eth0, eth0-fw" {
		t.Errorf("shared irq 50 = %+v", irq)
	}
	old := "           CPU0       CPU2\n 45:   10   20   PCI-MSI-edge      eth0-TxRx-0\n 46: 1 2 PCI-MSI-edge\n"
	in, err = ParseInterrupts(old)
	if err != nil || !slices.Equal(in.CPUs, []int{0, 2}) || in.Find(45).Actions != "eth0-TxRx-0" || in.Find(46).Chip != "PCI-MSI-edge" {
		t.Errorf("old layout: %+v, %v", in, err)
	}
	bad := map[string]string{
		"empty":              "",
		"header not CPU":     "  CPU0 GPU1\n",
		"header unordered":   "  CPU1 CPU0\n",
		"count not number":   "  CPU0 CPU1\n 1: 5 x chip 1-edge name\n",
		"too few counts":     "  CPU0 CPU1\n 1: 5\n",
		"negative count":     "  CPU0\n 1: -5 chip\n",
		"repeated irq":       "  CPU0\n 1: 5 chip\n 1: 6 chip\n",
		"no colon":           "  CPU0\n garbage line\n",
		"count overflow":     "  CPU0\n 1: 99999999999999999999999 chip\n",
		"huge cpu in header": "  CPU99999\n",
	}
	for name, text := range bad {
		if got, err := ParseInterrupts(text); !errors.Is(err, ErrBadInterrupts) {
			t.Errorf("%s: %+v, %v; want ErrBadInterrupts", name, got, err)
		}
	}
	if _, err := ParseInterrupts(" CPU0\n" + strings.Repeat("\n", interruptLinesMax)); !errors.Is(err, ErrBadInterrupts) {
		t.Errorf("too many lines: %v", err)
	}
}

func TestQueueIndex(t *testing.T) {
	cases := map[string]int{
		"eth0-TxRx-3": 3, "virtio2-input.0": 0, "nvme0q12": 12, "mlx5_comp7@pci:0000:3b:00.0": 7,
		"i40e-eth0-TxRx-15": 15, "gve-ntfy-blk4@pci:0000:00:04.0": 4,
	}
	for name, want := range cases {
		if got, ok := queueIndex(name); !ok || got != want {
			t.Errorf("queueIndex(%q) = %d, %v; want %d", name, got, ok, want)
		}
	}
	if _, ok := queueIndex("eth"); ok {
		t.Error("queueIndex(eth) found a number")
	}
}

// FuzzParseInterrupts: any text parses or is refused with ErrBadInterrupts; a parsed table
// has one count per CPU in every row and prints (formatInterrupts) as a table that parses
// back the same. The seeds are the heads of the fixture hosts' tables (header, a few
// numbered rows, the named ones): whole 10 KiB tables made every new input a 10 KiB one,
// and minimizing those took the whole -fuzztime (docs/testing.md, "Fuzz targets").
func FuzzParseInterrupts(f *testing.F) {
	for _, host := range fixtureHosts {
		real, _ := fixtureRoots(host).Resolve("/proc/interrupts")
		data, err := os.ReadFile(real)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(interruptsHead(string(data), 4))
	}
	f.Add("  CPU0 CPU1\n 1: 5\n")
	f.Add("")
	f.Fuzz(func(t *testing.T, text string) {
		in, err := ParseInterrupts(text)
		if err != nil {
			if !errors.Is(err, ErrBadInterrupts) {
				t.Fatalf("error %v is not ErrBadInterrupts", err)
			}
			return
		}
		for _, irq := range in.IRQs {
			if len(irq.Counts) != len(in.CPUs) {
				t.Fatalf("irq %d has %d counts for %d CPUs", irq.Number, len(irq.Counts), len(in.CPUs))
			}
		}
		printed := formatInterrupts(in)
		again, err := ParseInterrupts(printed)
		if err != nil || !reflect.DeepEqual(again, in) {
			t.Fatalf("%q parsed as %+v, prints as %q, which parses as %+v, %v", text, in, printed, again, err)
		}
	})
}

// interruptsHead is the header of a /proc/interrupts table, its first rows numbered rows
// and all the named ones (NMI, LOC, ...).
func interruptsHead(table string, rows int) string {
	lines := strings.Split(table, "\n")
	out := []string{lines[0]}
	for _, line := range lines[1:] {
		label, _, _ := strings.Cut(line, ":")
		_, err := strconv.Atoi(strings.TrimSpace(label))
		if err != nil || rows > 0 {
			out = append(out, line)
		}
		if err == nil {
			rows--
		}
	}
	return strings.Join(out, "\n")
}

// formatInterrupts prints in as /proc/interrupts does (modern layout, "-" for the hwirq).
func formatInterrupts(in *Interrupts) string {
	var b strings.Builder
	for _, cpu := range in.CPUs {
		fmt.Fprintf(&b, " CPU%d", cpu)
	}
	b.WriteString("\n")
	for _, irq := range in.IRQs {
		fmt.Fprintf(&b, "%d:", irq.Number)
		for _, count := range irq.Counts {
			fmt.Fprintf(&b, " %d", count)
		}
		switch {
		case irq.Actions != "":
			fmt.Fprintf(&b, " %s - %s", irq.Chip, irq.Actions)
		case irq.Chip != "":
			fmt.Fprintf(&b, " %s", irq.Chip)
		}
		b.WriteString("\n")
	}
	return b.String()
}

func FuzzParseCPUList(f *testing.F) {
	for _, seed := range []string{"0-3,8", "", "(null)", "3-1", "0-8191", "1,,2"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, text string) {
		cpus, err := ParseCPUList(text)
		if err != nil {
			if !errors.Is(err, ErrBadCPUList) {
				t.Fatalf("error %v is not ErrBadCPUList", err)
			}
			return
		}
		again, err := ParseCPUList(FormatCPUList(cpus))
		if err != nil || !slices.Equal(again, cpus) {
			t.Fatalf("%q → %v → %q → %v, %v", text, cpus, FormatCPUList(cpus), again, err)
		}
	})
}

func FuzzParseCPUMask(f *testing.F) {
	for _, seed := range []string{"0", "00000000,00000003", "1,00000000", "zz", ","} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, text string) {
		cpus, err := ParseCPUMask(text)
		if err != nil {
			return
		}
		again, err := ParseCPUMask(FormatCPUMask(cpus))
		if err != nil || !slices.Equal(again, cpus) {
			t.Fatalf("%q → %v → %q → %v, %v", text, cpus, FormatCPUMask(cpus), again, err)
		}
	})
}

// FuzzDecodePlan: any bytes decode to a plan that validates or are refused with an
// error; a decoded plan writes only where checkWritable allows, prints as text, and
// written back as a plan file (WriteJSON) decodes to the same plan. The seeds are the
// golden plans cut to one item of each kind (plannedSeed): whole 7-20 KiB plans made every
// new input that size, and minimizing those took the whole -fuzztime.
func FuzzDecodePlan(f *testing.F) {
	for _, name := range []string{"vm2-shared", "isol8-dedicated", "numa2-datadir"} {
		data, err := os.ReadFile("testdata/golden/" + name + ".json")
		if err != nil {
			f.Fatal(err)
		}
		f.Add(plannedSeed(f, data))
	}
	f.Add([]byte(`{"version":1,"irq_mode":"shared","shard_cpus":[0],"items":[{"action":"set","path":"/etc/x","proposed":"1"}]}`))
	f.Add([]byte(`{`))
	f.Fuzz(func(t *testing.T, data []byte) {
		plan, err := DecodePlan(data)
		if err != nil {
			if !errors.Is(err, ErrBadPlan) && !errors.Is(err, ErrBadPath) {
				t.Fatalf("error %v is neither ErrBadPlan nor ErrBadPath", err)
			}
			return
		}
		for _, item := range plan.Changes() {
			if err := checkWritable(item.Path); err != nil {
				t.Fatalf("decoded plan writes %q: %v", item.Path, err)
			}
		}
		if len(plan.ShardCPUs) == 0 {
			t.Fatal("decoded plan without shards")
		}
		if err := plan.WriteText(io.Discard, true); err != nil {
			t.Fatal(err)
		}
		var file bytes.Buffer
		if err := plan.WriteJSON(&file); err != nil {
			t.Fatal(err)
		}
		again, err := DecodePlan(file.Bytes())
		if err != nil || !reflect.DeepEqual(again, plan) {
			t.Fatalf("%q decoded as %+v, writes as %q, which decodes as %+v, %v", data, plan, file.Bytes(), again, err)
		}
	})
}

// plannedSeed is a golden plan file cut to its first item of each kind and action, short
// explanations and summary, in compact JSON.
func plannedSeed(t testing.TB, golden []byte) []byte {
	t.Helper()
	plan, err := DecodePlan(golden)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	items := plan.Items[:0]
	for _, item := range plan.Items {
		if key := item.Kind + string(item.Action); !seen[key] {
			seen[key] = true
			item.Why = item.Why[:min(len(item.Why), 20)]
			items = append(items, item)
		}
	}
	plan.Items, plan.Summary = items, plan.Summary[:min(len(plan.Summary), 1)]
	data, err := json.Marshal(plan)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func BenchmarkParseInterrupts(b *testing.B) {
	// A 64-CPU host with 512 IRQs: ~350 KiB of text.
	var rows []irqRow
	for i := range 512 {
		rows = append(rows, irqRow{number: 100 + i, hotCPU: i % 64, count: 123456, chip: "IR-PCI-MSIX-0000:81:00.0", hwirq: "1-edge", name: "mlx5_comp1@pci:0000:81:00.0", affinity: "1"})
	}
	text := interruptsText(64, rows)
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseInterrupts(text); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDiscoverAndPlan(b *testing.B) {
	roots := fixtureRoots("numa2")
	b.ReportAllocs()
	for b.Loop() {
		topo, err := Discover(DiscoverOptions{Roots: roots})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := BuildPlan(topo, PlanOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}
