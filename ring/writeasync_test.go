package ring

import (
	"bytes"
	"os"
	"testing"
)

// TestStartWriteAwaitWrites: writes from heap memory and from a registered arena (sent as
// WRITE_FIXED) complete through their callbacks; AwaitWrites dispatches exactly those and
// leaves every other completion, and the mailbox, to the loop.
func TestStartWriteAwaitWrites(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		r := newReactor(t, backend, Config{})
		a, err := NewArena(8192, 2)
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := r.RegisterWriteArena(a); err != nil || !ok {
			t.Fatalf("RegisterWriteArena: %v %v", ok, err)
		}
		f, _ := tempFile(t)
		fixed, _, _ := a.Get()
		copy(fixed, bytes.Repeat([]byte("F"), 4096))
		heap := bytes.Repeat([]byte("H"), 4096)

		var got []int
		var errs []error
		done := func(n int, err error) { got, errs = append(got, n), append(errs, err) }
		nopRan, posted := false, false
		if err := r.Submit(func(s *SQE) { s.PrepNop() }, func(int32, uint32) { nopRan = true }); err != nil {
			t.Fatal(err)
		}
		if err := r.Post(func() { posted = true }); err != nil {
			t.Fatal(err)
		}
		if err := r.StartWrite(int(f.Fd()), fixed[:4096], 0, done); err != nil {
			t.Fatal(err)
		}
		if err := r.StartWrite(int(f.Fd()), heap, 4096, done); err != nil {
			t.Fatal(err)
		}
		if len(got) != 0 {
			t.Fatal("a write completed inside StartWrite")
		}
		if err := r.AwaitWrites(func() bool { return len(got) == 2 }); err != nil {
			t.Fatal(err)
		}
		if got[0] != 4096 || got[1] != 4096 || errs[0] != nil || errs[1] != nil {
			t.Fatalf("write results %v %v", got, errs)
		}
		if nopRan || posted {
			t.Fatalf("AwaitWrites ran another op's callback (%v) or the mailbox (%v)", nopRan, posted)
		}
		for i := 0; !(nopRan && posted) && i < 100; i++ {
			if err := r.RunOnce(false); err != nil {
				t.Fatal(err)
			}
		}
		if !nopRan || !posted {
			t.Fatal("the loop never ran what AwaitWrites left to it")
		}
		data, err := os.ReadFile(f.Name())
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(data, append(bytes.Repeat([]byte("F"), 4096), heap...)) {
			t.Fatal("file does not hold the two writes")
		}
		if st := r.Stats(); st.WritesStarted != 2 {
			t.Fatalf("WritesStarted = %d", st.WritesStarted)
		}
		// A failing write reports its errno.
		var werr error
		if err := r.StartWrite(-1, heap, 0, func(_ int, err error) { werr = err }); err != nil {
			t.Fatal(err)
		}
		if err := r.AwaitWrites(func() bool { return werr != nil }); err != nil {
			t.Fatal(err)
		}
		a.Put(fixed)
		r.Ring().UnregisterBuffers()
		if err := a.Release(); err != nil {
			t.Fatal(err)
		}
	})
}
