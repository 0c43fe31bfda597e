package wire

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/ringlog/ringlog/internal/doccheck"
)

// protocolTable returns the one table of docs/protocol.md under heading with header.
func protocolTable(t *testing.T, heading string, header ...string) doccheck.Table {
	t.Helper()
	tables, err := doccheck.TablesUnder(doccheck.NewTree(filepath.Join("..", "..")), "docs/protocol.md", heading, header...)
	if err != nil {
		t.Fatal(err)
	}
	if len(tables) != 1 {
		t.Fatalf("docs/protocol.md: %d tables %q under %q, want 1", len(tables), header, heading)
	}
	return tables[0]
}

// The API table of docs/protocol.md lists exactly the keys this codec knows, each with its
// name.
func TestDocsAPITable(t *testing.T) {
	table := protocolTable(t, "APIs", "key", "name", "purpose")
	documented := map[APIKey]bool{}
	for _, r := range table.Rows {
		key, err := strconv.ParseUint(table.Cell(r, "key"), 10, 16)
		if err != nil {
			t.Errorf("docs/protocol.md:%d: key %q", r.Line, table.Cell(r, "key"))
			continue
		}
		k := APIKey(key)
		documented[k] = true
		if !k.Known() || k.String() != table.Cell(r, "name") {
			t.Errorf("docs/protocol.md:%d: API %d is %q there, %v here", r.Line, key, table.Cell(r, "name"), k)
		}
	}
	for _, k := range KnownAPIs() {
		if !documented[k] {
			t.Errorf("docs/protocol.md's API table lacks %d %v", k, k)
		}
	}
}

// The error table of docs/protocol.md lists exactly the codes of errorTable, each with its
// name and whether it is retriable.
func TestDocsErrorTable(t *testing.T) {
	table := protocolTable(t, "Error codes", "code", "name", "retriable", "meaning")
	documented := map[ErrorCode]bool{}
	for _, r := range table.Rows {
		n, err := strconv.ParseInt(table.Cell(r, "code"), 10, 16)
		if err != nil {
			t.Errorf("docs/protocol.md:%d: code %q", r.Line, table.Cell(r, "code"))
			continue
		}
		code := ErrorCode(n)
		documented[code] = true
		info, ok := errorTable[code]
		if !ok {
			t.Errorf("docs/protocol.md:%d: code %d is not in netio/wire", r.Line, n)
			continue
		}
		if info.name != table.Cell(r, "name") {
			t.Errorf("docs/protocol.md:%d: code %d is %s there, %s here", r.Line, n, table.Cell(r, "name"), info.name)
		}
		want := map[bool]string{true: "yes", false: "no"}[info.retriable]
		if code == ErrNone {
			want = ""
		}
		if got := table.Cell(r, "retriable"); got != want {
			t.Errorf("docs/protocol.md:%d: %s retriable %q there, %q here", r.Line, info.name, got, want)
		}
	}
	for code, info := range errorTable {
		if !documented[code] {
			t.Errorf("docs/protocol.md's error table lacks %d %s", code, info.name)
		}
	}
}

// "Every API is at version 0 except A, B and C, which also have version N" in
// docs/protocol.md names exactly the APIs with a VersionMax above 0, and N is theirs.
func TestDocsVersionedAPIs(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "docs", "protocol.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`Every API is at version 0 except ([A-Za-z,\s]+?),\s+which\s+also\s+have\s+version\s+(\d+)`).FindSubmatch(data)
	if m == nil {
		t.Fatal(`docs/protocol.md: no sentence "Every API is at version 0 except ..., which also have version N"`)
	}
	var documented []string
	for _, name := range regexp.MustCompile(`,\s*|\s+and\s+`).Split(string(m[1]), -1) {
		documented = append(documented, strings.TrimSpace(name))
	}
	var versioned []string
	for _, k := range KnownAPIs() {
		if k.VersionMax() > 0 {
			versioned = append(versioned, k.String())
			if want := strconv.Itoa(int(k.VersionMax())); want != string(m[2]) {
				t.Errorf("docs/protocol.md says %v goes up to version %s; VersionMax is %s", k, m[2], want)
			}
		}
	}
	slices.Sort(documented)
	slices.Sort(versioned)
	if !slices.Equal(documented, versioned) {
		t.Errorf("docs/protocol.md says %q have versions above 0; VersionMax says %q", documented, versioned)
	}
}

