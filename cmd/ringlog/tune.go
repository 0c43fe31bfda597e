package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ringlog/ringlog/tuning"
)

func init() {
	register("tune", "check, plan and apply host tuning (CPU/NUMA/IRQ affinity, disks, sysctls)", func(args []string) error {
		return runTune(args, os.Stdout)
	})
}

const tuneUsage = `usage: ringlog tune COMMAND [FLAGS]

commands:
  check     report what is off; exit status 1 when an important item is off
  plan      print the plan (--format text|json; json is the file --tune-plan and apply --plan read)
  apply     show what would change (dry run); --yes writes, after saving a revert script (needs root)
  show      print what discovery found (CPUs, nodes, NICs, disks, IRQs, settings) as JSON
  snapshot  copy the /sys and /proc files discovery reads into --out DIR (for bug reports, fixtures)

common flags: --shards N|all --irq-mode dedicated|shared --cpus LIST --nic NAME[,NAME]
              --disk NAME[,NAME] --data-dir DIR --sys-root DIR --proc-root DIR
`

// errTuneCheckFailed makes `ringlog tune check` exit non-zero.
var errTuneCheckFailed = errors.New("important items are not as proposed")

type tuneFlags struct {
	set      *flag.FlagSet
	shards   string
	irqMode  string
	cpus     string
	nics     string
	disks    string
	dataDir  string
	sysRoot  string
	procRoot string
}

func newTuneFlags(name string, output io.Writer) *tuneFlags {
	f := &tuneFlags{set: flag.NewFlagSet("tune "+name, flag.ContinueOnError)}
	f.set.SetOutput(output)
	f.set.Usage = func() { // -h is no failure: runTune
		fmt.Fprintf(f.set.Output(), "usage: ringlog tune %s [FLAGS]\n\nflags:\n", name)
		f.set.PrintDefaults()
	}
	f.set.StringVar(&f.shards, "shards", "all", "number of shards, or all (one per physical core available to shards)")
	f.set.StringVar(&f.irqMode, "irq-mode", "dedicated", "dedicated (NIC IRQs on CPUs without shards) or shared (on the shard serving the queue)")
	f.set.StringVar(&f.cpus, "cpus", "", "shard CPUs to use instead of choosing (kernel list format, e.g. 2-5,8)")
	f.set.StringVar(&f.nics, "nic", "", "comma-separated NICs to tune (default: every physical NIC)")
	f.set.StringVar(&f.disks, "disk", "", "comma-separated block devices to tune (default: every physical disk)")
	f.set.StringVar(&f.dataDir, "data-dir", "", "the broker's data directory: tune only the disk holding it, prefer its NUMA node, advise on its file system")
	f.set.StringVar(&f.sysRoot, "sys-root", "/sys", "where sysfs is (a snapshot directory's sys/ for testing)")
	f.set.StringVar(&f.procRoot, "proc-root", "/proc", "where procfs is")
	return f
}

func (f *tuneFlags) roots() tuning.Roots { return tuning.Roots{Sys: f.sysRoot, Proc: f.procRoot} }

func (f *tuneFlags) planOptions() (tuning.PlanOptions, error) {
	var opts tuning.PlanOptions
	var err error
	if opts.IRQMode, err = tuning.ParseIRQMode(f.irqMode); err != nil {
		return opts, err
	}
	if f.shards != "all" {
		n, err := strconv.Atoi(f.shards)
		if err != nil || n <= 0 {
			return opts, fmt.Errorf("--shards %q: want a positive number or all", f.shards)
		}
		opts.Shards = n
	}
	if f.cpus != "" {
		if opts.CPUs, err = tuning.ParseCPUList(f.cpus); err != nil {
			return opts, fmt.Errorf("--cpus: %w", err)
		}
	}
	opts.NICs = splitNames(f.nics)
	opts.Disks = splitNames(f.disks)
	if f.dataDir != "" {
		var st unix.Stat_t
		if err := unix.Stat(f.dataDir, &st); err != nil {
			return opts, fmt.Errorf("--data-dir %s: %w", f.dataDir, err)
		}
		opts.DataDevice = fmt.Sprintf("%d:%d", unix.Major(st.Dev), unix.Minor(st.Dev))
	}
	return opts, nil
}

func splitNames(s string) []string {
	var names []string
	for name := range strings.SplitSeq(s, ",") {
		if name = strings.TrimSpace(name); name != "" {
			names = append(names, name)
		}
	}
	return names
}

func (f *tuneFlags) buildPlan() (*tuning.Plan, error) {
	opts, err := f.planOptions()
	if err != nil {
		return nil, err
	}
	topo, err := tuning.Discover(tuning.DiscoverOptions{Roots: f.roots()})
	if err != nil {
		return nil, err
	}
	return tuning.BuildPlan(topo, opts)
}

func runTune(args []string, stdout io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stdout, tuneUsage)
		if len(args) == 0 {
			return errors.New("missing tune command")
		}
		return nil
	}
	run, ok := map[string]func([]string, io.Writer) error{
		"check": tuneCheck, "plan": tunePlan, "apply": tuneApply, "show": tuneShow, "snapshot": tuneSnapshot,
	}[args[0]]
	if !ok {
		return fmt.Errorf("unknown tune command %q (want check, plan, apply, show or snapshot)", args[0])
	}
	if err := run(args[1:], stdout); !errors.Is(err, flag.ErrHelp) {
		return err
	}
	return nil
}

