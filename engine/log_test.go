package engine

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ringlog/ringlog/engine/batch"
	"github.com/ringlog/ringlog/ring"
	"golang.org/x/sys/unix"
)

// appendSome appends count batches of varying sizes and returns their stored bytes.
func appendSome(t *testing.T, l *Log, seqStart, count int, ts int64) []byte {
	t.Helper()
	var all []byte
	for i := 0; i < count; i++ {
		seq := seqStart + i
		b := makeBatch(t, seq, 1+seq%5, 20+(seq*37)%300, ts+int64(seq))
		want := l.EndOffset()
		base, err := l.Append(b)
		if err != nil {
			t.Fatalf("Append %d: %v", seq, err)
		}
		if base != want {
			t.Fatalf("Append %d: base %d, want %d", seq, base, want)
		}
		h, _ := batch.ParseHeader(b)
		if h.BaseOffset != base {
			t.Fatalf("base offset not rewritten in place: %d vs %d", h.BaseOffset, base)
		}
		all = append(all, b...)
	}
	return all
}

func TestAppendReadRoundTrip(t *testing.T) {
	forEachBackend(t, func(t *testing.T, fio ring.FileIO, mode StorageMode) {
		dir := t.TempDir()
		l, rep := openLog(t, dir, testConfig(mode), fio)
		if rep.DroppedBytes != 0 || l.EndOffset() != 0 || l.StartOffset() != 0 {
			t.Fatalf("fresh log: report %+v end %d start %d", rep, l.EndOffset(), l.StartOffset())
		}
		skipUnlessDirect(t, l, dir, mode)
		if l.Mode() != mode {
			t.Fatalf("mode %s, want %s", l.Mode(), mode)
		}
		want := appendSome(t, l, 0, 600, 1000)
		if l.SegmentCount() < 3 {
			t.Fatalf("expected rolls with 64 KiB segments, have %d segments for %d bytes", l.SegmentCount(), len(want))
		}
		if l.Size() != int64(len(want)) {
			t.Fatalf("Size %d, want %d", l.Size(), len(want))
		}
		for _, maxBytes := range []int{1, 700, 5000, 1 << 20} {
			mustEqualBytes(t, "read back", readAll(t, l, maxBytes), want)
		}
		checkEveryOffset(t, l, want)
		if err := l.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		l2, rep := openLog(t, dir, testConfig(mode), fio)
		defer l2.Close()
		if !rep.CleanShutdown || rep.DroppedBytes != 0 || len(rep.RebuiltIndexes) != 0 || rep.ScannedBytes > int64(rep.Segments)*(512+1200) {
			t.Fatalf("clean reopen did work it should not: %+v", rep)
		}
		mustEqualBytes(t, "after reopen", readAll(t, l2, 4096), want)
		checkEveryOffset(t, l2, want)
		more := appendSome(t, l2, 600, 50, 1000)
		mustEqualBytes(t, "after reopen and append", readAll(t, l2, 1<<20), append(want, more...))
	})
}

// checkEveryOffset reads every offset with a small maxBytes and checks that the returned
// batch is the one holding it.
func checkEveryOffset(t *testing.T, l *Log, all []byte) {
	t.Helper()
	type span struct{ base, last, pos, size int64 }
	var spans []span
	for pos := int64(0); pos < int64(len(all)); {
		h, _ := batch.ParseHeader(all[pos:])
		spans = append(spans, span{h.BaseOffset, h.LastOffset(), pos, batchSize(h)})
		pos += batchSize(h)
	}
	for _, sp := range spans {
		for off := sp.base; off <= sp.last; off++ {
			res, err := l.Read(off, 1)
			if err != nil {
				t.Fatalf("Read(%d): %v", off, err)
			}
			got, err := res.AppendTo(nil)
			if err != nil {
				t.Fatal(err)
			}
			if res.FirstOffset != sp.base || res.NextOffset != sp.last+1 {
				t.Fatalf("Read(%d): offsets [%d,%d), want [%d,%d)", off, res.FirstOffset, res.NextOffset, sp.base, sp.last+1)
			}
			mustEqualBytes(t, "batch holding offset", got, all[sp.pos:sp.pos+sp.size])
		}
	}
}

