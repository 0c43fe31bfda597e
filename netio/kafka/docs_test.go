package kafka

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/internal/doccheck"
)

// The table "APIs and versions" of docs/kafka-compatibility.md lists exactly the APIs this
// listener serves (the table ApiVersions advertises), each with Kafka's name and the
// versions served.
func TestDocsAPITable(t *testing.T) {
	tables, err := doccheck.TablesUnder(doccheck.NewTree(filepath.Join("..", "..")), "docs/kafka-compatibility.md",
		"APIs and versions", "key", "API", "versions", "notes")
	if err != nil {
		t.Fatal(err)
	}
	if len(tables) != 1 {
		t.Fatalf("docs/kafka-compatibility.md: %d API tables, want 1", len(tables))
	}
	table := tables[0]
	documented := map[int16]bool{}
	for _, r := range table.Rows {
		var key int16
		if _, err := fmt.Sscan(table.Cell(r, "key"), &key); err != nil {
			t.Errorf("docs/kafka-compatibility.md:%d: key %q", r.Line, table.Cell(r, "key"))
			continue
		}
		if documented[key] {
			t.Errorf("docs/kafka-compatibility.md:%d: key %d listed twice", r.Line, key)
		}
		documented[key] = true
		if name := table.Cell(r, "API"); !strings.EqualFold(name, kmsg.NameForKey(key)) {
			t.Errorf("docs/kafka-compatibility.md:%d: key %d is %s there, Kafka's %s", r.Line, key, name, kmsg.NameForKey(key))
		}
		a, ok := served[key]
		if !ok {
			t.Errorf("docs/kafka-compatibility.md:%d: key %d (%s) is not served", r.Line, key, kmsg.NameForKey(key))
			continue
		}
		if got, want := table.Cell(r, "versions"), fmt.Sprintf("%d–%d", a.min, a.max); got != want {
			t.Errorf("docs/kafka-compatibility.md:%d: %s versions %q there, %q served", r.Line, kmsg.NameForKey(key), got, want)
		}
	}
	for _, key := range servedKeys() {
		if !documented[key] {
			t.Errorf("docs/kafka-compatibility.md's API table lacks key %d (%s)", key, kmsg.NameForKey(key))
		}
	}
}
