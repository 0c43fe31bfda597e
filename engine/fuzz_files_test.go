package engine

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/ringlog/ringlog/ring"
)

// FuzzParseFileNames: recovery, the compaction swap and the stray-directory sweep read a
// partition directory by its file names. Each parser accepts exactly the names its writer
// makes, so that a stray file whose name merely parses ("+0000000000000000001.log") is
// never taken for a segment, a producer snapshot or a batch map (the log would then open a
// file of another name, or the sweep take an operator's directory for a partition's).
func FuzzParseFileNames(f *testing.F) {
	for _, s := range []string{
		"00000000000000000000.log", "00000000000000000042.index", "00000000000000000042.timeindex",
		"+0000000000000000001.log", "-0000000000000000001.log", "0000000000000000001.log",
		"09223372036854775807.log", "09223372036854775808.log", "00000000000000000007.snapshot",
		"+0000000000000000007.snapshot", batchMapName(batchMapOwnPrefix, 12), batchMapName(batchMapOldPrefix, 0),
		batchMapOwnPrefix + "+12", batchMapOwnPrefix + "012", "",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		if base, suffix, ok := parseSegmentName(name); ok {
			if got := filepath.Base(segmentPath("/d", base, suffix)); base < 0 || got != name {
				t.Fatalf("segment name %q parsed as %d%s, which names %q", name, base, suffix, got)
			}
		}
		if offset, ok := parseProducerSnapshotName(name); ok {
			if got := filepath.Base(producerSnapshotPath("/d", offset)); offset < 0 || got != name {
				t.Fatalf("snapshot name %q parsed as %d, which names %q", name, offset, got)
			}
		}
		if inode, prefix, ok := parseBatchMapName(name); ok {
			if got := batchMapName(prefix, inode); got != name {
				t.Fatalf("batch map name %q parsed as %s%d, which names %q", name, prefix, inode, got)
			}
		}
	})
}

// FuzzDecodeProducerIDs: the producer-id registry file decodes to a registry that keeps its
// invariants (ids below next_id, one name per id, bounded names), or to
// ErrProducerIDsCorrupt; what decodes survives a save/load round trip.
func FuzzDecodeProducerIDs(f *testing.F) {
	f.Add([]byte(`{"version":1,"next_id":0}`))
	f.Add([]byte(`{"version":1,"next_id":9,"names":{"a":{"id":3,"epoch":1},"b":{"id":4,"epoch":0}}}`))
	f.Add([]byte(`{"version":1,"next_id":9,"names":{"a":{"id":3,"epoch":1},"b":{"id":3,"epoch":0}}}`))
	f.Add([]byte(`{"version":1,"next_id":-1}`))
	f.Add([]byte(`{"version":1,"next_id":1,"names":{"":{"id":0,"epoch":0}}}`))
	f.Add([]byte(`{"version":2}`))
	f.Add([]byte(`{"version":1,"next_id":0} {}`))
	f.Add([]byte(``))
	f.Fuzz(func(t *testing.T, b []byte) {
		file, err := decodeProducerIDs(b)
		if err != nil {
			if !errors.Is(err, ErrProducerIDsCorrupt) {
				t.Fatalf("error not ErrProducerIDsCorrupt: %v", err)
			}
			return
		}
		if file.NextID < 0 || len(file.Names) > producerNamesMax {
			t.Fatalf("accepted next_id %d with %d names", file.NextID, len(file.Names))
		}
		seen := map[int64]string{}
		for name, id := range file.Names {
			if validProducerName(name) != nil || id.ID < 0 || id.ID >= file.NextID || id.Epoch < 0 {
				t.Fatalf("accepted name %q holding %+v (next_id %d)", name, id, file.NextID)
			}
			if other, dup := seen[id.ID]; dup {
				t.Fatalf("accepted id %d for both %q and %q", id.ID, other, name)
			}
			seen[id.ID] = name
		}
		again, err := json.Marshal(file)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := decodeProducerIDs(again); err != nil {
			t.Fatalf("re-decoding its own encoding: %v", err)
		}
	})
}

// FuzzParseCleanShutdown: the clean-shutdown marker yields the offset Close wrote, or -1
// (unknown) for anything else; never a negative offset that recovery would trust.
func FuzzParseCleanShutdown(f *testing.F) {
	for _, s := range []string{"0\n", "42\n", "9223372036854775807\n", "-5\n", "+5\n", "5", "", "\n", "007\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		n := parseCleanShutdown(b)
		if n == -1 {
			return
		}
		if n < 0 || string(b) != strconv.FormatInt(n, 10)+"\n" {
			t.Fatalf("marker %q read as end offset %d", b, n)
		}
	})
}

// TestRecoveryLeavesSignedNamesAlone: a file whose name only parses as a segment file (a
// sign before the digits, which ParseInt takes) is not one, and recovery leaves it alone. It
// used to read "+0000000000000000005.index" as the index of a segment 5 whose log is gone,
// and delete it as an orphan: a file the broker never wrote.
func TestRecoveryLeavesSignedNamesAlone(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(StoragePageCache)
	l, _ := openLog(t, dir, cfg, ring.Syscalls{})
	all := appendSome(t, l, 0, 50, 0)
	l.Close()
	stray := []string{"+0000000000000000005.index", "-0000000000000000000.timeindex", "+0000000000000000400.log"}
	for _, name := range stray {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("not ours"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	l2, rep := openLog(t, dir, cfg, ring.Syscalls{})
	defer l2.Close()
	if rep.DroppedBytes != 0 {
		t.Fatalf("stray files changed the log: report %+v", rep)
	}
	mustEqualBytes(t, "log beside stray files", readAll(t, l2, 1000), all)
	for _, name := range stray {
		if b, err := os.ReadFile(filepath.Join(dir, name)); err != nil || string(b) != "not ours" {
			t.Errorf("stray file %s: %q, %v", name, b, err)
		}
	}
}
