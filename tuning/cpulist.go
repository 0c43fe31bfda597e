package tuning

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// cpuIDMax bounds every CPU number parsed from a list or mask. The kernel's NR_CPUS tops out
// at 8192 on x86-64; anything above is malformed input, and the bound keeps a hostile range
// such as "0-4000000000" from allocating.
const cpuIDMax = 8191

// ErrBadCPUList reports a CPU list or mask that does not parse.
var ErrBadCPUList = errors.New("bad cpu list")

// ParseCPUList parses the kernel's CPU list format ("0-3,8,10-11", as in
// /sys/devices/system/cpu/online, isolcpus= or `taskset -c`). It returns the CPUs sorted and
// without duplicates. The empty string and the kernel's "(null)" give an empty list.
func ParseCPUList(s string) ([]int, error) {
	s = strings.TrimSpace(s)
	if s == "" || s == "(null)" {
		return nil, nil
	}
	var cpus []int
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			return nil, fmt.Errorf("%w %q: empty element", ErrBadCPUList, s)
		}
		low, high, isRange := strings.Cut(part, "-")
		first, err := parseCPUID(low)
		if err != nil {
			return nil, fmt.Errorf("%w %q: %v", ErrBadCPUList, s, err)
		}
		last := first
		if isRange {
			// The kernel also accepts "0-15:2/4" (stride); we do not need it and reject it
			// rather than guess.
			if last, err = parseCPUID(high); err != nil {
				return nil, fmt.Errorf("%w %q: %v", ErrBadCPUList, s, err)
			}
			if last < first {
				return nil, fmt.Errorf("%w %q: range %d-%d runs backwards", ErrBadCPUList, s, first, last)
			}
		}
		for cpu := first; cpu <= last; cpu++ {
			cpus = append(cpus, cpu)
		}
	}
	slices.Sort(cpus)
	return slices.Compact(cpus), nil
}

func parseCPUID(s string) (int, error) {
	if s == "" || len(s) > 5 {
		return 0, fmt.Errorf("cpu number %q", s)
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || n > cpuIDMax || s[0] == '+' {
		return 0, fmt.Errorf("cpu number %q (want 0..%d)", s, cpuIDMax)
	}
	return n, nil
}

// FormatCPUList renders CPUs in the kernel's list format with ranges ("0-3,8"). The input
// need not be sorted; duplicates are dropped. An empty list renders as "".
func FormatCPUList(cpus []int) string {
	sorted := slices.Clone(cpus)
	slices.Sort(sorted)
	sorted = slices.Compact(sorted)
	var b strings.Builder
	for i := 0; i < len(sorted); {
		j := i
		for j+1 < len(sorted) && sorted[j+1] == sorted[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(sorted[i]))
		if j > i {
			b.WriteByte('-')
			b.WriteString(strconv.Itoa(sorted[j]))
		}
		i = j + 1
	}
	return b.String()
}

// ParseCPUMask parses the kernel's hexadecimal CPU mask format as in
// /proc/irq/N/smp_affinity and /sys/class/net/DEV/queues/rx-N/rps_cpus: 32-bit groups
// separated by commas, most significant first ("00000000,0000000f").
func ParseCPUMask(s string) ([]int, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, fmt.Errorf("%w: empty mask", ErrBadCPUList)
	}
	groups := strings.Split(s, ",")
	if len(groups) > (cpuIDMax+1)/32 {
		return nil, fmt.Errorf("%w %q: %d mask groups, more than %d cpus", ErrBadCPUList, s, len(groups), cpuIDMax+1)
	}
	var cpus []int
	for i, group := range groups {
		if group == "" || len(group) > 8 {
			return nil, fmt.Errorf("%w %q: mask group %q", ErrBadCPUList, s, group)
		}
		bits, err := strconv.ParseUint(group, 16, 32)
		if err != nil {
			return nil, fmt.Errorf("%w %q: mask group %q", ErrBadCPUList, s, group)
		}
		base := (len(groups) - 1 - i) * 32
		for bit := range 32 {
			if bits&(1<<bit) != 0 {
				cpus = append(cpus, base+bit)
			}
		}
	}
	slices.Sort(cpus)
	return cpus, nil
}

// FormatCPUMask renders CPUs as the shortest kernel hex mask ("0" for none, "3" for CPUs
// 0-1, "1,00000000" for CPU 32). The kernel accepts this form on write.
func FormatCPUMask(cpus []int) string {
	if len(cpus) == 0 {
		return "0"
	}
	top := slices.Max(cpus)
	groups := make([]uint32, top/32+1)
	for _, cpu := range cpus {
		groups[cpu/32] |= 1 << (cpu % 32)
	}
	var b strings.Builder
	for i := len(groups) - 1; i >= 0; i-- {
		if i == len(groups)-1 {
			fmt.Fprintf(&b, "%x", groups[i])
		} else {
			fmt.Fprintf(&b, ",%08x", groups[i])
		}
	}
	return b.String()
}
