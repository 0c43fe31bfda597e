package tuning

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ErrBadInterrupts reports a /proc/interrupts that does not parse.
var ErrBadInterrupts = errors.New("malformed /proc/interrupts")

// interruptLinesMax bounds the rows we accept from /proc/interrupts. Large hosts have a few
// thousand; 65536 is far beyond any real table.
const interruptLinesMax = 1 << 16

// IRQ is one numbered row of /proc/interrupts.
type IRQ struct {
	Number int `json:"number"`
	// Counts holds one count per column of the header, in header order.
	Counts []uint64 `json:"-"`
	// Chip is the interrupt controller ("PCI-MSIX-0000:3b:00.0", "IR-PCI-MSI", "IO-APIC").
	Chip string `json:"chip"`
	// Actions is the name the driver gave the IRQ ("nvme0q3", "mlx5_comp3@pci:0000:3b:00.0",
	// "virtio2-input.0"); several handlers sharing a line are joined with ", ".
	Actions string `json:"actions"`
}

// Interrupts is the parsed /proc/interrupts: the CPU of each count column and the numbered
// rows (named rows such as NMI and LOC are not kept).
type Interrupts struct {
	CPUs []int
	IRQs []IRQ
}

// Find returns the row of IRQ number, or nil.
func (in *Interrupts) Find(number int) *IRQ {
	if in == nil {
		return nil
	}
	for i := range in.IRQs {
		if in.IRQs[i].Number == number {
			return &in.IRQs[i]
		}
	}
	return nil
}

// ParseInterrupts parses the text of /proc/interrupts. It accepts both the modern layout
// ("PCI-MSIX-0000:00:03.0   1-edge      virtio2-input.0") and the older one
// ("PCI-MSI-edge  eth0-TxRx-0"). Any numbered row whose counts do not parse is an error that
// names the line.
func ParseInterrupts(text string) (*Interrupts, error) {
	if len(text) > fileBytesMax {
		return nil, fmt.Errorf("%w: %d bytes", ErrBadInterrupts, len(text))
	}
	lines := strings.Split(text, "\n")
	if len(lines) > interruptLinesMax {
		return nil, fmt.Errorf("%w: %d lines, more than %d", ErrBadInterrupts, len(lines), interruptLinesMax)
	}
	header := strings.Fields(lines[0])
	if len(header) == 0 {
		return nil, fmt.Errorf("%w: no CPU header line", ErrBadInterrupts)
	}
	if len(header) > cpuIDMax+1 {
		return nil, fmt.Errorf("%w: %d CPU columns", ErrBadInterrupts, len(header))
	}
	result := &Interrupts{CPUs: make([]int, 0, len(header))}
	for _, column := range header {
		digits, ok := strings.CutPrefix(column, "CPU")
		if !ok {
			return nil, fmt.Errorf("%w: line 1: header column %q is not CPUn", ErrBadInterrupts, column)
		}
		cpu, err := parseCPUID(digits)
		if err != nil {
			return nil, fmt.Errorf("%w: line 1: header column %q: %v", ErrBadInterrupts, column, err)
		}
		if n := len(result.CPUs); n > 0 && cpu <= result.CPUs[n-1] {
			return nil, fmt.Errorf("%w: line 1: header column %q out of order", ErrBadInterrupts, column)
		}
		result.CPUs = append(result.CPUs, cpu)
	}
	seen := map[int]bool{}
	for i, line := range lines[1:] {
		lineNumber := i + 2
		label, rest, found := strings.Cut(line, ":")
		label = strings.TrimSpace(label)
		if !found {
			if label == "" {
				continue // trailing blank line
			}
			return nil, fmt.Errorf("%w: line %d: no ':' in %q", ErrBadInterrupts, lineNumber, clip(line))
		}
		number, err := strconv.Atoi(label)
		if err != nil {
			continue // NMI, LOC, ERR, MIS and friends: per-CPU totals we do not plan with
		}
		if number < 0 || seen[number] {
			return nil, fmt.Errorf("%w: line %d: IRQ %q negative or repeated", ErrBadInterrupts, lineNumber, label)
		}
		seen[number] = true
		irq, err := parseIRQRow(number, rest, len(result.CPUs))
		if err != nil {
			return nil, fmt.Errorf("%w: line %d: %v", ErrBadInterrupts, lineNumber, err)
		}
		result.IRQs = append(result.IRQs, irq)
	}
	return result, nil
}

func parseIRQRow(number int, rest string, columns int) (IRQ, error) {
	fields := strings.Fields(rest)
	if len(fields) < columns {
		return IRQ{}, fmt.Errorf("IRQ %d has %d fields, want at least %d counts", number, len(fields), columns)
	}
	irq := IRQ{Number: number, Counts: make([]uint64, columns)}
	for i := range columns {
		count, err := strconv.ParseUint(fields[i], 10, 64)
		if err != nil {
			return IRQ{}, fmt.Errorf("IRQ %d count %d is %q, not a number", number, i, clip(fields[i]))
		}
		irq.Counts[i] = count
	}
	tail := fields[columns:]
	switch {
	case len(tail) >= 3:
		irq.Chip, irq.Actions = tail[0], strings.Join(tail[2:], " ")
	case len(tail) == 2:
		irq.Chip, irq.Actions = tail[0], tail[1]
	case len(tail) == 1:
		irq.Chip = tail[0]
	}
	return irq, nil
}

// clip shortens a fragment of bad input for an error message.
func clip(s string) string {
	const clipBytesMax = 60
	if len(s) > clipBytesMax {
		return s[:clipBytesMax] + "..."
	}
	return s
}

// queueIndex extracts the queue number from an IRQ action name: the last run of digits
// ("eth0-TxRx-3" → 3, "virtio2-input.0" → 0, "nvme0q5" → 5, "mlx5_comp7@pci:0000:3b:00.0" → 7).
// For names with an "@" only the part before it counts. ok is false when there is none.
func queueIndex(action string) (int, bool) {
	name, _, _ := strings.Cut(action, "@")
	end := len(name)
	for end > 0 && (name[end-1] < '0' || name[end-1] > '9') {
		end--
	}
	start := end
	for start > 0 && name[start-1] >= '0' && name[start-1] <= '9' {
		start--
	}
	if start == end || end-start > 6 {
		return 0, false
	}
	n, err := strconv.Atoi(name[start:end])
	return n, err == nil
}
