package shard

import (
	"os"
	"sync/atomic"
)

// Fetch results hold segment descriptors until their bytes are sent (fetchlimits.go), so
// that retention, truncation or a reopen closing the segment's own file cannot pull it from
// under a splice in flight. Duplicating the descriptor for every fetch cost a fcntl, an
// os.File (two allocations and a cleanup) and a close per partition per fetch; instead
// each shard keeps one duplicate per segment file being served, shared by every result
// that reads it and counted:
//
//   - the shard's table (sharedFiles, loop-owned) holds one reference to each entry, every
//     result piece one more, taken on the loop when the read is answered and given back by
//     FetchResult.Release on any goroutine;
//   - whoever drops the count to zero closes the duplicate;
//   - the shard drops its own reference (sweep, every FlushCheckInterval, and when the loop
//     ends) for entries no result holds, so an idle segment keeps no extra descriptor and a
//     deleted one frees its space at most one sweep after its last send.
//
// A catch-up reading the same segment fetch after fetch therefore duplicates it once per
// sweep interval at most, not once per fetch. The descriptor quotas still count one unit
// per piece held (a bound on what results may pin, as before).

// sharedFile is a duplicate of a segment's descriptor shared by fetch results.
type sharedFile struct {
	file *os.File
	refs atomic.Int32 // the shard's table's reference + one per result piece
}

func (f *sharedFile) unref() {
	if n := f.refs.Add(-1); n == 0 {
		f.file.Close()
	} else if n < 0 {
		panic("shard: shared fetch file released more often than taken")
	}
}

// sharedFiles is a shard's table of shared duplicates by the segment file they duplicate.
// Loop goroutine only (the counts are atomic: results release from any goroutine).
type sharedFiles map[*os.File]*sharedFile

// take returns a referenced duplicate of segment file f, making it on first use.
func (t sharedFiles) take(f *os.File) (*sharedFile, error) {
	sf := t[f]
	if sf == nil {
		fd, err := dupFile(f.Fd())
		if err != nil {
			return nil, err
		}
		sf = &sharedFile{file: os.NewFile(uintptr(fd), f.Name())}
		sf.refs.Store(1) // the table's
		t[f] = sf
	}
	sf.refs.Add(1)
	return sf, nil
}

// sweep drops the table's reference to every duplicate no result holds (all of them when
// all is set: the loop is ending); duplicates still held close on their last release.
func (t sharedFiles) sweep(all bool) {
	for f, sf := range t {
		if all || sf.refs.Load() == 1 {
			delete(t, f)
			sf.unref()
		}
	}
}
