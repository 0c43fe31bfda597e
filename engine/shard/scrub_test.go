package shard

import (
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/ringlog/ringlog/engine"
	"github.com/ringlog/ringlog/ring"
)

// flipSealedByte flips one byte in the middle of the second-oldest segment file of a
// partition directory, as a bad disk would.
func flipSealedByte(t *testing.T, dir string) {
	t.Helper()
	logs, err := filepath.Glob(filepath.Join(dir, "*.log"))
	if err != nil || len(logs) < 3 {
		t.Fatalf("want at least 3 segments in %s, have %v (%v)", dir, logs, err)
	}
	sort.Strings(logs)
	f, err := os.OpenFile(logs[1], os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	one := []byte{0}
	at := info.Size() / 2
	if _, err := f.ReadAt(one, at); err != nil {
		t.Fatal(err)
	}
	one[0] ^= 0x01
	if _, err := f.WriteAt(one, at); err != nil {
		t.Fatal(err)
	}
}

// TestScrubberSurfacesCorruptionAndRepairClearsIt: the shard's scrubber finds a flipped
// byte in a sealed segment; describe reports it with the repair command; a fetch at it
// fails with ErrCorruptBatch; the offline repair (refused while the broker runs) gets the
// partition past it.
func TestScrubberSurfacesCorruptionAndRepairClearsIt(t *testing.T) {
	dir := t.TempDir()
	open := func() *Broker {
		b, err := Open(Config{DataDir: dir, Shards: 1, Ring: ring.Config{Backend: "syscall"}, ScrubBytesPerSecond: -1})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	b := open()
	if err := b.CreateTopic("scrubbed", 1, map[string]string{engine.ConfigSegmentBytes: "2048"}); err != nil {
		t.Fatal(err)
	}
	tp := TopicPartition{"scrubbed", 0}
	for i := 0; i < 40; i++ {
		if r := produce(t, b, tp, AcksAll, buildBatch(t, strings.Repeat("v", 100), 2)); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	flipSealedByte(t, b.partitionDir(tp))

	s := b.shards[0]
	if err := onShard(s, func() error { s.scrubTick(1 << 20); return nil }); err != nil {
		t.Fatal(err)
	}
	_, states, err := b.DescribeTopic("scrubbed")
	if err != nil {
		t.Fatal(err)
	}
	st := states[0]
	if st.CorruptBatches != 1 || !strings.Contains(st.Corruption, "ringlog topic repair scrubbed --data DATA_DIR --partition 0 --truncate-to") || b.CorruptBatchesFound() != 1 {
		t.Fatalf("describe after scrub: %d corrupt, %q, found %d", st.CorruptBatches, st.Corruption, b.CorruptBatchesFound())
	}
	var corrupt engine.Corruption
	if err := onShard(s, func() error { corrupt = s.parts[tp].log.Corruptions()[0]; return nil }); err != nil {
		t.Fatal(err)
	}
	res := fetch(t, b, FetchRequest{Partitions: []FetchPartition{{TopicPartition: tp, Offset: corrupt.Offset, MaxBytes: 1 << 20}}})
	if !errors.Is(res[0].Err, engine.ErrCorruptBatch) {
		t.Fatalf("fetch at the bad batch: %v", res[0].Err)
	}
	res[0].Release()

	if _, err := RepairPartition(dir, tp, RepairTruncateTo, corrupt.Offset, nil); !errors.Is(err, ErrDataDirInUse) {
		t.Fatalf("repair beside a running broker: %v", err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	// A restart keeps the damaged segment and everything after it: recovery's re-scan finds
	// the bad batch again and describe reports it before any scrub.
	b = open()
	if _, states, err := b.DescribeTopic("scrubbed"); err != nil || states[0].CorruptBatches != 1 || !strings.Contains(states[0].Corruption, "recovery:") {
		t.Fatalf("describe after restart: %+v, %v", states, err)
	}
	res = fetch(t, b, FetchRequest{Partitions: []FetchPartition{{TopicPartition: tp, Offset: corrupt.NextOffset, MaxBytes: 1 << 20}}})
	if res[0].Err != nil || res[0].HighWatermark <= corrupt.NextOffset {
		t.Fatalf("fetch past the bad batch after restart: %+v", res[0])
	}
	res[0].Release()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	rep, err := RepairPartition(dir, tp, RepairTruncateTo, corrupt.Offset, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Before) != 1 || len(rep.After) != 0 || rep.EndAfter != corrupt.Offset {
		t.Fatalf("repair result %+v", rep)
	}
	b = open()
	defer b.Close()
	if r := produce(t, b, tp, AcksAll, buildBatch(t, "after", 2)); r.Err != nil || r.BaseOffset != corrupt.Offset {
		t.Fatalf("produce after repair: %+v", r)
	}
	s = b.shards[0]
	if err := onShard(s, func() error { s.scrubTick(1 << 20); return nil }); err != nil {
		t.Fatal(err)
	}
	if _, states, _ := b.DescribeTopic("scrubbed"); states[0].CorruptBatches != 0 {
		t.Fatalf("corruption after repair: %q", states[0].Corruption)
	}
}
