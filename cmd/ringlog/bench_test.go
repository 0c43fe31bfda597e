package main

import (
	"encoding/json"
	"flag"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ringlog/ringlog/bench"
)

const cliWorkload = `
name: cli
topics: 1
partitionsPerTopic: 2
messageSize: 128
producers: 1
consumers: 1
producerRate: 2000
warmup: 0s
duration: 300ms
`

// TestBenchRunAndCompare drives the CLI entry points: a run on the in-process driver writes
// a result and well-formed plots (flags before or after the WORKLOAD: after it, the flags
// were taken for more WORKLOADs until session 16), and compare reads two results back.
func TestBenchRunAndCompare(t *testing.T) {
	dir := t.TempDir()
	workload := filepath.Join(dir, "cli.yaml")
	if err := os.WriteFile(workload, []byte(cliWorkload), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "results")
	for _, args := range [][]string{
		{"run", "--driver", "mem", "--out", out, workload},
		{"run", workload, "--driver", "mem", "--out", out}, // flags after the WORKLOAD, as on every command
	} {
		if err := runBench(args); err != nil {
			t.Fatalf("%q: %v", args, err)
		}
	}
	results, _ := filepath.Glob(filepath.Join(out, "cli-mem-*.json"))
	plots, _ := filepath.Glob(filepath.Join(out, "cli-mem-*.svg"))
	if len(results) == 0 || len(plots) < 2 {
		t.Fatalf("results %v plots %v", results, plots)
	}
	r, err := bench.LoadResult(results[0])
	if err != nil {
		t.Fatal(err)
	}
	if r.Publish.Messages == 0 || !strings.HasPrefix(r.Command, "ringlog bench run") {
		t.Fatalf("result %+v command %q", r.Publish, r.Command)
	}
	plotsDir := filepath.Join(dir, "plots")
	if err := runBench([]string{"compare", "--plots", plotsDir, results[0], results[len(results)-1]}); err != nil {
		t.Fatal(err)
	}
	if svgs, _ := filepath.Glob(filepath.Join(plotsDir, "cli-mem-vs-mem-*.svg")); len(svgs) != 2 {
		t.Fatalf("comparison plots %v", svgs)
	}
}

// TestMain lets `ringlog bench single` and `bench floor` start this test binary as their
// echo or floor server process.
func TestMain(m *testing.M) {
	if size, ok := os.LookupEnv(echoChildEnv); ok {
		os.Exit(echoChildMain(size))
	}
	if spec, ok := os.LookupEnv(floorChildEnv); ok {
		os.Exit(floorChildMain(spec))
	}
	os.Exit(m.Run())
}

func TestBenchRejectsBadArguments(t *testing.T) {
	dir := t.TempDir()
	for name, args := range map[string][]string{
		"no subcommand":       {},
		"unknown subcommand":  {"nope"},
		"run without file":    {"run", "--driver", "mem"},
		"run missing file":    {"run", "--driver", "mem", filepath.Join(dir, "missing.yaml")},
		"unknown driver":      {"run", "--driver", "kafka", "../../bench/workloads/smoke.json"},
		"ringlog no broker":   {"run", "--broker", "127.0.0.1:1", "../../bench/workloads/smoke.json"},
		"compare one file":    {"compare", "a.json"},
		"disk bad size":       {"disk", "--size", "lots", "--dir", dir},
		"disk unaligned size": {"disk", "--size", "3000001", "--dir", dir},
		"disk bad backend":    {"disk", "--quick", "--backend", "magic", "--dir", dir},
		"loopback no streams": {"loopback", "--streams", "0"},
		"pingpong size 0":     {"pingpong", "--size", "0", "--count", "1"},
		"pingpong count 0":    {"pingpong", "--count", "0"},
		"pingpong bad echo":   {"pingpong", "--count", "1", "--echo", "go,epoll"},
		"pingpong bad uring":  {"pingpong", "--count", "1", "--echo", "uring:fast"},
		"single bad uring":    {"single", "--count", "1", "--rounds", "1", "--uring-floor", "uring:defer+coop"},
		"single count 0":      {"single", "--count", "0"},
		"single rounds>count": {"single", "--count", "5", "--rounds", "6"},
		"single no broker":    {"single", "--broker", "127.0.0.1:1", "--count", "1", "--rounds", "1"},
		"peers 0 rounds":      {"peers", "--rounds", "0", "../../bench/workloads/smoke.json"},
		"peers 21 rounds":     {"peers", "--rounds", "21", "../../bench/workloads/smoke.json"},
	} {
		if err := runBench(args); err == nil {
			t.Errorf("%s: %v accepted", name, args)
		}
	}
}

