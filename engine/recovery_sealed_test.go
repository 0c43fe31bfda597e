package engine

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ringlog/ringlog/engine/batch"
	"github.com/ringlog/ringlog/ring"
)

// sealedFixture is a log of several sealed segments with the default index.interval.bytes,
// written and then shut down (cleanly or not), whose first segment gets one flipped byte.
type sealedFixture struct {
	dir   string
	cfg   LogConfig
	all   []byte  // every batch, in order
	bases []int64 // segment base offsets
	size0 int64   // size of the first segment
	end   int64   // log end offset
}

func newSealedFixture(t *testing.T, clean bool) *sealedFixture {
	t.Helper()
	f := &sealedFixture{dir: t.TempDir(), cfg: testConfig(StoragePageCache)}
	f.cfg.IndexIntervalBytes = 0 // the default (4096)
	l, _ := openLog(t, f.dir, f.cfg, ring.Syscalls{})
	f.all = appendSome(t, l, 0, 600, 0)
	for _, s := range l.segments {
		f.bases = append(f.bases, s.baseOffset)
	}
	f.size0, f.end = l.segments[0].size, l.EndOffset()
	if len(f.bases) < 4 {
		t.Fatalf("want at least 4 segments, have %d", len(f.bases))
	}
	if clean {
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
	} else {
		if err := l.Sync(); err != nil { // acknowledged and synced ...
			t.Fatal(err)
		}
		l.closeFiles() // ... and then the process dies
	}
	return f
}

// batchStarts returns the positions of the first segment's batches.
func (f *sealedFixture) batchStarts(t *testing.T) []int64 {
	var out []int64
	for pos := int64(0); pos < f.size0; {
		h, err := batch.ParseHeader(f.all[pos:])
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, pos)
		pos += batchSize(h)
	}
	return out
}

// lastIndexed is the position the first segment's last on-disk index entry points at.
func (f *sealedFixture) lastIndexed(t *testing.T) int64 {
	idx, err := os.ReadFile(segmentFile(f.dir, f.bases[0], indexSuffix))
	if err != nil || len(idx) < indexEntryBytes {
		t.Fatalf("first segment's index: %d bytes, %v", len(idx), err)
	}
	return int64(binary.BigEndian.Uint32(idx[len(idx)-4:]))
}

