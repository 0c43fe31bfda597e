package engine

import (
	"bytes"
	"os"
	"testing"

	"github.com/ringlog/ringlog/engine/batch"
	"github.com/ringlog/ringlog/ring"
)

// preallocConfig is testConfig with a 16 KiB zero window over 64 KiB segments.
func preallocConfig(mode StorageMode) LogConfig {
	cfg := testConfig(mode)
	cfg.PreallocateBytes = 16 << 10
	return cfg
}

// waitZeroing waits for the log's zeroing goroutines, as Close does.
func waitZeroing(l *Log) { l.zeroJobs.Wait() }

func logFileSize(t *testing.T, dir string, base int64) int64 {
	t.Helper()
	fi, err := os.Stat(segmentFile(dir, base, logSuffix))
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// tailOf returns the bytes of segment base's file from pos on.
func tailOf(t *testing.T, dir string, base, pos int64) []byte {
	t.Helper()
	b, err := os.ReadFile(segmentFile(dir, base, logSuffix))
	if err != nil {
		t.Fatal(err)
	}
	if pos > int64(len(b)) {
		t.Fatalf("segment %d: file is %d bytes, position %d asked", base, len(b), pos)
	}
	return b[pos:]
}

// TestPreallocateZeroesAheadAndTrims: the active segment's file runs ahead of the log's end
// with zeros only; reads, sizes and the index stop at the logical end; a roll cuts the sealed
// file to its logical size and Close the active one; a reopen finds nothing dropped.
func TestPreallocateZeroesAheadAndTrims(t *testing.T) {
	forEachBackend(t, func(t *testing.T, fio ring.FileIO, mode StorageMode) {
		dir := t.TempDir()
		cfg := preallocConfig(mode)
		l, _ := openLog(t, dir, cfg, fio)
		want := appendUntil(t, l, nil, 0, 3, 200, func(seq int) bool { return seq < 4 })
		waitZeroing(l)
		s := l.active()
		if got := logFileSize(t, dir, s.baseOffset); got < s.size+cfg.PreallocateBytes/2 {
			t.Fatalf("file is %d bytes, log %d: no zeros ahead", got, s.size)
		}
		if tail := tailOf(t, dir, s.baseOffset, s.size); len(bytes.Trim(tail, "\x00")) != 0 {
			t.Fatal("bytes past the log's end are not all zero")
		}
		if l.Size() != s.size {
			t.Fatalf("Size %d, segment size %d", l.Size(), s.size)
		}
		mustEqualBytes(t, "read", readAll(t, l, 1<<20), want)
		// Fill past a roll: the sealed file is cut to its logical size.
		want = appendUntil(t, l, want, 4, 4, 500, func(int) bool { return l.SegmentCount() < 3 })
		if err := l.Sync(); err != nil {
			t.Fatal(err)
		}
		waitZeroing(l)
		for _, sealed := range l.segments[:len(l.segments)-1] {
			if got := logFileSize(t, dir, sealed.baseOffset); got != sealed.size {
				t.Fatalf("sealed segment %d: file %d bytes, logical %d", sealed.baseOffset, got, sealed.size)
			}
		}
		mustEqualBytes(t, "read", readAll(t, l, 1<<20), want)
		end, active := l.EndOffset(), l.active()
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		if got := logFileSize(t, dir, active.baseOffset); got != active.size {
			t.Fatalf("closed active segment: file %d bytes, logical %d", got, active.size)
		}
		l, rep := openLog(t, dir, cfg, fio)
		defer l.Close()
		if l.EndOffset() != end || rep.DroppedBytes != 0 || rep.ZeroTailBytes != 0 {
			t.Fatalf("reopen: end %d (want %d), report %+v", l.EndOffset(), end, rep)
		}
		mustEqualBytes(t, "read after reopen", readAll(t, l, 1<<20), want)
	})
}

// TestPreallocateRecoveryKeepsZeroTail: after a crash (no Close) recovery ends the log at the
// first zero byte, keeps the zeros in place as preallocated space, and appends continue over
// them.
func TestPreallocateRecoveryKeepsZeroTail(t *testing.T) {
	for _, mode := range storageModes {
		t.Run(string(mode), func(t *testing.T) {
			dir := t.TempDir()
			cfg := preallocConfig(mode)
			l, _ := openLog(t, dir, cfg, ring.Syscalls{})
			want := appendUntil(t, l, nil, 0, 2, 300, func(seq int) bool { return seq < 3 })
			if err := l.Sync(); err != nil {
				t.Fatal(err)
			}
			end, size, base := l.EndOffset(), l.active().size, l.active().baseOffset
			l.closeFiles() // the process dies
			fileBytes := logFileSize(t, dir, base)
			if fileBytes <= size {
				t.Fatalf("file %d bytes, log %d: nothing was zeroed ahead", fileBytes, size)
			}
			l, rep := openLog(t, dir, cfg, ring.Syscalls{})
			if l.EndOffset() != end || rep.DroppedBytes != 0 || rep.ZeroTailBytes != fileBytes-size || rep.Corruption != "" {
				t.Fatalf("recovery: end %d (want %d), report %+v (file %d, log %d bytes)", l.EndOffset(), end, rep, fileBytes, size)
			}
			if got := logFileSize(t, dir, base); got != fileBytes {
				t.Fatalf("recovery cut the zeros: file %d bytes, was %d", got, fileBytes)
			}
			b := makeBatch(t, 9, 2, 300, 9)
			if _, err := l.Append(b); err != nil {
				t.Fatal(err)
			}
			want = append(want, b...)
			mustEqualBytes(t, "read", readAll(t, l, 1<<20), want)
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestPreallocateRecoveryCutsNonZeroTail: bytes past the first invalid position that are not
// all zero — here a valid batch continuing the log behind a lost one, as a power loss can
// leave — are cut from the file, so a later batch written over the lost one can never make
// recovery continue into them.
func TestPreallocateRecoveryCutsNonZeroTail(t *testing.T) {
	dir := t.TempDir()
	cfg := preallocConfig(StoragePageCache)
	l, _ := openLog(t, dir, cfg, ring.Syscalls{})
	a := makeBatch(t, 0, 2, 300, 0)
	if _, err := l.Append(a); err != nil {
		t.Fatal(err)
	}
	lostPos := l.active().size
	lost := makeBatch(t, 1, 2, 300, 1)
	if _, err := l.Append(lost); err != nil {
		t.Fatal(err)
	}
	survivor := makeBatch(t, 2, 2, 300, 2)
	if _, err := l.Append(survivor); err != nil {
		t.Fatal(err)
	}
	waitZeroing(l)
	base := l.active().baseOffset
	l.closeFiles()
	// The power loss took the middle batch back to zeros; its successor survived.
	f, err := os.OpenFile(segmentFile(dir, base, logSuffix), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(make([]byte, len(lost)), lostPos); err != nil {
		t.Fatal(err)
	}
	f.Close()

	l, rep := openLog(t, dir, cfg, ring.Syscalls{})
	if l.EndOffset() != 2 || rep.ZeroTailBytes != 0 || rep.DroppedBytes == 0 {
		t.Fatalf("recovery: end %d (want 2), report %+v", l.EndOffset(), rep)
	}
	if got := logFileSize(t, dir, base); got != lostPos {
		t.Fatalf("file %d bytes after recovery, want it cut at %d", got, lostPos)
	}
	// The same batch again, the same length: offsets 2 and 3. Then crash again.
	if _, err := l.Append(lost); err != nil {
		t.Fatal(err)
	}
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	l.closeFiles()
	l, _ = openLog(t, dir, cfg, ring.Syscalls{})
	defer l.Close()
	if l.EndOffset() != 4 {
		t.Fatalf("log ends at %d after the second crash, want 4 (the survivor must not come back)", l.EndOffset())
	}
	data := readAll(t, l, 1<<20)
	if n := len(batchOffsets(t, data)); n != 2 {
		t.Fatalf("%d batches served, want 2", n)
	}
}

// TestPreallocateTruncateToSealed: truncating into a sealed segment whose zeroing job may
// still hold a handed-off cut makes it active again without that cut ever landing on new
// appends.
func TestPreallocateTruncateToSealed(t *testing.T) {
	forEachBackend(t, func(t *testing.T, fio ring.FileIO, mode StorageMode) {
		dir := t.TempDir()
		cfg := preallocConfig(mode)
		l, _ := openLog(t, dir, cfg, fio)
		var firstSegEnd int64
		for seq := 0; l.SegmentCount() < 2; seq++ {
			firstSegEnd = l.EndOffset()
			if _, err := l.Append(makeBatch(t, seq, 4, 500, int64(seq))); err != nil {
				t.Fatal(err)
			}
		}
		if err := l.TruncateTo(firstSegEnd - 4); err != nil {
			t.Fatal(err)
		}
		for seq := 100; seq < 140; seq++ {
			b := makeBatch(t, seq, 4, 500, int64(seq))
			if _, err := l.AppendReplicated([][]byte{withBase(t, b, l.EndOffset())}); err != nil {
				t.Fatal(err)
			}
		}
		end := l.EndOffset()
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		l, rep := openLog(t, dir, cfg, fio)
		defer l.Close()
		if l.EndOffset() != end || rep.DroppedBytes != 0 || rep.Corruption != "" {
			t.Fatalf("reopen: end %d (want %d), report %+v", l.EndOffset(), end, rep)
		}
		if got := batchOffsets(t, readAll(t, l, 1<<20)); got[0] != 0 {
			t.Fatalf("log starts at %d", got[0])
		}
	})
}

// withBase returns a copy of batch b with base offset base.
func withBase(t *testing.T, b []byte, base int64) []byte {
	t.Helper()
	c := append([]byte(nil), b...)
	batch.SetBaseOffset(c, base)
	return c
}

// appendUntil appends batches of records values of valueSize bytes, sequence numbers from
// seq on, while more(seq) holds, and returns want with their bytes added.
func appendUntil(t *testing.T, l *Log, want []byte, seq, records, valueSize int, more func(seq int) bool) []byte {
	t.Helper()
	for ; more(seq); seq++ {
		b := makeBatch(t, seq, records, valueSize, int64(seq))
		if _, err := l.Append(b); err != nil {
			t.Fatal(err)
		}
		want = append(want, b...)
	}
	return want
}
