package engine

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/ringlog/ringlog/engine/batch"
	"github.com/ringlog/ringlog/ring"
)

// scrubLog is a log of several sealed 4 KiB segments, each batch one record of ~500 bytes.
func scrubLog(t *testing.T, dir string, verify bool) (*Log, RecoveryReport) {
	t.Helper()
	cfg := testConfig(StoragePageCache)
	cfg.SegmentBytes = 4 << 10
	cfg.VerifySegments = verify
	return openLog(t, dir, cfg, ring.Syscalls{})
}

func fillScrubLog(t *testing.T, l *Log, batches int) {
	t.Helper()
	for i := 0; i < batches; i++ {
		if _, err := l.Append(makeBatch(t, i, 1, 500, int64(i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	if l.SegmentCount() < 4 {
		t.Fatalf("want at least 4 segments, have %d", l.SegmentCount())
	}
}

// flipInSegment flips one byte in the middle of the record bytes of the batch at position
// pos of segment i (a sealed one), through the file itself, as a bad disk would.
func flipInSegment(t *testing.T, l *Log, i int, batchIndex int) (offset, next int64) {
	t.Helper()
	s := l.segments[i]
	pos, h, err := s.findBatch(l.fio, &l.headers, s.baseOffset+int64(batchIndex))
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(s.log.Name(), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	at := pos + batch.HeaderSize + 100
	one := []byte{0}
	if _, err := f.ReadAt(one, at); err != nil {
		t.Fatal(err)
	}
	one[0] ^= 0x10
	if _, err := f.WriteAt(one, at); err != nil {
		t.Fatal(err)
	}
	return h.BaseOffset, s.nextOffset
}

func scrubPass(t *testing.T, l *Log, budget int64) ScrubProgress {
	t.Helper()
	var total ScrubProgress
	for calls := 0; calls < 10_000; calls++ {
		p, err := l.Scrub(budget)
		if err != nil {
			t.Fatal(err)
		}
		if p.BytesVerified > budget+4<<10 {
			t.Fatalf("one Scrub(%d) verified %d bytes: not throttled", budget, p.BytesVerified)
		}
		total.BytesVerified += p.BytesVerified
		total.Found += p.Found
		if p.PassComplete {
			return total
		}
	}
	t.Fatal("scrub pass did not complete")
	return total
}

// TestScrubFindsAndFencesCorruption: a byte flipped in the middle of a sealed segment is
// found by a throttled scrub, recorded once, logged and counted; a read starting at it fails
// with ErrCorruptBatch naming the offsets, a read before it stops short, and a read at the
// next readable offset works.
func TestScrubFindsAndFencesCorruption(t *testing.T) {
	l, _ := scrubLog(t, t.TempDir(), false)
	defer l.Close()
	fillScrubLog(t, l, 40)
	bad, next := flipInSegment(t, l, 1, 2)

	if got := l.Corruptions(); len(got) != 0 {
		t.Fatalf("corruption known before any scrub: %v", got)
	}
	p := scrubPass(t, l, 1024)
	if p.Found != 1 || l.ScrubPasses() != 1 {
		t.Fatalf("pass found %d, passes %d", p.Found, l.ScrubPasses())
	}
	cs := l.Corruptions()
	if len(cs) != 1 || cs[0].Offset != bad || cs[0].NextOffset != next || !strings.Contains(cs[0].Reason, "crc") {
		t.Fatalf("corruptions %v, want offset %d next %d (crc)", cs, bad, next)
	}
	if p := scrubPass(t, l, 1<<20); p.Found != 0 || len(l.Corruptions()) != 1 {
		t.Fatalf("second pass found %d again, %d known", p.Found, len(l.Corruptions()))
	}

	_, err := l.Read(bad, 1<<20)
	if !errors.Is(err, ErrCorruptBatch) || !errors.Is(err, ErrCorruptLog) ||
		!strings.Contains(err.Error(), fmt.Sprintf("next readable offset is %d", next)) {
		t.Fatalf("read at the bad batch: %v", err)
	}
	before := l.segments[1].baseOffset
	res, err := l.Read(before, 1<<20)
	if err != nil || res.NextOffset != bad || res.Size == 0 {
		t.Fatalf("read before the bad batch: next %d size %d err %v (want next %d)", res.NextOffset, res.Size, err, bad)
	}
	if res, err := l.Read(next, 1<<20); err != nil || res.Size == 0 {
		t.Fatalf("read at the next readable offset %d: %v", next, err)
	}
}

// TestVerifySegmentsAtOpen: with VerifySegments a flipped byte in a sealed segment is
// reported by OpenLog; without it start-up trusts the segment (until the scrubber runs).
func TestVerifySegmentsAtOpen(t *testing.T) {
	dir := t.TempDir()
	l, _ := scrubLog(t, dir, false)
	fillScrubLog(t, l, 40)
	bad, _ := flipInSegment(t, l, 2, 1)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	plain, report := scrubLog(t, dir, false)
	if len(report.Corruptions) != 0 || len(plain.Corruptions()) != 0 {
		t.Fatalf("open without verification found %v", report.Corruptions)
	}
	plain.Close()
	verified, report := scrubLog(t, dir, true)
	defer verified.Close()
	if len(report.Corruptions) != 1 || report.Corruptions[0].Offset != bad {
		t.Fatalf("verified open reported %v, want offset %d", report.Corruptions, bad)
	}
}

// TestRepairsClearCorruption: truncating to the bad offset, or deleting records before the
// next readable one, removes the corruption and leaves a readable, writable log.
func TestRepairsClearCorruption(t *testing.T) {
	cases := []struct {
		name   string
		repair func(l *Log, c Corruption) error
	}{
		{"truncate to the bad offset", func(l *Log, c Corruption) error { return l.TruncateTo(c.Offset) }},
		{"delete records before the next readable", func(l *Log, c Corruption) error {
			_, err := l.DeleteRecordsBefore(c.NextOffset)
			return err
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l, _ := scrubLog(t, t.TempDir(), false)
			defer l.Close()
			fillScrubLog(t, l, 40)
			flipInSegment(t, l, 1, 1)
			scrubPass(t, l, 1<<20)
			cs := l.Corruptions()
			if len(cs) != 1 {
				t.Fatalf("corruptions %v", cs)
			}
			if err := tc.repair(l, cs[0]); err != nil {
				t.Fatal(err)
			}
			if got := l.Corruptions(); len(got) != 0 {
				t.Fatalf("corruption survives the repair: %v", got)
			}
			if _, err := l.Append(makeBatch(t, 99, 2, 100, 99)); err != nil {
				t.Fatal(err)
			}
			readAll(t, l, 1<<20)
			if p := scrubPass(t, l, 1<<20); p.Found != 0 {
				t.Fatalf("scrub after repair found %d", p.Found)
			}
		})
	}
}