func TestReadOutOfRange(t *testing.T) {
	forEachBackend(t, func(t *testing.T, fio ring.FileIO, mode StorageMode) {
		l, _ := openLog(t, t.TempDir(), testConfig(mode), fio)
		defer l.Close()
		appendSome(t, l, 0, 10, 0)
		if _, err := l.Read(l.EndOffset()+1, 100); !errors.Is(err, ErrOffsetOutOfRange) {
			t.Fatalf("read above end: %v", err)
		}
		if _, err := l.Read(-1, 100); !errors.Is(err, ErrOffsetOutOfRange) {
			t.Fatalf("read below start: %v", err)
		}
		res, err := l.Read(l.EndOffset(), 100)
		if err != nil || res.Size != 0 || len(res.Pieces) != 0 {
			t.Fatalf("read at end: %+v %v", res, err)
		}
		if _, err := l.DeleteRecordsBefore(5); err != nil {
			t.Fatal(err)
		}
		if _, err := l.Read(4, 100); !errors.Is(err, ErrOffsetOutOfRange) {
			t.Fatalf("read below start after DeleteRecordsBefore: %v", err)
		}
		if _, err := l.Read(5, 100); err != nil {
			t.Fatalf("read at new start: %v", err)
		}
	})
}

func TestReadBoundedByHighWatermark(t *testing.T) {
	l, _ := openLog(t, t.TempDir(), testConfig(StoragePageCache), ring.Syscalls{})
	defer l.Close()
	var ends []int64
	for i := 0; i < 20; i++ {
		if _, err := l.Append(makeBatch(t, i, 3, 50, 0)); err != nil {
			t.Fatal(err)
		}
		ends = append(ends, l.EndOffset())
	}
	hw := ends[9]
	got := readAllBounded(t, l, hw)
	offs := batchOffsets(t, got)
	if len(offs) != 10 || offs[9] != ends[8] {
		t.Fatalf("bounded read returned batches %v, want 10 ending at base %d", offs, ends[8])
	}
}

func readAllBounded(t *testing.T, l *Log, hw int64) []byte {
	var out []byte
	for off := int64(0); off < hw; {
		res, err := l.ReadBounded(off, 300, hw)
		if err != nil {
			t.Fatal(err)
		}
		if res.Size == 0 {
			break
		}
		out, _ = res.AppendTo(out)
		off = res.NextOffset
	}
	return out
}

// TestMaxMessageBytes: a produced batch over max.message.bytes is refused as too large
// (MESSAGE_TOO_LARGE on the wire) with nothing written; one at the limit is appended; a
// follower's copy of a larger batch is not checked (its leader accepted it, as in Kafka).
func TestMaxMessageBytes(t *testing.T) {
	cfg := testConfig(StoragePageCache)
	big, small := makeBatch(t, 1, 1, 6<<10, 0), makeBatch(t, 2, 1, 100, 0)
	cfg.MaxMessageBytes = int64(len(small))
	l, _ := openLog(t, t.TempDir(), cfg, ring.Syscalls{})
	defer l.Close()
	_, err := l.Append(big)
	if !errors.Is(err, ErrBatchTooLarge) || !strings.Contains(err.Error(), "max.message.bytes") {
		t.Fatalf("a %d-byte batch over max.message.bytes %d: %v, want ErrBatchTooLarge naming max.message.bytes", len(big), cfg.MaxMessageBytes, err)
	}
	if l.EndOffset() != 0 {
		t.Fatalf("the refused batch moved the log end to %d", l.EndOffset())
	}
	if _, err := l.Append(small); err != nil {
		t.Fatalf("a batch at max.message.bytes: %v", err)
	}
	batch.SetBaseOffset(big, l.EndOffset())
	if _, err := l.AppendReplicated([][]byte{big}); err != nil {
		t.Fatalf("a replicated batch over max.message.bytes: %v", err)
	}
}

