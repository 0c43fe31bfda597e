package tuning

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// ErrBadPlan reports a plan file that does not decode or fails validation.
var ErrBadPlan = errors.New("bad plan")

const (
	planFileBytesMax   = 4 << 20 // a 256-CPU host with 512 IRQs makes a ~300 KiB plan
	planItemsMax       = 1 << 16
	planValueBytesMax  = 4096
	planStringBytesMax = 4096
)

// writablePrefixes are the only places a plan may write. A plan file is input; this keeps
// a hostile or mistyped one from making a root process write anywhere else.
var writablePrefixes = []string{
	"/proc/sys/vm/", "/proc/sys/net/", "/proc/irq/",
	"/sys/block/", "/sys/class/net/",
	"/sys/kernel/mm/transparent_hugepage/",
	"/sys/devices/system/clocksource/", "/sys/devices/system/cpu/",
	"/sys/module/haltpoll/parameters/",
}

// WriteJSON writes the plan as indented JSON (the plan file format).
func (p *Plan) WriteJSON(w io.Writer) error {
	data, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return fmt.Errorf("encode plan: %w", err)
	}
	_, err = w.Write(append(data, '\n'))
	return err
}

// LoadPlan reads a plan file written by `ringlog tune plan --format json` and validates it.
func LoadPlan(path string) (*Plan, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("load plan: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, planFileBytesMax+1))
	if err != nil {
		return nil, fmt.Errorf("load plan %s: %w", path, err)
	}
	plan, err := DecodePlan(data)
	if err != nil {
		return nil, fmt.Errorf("load plan %s: %w", path, err)
	}
	return plan, nil
}

// DecodePlan decodes and validates a plan file's bytes.
func DecodePlan(data []byte) (*Plan, error) {
	if len(data) > planFileBytesMax {
		return nil, fmt.Errorf("%w: %d bytes, more than %d", ErrBadPlan, len(data), planFileBytesMax)
	}
	decoder := json.NewDecoder(bytes.NewReader(data))
	decoder.DisallowUnknownFields()
	var plan Plan
	if err := decoder.Decode(&plan); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadPlan, err)
	}
	if decoder.More() {
		return nil, fmt.Errorf("%w: trailing data after the plan object", ErrBadPlan)
	}
	if err := plan.Validate(); err != nil {
		return nil, err
	}
	return &plan, nil
}

// Validate checks a plan's shape: version, shard CPUs, and that every write stays inside
// the tunable parts of /sys and /proc.
func (p *Plan) Validate() error {
	if p.Version != PlanVersion {
		return fmt.Errorf("%w: version %d, this ringlog reads version %d", ErrBadPlan, p.Version, PlanVersion)
	}
	if _, err := ParseIRQMode(string(p.IRQMode)); err != nil {
		return fmt.Errorf("%w: %v", ErrBadPlan, err)
	}
	if len(p.ShardCPUs) == 0 || len(p.ShardCPUs) > shardsMax {
		return fmt.Errorf("%w: %d shard CPUs (want 1..%d)", ErrBadPlan, len(p.ShardCPUs), shardsMax)
	}
	seen := map[int]bool{}
	for _, cpu := range p.ShardCPUs {
		if cpu < 0 || cpu > cpuIDMax || seen[cpu] {
			return fmt.Errorf("%w: shard cpu %d out of range or repeated", ErrBadPlan, cpu)
		}
		seen[cpu] = true
	}
	if len(p.ShardNodes) != 0 && len(p.ShardNodes) != len(p.ShardCPUs) {
		return fmt.Errorf("%w: %d shard nodes for %d shard CPUs", ErrBadPlan, len(p.ShardNodes), len(p.ShardCPUs))
	}
	if len(p.Items) > planItemsMax {
		return fmt.Errorf("%w: %d items, more than %d", ErrBadPlan, len(p.Items), planItemsMax)
	}
	for i, item := range p.Items {
		if err := item.validate(); err != nil {
			return fmt.Errorf("%w: item %d (%s): %w", ErrBadPlan, i, clip(item.Target), err)
		}
	}
	return nil
}

func (item Item) validate() error {
	switch item.Action {
	case ActionSet, ActionKeep, ActionAdvise:
	default:
		return fmt.Errorf("action %q", clip(string(item.Action)))
	}
	for _, s := range []string{item.Kind, item.Target, item.Current, item.Why} {
		if len(s) > planStringBytesMax {
			return fmt.Errorf("field of %d bytes, more than %d", len(s), planStringBytesMax)
		}
	}
	if item.Action != ActionSet {
		return nil
	}
	if err := checkWritable(item.Path); err != nil {
		return err
	}
	if len(item.Proposed) > planValueBytesMax || strings.ContainsAny(item.Proposed, "\x00\n") {
		return fmt.Errorf("proposed value must be one line under %d bytes", planValueBytesMax)
	}
	return nil
}

func checkWritable(logical string) error {
	if err := checkLogical(logical); err != nil {
		return err
	}
	for _, prefix := range writablePrefixes {
		if strings.HasPrefix(logical, prefix) {
			return nil
		}
	}
	return fmt.Errorf("%w: %s is not a tunable path", ErrBadPath, logical)
}

// WriteText writes the plan for humans: the host summary, then each item with its action,
// path, current → proposed, and why. verbose false leaves out items already as proposed.
func (p *Plan) WriteText(w io.Writer, verbose bool) error {
	var b strings.Builder
	for _, line := range p.Summary {
		b.WriteString(line + "\n")
	}
	changes, advice, kept := 0, 0, 0
	for _, item := range p.Items {
		switch item.Action {
		case ActionSet:
			changes++
		case ActionAdvise:
			advice++
		default:
			kept++
		}
	}
	fmt.Fprintf(&b, "%d changes, %d advice, %d already as proposed\n", changes, advice, kept)
	for _, item := range p.Items {
		if item.Action == ActionKeep && !verbose {
			continue
		}
		mark := string(item.Action)
		if item.Important && item.Action != ActionKeep {
			mark += "!"
		}
		fmt.Fprintf(&b, "\n%-7s %-7s %s\n", mark, item.Kind, item.Target)
		if item.Path != "" {
			fmt.Fprintf(&b, "        %s\n", item.Path)
		}
		fmt.Fprintf(&b, "        current: %s\n        proposed: %s\n        why: %s\n", orNone(item.Current), orNone(item.Proposed), item.Why)
	}
	_, err := io.WriteString(w, b.String())
	return err
}
