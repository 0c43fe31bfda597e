package shard

import (
	"errors"
	"testing"

	"github.com/ringlog/ringlog/ring"
)

// TestDataDirLock: a second broker on an open data directory is refused with
// ErrDataDirInUse; after Close the directory can be opened again.
func TestDataDirLock(t *testing.T) {
	dir := t.TempDir()
	first := openBroker(t, dir, "syscall", 1)
	second, err := Open(Config{DataDir: dir, Shards: 1, Ring: ring.Config{Backend: "syscall"}})
	if !errors.Is(err, ErrDataDirInUse) {
		if second != nil {
			second.Close()
		}
		t.Fatalf("second Open of a data dir in use: %v, want ErrDataDirInUse", err)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	again := openBroker(t, dir, "syscall", 1)
	if err := again.Close(); err != nil {
		t.Fatal(err)
	}
}