func parseTuneFlags(f *tuneFlags, args []string) error {
	if err := f.set.Parse(args); err != nil {
		return err
	}
	if f.set.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", f.set.Arg(0))
	}
	return nil
}

func tuneCheck(args []string, stdout io.Writer) error {
	f := newTuneFlags("check", stdout)
	if err := parseTuneFlags(f, args); err != nil {
		return err
	}
	plan, err := f.buildPlan()
	if err != nil {
		return err
	}
	if err := plan.WriteText(stdout, false); err != nil {
		return err
	}
	problems := plan.Problems()
	if len(problems) == 0 {
		fmt.Fprintln(stdout, "\ncheck: every important item is as proposed")
		return nil
	}
	fmt.Fprintf(stdout, "\ncheck: %d important items are off (marked !):\n", len(problems))
	for _, item := range problems {
		fmt.Fprintf(stdout, "  %s: %s -> %s\n", item.Target, item.Current, item.Proposed)
	}
	return fmt.Errorf("%d %w", len(problems), errTuneCheckFailed)
}

func tunePlan(args []string, stdout io.Writer) error {
	f := newTuneFlags("plan", stdout)
	format := f.set.String("format", "text", "text or json")
	verbose := f.set.Bool("verbose", false, "text: also list items already as proposed")
	out := f.set.String("out", "", "write the plan to this file instead of standard output")
	if err := parseTuneFlags(f, args); err != nil {
		return err
	}
	if *format != "text" && *format != "json" {
		return fmt.Errorf("--format %q: want text or json", *format)
	}
	plan, err := f.buildPlan()
	if err != nil {
		return err
	}
	w := stdout
	if *out != "" {
		file, err := os.Create(*out)
		if err != nil {
			return err
		}
		defer file.Close()
		w = file
	}
	if *format == "json" {
		err = plan.WriteJSON(w)
	} else {
		err = plan.WriteText(w, *verbose)
	}
	if err != nil {
		return err
	}
	if file, ok := w.(*os.File); ok && file != os.Stdout {
		return file.Close()
	}
	return nil
}

func tuneApply(args []string, stdout io.Writer) error {
	f := newTuneFlags("apply", stdout)
	planPath := f.set.String("plan", "", "apply this plan file (from tune plan --format json) instead of planning now")
	yes := f.set.Bool("yes", false, "really write (default: dry run)")
	revert := f.set.String("revert-script", "", "where to save the revert script (default: ./ringlog-tune-revert-TIME.sh)")
	if err := parseTuneFlags(f, args); err != nil {
		return err
	}
	var plan *tuning.Plan
	var err error
	if *planPath != "" {
		plan, err = tuning.LoadPlan(*planPath)
	} else {
		plan, err = f.buildPlan()
	}
	if err != nil {
		return err
	}
	if *revert == "" {
		*revert = "ringlog-tune-revert-" + time.Now().UTC().Format("20060102T150405Z") + ".sh"
	}
	result, err := tuning.Apply(plan, tuning.ApplyOptions{Roots: f.roots(), Yes: *yes, RevertScript: *revert})
	if result != nil {
		for _, change := range result.Changes {
			fmt.Fprintf(stdout, "%-9s %s: %s -> %s\n", verb(result.Applied, *yes), change.Item.Path,
				strings.Join(strings.Fields(string(change.Original)), " "), change.Item.Proposed)
		}
		for _, item := range plan.Items {
			if item.Action == tuning.ActionAdvise {
				fmt.Fprintf(stdout, "advice    %s: %s -> %s (%s)\n", item.Target, item.Current, item.Proposed, item.Why)
			}
		}
	}
	if err != nil {
		return err
	}
	for _, mismatch := range result.Mismatches {
		fmt.Fprintf(stdout, "warning   %s\n", mismatch)
	}
	switch {
	case len(result.Changes) == 0:
		fmt.Fprintln(stdout, "nothing to change")
	case !*yes:
		fmt.Fprintf(stdout, "dry run: %d changes not written; run with --yes (as root) to write them\n", len(result.Changes))
	default:
		fmt.Fprintf(stdout, "applied %d changes; undo with: sh %s\n", len(result.Changes), result.RevertScript)
	}
	return nil
}

func verb(applied, yes bool) string {
	switch {
	case applied:
		return "changed"
	case yes:
		return "planned"
	}
	return "would set"
}

func tuneShow(args []string, stdout io.Writer) error {
	f := newTuneFlags("show", stdout)
	if err := parseTuneFlags(f, args); err != nil {
		return err
	}
	topo, err := tuning.Discover(tuning.DiscoverOptions{Roots: f.roots()})
	if err != nil {
		return err
	}
	data, err := json.MarshalIndent(topo, "", "  ")
	if err != nil {
		return fmt.Errorf("encode topology: %w", err)
	}
	_, err = stdout.Write(append(data, '\n'))
	return err
}

func tuneSnapshot(args []string, stdout io.Writer) error {
	f := newTuneFlags("snapshot", stdout)
	out := f.set.String("out", "", "directory to write sys/ and proc/ into (must be empty or absent)")
	if err := parseTuneFlags(f, args); err != nil {
		return err
	}
	if *out == "" {
		return errors.New("--out DIR is required")
	}
	topo, err := tuning.Snapshot(tuning.DiscoverOptions{Roots: f.roots()}, *out)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "snapshot of %d CPUs, %d NICs, %d disks written to %s (use --sys-root %s/sys --proc-root %s/proc)\n",
		len(topo.CPUs), len(topo.NICs), len(topo.Disks), *out, *out, *out)
	return nil
}
