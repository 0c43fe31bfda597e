package tuning

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

var fixedNow = func() time.Time { return time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC) }

func planFor(t *testing.T, roots Roots, opts PlanOptions) *Plan {
	t.Helper()
	topo, err := Discover(DiscoverOptions{Roots: roots})
	if err != nil {
		t.Fatal(err)
	}
	plan, err := BuildPlan(topo, opts)
	if err != nil {
		t.Fatal(err)
	}
	return plan
}

// TestApplyAndRevert applies each fixture's plan to a temporary copy of its tree, checks
// the files hold the planned values and that a fresh plan finds nothing left to change, then
// runs the revert script with sh and checks every file is restored byte for byte.
func TestApplyAndRevert(t *testing.T) {
	for _, tc := range []planCase{
		{"vm2-shared", "vm2", PlanOptions{IRQMode: IRQModeShared}},
		{"numa2-dedicated", "numa2", PlanOptions{}},
		{"isol8-dedicated", "isol8", PlanOptions{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			roots, tree := copyTree(t, tc.host)
			plan := planFor(t, roots, tc.opts)
			if len(plan.Changes()) == 0 {
				t.Fatal("fixture plan has nothing to change; the test would prove nothing")
			}
			script := filepath.Join(t.TempDir(), "revert.sh")
			result, err := Apply(plan, ApplyOptions{Roots: roots, Yes: true, RevertScript: script, Now: fixedNow})
			if err != nil {
				t.Fatal(err)
			}
			if !result.Applied || len(result.Changes) != len(plan.Changes()) {
				t.Fatalf("applied %v, %d changes of %d", result.Applied, len(result.Changes), len(plan.Changes()))
			}
			for _, change := range result.Changes {
				data, err := os.ReadFile(change.RealPath)
				if err != nil {
					t.Fatal(err)
				}
				if got := normalizeValue(change.Item, data); got != change.Item.Proposed {
					t.Errorf("%s holds %q after apply, want %q", change.Item.Path, got, change.Item.Proposed)
				}
			}
			if again := planFor(t, roots, tc.opts); len(again.Changes()) != 0 {
				t.Errorf("after apply a fresh plan still changes %d items, first %+v", len(again.Changes()), again.Changes()[0])
			}
			out, err := exec.Command("sh", script).CombinedOutput()
			if err != nil {
				t.Fatalf("revert script: %v\n%s", err, out)
			}
			mustEqualTrees(t, filepath.Join("testdata", "hosts", tc.host), tree)
		})
	}
}

func TestApplyDryRunWritesNothing(t *testing.T) {
	roots, tree := copyTree(t, "vm2")
	plan := planFor(t, roots, PlanOptions{})
	script := filepath.Join(t.TempDir(), "revert.sh")
	result, err := Apply(plan, ApplyOptions{Roots: roots, RevertScript: script})
	if err != nil {
		t.Fatal(err)
	}
	if result.Applied || len(result.Changes) == 0 || result.Changes[0].Original == nil {
		t.Errorf("dry run result %+v, want changes listed with originals and nothing applied", result)
	}
	if _, err := os.Stat(script); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("dry run wrote a revert script: %v", err)
	}
	mustEqualTrees(t, filepath.Join("testdata", "hosts", "vm2"), tree)
}

// TestApplyMissingTargetChangesNothing: one target gone means no revert script and no write.
func TestApplyMissingTargetChangesNothing(t *testing.T) {
	roots, tree := copyTree(t, "vm2")
	plan := planFor(t, roots, PlanOptions{})
	changes := plan.Changes()
	last, _ := roots.Resolve(changes[len(changes)-1].Path)
	if err := os.Remove(last); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(t.TempDir(), "revert.sh")
	_, err := Apply(plan, ApplyOptions{Roots: roots, Yes: true, RevertScript: script})
	if !errors.Is(err, ErrNothingApplied) || !strings.Contains(err.Error(), changes[len(changes)-1].Path) {
		t.Fatalf("error %v, want ErrNothingApplied naming %s", err, changes[len(changes)-1].Path)
	}
	if _, err := os.Stat(script); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("revert script written although nothing was applied: %v", err)
	}
	// Put the removed file back as it was: every other file must be untouched.
	fixtureLast, _ := fixtureRoots("vm2").Resolve(changes[len(changes)-1].Path)
	original, _ := os.ReadFile(fixtureLast)
	if err := os.WriteFile(last, original, 0o644); err != nil {
		t.Fatal(err)
	}
	mustEqualTrees(t, filepath.Join("testdata", "hosts", "vm2"), tree)
}

