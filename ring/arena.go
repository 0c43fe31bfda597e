package ring

import (
	"errors"
	"fmt"
	"log/slog"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Arena is a pool of equal-size I/O buffers in one anonymous mmap: page-aligned (so
// O_DIRECT-safe when bufSize is a multiple of the logical block size), outside the Go heap
// (the GC never moves or frees them, so no pinning is needed), and registrable as fixed
// buffers (Buffers + Ring.RegisterBuffers; buffer i is fixed index i). Get and Put do not
// allocate. An Arena is owned by one goroutine (the shard's loop); it has no locking.
type Arena struct {
	mem      []byte
	bufSize  int
	count    int
	free     []int32 // stack of free buffer indexes
	inUse    []bool
	base     uintptr
	released bool
}

const pageBytes = 4096

// NewArena maps count buffers of bufSize bytes (bufSize rounded up to a whole page).
func NewArena(bufSize, count int) (*Arena, error) {
	if bufSize <= 0 || count <= 0 {
		return nil, fmt.Errorf("ring: NewArena(%d, %d): size and count must be positive", bufSize, count)
	}
	bufSize = (bufSize + pageBytes - 1) &^ (pageBytes - 1)
	total := bufSize * count
	if total/count != bufSize || total > 1<<40 {
		return nil, fmt.Errorf("ring: NewArena(%d, %d): %d bytes is too large", bufSize, count, total)
	}
	mem, err := unix.Mmap(-1, 0, total, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, fmt.Errorf("ring: mmap arena of %d x %d bytes: %w", count, bufSize, err)
	}
	a := &Arena{mem: mem, bufSize: bufSize, count: count, free: make([]int32, count), inUse: make([]bool, count)}
	a.base = uintptr(unsafe.Pointer(&mem[0]))
	for i := range a.free {
		a.free[i] = int32(count - 1 - i) // Get hands out buffer 0 first
	}
	return a, nil
}

// BufSize is the size of each buffer in bytes.
func (a *Arena) BufSize() int { return a.bufSize }

// Count is the number of buffers.
func (a *Arena) Count() int { return a.count }

// Available is the number of buffers Get can still hand out.
func (a *Arena) Available() int { return len(a.free) }

// Get hands out a full-size buffer and its index (the fixed-buffer index once registered).
func (a *Arena) Get() ([]byte, int, error) {
	n := len(a.free)
	if n == 0 || a.released {
		return nil, -1, fmt.Errorf("%w (%d buffers of %d bytes)", ErrArenaExhausted, a.count, a.bufSize)
	}
	idx := a.free[n-1]
	a.free = a.free[:n-1]
	a.inUse[idx] = true
	return a.Buf(int(idx)), int(idx), nil
}

// Buf returns buffer i (full size) without changing its state.
func (a *Arena) Buf(i int) []byte {
	off := i * a.bufSize
	return a.mem[off : off+a.bufSize : off+a.bufSize]
}

// Index returns the index of the buffer that b starts in, or -1 if b is not from a.
func (a *Arena) Index(b []byte) int {
	if len(b) == 0 && cap(b) == 0 {
		return -1
	}
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	if p < a.base || p >= a.base+uintptr(len(a.mem)) {
		return -1
	}
	return int((p - a.base) / uintptr(a.bufSize))
}

// Put returns a buffer (any sub-slice of it) to the arena. Putting a foreign buffer or the
// same buffer twice panics: both are memory-safety bugs in the caller.
func (a *Arena) Put(b []byte) {
	idx := a.Index(b)
	if idx < 0 {
		panic("ring: Arena.Put of a buffer that is not from this arena")
	}
	if !a.inUse[idx] {
		panic(fmt.Sprintf("ring: Arena.Put of buffer %d twice", idx))
	}
	a.inUse[idx] = false
	a.free = append(a.free, int32(idx))
}

// Buffers returns every buffer in index order, for Ring.RegisterBuffers.
func (a *Arena) Buffers() [][]byte {
	out := make([][]byte, a.count)
	for i := range out {
		out[i] = a.Buf(i)
	}
	return out
}

// Release unmaps the arena. Every buffer must be back (and no op may still use one).
func (a *Arena) Release() error {
	if a.released {
		return nil
	}
	if len(a.free) != a.count {
		return fmt.Errorf("ring: Arena.Release with %d buffers still out", a.count-len(a.free))
	}
	a.released = true
	return unix.Munmap(a.mem)
}

// RegisterArena registers a's buffers as the ring's fixed buffers (buffer i is fixed index
// i) for PrepReadFixed/PrepWriteFixed. If the kernel refuses for lack of lockable memory
// (ENOMEM: RLIMIT_MEMLOCK) or permission, the reason is logged and registered is false: the
// buffers still work with the plain read/write ops. Other errors are returned.
func (r *Reactor) RegisterArena(a *Arena) (registered bool, err error) {
	err = r.ring.RegisterBuffers(a.Buffers())
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, unix.ENOMEM), errors.Is(err, unix.EPERM), errors.Is(err, unix.EFAULT):
		slog.Warn("ring: fixed buffers not registered; using unregistered buffers", "buffers", a.count, "bytes", a.bufSize, "err", err)
		return false, nil
	default:
		return false, err
	}
}
