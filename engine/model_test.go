package engine

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"

	"github.com/ringlog/ringlog/engine/batch"
	"github.com/ringlog/ringlog/engine/faultio"
	"github.com/ringlog/ringlog/ring"
)

// logModel is the deliberately simple reference: a list of batches and a start offset.
type logModel struct {
	batches [][]byte // stored bytes, base offsets assigned
	start   int64
	end     int64
}

func (m *logModel) lastOffset(b []byte) int64 {
	h, _ := batch.ParseHeader(b)
	return h.LastOffset()
}

// visible is what a reader from the start offset gets: every batch holding an offset >= start.
func (m *logModel) visible() []byte {
	var out []byte
	for _, b := range m.batches {
		if m.lastOffset(b) >= m.start {
			out = append(out, b...)
		}
	}
	return out
}

// modelSeed returns a fresh seed for a deterministic randomized test, printed;
// RINGLOG_MODEL_SEED replays a failed run's.
func modelSeed(t *testing.T) uint64 {
	t.Helper()
	seed := rand.Uint64()
	if v, err := strconv.ParseUint(os.Getenv("RINGLOG_MODEL_SEED"), 10, 64); err == nil {
		seed = v
	}
	t.Logf("seed %d (RINGLOG_MODEL_SEED replays it)", seed)
	return seed
}

// TestLogAgainstModel runs random operations — appends, syncs, truncations, resets, record
// deletion, retention, clean and crash reopens — against the log and the model, and checks
// after each one that they agree on offsets and on every byte a reader can see.
//
// The "+prealloc" cases keep zero-filled space ahead of the log's end (PreallocateBytes) and
// also check, after every step, that sealed files end at their logical size and that only
// zeros lie past the active segment's end.
func TestLogAgainstModel(t *testing.T) {
	for _, variant := range []struct {
		mode     StorageMode
		prealloc bool
	}{{StoragePageCache, false}, {StorageDirect, false}, {StoragePageCache, true}, {StorageDirect, true}} {
		mode, name := variant.mode, string(variant.mode)
		if variant.prealloc {
			name += "+prealloc"
		}
		t.Run(name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(modelSeed(t), 4))
			dir := t.TempDir()
			fio := faultio.New(ring.Syscalls{})
			fio.SkipSyncs = true
			cfg := testConfig(mode)
			cfg.SegmentBytes = 4 << 10
			cfg.IndexIntervalBytes = 256
			cfg.RetentionMs = -1
			if variant.prealloc {
				cfg.PreallocateBytes = 4 << 10
			}
			l, _ := openLog(t, dir, cfg, fio)
			defer func() { l.Close() }()
			m := &logModel{}
			for step := 0; step < 400; step++ {
				op := rng.IntN(100)
				switch {
				case op < 45: // append a group
					var group [][]byte
					for i := 1 + rng.IntN(4); i > 0; i-- {
						group = append(group, makeBatch(t, step, 1+rng.IntN(4), rng.IntN(200), int64(step)))
					}
					if _, err := l.AppendBatches(group); err != nil {
						t.Fatalf("step %d append: %v", step, err)
					}
					for _, b := range group {
						m.batches = append(m.batches, b)
						m.end = m.lastOffset(b) + 1
					}
				case op < 55:
					if err := l.Sync(); err != nil {
						t.Fatal(err)
					}
				case op < 65 && m.end > m.start: // truncate somewhere in the log
					off := m.start + rng.Int64N(m.end-m.start+1)
					if err := l.TruncateTo(off); err != nil {
						t.Fatalf("step %d truncate to %d: %v", step, off, err)
					}
					m.truncate(off)
				case op < 68:
					off := m.end + rng.Int64N(3)
					if err := l.ResetTo(off); err != nil {
						t.Fatal(err)
					}
					m.batches, m.start, m.end = nil, off, off
				case op < 76 && m.end > m.start:
					off := m.start + rng.Int64N(m.end-m.start+1)
					if _, err := l.DeleteRecordsBefore(off); err != nil {
						t.Fatalf("step %d delete before %d: %v", step, off, err)
					}
					m.start = max(m.start, off)
				case op < 82:
					l.cfg.RetentionBytes = 1 + rng.Int64N(8<<10)
					if _, err := l.EnforceRetention(l.cfg.Clock()); err != nil {
						t.Fatal(err)
					}
					l.cfg.RetentionBytes = -1
					m.retained(t, l.StartOffset())
				case op < 91:
					if err := l.Close(); err != nil {
						t.Fatal(err)
					}
					l, _ = openLog(t, dir, cfg, fio)
				default: // crash: the page cache survives a process crash
					l.closeFiles()
					l, _ = openLog(t, dir, cfg, fio)
				}
				m.check(t, step, l, rng)
				m.checkTimestamps(t, step, l, rng)
				if variant.prealloc {
					checkZeroSpace(t, step, dir, l)
				}
			}
		})
	}
}

