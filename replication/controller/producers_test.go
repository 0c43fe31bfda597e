package controller

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"strings"
	"testing"
)

func (h *fsmHarness) initName(name string, current ProducerIdentity, keep bool) (ProducerIdentity, error) {
	h.t.Helper()
	r := h.apply(Command{Type: CmdInitProducerName, ProducerName: &ProducerNameRequest{Name: name, Current: current, KeepEpoch: keep}})
	if r.Err != nil {
		return ProducerIdentity{}, r.Err
	}
	id, ok := r.Value.(*ProducerIdentity)
	if !ok {
		h.t.Fatalf("init %q: %#v", name, r.Value)
	}
	return *id, nil
}

var noIdentity = ProducerIdentity{ID: -1, Epoch: -1}

// TestProducerNames: a name keeps its id and bumps its epoch on every init, whichever
// broker asks; its ids never overlap producer id blocks; a holder of an older epoch is
// fenced; KeepEpoch resumes without a bump; the map survives a snapshot.
func TestProducerNames(t *testing.T) {
	h := newFSMHarness(t)
	block := h.allocate(1, 0)
	a, err := h.initName("writer", noIdentity, false)
	if err != nil {
		t.Fatal(err)
	}
	if a.Epoch != 0 || a.ID < block.First+block.Count {
		t.Fatalf("first init %+v, block %+v: want a fresh id above the block at epoch 0", a, block)
	}
	b, err := h.initName("writer", noIdentity, false)
	if err != nil || b != (ProducerIdentity{ID: a.ID, Epoch: 1}) {
		t.Fatalf("second init %+v %v, want id %d epoch 1", b, err, a.ID)
	}
	if _, err := h.initName("writer", a, false); !errors.Is(err, ErrProducerFenced) {
		t.Fatalf("bump by the fenced holder of %+v: %v", a, err)
	}
	if c, err := h.initName("writer", b, false); err != nil || c.Epoch != 2 {
		t.Fatalf("bump by the current holder: %+v %v", c, err)
	}
	if k, err := h.initName("writer", noIdentity, true); err != nil || k.Epoch != 2 {
		t.Fatalf("keep epoch: %+v %v", k, err)
	}
	other, err := h.initName("other", noIdentity, true)
	if err != nil || other.ID == a.ID || other.Epoch != 0 {
		t.Fatalf("a second name: %+v %v", other, err)
	}
	if next := h.allocate(2, 0); next.First <= other.ID {
		t.Fatalf("block %+v after name ids up to %d", next, other.ID)
	}

	restored := snapshotRoundTrip(t, h.fsm)
	if got := restored.Metadata().ProducerNames["writer"]; got != (ProducerIdentity{ID: a.ID, Epoch: 2}) {
		t.Fatalf("restored writer %+v", got)
	}
	h.fsm = restored
	if d, err := h.initName("writer", noIdentity, false); err != nil || d != (ProducerIdentity{ID: a.ID, Epoch: 3}) {
		t.Fatalf("init after restore: %+v %v", d, err)
	}
}

// TestProducerNamesExhaustedEpoch: a name at the last epoch moves to a fresh id at 0.
func TestProducerNamesExhaustedEpoch(t *testing.T) {
	h := newFSMHarness(t)
	a, _ := h.initName("n", noIdentity, false)
	md := h.fsm.Metadata().Clone() // the published state is read-only: publish a changed copy
	md.ProducerNames = map[string]ProducerIdentity{"n": {ID: a.ID, Epoch: producerEpochMax}}
	h.fsm.mu.Lock()
	h.fsm.publishLocked(md)
	h.fsm.mu.Unlock()
	b, err := h.initName("n", noIdentity, false)
	if err != nil || b.ID == a.ID || b.Epoch != 0 {
		t.Fatalf("after the last epoch: %+v %v", b, err)
	}
}

// TestProducerNamesBounded: names longer than the limit and names beyond the count are
// refused with their errors; a snapshot over the bounds is refused as corrupt.
func TestProducerNamesBounded(t *testing.T) {
	h := newFSMHarness(t)
	for _, name := range []string{"", strings.Repeat("x", ProducerNameBytesMax+1)} {
		if _, err := h.initName(name, noIdentity, false); !errors.Is(err, ErrInvalidProducerName) {
			t.Fatalf("name of %d bytes: %v", len(name), err)
		}
	}
	if _, err := h.initName(strings.Repeat("x", ProducerNameBytesMax), noIdentity, false); err != nil {
		t.Fatalf("name at the limit: %v", err)
	}
	for i := 1; i < producerNamesMax; i++ {
		if _, err := h.initName(fmt.Sprint("p", i), noIdentity, false); err != nil {
			t.Fatalf("name %d: %v", i, err)
		}
	}
	if _, err := h.initName("one-too-many", noIdentity, false); !errors.Is(err, ErrTooManyProducers) {
		t.Fatalf("name %d: %v", producerNamesMax+1, err)
	}
	if _, err := h.initName("p1", noIdentity, false); err != nil {
		t.Fatalf("a known name at the limit: %v", err)
	}
	for _, bad := range []string{
		`{"Brokers":{},"Topics":{},"NextProducerID":10,"ProducerNames":{"a":{"ID":10,"Epoch":0}}}`,
		`{"Brokers":{},"Topics":{},"NextProducerID":10,"ProducerNames":{"a":{"ID":1,"Epoch":0},"b":{"ID":1,"Epoch":0}}}`,
		`{"Brokers":{},"Topics":{},"NextProducerID":10,"ProducerNames":{"":{"ID":1,"Epoch":0}}}`,
	} {
		if err := NewFSM(0).Restore(io.NopCloser(bytes.NewReader([]byte(bad)))); !errors.Is(err, ErrCorruptMetadata) {
			t.Fatalf("restored %s: %v", bad, err)
		}
	}
}

// BenchmarkInitProducerNameAtLimit: bumping one name's epoch when the map is full (the
// copy-on-write of producerNamesMax entries is the cost of every InitProducerName).
func BenchmarkInitProducerNameAtLimit(b *testing.B) {
	m := newMetadata(0)
	for i := range producerNamesMax {
		if _, err := m.initProducerName(&ProducerNameRequest{Name: fmt.Sprint("p", i), Current: noIdentity}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if _, err := m.initProducerName(&ProducerNameRequest{Name: "p7", Current: noIdentity}); err != nil {
			b.Fatal(err)
		}
		if m.ProducerNames["p7"].Epoch >= producerEpochMax-1 {
			b.StopTimer()
			names := maps.Clone(m.ProducerNames)
			names["p7"] = ProducerIdentity{ID: names["p7"].ID}
			m.ProducerNames = names
			b.StartTimer()
		}
	}
}
