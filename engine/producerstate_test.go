package engine

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/ringlog/ringlog/engine/batch"
	"github.com/ringlog/ringlog/ring"
)

// idemBatch builds a batch of n records of producer (id, epoch) starting at sequence seq.
func idemBatch(t testing.TB, id int64, epoch int16, seq int32, n int, ts int64) []byte {
	t.Helper()
	b := batch.NewBuilder(batch.BuilderOptions{ProducerID: id, ProducerEpoch: epoch, BaseSequence: seq, Idempotent: true})
	for i := 0; i < n; i++ {
		b.Append(ts+int64(i), fmt.Appendf(nil, "k%d", i), recordValue(int(seq), i, 100), nil)
	}
	out, err := b.Build(nil)
	if err != nil {
		t.Fatalf("build batch: %v", err)
	}
	return out
}

func header(id int64, epoch int16, seq int32, n int32, base int64) batch.Header {
	return batch.Header{ProducerID: id, ProducerEpoch: epoch, BaseSequence: seq, LastOffsetDelta: n - 1, RecordCount: n, BaseOffset: base, MaxTimestamp: 1000}
}

// TestProducerStateCheck drives the sequence rules: each case applies the batches of
// "before" (appended, with offsets) and then checks one batch.
func TestProducerStateCheck(t *testing.T) {
	const id = 7
	cases := []struct {
		name    string
		before  []batch.Header
		check   batch.Header
		wantDup int64 // original first offset when a duplicate; -1 otherwise
		wantErr error
	}{
		{"unknown producer, sequence 0", nil, header(id, 0, 0, 10, 0), -1, nil},
		{"unknown producer, any sequence", nil, header(id, 0, 500, 10, 0), -1, nil},
		{"in order", []batch.Header{header(id, 0, 0, 10, 0)}, header(id, 0, 10, 5, 10), -1, nil},
		{"duplicate of the last", []batch.Header{header(id, 0, 0, 10, 0), header(id, 0, 10, 5, 10)}, header(id, 0, 10, 5, 0), 10, nil},
		{"duplicate of an older one", []batch.Header{header(id, 0, 0, 10, 0), header(id, 0, 10, 5, 10), header(id, 0, 15, 5, 15)}, header(id, 0, 0, 10, 0), 0, nil},
		{"gap", []batch.Header{header(id, 0, 0, 10, 0)}, header(id, 0, 11, 5, 0), -1, ErrOutOfOrderSequence},
		{"overlap that is no duplicate", []batch.Header{header(id, 0, 0, 10, 0)}, header(id, 0, 5, 10, 0), -1, ErrOutOfOrderSequence},
		{"old sequence forgotten", []batch.Header{
			header(id, 0, 0, 1, 0), header(id, 0, 1, 1, 1), header(id, 0, 2, 1, 2), header(id, 0, 3, 1, 3), header(id, 0, 4, 1, 4), header(id, 0, 5, 1, 5),
		}, header(id, 0, 0, 1, 0), -1, ErrOutOfOrderSequence},
		{"stale epoch", []batch.Header{header(id, 3, 0, 10, 0)}, header(id, 2, 10, 1, 0), -1, ErrProducerFenced},
		{"stale epoch, duplicate sequence", []batch.Header{header(id, 3, 0, 10, 0)}, header(id, 2, 0, 10, 0), -1, ErrProducerFenced},
		{"new epoch from 0", []batch.Header{header(id, 3, 0, 10, 0)}, header(id, 4, 0, 1, 0), -1, nil},
		{"new epoch not from 0", []batch.Header{header(id, 3, 0, 10, 0)}, header(id, 4, 10, 1, 0), -1, ErrOutOfOrderSequence},
		{"other producer unaffected", []batch.Header{header(id, 3, 0, 10, 0)}, header(id+1, 0, 42, 1, 0), -1, nil},
		{"sequence wraps", []batch.Header{header(id, 0, math.MaxInt32-4, 5, 0)}, header(id, 0, 0, 3, 5), -1, nil},
		{"wrapped batch then next", []batch.Header{header(id, 0, math.MaxInt32-1, 5, 0)}, header(id, 0, 3, 1, 5), -1, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ps := newProducerState()
			for _, h := range c.before {
				ps.update(h)
			}
			dup, ok, err := ps.checkAppend([]batch.Header{c.check})
			if !errors.Is(err, c.wantErr) || (err != nil) != (c.wantErr != nil) {
				t.Fatalf("err = %v, want %v", err, c.wantErr)
			}
			if ok != (c.wantDup >= 0) || ok && dup.firstOffset != c.wantDup {
				t.Fatalf("duplicate = %v (%+v), want first offset %d", ok, dup, c.wantDup)
			}
		})
	}
}

