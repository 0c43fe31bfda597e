package engine

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func mustInit(t *testing.T, p *ProducerIDs, name string) ProducerIdentity {
	t.Helper()
	id, err := p.Init(name, NoProducer)
	if err != nil {
		t.Fatalf("Init(%q): %v", name, err)
	}
	return id
}

// TestProducerIDsSurviveRestart: names keep their id with a bumped epoch across restarts,
// unnamed ids are never handed out twice, and CurrentEpoch follows the names.
func TestProducerIDsSurviveRestart(t *testing.T) {
	dir := t.TempDir()
	p, err := LoadProducerIDs(dir)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int64]bool{}
	a0 := mustInit(t, p, "a")
	anon := mustInit(t, p, "")
	seen[a0.ID], seen[anon.ID] = true, true
	a1 := mustInit(t, p, "a")
	if a1.ID != a0.ID || a1.Epoch != a0.Epoch+1 {
		t.Fatalf("second init of a: %+v after %+v", a1, a0)
	}
	if e, ok := p.CurrentEpoch(a0.ID); !ok || e != a1.Epoch {
		t.Fatalf("CurrentEpoch = %d %v, want %d", e, ok, a1.Epoch)
	}
	if _, ok := p.CurrentEpoch(anon.ID); ok {
		t.Fatalf("an unnamed id has a tracked epoch")
	}
	for round := 0; round < 3; round++ {
		p, err = LoadProducerIDs(dir)
		if err != nil {
			t.Fatal(err)
		}
		a := mustInit(t, p, "a")
		if a.ID != a0.ID || a.Epoch != a1.Epoch+1+int16(round) {
			t.Fatalf("round %d: a = %+v", round, a)
		}
		b := mustInit(t, p, "b"+string(rune('0'+round)))
		if seen[b.ID] {
			t.Fatalf("round %d: named id %d handed out twice", round, b.ID)
		}
		seen[b.ID] = true
		for i := 0; i < 3; i++ {
			x := mustInit(t, p, "")
			if seen[x.ID] {
				t.Fatalf("round %d: id %d handed out twice", round, x.ID)
			}
			seen[x.ID] = true
		}
	}
}

func TestProducerIDsBumpByHolder(t *testing.T) {
	p, _ := LoadProducerIDs(t.TempDir())
	a := mustInit(t, p, "n")
	bumped, err := p.Init("n", a)
	if err != nil || bumped.ID != a.ID || bumped.Epoch != a.Epoch+1 {
		t.Fatalf("holder bumps: %+v %v", bumped, err)
	}
	if _, err := p.Init("n", a); !errors.Is(err, ErrProducerFenced) {
		t.Fatalf("a stale holder bumps: %v", err)
	}
	if e, _ := p.CurrentEpoch(a.ID); e != bumped.Epoch {
		t.Fatalf("a refused bump moved the epoch to %d", e)
	}
}

func TestProducerIDsEpochExhausted(t *testing.T) {
	dir := t.TempDir()
	p, _ := LoadProducerIDs(dir)
	first := mustInit(t, p, "x")
	p.mu.Lock()
	p.names["x"] = ProducerIdentity{ID: first.ID, Epoch: producerEpochMax}
	p.mu.Unlock()
	next := mustInit(t, p, "x")
	if next.ID == first.ID || next.Epoch != 0 {
		t.Fatalf("after the last epoch: %+v, want a new id at epoch 0", next)
	}
}

func TestProducerIDsRejects(t *testing.T) {
	dir := t.TempDir()
	p, _ := LoadProducerIDs(dir)
	if _, err := p.Init(strings.Repeat("n", ProducerNameBytesMax+1), NoProducer); !errors.Is(err, ErrInvalidProducerName) {
		t.Fatalf("long name: %v", err)
	}
	for _, bad := range []string{
		`{"version":2,"next_id":1,"names":{}}`,
		`{"version":1,"next_id":1,"names":{"a":{"id":5,"epoch":0}}}`,
		`{"version":1,"next_id":9,"names":{"a":{"id":5,"epoch":0},"b":{"id":5,"epoch":1}}}`,
		`{"version":1,"next_id":1,"names":{},"extra":1}`,
		`not json`,
	} {
		if err := os.WriteFile(filepath.Join(dir, producerIDsFileName), []byte(bad), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := LoadProducerIDs(dir); !errors.Is(err, ErrProducerIDsCorrupt) {
			t.Fatalf("%s: %v", bad, err)
		}
	}
}
