package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// TestProducerNamesFromSource: with a name source that keeps names, Init and Resume go to
// it and its epochs fence (CurrentEpoch), the file is not written for them, and
// SetClusterNames brings a bump made at another broker; a source answering ok=false (a
// cluster not finalized for names yet) leaves names in the file.
func TestProducerNamesFromSource(t *testing.T) {
	dir := t.TempDir()
	p, err := LoadProducerIDs(dir)
	if err != nil {
		t.Fatal(err)
	}
	keeps := false
	cluster := map[string]ProducerIdentity{}
	var calls []bool // keepEpoch of every call
	p.SetNameSource(func(_ context.Context, name string, current ProducerIdentity, keepEpoch bool) (ProducerIdentity, bool, error) {
		calls = append(calls, keepEpoch)
		if !keeps {
			return ProducerIdentity{}, false, nil
		}
		prev, known := cluster[name]
		if current.ID >= 0 && prev != current {
			return ProducerIdentity{}, false, ErrProducerFenced
		}
		switch {
		case !known:
			prev = ProducerIdentity{ID: 1<<40 + int64(len(cluster))}
		case !keepEpoch:
			prev.Epoch++
		}
		cluster[name] = prev
		return prev, true, nil
	})

	local, err := p.Init("n", NoProducer)
	if err != nil || local.Epoch != 0 {
		t.Fatalf("init without the cluster keeping names: %+v %v", local, err)
	}
	if _, ok := p.Lookup("n"); !ok {
		t.Fatal("the name is not in the file")
	}

	keeps = true
	a, err := p.Init("n", NoProducer)
	if err != nil || a.ID != 1<<40 {
		t.Fatalf("init from the source: %+v %v", a, err)
	}
	before := len(calls)
	if r, err := p.Resume("n"); err != nil || r != a || len(calls) != before {
		t.Fatalf("resume of a name the cluster map holds: %+v %v (source asked %d times)", r, err, len(calls)-before)
	}
	if r, err := p.Resume("fresh"); err != nil || r.Epoch != 0 || !calls[len(calls)-1] {
		t.Fatalf("resume of a new name: %+v %v (keepEpoch asked: %v)", r, err, calls)
	}
	if e, ok := p.CurrentEpoch(a.ID); !ok || e != 0 {
		t.Fatalf("epoch of the cluster's id: %d %v", e, ok)
	}
	// Another broker bumps the name; the metadata brings it here.
	p.SetClusterNames(map[string]ProducerIdentity{"n": {ID: a.ID, Epoch: 1}})
	if e, _ := p.CurrentEpoch(a.ID); e != 1 {
		t.Fatalf("epoch after SetClusterNames: %d", e)
	}
	// A stale view does not move an epoch this broker was answered back, nor drop a name.
	cluster["n"] = ProducerIdentity{ID: a.ID, Epoch: 1}
	if b, err := p.Init("n", NoProducer); err != nil || b.Epoch != 2 {
		t.Fatalf("bump: %+v %v", b, err)
	}
	p.SetClusterNames(map[string]ProducerIdentity{"n": {ID: a.ID, Epoch: 1}})
	if e, _ := p.CurrentEpoch(a.ID); e != 2 {
		t.Fatalf("epoch after a stale view: %d, want 2", e)
	}
	if r, err := p.Resume("fresh"); err != nil || r.ID != 1<<40+1 {
		t.Fatalf("name dropped by a stale view: %+v %v", r, err)
	}
	if _, err := p.Init("n", a); !errors.Is(err, ErrProducerFenced) {
		t.Fatalf("bump by a fenced holder: %v", err)
	}
	if _, err := p.Init(string(make([]byte, ProducerNameBytesMax+1)), NoProducer); !errors.Is(err, ErrInvalidProducerName) {
		t.Fatalf("long name: %v", err)
	}
	// The file still holds only the name initialised before the cluster kept names.
	reopened, err := LoadProducerIDs(dir)
	if err != nil {
		t.Fatal(err)
	}
	if id, ok := reopened.Lookup("n"); !ok || id != local {
		t.Fatalf("file holds %+v %v, want %+v", id, ok, local)
	}
}

// BenchmarkSetClusterNames: a broker taking the controller's map at its 4,096-name limit
// after a change (the metadata loop calls it only when the map changed).
func BenchmarkSetClusterNames(b *testing.B) {
	p, err := LoadProducerIDs(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	names := make(map[string]ProducerIdentity, 4096)
	for i := range 4096 {
		names[fmt.Sprint("producer-", i)] = ProducerIdentity{ID: 1<<32 + int64(i)}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		p.SetClusterNames(names)
	}
}

// TestProducerNameNotUTF8: a name that is not UTF-8 is refused. The registry file is JSON,
// which saved each invalid byte as U+FFFD: 200 bytes of 0xff became a 600-byte name, and
// the broker refused to start on its own file ("load producer ids: ... corrupt").
func TestProducerNameNotUTF8(t *testing.T) {
	dir := t.TempDir()
	p, err := LoadProducerIDs(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Init(strings.Repeat("\xff", 200), NoProducer); !errors.Is(err, ErrInvalidProducerName) {
		t.Fatalf("Init of a name that is not UTF-8: %v, want ErrInvalidProducerName", err)
	}
	if _, err := p.Init("valid-\u00e9", NoProducer); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadProducerIDs(dir); err != nil {
		t.Fatalf("reopen: %v", err)
	}
}