func TestAppendRejectsInvalidBatches(t *testing.T) {
	l, _ := openLog(t, t.TempDir(), testConfig(StoragePageCache), ring.Syscalls{})
	defer l.Close()
	good := makeBatch(t, 1, 2, 10, 0)
	corrupt := append([]byte(nil), good...)
	corrupt[len(corrupt)-1] ^= 0xff
	cases := map[string][]byte{
		"empty":     nil,
		"short":     good[:30],
		"truncated": good[:len(good)-1],
		"trailing":  append(append([]byte(nil), good...), 0),
		"crc":       corrupt,
		"too big":   makeBatch(t, 2, 1, 70<<10, 0),
		// Poison pills: a correct CRC over bytes no consumer can read.
		"garbage records, good crc": withGoodCRC(good, func(b []byte) { b[batch.HeaderSize] = 0x7f }),
		"zstd claiming 10^9 records": withGoodCRC(makeZstdBatch(t), func(b []byte) {
			binary.BigEndian.PutUint32(b[23:], 1_000_000_000-1) // lastOffsetDelta
			binary.BigEndian.PutUint32(b[57:], 1_000_000_000)   // record count
		}),
		"garbage zstd, good crc": withGoodCRC(makeZstdBatch(t), func(b []byte) { b[batch.HeaderSize+6] ^= 0xff }),
	}
	for name, b := range cases {
		_, err := l.Append(b)
		if !errors.Is(err, ErrInvalidBatch) {
			t.Errorf("%s: err %v, want ErrInvalidBatch", name, err)
		}
		if tooLarge := errors.Is(err, ErrBatchTooLarge); tooLarge != (name == "too big") {
			t.Errorf("%s: errors.Is(err, ErrBatchTooLarge) = %v (err %v)", name, tooLarge, err)
		}
	}
	// A bad batch in a group rejects the whole group before anything is written.
	if _, err := l.AppendBatches([][]byte{makeBatch(t, 3, 1, 10, 0), corrupt}); !errors.Is(err, ErrInvalidBatch) {
		t.Fatalf("group with a corrupt batch: %v", err)
	}
	if l.EndOffset() != 0 || l.Size() != 0 {
		t.Fatalf("rejected appends changed the log: end %d size %d", l.EndOffset(), l.Size())
	}
}

// withGoodCRC copies b, applies mutate and recomputes the CRC, so the damage reaches the
// record checks behind it.
func withGoodCRC(b []byte, mutate func([]byte)) []byte {
	out := append([]byte(nil), b...)
	mutate(out)
	binary.BigEndian.PutUint32(out[17:], batch.Checksum(out))
	return out
}