func TestBenchDiskWritesJSON(t *testing.T) {
	dir := t.TempDir()
	jsonPath := filepath.Join(dir, "disk.json")
	if err := runBench([]string{"disk", "--dir", dir, "--size", "4MiB", "--cell-time", "5ms", "--json", jsonPath}); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	var report struct {
		Results []struct {
			Backend string `json:"backend"`
			Ops     int64  `json:"ops"`
		} `json:"results"`
		Explanation string `json:"explanation"`
	}
	if err := json.Unmarshal(data, &report); err != nil {
		t.Fatal(err)
	}
	if len(report.Results) != 32 || report.Explanation == "" {
		t.Fatalf("%d cells, explanation %q", len(report.Results), report.Explanation)
	}
}

// TestBenchSingleAgainstBroker runs the latency comparison end to end on a tiny count: the
// figures are not checked (no timed tests), only that every series ran against the broker.
func TestBenchSingleAgainstBroker(t *testing.T) {
	addr := startBroker(t)
	out := captureStdout(t, func() {
		if err := runBench([]string{"single", "--broker", addr, "--count", "20", "--rounds", "2", "--size", "100"}); err != nil {
			t.Fatal(err)
		}
	})
	wants := []string{"pingpong 100B", "pingpong 100B proc", "raw produce acks=1", "SendSync acks=1", "Send+wait acks=1", "goal:"}
	if uringUsable() == nil {
		wants = append(wants, "echo uring ")
	}
	for _, want := range wants {
		if !strings.Contains(out, want) {
			t.Fatalf("output lacks %q:\n%s", want, out)
		}
	}
	// flush.always: a topic of its own and the write+fdatasync floor beside the ping-pongs.
	// The broker runs in this process, so --broker-pid is ours: its threads' split is printed.
	syncDir := t.TempDir()
	out = captureStdout(t, func() {
		if err := runBench([]string{"single", "--broker", addr, "--count", "20", "--rounds", "2", "--size", "100", "--queued=false",
			"--flush-always", "--sync-dir", syncDir, "--broker-pid", strconv.Itoa(os.Getpid())}); err != nil {
			t.Fatal(err)
		}
	})
	for _, want := range []string{"pingpong 100B proc", "write+fdatasync 100B", "SendSync acks=1", "against pingpong 100B p50 + write+fdatasync p50", "goal (flush.always):",
		"server CPU µs per round trip by thread (tid µs, busiest first): ", "rest "} {
		if !strings.Contains(out, want) {
			t.Fatalf("--flush-always output lacks %q:\n%s", want, out)
		}
	}
	if left, _ := os.ReadDir(syncDir); len(left) != 0 {
		t.Fatalf("the sync series left %d files in --sync-dir", len(left))
	}
	for _, process := range []string{"--process=false", "--process"} {
		if err := runBench([]string{"pingpong", "--count", "10", "--size", "64", process}); err != nil {
			t.Fatal(err)
		}
	}
	if err := uringUsable(); err != nil {
		t.Logf("io_uring echoes not run: %v", err)
		return
	}
	out = captureStdout(t, func() {
		if err := runBench([]string{"pingpong", "--count", "20", "--rounds", "2", "--size", "64", "--echo", "go,proc,uring,uring:defer+multishot+timer"}); err != nil {
			t.Fatal(err)
		}
	})
	for _, want := range []string{"pingpong 64B ", "pingpong 64B proc", "echo uring ", "echo uring:defer+multishot+timer", "against pingpong 64B"} {
		if !strings.Contains(out, want) {
			t.Fatalf("pingpong --echo output lacks %q:\n%s", want, out)
		}
	}
}

// captureStdout returns what fn printed to os.Stdout.
func captureStdout(t *testing.T, fn func()) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	saved := os.Stdout
	os.Stdout = w
	defer func() { os.Stdout = saved }()
	read := make(chan string)
	go func() {
		data, _ := io.ReadAll(r)
		read <- string(data)
	}()
	fn()
	w.Close()
	return <-read
}

