package ring

import (
	"bytes"
	"os"
	"testing"
)

// TestStartWriteAwaitWrites: writes from heap memory and from a buffer registered in the
// sparse table (WRITE_FIXED) complete through their callbacks; AwaitWrites dispatches
// exactly those and leaves every other completion, and the mailbox, to the loop; a slot
// emptied by UnregisterWriteBuffer no longer writes.
func TestStartWriteAwaitWrites(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		r := newReactor(t, backend, Config{})
		a, err := NewArena(8192, 2)
		if err != nil {
			t.Fatal(err)
		}
		f, _ := tempFile(t)
		fixed, _, _ := a.Get()
		copy(fixed, bytes.Repeat([]byte("F"), 4096))
		slot, ok := r.RegisterWriteBuffer(fixed)
		if !ok {
			if backend == "uring" {
				t.Skip("no sparse fixed-buffer table on this kernel (5.19+)")
			}
			t.Fatal("RegisterWriteBuffer refused on the syscall backend")
		}
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
		if err := r.StartWriteFixed(int(f.Fd()), fixed[:4096], 0, slot, done); err != nil {
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
		if st := r.Stats(); st.WritesStarted != 2 || st.WritesFixed != 1 {
			t.Fatalf("WritesStarted = %d, WritesFixed = %d", st.WritesStarted, st.WritesFixed)
		}
		r.UnregisterWriteBuffer(slot)
		var ferr error
		if err := r.StartWriteFixed(int(f.Fd()), fixed[:4096], 0, slot, func(_ int, err error) { ferr = err; got = append(got, 0) }); err != nil {
			t.Fatal(err)
		}
		if err := r.AwaitWrites(func() bool { return len(got) == 3 }); err != nil {
			t.Fatal(err)
		}
		if ferr == nil {
			t.Fatal("a write from an emptied slot succeeded")
		}
		if again, ok := r.RegisterWriteBuffer(fixed); !ok || again != slot {
			t.Fatalf("re-register: slot %d ok %v, want the freed slot %d", again, ok, slot)
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
		if err := r.Ring().UnregisterBuffers(); err != nil {
			t.Fatal(err)
		}
		if err := a.Release(); err != nil {
			t.Fatal(err)
		}
	})
}