// TestProducerStateOneAppend checks several batches of one append against each other.
func TestProducerStateOneAppend(t *testing.T) {
	ps := newProducerState()
	if _, _, err := ps.checkAppend([]batch.Header{header(1, 0, 0, 5, 0), header(1, 0, 5, 5, 0), header(2, 0, 9, 1, 0)}); err != nil {
		t.Fatalf("in-order run: %v", err)
	}
	if _, _, err := ps.checkAppend([]batch.Header{header(1, 0, 0, 5, 0), header(1, 0, 6, 5, 0)}); !errors.Is(err, ErrOutOfOrderSequence) {
		t.Fatalf("gap inside one append: %v", err)
	}
	ps.update(header(1, 0, 0, 5, 0))
	if _, _, err := ps.checkAppend([]batch.Header{header(1, 0, 0, 5, 0), header(1, 0, 5, 5, 0)}); !errors.Is(err, ErrDuplicateSequence) {
		t.Fatalf("duplicate followed by a new batch: %v", err)
	}
}

func TestIdempotentAppend(t *testing.T) {
	forEachBackend(t, func(t *testing.T, fio ring.FileIO, mode StorageMode) {
		l, _ := openLog(t, t.TempDir(), testConfig(mode), fio)
		defer l.Close()
		ts := time.Now().UnixMilli()
		b0, b1 := idemBatch(t, 9, 0, 0, 3, ts), idemBatch(t, 9, 0, 3, 2, ts)
		if _, err := l.AppendBatches([][]byte{b0, b1}); err != nil {
			t.Fatal(err)
		}
		if _, err := l.Append(makeBatch(t, 1, 4, 10, ts)); err != nil { // a non-idempotent batch between
			t.Fatal(err)
		}
		end := l.EndOffset()
		res, err := l.AppendBatches([][]byte{idemBatch(t, 9, 0, 0, 3, ts), idemBatch(t, 9, 0, 3, 2, ts)})
		if err != nil || !res.Duplicate || res.FirstOffset != 0 || res.LastOffset != 4 || l.EndOffset() != end {
			t.Fatalf("retry of both: %+v, %v (end %d, want %d)", res, err, l.EndOffset(), end)
		}
		res, err = l.AppendBatches([][]byte{idemBatch(t, 9, 0, 3, 2, ts)})
		if err != nil || !res.Duplicate || res.FirstOffset != 3 || res.LastOffset != 4 {
			t.Fatalf("retry of the second: %+v, %v", res, err)
		}
		if _, err := l.Append(idemBatch(t, 9, 0, 6, 1, ts)); !errors.Is(err, ErrOutOfOrderSequence) {
			t.Fatalf("gap: %v", err)
		}
		off, err := l.Append(idemBatch(t, 9, 1, 0, 1, ts))
		if err != nil || off != end {
			t.Fatalf("new epoch: %d, %v", off, err)
		}
		if _, err := l.Append(idemBatch(t, 9, 0, 5, 1, ts)); !errors.Is(err, ErrProducerFenced) {
			t.Fatalf("old epoch after the new one wrote: %v", err)
		}
		if l.EndOffset() != end+1 {
			t.Fatalf("end %d, want %d: a refused batch was written", l.EndOffset(), end+1)
		}
	})
}

// appendIdem appends batches of count records for producer id from sequence seq on, and
// returns the next sequence.
func appendIdem(t *testing.T, l *Log, id int64, seq int32, batches, count int, ts int64) int32 {
	t.Helper()
	for i := 0; i < batches; i++ {
		if _, err := l.Append(idemBatch(t, id, 0, seq, count, ts)); err != nil {
			t.Fatalf("append seq %d: %v", seq, err)
		}
		seq += int32(count)
	}
	return seq
}

