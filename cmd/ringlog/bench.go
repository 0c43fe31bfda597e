package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime"
	"sort"
	"time"

	"github.com/ringlog/ringlog/bench"
	"github.com/ringlog/ringlog/bench/disk"
	"github.com/ringlog/ringlog/ring"
)

func init() {
	register("bench", "benchmarks: disk, run, compare, peers, loopback, pingpong, single, floor, catchup", runBench)
}

type benchCommand struct {
	summary string
	run     func(args []string) error
}

var benchCommands = map[string]benchCommand{}

func init() {
	benchCommands["disk"] = benchCommand{"Kafka's linear-vs-random disk experiment through ring/", benchDisk}
	benchCommands["run"] = benchCommand{"run a workload file against a broker (or the mem driver)", benchRun}
	benchCommands["compare"] = benchCommand{"side-by-side table of two result files, with ratios", benchCompare}
	benchCommands["loopback"] = benchCommand{"loopback TCP bandwidth probe (iperf3-style, in Go)", benchLoopback}
	benchCommands["peers"] = benchCommand{"run a workload on ringlog and on a peer (NATS JetStream or RabbitMQ Streams), report our/peer ratios", benchPeers}
}

// newBenchFlagSet is a bench subcommand's flag set; synopsis is what follows its name in
// the usage line. Its errors and -h usage go to usageOutput (stderr), so that
// completionSpec reads its flags from -h as for the others; -h is no failure (runBench).
func newBenchFlagSet(name, synopsis string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(usageOutput)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: ringlog %s %s\n\nflags:\n", name, synopsis)
		fs.PrintDefaults()
	}
	return fs
}

// benchBrokerFlag registers a bench subcommand's --broker: one address, by default the
// broker every other command uses (defaultBroker).
func benchBrokerFlag(fs *flag.FlagSet) *string {
	var broker string
	benchBrokerVar(fs, &broker)
	return &broker
}

func benchBrokerVar(fs *flag.FlagSet, p *string) {
	fs.StringVar(p, "broker", defaultBroker(), "broker address HOST:PORT, as for every command: a --broker before the command, else $"+brokerEnv+", else "+brokerDefault+" (with --driver kgo: a Kafka listener, ringlogd --kafka-listen)")
}

func benchUsage() {
	fmt.Fprintln(os.Stderr, "usage: ringlog bench SUBCOMMAND [FLAGS]\n\nsubcommands:")
	names := make([]string, 0, len(benchCommands))
	for name := range benchCommands {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		fmt.Fprintf(os.Stderr, "  %-9s %s\n", name, benchCommands[name].summary)
	}
}

func runBench(args []string) error {
	if len(args) == 0 {
		benchUsage()
		return errors.New("missing subcommand") // as the other commands with subcommands
	}
	if args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		benchUsage()
		return nil
	}
	sub, ok := benchCommands[args[0]]
	if !ok {
		benchUsage()
		return fmt.Errorf("unknown bench subcommand %q", args[0])
	}
	if err := sub.run(args[1:]); !errors.Is(err, flag.ErrHelp) {
		return err
	}
	return nil
}

// Defaults of `ringlog bench disk`: the full matrix (32 cells) finishes in about a minute and
// a half on a 2-core VM; --quick in about fifteen seconds.
const (
	diskSizeDefault      = "1GiB"
	diskSizeQuick        = "256MiB"
	diskCellTimeDefault  = 2 * time.Second
	diskCellTimeQuick    = 300 * time.Millisecond
	diskSizeMinimumBytes = 2 << 20
)

func benchDisk(args []string) error {
	fs := newBenchFlagSet("bench disk", "[FLAGS]")
	dir := fs.String("dir", ".", "directory for the scratch file (use the broker's data disk)")
	size := fs.String("size", "", "scratch file size: the span random offsets cover and each cell's byte cap (default "+diskSizeDefault+", --quick "+diskSizeQuick+")")
	cellTime := fs.Duration("cell-time", 0, "time cap per cell (default 2s, --quick 300ms)")
	quick := fs.Bool("quick", false, "small file and short cells, for a smoke run")
	jsonOut := fs.String("json", "", "also write the report as JSON to this file")
	backend := fs.String("backend", "auto", "I/O path: auto (io_uring reactor, syscall fallback), uring, syscall, threads")
	if err := parseBenchArgs(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	sizeText, cell := diskSizeDefault, diskCellTimeDefault
	if *quick {
		sizeText, cell = diskSizeQuick, diskCellTimeQuick
	}
	if *size != "" {
		sizeText = *size
	}
	if *cellTime != 0 {
		cell = *cellTime
	}
	sizeBytes, err := bench.ParseBytes(sizeText)
	if err != nil {
		return fmt.Errorf("--size: %w", err)
	}
	if sizeBytes < diskSizeMinimumBytes || sizeBytes%4096 != 0 {
		return fmt.Errorf("--size %s: must be a multiple of 4KiB and at least 2MiB", sizeText)
	}
	cfg := disk.Config{
		Dir: *dir, FileBytes: sizeBytes, CellTime: cell,
	}
	progress := bench.NewProgressLine(os.Stderr)
	cfg.Progress = func(done, total int, c disk.Cell) {
		progress.Printf("[%2d/%d] %s", done+1, total, c)
	}
	// The reactor belongs to this thread: every op of the run is submitted from here.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	closeBackends, err := configureDiskBackends(&cfg, *backend)
	if err != nil {
		return err
	}
	defer closeBackends()
	report, err := disk.Run(cfg)
	progress.Done()
	if err != nil {
		return err
	}
	if err := disk.WriteTable(os.Stdout, report); err != nil {
		return err
	}
	if *jsonOut != "" {
		data, err := json.MarshalIndent(report, "", "  ")
		if err != nil {
			return fmt.Errorf("encode report: %w", err)
		}
		if err := os.WriteFile(*jsonOut, append(data, '\n'), 0o644); err != nil {
			return fmt.Errorf("write report: %w", err)
		}
	}
	return nil
}

// configureDiskBackends picks the I/O backends: by default a ring.Reactor (io_uring, or
// ring's syscall backend where io_uring is refused) for both queue depths; "threads" runs
// qd1 as plain syscalls and qd64 as 64 threads, for comparison. The table's backend column
// says which ran. The caller must hold its OS thread locked.
func configureDiskBackends(cfg *disk.Config, backend string) (func(), error) {
	switch backend {
	case "threads":
		return func() {}, nil
	case "auto", "uring", "syscall":
	default:
		return nil, fmt.Errorf("--backend %q: want auto, uring, syscall or threads", backend)
	}
	reactor, err := ring.NewReactor(ring.Config{Entries: 256, Backend: backend})
	if err != nil {
		return nil, fmt.Errorf("--backend %s: %w", backend, err)
	}
	cfg.IO, cfg.IOName, cfg.Async = reactor, reactor.Backend(), disk.ReactorAsync{Reactor: reactor}
	return func() { _ = reactor.Close() }, nil
}
