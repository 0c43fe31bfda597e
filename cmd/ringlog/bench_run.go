package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"time"

	"github.com/ringlog/ringlog/bench"
	"github.com/ringlog/ringlog/bench/kgodriver"       // --driver kgo: a Kafka client against --kafka-listen
	_ "github.com/ringlog/ringlog/bench/ringlogdriver" // --driver ringlog
	"golang.org/x/sys/unix"
)

// loopbackProbeTime is how long the same-run loopback probe measures.
const loopbackProbeTime = 2 * time.Second

type runFlags struct {
	driver, broker, out, dataDir string
	topicSuffix                  string // fixed topic names, reused when they exist
	cpuProfile                   string // this process's CPU profile of the whole run (the client's)
	brokerPID                    int
	command                      string // the command line, recorded in the result
	duration, warmup             time.Duration
	rate, replicationFactor      int
	loopback                     bool
	measuredMin                  int64 // --measured-messages-min; -1: bench.DefaultMeasuredMessagesMin
}

func (f *runFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.driver, "driver", "ringlog", "system under test: "+strings.Join(bench.DriverNames(), ", "))
	fs.StringVar(&f.broker, "broker", "", "broker address HOST:PORT; default: with --driver kgo, a Kafka listener at "+kgodriver.DefaultAddress+" (ringlogd --kafka-listen); else, as for every command, a --broker before the command, then $"+brokerEnv+", then "+brokerDefault)
	fs.StringVar(&f.out, "out", "bench/results/tmp", "directory for the JSON result and SVG plots (the default is git-ignored)")
	fs.StringVar(&f.dataDir, "data-dir", ".", "the broker's data directory (for the hardware line's disk)")
	fs.IntVar(&f.brokerPID, "broker-pid", 0, "broker process id for RSS sampling (default: what the driver reports)")
	fs.DurationVar(&f.duration, "duration", 0, "override the workload's test duration")
	fs.DurationVar(&f.warmup, "warmup", -1, "override the workload's warm-up")
	fs.IntVar(&f.rate, "rate", -1, "override the workload's producerRate (0 = max)")
	fs.IntVar(&f.replicationFactor, "replication-factor", -1, "override the workload's replicationFactor (replicas of each partition, on a cluster of at least that many brokers)")
	fs.StringVar(&f.cpuProfile, "cpuprofile", "", "write this process's CPU profile (the client's, whole run) to this file")
	fs.StringVar(&f.topicSuffix, "topic-suffix", "", "name the topics bench-WORKLOAD-SUFFIX-N and reuse them when they exist (default: a suffix unique to the run, new topics)")
	fs.BoolVar(&f.loopback, "loopback", false, "also measure loopback TCP bandwidth in the same run (always on for backlog workloads)")
	fs.Int64Var(&f.measuredMin, "measured-messages-min", -1, "keep the measured window open past its duration until this many messages were acknowledged in it (and, with consumers, one came back), at most 1 min more; 0 = a fixed window; -1 = 100, or half of what a paced workload's schedule sends in the window if less")
}

// defaultBroker is --broker when not given: kgo speaks the Kafka protocol, which the
// addresses of the other commands (the ringlog protocol's) do not serve.
func (f *runFlags) defaultBroker() string {
	if f.driver == "kgo" {
		return kgodriver.DefaultAddress
	}
	return defaultBroker()
}

// measuredMessagesMin is --measured-messages-min for w.
func (f *runFlags) measuredMessagesMin(w bench.Workload) int64 {
	if f.measuredMin < 0 {
		return bench.DefaultMeasuredMessagesMin(w)
	}
	return f.measuredMin
}

func loadWorkloadArg(fs *flag.FlagSet, f *runFlags) (bench.Workload, error) {
	if f.broker == "" {
		f.broker = f.defaultBroker()
	}
	if fs.NArg() != 1 {
		return bench.Workload{}, errors.New("want exactly one WORKLOAD file (see bench/workloads/)")
	}
	w, err := bench.LoadWorkload(fs.Arg(0))
	if err != nil {
		return w, err
	}
	if f.duration > 0 {
		w.Duration = bench.Duration(f.duration)
	}
	if f.warmup >= 0 {
		w.Warmup = bench.Duration(f.warmup)
	}
	if f.rate >= 0 {
		w.ProducerRate = f.rate
	}
	if f.replicationFactor >= 0 {
		w.ReplicationFactor = f.replicationFactor
	}
	return w, w.Validate()
}