// TestProducerSnapshotAndRebuild: snapshots appear at rolls, recovery after a crash (no
// Close) and after a clean close starts from the newest and reads only the headers after
// it, and dedup answers with the original offsets afterwards.
func TestProducerSnapshotAndRebuild(t *testing.T) {
	forEachBackend(t, func(t *testing.T, fio ring.FileIO, mode StorageMode) {
		dir := t.TempDir()
		cfg := testConfig(mode)
		l, _ := openLog(t, dir, cfg, fio)
		ts := time.Now().UnixMilli()
		seqA := appendIdem(t, l, 1, 0, 200, 10, ts) // ~230 KiB: several 64 KiB segments
		seqB := appendIdem(t, l, 2, 0, 3, 1, ts)
		seqA = appendIdem(t, l, 1, seqA, 2, 10, ts)
		if l.SegmentCount() < 3 {
			t.Fatalf("%d segments, want a few rolls", l.SegmentCount())
		}
		if snaps, _ := listProducerSnapshots(dir); len(snaps) < min(l.SegmentCount()-1, producerSnapshotsMax) {
			t.Fatalf("snapshots %v before any sync: every roll's must stay until one is durable", snaps)
		}
		if err := l.Sync(); err != nil {
			t.Fatal(err)
		}
		snaps, err := listProducerSnapshots(dir)
		if err != nil || len(snaps) != producerSnapshotsKept || snaps[1] != l.active().baseOffset {
			t.Fatalf("snapshots %v (%v) after a sync, want the last %d ending at the active base %d", snaps, err, producerSnapshotsKept, l.active().baseOffset)
		}
		want := l.Producers()
		lastA := want[0].LastOffset

		// Crash: the old Log is simply abandoned.
		l2, rep := openLog(t, dir, cfg, fio)
		if rep.ProducerSnapshot != snaps[1] || rep.Producers != 2 {
			t.Fatalf("recovery report %+v: want snapshot %d and 2 producers", rep, snaps[1])
		}
		if rep.ProducerBatchesScanned >= 60 { // 205 batches in all, ~56 per segment
			t.Fatalf("recovery read %d headers; the snapshot should leave only the active segment's", rep.ProducerBatchesScanned)
		}
		if got := l2.Producers(); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("rebuilt state %+v, want %+v", got, want)
		}
		res, err := l2.AppendBatches([][]byte{idemBatch(t, 1, 0, seqA-10, 10, ts)})
		if err != nil || !res.Duplicate || res.LastOffset != lastA {
			t.Fatalf("retry after crash: %+v, %v", res, err)
		}
		appendIdem(t, l2, 2, seqB, 1, 1, ts)
		if err := l2.Close(); err != nil {
			t.Fatal(err)
		}
		l3, rep := openLog(t, dir, cfg, fio)
		defer l3.Close()
		if rep.ProducerSnapshot != l3.EndOffset() || rep.ProducerBatchesScanned != 0 {
			t.Fatalf("after a clean close: %+v, want the close snapshot at %d and nothing read", rep, l3.EndOffset())
		}
		if _, err := l3.Append(idemBatch(t, 2, 0, seqB+2, 1, ts)); !errors.Is(err, ErrOutOfOrderSequence) {
			t.Fatalf("gap after reopen: %v", err)
		}
	})
}

