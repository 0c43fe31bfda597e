package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/ringlog/ringlog/internal/doccheck"
)

// ringlogCLI is the CLI as the docs may show it, read from the commands' own flag sets
// (completionSpec, the same source as the shell completion).
func ringlogCLI() doccheck.CLI {
	spec := completionSpec()
	cli := doccheck.CLI{Binary: "ringlog", Commands: map[string]bool{}, Subcommands: spec.subcommands,
		Flags:            map[string][]string{"": {"broker", "version"}}, // splitGlobalFlags
		GlobalValueFlags: map[string]bool{"broker": true}}
	for _, name := range spec.commands {
		cli.Commands[name] = true
	}
	for key, flags := range spec.flags {
		for _, f := range flags {
			cli.Flags[key] = append(cli.Flags[key], strings.TrimLeft(f, "-"))
		}
	}
	return cli
}

// docExamplesWrong are command lines the docs show because they are wrong.
var docExamplesWrong = map[string]string{
	"ringlog --partition 3 consume t": "operations.md: a command's flag before the command is a usage error",
}

// docCommands returns the ringlog command lines of the Markdown files under root.
func docCommands(t *testing.T, root string) []doccheck.Command {
	t.Helper()
	cmds, err := doccheck.CommandsUnder(root, "ringlog")
	if err != nil {
		t.Fatal(err)
	}
	return cmds
}

// Every `ringlog COMMAND [SUBCOMMAND] --flag` that README.md and docs/ show names a command,
// subcommand and flags that exist.
func TestDocsCommandsExist(t *testing.T) {
	cmds := docCommands(t, "../..")
	if len(cmds) < 100 {
		t.Fatalf("only %d ringlog command lines found in the docs: is the reader broken?", len(cmds))
	}
	for _, p := range doccheck.CheckCommands(cmds, ringlogCLI(), docExamplesWrong) {
		t.Error(p)
	}
}

// The check on a seeded fixture (testdata/docflags): a flag, a command and a subcommand
// that do not exist are each reported; real ones are not.
func TestDocsCommandsFixture(t *testing.T) {
	var got []string
	for _, p := range doccheck.CheckCommands(docCommands(t, "testdata/docflags"), ringlogCLI(), nil) {
		got = append(got, p.String())
	}
	want := []string{
		"README.md:6: `ringlog topic create orders --partitions 3 --replicas 2`: ringlog topic create has no flag --replicas",
		"README.md:7: `ringlog topics list`: ringlog has no command \"topics\"",
		"README.md:8: `ringlog group list|show`: ringlog group has no subcommand \"show\"",
		"README.md:9: `ringlog bench run --duration 10s --warmup 1s --qd 8 WORKLOAD`: ringlog bench run has no flag --qd",
		"README.md:10: `ringlog --partition 3 consume t`: ringlog has no flag --partition before the command",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// foreignFlags are flags of other tools that the docs name on their own.
var foreignFlags = map[string]string{
	"nofile": "prlimit's (operations.md)",
	"banirq": "irqbalance's (tuning.md)",
}

// knownFlags are the flags of ringlog's commands and ringlogd's: ringlogd's as the docs
// hold them, which other tests prove real — the keys of docs/ringlogd.example.yaml
// (cmd/ringlogd TestExampleConfigRoundTrip: the broker loads every key) and the flags on
// the docs' ringlogd command lines (cmd/ringlogd TestDocsFlags). ringlogd's flag set
// lives in another package main, which this test cannot import.
func knownFlags(t *testing.T) map[string]bool {
	t.Helper()
	known := map[string]bool{}
	for _, flags := range ringlogCLI().Flags {
		for _, f := range flags {
			known[f] = true
		}
	}
	data, err := os.ReadFile(filepath.Join("..", "..", "docs", "ringlogd.example.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var keys map[string]any
	if err := yaml.Unmarshal(data, &keys); err != nil {
		t.Fatal(err)
	}
	for k := range keys {
		known[k] = true
	}
	cmds, err := doccheck.CommandsUnder(filepath.Join("..", ".."), "ringlogd")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cmds {
		for _, arg := range c.Args {
			if name, ok := doccheck.FlagName(arg); ok {
				known[name] = true
			}
		}
	}
	return known
}

// flagMentionProblems checks the flags the docs under root name on their own.
func flagMentionProblems(t *testing.T, root string, known map[string]bool) []string {
	t.Helper()
	files, err := doccheck.Files(root)
	if err != nil {
		t.Fatal(err)
	}
	tree := doccheck.NewTree(root)
	var problems []string
	for _, f := range files {
		d, err := tree.Doc(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range doccheck.FlagMentions(d) {
			if _, foreign := foreignFlags[m.Name]; !foreign && !doccheck.MatchFlag(m.Name, known) {
				problems = append(problems, (doccheck.Problem{File: m.File, Line: m.Line,
					Msg: "`" + m.Text + "`: neither ringlog nor ringlogd has a flag --" + m.Name}).String())
			}
		}
	}
	return problems
}

// Every flag the docs name on their own (`--max-connections`, `--quota-*`) is a flag of
// ringlog or ringlogd, so a renamed or removed flag cannot linger in prose.
func TestDocsFlagMentionsExist(t *testing.T) {
	for _, p := range flagMentionProblems(t, filepath.Join("..", ".."), knownFlags(t)) {
		t.Error(p)
	}
}

// The check on the seeded fixture: a flag nothing has, and a pattern nothing matches.
func TestDocsFlagMentionsFixture(t *testing.T) {
	got := flagMentionProblems(t, "testdata/docflags", knownFlags(t))
	want := []string{
		"README.md:18: `--frobnicate`: neither ringlog nor ringlogd has a flag --frobnicate",
		"README.md:18: `--zzz-*`: neither ringlog nor ringlogd has a flag --zzz-*",
		"README.md:19: `--group-min/maxi-session-timeout`: neither ringlog nor ringlogd has a flag --group-min/maxi-session-timeout",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