// flip flips a record byte of the first segment's batch at pos, as a bad disk would, and
// returns the batch's base offset.
func (f *sealedFixture) flip(t *testing.T, pos int64) int64 {
	t.Helper()
	h, err := batch.ParseHeader(f.all[pos:])
	if err != nil {
		t.Fatal(err)
	}
	file, err := os.OpenFile(segmentFile(f.dir, f.bases[0], logSuffix), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	at := pos + batch.HeaderSize + 4
	one := []byte{f.all[at] ^ 0x20}
	if _, err := file.WriteAt(one, at); err != nil {
		t.Fatal(err)
	}
	return h.BaseOffset
}

// TestRecoveryFencesRotInSealedSegment: a byte flipped in the re-scanned tail of a sealed
// segment (the last few KiB, past its last index entry, with the default index interval)
// after a clean shutdown, or after a crash that followed a sync, is recorded as a corruption,
// logged at ERROR, reported, and fenced: nothing is cut, every later segment and record
// survives and reads back identical, and a read at or inside the bad batch fails with
// ErrCorruptBatch naming the next readable offset. Today's main cut the segment and deleted
// every later one.
func TestRecoveryFencesRotInSealedSegment(t *testing.T) {
	for _, tc := range []struct {
		name  string
		clean bool
		which string // the batch flipped: the segment's last, or the one its last index entry names
	}{
		{"clean shutdown, last batch", true, "last"},
		{"clean shutdown, last indexed batch", true, "indexed"},
		{"crash after sync, last batch", false, "last"},
		{"crash after sync, last indexed batch", false, "indexed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newSealedFixture(t, tc.clean)
			starts := f.batchStarts(t)
			pos := starts[len(starts)-1]
			if tc.which == "indexed" {
				pos = f.lastIndexed(t)
			}
			if f.size0-pos > 8<<10 {
				t.Fatalf("flip at %d is not in the last few KiB of %d", pos, f.size0)
			}
			bad := f.flip(t, pos)
			next := f.bases[1]

			var logs bytes.Buffer
			cfg := f.cfg
			cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
			l, rep := openLog(t, f.dir, cfg, ring.Syscalls{})
			defer l.Close()
			if rep.CleanShutdown != tc.clean || len(rep.DeletedSegments) != 0 || rep.DroppedBytes != 0 || rep.Corruption != "" {
				t.Fatalf("report %+v", rep)
			}
			if l.SegmentCount() != len(f.bases) || l.EndOffset() != f.end {
				t.Fatalf("%d segments ending at %d, want %d ending at %d", l.SegmentCount(), l.EndOffset(), len(f.bases), f.end)
			}
			want := Corruption{Segment: f.bases[0], Position: pos, Offset: bad, NextOffset: next}
			for what, cs := range map[string][]Corruption{"report": rep.Corruptions, "log": l.Corruptions()} {
				if len(cs) != 1 || cs[0].Segment != want.Segment || cs[0].Position != want.Position ||
					cs[0].Offset != want.Offset || cs[0].NextOffset != want.NextOffset || !strings.Contains(cs[0].Reason, "crc") {
					t.Fatalf("%s corruptions %v, want %+v", what, cs, want)
				}
			}
			line := logs.String()
			if !strings.Contains(line, "level=ERROR") || !strings.Contains(line, fmt.Sprintf("segment=%d", f.bases[0])) ||
				!strings.Contains(line, fmt.Sprintf("offset=%d", bad)) || !strings.Contains(line, "dir="+f.dir) {
				t.Fatalf("no ERROR line naming the partition, segment and offset:\n%s", line)
			}

			// Fenced: before it readable, at and inside it refused, after it identical.
			got := readUntil(t, l, l.StartOffset(), bad)
			mustEqualBytes(t, "before the bad batch", got, f.all[:pos])
			for _, off := range []int64{bad, (bad + next) / 2, next - 1} {
				_, err := l.Read(off, 1<<20)
				if !errors.Is(err, ErrCorruptBatch) || !errors.Is(err, ErrCorruptLog) ||
					!strings.Contains(err.Error(), fmt.Sprintf("next readable offset is %d", next)) {
					t.Fatalf("read at %d: %v", off, err)
				}
			}
			mustEqualBytes(t, "every later segment", readUntil(t, l, next, l.EndOffset()), f.all[f.size0:])
			// appendSome stamps batch i with timestamp i.
			if off, err := l.OffsetForTimestamp(590); err != nil || off < next {
				t.Fatalf("timestamp lookup past the bad batch: %d, %v", off, err)
			}
			if p := scrubPass(t, l, 1<<20); p.Found != 0 || len(l.Corruptions()) != 1 {
				t.Fatalf("scrub after recovery found %d new, %d known", p.Found, len(l.Corruptions()))
			}
			if _, err := l.Append(makeBatch(t, 9999, 1, 10, 0)); err != nil {
				t.Fatal(err)
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}

			// A second start finds the same thing and still loses nothing.
			l2, rep2 := openLog(t, f.dir, f.cfg, ring.Syscalls{})
			defer l2.Close()
			if len(rep2.Corruptions) != 1 || rep2.Corruptions[0].Offset != bad || len(rep2.DeletedSegments) != 0 || l2.EndOffset() != f.end+1 {
				t.Fatalf("second open: report %+v, end %d", rep2, l2.EndOffset())
			}
			// The repair: truncating to the bad offset clears it and the log continues there.
			if err := l2.TruncateTo(bad); err != nil {
				t.Fatal(err)
			}
			if len(l2.Corruptions()) != 0 || l2.EndOffset() != bad {
				t.Fatalf("after truncation: %v, end %d", l2.Corruptions(), l2.EndOffset())
			}
			if _, err := l2.Append(makeBatch(t, 10000, 1, 10, 0)); err != nil {
				t.Fatal(err)
			}
			mustEqualBytes(t, "prefix after repair", readAll(t, l2, 1<<20)[:pos], f.all[:pos])
		})
	}
}