// TestProducerSnapshotFallback: a damaged newest snapshot is dropped and the older one used;
// a snapshot beyond the recovered end (its batches lost) is deleted; with no snapshot the
// state is read from the headers.
func TestProducerSnapshotFallback(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(StoragePageCache)
	l, _ := openLog(t, dir, cfg, ring.Syscalls{})
	ts := time.Now().UnixMilli()
	seq := appendIdem(t, l, 5, 0, 200, 10, ts)
	want := fmt.Sprint(l.Producers())
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	snaps, _ := listProducerSnapshots(dir)
	newest := producerSnapshotPath(dir, snaps[len(snaps)-1])
	if err := os.WriteFile(newest, []byte("RLPS garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	beyond := producerSnapshotPath(dir, l.EndOffset()+1000)
	if err := os.WriteFile(beyond, encodeProducerSnapshot(&l.producers, l.EndOffset()+1000), 0o644); err != nil {
		t.Fatal(err)
	}
	l2, rep := openLog(t, dir, cfg, ring.Syscalls{})
	if rep.ProducerSnapshot != snaps[0] || fmt.Sprint(l2.Producers()) != want {
		t.Fatalf("fallback: %+v, state %v, want snapshot %d and %s", rep, l2.Producers(), snaps[0], want)
	}
	for _, p := range []string{newest, beyond} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s still there (%v)", p, err)
		}
	}
	for _, off := range snaps {
		os.Remove(producerSnapshotPath(dir, off))
	}
	l3, rep := openLog(t, dir, cfg, ring.Syscalls{})
	if rep.ProducerSnapshot != -1 || fmt.Sprint(l3.Producers()) != want {
		t.Fatalf("no snapshot: %+v, state %v, want %s", rep, l3.Producers(), want)
	}
	res, err := l3.AppendBatches([][]byte{idemBatch(t, 5, 0, seq-10, 10, ts)})
	if err != nil || !res.Duplicate {
		t.Fatalf("retry: %+v, %v", res, err)
	}
	appendIdem(t, l3, 5, seq, 200, 10, ts) // rolls again: once synced, two snapshots stay
	if err := l3.Sync(); err != nil {
		t.Fatal(err)
	}
	if snaps, err := listProducerSnapshots(dir); err != nil || len(snaps) != producerSnapshotsKept || fmt.Sprint(snaps) != fmt.Sprint(l3.snapshots) {
		t.Fatalf("snapshot files %v (%v), log tracks %v; want the newest %d", snaps, err, l3.snapshots, producerSnapshotsKept)
	}
}

// TestProducerStateTruncate: a truncation forgets the producer state of the batches removed.
func TestProducerStateTruncate(t *testing.T) {
	l, _ := openLog(t, t.TempDir(), testConfig(StoragePageCache), ring.Syscalls{})
	defer l.Close()
	ts := time.Now().UnixMilli()
	appendIdem(t, l, 3, 0, 100, 10, ts)
	if err := l.TruncateTo(500); err != nil {
		t.Fatal(err)
	}
	got := l.Producers()
	if len(got) != 1 || got[0].LastSequence != 499 || got[0].LastOffset != 499 {
		t.Fatalf("after truncation to 500: %+v", got)
	}
	if _, err := l.Append(idemBatch(t, 3, 0, 500, 10, ts)); err != nil {
		t.Fatalf("append after truncation: %v", err)
	}
}

