package controller

import (
	"bytes"
	"errors"
	"io"
	"math"
	"testing"
)

func (h *fsmHarness) allocate(broker int32, minID int64) ProducerIDBlock {
	h.t.Helper()
	r := h.must(Command{Type: CmdAllocateProducerIDs, ProducerIDs: &ProducerIDsRequest{BrokerID: broker, MinID: minID}})
	b, ok := r.Value.(*ProducerIDBlock)
	if !ok || b.Count != ProducerIDBlockSize {
		h.t.Fatalf("allocate: %#v", r.Value)
	}
	return *b
}

// TestProducerIDBlocksDisjoint: blocks never overlap, whichever broker asks, across a
// snapshot and restore, and never start below the floor or the asking broker's MinID.
func TestProducerIDBlocksDisjoint(t *testing.T) {
	h := newFSMHarness(t)
	var blocks []ProducerIDBlock
	blocks = append(blocks, h.allocate(1, 0), h.allocate(2, 0), h.allocate(3, 5000))
	if blocks[0].First != ProducerIDFloor {
		t.Fatalf("first block at %d, want the floor %d", blocks[0].First, ProducerIDFloor)
	}
	// A broker whose own file already passed the counter gets a block above its ids.
	high := ProducerIDFloor + 1<<20
	b := h.allocate(2, high)
	if b.First != high {
		t.Fatalf("block for MinID %d starts at %d", high, b.First)
	}
	blocks = append(blocks, b)

	restored := snapshotRoundTrip(t, h.fsm)
	if got, want := restored.Metadata().NextProducerID, h.fsm.Metadata().NextProducerID; got != want {
		t.Fatalf("restored counter %d, want %d", got, want)
	}
	h.fsm = restored
	blocks = append(blocks, h.allocate(1, 0), h.allocate(3, 0))
	for i, x := range blocks {
		for j, y := range blocks[:i] {
			if x.First < y.First+y.Count && y.First < x.First+x.Count {
				t.Fatalf("block %d %+v overlaps block %d %+v", i, x, j, y)
			}
		}
	}
}

// TestProducerIDsOldSnapshot: a snapshot written before producer id blocks existed has no
// counter; it restores, and its first block starts at the floor.
func TestProducerIDsOldSnapshot(t *testing.T) {
	old := []byte(`{"Version":12,"SessionTimeoutMs":10000,"Brokers":{"1":{"ID":1,"Address":"a:1","SessionEpoch":1}},"Topics":{}}`)
	fsm := NewFSM(0)
	if err := fsm.Restore(io.NopCloser(bytes.NewReader(old))); err != nil {
		t.Fatal(err)
	}
	if n := fsm.Metadata().NextProducerID; n != 0 {
		t.Fatalf("counter %d after an old snapshot", n)
	}
	h := &fsmHarness{t: t, fsm: fsm, index: 12}
	if b := h.allocate(1, 0); b.First != ProducerIDFloor {
		t.Fatalf("first block after an old snapshot at %d, want %d", b.First, ProducerIDFloor)
	}
	// A corrupt counter is refused.
	if err := NewFSM(0).Restore(io.NopCloser(bytes.NewReader([]byte(`{"Brokers":{},"Topics":{},"NextProducerID":-1}`)))); !errors.Is(err, ErrCorruptMetadata) {
		t.Fatalf("negative counter restored: %v", err)
	}
}

// TestProducerIDsExhausted: the counter never wraps.
func TestProducerIDsExhausted(t *testing.T) {
	h := newFSMHarness(t)
	r := h.apply(Command{Type: CmdAllocateProducerIDs, ProducerIDs: &ProducerIDsRequest{MinID: math.MaxInt64 - 10}})
	if !errors.Is(r.Err, ErrProducerIDsExhausted) {
		t.Fatalf("allocation near the top: %+v", r)
	}
	if r := h.apply(Command{Type: CmdAllocateProducerIDs}); !errors.Is(r.Err, ErrUnknownCommand) {
		t.Fatalf("allocation without payload: %+v", r)
	}
}
