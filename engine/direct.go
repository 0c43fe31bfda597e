package engine

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"unsafe"

	"github.com/ringlog/ringlog/ring"
	"golang.org/x/sys/unix"
)

// Direct mode.
//
// The active segment's bytes are staged in block-aligned chunks (DirectChunkBytes each).
// An append copies batches into the active chunk (rolling to a fresh chunk when it fills)
// and issues one pwritev on an O_DIRECT descriptor that starts at the block holding the old
// end of the log, so the partial tail block is rewritten together with the new bytes and the
// last block is zero-padded:
//
//	file:   |blk|blk|blk|blk|blk|blk|
//	chunk:          [=====tail==|.......]   active chunk, start block-aligned
//	                        ^ old end   ^ new end, padded up to the block boundary
//	write:          <-- one aligned pwritev --->
//
// Written chunks stay in a per-segment cache (DirectCacheChunks, oldest evicted) and serve
// reads of recent data; older bytes are read through the file's ordinary descriptor. Bytes
// below a chunk's fill are never modified again (truncation makes a fresh chunk), so slices
// handed to readers stay valid. The file is ftruncate'd to its logical length when the
// segment is closed; after a crash, recovery drops the zero padding like any torn tail.

type chunk struct {
	buf    []byte // block-aligned address, len == chunk size; immutable below fill
	start  int64  // file position of buf[0], block-aligned
	fill   int
	shared bool // a reader was given a slice of buf: never reuse it, let the GC have it
	// fixed is buf's slot in the ring's fixed-buffer table (asynchronous writes with a
	// FixedBufferWriter); fixedNone: not registered yet, fixedRefused: the ring said no.
	fixed int
}

const (
	fixedNone    = -1
	fixedRefused = -2
)

// directFreeChunksMax bounds the chunks kept for reuse: a chunk evicted from the cache
// without ever being handed to a reader is recycled instead of allocating (and page-faulting)
// a fresh one per DirectChunkBytes appended. Asynchronous writes (asyncwrite.go) stage and
// then evict several chunks per write group, so a handful are kept: 8 (8 MiB at the default
// chunk size) per partition that wrote that fast.
const directFreeChunksMax = 8

func (c *chunk) end() int64 { return c.start + int64(c.fill) }

// chunkPool holds a log's chunks ready for reuse (at most directFreeChunksMax), shared by
// the writers of its segments: a roll hands the sealed segment's chunks (their fixed-buffer
// registrations kept: one log, one ring) to the next segment's writer, which would
// otherwise allocate, fault in and register its own (at 32 MiB segments that was a third
// of the bytes appended). Owned by the log's goroutine.
type chunkPool struct{ free []*chunk }

type directWriter struct {
	file       *os.File // opened O_RDWR|O_DIRECT
	chunkBytes int
	cacheMax   int
	cache      []*chunk // full chunks, contiguous, oldest first, ending at active.start
	active     *chunk
	iovecs     [][]byte   // reused
	pool       *chunkPool // unshared chunks ready for reuse, the log's (shared by its writers)
	// writtenPos is the file position below which every staged byte is on the device; the
	// bytes from there to active.end() are staged only (asynchronous mode, asyncwrite.go).
	writtenPos int64
	// undoFill and undoCached are the active chunk's fill and the cache length before the
	// last stage (unstage).
	undoFill, undoCached int
	// fixedIO, when set, registers chunks as the ring's fixed buffers (asyncwrite.go); a
	// chunk's slot is released when the writer drops the chunk.
	fixedIO FixedBufferWriter
	// allocatedEnd is how far the file has been fallocate'd ahead (KEEP_SIZE).
	allocatedEnd int64
}

// directFallocateBytes is how far ahead direct mode allocates file blocks: 32 MiB keeps the
// fallocate calls to one per 32 appends of 1 MiB. Sealing the segment truncates the file,
// which frees what was not used.
const directFallocateBytes = 32 << 20

