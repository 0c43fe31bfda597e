package main

import (
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

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

// docDefault reads a default as docs/operations.md writes it in prose: "64 MiB", "4,096",
// "10 min", "30 s", "unlimited". It returns the value in the flag's own terms (bytes, a
// count, a time.Duration's string) and false when the cell is not one of these forms
// ("a quarter of --max-connections").
func docDefault(cell string) (string, bool) {
	cell = strings.TrimSpace(cell)
	if cell == "unlimited" {
		return "0", true
	}
	m := regexp.MustCompile(`^(\d[\d,]*)(?: (KiB|MiB|GiB|s|min))?$`).FindStringSubmatch(cell)
	if m == nil {
		return "", false
	}
	n, err := strconv.ParseInt(strings.ReplaceAll(m[1], ",", ""), 10, 64)
	if err != nil {
		return "", false
	}
	switch m[2] {
	case "KiB":
		n <<= 10
	case "MiB":
		n <<= 20
	case "GiB":
		n <<= 30
	case "s":
		return (time.Duration(n) * time.Second).String(), true
	case "min":
		return (time.Duration(n) * time.Minute).String(), true
	}
	return strconv.FormatInt(n, 10), true
}

// defaultMatches says whether a doc's default cell states the flag's default: its first
// code span is the default as the flag prints it (`./data`, `30s`, `67108864`), or, without
// one, the cell is a plain value (docDefault) or says off/none/empty for a zero default.
// Cells in other words ("one per CPU", "a quarter of ...") are not compared: ok is false.
func defaultMatches(cell string, f *flag.Flag) (match, ok bool) {
	def := f.DefValue
	if spans := doccheck.CodeSpans(cell); len(spans) > 0 && strings.HasPrefix(cell, "`") {
		if strings.HasPrefix(spans[0], "--") || strings.HasPrefix(spans[0], "$") {
			return false, false // the default is another flag's value, or the environment's
		}
		if spans[0] == def {
			return true, true
		}
		// A duration written as its number ("`0` (24h)"), a quoted empty string.
		if d, err := time.ParseDuration(def); err == nil && d == 0 && spans[0] == "0" || def == "" && spans[0] == `""` {
			return true, true
		}
		return false, true
	}
	word := strings.Fields(cell + " x")[0]
	switch word {
	case "off", "none":
		return def == "" || def == "0" || def == "false" || def == "0s" || def == "off", true
	case "refused": // a limit without a flag of its own
		return false, false
	}
	if v, ok := docDefault(cell); ok {
		if _, err := strconv.ParseInt(def, 10, 64); err == nil {
			return v == def, true
		}
		if d, err := time.ParseDuration(def); err == nil {
			return v == d.String(), true
		}
		return v == def, true
	}
	return false, false
}

// The defaults docs/operations.md gives for ringlogd's flags, in every table with a flag
// column and a default column, are the flags' defaults.
func TestDocsFlagDefaults(t *testing.T) {
	_, fs := ringlogdCLI()
	data, err := os.ReadFile(filepath.Join("..", "..", "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	compared := 0
	for _, table := range doccheck.Tables(data) {
		flagColumn := ""
		for _, h := range table.Header {
			if h == "flag" || h == "`ringlogd` flag" {
				flagColumn = h
			}
		}
		if flagColumn == "" || !slices.Contains(table.Header, "default") {
			continue
		}
		for _, r := range table.Rows {
			spans := doccheck.CodeSpans(table.Cell(r, flagColumn))
			if len(spans) != 1 { // no flag, or several sharing one cell
				continue
			}
			name, ok := doccheck.FlagName(strings.Fields(spans[0])[0])
			if !ok {
				continue
			}
			f := fs.Lookup(name)
			if f == nil {
				t.Errorf("docs/operations.md:%d: ringlogd has no flag --%s", r.Line, name)
				continue
			}
			match, ok := defaultMatches(table.Cell(r, "default"), f)
			if !ok {
				continue
			}
			compared++
			if !match {
				t.Errorf("docs/operations.md:%d: --%s defaults to %q there, %q in ringlogd", r.Line, name, table.Cell(r, "default"), f.DefValue)
			}
		}
	}
	if compared < 40 {
		t.Errorf("only %d flag defaults compared: is the table reader broken?", compared)
	}
}

// defaultMatches on the forms the docs use: a flag's printed default in a code span, a
// duration's number, prose sizes, counts and times, off/none, and cells it leaves alone.
func TestDocsDefaultMatches(t *testing.T) {
	for _, c := range []struct {
		cell, def string
		match, ok bool
	}{
		{"`./data`", "./data", true, true},
		{"`./tmp`", "./data", false, true},
		{"`0` (24h)", "0s", true, true},
		{"`10s`", "15s", false, true},
		{"64 MiB", "67108864", true, true},
		{"4,096", "4096", true, true},
		{"4,096", "4095", false, true},
		{"30 s", "30s", true, true},
		{"10 min", "10m0s", true, true},
		{"unlimited", "0", true, true},
		{"off", "", true, true},
		{"off", "5", false, true},
		{"`--max-frame-bytes`", "0", false, false},
		{"`$RINGLOG_CONFIG`", "", false, false},
		{"a quarter of `--max-connections`", "0", false, false},
		{"refused", "", false, false},
	} {
		match, ok := defaultMatches(c.cell, &flag.Flag{DefValue: c.def})
		if match != c.match || ok != c.ok {
			t.Errorf("defaultMatches(%q, %q) = %v, %v; want %v, %v", c.cell, c.def, match, ok, c.match, c.ok)
		}
	}
}
