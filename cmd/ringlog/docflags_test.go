package main

import (
	"strings"
	"testing"

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