func iovecBytes(iov [][]byte) int64 {
	var n int64
	for _, b := range iov {
		n += int64(len(b))
	}
	return n
}

func alignDown(n int64) int64 { return n &^ (blockBytes - 1) }
func alignUp(n int64) int64   { return (n + blockBytes - 1) &^ (blockBytes - 1) }

// alignedBuffer returns n zeroed bytes whose address is block-aligned (heap memory: the Go
// heap does not move objects, and a FileIO call holds the slice until its completion).
func alignedBuffer(n int) []byte {
	b := make([]byte, n+blockBytes)
	off := int(uintptr(unsafe.Pointer(&b[0])) & (blockBytes - 1))
	if off != 0 {
		off = blockBytes - off
	}
	return b[off : off+n : off+n]
}

// openDirectWriter opens path with O_DIRECT and loads the partial tail block [alignDown(size),
// size) through the buffered descriptor bufferedFd. Its chunks come from and go back to
// pool.
func openDirectWriter(fio ring.FileIO, path string, bufferedFd int, size int64, chunkBytes, cacheMax int, pool *chunkPool) (*directWriter, error) {
	f, err := os.OpenFile(path, os.O_RDWR|unix.O_DIRECT, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s with O_DIRECT: %w", path, err)
	}
	w := &directWriter{file: f, chunkBytes: chunkBytes, cacheMax: cacheMax, pool: pool}
	if err := w.reset(fio, bufferedFd, size); err != nil {
		f.Close()
		return nil, err
	}
	return w, nil
}

// reset drops all cached chunks and starts a fresh active chunk at the block holding size.
func (w *directWriter) reset(fio ring.FileIO, bufferedFd int, size int64) error {
	for _, c := range w.cache {
		w.recycle(c)
	}
	if w.active != nil {
		w.recycle(w.active)
	}
	w.cache, w.active = nil, nil
	c := w.newChunk(alignDown(size))
	c.fill = int(size - c.start)
	if err := preadFull(fio, bufferedFd, c.buf[:c.fill], c.start); err != nil {
		return fmt.Errorf("load tail block at %d: %w", c.start, err)
	}
	w.active = c
	w.writtenPos = size
	return nil
}

// close releases every chunk, the pool's included (the log closes, or drops this segment),
// and closes the file.
func (w *directWriter) close() error {
	for _, c := range w.cache {
		w.release(c)
	}
	if w.active != nil {
		w.release(w.active)
	}
	for _, c := range w.pool.free {
		w.release(c)
	}
	clear(w.pool.free)
	w.pool.free = w.pool.free[:0]
	return w.file.Close()
}

// retire puts w's chunks into the pool for the log's next writer (those a reader holds,
// or past the pool's bound, are released) and closes the file: the segment is sealed, and
// read from its file from now on. No write from w may be in flight.
func (w *directWriter) retire() error {
	w.retireChunks()
	return w.file.Close()
}

// retireChunks is retire without closing the file (a roll's seal cuts the file through it
// first, see finishSeal).
func (w *directWriter) retireChunks() {
	for _, c := range w.cache {
		w.recycle(c)
	}
	clear(w.cache)
	w.cache = nil
	if w.active != nil {
		w.recycle(w.active)
		w.active = nil
	}
}

// fixedIndex is c's fixed-buffer slot, registering it on first use; < 0: write it
// unregistered.
func (w *directWriter) fixedIndex(c *chunk) int {
	if w.fixedIO == nil {
		return fixedNone
	}
	if c.fixed == fixedNone {
		c.fixed = fixedRefused
		if idx, ok := w.fixedIO.RegisterWriteBuffer(c.buf); ok {
			c.fixed = idx
		}
	}
	return c.fixed
}

// release gives back c's fixed-buffer slot (the writer drops c; no write from it is in
// flight).
func (w *directWriter) release(c *chunk) {
	if c.fixed >= 0 && w.fixedIO != nil {
		w.fixedIO.UnregisterWriteBuffer(c.fixed)
	}
	c.fixed = fixedNone
}

