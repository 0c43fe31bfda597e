package ring

import (
	"fmt"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// BufRing is a provided-buffer ring (IORING_REGISTER_PBUF_RING, Linux 5.19): a pool of
// equal buffers that the kernel (or the syscall backend) picks from, one per completion, for
// ops with SQEBufferSelect such as PrepRecvMultishot. With many mostly idle connections one
// shared pool replaces a buffer per connection.
//
// The completion says which buffer was filled (BufferID(flags)); the owner reads it with Buf
// and hands it back with Recycle. Owned by the ring's thread.
//
//	ring memory (page-aligned mmap), entries × 16 bytes:
//	  entry i: addr u64 | len u32 | bid u16 | resv u16    (entry 0's resv is the ring's tail)
type BufRing struct {
	ring    Ring
	group   uint16
	entries uint16
	mask    uint16
	tail    uint16 // local copy of the published tail
	mem     []byte
	ents    []bufRingEntry
	arena   *Arena
	closed  bool
}

const bufRingEntriesMax = 32768

// NewBufRing maps entries buffers of bufSize bytes (entries: a power of two ≤ 32768),
// registers them as buffer group group on rg, and provides all of them.
func NewBufRing(rg Ring, group uint16, entries int, bufSize int) (*BufRing, error) {
	if entries <= 0 || entries > bufRingEntriesMax || entries&(entries-1) != 0 {
		return nil, fmt.Errorf("ring: NewBufRing: %d entries, want a power of two up to %d", entries, bufRingEntriesMax)
	}
	size := (entries*int(unsafe.Sizeof(bufRingEntry{})) + pageBytes - 1) &^ (pageBytes - 1)
	mem, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, fmt.Errorf("ring: mmap buffer ring: %w", err)
	}
	arena, err := NewArena(bufSize, entries)
	if err != nil {
		unix.Munmap(mem)
		return nil, err
	}
	b := &BufRing{ring: rg, group: group, entries: uint16(entries), mask: uint16(entries - 1), mem: mem, arena: arena,
		ents: unsafe.Slice((*bufRingEntry)(unsafe.Pointer(&mem[0])), entries)}
	if err := rg.RegisterBufRing(group, mem, uint16(entries)); err != nil {
		unix.Munmap(mem)
		arena.Release()
		return nil, fmt.Errorf("ring: register buffer ring group %d: %w", group, err)
	}
	for i := 0; i < entries; i++ {
		b.add(uint16(i), uint16(i))
	}
	b.advance(uint16(entries))
	return b, nil
}

// Group is the buffer group id to put in SQEs.
func (b *BufRing) Group() uint16 { return b.group }

// BufSize is each buffer's size in bytes.
func (b *BufRing) BufSize() int { return b.arena.BufSize() }

// Buf returns the first n bytes of buffer bid (n = the completion's res).
func (b *BufRing) Buf(bid uint16, n int) []byte { return b.arena.Buf(int(bid))[:n] }

// Recycle gives buffer bid back to the kernel.
func (b *BufRing) Recycle(bid uint16) {
	b.add(bid, 0)
	b.advance(1)
}

// add writes buffer bid into the entry offset places past the tail (not yet visible).
// Fields are set one by one: entry 0's Resv is the shared tail and must not be written.
func (b *BufRing) add(bid uint16, offset uint16) {
	e := &b.ents[(b.tail+offset)&b.mask]
	buf := b.arena.Buf(int(bid))
	e.Addr = uint64(uintptr(unsafe.Pointer(&buf[0])))
	e.Len = uint32(len(buf))
	e.Bid = bid
}

// advance publishes count added entries. The tail is a u16 sharing a 32-bit word with entry
// 0's bid, so both are stored together in one atomic 32-bit store (bid unchanged), after the
// entries were written.
func (b *BufRing) advance(count uint16) {
	b.tail += count
	word := (*uint32)(unsafe.Pointer(&b.mem[12]))
	atomic.StoreUint32(word, uint32(b.ents[0].Bid)|uint32(b.tail)<<16)
}

// Close unregisters the group and unmaps its memory. No op may still use the group.
func (b *BufRing) Close() error {
	if b.closed {
		return nil
	}
	b.closed = true
	err := b.ring.UnregisterBufRing(b.group)
	unix.Munmap(b.mem)
	b.arena.Release() // its buffers were lent by index, never Get: all are free
	return err
}