// TestRecoveryCutsUnprovenSealedTail: the power-loss case. With no proof that a sealed
// segment was ever wholly synced (no clean-shutdown marker covering it, no final time-index
// entry, no index entry in any later segment: a power loss soon after the roll took them
// all), a bad tail may be torn, and it is cut and the later segments (which then hold nothing
// acknowledged as synced) deleted, as before, so the log stays contiguous.
func TestRecoveryCutsUnprovenSealedTail(t *testing.T) {
	f := newSealedFixture(t, false)
	starts := f.batchStarts(t)
	pos := starts[len(starts)-1]
	bad := f.flip(t, pos)
	for _, base := range f.bases {
		for _, suffix := range []string{indexSuffix, timeIndexSuffix} {
			if err := os.Remove(segmentFile(f.dir, base, suffix)); err != nil {
				t.Fatal(err)
			}
		}
	}
	l, rep := openLog(t, f.dir, f.cfg, ring.Syscalls{})
	defer l.Close()
	if l.EndOffset() != bad || l.SegmentCount() != 1 || len(rep.DeletedSegments) != len(f.bases)-1 ||
		rep.DroppedBytes != f.size0-pos || rep.Corruption == "" || len(rep.Corruptions) != 0 {
		t.Fatalf("end %d (want %d), %d segments, report %+v", l.EndOffset(), bad, l.SegmentCount(), rep)
	}
	mustEqualBytes(t, "kept prefix", readAll(t, l, 1<<20), f.all[:pos])
}

// TestCleanShutdownMarkerCoversOnlyWhatCloseSynced: after a clean Close the marker's end
// offset is proof only for what Close synced. A segment sealed after the next open (whose
// marker removal a power loss may take back) is not covered by it, so its bad tail is cut
// as a torn one; the same damage below the marker's offset is fenced.
func TestCleanShutdownMarkerCoversOnlyWhatCloseSynced(t *testing.T) {
	for _, tc := range []struct {
		name      string
		markerEnd func(f *sealedFixture, bad int64) int64
		fenced    bool
	}{
		{"bad batch below the marker's offset", func(f *sealedFixture, bad int64) int64 { return f.end }, true},
		{"bad batch at the marker's offset", func(f *sealedFixture, bad int64) int64 { return bad }, false},
		{"unreadable marker", func(f *sealedFixture, bad int64) int64 { return -1 }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newSealedFixture(t, true)
			starts := f.batchStarts(t)
			pos := starts[len(starts)-1]
			bad := f.flip(t, pos)
			// Proof from the indexes gone (a power loss took the unsynced index writes).
			for _, base := range f.bases {
				for _, suffix := range []string{indexSuffix, timeIndexSuffix} {
					os.Remove(segmentFile(f.dir, base, suffix))
				}
			}
			marker := []byte("garbage")
			if e := tc.markerEnd(f, bad); e >= 0 {
				marker = fmt.Appendf(nil, "%d\n", e)
			}
			if err := os.WriteFile(filepath.Join(f.dir, cleanShutdownFileName), marker, 0o644); err != nil {
				t.Fatal(err)
			}
			l, rep := openLog(t, f.dir, f.cfg, ring.Syscalls{})
			defer l.Close()
			if !rep.CleanShutdown {
				t.Fatalf("marker not seen: %+v", rep)
			}
			if tc.fenced {
				if l.EndOffset() != f.end || len(rep.Corruptions) != 1 || len(rep.DeletedSegments) != 0 {
					t.Fatalf("end %d, report %+v", l.EndOffset(), rep)
				}
				return
			}
			if l.EndOffset() != bad || len(rep.Corruptions) != 0 || len(rep.DeletedSegments) != len(f.bases)-1 {
				t.Fatalf("end %d (want %d), report %+v", l.EndOffset(), bad, rep)
			}
		})
	}
}

// readUntil reads [from, to) batch by batch and returns the bytes.
func readUntil(t *testing.T, l *Log, from, to int64) []byte {
	t.Helper()
	var out []byte
	for off, steps := from, 0; off < to; steps++ {
		if steps > 1_000_000 {
			t.Fatalf("read does not progress at %d", off)
		}
		res, err := l.Read(off, 1<<20)
		if err != nil {
			t.Fatalf("Read(%d): %v", off, err)
		}
		if res.Size == 0 || res.NextOffset <= off {
			t.Fatalf("Read(%d) returned no progress: %+v", off, res)
		}
		if out, err = res.AppendTo(out); err != nil {
			t.Fatalf("AppendTo: %v", err)
		}
		off = res.NextOffset
	}
	return out
}

