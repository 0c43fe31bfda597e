package engine

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/ringlog/ringlog/engine/faultio"
	"github.com/ringlog/ringlog/ring"
)

// FuzzDecodeIndex: arbitrary .index bytes never panic; what decodes is strictly increasing,
// inside the log, and re-encodes to the same bytes.
func FuzzDecodeIndex(f *testing.F) {
	f.Add([]byte{}, int64(100))
	f.Add(appendIndexEntries(nil, []indexEntry{{1, 10}, {5, 90}}), int64(100))
	f.Add([]byte{0, 0, 0, 1}, int64(10))
	f.Fuzz(func(t *testing.T, b []byte, logSize int64) {
		entries, err := decodeIndex(b, logSize)
		if err != nil {
			if !errors.Is(err, errIndexCorrupt) {
				t.Fatalf("error not errIndexCorrupt: %v", err)
			}
			return
		}
		for i, e := range entries {
			if int64(e.position) >= logSize || (i > 0 && (e.relativeOffset <= entries[i-1].relativeOffset || e.position <= entries[i-1].position)) {
				t.Fatalf("accepted bad entry %d: %+v", i, e)
			}
		}
		if !bytes.Equal(appendIndexEntries(nil, entries), b) {
			t.Fatal("re-encoding differs")
		}
	})
}

// FuzzDecodeTimeIndex: the same for .timeindex.
func FuzzDecodeTimeIndex(f *testing.F) {
	f.Add([]byte{}, int64(100))
	f.Add(appendTimeIndexEntries(nil, []timeIndexEntry{{1000, 3}, {2000, 9}}), int64(9))
	f.Add(appendTimeIndexEntries(nil, []timeIndexEntry{{-1, 0}}), int64(0))
	f.Fuzz(func(t *testing.T, b []byte, relativeEnd int64) {
		entries, err := decodeTimeIndex(b, relativeEnd)
		if err != nil {
			if !errors.Is(err, errIndexCorrupt) {
				t.Fatalf("error not errIndexCorrupt: %v", err)
			}
			return
		}
		for i, e := range entries {
			if int64(e.relativeOffset) > relativeEnd || (i > 0 && (e.timestamp <= entries[i-1].timestamp || e.relativeOffset < entries[i-1].relativeOffset)) {
				t.Fatalf("accepted bad entry %d: %+v", i, e)
			}
		}
		if !bytes.Equal(appendTimeIndexEntries(nil, entries), b) {
			t.Fatal("re-encoding differs")
		}
	})
}

// FuzzDecodeCatalog: arbitrary catalog files never panic, and what loads is valid and
// survives a save/load round trip.
func FuzzDecodeCatalog(f *testing.F) {
	f.Add([]byte(`{"version": 1, "topics": {}}`))
	f.Add([]byte(`{"version": 1, "topics": {"orders": {"shards": [0, 1], "config": {"retention.ms": "1000"}}}}`))
	f.Add([]byte(`{"version": 1, "topics": {"x": {"shards": [1e9]}}}`))
	f.Add([]byte(`{"version": 1}`))
	f.Add([]byte(`{"version": 1, "topics": {"t": {"shards": [0], "id": "00112233445566778899aabbccddeeff", "incarnation": 18446744073709551615}}}`))
	f.Add([]byte(`{"version": 1, "topics": {"t": {"shards": [0], "id": 7, "incarnation": -1}}}`))
	f.Add([]byte(``))
	f.Fuzz(func(t *testing.T, b []byte) {
		topics, err := decodeCatalog(b)
		if err != nil {
			if !errors.Is(err, ErrCatalogCorrupt) && !errors.Is(err, errCatalogTooLarge) {
				t.Fatalf("error not ErrCatalogCorrupt: %v", err)
			}
			return
		}
		for name, topic := range topics {
			if err := validateTopic(name, topic); err != nil {
				t.Fatalf("accepted invalid topic: %v", err)
			}
		}
	})
}

