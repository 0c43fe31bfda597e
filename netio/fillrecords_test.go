package netio

import (
	"os"
	"path/filepath"
	"testing"
	"unsafe"

	"github.com/ringlog/ringlog/engine"
	"github.com/ringlog/ringlog/engine/shard"
	"github.com/ringlog/ringlog/netio/wire"
)

// TestFillRecordsNoCopy: a direct-mode read spanning the file and the recent-block cache
// (or two cache chunks) goes to the sender as ranges that point into the cache itself,
// never as a copy in a heap buffer; a single cache piece goes as Records, aliasing it.
func TestFillRecordsNoCopy(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "seg"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunkA, chunkB := make([]byte, 4096), make([]byte, 4096)
	same := func(a, b []byte) bool { return len(a) == len(b) && unsafe.SliceData(a) == unsafe.SliceData(b) }

	var fc fetchCall
	var out wire.FetchResponsePartition
	fc.fillRecords(&out, &shard.FetchResult{Records: engine.ReadResult{Size: 100 + 4000 + 50, Pieces: []engine.Piece{
		{File: f, Position: 7, Size: 100},
		{Position: 107, Size: 4000, Data: chunkA[96:]},
		{Position: 4107, Size: 50, Data: chunkB[:50]},
	}}})
	if out.Records != nil || len(out.RecordsFile) != 3 {
		t.Fatalf("records %d bytes, %d ranges; want 3 ranges", len(out.Records), len(out.RecordsFile))
	}
	if r := out.RecordsFile[0]; r.File != f || r.Offset != 7 || r.Length != 100 || r.Data != nil {
		t.Fatalf("file range %+v", r)
	}
	if r := out.RecordsFile[1]; r.File != nil || r.Length != 4000 || !same(r.Data, chunkA[96:]) {
		t.Fatalf("first cache range: length %d, aliases the cache: %v", r.Length, same(r.Data, chunkA[96:]))
	}
	if r := out.RecordsFile[2]; r.File != nil || r.Length != 50 || !same(r.Data, chunkB[:50]) {
		t.Fatalf("second cache range: length %d, aliases the cache: %v", r.Length, same(r.Data, chunkB[:50]))
	}

	out = wire.FetchResponsePartition{}
	fc.fillRecords(&out, &shard.FetchResult{Records: engine.ReadResult{Size: 10, Pieces: []engine.Piece{{Position: 3, Size: 10, Data: chunkA[3:13]}}}})
	if out.RecordsFile != nil || !same(out.Records, chunkA[3:13]) {
		t.Fatalf("one cache piece: %d ranges, records alias the cache: %v", len(out.RecordsFile), same(out.Records, chunkA[3:13]))
	}
}