// notErrorCodes are the upper-case names the docs put in code spans that are no error code
// of this protocol: environment variables and kernel or socket constants (by prefix), and
// a few single names.
var notErrorCodes = struct {
	prefixes []string
	names    map[string]string
}{
	prefixes: []string{"RINGLOG_", "IORING_", "IOSQE_", "IOCB_", "O_", "SO_", "MSG_", "RLIMIT_", "FALLOC_", "AF_"},
	names: map[string]string{
		"SASL_SSL": "a Kafka client's security.protocol", "SASL_PLAINTEXT": "a Kafka client's security.protocol",
		"SINGLE_ISSUER": "io_uring setup flag", "DEFER_TASKRUN": "io_uring setup flag",
		"SEND_ZC": "io_uring op", "WRITE_FIXED": "io_uring op",
		"IO_LINK": "io_uring SQE flag", "IO_DRAIN": "io_uring SQE flag", "CQE_SKIP_SUCCESS": "io_uring SQE flag",
		"SYN_SENT": "TCP state",
	},
}

// errorMentionProblems returns the upper-case names in code spans of the Markdown files
// under root (README.md and docs/, except the Kafka listener's page, which names Kafka's
// codes, and docs/benchmarks.md, a record of past runs) that are neither an error code of
// errorTable nor listed in notErrorCodes.
func errorMentionProblems(t *testing.T, root string) []string {
	t.Helper()
	names := map[string]bool{}
	for _, info := range errorTable {
		names[info.name] = true
	}
	files, err := doccheck.Files(root)
	if err != nil {
		t.Fatal(err)
	}
	tree := doccheck.NewTree(root)
	upper := regexp.MustCompile(`^[A-Z][A-Z0-9]*(_[A-Z0-9]+)+$`)
	var problems []string
	for _, f := range files {
		if f == "docs/kafka-compatibility.md" || f == "docs/benchmarks.md" {
			continue
		}
		d, err := tree.Doc(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range d.Code {
			if c.Block || !upper.MatchString(c.Text) || names[c.Text] {
				continue
			}
			if _, ok := notErrorCodes.names[c.Text]; ok || slices.ContainsFunc(notErrorCodes.prefixes, func(p string) bool { return strings.HasPrefix(c.Text, p) }) {
				continue
			}
			problems = append(problems, fmt.Sprintf("%s:%d: `%s` is no error code of netio/wire", f, c.Line, c.Text))
		}
	}
	return problems
}

// Every error code the docs name in a code span (`NOT_ENOUGH_REPLICAS`) is one of
// netio/wire's, so a renamed or invented code cannot linger in the docs.
func TestDocsErrorMentionsExist(t *testing.T) {
	for _, p := range errorMentionProblems(t, filepath.Join("..", "..")) {
		t.Error(p)
	}
}

// The check on a seeded fixture: an invented code is reported; real codes, environment
// variables, code in fenced blocks and the Kafka page are not.
func TestDocsErrorMentionsFixture(t *testing.T) {
	got := strings.Join(errorMentionProblems(t, filepath.Join("testdata", "docerrors")), "\n")
	want := "README.md:3: `NOT_ENOUGH_BROKERS` is no error code of netio/wire"
	if got != want {
		t.Errorf("problems:\n%s\nwant:\n%s", got, want)
	}
}

// apiKeyMentionProblems returns the places in the Markdown files under root (README.md and
// docs/, except the Kafka listener's page, which uses Kafka's keys, and docs/benchmarks.md)
// that give a ringlog API's key beside its name — "Fetch (2)", "Controller API (23)",
// "(ReplicaFetch, 21)" — with a key that is not its own.
func apiKeyMentionProblems(t *testing.T, root string) []string {
	t.Helper()
	var names []string
	keyOf := map[string]APIKey{}
	for _, k := range KnownAPIs() {
		names = append(names, k.String())
		keyOf[k.String()] = k
	}
	mention := regexp.MustCompile(`\b(` + strings.Join(names, "|") + `)(?: API)?(?:, | \()(\d+)(?:\)|,|–)`)
	var problems []string
	err := doccheck.CurrentDocLines(root, []string{"docs/kafka-compatibility.md"}, func(f string, lines []string) {
		for i, line := range lines {
			for _, m := range mention.FindAllStringSubmatch(line, -1) {
				if m[2] != strconv.Itoa(int(keyOf[m[1]])) {
					problems = append(problems, fmt.Sprintf("%s:%d: %q: %s is key %d", f, i+1, m[0], m[1], keyOf[m[1]]))
				}
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return problems
}

// Every API key the docs give beside an API's name is that API's.
func TestDocsAPIKeyMentions(t *testing.T) {
	for _, p := range apiKeyMentionProblems(t, filepath.Join("..", "..")) {
		t.Error(p)
	}
}

// The check on the seeded fixture: a wrong key is reported; right ones, the Kafka page
// and prose numbers ("Fetch (2 s)") are not.
func TestDocsAPIKeyMentionsFixture(t *testing.T) {
	got := strings.Join(apiKeyMentionProblems(t, filepath.Join("testdata", "docerrors")), "\n")
	want := `docs/replication.md:1: "ReplicaFetch, 11)": ReplicaFetch is key 21`
	if got != want {
		t.Errorf("problems:\n%s\nwant:\n%s", got, want)
	}
}