// TestProducerExpiry: with an injected clock, a producer idle for producer.id.expiration.ms
// is forgotten by the retention pass (and on open), after which any sequence is accepted.
func TestProducerExpiry(t *testing.T) {
	clock := newFakeClock()
	cfg := testConfig(StoragePageCache)
	cfg.Clock = clock.Now
	cfg.ProducerIDExpirationMs = 60_000
	cfg.RetentionMs = -1
	dir := t.TempDir()
	l, _ := openLog(t, dir, cfg, ring.Syscalls{})
	ts := clock.Now().UnixMilli()
	appendIdem(t, l, 1, 0, 1, 5, ts)
	clock.Advance(30 * time.Second)
	appendIdem(t, l, 2, 0, 1, 5, clock.Now().UnixMilli())
	clock.Advance(31 * time.Second) // producer 1 idle 61 s, producer 2 31 s
	if _, err := l.EnforceRetention(clock.Now()); err != nil {
		t.Fatal(err)
	}
	if got := l.Producers(); len(got) != 1 || got[0].ProducerID != 2 {
		t.Fatalf("after expiry: %+v, want producer 2 only", got)
	}
	if _, err := l.Append(idemBatch(t, 1, 0, 77, 1, clock.Now().UnixMilli())); err != nil {
		t.Fatalf("expired producer, new sequence: %v", err)
	}
	if _, err := l.Append(idemBatch(t, 2, 0, 77, 1, clock.Now().UnixMilli())); !errors.Is(err, ErrOutOfOrderSequence) {
		t.Fatalf("live producer keeps its sequence: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	clock.Advance(2 * time.Minute)
	l2, rep := openLog(t, dir, cfg, ring.Syscalls{})
	defer l2.Close()
	if rep.Producers != 0 {
		t.Fatalf("reopened two minutes later: %d producers, want 0", rep.Producers)
	}
}

func TestProducerSnapshotRoundTrip(t *testing.T) {
	ps := newProducerState()
	ps.update(header(1, 0, 0, 10, 0))
	ps.update(header(1, 0, 10, 10, 10))
	ps.update(header(math.MaxInt64, math.MaxInt16, math.MaxInt32-3, 10, 20))
	b := encodeProducerSnapshot(&ps, 30)
	got, off, err := decodeProducerSnapshot(b)
	if err != nil || off != 30 || fmt.Sprint(got.producers[1]) != fmt.Sprint(ps.producers[1]) || len(got.producers) != 2 {
		t.Fatalf("round trip: %v %d %v", err, off, got.producers)
	}
	for i := range b {
		c := append([]byte(nil), b...)
		c[i] ^= 0x40
		if _, _, err := decodeProducerSnapshot(c); err == nil {
			t.Fatalf("flipped byte %d accepted", i)
		}
	}
}

func FuzzProducerSnapshot(f *testing.F) {
	ps := newProducerState()
	ps.update(header(1, 0, 0, 10, 0))
	ps.update(header(2, 1, 5, 1, 10))
	f.Add(encodeProducerSnapshot(&ps, 11))
	f.Add(encodeProducerSnapshot(&producerState{}, 0))
	f.Add([]byte{})
	f.Add([]byte("RLPS"))
	f.Fuzz(func(t *testing.T, b []byte) {
		got, off, err := decodeProducerSnapshot(b)
		if err != nil {
			return
		}
		again := encodeProducerSnapshot(&got, off)
		if string(again) != string(b) {
			t.Fatalf("decoded snapshot re-encodes differently")
		}
	})
}

// TestProducerStatePowerLoss: a power loss at any fsync while an idempotent producer's
// appends roll segments (and write snapshots) leaves a log whose recovered producer state is
// exactly the state its batch headers imply: a snapshot that lost its data or its batches is
// never trusted.
func TestProducerStatePowerLoss(t *testing.T) {
	rng := rand.New(rand.NewPCG(powerLossSeed(t), 11))
	cfg := LogConfig{SegmentBytes: 1 << 10, IndexIntervalBytes: 256, Logger: quietLogger}
	ts := time.Now().UnixMilli()
	crashPoints(t, rng, 1, func(string) {}, func(dir string, fio ring.FileIO) error {
		l, _, err := OpenLog(dir, cfg, fio)
		if err != nil {
			return err
		}
		defer l.closeFiles() // the process dies
		seq := [2]int32{}
		for i := 0; i < 24; i++ {
			p := i % 2
			if _, err := l.Append(idemBatch(t, int64(7+p), 0, seq[p], 2, ts)); err != nil {
				return err
			}
			seq[p] += 2
			if i%4 == 3 {
				if err := l.Sync(); err != nil {
					return err
				}
			}
		}
		return l.Close()
	}, func(image string, at int, _ error) {
		entries, _ := os.ReadDir(image)
		var names []string
		for _, e := range entries {
			fi, _ := e.Info()
			names = append(names, fmt.Sprintf("%s:%d", e.Name(), fi.Size()))
		}
		l, rep := openLog(t, image, cfg, ring.Syscalls{})
		defer l.Close()
		want := newProducerState()
		data := readAll(t, l, 1<<20)
		for len(data) > 0 {
			h, err := validateFirst(data)
			if err != nil {
				t.Fatalf("crash at fsync %d: %v", at, err)
			}
			want.update(h)
			data = data[h.Size():]
		}
		got, exp := encodeProducerSnapshot(&l.producers, l.EndOffset()), encodeProducerSnapshot(&want, l.EndOffset())
		if string(got) != string(exp) {
			t.Fatalf("crash at fsync %d: recovered producer state %v, the log's headers say %v (recovery %+v, files %v)", at, producerInfos(&l.producers), producerInfos(&want), rep, names)
		}
	})
}

func producerInfos(ps *producerState) []string {
	var out []string
	for _, id := range ps.ids() {
		out = append(out, fmt.Sprintf("%d:%+v", id, *ps.producers[id]))
	}
	return out
}