// FuzzRecoverSegment: arbitrary bytes as the active segment's .log and .index never panic
// OpenLog; the recovered log reads back as a contiguous run of valid batches, and a batch
// can be appended after it.
func FuzzRecoverSegment(f *testing.F) {
	valid := makeBatch(f, 1, 3, 40, 1000)
	two := append(append([]byte(nil), valid...), makeBatch(f, 2, 2, 10, 1001)...)
	f.Add(valid, []byte{})
	f.Add(two, []byte{})
	f.Add(two[:len(two)-5], appendIndexEntries(nil, []indexEntry{{3, uint32(len(valid))}}))
	f.Add(append(append([]byte(nil), valid...), make([]byte, 100)...), []byte{})
	f.Add([]byte("garbage that is not a batch at all, long enough to hold a header........"), []byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, logBytes, indexBytes []byte) {
		if len(logBytes) > 1<<20 || len(indexBytes) > 1<<16 {
			return
		}
		dir := t.TempDir()
		os.WriteFile(segmentFile(dir, 0, logSuffix), logBytes, 0o644)
		os.WriteFile(segmentFile(dir, 0, indexSuffix), indexBytes, 0o644)
		fio := faultio.New(ring.Syscalls{})
		fio.SkipSyncs = true
		l, rep, err := OpenLog(dir, LogConfig{Logger: quietLogger, IndexIntervalBytes: 64}, fio)
		if err != nil {
			t.Fatalf("OpenLog: %v", err)
		}
		defer l.closeFiles()
		got := readAll(t, l, 1<<20)
		if int64(len(got)) != l.Size() || l.Size()+rep.DroppedBytes != int64(len(logBytes)) {
			t.Fatalf("read %d bytes, size %d, dropped %d of %d", len(got), l.Size(), rep.DroppedBytes, len(logBytes))
		}
		mustEqualBytes(t, "recovered prefix", got, logBytes[:len(got)])
		next := int64(0)
		for p := got; len(p) > 0; {
			h, err := validateFirst(p)
			if err != nil || h.BaseOffset != next {
				t.Fatalf("recovered batch at %d: base %d, %v", next, h.BaseOffset, err)
			}
			next = h.LastOffset() + 1
			p = p[h.Size():]
		}
		if next != l.EndOffset() {
			t.Fatalf("batches end at %d, log end %d", next, l.EndOffset())
		}
		if _, err := l.Append(makeBatch(t, 9, 1, 5, 0)); err != nil {
			t.Fatalf("append after recovery: %v", err)
		}
	})
}

// FuzzDecodeStartOffset: the checkpoint decoder accepts exactly its own encoding.
func FuzzDecodeStartOffset(f *testing.F) {
	f.Add([]byte("v1 0\n"))
	f.Add([]byte("v1 9223372036854775807\n"))
	f.Add([]byte("v1 -1\n"))
	f.Add([]byte("v1 007\n"))
	f.Add([]byte("v2 1\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		off, err := decodeStartOffset(b)
		if err != nil {
			if !errors.Is(err, errStartOffsetCorrupt) {
				t.Fatalf("error not errStartOffsetCorrupt: %v", err)
			}
			return
		}
		if off < 0 || !bytes.Equal(encodeStartOffset(off), b) {
			t.Fatalf("accepted %q as %d", b, off)
		}
	})
}

// FuzzParsePartitionDir: the sweep's name parser accepts exactly the names PartitionDir
// makes, so it never takes an operator's directory for a partition by a looser reading.
func FuzzParsePartitionDir(f *testing.F) {
	for _, s := range []string{"orders-0", "a-b-12", "-1", "x-01", "x--1", "x-16384", ".-0", "x-0.deleting", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		topic, partition, ok := parsePartitionDir(name)
		if !ok {
			return
		}
		if ValidTopicName(topic) != nil || partition < 0 || partition >= partitionsMax {
			t.Fatalf("accepted %q as %q/%d", name, topic, partition)
		}
		if got := filepath.Base(PartitionDir("/d", topic, partition)); got != name {
			t.Fatalf("parsed %q as %q/%d, which names %q", name, topic, partition, got)
		}
	})
}
