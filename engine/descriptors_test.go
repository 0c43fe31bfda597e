package engine

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ringlog/ringlog/ring"
)

// openFilesUnder lists this process's descriptors that point into dir, by file name.
func openFilesUnder(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	var names []string
	for _, e := range entries {
		target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name()))
		if err == nil && strings.HasPrefix(target, dir+"/") {
			names = append(names, filepath.Base(target))
		}
	}
	return names
}

func countSuffix(names []string, suffix string) int {
	n := 0
	for _, name := range names {
		if strings.HasSuffix(name, suffix) {
			n++
		}
	}
	return n
}

// Index files cost descriptors only while they are written or read: sealed segments hold
// one descriptor (their .log), the active one three after a sync, and a reopened idle log
// one per segment.
func TestIndexFilesHeldOnlyWhileUsed(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(StoragePageCache)
	l, _ := openLog(t, dir, cfg, ring.Syscalls{})
	for seq := range 40 { // 40 × ~4 KiB over 64 KiB segments: a few rolls
		if _, err := l.Append(makeBatch(t, seq, 4, 1000, int64(seq))); err != nil {
			t.Fatal(err)
		}
		if err := l.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	segments := len(l.segments)
	if segments < 3 {
		t.Fatalf("only %d segments: the test needs sealed ones", segments)
	}
	open := openFilesUnder(t, dir)
	if logs, idx, tix := countSuffix(open, logSuffix), countSuffix(open, indexSuffix), countSuffix(open, timeIndexSuffix); logs != segments || idx != 1 || tix != 1 {
		t.Fatalf("after writing: %d .log (want %d), %d .index and %d .timeindex open (want only the active segment's): %v", logs, segments, idx, tix, open)
	}
	// Every sealed segment's index must still be readable: look up an offset in the first.
	if _, err := l.Read(0, 1<<20); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if open := openFilesUnder(t, dir); len(open) != 0 {
		t.Fatalf("after Close: %v still open", open)
	}

	l, rep := openLog(t, dir, cfg, ring.Syscalls{})
	defer l.Close()
	if rep.Segments != segments {
		t.Fatalf("reopened %d segments, want %d", rep.Segments, segments)
	}
	open = openFilesUnder(t, dir)
	if logs := countSuffix(open, logSuffix); logs != segments || len(open) != segments {
		t.Fatalf("reopened idle log holds %v, want only its %d .log files", open, segments)
	}
	// Reads through sealed segments' indexes reopen and close them again.
	for _, s := range l.segments[:segments-1] {
		if _, err := l.Read(s.baseOffset+1, 4096); err != nil {
			t.Fatal(err)
		}
	}
	if open := openFilesUnder(t, dir); len(open) != segments {
		t.Fatalf("after reads of sealed segments: %v, want only the %d .log files", open, segments)
	}
	mustInvariants(t, l)
}
