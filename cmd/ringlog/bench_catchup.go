package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"

	"github.com/ringlog/ringlog/bench"
	"golang.org/x/sys/unix"
)

func init() {
	benchCommands["catchup"] = benchCommand{"catch-up read against loopback TCP, alternated in rounds over one backlog", benchCatchUp}
}

// benchCatchUp fills a workload's backlog once and reads it --rounds times, each read beside
// a loopback TCP measurement of the same length (bench.CatchUpRounds), and prints the share
// per round and the medians.
func benchCatchUp(args []string) error {
	fs := newBenchFlagSet("bench catchup", "[FLAGS] WORKLOAD")
	driver := fs.String("driver", "ringlog", "system under test: "+strings.Join(bench.DriverNames(), ", "))
	broker := benchBrokerFlag(fs)
	brokerPID := fs.Int("broker-pid", 0, "broker process id for CPU and disk-read sampling (default: what the driver reports)")
	rounds := fs.Int("rounds", 6, "reads of the backlog, each beside a loopback measurement; read first in odd rounds, loopback first in even ones")
	backlog := fs.String("backlog", "", "override the workload's backlogSize (e.g. 4GiB)")
	dropCaches := fs.Bool("drop-caches", false, "sync and drop the page cache before filling the backlog (needs root)")
	syncAfterFill := fs.Bool("sync-after-fill", true, "sync(2) after filling the backlog, so no round shares the CPU with its writeback")
	cpuProfile := fs.String("cpuprofile", "", "write this process's CPU profile (the client's, whole run) to this file")
	traceFile := fs.String("trace", "", "write this process's Go execution trace (the client's, whole run) to this file")
	out := fs.String("out", "bench/results/tmp", "directory for the JSON report (the default is git-ignored)")
	if err := parseBenchArgs(fs, args); err != nil {
		return err
	}
	w, err := catchUpWorkload(fs, *backlog)
	if err != nil {
		return err
	}
	if *dropCaches {
		if err := dropPageCache(); err != nil {
			return err
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	stopProfile, err := startProfiles(*cpuProfile, *traceFile)
	if err != nil {
		return err
	}
	defer stopProfile()
	d, err := bench.OpenDriver(*driver, *broker, w)
	if err != nil {
		return err
	}
	defer d.Close()
	report, err := bench.CatchUpRounds(ctx, bench.CatchUpOptions{
		Workload: w, Driver: d, Rounds: *rounds, BrokerPID: *brokerPID, Progress: bench.NewProgressLine(os.Stderr),
		AfterFill: func() error {
			if *syncAfterFill {
				unix.Sync()
			}
			return nil
		},
	})
	if err != nil {
		return fmt.Errorf("%s on %s: %w", w.Name, *driver, err)
	}
	writeCatchUp(os.Stdout, report)
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	path := filepath.Join(*out, fmt.Sprintf("catchup-%s-%s-%s.json", w.Name, report.Driver.Name, report.Started.Format("20060102T150405")))
	if err := report.WriteJSON(path); err != nil {
		return err
	}
	fmt.Printf("result: %s\n", path)
	return nil
}

// catchUpWorkload loads the WORKLOAD argument with its own rates and durations, and the
// backlog size from --backlog when given.
func catchUpWorkload(fs *flag.FlagSet, backlog string) (bench.Workload, error) {
	f := runFlags{warmup: -1, rate: -1, replicationFactor: -1} // no overrides
	w, err := loadWorkloadArg(fs, &f)
	if err != nil || backlog == "" {
		return w, err
	}
	size, err := bench.ParseBytes(backlog)
	if err != nil {
		return w, fmt.Errorf("--backlog: %w", err)
	}
	w.BacklogSize = bench.ByteSize(size)
	return w, w.Validate()
}

func writeCatchUp(out io.Writer, r *bench.CatchUpReport) {
	b := r.Backlog
	fmt.Fprintf(out, "%s on %s: backlog %s in %d messages (filled in %.1f s), %d consumer(s), loopback 1 stream\n",
		r.Workload.Name, r.Driver.Name, bench.FormatBytes(b.WrittenBytes), b.WrittenMessages, b.FillSeconds, r.Workload.Consumers)
	fmt.Fprintln(out, "round  first     read s  read MB/s  loopback s  loopback MB/s  share  broker CPU-s/GB  client CPU-s/GB  broker disk reads")
	for i, round := range r.Rounds {
		first := "loopback"
		if round.ReadFirst {
			first = "read"
		}
		disk := "unknown"
		if round.BrokerDiskReadBytes >= 0 {
			disk = bench.FormatBytes(round.BrokerDiskReadBytes)
		}
		fmt.Fprintf(out, "%5d  %-8s  %6.2f  %9.0f  %10.2f  %13.0f  %4.0f%%  %15.2f  %15.2f  %s\n", i+1, first,
			round.ReadSeconds, round.ReadMBPerSec, round.LoopbackSeconds, round.LoopbackMBPerSec, round.Share*100, round.BrokerCPUPerGB, round.ClientCPUPerGB, disk)
	}
	fmt.Fprintf(out, "median over %d rounds: read %.0f MB/s, loopback %.0f MB/s, share %.0f%% (of the rounds' own ratios)\n",
		len(r.Rounds), r.MedianReadMBPerSec, r.MedianLoopbackMBPerSec, r.MedianShare*100)
}
