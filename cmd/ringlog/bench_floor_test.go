package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestBenchFloor runs both floors against server processes (this test binary, through
// TestMain) and sets two saved broker results against them.
func TestBenchFloor(t *testing.T) {
	dir := t.TempDir()
	produce := filepath.Join(dir, "produce.json")
	backlog := filepath.Join(dir, "backlog.json")
	for path, body := range map[string]string{
		produce: `{"format":"ringlog-bench-result/1","publish":{"bytes":1000000000},"broker_cpu":{"source":"t","per_gb_ingested":1.5}}`,
		backlog: `{"format":"ringlog-bench-result/1","consume":{"bytes":5},"backlog":{"broker_cpu_per_gb":0.6,"drained":true},"broker_cpu":{"source":"t"}}`,
	} {
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	scratch := filepath.Join(dir, "scratch")
	if err := os.Mkdir(scratch, 0o755); err != nil {
		t.Fatal(err)
	}
	jsonOut := filepath.Join(dir, "floor.json")
	out := captureStdout(t, func() {
		err := runBench([]string{"floor", "--dir", scratch, "--warmup", "0s", "--duration", "300ms",
			"--frame", "64KiB", "--serve-file", "16MiB", "--rate", "2000", "--against", produce, "--against", backlog, "--json", jsonOut})
		if err != nil {
			t.Fatal(err)
		}
	})
	t.Logf("\n%s", out)
	for _, want := range []string{"floor ingest (2 conns × 64KiB frames, pwrite to 16 files, paced to 2000 MB/s)", "floor serve (4 conns × 1MiB requests",
		"produce.json: broker 1.500 CPU-s per GB ingested ÷ floor", "backlog.json: broker 0.600 CPU-s per GB of backlog served ÷ floor"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	var report floorReport
	data, err := os.ReadFile(jsonOut)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &report); err != nil {
		t.Fatal(err)
	}
	if len(report.Floors) != 2 || len(report.Against) != 2 || report.Floors[0].Bytes <= 0 || report.Against[0].Ratio <= 0 {
		t.Fatalf("report %+v", report)
	}
	if left, _ := filepath.Glob(filepath.Join(scratch, "*")); len(left) != 0 {
		t.Fatalf("the servers left %v", left)
	}
}

func TestBenchFloorRejectsArguments(t *testing.T) {
	for name, args := range map[string][]string{
		"mode":         {"floor", "--mode", "sideways"},
		"frame":        {"floor", "--frame", "lots"},
		"huge frame":   {"floor", "--frame", "1GiB"},
		"extra":        {"floor", "x"},
		"no such file": {"floor", "--mode", "ingest", "--duration", "1ms", "--warmup", "0s", "--dir", "/nonexistent/floor"},
	} {
		if err := runBench(args); err == nil {
			t.Errorf("%s: accepted %q", name, args)
		}
	}
}