func makeZstdBatch(t testing.TB) []byte {
	t.Helper()
	b := batch.NewBuilder(batch.BuilderOptions{Codec: batch.CodecZstd})
	b.Append(1, []byte("k"), []byte("a zstd value"), nil)
	out, err := b.Build(nil)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestLeaderEpochRewritten(t *testing.T) {
	l, _ := openLog(t, t.TempDir(), testConfig(StoragePageCache), ring.Syscalls{})
	defer l.Close()
	l.SetLeaderEpoch(7)
	if _, err := l.Append(makeBatch(t, 1, 2, 10, 0)); err != nil {
		t.Fatal(err)
	}
	got := readAll(t, l, 1<<20)
	h, err := batch.Validate(got)
	if err != nil || h.LeaderEpoch != 7 {
		t.Fatalf("stored epoch %d (%v), want 7", h.LeaderEpoch, err)
	}
}

func TestOffsetsBeyond2To31(t *testing.T) {
	forEachBackend(t, func(t *testing.T, fio ring.FileIO, mode StorageMode) {
		dir := t.TempDir()
		l, _ := openLog(t, dir, testConfig(mode), fio)
		start := int64(1)<<32 + 5
		if err := l.ResetTo(start); err != nil {
			t.Fatal(err)
		}
		want := appendSome(t, l, 0, 400, 0)
		if l.SegmentCount() < 3 || l.StartOffset() != start {
			t.Fatalf("%d segments, start %d", l.SegmentCount(), l.StartOffset())
		}
		mustEqualBytes(t, "read", readAll(t, l, 700), want)
		checkEveryOffset(t, l, want)
		l.Close()
		if _, err := os.Stat(segmentFile(dir, start, logSuffix)); err != nil {
			t.Fatalf("first segment not named by its 20-digit base offset: %v", err)
		}
		l2, _ := openLog(t, dir, testConfig(mode), fio)
		defer l2.Close()
		if l2.StartOffset() != start {
			t.Fatalf("start after reopen %d", l2.StartOffset())
		}
		mustEqualBytes(t, "read after reopen", readAll(t, l2, 100), want)
	})
}

// TestRollOnRelativeOffsetRange: relative offsets live in the index's u32 (Kafka: int32), so
// a batch that would end more than 2^31-1 past the segment base rolls the segment.
func TestRollOnRelativeOffsetRange(t *testing.T) {
	l := &Log{cfg: LogConfig{SegmentBytes: 1 << 30}}
	s := &segment{baseOffset: 1 << 40, nextOffset: 1<<40 + maxRelativeOffset - 10, size: 100}
	if l.shouldRoll(s, batch.Header{LastOffsetDelta: 10, Length: 100}, time.Time{}) {
		t.Fatal("rolled with the batch still in range")
	}
	if !l.shouldRoll(s, batch.Header{LastOffsetDelta: 11, Length: 100}, time.Time{}) {
		t.Fatal("did not roll past the relative offset range")
	}
}

func TestOffsetForTimestamp(t *testing.T) {
	forEachBackend(t, func(t *testing.T, fio ring.FileIO, mode StorageMode) {
		dir := t.TempDir()
		l, _ := openLog(t, dir, testConfig(mode), fio)
		// Batch i has 4 records with timestamps 1000+10i .. 1000+10i+3.
		for i := 0; i < 400; i++ {
			if _, err := l.Append(makeBatch(t, i, 4, 100, 1000+int64(10*i))); err != nil {
				t.Fatal(err)
			}
		}
		check := func(l *Log) {
			t.Helper()
			for _, tc := range []struct{ ts, want int64 }{
				{0, 0}, {1000, 0}, {1001, 1}, {1003, 3}, {1004, 4}, {1010, 4}, {1012, 6},
				{1000 + 10*250 + 2, 4*250 + 2}, {1000 + 10*399 + 3, 4*399 + 3},
				{TimestampEarliest, 0}, {TimestampLatest, 1600},
			} {
				got, err := l.OffsetForTimestamp(tc.ts)
				if err != nil || got != tc.want {
					t.Fatalf("OffsetForTimestamp(%d) = %d, %v; want %d", tc.ts, got, err, tc.want)
				}
			}
			if _, err := l.OffsetForTimestamp(1000 + 10*399 + 4); !errors.Is(err, ErrTimestampNotFound) {
				t.Fatalf("past the newest: %v", err)
			}
		}
		check(l)
		l.Close()
		l2, _ := openLog(t, dir, testConfig(mode), fio)
		defer l2.Close()
		check(l2)
	})
}

func TestTruncateTo(t *testing.T) {
	forEachBackend(t, func(t *testing.T, fio ring.FileIO, mode StorageMode) {
		dir := t.TempDir()
		l, _ := openLog(t, dir, testConfig(mode), fio)
		all := appendSome(t, l, 0, 500, 0)
		offs := batchOffsets(t, all)
		positions := map[int64]int{}
		for pos := 0; pos < len(all); {
			h, _ := batch.ParseHeader(all[pos:])
			positions[h.BaseOffset] = pos
			pos += int(batchSize(h))
		}
		segsBefore := l.SegmentCount()
		// Truncate mid-batch: the whole batch holding the offset goes.
		cut := offs[301] // batch 301 holds 2 records
		if err := l.TruncateTo(cut + 1); err != nil {
			t.Fatal(err)
		}
		if l.EndOffset() != cut {
			t.Fatalf("end after truncate %d, want %d", l.EndOffset(), cut)
		}
		if l.SegmentCount() >= segsBefore {
			t.Fatalf("segments %d, want fewer than %d", l.SegmentCount(), segsBefore)
		}
		mustEqualBytes(t, "after truncate", readAll(t, l, 1<<20), all[:positions[cut]])
		more := appendSome(t, l, 1000, 40, 0)
		want := append(append([]byte(nil), all[:positions[cut]]...), more...)
		mustEqualBytes(t, "truncate then append", readAll(t, l, 1<<20), want)
		l.Close()
		l2, rep := openLog(t, dir, testConfig(mode), fio)
		if rep.DroppedBytes != 0 {
			t.Fatalf("reopen after truncate dropped %+v", rep)
		}
		mustEqualBytes(t, "reopen after truncate", readAll(t, l2, 1<<20), want)
		// Truncating to the start of a segment keeps the previous one whole.
		if err := l2.TruncateTo(offs[100]); err != nil {
			t.Fatal(err)
		}
		mustEqualBytes(t, "truncate to a batch boundary", readAll(t, l2, 1<<20), all[:positions[offs[100]]])
		// Below the start: the log restarts empty at that offset.
		if _, err := l2.DeleteRecordsBefore(offs[50]); err != nil {
			t.Fatal(err)
		}
		if err := l2.TruncateTo(offs[10]); err != nil {
			t.Fatal(err)
		}
		if l2.StartOffset() != offs[10] || l2.EndOffset() != offs[10] || l2.Size() != 0 {
			t.Fatalf("truncate below start: start %d end %d size %d", l2.StartOffset(), l2.EndOffset(), l2.Size())
		}
		l2.Close()
	})
}

func TestRetention(t *testing.T) {
	clock := newFakeClock()
	cfg := testConfig(StoragePageCache)
	cfg.Clock = clock.Now
	cfg.RetentionMs = 60_000
	l, _ := openLog(t, t.TempDir(), cfg, ring.Syscalls{})
	defer l.Close()
	now := clock.now.UnixMilli()
	// Old data: timestamps an hour ago. New data: now.
	appendSome(t, l, 0, 300, now-3_600_000)
	oldEnd := l.EndOffset()
	appendSome(t, l, 300, 300, now)
	segs := l.SegmentCount()
	deleted, err := l.EnforceRetention(clock.now)
	if err != nil || deleted == 0 {
		t.Fatalf("time retention deleted %d, %v", deleted, err)
	}
	if l.SegmentCount() != segs-deleted || l.StartOffset() > oldEnd || l.StartOffset() == 0 {
		t.Fatalf("after time retention: %d segments, start %d (old data ended at %d)", l.SegmentCount(), l.StartOffset(), oldEnd)
	}
	if _, err := l.Read(0, 100); !errors.Is(err, ErrOffsetOutOfRange) {
		t.Fatalf("deleted data still readable: %v", err)
	}
	// Size retention never deletes the active segment.
	l.cfg.RetentionBytes = 1
	if _, err := l.EnforceRetention(clock.now); err != nil {
		t.Fatal(err)
	}
	if l.SegmentCount() != 1 || l.StartOffset() != l.active().baseOffset {
		t.Fatalf("size retention left %d segments, start %d", l.SegmentCount(), l.StartOffset())
	}
	if _, err := l.Read(l.StartOffset(), 100); err != nil {
		t.Fatal(err)
	}
}

func TestSegmentMsRoll(t *testing.T) {
	clock := newFakeClock()
	cfg := testConfig(StoragePageCache)
	cfg.Clock = clock.Now
	cfg.SegmentMs = SegmentMsMin
	l, _ := openLog(t, t.TempDir(), cfg, ring.Syscalls{})
	defer l.Close()
	appendSome(t, l, 0, 3, 0)
	clock.Advance(SegmentMsMin*time.Millisecond - time.Millisecond)
	appendSome(t, l, 3, 1, 0)
	if l.SegmentCount() != 1 {
		t.Fatalf("rolled too early")
	}
	clock.Advance(time.Millisecond)
	appendSome(t, l, 4, 1, 0)
	if l.SegmentCount() != 2 {
		t.Fatalf("segment.ms did not roll: %d segments", l.SegmentCount())
	}
}

func TestDirectFallsBackWhenUnsupported(t *testing.T) {
	dir := t.TempDir()
	probeDirectIO = func(dir string) error { return fmt.Errorf("%w in %s: open: %w", errNoDirectIO, dir, unix.EINVAL) }
	defer func() { probeDirectIO = probeDirectUncached }()
	var logged bytes.Buffer
	cfg := testConfig(StorageDirect)
	cfg.Logger = slog.New(slog.NewTextHandler(&logged, nil))
	l, _ := openLog(t, dir, cfg, ring.Syscalls{})
	if l.Mode() != StoragePageCache {
		t.Fatalf("mode %s without O_DIRECT, want fallback to page-cache", l.Mode())
	}
	if !strings.Contains(logged.String(), "falling back to page-cache") {
		t.Fatalf("no log line for the fallback: %q", logged.String())
	}
	want := appendSome(t, l, 0, 20, 0)
	mustEqualBytes(t, "fallback read", readAll(t, l, 1<<20), want)
	// The probe result is cached per directory.
	l.Close()
	probeDirectIO = func(string) error { t.Fatal("probed twice"); return nil }
	l2, _ := openLog(t, dir+"/", cfg, ring.Syscalls{})
	defer l2.Close()
	if l2.Mode() != StoragePageCache {
		t.Fatalf("mode %s on reopen", l2.Mode())
	}
	mustEqualBytes(t, "fallback reopen", readAll(t, l2, 1<<20), want)
}

func TestDeleteRecordsBeforePersists(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(StoragePageCache)
	l, _ := openLog(t, dir, cfg, ring.Syscalls{})
	all := appendSome(t, l, 0, 300, 0)
	offs := batchOffsets(t, all)
	mid := offs[151] + 1 // inside a segment, inside a batch (151 holds 2 records)
	if _, err := l.DeleteRecordsBefore(mid); err != nil {
		t.Fatal(err)
	}
	if _, err := l.DeleteRecordsBefore(l.EndOffset() + 1); !errors.Is(err, ErrOffsetOutOfRange) {
		t.Fatalf("delete beyond end: %v", err)
	}
	l.Close()
	l2, _ := openLog(t, dir, cfg, ring.Syscalls{})
	if l2.StartOffset() != mid {
		t.Fatalf("start offset after reopen %d, want %d", l2.StartOffset(), mid)
	}
	if _, err := l2.Read(mid-1, 100); !errors.Is(err, ErrOffsetOutOfRange) {
		t.Fatalf("read below persisted start: %v", err)
	}
	if res, err := l2.Read(mid, 100); err != nil || res.FirstOffset != offs[151] {
		t.Fatalf("read at start: %+v %v", res, err)
	}
	// Truncating below the start resets the log, and the checkpoint with it.
	if err := l2.TruncateTo(5); err != nil {
		t.Fatal(err)
	}
	l2.Close()
	l3, _ := openLog(t, dir, cfg, ring.Syscalls{})
	defer l3.Close()
	if l3.StartOffset() != 5 || l3.EndOffset() != 5 {
		t.Fatalf("after reset: start %d end %d", l3.StartOffset(), l3.EndOffset())
	}
}

func TestAppendReplicated(t *testing.T) {
	forEachBackend(t, func(t *testing.T, fio ring.FileIO, mode StorageMode) {
		leader, _ := openLog(t, t.TempDir(), testConfig(mode), fio)
		defer leader.Close()
		leader.SetLeaderEpoch(3)
		want := appendSome(t, leader, 0, 200, 0)
		follower, _ := openLog(t, t.TempDir(), testConfig(mode), fio)
		defer follower.Close()
		// Copy the leader's log in fetch-sized pieces, as a follower would.
		for off := int64(0); off < leader.EndOffset(); {
			res, err := leader.Read(off, 3000)
			if err != nil {
				t.Fatal(err)
			}
			data, _ := res.AppendTo(nil)
			var batches [][]byte
			for p := data; len(p) > 0; {
				h, _ := batch.ParseHeader(p)
				batches = append(batches, p[:h.Size()])
				p = p[h.Size():]
			}
			if _, err := follower.AppendReplicated(batches); err != nil {
				t.Fatalf("AppendReplicated at %d: %v", off, err)
			}
			off = res.NextOffset
		}
		mustEqualBytes(t, "follower log", readAll(t, follower, 1<<20), want)
		// A batch that does not continue the log is refused.
		gap := makeBatch(t, 1, 1, 10, 0)
		batch.SetBaseOffset(gap, follower.EndOffset()+1)
		if _, err := follower.AppendReplicated([][]byte{gap}); !errors.Is(err, ErrInvalidBatch) {
			t.Fatalf("gap: %v", err)
		}
		if follower.EndOffset() != leader.EndOffset() {
			t.Fatal("refused batch changed the follower")
		}
	})
}

func TestReadHugeMaxBytes(t *testing.T) {
	l, _ := openLog(t, t.TempDir(), testConfig(StoragePageCache), ring.Syscalls{})
	defer l.Close()
	all := appendSome(t, l, 0, 30, 0)
	h, _ := batch.ParseHeader(all)
	res, err := l.Read(h.LastOffset()+1, int(^uint(0)>>1)) // position > 0: pos+maxBytes would overflow
	if err != nil {
		t.Fatal(err)
	}
	got, _ := res.AppendTo(nil)
	mustEqualBytes(t, "max int read", got, all[h.Size():])
}

func TestInvariantsCatchDamage(t *testing.T) {
	l, _ := openLog(t, t.TempDir(), testConfig(StoragePageCache), ring.Syscalls{})
	defer l.Close()
	appendSome(t, l, 0, 300, 0)
	mustInvariants(t, l)
	damage := []func(){
		func() { l.segments[0].nextOffset++ },
		func() { l.active().syncedSize = l.active().size + 1 },
		func() { l.startOffset = l.EndOffset() + 1 },
		func() { l.segments[0].index.entries[0].position = uint32(l.segments[0].size) }, // last: not restored
	}
	for i, d := range damage {
		saved := *l.segments[0]
		savedActive := *l.active()
		start := l.startOffset
		d()
		if l.checkInvariants() == nil {
			t.Errorf("damage %d not caught", i)
		}
		*l.segments[0], *l.active(), l.startOffset = saved, savedActive, start
	}
	l.closeFiles()
	l.closed = true
}

// TestDirectReadSlicesStayValid: in-memory pieces handed to a reader keep their bytes after
// the chunks they came from are evicted (shared chunks are never recycled).
func TestDirectReadSlicesStayValid(t *testing.T) {
	cfg := testConfig(StorageDirect)
	cfg.SegmentBytes = 1 << 20
	dir := t.TempDir()
	l, _ := openLog(t, dir, cfg, ring.Syscalls{})
	defer l.Close()
	skipUnlessDirect(t, l, dir, StorageDirect)
	all := appendSome(t, l, 0, 60, 0)
	res, err := l.Read(l.StartOffset(), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	var held [][]byte
	var want [][]byte
	for _, p := range res.Pieces {
		if p.Data != nil {
			held = append(held, p.Data)
			want = append(want, append([]byte(nil), p.Data...))
		}
	}
	if len(held) == 0 {
		t.Fatal("no in-memory pieces: the chunk cache is not serving reads")
	}
	appendSome(t, l, 60, 600, 0) // many chunks written and evicted, some recycled
	for i := range held {
		mustEqualBytes(t, "held piece", held[i], want[i])
	}
	more, _ := res.AppendTo(nil)
	mustEqualBytes(t, "result after eviction", more, all[:len(more)])
}

// TestSealedIndexesAreBounded: sealed segments' indexes leave memory once persisted and come
// back on demand, at most sealedIndexesLoadedMax at a time.
func TestSealedIndexesAreBounded(t *testing.T) {
	cfg := testConfig(StoragePageCache)
	cfg.SegmentBytes = 8 << 10
	l, _ := openLog(t, t.TempDir(), cfg, ring.Syscalls{})
	defer l.Close()
	all := appendSome(t, l, 0, 600, 0)
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	if l.SegmentCount() < 2*sealedIndexesLoadedMax {
		t.Fatalf("only %d segments", l.SegmentCount())
	}
	loaded := func() int {
		n := 0
		for _, s := range l.segments[:len(l.segments)-1] {
			if !s.indexReleased {
				n++
			}
		}
		return n
	}
	if n := loaded(); n != 0 {
		t.Fatalf("%d sealed indexes still in memory after sync", n)
	}
	checkEveryOffset(t, l, all) // touches every segment's index
	if n := loaded(); n != sealedIndexesLoadedMax || len(l.loadedIndexes) != n {
		t.Fatalf("%d sealed indexes loaded (list %d), want %d", n, len(l.loadedIndexes), sealedIndexesLoadedMax)
	}
	if _, err := l.OffsetForTimestamp(5); err != nil {
		t.Fatal(err)
	}
}
