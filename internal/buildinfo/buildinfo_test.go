package buildinfo

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
)

func TestCommitFrom(t *testing.T) {
	stamped := []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: "0E01F0D3b7a2c9d4e5f60718293a4b5c6d7e8f90"}, {Key: "vcs.modified", Value: "false"}}
	dirty := []debug.BuildSetting{{Key: "vcs.revision", Value: "0e01f0d3b7a2c9d4"}, {Key: "vcs.modified", Value: "true"}}
	for _, tc := range []struct {
		linked   string
		settings []debug.BuildSetting
		want     string
	}{
		{"1a2b3c4d5e6f", stamped, "1a2b3c4d5e6f"}, // make release's wins
		{"unknown", stamped, "0e01f0d3b7a2"},
		{"", stamped, "0e01f0d3b7a2"},
		{"unknown", dirty, "0e01f0d3b7a2-dirty"},
		{"unknown", nil, "unknown"},
		{"unknown", []debug.BuildSetting{{Key: "vcs.revision", Value: "abc"}}, "abc"},
	} {
		if got := commitFrom(tc.linked, tc.settings); got != tc.want {
			t.Errorf("commitFrom(%q, %v) = %q, want %q", tc.linked, tc.settings, got, tc.want)
		}
	}
}

// TestPlainBuildNamesItsCommit: `go build` of ringlog in this checkout prints the
// checkout's commit in `ringlog version`, not "unknown".
func TestPlainBuildNamesItsCommit(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a binary")
	}
	if _, err := exec.Command("git", "rev-parse", "HEAD").Output(); err != nil {
		t.Skipf("not a git checkout here (%v): nothing for go build to stamp", err)
	}
	bin := filepath.Join(t.TempDir(), "ringlog")
	build := exec.Command("go", "build", "-o", bin, "../../cmd/ringlog")
	build.Env = append(os.Environ(), "GOFLAGS=-buildvcs=true") // the environment may turn it off
	if out, err := build.CombinedOutput(); err != nil {
		if strings.Contains(string(out), "VCS") {
			t.Skipf("go cannot read this checkout's VCS state: %s", out)
		}
		t.Fatalf("go build: %v\n%s", err, out)
	}
	meta, err := exec.Command("go", "version", "-m", bin).Output()
	if err != nil {
		t.Fatal(err)
	}
	var rev string
	for _, line := range strings.Split(string(meta), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "build" && strings.HasPrefix(f[1], "vcs.revision=") {
			rev = strings.TrimPrefix(f[1], "vcs.revision=")
		}
	}
	if len(rev) < 12 {
		t.Fatalf("go build stamped no revision:\n%s", meta)
	}
	out, err := exec.Command(bin, "version").Output()
	if err != nil {
		t.Fatal(err)
	}
	if want := "commit " + rev[:12]; !strings.Contains(string(out), want) {
		t.Fatalf("ringlog version: %q, want it to hold %q", out, want)
	}
}
