// Command peers runs benchmark workloads against peer systems (NATS JetStream, RabbitMQ
// Streams) with the same framework `ringlog bench run` uses. `ringlog bench peers` execs it;
// it lives in its own Go module so that the broker's module never depends on a peer.
//
//	peers run [--driver nats|rabbitmq] [--nats-mapping subjects|streams|best] [--out DIR] [--data-dir DIR] [--duration D] [--warmup D] [--rate N] WORKLOAD
//	peers serve-nats --store DIR [--sync-always]    (the child process the nats driver starts)
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"time"

	"github.com/ringlog/ringlog/bench"
	"github.com/ringlog/ringlog/bench/peers/natsdriver"
	"github.com/ringlog/ringlog/bench/peers/rabbitmqdriver"
)

// runNATSMappings runs the workload on NATS with the mapping asked for, or with both and
// keeps the one that moved more.
func runNATSMappings(ctx context.Context, w bench.Workload, dataDir, mapping string) (*bench.Result, error) {
	var perPartition []bool
	switch mapping {
	case "subjects":
		perPartition = []bool{false}
	case "streams":
		perPartition = []bool{true}
	case "best":
		perPartition = []bool{false, true}
	default:
		return nil, fmt.Errorf("--nats-mapping %q: want subjects, streams or best", mapping)
	}
	var result *bench.Result
	var tried []string
	for _, streams := range perPartition {
		r, err := runNATS(ctx, w, dataDir, streams)
		if err != nil {
			return nil, err
		}
		tried = append(tried, fmt.Sprintf("%s: publish %.1f MB/s, consume %.1f MB/s", r.Driver.StorageMode, r.Publish.MBPerSec, r.Consume.MBPerSec))
		if result == nil || moved(r) > moved(result) {
			result = r
		}
	}
	if len(tried) > 1 {
		result.Notes = append(result.Notes, "NATS mappings tried, the one that moved more kept: "+strings.Join(tried, "; "))
	}
	return result, nil
}

// runRabbitMQ runs the workload on a fresh rabbitmq-server with the stream plugin.
func runRabbitMQ(ctx context.Context, w bench.Workload, dataDir string) (*bench.Result, error) {
	cfg := rabbitmqdriver.Config{DataDir: dataDir, StreamMaxBytes: int64(w.RetentionBytes)}
	if cfg.DataDir == "" {
		dir, err := os.MkdirTemp("", "ringlog-peers-rabbitmq-")
		if err != nil {
			return nil, err
		}
		cfg.DataDir, cfg.Temporary = dir, true
	}
	driver, err := rabbitmqdriver.Open(cfg)
	if err != nil {
		return nil, err
	}
	defer driver.Close()
	return bench.Run(ctx, bench.RunOptions{
		Workload: w, Driver: driver, DataDir: cfg.DataDir, Progress: bench.NewProgressLine(os.Stderr),
		MeasuredMessagesMin: bench.DefaultMeasuredMessagesMin(w), // as ringlog's side of bench peers
	})
}

// runNATS runs the workload on a fresh nats-server with one of the two mappings.
func runNATS(ctx context.Context, w bench.Workload, dataDir string, streamPerPartition bool) (*bench.Result, error) {
	cfg := natsdriver.Config{DataDir: dataDir, SyncAlways: w.Durability == "fsync", StreamPerPartition: streamPerPartition}
	if w.RetentionBytes > 0 {
		// retentionBytes is per partition; a topic's stream holds all of its partitions.
		cfg.StreamMaxBytes = int64(w.RetentionBytes)
		if !streamPerPartition {
			cfg.StreamMaxBytes *= int64(w.PartitionsPerTopic)
		}
	}
	if cfg.DataDir == "" {
		dir, err := os.MkdirTemp("", "ringlog-peers-nats-")
		if err != nil {
			return nil, err
		}
		cfg.DataDir, cfg.Temporary = dir, true
	} else {
		// Each mapping starts from an empty store of its own.
		cfg.DataDir = filepath.Join(cfg.DataDir, fmt.Sprintf("streams-%v", streamPerPartition))
	}
	driver, err := natsdriver.Open(cfg)
	if err != nil {
		return nil, err
	}
	defer driver.Close()
	return bench.Run(ctx, bench.RunOptions{
		Workload: w, Driver: driver, DataDir: cfg.DataDir, Progress: bench.NewProgressLine(os.Stderr),
		MeasuredMessagesMin: bench.DefaultMeasuredMessagesMin(w), // as ringlog's side of bench peers
	})
}

