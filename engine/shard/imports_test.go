package shard

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/ringlog/ringlog/"

// The seams only hold while the core stays below replication, the server and the commands:
// engine/shard must never depend on them (they depend on it), and the deterministic core
// depends on nothing of ours at all.
func TestImportRules(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	for _, c := range []struct {
		pkg       string   // relative to this directory
		self      string   // module-relative
		forbidden []string // module-relative prefixes; "" forbids every package of ours
	}{
		{"./", "engine/shard", []string{"replication", "netio", "cmd", "bench"}},
		{"./core", "engine/shard/core", []string{""}},
	} {
		out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", c.pkg).CombinedOutput()
		if err != nil {
			t.Skipf("go list %s: %v\n%s", c.pkg, err, out)
		}
		for _, dep := range strings.Fields(string(out)) {
			if !strings.HasPrefix(dep, module) {
				continue
			}
			rel := strings.TrimPrefix(dep, module)
			if rel == c.self {
				continue
			}
			for _, f := range c.forbidden {
				if f == "" || rel == f || strings.HasPrefix(rel, f+"/") {
					t.Errorf("%s depends on %s (forbidden: %q)", c.pkg, rel, f)
				}
			}
		}
	}
}