// The rounds summary gives each round's ratios with who ran first, and their medians.
func TestPeersRoundsSummary(t *testing.T) {
	result := func(name string, pub, con, p99 float64) *bench.Result {
		r := &bench.Result{Driver: bench.DriverInfo{Name: name}}
		r.Publish.MBPerSec, r.Consume.MBPerSec, r.PublishLatency.P99Us = pub, con, p99
		return r
	}
	pairs := []peerPair{
		{ours: result("ringlog", 200, 100, 1000), theirs: result("nats", 100, 100, 2000), ringlogFirst: true},
		{ours: result("ringlog", 300, 150, 1000), theirs: result("nats", 100, 100, 1000)},
		{ours: result("ringlog", 100, 50, 3000), theirs: result("nats", 100, 100, 1000), ringlogFirst: true},
	}
	var out strings.Builder
	writeRoundsSummary(&out, pairs)
	for _, want := range []string{
		"round 1 (ringlog first): publish MB/s 2.00×, consume MB/s 1.00×, publish p99 0.50×",
		"round 2 (nats first): publish MB/s 3.00×, consume MB/s 1.50×, publish p99 1.00×",
		"median: publish MB/s 2.00×, consume MB/s 1.00×, publish p99 1.00×",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, out.String())
		}
	}
	if m := bench.Median([]float64{4, 1, 3, 2}); m != 2.5 {
		t.Errorf("median of an even count = %v, want 2.5", m)
	}
	if r := ratioOf(1, 0); r != 0 {
		t.Errorf("ratio against 0 = %v", r)
	}
}