// TestRecoveryFencesMissingSealedBytes: a sealed segment that is shorter than its offsets
// say (whole batches missing, or an empty file) after a clean shutdown, which no power loss
// can produce: its missing offsets are fenced as a corruption at its end, and every later
// segment survives.
func TestRecoveryFencesMissingSealedBytes(t *testing.T) {
	for _, tc := range []struct {
		name string
		keep func(starts []int64) int64 // bytes of the first segment left
	}{
		{"last batch missing", func(starts []int64) int64 { return starts[len(starts)-1] }},
		{"empty file", func([]int64) int64 { return 0 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newSealedFixture(t, true)
			keep := tc.keep(f.batchStarts(t))
			if err := os.Truncate(segmentFile(f.dir, f.bases[0], logSuffix), keep); err != nil {
				t.Fatal(err)
			}
			l, rep := openLog(t, f.dir, f.cfg, ring.Syscalls{})
			defer l.Close()
			mustInvariants(t, l)
			if l.EndOffset() != f.end || len(rep.DeletedSegments) != 0 || len(rep.Corruptions) != 1 ||
				rep.Corruptions[0].Position != keep || rep.Corruptions[0].NextOffset != f.bases[1] {
				t.Fatalf("end %d, report %+v", l.EndOffset(), rep)
			}
			c := rep.Corruptions[0]
			mustEqualBytes(t, "prefix", readUntil(t, l, l.StartOffset(), c.Offset), f.all[:keep])
			if _, err := l.Read(c.Offset, 1<<20); !errors.Is(err, ErrCorruptBatch) {
				t.Fatalf("read at the missing offset %d: %v", c.Offset, err)
			}
			mustEqualBytes(t, "later segments", readUntil(t, l, f.bases[1], f.end), f.all[f.size0:])
			if p := scrubPass(t, l, 1<<20); p.Found != 0 || len(l.Corruptions()) != 1 {
				t.Fatalf("scrub found %d more, %d known", p.Found, len(l.Corruptions()))
			}
			if err := l.TruncateTo(c.Offset); err != nil || l.EndOffset() != c.Offset || len(l.Corruptions()) != 0 {
				t.Fatalf("truncate to %d: %v, end %d, %v", c.Offset, err, l.EndOffset(), l.Corruptions())
			}
		})
	}
}

// TestRecoveryFenceKeepsProducerStateRebuild: the producer-state rebuild reads batch headers
// from the second-newest segment on; a fenced bad batch there is not walked (its header is
// not trusted), OpenLog succeeds, and an idempotent producer's retry of its newest batch is
// still recognised as a duplicate.
func TestRecoveryFenceKeepsProducerStateRebuild(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(StoragePageCache)
	cfg.SegmentBytes = 4 << 10
	cfg.IndexIntervalBytes = 0
	l, _ := openLog(t, dir, cfg, ring.Syscalls{})
	var last []byte
	for seq := int32(0); l.SegmentCount() < 4 || l.active().size == 0; seq += 2 {
		last = idemBatch(t, 7, 0, seq, 2, time.Now().UnixMilli()) // not expired
		if _, err := l.Append(append([]byte(nil), last...)); err != nil {
			t.Fatal(err)
		}
	}
	victim := l.segments[len(l.segments)-2]
	pos, h, err := victim.findBatch(l.fio, &l.headers, victim.nextOffset-1)
	if err != nil {
		t.Fatal(err)
	}
	end := l.EndOffset()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	snaps, _ := filepath.Glob(filepath.Join(dir, "*"+producerSnapshotSuffix))
	for _, p := range snaps { // no snapshot: the rebuild scans headers
		os.Remove(p)
	}
	file, err := os.OpenFile(segmentFile(dir, victim.baseOffset, logSuffix), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	// The magic byte: the header itself no longer parses.
	if _, err := file.WriteAt([]byte{0x7f}, pos+16); err != nil {
		t.Fatal(err)
	}
	file.Close()

	l2, rep, err := OpenLog(dir, cfg, ring.Syscalls{})
	if err != nil {
		t.Fatalf("open with a fenced batch in the rebuilt range: %v", err)
	}
	defer l2.Close()
	if len(rep.Corruptions) != 1 || rep.Corruptions[0].Offset != h.BaseOffset || l2.EndOffset() != end || rep.Producers != 1 {
		t.Fatalf("end %d (want %d), report %+v", l2.EndOffset(), end, rep)
	}
	res, err := l2.AppendBatches([][]byte{last})
	if err != nil || !res.Duplicate || l2.EndOffset() != end {
		t.Fatalf("retry of the newest batch: %+v, %v, end %d", res, err, l2.EndOffset())
	}
}
