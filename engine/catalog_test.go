package engine

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestCatalogCreateLoadDelete(t *testing.T) {
	dir := t.TempDir()
	c, err := LoadCatalog(dir)
	if err != nil || len(c.Names()) != 0 {
		t.Fatalf("empty catalog: %v %v", c.Names(), err)
	}
	if err := c.Create("orders", 3, map[string]string{ConfigRetentionMs: "86400000", ConfigStorageMode: "direct"}, nil, 2); err != nil {
		t.Fatal(err)
	}
	if err := c.Create("audit.log_v2", 1, nil, []int{5}, 0); err != nil {
		t.Fatal(err)
	}
	if err := c.Create("orders", 1, nil, nil, 1); !errors.Is(err, ErrTopicExists) {
		t.Fatalf("duplicate create: %v", err)
	}
	c2, err := LoadCatalog(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(c2.Names(), []string{"audit.log_v2", "orders"}) {
		t.Fatalf("names after reload %v", c2.Names())
	}
	orders, _ := c2.Topic("orders")
	want := TopicMeta{Partitions: 3, Config: map[string]string{ConfigRetentionMs: "86400000", ConfigStorageMode: "direct"}, Placement: []int{0, 1, 0}}
	if !reflect.DeepEqual(orders, want) {
		t.Fatalf("orders after reload %+v, want %+v", orders, want)
	}
	cfg, err := c2.TopicLogConfig("orders", LogConfig{SegmentBytes: 1 << 20})
	if err != nil || cfg.RetentionMs != 86400000 || cfg.Storage != StorageDirect || cfg.SegmentBytes != 1<<20 {
		t.Fatalf("TopicLogConfig: %+v %v", cfg, err)
	}
	if err := c2.Delete("orders"); err != nil {
		t.Fatal(err)
	}
	if err := c2.Delete("orders"); !errors.Is(err, ErrUnknownTopic) {
		t.Fatalf("second delete: %v", err)
	}
	c3, _ := LoadCatalog(dir)
	if !reflect.DeepEqual(c3.Names(), []string{"audit.log_v2"}) {
		t.Fatalf("after delete %v", c3.Names())
	}
	if _, err := os.Stat(filepath.Join(dir, catalogFileName+".tmp")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("temp file left behind: %v", err)
	}
}

// TestCatalogTopicIdentity: a topic's ID and incarnation survive a reload and a config
// change; a catalog without them (written before they existed) loads with them empty.
func TestCatalogTopicIdentity(t *testing.T) {
	dir := t.TempDir()
	c, _ := LoadCatalog(dir)
	const id = "00112233445566778899aabbccddeeff"
	if err := c.CreateIdentified("orders", 2, nil, nil, 1, id, 42); err != nil {
		t.Fatal(err)
	}
	if err := c.Create("plain", 1, nil, nil, 1); err != nil {
		t.Fatal(err)
	}
	if err := c.SetConfig("orders", map[string]string{ConfigRetentionMs: "1000"}); err != nil {
		t.Fatal(err)
	}
	c2, err := LoadCatalog(dir)
	if err != nil {
		t.Fatal(err)
	}
	orders, _ := c2.Topic("orders")
	plain, _ := c2.Topic("plain")
	if orders.ID != id || orders.Incarnation != 42 || plain.ID != "" || plain.Incarnation != 0 {
		t.Fatalf("after reload: orders %+v, plain %+v", orders, plain)
	}
	if err := c2.CreateIdentified("long", 1, nil, nil, 1, strings.Repeat("a", topicIDBytesMax+1), 1); !errors.Is(err, ErrInvalidTopic) {
		t.Fatalf("over-long id: %v", err)
	}
}

func TestCatalogRejectsBadTopics(t *testing.T) {
	c, _ := LoadCatalog(t.TempDir())
	cases := []struct {
		name       string
		partitions int
		config     map[string]string
		placement  []int
	}{
		{"", 1, nil, nil},
		{".", 1, nil, nil},
		{"..", 1, nil, nil},
		{"has space", 1, nil, nil},
		{"slash/inside", 1, nil, nil},
		{strings.Repeat("x", 250), 1, nil, nil},
		{"zero", 0, nil, nil},
		{"huge", partitionsMax + 1, nil, nil},
		{"placement", 2, nil, []int{0}},
		{"negative-shard", 1, nil, []int{-1}},
		{"unknown-config", 1, map[string]string{"retention.mss": "1"}, nil},
		{"bad-config", 1, map[string]string{ConfigSegmentBytes: "12"}, nil},
		{"bad-mode", 1, map[string]string{ConfigStorageMode: "tape"}, nil},
	}
	for _, tc := range cases {
		if err := c.Create(tc.name, tc.partitions, tc.config, tc.placement, 1); !errors.Is(err, ErrInvalidTopic) {
			t.Errorf("Create(%q): %v, want ErrInvalidTopic", tc.name, err)
		}
	}
	if len(c.Names()) != 0 {
		t.Fatalf("rejected topics stored: %v", c.Names())
	}
}

func TestCatalogSaveFailureLeavesCatalogUnchanged(t *testing.T) {
	dir := t.TempDir()
	c, _ := LoadCatalog(dir)
	if err := c.Create("kept", 1, nil, nil, 1); err != nil {
		t.Fatal(err)
	}
	// Point the catalog below a regular file: every save fails.
	blocker := filepath.Join(dir, "file")
	os.WriteFile(blocker, nil, 0o644)
	c.dir = filepath.Join(blocker, "sub")
	if err := c.Create("lost", 1, nil, nil, 1); err == nil {
		t.Fatal("create succeeded although the catalog could not be saved")
	}
	if err := c.Delete("kept"); err == nil {
		t.Fatal("delete succeeded although the catalog could not be saved")
	}
	if !reflect.DeepEqual(c.Names(), []string{"kept"}) {
		t.Fatalf("in-memory catalog changed by failed saves: %v", c.Names())
	}
}

func TestCatalogCorruptFile(t *testing.T) {
	for name, body := range map[string]string{
		"not json":        "{{{",
		"wrong version":   `{"version": 2, "topics": {}}`,
		"unknown field":   `{"version": 1, "topics": {}, "extra": 1}`,
		"trailing":        `{"version": 1, "topics": {}} {}`,
		"bad topic":       `{"version": 1, "topics": {"a b": {"partitions": 1, "placement": [0]}}}`,
		"short placement": `{"version": 1, "topics": {"t": {"partitions": 2, "placement": [0]}}}`,
	} {
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, catalogFileName), []byte(body), 0o644)
		if _, err := LoadCatalog(dir); !errors.Is(err, ErrCatalogCorrupt) {
			t.Errorf("%s: %v, want ErrCatalogCorrupt", name, err)
		}
	}
	// A leftover temp file from a crash mid-save is ignored: the old catalog stands.
	dir := t.TempDir()
	c, _ := LoadCatalog(dir)
	c.Create("t", 1, nil, nil, 1)
	os.WriteFile(filepath.Join(dir, catalogFileName+".tmp"), []byte("{half"), 0o644)
	c2, err := LoadCatalog(dir)
	if err != nil || !reflect.DeepEqual(c2.Names(), []string{"t"}) {
		t.Fatalf("with stale temp file: %v %v", c2, err)
	}
}

func TestPartitionDir(t *testing.T) {
	if got := PartitionDir("/data", "orders", 7); got != "/data/orders-7" {
		t.Fatalf("PartitionDir = %s", got)
	}
}

// TestCatalogReadsBrokerFormat: the document engine/shard writes loads here unchanged.
func TestCatalogReadsBrokerFormat(t *testing.T) {
	dir := t.TempDir()
	body := `{"version":1,"topics":{"orders":{"shards":[0,1,0],"config":{"retention.ms":"60000"}}}}`
	os.WriteFile(filepath.Join(dir, catalogFileName), []byte(body), 0o644)
	c, err := LoadCatalog(dir)
	if err != nil {
		t.Fatal(err)
	}
	got, ok := c.Topic("orders")
	want := TopicMeta{Partitions: 3, Placement: []int{0, 1, 0}, Config: map[string]string{"retention.ms": "60000"}}
	if !ok || !reflect.DeepEqual(got, want) {
		t.Fatalf("orders = %+v, want %+v", got, want)
	}
}
