package ringlog_test

// The house rules of ../shared/DESIGN.md ("Package boundaries"), checked on every test run
// and by `make lint`, in the style of Pebble's forbidden-imports lint. A rule names a set of
// packages and what they may not import, directly or (for closures) through anything.

import (
	"bufio"
	"bytes"
	"fmt"
	"os/exec"
	"sort"
	"strings"
	"testing"
)

const modulePath = "github.com/ringlog/ringlog"

// importRule forbids packages matching From from importing packages matching To.
// Closure rules look at the whole dependency closure, direct rules at the import list.
type importRule struct {
	Name    string
	From    func(pkg string) bool
	To      func(pkg string) bool
	Closure bool
}

func under(prefixes ...string) func(string) bool {
	return func(pkg string) bool {
		for _, p := range prefixes {
			if pkg == p || strings.HasPrefix(pkg, p+"/") {
				return true
			}
		}
		return false
	}
}

func exactly(names ...string) func(string) bool {
	return func(pkg string) bool {
		for _, n := range names {
			if pkg == n {
				return true
			}
		}
		return false
	}
}

// externalPrefix marks packages outside the module (standard library and dependencies) in
// the graph, whose own packages are named by their module-relative path.
const externalPrefix = "ext:"

func ours(pkg string) bool { return !strings.HasPrefix(pkg, externalPrefix) }

func not(f func(string) bool) func(string) bool { return func(p string) bool { return !f(p) } }

func and(fs ...func(string) bool) func(string) bool {
	return func(p string) bool {
		for _, f := range fs {
			if !f(p) {
				return false
			}
		}
		return true
	}
}

// importRules are the package boundaries. Package paths are relative to the module.
var importRules = []importRule{
	{Name: "engine never imports netio, replication, bench or cmd",
		From: under("engine"), To: under("netio", "replication", "bench", "cmd")},
	{Name: "the deterministic broker core (engine/shard/core) links nothing of ours",
		From: under("engine/shard/core"), To: and(ours, not(exactly("engine/shard/core"))), Closure: true},
	{Name: "replication never imports netio, cmd or bench",
		From: under("replication"), To: under("netio", "cmd", "bench")},
	{Name: "ring imports nothing of ours",
		From: under("ring"), To: ours},
	{Name: "tuning imports nothing of ours",
		From: under("tuning"), To: ours},
	{Name: "only cmd (and bench itself) imports bench",
		From: not(under("cmd", "bench")), To: under("bench")},
	{Name: "bench talks to brokers through the client, never the broker core or server",
		From: under("bench"), To: under("engine/shard", "netio", "replication"), Closure: true},
	{Name: "the wire codec links nothing of ours but engine/batch",
		From: under("netio/wire"), To: and(ours, not(exactly("engine/batch", "netio/wire"))), Closure: true},
	{Name: "the metrics scraper (ringlog top) links nothing of ours",
		From: under("netio/admin/scrape"), To: and(ours, not(exactly("netio/admin/scrape"))), Closure: true},
	{Name: "the bundled client links neither the server, the broker core, engine internals nor ring",
		From: under("netio/client"), To: and(ours, not(exactly("engine/batch", "engine/group/assign", "netio/wire", "netio/client", "netio/security/scram"))), Closure: true},
	{Name: "the SCRAM mechanism (linked by the client) links nothing of ours",
		From: under("netio/security/scram"), To: and(ours, not(exactly("netio/security/scram"))), Closure: true},
	{Name: "the listener-independent security parts never import a listener or the engine",
		From: under("netio/security"), To: and(ours, not(under("netio/security"))), Closure: false},
	{Name: "the assignors (run by a group's leader, a client) link nothing of ours",
		From: under("engine/group/assign"), To: and(ours, not(exactly("engine/group/assign"))), Closure: true},
}

