package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"runtime/pprof"
	"runtime/trace"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/ringlog/ringlog/bench"
	"github.com/ringlog/ringlog/bench/ringlogdriver"
	"github.com/ringlog/ringlog/netio/client"
	"github.com/ringlog/ringlog/netio/wire"
	"github.com/ringlog/ringlog/ring"

	"golang.org/x/sys/unix"
)

func init() {
	benchCommands["pingpong"] = benchCommand{"raw TCP ping-pong over loopback: the floor under a one-record round trip", benchPingPong}
	benchCommands["single"] = benchCommand{"one record at a time, acks=1, on the bundled client vs a ping-pong in the same run", benchSingle}
}

// Limits of the latency commands: a count beyond this is a soak test, not a latency probe.
const (
	latencyCountMax    = 10_000_000
	latencyRoundsMax   = 1000
	latencyWarmupCount = 1000
)

func benchPingPong(args []string) error {
	fs := newBenchFlagSet("bench pingpong", "[FLAGS]")
	size := fs.Int("size", 1024, "bytes each way per round trip")
	count := fs.Int("count", 100_000, "round trips measured per echo (after a warm-up of 1000)")
	process := fs.Bool("process", false, "echo from another process (the broker's process boundary) instead of a goroutine of this one (same as --echo proc)")
	echoes := fs.String("echo", "", "comma-separated echoes, measured in turns: go (a goroutine of this process), proc (a Go echo in another process), uring[:opt+opt...] (an echo on one ring.Reactor loop in another process; options "+uringEchoOptions+"); default go, or proc with --process")
	rounds := fs.Int("rounds", 1, "the echoes take turns this many times, so load hits all alike")
	if err := parseBenchArgs(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 0 || *count < 1 || *count > latencyCountMax || *rounds < 1 || *rounds > latencyRoundsMax || *rounds > *count {
		return fmt.Errorf("want --count in 1..%d, --rounds in 1..min(%d, count) and no arguments", latencyCountMax, latencyRoundsMax)
	}
	specs := *echoes
	if specs == "" {
		specs = map[bool]string{false: "go", true: "proc"}[*process]
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	var series []singleSeries
	for spec := range strings.SplitSeq(specs, ",") {
		s, stop, err := newEcho(strings.TrimSpace(spec), *size)
		if err != nil {
			return err
		}
		defer stop()
		series = append(series, s)
	}
	if err := warmUp(ctx, series); err != nil {
		return err
	}
	if err := takeTurns(ctx, series, *count, *rounds); err != nil {
		return err
	}
	fmt.Printf("ping-pong of %d B, %d round trips per echo in %d rounds; load average %s\n", *size, *count, *rounds, loadAverage())
	printLatencyHeader()
	for i, s := range series {
		var against []*bench.Latency
		if i > 0 {
			against = []*bench.Latency{series[0].lat}
		}
		printLatencyRow(s.name, s.lat, against...)
	}
	if len(series) > 1 {
		fmt.Printf("ratios: p50 p99 p99.9 against %s\n", series[0].name)
	}
	printSeriesCPU(series)
	return nil
}

// uringEchoOptions lists the io_uring echo's options for flag help (bench.UringEcho).
const uringEchoOptions = "defer, coop, single, pollfirst, multishot, sendop, timer, append, cpuN"

// echoChildEnv, set to a message size, makes this binary serve one ping-pong echo
// connection on 127.0.0.1 instead of running its command line: it prints the address on
// stdout and exits when the connection closes. startEchoProcess sets it. With
// echoRingChildEnv set too (a bench.ParseUringEcho spec), the echo runs on a ring.Reactor
// loop (bench.ServeUringEcho), else in Go's netpoller (bench.ServeEcho).
const (
	echoChildEnv     = "RINGLOG_BENCH_ECHO_SIZE"
	echoRingChildEnv = "RINGLOG_BENCH_ECHO_RING"
)

// echoChildMain runs the echo child and returns its exit status.
func echoChildMain(size string) int {
	if err := runEchoChild(size, os.Getenv(echoRingChildEnv)); err != nil {
		fmt.Fprintf(os.Stderr, "ringlog echo: %v\n", err)
		return 1
	}
	return 0
}

// runEchoChild is the echo process's whole life.
func runEchoChild(sizeText, ringSpec string) error {
	size, err := strconv.Atoi(sizeText)
	if err != nil {
		return fmt.Errorf("%s=%q: %w", echoChildEnv, sizeText, err)
	}
	if ringSpec != "" {
		cfg, err := bench.ParseUringEcho(ringSpec)
		if err != nil {
			return err
		}
		// The ring's one-line backend notice would land in the middle of the bench's table.
		slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
		return bench.ServeUringEcho(size, cfg, func(addr string) { fmt.Println(addr) })
	}
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer listener.Close()
	fmt.Println(listener.Addr().String())
	return bench.ServeEcho(listener, size)
}

// startEchoProcess runs this binary again as an echo (runEchoChild; on a ring.Reactor loop
// when ringSpec is set) and connects a ping-pong to it: the floor with the same process
// boundary a broker has.
func startEchoProcess(size int, ringSpec string) (*bench.PingPong, int, func(), error) {
	self, err := os.Executable()
	if err != nil {
		return nil, 0, nil, err
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d", echoChildEnv, size), echoRingChildEnv+"="+ringSpec)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, 0, nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, 0, nil, fmt.Errorf("echo process: %w", err)
	}
	addr, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, 0, nil, fmt.Errorf("echo process: no address: %w", err)
	}
	pp, err := bench.DialPingPong(strings.TrimSpace(addr), size)
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, 0, nil, err
	}
	return pp, cmd.Process.Pid, func() { pp.Close(); _ = cmd.Wait() }, nil
}

