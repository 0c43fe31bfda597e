package doccheck

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The real tree: README.md and docs/**/*.md link only to files that exist in the
// repository, and only to anchors their files have.
func TestDocsLinks(t *testing.T) {
	root := "../.."
	files, err := Files(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 10 || files[0] != "README.md" || !slices.Contains(files, "docs/operations.md") {
		t.Fatalf("files: %v", files)
	}
	problems, err := NewTree(root).CheckLinks(files)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
}

// The checker itself, on testdata/links: each seeded bad link is reported, at its line,
// and nothing else (good links, links in code, external links).
func TestCheckLinksFixture(t *testing.T) {
	root := "testdata/links"
	files, err := Files(root)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"README.md", "docs/a.md", "docs/sub/README.md"}; !slices.Equal(files, want) {
		t.Fatalf("files %v, want %v", files, want)
	}
	problems, err := NewTree(root).CheckLinks(files)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range problems {
		got = append(got, p.String())
	}
	want := []string{
		`README.md:6: link "docs/missing.md": no file docs/missing.md`,
		`README.md:6: link "docs/a.md#no-such-heading": docs/a.md has no heading with anchor #no-such-heading (did you mean #setext-heading?)`,
		`README.md:7: link "../outside.md" leaves the repository`,
		`README.md:15: link "docs/gone.md": no file docs/gone.md`,
		`docs/a.md:20: link "#timing-1116-1118-utc": docs/a.md has no heading with anchor #timing-1116-1118-utc (did you mean #timing-11161118-utc?)`,
		`docs/a.md:20: link "#dup-2": docs/a.md has no heading with anchor #dup-2 (did you mean #dup-1?)`,
		`docs/a.md:21: link "#timing-11:16–11:18-utc": docs/a.md has no heading with anchor #timing-11:16–11:18-utc (did you mean #timing-11161118-utc?)`,
		`docs/a.md:21: link "b.yaml#top": docs/b.yaml is not Markdown, so it has no anchor "top"`,
		`docs/a.md:21: link "sub/#x": a #fragment on a directory`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// Slug follows github-slugger's fixtures (rendered on github.com): punctuation, dashes
// other than '-', and symbols drop out; spaces become '-' one for one; '_' and non-ASCII
// letters stay.
func TestSlug(t *testing.T) {
	for _, c := range []struct{ text, want string }{
		{"alpha", "alpha"},
		{"bravoCharlieDelta", "bravocharliedelta"},
		{"heading with a - dash", "heading-with-a---dash"},
		{"heading with an _ underscore", "heading-with-an-_-underscore"},
		{"heading with a period.txt", "heading-with-a-periodtxt"},
		{"exchange.bind_headers(exchange, routing [, bindCallback])", "exchangebind_headersexchange-routing--bindcallback"},
		{"en–dash", "endash"},
		{"em—dash", "emdash"},
		{"I ♥ unicode", "i--unicode"},
		{"Привет non-latin 你好", "привет-non-latin-你好"},
		{"apostrophe’s should be trimmed", "apostrophes-should-be-trimmed"},
		{"CPU per gigabyte (issue 14), 2026-12-01 11:16–11:18 UTC", "cpu-per-gigabyte-issue-14-2026-12-01-11161118-utc"},
		{"Security APIs (24–30)", "security-apis-2430"},
		{"a → b × c ≤ d", "a--b--c--d"},
	} {
		if got := Slug(c.text); got != c.want {
			t.Errorf("Slug(%q) = %q, want %q", c.text, got, c.want)
		}
	}
}

// Duplicates count per original slug, and a suffixed slug that a heading already took is
// skipped (github-slugger's "Repetition" fixtures).
func TestSluggerDuplicates(t *testing.T) {
	var s Slugger
	for _, c := range []struct{ text, want string }{
		{"echo", "echo"}, {"echo", "echo-1"}, {"echo 1", "echo-1-1"}, {"echo-1", "echo-1-2"}, {"echo", "echo-2"},
		{"foxtrot-1", "foxtrot-1"}, {"foxtrot", "foxtrot"}, {"foxtrot", "foxtrot-2"},
	} {
		if got := s.Slug(c.text); got != c.want {
			t.Errorf("Slug(%q) = %q, want %q", c.text, got, c.want)
		}
	}
}

// HeadingText reads what GitHub renders: markup goes, code and link text stay.
func TestHeadingText(t *testing.T) {
	for _, c := range []struct{ raw, want string }{
		{"`ringlog bench run` and workload files", "ringlog bench run and workload files"},
		{"Preallocated space (`preallocate.bytes`)", "Preallocated space (preallocate.bytes)"},
		{"Committed offsets in `__consumer_offsets`", "Committed offsets in __consumer_offsets"},
		{"**Bold**, _emphasis_, __strong__ and snake_case", "Bold, emphasis, strong and snake_case"},
		{"[a link](x.md#y) and <b>html</b>", "a link and html"},
		{`A &amp; B \_ C`, "A & B _ C"},
	} {
		if got := HeadingText(c.raw); got != c.want {
			t.Errorf("HeadingText(%q) = %q, want %q", c.raw, got, c.want)
		}
	}
}

// Commands finds invocations, not mentions, and reads each up to the end of its shell
// command: pipes, &&, comments and redirections end it, synopsis brackets do not, a
// $(...) is a command of its own, continuation lines join.
func TestCommands(t *testing.T) {
	d, err := NewTree("testdata/commands").Doc("README.md")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range Commands(d, "ringlog", "ringlogd") {
		got = append(got, fmt.Sprintf("%d %s %s", c.Line, c.Binary, strings.Join(c.Args, " ")))
	}
	want := []string{
		"5 ringlog bench run --driver ringlog|kgo --cpus LIST | --tune-plan FILE WORKLOAD",
		"10 ringlogd --data d1",
		"11 ringlog offset --at ten minutes ago", // the substitution, read first
		"11 ringlog produce t --acks all",
		"11 ringlog consume t --from @$ --exit-at-end",
		"12 ringlogd --shards 2 --storage direct",
		"19 ringlog topic create t --partitions 3",
		"20 ringlogd --data x",
	}
	if !slices.Equal(got, want) {
		t.Errorf("commands:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// CheckCommands on a small command tree: unknown commands, subcommands and flags, flags
// before the command, exemptions, placeholders and alternatives.
func TestCheckCommands(t *testing.T) {
	cli := CLI{Binary: "tool", Commands: map[string]bool{"topic": true, "produce": true},
		Subcommands: map[string][]string{"topic": {"create", "list"}},
		Flags: map[string][]string{"": {"broker"}, "produce": {"acks", "broker"},
			"topic create": {"partitions"}, "topic list": {"json"}},
		GlobalValueFlags: map[string]bool{"broker": true}}
	var cmds []Command
	for i, line := range []string{
		"tool --broker h:1 topic create t --partitions 3", // good
		"tool topic create|list --json",                   // good: --json is list's
		"tool topic SUBCOMMAND --json",                    // good: some subcommand has it
		"tool NAME --anything",                            // a placeholder command: not checked
		"tool --broker=h:1 produce t --acks all -h",       // good
		"tool topic delete t",
		"tool topics list",
		"tool topic create t --json",
		"tool --acks 1 produce t",
		"tool produce t --compression zstd",
		"tool --bad 1 exempt",
	} {
		words := strings.Fields(line)
		cmds = append(cmds, Command{File: "f.md", Line: i + 1, Binary: words[0], Args: words[1:]})
	}
	var got []string
	for _, p := range CheckCommands(cmds, cli, map[string]string{"tool --bad 1 exempt": "shown as a mistake"}) {
		got = append(got, p.String())
	}
	want := []string{
		"f.md:6: `tool topic delete t`: tool topic has no subcommand \"delete\"",
		"f.md:7: `tool topics list`: tool has no command \"topics\"",
		"f.md:8: `tool topic create t --json`: tool topic create has no flag --json",
		"f.md:9: `tool --acks 1 produce t`: tool has no flag --acks before the command",
		"f.md:10: `tool produce t --compression zstd`: tool produce has no flag --compression",
	}
	if !slices.Equal(got, want) {
		t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// MatchFlag reads the docs' flag patterns: a name, prefix-*, and a-min/max-b.
func TestMatchFlag(t *testing.T) {
	flags := map[string]bool{"quota-bytes": true, "group-min-session-timeout": true, "group-max-session-timeout": true, "acks": true}
	for pattern, want := range map[string]bool{
		"acks": true, "ack": false, "quota-*": true, "quotas-*": false,
		"group-min/max-session-timeout": true, "group-min/maxi-session-timeout": false,
	} {
		if got := MatchFlag(pattern, flags); got != want {
			t.Errorf("MatchFlag(%q) = %v, want %v", pattern, got, want)
		}
	}
}

// Tables: the heading above each table, escaped pipes (in and out of code spans), short
// rows padded, tables inside fenced code ignored, a table ended by a non-table line.
func TestTables(t *testing.T) {
	src := "# Top\n\n| a | b |\n|---|:-:|\n| 1 | `x\\|y` |\n| 2 |\nafter\n\n## Second `code`\n\n```\n| not | a table |\n|---|---|\n```\n" +
		"a|b\n|c|d|\n|-|-|\n|e\\|f|g|\n"
	got := fmt.Sprintf("%+v", Tables([]byte(src)))
	want := "[{Heading:Top Line:3 Header:[a b] Rows:[{Line:5 Cells:[1 `x|y`]} {Line:6 Cells:[2 ]}]} " +
		"{Heading:Second code Line:16 Header:[c d] Rows:[{Line:18 Cells:[e|f g]}]}]"
	if got != want {
		t.Errorf("Tables:\n%s\nwant\n%s", got, want)
	}
	if got := CodeSpans("`--a` and ``b ` c`` and `d"); !slices.Equal(got, []string{"--a", "b ` c"}) {
		t.Errorf("CodeSpans = %q", got)
	}
}

// testNameMention is a Go test, benchmark or fuzz target named in the docs, optionally a
// prefix ending in `*` (`TestKgoACL*`) or, inside a -run pattern, in `.*` (`TestAsync.*`).
var testNameMention = regexp.MustCompile(`\b(?:Test|Benchmark|Fuzz)[A-Z][A-Za-z0-9_]*(?:\.\*|\*)?`)

// runPattern ends the text before a test name that go test's -run (or -bench, -fuzz) reads
// as a pattern.
var runPattern = regexp.MustCompile(`-(?:run|bench|fuzz)[ =]['"]?\^?$`)

// testFuncs returns the names of the Test, Benchmark and Fuzz functions of the _test.go
// files under root (bench/peers, a module of its own, included).
func testFuncs(t *testing.T, root string) map[string]bool {
	t.Helper()
	decl := regexp.MustCompile(`(?m)^func ((?:Test|Benchmark|Fuzz)[A-Za-z0-9_]*)\(`)
	funcs := map[string]bool{}
	err := filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.IsDir() && (e.Name() == "testdata" || strings.HasPrefix(e.Name(), ".")) && p != root {
			return filepath.SkipDir
		}
		if e.IsDir() || !strings.HasSuffix(p, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, m := range decl.FindAllStringSubmatch(string(src), -1) {
			funcs[m[1]] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return funcs
}

// testMentionProblems returns the tests the Markdown files under root name that no
// _test.go file declares. docs/benchmarks.md (records of past runs) is not read, nor the
// sections in skip (file → heading text), which name other projects' tests.
func testMentionProblems(t *testing.T, root string, funcs map[string]bool, skip map[string]string) []string {
	t.Helper()
	var problems []string
	err := CurrentDocLines(root, nil, func(f string, lines []string) {
		skipping, level := false, 0
		for i, line := range lines {
			if m := atxHeading.FindStringSubmatch(line); m != nil {
				if skipping && len(m[1]) <= level {
					skipping = false
				}
				if heading, ok := skip[f]; ok && HeadingText(m[2]) == heading {
					skipping, level = true, len(m[1])
				}
			}
			if skipping {
				continue
			}
			for _, at := range testNameMention.FindAllStringIndex(line, -1) {
				name := line[at[0]:at[1]]
				prefix, wildcard := strings.CutSuffix(name, "*")
				prefix = strings.TrimSuffix(prefix, ".")
				// `go test -run TestServer` is a pattern: it names the tests it matches.
				wildcard = wildcard || runPattern.MatchString(line[:at[0]])
				found := funcs[prefix]
				for fn := range funcs {
					found = found || wildcard && strings.HasPrefix(fn, prefix)
				}
				if !found {
					problems = append(problems, fmt.Sprintf("%s:%d: no _test.go declares %s", f, i+1, name))
				}
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return problems
}

// Every test, benchmark and fuzz target README.md and docs/ name exists, so a renamed or
// removed test cannot linger as evidence in the docs.
func TestDocsTestsExist(t *testing.T) {
	root := filepath.Join("..", "..")
	funcs := testFuncs(t, root)
	if len(funcs) < 500 {
		t.Fatalf("only %d test functions found: is the walk broken?", len(funcs))
	}
	skip := map[string]string{"docs/kafka-compatibility.md": "franz-go's pkg/kgo suite"}
	for _, p := range testMentionProblems(t, root, funcs, skip) {
		t.Error(p)
	}
}

// The check on a fixture: a missing test and a prefix nothing matches are reported; a
// real one, a matching prefix and a skipped section are not.
func TestDocsTestsExistFixture(t *testing.T) {
	funcs := map[string]bool{"TestReal": true, "TestKgoACLTopics": true}
	got := testMentionProblems(t, "testdata/tests", funcs, map[string]string{"README.md": "Theirs"})
	want := []string{
		"README.md:3: no _test.go declares TestGone",
		"README.md:3: no _test.go declares TestNone*",
		"README.md:9: no _test.go declares BenchmarkAfter",
	}
	if !slices.Equal(got, want) {
		t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
