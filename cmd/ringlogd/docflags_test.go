package main

import (
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ringlog/ringlog/internal/doccheck"
)

// ringlogdCLI is the broker's command line as defineFlags builds it.
func ringlogdCLI() (doccheck.CLI, *flag.FlagSet) {
	fs := defineFlags(&settings{sources: map[string]source{}})
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
	return doccheck.CLI{Binary: "ringlogd", Flags: map[string][]string{"": names}}, fs
}

// docCommands returns the ringlogd command lines of the Markdown files under root.
func docCommands(t *testing.T, root string) []doccheck.Command {
	t.Helper()
	cmds, err := doccheck.CommandsUnder(root, "ringlogd")
	if err != nil {
		t.Fatal(err)
	}
	return cmds
}

// Every `ringlogd --flag` that README.md and docs/ show exists, and every flag is
// documented: the configuration keys in docs/ringlogd.example.yaml
// (TestExampleConfigRoundTrip), the command-only flags (--config, --print-config, ...) on a
// ringlogd command line in the docs, and the limits in docs/operations.md.
func TestDocsFlags(t *testing.T) {
	cmds := docCommands(t, "../..")
	if len(cmds) < 50 {
		t.Fatalf("only %d ringlogd command lines found in the docs: is the reader broken?", len(cmds))
	}
	cli, fs := ringlogdCLI()
	for _, p := range doccheck.CheckCommands(cmds, cli, nil) {
		t.Error(p)
	}
	shown := map[string]bool{}
	for _, c := range cmds {
		for _, arg := range c.Args {
			if name, ok := doccheck.FlagName(arg); ok {
				shown[name] = true
			}
		}
	}
	for name := range commandOnly {
		if !shown[name] {
			t.Errorf("no ringlogd command line in README.md or docs/ shows --%s", name)
		}
	}
	data, err := os.ReadFile(filepath.Join("..", "..", "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	operations := string(data)
	fs.VisitAll(func(f *flag.Flag) {
		if isLimit(f.Name) && !strings.Contains(operations, "--"+f.Name+"`") && !strings.Contains(operations, "--"+f.Name+" ") {
			t.Errorf("docs/operations.md does not name the limit --%s", f.Name)
		}
	})
}

// isLimit says whether a flag bounds a cost (../shared/DESIGN.md "Bounds": each limit has a
// line in docs/operations.md): the request and connection limits, and every flag named
// max (or min) something.
func isLimit(name string) bool {
	var limits limitFlags
	fs := flag.NewFlagSet("limits", flag.ContinueOnError)
	limits.register(fs)
	if fs.Lookup(name) != nil {
		return true
	}
	words := strings.Split(name, "-")
	return slices.Contains(words, "max") || slices.Contains(words, "min")
}

// The check on a seeded fixture (testdata/docflags): flags ringlogd lacks are reported,
// real ones are not.
func TestDocsFlagsFixture(t *testing.T) {
	cli, _ := ringlogdCLI()
	var got []string
	for _, p := range doccheck.CheckCommands(docCommands(t, "testdata/docflags"), cli, nil) {
		got = append(got, p.String())
	}
	want := []string{
		"README.md:6: `ringlogd --data /var/lib/ringlog --listen-addr 0.0.0.0:9400`: ringlogd has no flag --listen-addr",
		"README.md:9: `ringlogd --flush-always --fsync-interval 5ms`: ringlogd has no flag --fsync-interval",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