// uringUsable reports why this process cannot set up an io_uring ring, or nil.
func uringUsable() error {
	rg, err := ring.Open(ring.Config{Backend: "uring"})
	if err != nil {
		return err
	}
	return rg.Close()
}

// newEcho starts a ping-pong of size bytes against the echo spec names (see bench
// pingpong's --echo) and returns its series (with the echo process as its server) and its
// stop.
func newEcho(spec string, size int) (singleSeries, func(), error) {
	name := fmt.Sprintf("pingpong %dB", size)
	var ringSpec string
	switch {
	case spec == "go":
		pp, err := bench.NewPingPong(size)
		if err != nil {
			return singleSeries{}, nil, err
		}
		return singleSeries{name: name, run: pp.Run}, func() { pp.Close() }, nil
	case spec == "proc":
		name += " proc"
	case strings.HasPrefix(spec, "uring"):
		if _, err := bench.ParseUringEcho(spec); err != nil {
			return singleSeries{}, nil, err
		}
		name, ringSpec = "echo "+spec, spec
	default:
		return singleSeries{}, nil, fmt.Errorf("echo %q: want go, proc or uring[:opt+opt...]", spec)
	}
	pp, pid, stop, err := startEchoProcess(size, ringSpec)
	if err != nil {
		return singleSeries{}, nil, err
	}
	return singleSeries{name: name, run: pp.Run, serverPID: pid}, stop, nil
}

// singleSeries is one way of sending a record in `ringlog bench single`.
type singleSeries struct {
	name string
	lat  *bench.Latency
	run  func(ctx context.Context, n int, lat *bench.Latency) error
	// CPU spent while the series ran its measured rounds: this process's (getrusage) and
	// its server's (the threads' schedstat run time of the echo's process, or with
	// --broker-pid of the broker), both in ns.
	selfNs, serverNs int64
	serverPID        int           // 0: no server process to account
	serverThreads    map[int]int64 // serverNs per thread id of the server (the split printSeriesCPU prints)
	records          int
	polls            func() client.ReadPollStats // the SendSync series with --read-poll
}