// TestRevertScriptCommentInjection: a hand-edited plan cannot smuggle commands into the
// revert script through item text.
func TestRevertScriptCommentInjection(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "value")
	if err := os.WriteFile(target, []byte("1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	pwned := filepath.Join(dir, "pwned")
	changes := []Change{{
		Item:     Item{Target: "x\ntouch " + pwned + "\n#", Current: "1\rtouch " + pwned, Proposed: "2"},
		RealPath: target, Original: []byte("1\n"),
	}}
	script := filepath.Join(dir, "revert.sh")
	if err := writeRevertScript(script, changes, fixedNow()); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("sh", script).CombinedOutput(); err != nil {
		t.Fatalf("revert: %v %s", err, out)
	}
	if _, err := os.Stat(pwned); err == nil {
		t.Fatal("plan text ran as a command in the revert script")
	}
}

// TestApplyFailurePartWay fails the third write: the first two are rolled back, the revert
// script is kept, and the tree is as before.
func TestApplyFailurePartWay(t *testing.T) {
	roots, tree := copyTree(t, "vm2")
	plan := planFor(t, roots, PlanOptions{})
	if len(plan.Changes()) < 3 {
		t.Fatalf("need 3 changes, plan has %d", len(plan.Changes()))
	}
	writes := 0
	failing := func(real string, data []byte) error {
		writes++
		if writes == 3 {
			return &os.PathError{Op: "write", Path: real, Err: syscall.EINVAL}
		}
		return writeTunable(real, data)
	}
	script := filepath.Join(t.TempDir(), "revert.sh")
	result, err := Apply(plan, ApplyOptions{Roots: roots, Yes: true, RevertScript: script, writeFile: failing})
	if !errors.Is(err, ErrPartiallyApplied) || !strings.Contains(err.Error(), "rolled back all 2") || !strings.Contains(err.Error(), script) {
		t.Fatalf("error %v, want ErrPartiallyApplied saying 2 rolled back and naming the script", err)
	}
	if result == nil || result.Applied {
		t.Errorf("result %+v", result)
	}
	if _, err := os.Stat(script); err != nil {
		t.Errorf("revert script missing after a partial apply: %v", err)
	}
	mustEqualTrees(t, filepath.Join("testdata", "hosts", "vm2"), tree)
}

// TestApplyReadBack: a write the "kernel" adjusts is reported, not silently trusted.
func TestApplyReadBack(t *testing.T) {
	roots, _ := copyTree(t, "vm2")
	plan := planFor(t, roots, PlanOptions{})
	clamping := func(real string, data []byte) error {
		if strings.HasSuffix(real, "read_ahead_kb") {
			data = []byte("512\n")
		}
		return writeTunable(real, data)
	}
	result, err := Apply(plan, ApplyOptions{Roots: roots, Yes: true, RevertScript: filepath.Join(t.TempDir(), "r.sh"), writeFile: clamping})
	if err != nil {
		t.Fatal(err)
	}
	if len(result.Mismatches) != 1 || !strings.Contains(result.Mismatches[0], `reads back "512"`) {
		t.Errorf("mismatches %q, want read_ahead_kb reading back 512", result.Mismatches)
	}
}

func TestApplyRevertScriptMustBeNew(t *testing.T) {
	roots, tree := copyTree(t, "vm2")
	plan := planFor(t, roots, PlanOptions{})
	script := filepath.Join(t.TempDir(), "revert.sh")
	if err := os.WriteFile(script, []byte("earlier"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Apply(plan, ApplyOptions{Roots: roots, Yes: true, RevertScript: script}); !errors.Is(err, ErrNothingApplied) {
		t.Errorf("existing revert script: %v, want ErrNothingApplied", err)
	}
	if _, err := Apply(plan, ApplyOptions{Roots: roots, Yes: true, RevertScript: filepath.Join(tree, "no", "such", "dir", "r.sh")}); !errors.Is(err, ErrNothingApplied) {
		t.Errorf("unwritable revert script: %v, want ErrNothingApplied", err)
	}
	if data, _ := os.ReadFile(script); string(data) != "earlier" {
		t.Errorf("existing revert script overwritten: %q", data)
	}
	mustEqualTrees(t, filepath.Join("testdata", "hosts", "vm2"), tree)
}

// TestApplyNeedsRoot: against the live trees a non-root apply stops before any write. The
// plan's only target is in a temporary /proc copy, so even a broken check writes nothing live.
func TestApplyNeedsRoot(t *testing.T) {
	roots, _ := copyTree(t, "vm2")
	plan := planFor(t, roots, PlanOptions{})
	live := Roots{Sys: "/sys", Proc: roots.Proc}
	var procOnly []Item
	for _, item := range plan.Items {
		if item.Action == ActionSet && strings.HasPrefix(item.Path, "/proc/sys/") {
			procOnly = append(procOnly, item)
		}
	}
	plan.Items = procOnly
	script := filepath.Join(t.TempDir(), "revert.sh")
	_, err := Apply(plan, ApplyOptions{Roots: live, Yes: true, RevertScript: script, Geteuid: func() int { return 1000 }})
	if !errors.Is(err, ErrNeedRoot) || !strings.Contains(err.Error(), "run it as root") {
		t.Fatalf("error %v, want ErrNeedRoot telling how to run it", err)
	}
	if _, err := os.Stat(script); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("revert script written by a refused apply")
	}
	// A dry run needs no root.
	if _, err := Apply(plan, ApplyOptions{Roots: live, Geteuid: func() int { return 1000 }}); err != nil {
		t.Errorf("dry run as non-root: %v", err)
	}
}

func TestApplyRejectsUnsafePlan(t *testing.T) {
	roots, _ := copyTree(t, "vm2")
	plan := planFor(t, roots, PlanOptions{})
	plan.Items = append(plan.Items, Item{Kind: "sysctl", Target: "evil", Path: "/proc/../etc/passwd", Proposed: "x", Action: ActionSet})
	if _, err := Apply(plan, ApplyOptions{Roots: roots, Yes: true, RevertScript: filepath.Join(t.TempDir(), "r.sh")}); !errors.Is(err, ErrNothingApplied) || !errors.Is(err, ErrBadPath) {
		t.Errorf("unsafe path: %v, want ErrNothingApplied and ErrBadPath", err)
	}
}

// TestRevertScriptFallback runs a revert script against files that refuse their own
// read-back form, the way the kernel does, by making the raw write fail (a directory named
// like the file cannot be written). The fallback line must then write the kernel form.
func TestRevertScriptFallback(t *testing.T) {
	dir := t.TempDir()
	ratio := filepath.Join(dir, "dirty_ratio")
	if err := os.WriteFile(ratio, []byte("0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	changes := []Change{{
		Item:     Item{Target: "vm.dirty_bytes", Path: "/proc/sys/vm/dirty_bytes", Current: "0", Proposed: "1"},
		RealPath: filepath.Join(dir, "missing-dir", "dirty_bytes"), Original: []byte("0\n"),
		FallbackPath: ratio, FallbackValue: []byte("20\n"),
	}}
	script := filepath.Join(dir, "revert.sh")
	if err := writeRevertScript(script, changes, fixedNow()); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("sh", script).CombinedOutput(); err != nil {
		t.Fatalf("revert: %v\n%s", err, out)
	}
	if data, _ := os.ReadFile(ratio); string(data) != "20\n" {
		t.Errorf("fallback wrote %q, want 20", data)
	}
	// With neither write possible the script says so and exits non-zero.
	changes[0].FallbackPath = filepath.Join(dir, "missing-dir", "dirty_ratio")
	script2 := filepath.Join(dir, "revert2.sh")
	if err := writeRevertScript(script2, changes, fixedNow()); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("sh", script2).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "could not restore") {
		t.Errorf("revert with nothing writable: err %v output %q", err, out)
	}
}

func TestShellQuote(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "it's here")
	value := "a'b\"c $HOME `x`\t\n\\n"
	script := filepath.Join(dir, "q.sh")
	text := "put() { printf '%s' \"$2\" > \"$1\"; }\nput " + shellQuote(target) + " " + shellQuote(value) + "\n"
	if err := os.WriteFile(script, []byte(text), 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("sh", script).CombinedOutput(); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	if data, _ := os.ReadFile(target); string(data) != value {
		t.Errorf("round trip through sh: %q, want %q", data, value)
	}
}
