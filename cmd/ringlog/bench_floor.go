package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/ringlog/ringlog/bench"
)

func init() {
	benchCommands["floor"] = benchCommand{"CPU-s per GB of a minimal server (pwrite ingest, sendfile serve) in another process: the floor under the broker's figure", benchFloor}
}

// floorChildEnv, set to a JSON floorServerSpec, makes this binary run a floor server
// (bench.FloorIngestServer or bench.FloorServeServer) on 127.0.0.1 instead of its command
// line: it prints the address on stdout and exits once stdin closes and its connections
// end. startFloorServer sets it.
const floorChildEnv = "RINGLOG_BENCH_FLOOR_SERVER"

// floorServerSpec is what the floor server child is told.
type floorServerSpec struct {
	Mode      string `json:"mode"`
	Dir       string `json:"dir"`
	Files     int    `json:"files"`
	Segment   int64  `json:"segment"`
	ServeFile int64  `json:"serve_file"`
}

// floorChildMain runs the floor server child and returns its exit status.
func floorChildMain(specText string) int {
	if err := runFloorChild(specText, os.Stdin, os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "ringlog floor server: %v\n", err)
		return 1
	}
	return 0
}

func runFloorChild(specText string, stdin io.Reader, stdout io.Writer) error {
	var spec floorServerSpec
	if err := json.Unmarshal([]byte(specText), &spec); err != nil {
		return fmt.Errorf("%s: %w", floorChildEnv, err)
	}
	var serve func(net.Listener) error
	var closeServer func() error
	switch spec.Mode {
	case bench.FloorIngest:
		s, err := bench.NewFloorIngestServer(spec.Dir, spec.Files, spec.Segment)
		if err != nil {
			return err
		}
		serve, closeServer = s.Serve, s.Close
	case bench.FloorServe:
		s, err := bench.NewFloorServeServer(spec.Dir, spec.ServeFile)
		if err != nil {
			return err
		}
		serve, closeServer = s.Serve, s.Close
	default:
		return fmt.Errorf("mode %q", spec.Mode)
	}
	defer closeServer()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	served := make(chan error, 1)
	go func() { served <- serve(ln) }()
	fmt.Fprintln(stdout, ln.Addr().String())
	_, _ = io.Copy(io.Discard, stdin) // the parent closes it when done
	ln.Close()
	return <-served
}

// startFloorServer runs this binary again as a floor server and returns its address and
// process id, and a stop function that ends it (after the client closed its connections).
func startFloorServer(spec floorServerSpec) (string, int, func() error, error) {
	self, err := os.Executable()
	if err != nil {
		return "", 0, nil, err
	}
	specText, err := json.Marshal(spec)
	if err != nil {
		return "", 0, nil, err
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), floorChildEnv+"="+string(specText))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return "", 0, nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return "", 0, nil, err
	}
	if err := cmd.Start(); err != nil {
		return "", 0, nil, fmt.Errorf("floor server: %w", err)
	}
	stop := func() error {
		stdin.Close()
		if err := cmd.Wait(); err != nil {
			return fmt.Errorf("floor server: %w", err)
		}
		return nil
	}
	addr, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		_ = stop()
		return "", 0, nil, fmt.Errorf("floor server: no address: %w", err)
	}
	return strings.TrimSpace(addr), cmd.Process.Pid, stop, nil
}

// floorReport is what --json writes.
type floorReport struct {
	Started time.Time           `json:"started"`
	Floors  []bench.FloorResult `json:"floors"`
	Against []floorRatio        `json:"against,omitempty"`
}

// floorRatio is a broker result's CPU per GB divided by the floor's of the same kind.
type floorRatio struct {
	File        string  `json:"file"`
	Mode        string  `json:"mode"`
	BrokerPerGB float64 `json:"broker_cpu_per_gb"`
	FloorPerGB  float64 `json:"floor_cpu_per_gb"`
	Ratio       float64 `json:"ratio"`
}

