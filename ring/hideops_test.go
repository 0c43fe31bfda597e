package ring

import (
	"errors"
	"testing"
)

// TestHideOps: an op in Config.HideOps is missing from the reactor's Probe and refused
// with ErrUnsupported, as on a kernel without it; the ring's own probe and other ops are
// untouched.
func TestHideOps(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		plain := newReactor(t, backend, Config{})
		if !plain.Probe().Supported(OpNop) {
			t.Fatal("set-up: no NOP on this backend")
		}
		r := newReactor(t, backend, Config{HideOps: []Opcode{OpNop}})
		if r.Probe().Supported(OpNop) {
			t.Fatal("a hidden op is reported supported")
		}
		if !r.ring.Probe().Supported(OpNop) || !plain.Probe().Supported(OpNop) {
			t.Fatal("hiding an op changed the ring's own probe")
		}
		if r.Probe().Supported(OpRead) != plain.Probe().Supported(OpRead) {
			t.Fatal("hiding NOP changed another op")
		}
		called := false
		err := r.Submit(func(s *SQE) { s.PrepNop() }, func(int32, uint32) { called = true })
		if !errors.Is(err, ErrUnsupported) {
			t.Fatalf("a hidden op submitted: %v", err)
		}
		for range 3 {
			if err := r.RunOnce(false); err != nil {
				t.Fatal(err)
			}
		}
		if called {
			t.Fatal("a refused op's completion ran")
		}
	})
}
