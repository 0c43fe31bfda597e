package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func fixtureFlags(host string) []string {
	dir := filepath.Join("..", "..", "tuning", "testdata", "hosts", host)
	return []string{"--sys-root", filepath.Join(dir, "sys"), "--proc-root", filepath.Join(dir, "proc")}
}

func runTuneOutput(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out strings.Builder
	err := runTune(args, &out)
	return out.String(), err
}

func TestTunePlanText(t *testing.T) {
	out, err := runTuneOutput(t, append([]string{"plan", "--shards", "3"}, fixtureFlags("numa2")...)...)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"shards: 3 on CPUs 5,6,7 (NUMA nodes 1,1,1)", "/proc/irq/121/smp_affinity_list", "why:"} {
		if !strings.Contains(out, want) {
			t.Errorf("plan output lacks %q:\n%s", want, out)
		}
	}
}

func TestTunePlanJSONFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "plan.json")
	if _, err := runTuneOutput(t, append([]string{"plan", "--format", "json", "--irq-mode", "shared", "--out", path}, fixtureFlags("vm2")...)...); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil || !strings.Contains(string(data), `"irq_mode": "shared"`) {
		t.Errorf("plan file %q, %v", data, err)
	}
}

func TestTuneCheckFailsOnImportantItems(t *testing.T) {
	out, err := runTuneOutput(t, append([]string{"check"}, fixtureFlags("numa2")...)...)
	if !errors.Is(err, errTuneCheckFailed) {
		t.Fatalf("check on an untuned host: %v", err)
	}
	if !strings.Contains(out, "irqbalance") || !strings.Contains(out, "clocksource: hpet -> tsc") {
		t.Errorf("check output lacks the important items:\n%s", out)
	}
}

func TestTuneApplyDryRunAndBadInput(t *testing.T) {
	out, err := runTuneOutput(t, append([]string{"apply"}, fixtureFlags("vm2")...)...)
	if err != nil || !strings.Contains(out, "dry run:") || !strings.Contains(out, "would set") {
		t.Errorf("dry run: %v\n%s", err, out)
	}
	bad := [][]string{
		{"plan", "--cpus", "0-63"},
		{"plan", "--cpus", "zero"},
		{"plan", "--shards", "-2"},
		{"plan", "--irq-mode", "sometimes"},
		{"plan", "--format", "yaml"},
		{"apply", "--plan", filepath.Join(t.TempDir(), "absent.json")},
		{"frobnicate"},
	}
	for _, args := range bad {
		if _, err := runTuneOutput(t, append(args, fixtureFlags("vm2")...)...); err == nil {
			t.Errorf("ringlog tune %v: no error", args)
		}
	}
	_, err = runTuneOutput(t, append([]string{"plan", "--cpus", "0-63"}, fixtureFlags("vm2")...)...)
	if err == nil || !strings.Contains(err.Error(), "2-63") {
		t.Errorf("nonexistent cpus: %v", err)
	}
}

// TestTuneApplyYesOnSnapshot runs the real binary end to end: snapshot a fixture, apply to it
// with --yes, then run the revert script.
func TestTuneApplyYesOnSnapshot(t *testing.T) {
	dir := t.TempDir()
	snap := filepath.Join(dir, "snap")
	if _, err := runTuneOutput(t, append([]string{"snapshot", "--out", snap}, fixtureFlags("vm2")...)...); err != nil {
		t.Fatal(err)
	}
	roots := []string{"--sys-root", filepath.Join(snap, "sys"), "--proc-root", filepath.Join(snap, "proc")}
	script := filepath.Join(dir, "revert.sh")
	before, err := os.ReadFile(filepath.Join(snap, "proc", "sys", "vm", "swappiness"))
	if err != nil {
		t.Fatal(err)
	}
	out, err := runTuneOutput(t, append([]string{"apply", "--yes", "--revert-script", script}, roots...)...)
	if err != nil || !strings.Contains(out, "applied") {
		t.Fatalf("apply --yes: %v\n%s", err, out)
	}
	if after, _ := os.ReadFile(filepath.Join(snap, "proc", "sys", "vm", "swappiness")); string(after) != "10\n" {
		t.Errorf("swappiness after apply %q", after)
	}
	if out, err := runTuneOutput(t, append([]string{"plan"}, roots...)...); err != nil || !strings.Contains(out, "0 changes") {
		t.Errorf("plan after apply: %v\n%s", err, out)
	}
	if out, err := exec.Command("sh", script).CombinedOutput(); err != nil {
		t.Fatalf("revert: %v %s", err, out)
	}
	if after, _ := os.ReadFile(filepath.Join(snap, "proc", "sys", "vm", "swappiness")); string(after) != string(before) {
		t.Errorf("swappiness after revert %q, want %q", after, before)
	}
}

func TestTuneDataDirMissing(t *testing.T) {
	_, err := runTuneOutput(t, append([]string{"plan", "--data-dir", filepath.Join(t.TempDir(), "absent")}, fixtureFlags("vm2")...)...)
	if err == nil || !strings.Contains(err.Error(), "--data-dir") {
		t.Errorf("absent data dir: %v", err)
	}
}

func TestTuneShow(t *testing.T) {
	out, err := runTuneOutput(t, append([]string{"show"}, fixtureFlags("isol8")...)...)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"isolated": [`, `"name": "eth0-TxRx-3"`, `"name": "nvme0n1"`, `"mount_point": "/"`, `"journal": "yes"`} {
		if !strings.Contains(out, want) {
			t.Errorf("show output lacks %s", want)
		}
	}
}

// `ringlog tune SUB -h` prints the subcommand's usage line and flags and succeeds, as -h
// does on every other command (it failed with "ringlog tune: flag: help requested").
func TestTuneHelp(t *testing.T) {
	for _, sub := range []string{"check", "plan", "apply", "show", "snapshot"} {
		out, err := runTuneOutput(t, sub, "-h")
		if err != nil || !strings.HasPrefix(out, "usage: ringlog tune "+sub+" [FLAGS]\n") || !strings.Contains(out, "\n  -sys-root") {
			t.Errorf("tune %s -h: %v\n%s", sub, err, out)
		}
	}
}