func benchFloor(args []string) error {
	fs := newBenchFlagSet("bench floor", "[FLAGS]")
	mode := fs.String("mode", "both", "ingest, serve or both")
	dir := fs.String("dir", ".", "directory for the scratch files (use the broker's data disk)")
	conns := fs.Int("conns", 2, "ingest: client connections (the produce-only workloads' producers)")
	frame := fs.String("frame", "256KiB", "ingest: bytes per request frame")
	window := fs.Int("window", 16, "ingest: frames in flight per connection")
	files := fs.Int("files", 16, "ingest: files the frames are appended to, round-robin (partitions)")
	segment := fs.String("segment", "64MiB", "ingest: a file is truncated and rewritten from 0 at this size (the disk holds files × segment)")
	serveConns := fs.Int("serve-conns", 4, "serve: client connections (consume-only-1kib's consumers)")
	chunk := fs.String("chunk", "1MiB", "serve: bytes per request (the bundled consumer's fetch size per partition)")
	serveFile := fs.String("serve-file", "256MiB", "serve: size of the page-cached file sent")
	rate := fs.Float64("rate", 0, "pace the clients to about this many MB/s (10^6 bytes) in total, e.g. the broker's own figure (0: as fast as the server goes)")
	warmup := fs.Duration("warmup", 2*time.Second, "unmeasured time before each measurement")
	duration := fs.Duration("duration", 10*time.Second, "measured time of each floor")
	jsonOut := fs.String("json", "", "also write the results as JSON to this file")
	var against listFlag
	fs.Var(&against, "against", "a result file of ringlog bench run (repeatable): print its broker CPU per GB ÷ the floor's (ingested ÷ ingest; a backlog's ÷ serve)")
	if err := parseBenchArgs(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	var modes []string
	switch *mode {
	case "both":
		modes = []string{bench.FloorIngest, bench.FloorServe}
	case bench.FloorIngest, bench.FloorServe:
		modes = []string{*mode}
	default:
		return fmt.Errorf("--mode %q: want ingest, serve or both", *mode)
	}
	sizes := map[string]int64{}
	for name, text := range map[string]string{"frame": *frame, "segment": *segment, "chunk": *chunk, "serve-file": *serveFile} {
		n, err := bench.ParseBytes(text)
		if err != nil {
			return fmt.Errorf("--%s: %w", name, err)
		}
		sizes[name] = n
	}
	ctx, stop := commandContext()
	defer stop()
	report := floorReport{Started: time.Now().UTC()}
	for _, m := range modes {
		cfg := bench.FloorConfig{Mode: m, Conns: *conns, FrameBytes: int(min(sizes["frame"], bench.FloorFrameBytesMax+1)),
			Window: *window, Rate: int64(*rate * 1e6), Warmup: *warmup, Duration: *duration}
		spec := floorServerSpec{Mode: m, Dir: *dir, Files: *files, Segment: sizes["segment"], ServeFile: sizes["serve-file"]}
		if m == bench.FloorServe {
			cfg.Conns, cfg.FrameBytes = *serveConns, int(min(sizes["chunk"], bench.FloorFrameBytesMax+1))
		}
		if err := cfg.Validate(); err != nil {
			return err
		}
		addr, pid, stopServer, err := startFloorServer(spec)
		if err != nil {
			return err
		}
		res, err := bench.RunFloor(ctx, addr, pid, cfg)
		if serr := stopServer(); err == nil {
			err = serr
		}
		if err != nil {
			return err
		}
		report.Floors = append(report.Floors, res)
		fmt.Println(floorLine(res, spec))
	}
	for _, path := range against {
		ratios, err := floorRatios(path, report.Floors)
		if err != nil {
			return err
		}
		for _, r := range ratios {
			fmt.Printf("%s: broker %.3f CPU-s per GB %s ÷ floor %.3f = %.2f×\n", r.File, r.BrokerPerGB,
				map[string]string{bench.FloorIngest: "ingested", bench.FloorServe: "of backlog served"}[r.Mode], r.FloorPerGB, r.Ratio)
		}
		report.Against = append(report.Against, ratios...)
	}
	if *jsonOut != "" {
		data, err := json.MarshalIndent(report, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(*jsonOut, append(data, '\n'), 0o644); err != nil {
			return fmt.Errorf("write %s: %w", *jsonOut, err)
		}
	}
	return nil
}

func floorLine(r bench.FloorResult, spec floorServerSpec) string {
	what := fmt.Sprintf("%d conns × %s frames, pwrite to %d files", r.Conns, bench.FormatBytes(int64(r.FrameBytes)), spec.Files)
	if r.Mode == bench.FloorServe {
		what = fmt.Sprintf("%d conns × %s requests, sendfile of a %s cached file", r.Conns, bench.FormatBytes(int64(r.FrameBytes)), bench.FormatBytes(spec.ServeFile))
	}
	if r.Rate > 0 {
		what += fmt.Sprintf(", paced to %.0f MB/s", float64(r.Rate)/1e6)
	}
	return fmt.Sprintf("floor %s (%s): %.0f MB/s over %.1f s; server (pid %d) %.2f CPU-s = %.3f CPU-s per GB; client process %.2f CPU-s",
		r.Mode, what, r.MBPerSec, r.Seconds, r.ServerPID, r.ServerCPUSeconds, r.CPUPerGB, r.ClientCPUSeconds)
}

// floorRatios divides a bench run result's broker CPU per GB by the matching floor's: a
// backlog's (catch-up) by serve, otherwise the ingested figure by ingest.
func floorRatios(path string, floors []bench.FloorResult) ([]floorRatio, error) {
	r, err := bench.LoadResult(path)
	if err != nil {
		return nil, err
	}
	floorOf := map[string]float64{}
	for _, f := range floors {
		floorOf[f.Mode] = f.CPUPerGB
	}
	var out []floorRatio
	add := func(mode string, broker float64) {
		if floor := floorOf[mode]; broker > 0 && floor > 0 {
			out = append(out, floorRatio{File: path, Mode: mode, BrokerPerGB: broker, FloorPerGB: floor, Ratio: broker / floor})
		}
	}
	if r.Backlog != nil {
		add(bench.FloorServe, r.Backlog.BrokerCPUPerGB)
	} else if r.Consume.Bytes == 0 {
		add(bench.FloorIngest, r.BrokerCPU.PerGBIngested)
	}
	if len(out) == 0 {
		return nil, errors.New(path + ": no broker CPU per GB to set against the floors measured (want a produce-only result with --mode ingest, or a backlog result with --mode serve)")
	}
	return out, nil
}