// The bench and client rules above allow their own sub-packages; refine the bench rule so
// that bench may use the client (netio/client, netio/wire, and the SCRAM mechanism the
// client links) but nothing else under netio.
func init() {
	for i := range importRules {
		if strings.HasPrefix(importRules[i].Name, "bench talks") {
			importRules[i].To = and(under("engine/shard", "netio", "replication"), not(under("netio/client", "netio/wire", "netio/security/scram")))
		}
	}
}

type pkgInfo struct {
	imports []string // direct imports, module-relative where ours
	deps    []string // whole closure, module-relative where ours
}

// loadGraph asks the go command for every package of the module, test imports included.
func loadGraph(t *testing.T) map[string]pkgInfo {
	t.Helper()
	out, err := exec.Command("go", "list", "-e", "-deps=false", "-test=false",
		"-f", `{{.ImportPath}}|{{join .Imports " "}} {{join .TestImports " "}} {{join .XTestImports " "}}|{{join .Deps " "}}`,
		"./...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	rel := func(p string) string {
		if p == modulePath {
			return "."
		}
		if !strings.HasPrefix(p, modulePath+"/") {
			return externalPrefix + p
		}
		return strings.TrimPrefix(p, modulePath+"/")
	}
	graph := map[string]pkgInfo{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), "|", 3)
		if len(parts) != 3 {
			continue
		}
		var info pkgInfo
		for _, p := range strings.Fields(parts[1]) {
			info.imports = append(info.imports, rel(p))
		}
		for _, p := range strings.Fields(parts[2]) {
			info.deps = append(info.deps, rel(p))
		}
		graph[rel(parts[0])] = info
	}
	return graph
}

// violations returns one line per forbidden edge. Test-only imports count for direct rules
// (a test of engine that starts a server would hide a cycle); closures are of the package
// itself, which is what a user who imports it links.
func violations(graph map[string]pkgInfo, rules []importRule) []string {
	var out []string
	for pkg, info := range graph {
		for _, r := range rules {
			if !r.From(pkg) {
				continue
			}
			list := info.imports
			if r.Closure {
				list = info.deps
			}
			for _, dep := range list {
				if r.To(dep) && dep != pkg {
					out = append(out, fmt.Sprintf("%s imports %s: %s", pkg, dep, r.Name))
				}
			}
		}
	}
	sort.Strings(out)
	return out
}

func TestImportRules(t *testing.T) {
	graph := loadGraph(t)
	for _, must := range []string{"engine", "engine/shard", "ring", "netio", "netio/wire", "netio/client", "tuning", "bench", "cmd/ringlogd"} {
		if _, ok := graph[must]; !ok {
			t.Fatalf("package %s missing from the module graph; the rules would check nothing", must)
		}
	}
	for _, v := range violations(graph, importRules) {
		t.Error(v)
	}
}

// TestImportRulesCatchViolations proves each rule fires: a synthetic graph holding one
// forbidden edge per rule must yield exactly one violation per rule.
func TestImportRulesCatchViolations(t *testing.T) {
	graph := map[string]pkgInfo{
		"engine":       {imports: []string{"netio"}},
		"ring":         {imports: []string{"engine/batch"}},
		"tuning":       {imports: []string{"ring"}},
		"netio":        {imports: []string{"bench"}},
		"bench/x":      {deps: []string{"engine/shard"}},
		"netio/wire":   {deps: []string{"engine/batch", "engine"}},
		"netio/client": {deps: []string{"netio/wire", "engine/batch", "engine/shard", "ring", "netio"}},
	}
	got := violations(graph, importRules)
	want := map[string]int{
		"engine never":       1,
		"ring imports":       1,
		"tuning imports":     1,
		"only cmd":           1,
		"bench talks":        1,
		"the wire codec":     1,
		"the bundled client": 3,
	}
	counts := map[string]int{}
	for _, v := range got {
		for prefix := range want {
			if strings.Contains(v, ": "+prefix) {
				counts[prefix]++
			}
		}
	}
	for prefix, n := range want {
		if counts[prefix] != n {
			t.Errorf("rule %q fired %d times, want %d; all violations:\n%s", prefix, counts[prefix], n, strings.Join(got, "\n"))
		}
	}
}