func benchRun(args []string) error {
	fs := newBenchFlagSet("bench run", "[FLAGS] WORKLOAD")
	var f runFlags
	f.register(fs)
	if err := parseBenchArgs(fs, args); err != nil {
		return err
	}
	w, err := loadWorkloadArg(fs, &f)
	if err != nil {
		return err
	}
	f.command = "ringlog bench run " + strings.Join(args, " ")
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	stopProfile, err := startProfiles(f.cpuProfile, "")
	if err != nil {
		return err
	}
	result, err := runOne(ctx, f, w)
	stopProfile()
	if err != nil {
		return err
	}
	_, err = saveResult(f.out, result)
	return err
}

func runOne(ctx context.Context, f runFlags, w bench.Workload) (*bench.Result, error) {
	driver, err := bench.OpenDriver(f.driver, f.broker, w)
	if err != nil {
		return nil, err
	}
	defer driver.Close()
	result, err := bench.Run(ctx, bench.RunOptions{
		Workload: w, Driver: driver, BrokerPID: f.brokerPID, DataDir: f.dataDir, TopicSuffix: f.topicSuffix,
		Progress: bench.NewProgressLine(os.Stderr), MeasuredMessagesMin: f.measuredMessagesMin(w),
	})
	if err != nil {
		return nil, fmt.Errorf("%s on %s: %w", w.Name, f.driver, err)
	}
	result.Command = f.command
	if f.loopback || w.BacklogSize > 0 {
		mbps, err := bench.LoopbackBandwidth(ctx, loopbackProbeTime, 1)
		if err != nil {
			return nil, err
		}
		result.LoopbackMBps = mbps
	}
	return result, nil
}

func saveResult(dir string, r *bench.Result) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	prefix := fmt.Sprintf("%s-%s-%s", r.Workload.Name, r.Driver.Name, r.Started.Format("20060102T150405"))
	path := filepath.Join(dir, prefix+".json")
	if err := r.WriteJSON(path); err != nil {
		return "", err
	}
	plots, err := bench.WritePlots(dir, prefix, r)
	if err != nil {
		return "", err
	}
	if err := bench.WriteSummary(os.Stdout, r); err != nil {
		return "", err
	}
	fmt.Printf("result: %s\nplots: %s\n", path, strings.Join(plots, " "))
	return path, nil
}

