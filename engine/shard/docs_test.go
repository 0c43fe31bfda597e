package shard

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/ringlog/ringlog/engine"
	"github.com/ringlog/ringlog/internal/doccheck"
)

// engineConfigKeys returns the values of the Config* string constants of engine/config.go:
// every topic config key the engine names.
func engineConfigKeys(t *testing.T) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), filepath.Join("..", "config.go"), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	ast.Inspect(f, func(n ast.Node) bool {
		spec, ok := n.(*ast.ValueSpec)
		if !ok {
			return true
		}
		for i, name := range spec.Names {
			if !strings.HasPrefix(name.Name, "Config") || i >= len(spec.Values) {
				continue
			}
			if lit, ok := spec.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
				key, err := strconv.Unquote(lit.Value)
				if err != nil {
					t.Fatal(err)
				}
				keys = append(keys, key)
			}
		}
		return true
	})
	if len(keys) < 15 {
		t.Fatalf("only %d Config* keys found in engine/config.go: is the reader broken?", len(keys))
	}
	return keys
}

// The table "Topic configuration" of docs/operations.md lists exactly the topic configs the
// engine accepts, and its default column holds the value a topic without the key is
// described with (EffectiveConfig; for a default that depends on the storage mode, the
// page-cache one is among the cell's values). Defaults that name a broker flag, or "unset",
// are not compared.
func TestDocsTopicConfigs(t *testing.T) {
	tables, err := doccheck.TablesUnder(doccheck.NewTree(filepath.Join("..", "..")), "docs/operations.md",
		"Topic configuration", "key", "default", "meaning")
	if err != nil {
		t.Fatal(err)
	}
	if len(tables) != 1 {
		t.Fatalf("docs/operations.md: %d topic configuration tables, want 1", len(tables))
	}
	table := tables[0]
	b := openBroker(t, t.TempDir(), "syscall", 1)
	defer b.Close()
	if err := b.CreateTopic("t", 1, nil); err != nil {
		t.Fatal(err)
	}
	effective := b.EffectiveConfig(b.Topic("t"))
	keys := engineConfigKeys(t)
	documented := map[string]bool{}
	for _, r := range table.Rows {
		spans := doccheck.CodeSpans(table.Cell(r, "key"))
		if len(spans) != 1 {
			t.Errorf("docs/operations.md:%d: key cell %q", r.Line, table.Cell(r, "key"))
			continue
		}
		key := spans[0]
		documented[key] = true
		if !slices.Contains(keys, key) {
			t.Errorf("docs/operations.md:%d: %s is not a topic config of engine/config.go", r.Line, key)
			continue
		}
		value, described := effective[key]
		if !described {
			value = "*" // the throttled-replicas lists, which the log only validates
		}
		if _, err := engine.LogConfigFromMap(engine.LogConfig{}, map[string]string{key: value}); err != nil {
			t.Errorf("docs/operations.md:%d: the engine refuses %s=%s: %v", r.Line, key, value, err)
		}
		cell := table.Cell(r, "default")
		values := doccheck.CodeSpans(cell)
		if !described || strings.HasPrefix(cell, "unset") || slices.ContainsFunc(values, func(v string) bool { return strings.HasPrefix(v, "--") }) {
			continue
		}
		if !slices.Contains(values, value) {
			t.Errorf("docs/operations.md:%d: %s defaults to %q there; a topic without it is described with %s", r.Line, key, cell, value)
		}
	}
	for _, key := range keys {
		if !documented[key] {
			t.Errorf("docs/operations.md's topic configuration table lacks %s", key)
		}
	}
}
