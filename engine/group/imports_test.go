package group

import (
	"os/exec"
	"strings"
	"testing"
)

// The boundaries of this package (on top of the module's imports_test.go): the coordinator
// links only engine, engine/batch and what they link (ring, internal/textdist), never the broker core
// (engine/shard), the server, replication or the CLI; the assignors link nothing of ours,
// so that the bundled client can run them.
func TestImportBoundaries(t *testing.T) {
	const module = "github.com/ringlog/ringlog/"
	allowed := map[string][]string{
		module + "engine/group":        {"engine", "engine/batch", "ring", "internal/textdist", "engine/group", "engine/group/assign"},
		module + "engine/group/assign": {"engine/group/assign"},
	}
	for pkg, ok := range allowed {
		out, err := exec.Command("go", "list", "-deps", pkg).Output()
		if err != nil {
			t.Fatalf("go list %s: %v", pkg, err)
		}
		for _, dep := range strings.Fields(string(out)) {
			rel, ours := strings.CutPrefix(dep, module)
			if !ours {
				continue
			}
			found := false
			for _, a := range ok {
				found = found || rel == a
			}
			if !found {
				t.Errorf("%s links %s", strings.TrimPrefix(pkg, module), rel)
			}
		}
	}
}
