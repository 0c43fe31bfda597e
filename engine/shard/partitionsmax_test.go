package shard

import (
	"errors"
	"testing"

	"github.com/ringlog/ringlog/ring"
)

// TestBrokerPartitionLimit: creates that would take the broker past Config.PartitionsMax
// are refused with ErrInvalidPartitions and leave nothing behind; creates within it work.
// __consumer_offsets (2 partitions here) counts against the limit.
func TestBrokerPartitionLimit(t *testing.T) {
	dir := t.TempDir()
	if _, err := Open(Config{DataDir: dir, Shards: 1, Ring: ring.Config{Backend: "syscall"}, PartitionsMax: 1, Groups: GroupsConfig{OffsetsPartitions: 2}}); !errors.Is(err, ErrInvalidPartitions) {
		t.Fatalf("open with a limit below __consumer_offsets: %v, want ErrInvalidPartitions", err)
	}
	b, err := Open(Config{DataDir: dir, Shards: 1, Ring: ring.Config{Backend: "syscall"}, PartitionsMax: 7, Groups: GroupsConfig{OffsetsPartitions: 2}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.CreateTopic("a", 3, nil); err != nil {
		t.Fatal(err)
	}
	err = b.CreateTopic("b", 3, nil)
	if !errors.Is(err, ErrInvalidPartitions) {
		t.Fatalf("create past the broker limit: %v, want ErrInvalidPartitions", err)
	}
	if b.Topic("b") != nil {
		t.Fatal("refused topic is in metadata")
	}
	if err := b.CreateTopic("b", 2, nil); err != nil {
		t.Fatalf("create up to the limit: %v", err)
	}
	if err := b.DeleteTopic("a"); err != nil {
		t.Fatal(err)
	}
	if err := b.CreateTopic("c", 3, nil); err != nil {
		t.Fatalf("create after a delete freed partitions: %v", err)
	}
}