func (m *logModel) truncate(off int64) {
	if off <= m.start {
		m.batches, m.start, m.end = nil, off, off
		return
	}
	for len(m.batches) > 0 && m.lastOffset(m.batches[len(m.batches)-1]) >= off {
		h, _ := batch.ParseHeader(m.batches[len(m.batches)-1])
		m.end = h.BaseOffset
		m.batches = m.batches[:len(m.batches)-1]
	}
	m.start = min(m.start, m.end)
}

// retained applies a retention pass: whole batches below the log's new start are gone.
func (m *logModel) retained(t *testing.T, start int64) {
	if start < m.start {
		t.Fatalf("retention moved the start back from %d to %d", m.start, start)
	}
	for len(m.batches) > 0 && m.lastOffset(m.batches[0]) < start {
		m.batches = m.batches[1:]
	}
	if len(m.batches) > 0 && start > m.start {
		if h, _ := batch.ParseHeader(m.batches[0]); h.BaseOffset != start {
			t.Fatalf("retention start %d is not a batch boundary (next batch %d)", start, h.BaseOffset)
		}
	}
	m.start = start
}

func (m *logModel) check(t *testing.T, step int, l *Log, rng *rand.Rand) {
	t.Helper()
	if l.StartOffset() != m.start || l.EndOffset() != m.end {
		t.Fatalf("step %d: log [%d,%d), model [%d,%d)", step, l.StartOffset(), l.EndOffset(), m.start, m.end)
	}
	mustEqualBytes(t, "visible bytes", readAll(t, l, 1+rng.IntN(3000)), m.visible())
	if m.end == m.start {
		return
	}
	off := m.start + rng.Int64N(m.end-m.start)
	res, err := l.Read(off, 1)
	if err != nil {
		t.Fatalf("step %d: Read(%d): %v", step, off, err)
	}
	got, _ := res.AppendTo(nil)
	for _, b := range m.batches {
		h, _ := batch.ParseHeader(b)
		if h.BaseOffset <= off && off <= h.LastOffset() {
			if !bytes.Equal(got, b) {
				t.Fatalf("step %d: Read(%d) returned %d bytes from %d, want the batch at %d", step, off, len(got), res.FirstOffset, h.BaseOffset)
			}
			return
		}
	}
	t.Fatalf("step %d: model has no batch holding %d", step, off)
}

// checkTimestamps compares OffsetForTimestamp with a scan of the model's records.
func (m *logModel) checkTimestamps(t *testing.T, step int, l *Log, rng *rand.Rand) {
	t.Helper()
	target := int64(rng.IntN(step + 10))
	want := int64(-1)
	for _, b := range m.batches {
		if want >= 0 {
			break
		}
		batch.Decode(b, func(offset, ts int64, _ *batch.Record) error {
			if want < 0 && offset >= m.start && ts >= target {
				want = offset
			}
			return nil
		})
	}
	got, err := l.OffsetForTimestamp(target)
	if want < 0 {
		if !errors.Is(err, ErrTimestampNotFound) {
			t.Fatalf("step %d: OffsetForTimestamp(%d) = %d, %v; want ErrTimestampNotFound", step, target, got, err)
		}
		return
	}
	if err != nil || got != want {
		t.Fatalf("step %d: OffsetForTimestamp(%d) = %d, %v; want %d", step, target, got, err, want)
	}
}

// checkZeroSpace waits for the log's zeroing goroutines and checks the files against the
// logical sizes: every sealed segment's file ends at its logical end, and past the active
// segment's end there are only zeros.
func checkZeroSpace(t *testing.T, step int, dir string, l *Log) {
	t.Helper()
	l.zeroJobs.Wait()
	for i, s := range l.segments {
		b, err := os.ReadFile(segmentFile(dir, s.baseOffset, logSuffix))
		if err != nil {
			t.Fatal(err)
		}
		last := i == len(l.segments)-1
		if !last && int64(len(b)) != s.size {
			t.Fatalf("step %d: sealed segment %d: file %d bytes, logical %d", step, s.baseOffset, len(b), s.size)
		}
		if int64(len(b)) < s.size {
			t.Fatalf("step %d: segment %d: file %d bytes, shorter than logical %d", step, s.baseOffset, len(b), s.size)
		}
		if last && len(bytes.Trim(b[s.size:], "\x00")) != 0 {
			t.Fatalf("step %d: active segment %d: non-zero bytes past its end %d", step, s.baseOffset, s.size)
		}
	}
}
