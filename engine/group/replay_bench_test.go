package group

import (
	"io"
	"log/slog"
	"testing"

	"github.com/ringlog/ringlog/engine"
	"github.com/ringlog/ringlog/engine/batch"
	"github.com/ringlog/ringlog/ring"
)

// BenchmarkReplayLog: replaying one __consumer_offsets partition from its log, what a
// broker does when it becomes the partition's leader (and at a single broker's start)
// while the partition's groups answer COORDINATOR_LOAD_IN_PROGRESS. The log holds 100
// groups' commits of 50 partitions each, 20 times over (100,000 offset records, in
// batches of one commit of 50 partitions), uncompacted; bytes/s is the log's size over
// the replay time.
func BenchmarkReplayLog(b *testing.B) {
	l, _, err := engine.OpenLog(b.TempDir(), engine.LogConfig{RetentionMs: -1,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, ring.Syscalls{})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	builder := batch.NewBuilder(batch.BuilderOptions{})
	var size int64
	const groups, partitions, rounds = 100, 50, 20
	recs := make([]Record, 0, partitions)
	for round := range rounds {
		for g := range groups {
			recs = recs[:0]
			for p := range partitions {
				recs = append(recs, OffsetRecord(groupName(g), "orders", int32(p),
					OffsetValue{Offset: int64(round*1000 + p), LeaderEpoch: -1, CommitTimestampMs: 1_700_000_000_000}))
			}
			raw, err := EncodeBatch(nil, builder, recs, 1_700_000_000_000)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := l.Append(raw); err != nil {
				b.Fatal(err)
			}
			size += int64(len(raw))
		}
	}
	b.SetBytes(size)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		snap, err := ReplayLog(l)
		if err != nil {
			b.Fatal(err)
		}
		if len(snap.Groups) != groups || snap.Records != groups*partitions*rounds {
			b.Fatalf("replayed %d groups, %d records", len(snap.Groups), snap.Records)
		}
	}
}

func groupName(i int) string { return "group-" + string(rune('a'+i%26)) + string(rune('a'+i/26)) }