// memoryStart is the lowest file position held in memory.
func (w *directWriter) memoryStart() int64 {
	if len(w.cache) > 0 {
		return w.cache[0].start
	}
	return w.active.start
}

// chunkAt returns the chunk holding pos (pos must lie in memory).
func (w *directWriter) chunkAt(pos int64) *chunk {
	for _, c := range w.cache {
		if pos < c.start+int64(w.chunkBytes) {
			return c
		}
	}
	return w.active
}

// copyOut copies p from memory at pos; the range must lie within [memoryStart, end).
func (w *directWriter) copyOut(p []byte, pos int64) {
	for len(p) > 0 {
		c := w.chunkAt(pos)
		n := copy(p, c.buf[pos-c.start:c.fill])
		if n == 0 {
			panic(fmt.Sprintf("engine: direct copyOut at %d outside memory", pos))
		}
		p = p[n:]
		pos += int64(n)
	}
}

// appendPieces appends in-memory pieces covering [pos, end) to dst.
func (w *directWriter) appendPieces(dst []Piece, pos, end int64) []Piece {
	for pos < end {
		c := w.chunkAt(pos)
		stop := min(end, c.end())
		if stop <= pos {
			panic(fmt.Sprintf("engine: direct piece at %d outside memory", pos))
		}
		c.shared = true
		dst = append(dst, Piece{Position: pos, Size: stop - pos, Data: c.buf[pos-c.start : stop-c.start]})
		pos = stop
	}
	return dst
}

// stage copies batches to the end of the staged data, which must be at pos; no I/O. Chunks
// that fill up join the cache at once. unstage undoes the last stage until the next one.
func (w *directWriter) stage(batches [][]byte, pos int64) {
	c := w.active
	if c.end() != pos {
		panic(fmt.Sprintf("engine: direct stage at %d, staged end %d", pos, c.end()))
	}
	w.undoFill, w.undoCached = c.fill, len(w.cache)
	for _, b := range batches {
		for len(b) > 0 {
			if c.fill == w.chunkBytes {
				w.cache = append(w.cache, c)
				c = w.newChunk(c.start + int64(w.chunkBytes))
				w.active = c
			}
			n := copy(c.buf[c.fill:], b)
			c.fill += n
			b = b[n:]
		}
	}
}

// unstage drops what the last stage added (its write failed).
func (w *directWriter) unstage() {
	if len(w.cache) > w.undoCached {
		orig := w.cache[w.undoCached]
		w.recycle(w.active)
		for _, c := range w.cache[w.undoCached+1:] {
			w.recycle(c)
		}
		clear(w.cache[w.undoCached:])
		w.cache = w.cache[:w.undoCached]
		w.active = orig
	}
	clear(w.active.buf[w.undoFill:w.active.fill])
	w.active.fill = w.undoFill
}

// pieces appends to dst the aligned buffers that write the staged data from file position
// from (block-aligned, inside memory) to the staged end, one slice per chunk, the last block
// zero-padded. It returns dst and the end of the bytes the slices cover.
func (w *directWriter) pieces(dst [][]byte, from int64) ([][]byte, int64) {
	end := from
	add := func(c *chunk) {
		lo := max(from, c.start)
		if hi := c.start + alignUp(int64(c.fill)); hi > lo {
			dst = append(dst, c.buf[lo-c.start:hi-c.start])
			end = hi
		}
	}
	for _, c := range w.cache {
		add(c)
	}
	// The padding up to the block boundary must be zeros (a reused chunk holds old bytes).
	c := w.active
	clear(c.buf[c.fill:alignUp(int64(c.fill))])
	add(c)
	return dst, end
}

// allocateAhead fallocates (KEEP_SIZE) past end so that extending O_DIRECT writes do not
// allocate blocks one write at a time.
func (w *directWriter) allocateAhead(fio ring.FileIO, end int64) {
	if end <= w.allocatedEnd {
		return
	}
	want := alignUp(end) + directFallocateBytes
	if err := fio.Fallocate(w.fd(), unix.FALLOC_FL_KEEP_SIZE, w.allocatedEnd, want-w.allocatedEnd); err == nil {
		w.allocatedEnd = want
	} else {
		w.allocatedEnd = end // not supported or no space: the write will say which
	}
}