func TestWriteCatchUp(t *testing.T) {
	report := &bench.CatchUpReport{
		Workload: bench.Workload{Name: "w", Consumers: 1}, Driver: bench.DriverInfo{Name: "ringlog"},
		Backlog: bench.Backlog{WrittenBytes: 4 << 30, WrittenMessages: 4 << 20, FillSeconds: 9},
		Rounds: []bench.CatchUpRound{
			{ReadFirst: true, ReadSeconds: 5, ReadMBPerSec: 859, LoopbackSeconds: 5, LoopbackMBPerSec: 1718, Share: 0.5, BrokerCPUPerGB: 0.4, ClientCPUPerGB: 0.9},
			{ReadSeconds: 4, ReadMBPerSec: 1074, LoopbackSeconds: 5, LoopbackMBPerSec: 1074, Share: 1, BrokerDiskReadBytes: -1},
		},
		MedianShare: 0.75, MedianReadMBPerSec: 966, MedianLoopbackMBPerSec: 1396,
	}
	var out strings.Builder
	writeCatchUp(&out, report)
	for _, want := range []string{
		"backlog 4GiB in 4194304 messages",
		"    1  read        5.00        859        5.00           1718    50%             0.40             0.90  0B",
		"    2  loopback    4.00       1074        5.00           1074   100%             0.00             0.00  unknown",
		"median over 2 rounds: read 966 MB/s, loopback 1396 MB/s, share 75%",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
}

// TestCatchUpWorkload: the workload keeps its own producer rate (a backlog needs one) and
// takes --backlog.
func TestCatchUpWorkload(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	if err := fs.Parse([]string{"../../bench/workloads/catch-up-1kib.yaml"}); err != nil {
		t.Fatal(err)
	}
	w, err := catchUpWorkload(fs, "4GiB")
	if err != nil {
		t.Fatal(err)
	}
	if w.BacklogSize != 4<<30 || w.ProducerRate != 20000 || w.Consumers != 1 {
		t.Fatalf("workload %+v", w)
	}
	if _, err := catchUpWorkload(fs, "lots"); err == nil {
		t.Fatal("a bad --backlog was accepted")
	}
}

// TestBenchRunMeasuredMessagesMin: `bench run` keeps a short window open until it measured
// acknowledged messages unless told otherwise (--measured-messages-min; before, only tests
// asked for it, and a short window on a starved machine measured nothing).
func TestBenchRunMeasuredMessagesMin(t *testing.T) {
	w := bench.Workload{ProducerRate: 50, Duration: bench.Duration(time.Second)}
	for _, c := range []struct {
		args []string
		want int64
	}{
		{nil, 25},
		{[]string{"--measured-messages-min", "0"}, 0},
		{[]string{"--measured-messages-min", "7"}, 7},
	} {
		fs := newBenchFlagSet("bench run", "[FLAGS] WORKLOAD")
		var f runFlags
		f.register(fs)
		if err := fs.Parse(c.args); err != nil {
			t.Fatal(err)
		}
		if got := f.measuredMessagesMin(w); got != c.want {
			t.Errorf("%v: %d, want %d", c.args, got, c.want)
		}
	}
}

// TestBenchHelp: `ringlog bench SUB -h` prints the subcommand's usage line and flags and
// exits 0, as -h does on every other command (it exited 1 with "ringlog bench: flag: help
// requested", and the usage named no WORKLOAD).
func TestBenchHelp(t *testing.T) {
	var usage strings.Builder
	usageOutput = &usage
	defer func() { usageOutput = os.Stderr }()
	for sub, line := range map[string]string{
		"run":      "usage: ringlog bench run [FLAGS] WORKLOAD\n",
		"peers":    "usage: ringlog bench peers [FLAGS] WORKLOAD\n",
		"catchup":  "usage: ringlog bench catchup [FLAGS] WORKLOAD\n",
		"compare":  "usage: ringlog bench compare [--plots DIR] A.json B.json\n",
		"disk":     "usage: ringlog bench disk [FLAGS]\n",
		"loopback": "usage: ringlog bench loopback [FLAGS]\n",
		"pingpong": "usage: ringlog bench pingpong [FLAGS]\n",
		"single":   "usage: ringlog bench single [FLAGS]\n",
		"floor":    "usage: ringlog bench floor [FLAGS]\n",
	} {
		usage.Reset()
		var stderr strings.Builder
		if code := runCLI([]string{"bench", sub, "-h"}, &stderr); code != 0 || stderr.Len() != 0 {
			t.Errorf("bench %s -h: exit %d, stderr %q", sub, code, stderr.String())
		}
		if !strings.HasPrefix(usage.String(), line) || !strings.Contains(usage.String(), "\n  -") {
			t.Errorf("bench %s -h printed:\n%s", sub, usage.String())
		}
		// A flag's value is one word (a `quoted` part of a usage names it: "-peer peers
		// run --help" until session 16).
		for _, m := range regexp.MustCompile(`(?m)^  -[a-z0-9-]+ (.+)$`).FindAllStringSubmatch(usage.String(), -1) {
			if strings.Contains(m[1], " ") {
				t.Errorf("bench %s -h: value name %q", sub, m[1])
			}
		}
	}
}

// TestBenchBrokerDefault: the bench commands that talk to a broker default to the broker
// every other command uses: a --broker before the command, then $RINGLOG_BROKER (they
// ignored both and dialled 127.0.0.1:9400).
func TestBenchBrokerDefault(t *testing.T) {
	defer func() { globalBroker = "" }()
	workload := filepath.Join(t.TempDir(), "cli.yaml")
	if err := os.WriteFile(workload, []byte(cliWorkload), 0o644); err != nil {
		t.Fatal(err)
	}
	parse := func(args ...string) string {
		fs := newBenchFlagSet("bench run", "[FLAGS] WORKLOAD")
		var f runFlags
		f.register(fs)
		if err := parseBenchArgs(fs, append(args, workload)); err != nil {
			t.Fatal(err)
		}
		if _, err := loadWorkloadArg(fs, &f); err != nil {
			t.Fatal(err)
		}
		return f.broker
	}
	t.Setenv(brokerEnv, "")
	if got := parse(); got != brokerDefault {
		t.Errorf("no --broker, no env: %q", got)
	}
	t.Setenv(brokerEnv, "10.0.0.1:1234")
	if got := parse(); got != "10.0.0.1:1234" {
		t.Errorf("from $%s: %q", brokerEnv, got)
	}
	globalBroker = "10.0.0.2:1234"
	if got := parse(); got != "10.0.0.2:1234" {
		t.Errorf("from the --broker before the command: %q", got)
	}
	// kgo speaks the Kafka protocol: its default is the Kafka listener's, never the ringlog
	// protocol's address (it answered "correlation ID mismatch" there).
	if got := parse("--driver", "kgo"); got != "127.0.0.1:9092" {
		t.Errorf("--driver kgo: %q", got)
	}
	if got := parse("--driver", "kgo", "--broker", "10.0.0.4:9092"); got != "10.0.0.4:9092" {
		t.Errorf("--driver kgo --broker: %q", got)
	}
	fs := newBenchFlagSet("bench single", "[FLAGS]")
	broker := benchBrokerFlag(fs)
	if err := fs.Parse([]string{"--broker", "10.0.0.3:1"}); err != nil || *broker != "10.0.0.3:1" {
		t.Errorf("bench single --broker: %q %v", *broker, err)
	}
}
