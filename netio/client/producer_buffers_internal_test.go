package client

import (
	"math/rand/v2"
	"runtime/debug"
	"testing"
)

// A batch buffer asked for n bytes has room for them and at most 25 % more (from 4 KiB),
// and goes back to a class from which every later request it fits is served.
func TestBatchBufferClasses(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	sizes := []int{1, 4095, 4096, 4097, 5119, 5120, 5121, 256 << 10, 256<<10 + 61, 16<<20 - 1, 16 << 20}
	for range 2000 {
		sizes = append(sizes, 1+rng.IntN(16<<20))
	}
	for _, n := range sizes {
		c := batchBufferClassUp(n)
		size := batchBufferClassSize(c)
		if size < n || n >= 4096 && size > n+n/4 {
			t.Fatalf("%d bytes: class %d of %d bytes", n, c, size)
		}
		if down := batchBufferClassDown(size); down != c {
			t.Fatalf("%d bytes: class %d of %d bytes, which goes back to class %d", n, c, size, down)
		}
		if d := batchBufferClassDown(n); d >= 0 && batchBufferClassSize(d) > n {
			t.Fatalf("a buffer of %d bytes goes to class %d of %d bytes", n, d, batchBufferClassSize(d))
		}
	}
	if c := batchBufferClassUp(16 << 20); c != batchBufferClasses-1 {
		t.Fatalf("16 MiB: class %d, want the last, %d", c, batchBufferClasses-1)
	}
	if RaceEnabled {
		return // the race detector drops pooled objects at random
	}
	// Recycled buffers of a steady size: no allocation once the class holds one.
	gc := debug.SetGCPercent(-1) // a GC would empty the pools
	defer debug.SetGCPercent(gc)
	b := getBatchBuffer(256<<10 + 61)
	putBatchBuffer(b)
	if n := testing.AllocsPerRun(100, func() { putBatchBuffer(getBatchBuffer(256<<10 + 61)) }); n != 0 {
		t.Errorf("%v allocations per recycled buffer", n)
	}
}
