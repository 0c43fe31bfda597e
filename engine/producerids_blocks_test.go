package engine

import (
	"context"
	"errors"
	"sync"
	"testing"
)

// blockSource is an in-process ProducerIDBlockSource: consecutive blocks of 1,000 ids
// from a counter (the controller's rule), each request reported on asked.
type blockSource struct {
	mu    sync.Mutex
	next  int64
	fail  error
	asked chan int64 // the minID of every request
}

func (s *blockSource) get(_ context.Context, minID int64) (int64, int64, error) {
	s.mu.Lock()
	defer func() { s.mu.Unlock(); s.asked <- minID }()
	if s.fail != nil {
		return 0, 0, s.fail
	}
	first := max(s.next, minID)
	s.next = first + 1000
	return first, 1000, nil
}

// TestProducerIDsFromBlocks: with a block source, ids come from its blocks, the next
// block is asked for before the current one runs out, a named producer's id survives a
// restart, and a restarted registry asks for blocks above every id it handed out.
func TestProducerIDsFromBlocks(t *testing.T) {
	dir := t.TempDir()
	src := &blockSource{next: 1 << 32, asked: make(chan int64, 16)}
	p, err := LoadProducerIDs(dir)
	if err != nil {
		t.Fatal(err)
	}
	p.SetBlockSource(src.get)
	seen := map[int64]bool{}
	named := mustInit(t, p, "n")
	if named.ID != 1<<32 || <-src.asked != 0 {
		t.Fatalf("first id %d, want the first block's first id %d", named.ID, int64(1)<<32)
	}
	seen[named.ID] = true
	for i := 1; i < 900; i++ {
		id := mustInit(t, p, "")
		if seen[id.ID] || id.ID < 1<<32 || id.Epoch != 0 {
			t.Fatalf("id %+v handed out twice or outside the blocks", id)
		}
		seen[id.ID] = true
	}
	// 100 ids are left: the next Init asks for the next block ahead.
	mustInit(t, p, "")
	if minID := <-src.asked; minID < 1<<32+1000 {
		t.Fatalf("prefetch asked from %d, inside the current block", minID)
	}
	for i := 0; i < 1500; i++ {
		id := mustInit(t, p, "")
		if seen[id.ID] {
			t.Fatalf("id %d handed out twice", id.ID)
		}
		seen[id.ID] = true
	}

	// Restart: the name keeps its id; the rest of the block is skipped.
	p2, err := LoadProducerIDs(dir)
	if err != nil {
		t.Fatal(err)
	}
	p2.SetBlockSource(src.get)
	if n := mustInit(t, p2, "n"); n.ID != named.ID || n.Epoch != 1 {
		t.Fatalf("named producer after restart: %+v, want id %d epoch 1", n, named.ID)
	}
	id := mustInit(t, p2, "")
	if seen[id.ID] {
		t.Fatalf("id %d handed out again after a restart", id.ID)
	}
	if minID := <-src.asked; minID < named.ID+1 {
		t.Fatalf("restarted registry asked from %d, not above its named id %d", minID, named.ID)
	}
}

// TestProducerIDsBlockSourceFails: without a block, Init fails with
// ErrProducerIDsUnavailable, and works again once the source answers.
func TestProducerIDsBlockSourceFails(t *testing.T) {
	src := &blockSource{fail: errors.New("no controller"), asked: make(chan int64, 16)}
	p, err := LoadProducerIDs(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	p.SetBlockSource(src.get)
	if _, err := p.Init("", NoProducer); !errors.Is(err, ErrProducerIDsUnavailable) {
		t.Fatalf("Init without a block: %v", err)
	}
	<-src.asked
	src.mu.Lock()
	src.fail = nil
	src.mu.Unlock()
	if id := mustInit(t, p, ""); id.ID != 0 {
		t.Fatalf("id %d, want the block's first (0)", id.ID)
	}
}

// BenchmarkProducerIDsInit: an unnamed InitProducerId from the file-backed allocator (one
// file write per 1,000 ids) and from blocks of an in-process source (no file write).
func BenchmarkProducerIDsInit(b *testing.B) {
	for _, blocks := range []bool{false, true} {
		b.Run(map[bool]string{false: "file", true: "blocks"}[blocks], func(b *testing.B) {
			p, err := LoadProducerIDs(b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			if blocks {
				src := &blockSource{next: 1 << 32, asked: make(chan int64, 1<<20)}
				p.SetBlockSource(src.get)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := p.Init("", NoProducer); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