// moved is what a run carried: publish plus consume throughput.
func moved(r *bench.Result) float64 { return r.Publish.MBPerSec + r.Consume.MBPerSec }

// loopbackProbeTime matches `ringlog bench run`'s same-run loopback probe.
const loopbackProbeTime = 2 * time.Second

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: peers run|serve-nats ...")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "run":
		err = run(os.Args[2:])
	case natsdriver.ServeSubcommand:
		err = serveNATS(os.Args[2:])
	default:
		err = fmt.Errorf("unknown subcommand %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "peers %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}

func serveNATS(args []string) error {
	fs := flag.NewFlagSet(natsdriver.ServeSubcommand, flag.ContinueOnError)
	store := fs.String("store", "", "JetStream store directory")
	syncAlways := fs.Bool("sync-always", false, "fsync every message (sync_interval always)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *store == "" {
		return errors.New("--store is required")
	}
	interrupt := make(chan os.Signal, 1)
	signal.Notify(interrupt, os.Interrupt)
	return natsdriver.Serve(*store, *syncAlways, os.Stdin, os.Stdout, interrupt)
}

func run(args []string) error {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	driverName := fs.String("driver", "nats", "peer: nats or rabbitmq (RabbitMQ Streams; needs rabbitmq-server installed)")
	out := fs.String("out", "bench-results", "directory for the JSON result and SVG plots (ringlog bench peers passes its own)")
	dataDir := fs.String("data-dir", "", "peer store directory (default: a temporary directory, removed afterwards)")
	resultPathFile := fs.String("result-path-file", "", "write the result's path here (used by ringlog bench peers)")
	duration := fs.Duration("duration", 0, "override the workload's test duration")
	warmup := fs.Duration("warmup", -1, "override the workload's warm-up")
	rate := fs.Int("rate", -1, "override the workload's producerRate (0 = max)")
	mapping := fs.String("nats-mapping", "best", "nats: subjects (one stream per topic), streams (one per partition) or best (run both, keep the one that moved more)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return errors.New("want exactly one WORKLOAD file")
	}
	w, err := bench.LoadWorkload(fs.Arg(0))
	if err != nil {
		return err
	}
	if *duration > 0 {
		w.Duration = bench.Duration(*duration)
	}
	if *warmup >= 0 {
		w.Warmup = bench.Duration(*warmup)
	}
	if *rate >= 0 {
		w.ProducerRate = *rate
	}
	if err := w.Validate(); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	var result *bench.Result
	switch *driverName {
	case "nats":
		result, err = runNATSMappings(ctx, w, *dataDir, *mapping)
	case "rabbitmq":
		result, err = runRabbitMQ(ctx, w, *dataDir)
	default:
		err = fmt.Errorf("unknown peer %q (have: nats, rabbitmq)", *driverName)
	}
	if err != nil {
		return err
	}
	result.Command = "peers run " + strings.Join(args, " ")
	if w.BacklogSize > 0 {
		// The catch-up target is a share of loopback bandwidth measured in the same run.
		if result.LoopbackMBps, err = bench.LoopbackBandwidth(ctx, loopbackProbeTime, 1); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	prefix := fmt.Sprintf("%s-%s-%s", w.Name, result.Driver.Name, result.Started.Format("20060102T150405"))
	path := filepath.Join(*out, prefix+".json")
	if err := result.WriteJSON(path); err != nil {
		return err
	}
	plots, err := bench.WritePlots(*out, prefix, result)
	if err != nil {
		return err
	}
	if err := bench.WriteSummary(os.Stdout, result); err != nil {
		return err
	}
	fmt.Printf("result: %s\nplots: %s\n", path, strings.Join(plots, " "))
	if *resultPathFile != "" {
		return os.WriteFile(*resultPathFile, []byte(path+"\n"), 0o644)
	}
	return nil
}