func benchSingle(args []string) error {
	fs := newBenchFlagSet("bench single", "[FLAGS]")
	broker := benchBrokerFlag(fs)
	topic := fs.String("topic", "bench-single", "topic (created with one partition when missing)")
	size := fs.Int("size", 1024, "record value bytes (and ping-pong bytes each way)")
	count := fs.Int("count", 20_000, "records per series (after a warm-up of 1000)")
	rounds := fs.Int("rounds", 10, "the series take turns this many times, so load hits all alike")
	processFloor := fs.Bool("process-floor", true, "also run the ping-pong against an echo in another process (the broker's process boundary); ratios are printed against every floor")
	uringFloors := fs.String("uring-floor", "uring", "comma-separated io_uring echoes (uring[:opt+opt...], options "+uringEchoOptions+") to run the ping-pong against too, each in another process on one ring.Reactor loop; empty: none")
	rawProduce := fs.Bool("raw-produce", true, "also measure a produce request of one record encoded once and sent as is on a connection of its own to the partition's shard, without the client library (ringlogdriver.RawProduce): SendSync minus it is the client's cost")
	queued := fs.Bool("queued", true, "also measure Send plus waiting for the callback (the batching path, through the sender goroutine)")
	cpuProfile := fs.String("cpuprofile", "", "write this process's CPU profile of the measured rounds to this file")
	traceFile := fs.String("trace", "", "write a Go execution trace of the measured rounds to this file")
	flushAlways := fs.Bool("flush-always", false, "produce to a flush.always topic (--topic gets a -flush-always suffix) and add a series of a write plus fdatasync of the same size in --sync-dir: goal p50 ≤ the ping-pong's + the fdatasync series'")
	syncDir := fs.String("sync-dir", ".", "directory for the write+fdatasync series of --flush-always (use the broker's data disk)")
	readPolls := fs.String("read-poll", "", "comma-separated durations: add a SendSync series per duration, each with its own producer whose ProducerConfig.ReadPoll is that duration (polls the socket before parking), taking turns with the others")
	syncPlain := fs.Bool("sync-plain", false, "also measure SendSync on a producer with DisableIdempotence (the request --raw-produce sends: no producer id or sequence), so that SendSync minus it is the idempotent producer's cost and it minus raw produce the client library's")
	brokerPID := fs.Int("broker-pid", 0, "broker process id: also print the broker's CPU per record of each series (from its threads' /proc schedstat)")
	if err := parseBenchArgs(fs, args); err != nil {
		return err
	}
	var polls []time.Duration
	for f := range strings.SplitSeq(*readPolls, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		d, err := time.ParseDuration(f)
		if err != nil || d <= 0 || d > client.ReadPollMax {
			return fmt.Errorf("--read-poll %q: want durations in (0, %v]", f, client.ReadPollMax)
		}
		polls = append(polls, d)
	}
	if fs.NArg() != 0 || *count < 1 || *count > latencyCountMax || *rounds < 1 || *rounds > latencyRoundsMax || *rounds > *count {
		return fmt.Errorf("want --count in 1..%d, --rounds in 1..min(%d, count) and no arguments", latencyCountMax, latencyRoundsMax)
	}
	if *size < 0 || *size > bench.PingPongSizeMax {
		return fmt.Errorf("--size %d outside 0..%d", *size, bench.PingPongSizeMax)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	c, err := client.New(ctx, client.Config{Broker: *broker})
	if err != nil {
		return err
	}
	defer c.Close()
	var topicConfigs map[string]string
	if *flushAlways {
		*topic += "-flush-always"
		topicConfigs = map[string]string{"flush.always": "true"}
	}
	if err := c.CreateTopic(ctx, *topic, 1, topicConfigs); err != nil && !errors.Is(err, wire.ErrTopicAlreadyExists) {
		return fmt.Errorf("create %s: %w", *topic, err)
	}
	echoSpecs := []string{"go"}
	if *processFloor {
		echoSpecs = append(echoSpecs, "proc")
	}
	uringDefault := true
	fs.Visit(func(f *flag.Flag) { uringDefault = uringDefault && f.Name != "uring-floor" })
	if err := uringUsable(); err != nil && uringDefault {
		fmt.Printf("no io_uring echo floor: %v\n", err)
		*uringFloors = ""
	}
	for spec := range strings.SplitSeq(*uringFloors, ",") {
		if spec = strings.TrimSpace(spec); spec != "" {
			echoSpecs = append(echoSpecs, spec)
		}
	}
	var series []singleSeries
	for _, spec := range echoSpecs {
		s, stop, err := newEcho(spec, max(*size, 1))
		if err != nil {
			return err
		}
		defer stop()
		series = append(series, s)
	}
	floors := len(series)
	value := make([]byte, *size)
	if *rawProduce {
		raw, err := ringlogdriver.DialRawProduce(ctx, c, *broker, *topic, 0, value)
		if err != nil {
			return err
		}
		defer raw.Close()
		series = append(series, singleSeries{name: "raw produce acks=1", run: raw.Run, serverPID: *brokerPID})
	}
	syncProducer := c.NewProducer(client.ProducerConfig{Acks: client.AckLeader})
	defer syncProducer.Close(context.Background())
	series = append(series, singleSeries{name: "SendSync acks=1", run: sendSyncSeries(syncProducer, *topic, value), serverPID: *brokerPID})
	if *syncPlain {
		pp := c.NewProducer(client.ProducerConfig{Acks: client.AckLeader, DisableIdempotence: true})
		defer pp.Close(context.Background())
		series = append(series, singleSeries{name: "SendSync plain acks=1", run: sendSyncSeries(pp, *topic, value), serverPID: *brokerPID})
	}
	for _, d := range polls {
		pp := c.NewProducer(client.ProducerConfig{Acks: client.AckLeader, ReadPoll: d})
		defer pp.Close(context.Background())
		series = append(series, singleSeries{name: fmt.Sprintf("SendSync poll %v", d), polls: pp.ReadPollStats, run: sendSyncSeries(pp, *topic, value), serverPID: *brokerPID})
	}
	if *flushAlways {
		syncFloor, stop, err := newSyncFloor(*syncDir, max(*size, 1))
		if err != nil {
			return err
		}
		defer stop()
		series = append(series[:floors], append([]singleSeries{{name: fmt.Sprintf("write+fdatasync %dB", max(*size, 1)), run: syncFloor}}, series[floors:]...)...)
	}
	if *queued {
		queuedProducer := c.NewProducer(client.ProducerConfig{Acks: client.AckLeader, Linger: -1})
		defer queuedProducer.Close(context.Background())
		done := make(chan error, 1)
		callback := func(_ *client.Record, err error) { done <- err }
		series = append(series, singleSeries{name: "Send+wait acks=1", run: func(ctx context.Context, n int, lat *bench.Latency) error {
			for range n {
				start := time.Now()
				if err := queuedProducer.Send(ctx, &client.Record{Topic: *topic, Partition: 0, Value: value}, callback); err != nil {
					return err
				}
				if err := <-done; err != nil {
					return err
				}
				lat.Record(time.Since(start))
			}
			return nil
		}, serverPID: *brokerPID})
	}
	if err := warmUp(ctx, series); err != nil {
		return err
	}
	stopProfiles, err := startProfiles(*cpuProfile, *traceFile)
	if err != nil {
		return err
	}
	defer stopProfiles()
	if err := takeTurns(ctx, series, *count, *rounds); err != nil {
		return err
	}
	stopProfiles()
	fmt.Printf("one record at a time to %s (%s/0), %d B values, %d per series in %d rounds; load average %s\n",
		*broker, *topic, *size, *count, *rounds, loadAverage())
	printLatencyHeader()
	firstProduce := floors
	if *flushAlways {
		firstProduce++
	}
	for i, s := range series {
		var against []*bench.Latency
		if i >= firstProduce {
			for _, f := range series[:floors] {
				against = append(against, f.lat)
			}
		}
		printLatencyRow(s.name, s.lat, against...)
	}
	names := make([]string, floors)
	for i, f := range series[:floors] {
		names[i] = f.name
	}
	fmt.Printf("ratios: p50 p99 p99.9 against %s\n", strings.Join(names, " | "))
	printSeriesCPU(series)
	if *flushAlways {
		sync := series[floors].lat.Summarize()
		for _, s := range series[firstProduce:] {
			p50 := s.lat.Summarize().P50Us
			for _, f := range series[:floors] {
				floor := f.lat.Summarize().P50Us + sync.P50Us
				fmt.Printf("%s p50 %.1f µs against %s p50 + write+fdatasync p50 = %.1f µs: ×%.2f\n", s.name, p50, f.name, floor, p50/floor)
			}
		}
		fmt.Println("goal (flush.always): p50 ≤ the ping-pong's p50 + one fdatasync's")
		return nil
	}
	fmt.Println("goal: p50 ≤ 1.5× and p99 ≤ 2× the ping-pong")
	return nil
}

// warmUp runs latencyWarmupCount round trips of every series, unrecorded, and gives each
// an empty histogram.
func warmUp(ctx context.Context, series []singleSeries) error {
	for i := range series {
		if err := series[i].run(ctx, latencyWarmupCount, bench.NewLatency()); err != nil {
			return fmt.Errorf("%s: %w", series[i].name, err)
		}
		series[i].lat = bench.NewLatency()
	}
	return nil
}

// takeTurns runs count round trips of every series in rounds turns, each series starting a
// round in turn, so a burst of load or writeback lands on all of them alike, and counts the
// CPU each one used (this process's, and its server's threads').
func takeTurns(ctx context.Context, series []singleSeries, count, rounds int) error {
	for round := range rounds {
		n := count / rounds
		if round == rounds-1 {
			n = count - n*(rounds-1)
		}
		for k := range series {
			s := &series[(round+k)%len(series)]
			self0, server0 := selfCPUNs(), threadsCPUNs(s.serverPID)
			if err := s.run(ctx, n, s.lat); err != nil {
				return fmt.Errorf("%s: %w", s.name, err)
			}
			s.selfNs += selfCPUNs() - self0
			for tid, ns := range threadsCPUNs(s.serverPID) {
				if d := ns - server0[tid]; d > 0 {
					if s.serverThreads == nil {
						s.serverThreads = map[int]int64{}
					}
					s.serverThreads[tid] += d
					s.serverNs += d
				}
			}
			s.records += n
		}
	}
	return nil
}

// newSyncFloor returns a series that appends size bytes to a scratch file in dir and
// fdatasyncs it, one at a time: what one flush.always produce adds to a round trip at
// least. The file is removed by stop; it grows by size per write, up to latencyCountMax
// (plus warm-up) writes.
func newSyncFloor(dir string, size int) (run func(ctx context.Context, n int, lat *bench.Latency) error, stop func(), err error) {
	f, err := os.CreateTemp(dir, "ringlog-bench-sync-*")
	if err != nil {
		return nil, nil, fmt.Errorf("--sync-dir: %w", err)
	}
	block := make([]byte, size)
	run = func(ctx context.Context, n int, lat *bench.Latency) error {
		for range n {
			if err := ctx.Err(); err != nil {
				return err
			}
			start := time.Now()
			if _, err := f.Write(block); err != nil {
				return err
			}
			if err := unix.Fdatasync(int(f.Fd())); err != nil {
				return fmt.Errorf("fdatasync %s: %w", f.Name(), err)
			}
			lat.Record(time.Since(start))
		}
		return nil
	}
	return run, func() { f.Close(); os.Remove(f.Name()) }, nil
}

func printLatencyHeader() {
	fmt.Printf("%-28s %10s %10s %10s %10s %10s\n", "series", "count", "p50 µs", "p99 µs", "p99.9 µs", "max µs")
}

// printLatencyRow prints one series and its p50/p99/p99.9 as multiples of each floor.
func printLatencyRow(name string, lat *bench.Latency, floors ...*bench.Latency) {
	s := lat.Summarize()
	fmt.Printf("%-28s %10d %10.1f %10.1f %10.1f %10.1f", name, s.Count, s.P50Us, s.P99Us, s.P999Us, s.MaxUs)
	for i, floor := range floors {
		f := floor.Summarize()
		sep := "  "
		if i > 0 {
			sep = " |"
		}
		fmt.Printf("%s ×%.2f ×%.2f ×%.2f", sep, s.P50Us/f.P50Us, s.P99Us/f.P99Us, s.P999Us/f.P999Us)
	}
	fmt.Println()
}

// sendSyncSeries is a series of one-record SendSyncs of value to topic's partition 0.
func sendSyncSeries(p *client.Producer, topic string, value []byte) func(ctx context.Context, n int, lat *bench.Latency) error {
	return func(ctx context.Context, n int, lat *bench.Latency) error {
		for range n {
			start := time.Now()
			if _, err := p.SendSync(ctx, &client.Record{Topic: topic, Partition: 0, Value: value}); err != nil {
				return err
			}
			lat.Record(time.Since(start))
		}
		return nil
	}
}

// printSeriesCPU prints each series' CPU per record: this process's (for the in-process
// ping-pong both of its ends) and its server's (the echo's process, the broker's with
// --broker-pid; "-" where there is none), and what a read poll did.
func printSeriesCPU(series []singleSeries) {
	fmt.Print("CPU µs per round trip, this process / server:")
	for _, s := range series {
		if s.records == 0 {
			continue
		}
		fmt.Printf(" %s %.1f", s.name, float64(s.selfNs)/1e3/float64(s.records))
		if s.serverPID > 0 {
			fmt.Printf(" / %.1f", float64(s.serverNs)/1e3/float64(s.records))
		} else {
			fmt.Print(" / -")
		}
		fmt.Print(";")
	}
	fmt.Println()
	printServerThreads(series)
	for _, s := range series {
		if s.polls == nil {
			continue
		}
		st := s.polls()
		fmt.Printf("%s: %d polls found the answer, %d ran out; %.1f non-blocking reads per poll\n",
			s.name, st.Hits, st.Misses, float64(st.Spins)/float64(max(st.Hits+st.Misses, 1)))
	}
}

// printServerThreads prints, per series with a server process, that server's CPU per round
// trip split by thread: the two busiest threads (for the broker a shard loop, the Go
// runtime's sysmon, ...) and the rest, so a cost that lands off the shard thread shows
// (docs/benchmarks.md, "flush.always: where the broker's CPU goes").
func printServerThreads(series []singleSeries) {
	fmt.Print("server CPU µs per round trip by thread (tid µs, busiest first):")
	for _, s := range series {
		if s.records == 0 || s.serverPID <= 0 {
			continue
		}
		tids := make([]int, 0, len(s.serverThreads))
		for tid := range s.serverThreads {
			tids = append(tids, tid)
		}
		sort.Slice(tids, func(i, j int) bool { return s.serverThreads[tids[i]] > s.serverThreads[tids[j]] })
		fmt.Printf(" %s", s.name)
		var rest int64
		for i, tid := range tids {
			if i < 2 {
				fmt.Printf(" %d %.1f,", tid, float64(s.serverThreads[tid])/1e3/float64(s.records))
				continue
			}
			rest += s.serverThreads[tid]
		}
		fmt.Printf(" rest %.1f;", float64(rest)/1e3/float64(s.records))
	}
	fmt.Println()
}

// selfCPUNs is this process's user + system CPU time in ns (getrusage, which Linux
// accounts per scheduler run, not per tick).
func selfCPUNs() int64 {
	var ru unix.Rusage
	if unix.Getrusage(unix.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// threadsCPUNs is the run time in ns of every thread of pid, by thread id, from
// /proc/PID/task/*/schedstat (first field; precise, unlike /proc/PID/stat's ticks).
// Threads that ended in between are missed. Empty for pid ≤ 0 or when unreadable.
func threadsCPUNs(pid int) map[int]int64 {
	if pid <= 0 {
		return nil
	}
	dir := fmt.Sprintf("/proc/%d/task", pid)
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	out := make(map[int]int64, len(tasks))
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		data, err := os.ReadFile(dir + "/" + t.Name() + "/schedstat")
		if err != nil {
			continue
		}
		f, _, _ := strings.Cut(string(data), " ")
		if n, err := strconv.ParseInt(f, 10, 64); err == nil {
			out[tid] = n
		}
	}
	return out
}

// loadAverage is /proc/loadavg's first three fields, or "unknown".
func loadAverage() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil || len(data) == 0 {
		return "unknown"
	}
	var a, b, c string
	if _, err := fmt.Sscan(string(data), &a, &b, &c); err != nil {
		return "unknown"
	}
	return a + " " + b + " " + c
}

// startProfiles starts a CPU profile and an execution trace where asked; the returned stop
// may be called more than once.
func startProfiles(cpuPath, tracePath string) (func(), error) {
	var stops []func()
	stop := func() {
		for _, s := range stops {
			s()
		}
		stops = nil
	}
	if cpuPath != "" {
		f, err := os.Create(cpuPath)
		if err != nil {
			return nil, err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return nil, err
		}
		stops = append(stops, func() { pprof.StopCPUProfile(); f.Close() })
	}
	if tracePath != "" {
		f, err := os.Create(tracePath)
		if err != nil {
			stop()
			return nil, err
		}
		if err := trace.Start(f); err != nil {
			f.Close()
			stop()
			return nil, err
		}
		stops = append(stops, func() { trace.Stop(); f.Close() })
	}
	return stop, nil
}