func (w *directWriter) fd() int { return int(w.file.Fd()) }

// write stages batches at pos (the end of what is on disk) and writes them with one aligned
// pwritev (synchronous mode). On error nothing changes in memory.
func (w *directWriter) write(fio ring.FileIO, batches [][]byte, pos int64) error {
	w.stage(batches, pos)
	iov, end := w.pieces(w.iovecs[:0], alignDown(pos))
	w.allocateAhead(fio, end)
	err := pwritevFull(fio, w.fd(), iov, alignDown(pos))
	clear(iov)
	w.iovecs = iov[:0]
	if err != nil {
		w.unstage()
		return err
	}
	w.written(w.active.end())
	return nil
}

// written records that the staged bytes below pos are on the device, and evicts from the
// cache the oldest chunks past DirectCacheChunks that are wholly written.
func (w *directWriter) written(pos int64) {
	w.writtenPos = pos
	over := 0
	for over < len(w.cache)-w.cacheMax && w.cache[over].end() <= pos {
		w.recycle(w.cache[over])
		over++
	}
	if over > 0 {
		clear(w.cache[:over])
		w.cache = w.cache[over:]
	}
}

// pending reports whether staged bytes are not yet known to be on the device.
func (w *directWriter) pending() bool { return w.writtenPos < w.active.end() }

// newChunk returns an empty chunk starting at start, reusing a free one when it can. Bytes
// past fill are not zeroed; write zeroes the padding it sends.
func (w *directWriter) newChunk(start int64) *chunk {
	if free := w.pool.free; len(free) > 0 {
		c := free[len(free)-1]
		free[len(free)-1] = nil
		w.pool.free = free[:len(free)-1]
		c.start, c.fill = start, 0
		return c
	}
	return &chunk{buf: alignedBuffer(w.chunkBytes), start: start, fixed: fixedNone}
}

// recycle keeps c for reuse, or drops it (shared with readers, or enough kept).
func (w *directWriter) recycle(c *chunk) {
	if !c.shared && len(w.pool.free) < directFreeChunksMax {
		w.pool.free = append(w.pool.free, c)
		return
	}
	w.release(c)
}

// directSupport caches the O_DIRECT probe per data directory.
var directSupport sync.Map // dir -> error (nil = supported)

var errNoDirectIO = errors.New("O_DIRECT not supported")

// probeDirect checks that dir's file system accepts an aligned O_DIRECT write (tmpfs does not).
func probeDirect(dir string) error {
	dir = filepath.Clean(dir)
	if v, ok := directSupport.Load(dir); ok {
		if v == nil {
			return nil
		}
		return v.(error)
	}
	err := probeDirectIO(dir)
	if err == nil {
		directSupport.Store(dir, nil)
	} else {
		directSupport.Store(dir, err)
	}
	return err
}

// probeDirectIO is the probe itself; tests replace it to simulate a file system without
// O_DIRECT (tmpfs gained O_DIRECT in Linux 6.6, so it no longer serves as one).
var probeDirectIO = probeDirectUncached

func probeDirectUncached(dir string) error {
	path := filepath.Join(dir, directProbeFileName)
	defer os.Remove(path)
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_TRUNC|unix.O_DIRECT|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("%w in %s: open: %w", errNoDirectIO, dir, err)
	}
	defer unix.Close(fd)
	buf := alignedBuffer(blockBytes)
	if _, err := unix.Pwrite(fd, buf, 0); err != nil {
		return fmt.Errorf("%w in %s: aligned write: %w", errNoDirectIO, dir, err)
	}
	return nil
}

// directProbeFileName is the scratch file of the O_DIRECT probe (removed after it).
const directProbeFileName = ".direct-probe"