func benchCompare(args []string) error {
	fs := newBenchFlagSet("bench compare", "[--plots DIR] A.json B.json")
	plotsDir := fs.String("plots", "", "also write both runs' throughput and latency plots on shared axes into this directory")
	if err := parseBenchArgs(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 2 {
		return errors.New("usage: ringlog bench compare [--plots DIR] A.json B.json")
	}
	a, err := bench.LoadResult(fs.Arg(0))
	if err != nil {
		return err
	}
	b, err := bench.LoadResult(fs.Arg(1))
	if err != nil {
		return err
	}
	if err := bench.WriteComparison(os.Stdout, fs.Arg(0), fs.Arg(1), a, b); err != nil {
		return err
	}
	if *plotsDir != "" {
		prefix := fmt.Sprintf("%s-%s-vs-%s", a.Workload.Name, a.Driver.Name, b.Driver.Name)
		plots, err := bench.WriteComparisonPlots(*plotsDir, prefix, a, b)
		if err != nil {
			return err
		}
		fmt.Printf("plots: %s\n", strings.Join(plots, " "))
	}
	return nil
}

func benchLoopback(args []string) error {
	fs := newBenchFlagSet("bench loopback", "[FLAGS]")
	duration := fs.Duration("duration", 5*time.Second, "how long to measure")
	streams := fs.Int("streams", 1, "parallel connections")
	if err := parseBenchArgs(fs, args); err != nil {
		return err
	}
	mbps, err := bench.LoopbackBandwidth(context.Background(), *duration, *streams)
	if err != nil {
		return err
	}
	fmt.Printf("loopback TCP, %d stream(s), %v: %.0f MB/s (%.1f Gbit/s)\n", *streams, *duration, mbps, mbps*8/1000)
	return nil
}

// benchPeers runs the workload on ringlog here and on each peer in its own process (the peers
// module under bench/peers), then prints our/peer ratios from the same session. With
// --rounds N the two take turns N times, ringlog first in even rounds and the peer first in
// odd ones, and before every run the page cache is written back and dropped, so neither side
// inherits the other's warm cache or dirty pages; the verdicts use each round's ratio and
// the summary gives the median.
func benchPeers(args []string) error {
	fs := newBenchFlagSet("bench peers", "[FLAGS] WORKLOAD")
	var f runFlags
	f.register(fs)
	peersBin := fs.String("peers-bin", "", "built bench/peers binary (default: go run it from the source tree)")
	peer := fs.String("peer", "nats", "peer driver: nats or rabbitmq (bench/peers: peers run --help)")
	rounds := fs.Int("rounds", 1, "runs of each system, alternating which goes first (1..20)")
	dropCache := fs.Bool("drop-cache", true, "sync and drop the page cache before every run (needs root; noted when refused)")
	if err := parseBenchArgs(fs, args); err != nil {
		return err
	}
	if *rounds < 1 || *rounds > peersRoundsMax {
		return fmt.Errorf("--rounds %d: want 1..%d", *rounds, peersRoundsMax)
	}
	w, err := loadWorkloadArg(fs, &f)
	if err != nil {
		return err
	}
	f.command = "ringlog bench peers " + strings.Join(args, " ")
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	prepare := func() {
		if !*dropCache {
			return
		}
		if err := dropPageCache(); err != nil {
			fmt.Fprintf(os.Stderr, "page cache not dropped before this run: %v\n", err)
		}
	}
	var pairs []peerPair
	for round := range *rounds {
		pair, err := runPeerRound(ctx, round, prepare, f, w, *peersBin, *peer, fs.Arg(0))
		if err != nil {
			return err
		}
		pairs = append(pairs, pair)
	}
	last := pairs[len(pairs)-1]
	prefix := fmt.Sprintf("%s-%s-vs-%s-%s", w.Name, last.ours.Driver.Name, last.theirs.Driver.Name, last.ours.Started.Format("20060102T150405"))
	plots, err := bench.WriteComparisonPlots(f.out, prefix, last.ours, last.theirs)
	if err != nil {
		return err
	}
	fmt.Printf("comparison plots (round %d): %s\n", len(pairs), strings.Join(plots, " "))
	if len(pairs) > 1 {
		writeRoundsSummary(os.Stdout, pairs)
	}
	fmt.Println()
	return bench.WriteTargets(os.Stdout, bench.CheckTargets(last.ours, last.theirs))
}

// peersRoundsMax bounds --rounds.
const peersRoundsMax = 20

// peerPair is one round of bench peers: both systems' results.
type peerPair struct {
	ours, theirs         *bench.Result
	ringlogFirst         bool
	oursPath, theirsPath string
}

// runPeerRound runs the workload on both systems, ringlog first in even rounds, and prints
// the round's side-by-side table.
func runPeerRound(ctx context.Context, round int, prepare func(), f runFlags, w bench.Workload, peersBin, peer, workloadPath string) (peerPair, error) {
	pair := peerPair{ringlogFirst: round%2 == 0}
	runOurs := func() error {
		prepare()
		ours, err := runOne(ctx, f, w)
		if err != nil {
			return fmt.Errorf("round %d: ringlog side: %w", round+1, err)
		}
		pair.ours = ours
		pair.oursPath, err = saveResult(f.out, ours)
		return err
	}
	runTheirs := func() error {
		prepare()
		path, err := runPeer(ctx, peersBin, peer, workloadPath, f)
		if err != nil {
			return fmt.Errorf("round %d: peer %s: %w", round+1, peer, err)
		}
		pair.theirsPath = path
		pair.theirs, err = bench.LoadResult(path)
		return err
	}
	first, second := runOurs, runTheirs
	if !pair.ringlogFirst {
		first, second = runTheirs, runOurs
	}
	fmt.Printf("\n== round %d: %s first ==\n", round+1, map[bool]string{true: "ringlog", false: peer}[pair.ringlogFirst])
	if err := first(); err != nil {
		return pair, err
	}
	if err := second(); err != nil {
		return pair, err
	}
	fmt.Println()
	return pair, bench.WriteComparison(os.Stdout, pair.oursPath, pair.theirsPath, pair.ours, pair.theirs)
}

// writeRoundsSummary prints each round's headline ratios (ours/peer) and their medians.
func writeRoundsSummary(out io.Writer, pairs []peerPair) {
	fmt.Fprintf(out, "\nrounds (ours/peer; ratio > 1 means ringlog moved more, or waited longer for p99):\n")
	var pub, con, p99 []float64
	for i, p := range pairs {
		first := "ringlog"
		if !p.ringlogFirst {
			first = p.theirs.Driver.Name
		}
		rp := ratioOf(p.ours.Publish.MBPerSec, p.theirs.Publish.MBPerSec)
		rc := ratioOf(p.ours.Consume.MBPerSec, p.theirs.Consume.MBPerSec)
		rl := ratioOf(p.ours.PublishLatency.P99Us, p.theirs.PublishLatency.P99Us)
		pub, con, p99 = append(pub, rp), append(con, rc), append(p99, rl)
		fmt.Fprintf(out, "  round %d (%s first): publish MB/s %.2f×, consume MB/s %.2f×, publish p99 %.2f×\n", i+1, first, rp, rc, rl)
	}
	fmt.Fprintf(out, "  median: publish MB/s %.2f×, consume MB/s %.2f×, publish p99 %.2f×\n", bench.Median(pub), bench.Median(con), bench.Median(p99))
}

func ratioOf(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// dropPageCache writes dirty pages back (sync) and drops the clean page cache, dentries and
// inodes (/proc/sys/vm/drop_caches = 3), so the next system starts with a cold cache.
func dropPageCache() error {
	unix.Sync()
	if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("3\n"), 0); err != nil {
		return fmt.Errorf("drop caches: %w (synced only)", err)
	}
	return nil
}

// runPeer execs the peers program and returns the path of the result it wrote.
func runPeer(ctx context.Context, bin, peer, workloadPath string, f runFlags) (string, error) {
	peerArgs := []string{"run", "--driver", peer, "--out", f.out, "--result-path-file", filepath.Join(f.out, ".peer-result")}
	if f.duration > 0 {
		peerArgs = append(peerArgs, "--duration", f.duration.String())
	}
	if f.warmup >= 0 {
		peerArgs = append(peerArgs, "--warmup", f.warmup.String())
	}
	if f.rate >= 0 {
		peerArgs = append(peerArgs, "--rate", fmt.Sprint(f.rate))
	}
	absWorkload, err := filepath.Abs(workloadPath)
	if err != nil {
		return "", err
	}
	absOut, err := filepath.Abs(f.out)
	if err != nil {
		return "", err
	}
	peerArgs[4], peerArgs[6] = absOut, filepath.Join(absOut, ".peer-result")
	peerArgs = append(peerArgs, absWorkload)
	var cmd *exec.Cmd
	if bin != "" {
		cmd = exec.CommandContext(ctx, bin, peerArgs...)
	} else {
		dir, err := peersModuleDir()
		if err != nil {
			return "", err
		}
		cmd = exec.CommandContext(ctx, "go", append([]string{"run", "./cmd/peers"}, peerArgs...)...)
		cmd.Dir = dir
	}
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := os.MkdirAll(absOut, 0o755); err != nil {
		return "", err
	}
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s: %w", strings.Join(cmd.Args, " "), err)
	}
	path, err := os.ReadFile(filepath.Join(absOut, ".peer-result"))
	if err != nil {
		return "", fmt.Errorf("peer wrote no result: %w", err)
	}
	return strings.TrimSpace(string(path)), nil
}

// peersModuleDir finds bench/peers by walking up from the working directory.
func peersModuleDir() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for range 16 {
		candidate := filepath.Join(dir, "bench", "peers")
		if _, err := os.Stat(filepath.Join(candidate, "go.mod")); err == nil {
			return candidate, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			break
		}
		dir = parent
	}
	return "", errors.New("bench/peers not found above the working directory: run from the ringlog source tree or pass --peers-bin")
}
