package netio

import (
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"

	"github.com/ringlog/ringlog/netio/wire"
	"golang.org/x/sys/unix"
)

// SpliceWriter writes response frames whose records are file ranges (wire.Splice) to a
// connection driven by Go's net package: memory pieces gathered into writev, file ranges by
// sendfile(2) from the page cache (or preads and writes with EgressCopy), the socket corked
// around them. The ringlog protocol's net driver and the Kafka listener (netio/kafka) both
// send fetch responses through it, counted in the Server's Stats. One goroutine owns it.
type SpliceWriter struct {
	nc      net.Conn
	raw     syscall.RawConn // nc's raw fd, for sendfile and TCP_CORK; nil if not a syscall.Conn
	egress  Egress
	stats   *serverStats
	iov     net.Buffers
	pending net.Buffers // flush's WriteTo consumes it; a field so that it does not escape
	copyBuf []byte

	// The raw-fd callbacks, bound once on first use (a closure per call allocated four
	// times per fetch), and the state they work on.
	corkFn     func(fd uintptr)
	sendfileFn func(fd uintptr) bool
	corkValue  int
	corkErr    error
	sf         sendfileState
}

// sendfileState is one sendFile call's progress, kept in the writer for its bound callback.
type sendfileState struct {
	fileFD            int
	offset, remaining int64
	err               error
}

// NewSpliceWriter returns a writer to nc with s's egress setting and counters.
func NewSpliceWriter(nc net.Conn, s *Server) SpliceWriter {
	w := SpliceWriter{nc: nc, egress: s.cfg.Egress, stats: &s.stats}
	if sc, ok := nc.(syscall.Conn); ok {
		if raw, err := sc.SyscallConn(); err == nil {
			w.raw = raw
		}
	}
	return w
}

// Emit writes buf with the spliced ranges in place: memory pieces gathered into one
// writev, each file range by sendfile (or a copy, per Config.Egress). The socket is corked
// around frames with file ranges so that headers and file bytes share packets.
func (c *SpliceWriter) Emit(buf []byte, splices []wire.Splice) error {
	corked := false
	for _, s := range splices {
		if s.Range.File != nil {
			corked = c.setCork(true)
			break
		}
	}
	iov := c.iov[:0]
	prev := 0
	var err error
	for _, s := range splices {
		if s.At > prev {
			iov = append(iov, buf[prev:s.At])
			prev = s.At
		}
		if s.Range.File == nil {
			if len(s.Data) > 0 {
				iov = append(iov, s.Data)
			}
			continue
		}
		if iov, err = c.flush(iov); err != nil {
			return err
		}
		if err = c.sendFile(s.Range); err != nil {
			return err
		}
	}
	if prev < len(buf) {
		iov = append(iov, buf[prev:])
	}
	iov, err = c.flush(iov)
	c.iov = iov
	if corked {
		c.setCork(false)
	}
	return err
}

func (c *SpliceWriter) flush(iov net.Buffers) (net.Buffers, error) {
	if len(iov) == 0 {
		return iov, nil
	}
	c.pending = iov // WriteTo consumes its receiver
	_, err := c.pending.WriteTo(c.nc)
	c.pending = nil
	clear(iov) // drop references to response memory
	if err != nil {
		return iov[:0], fmt.Errorf("writev: %w", err)
	}
	return iov[:0], nil
}

func (c *SpliceWriter) setCork(on bool) bool {
	if c.raw == nil {
		return false
	}
	if c.corkFn == nil {
		c.corkFn = c.cork
	}
	c.corkValue, c.corkErr = 0, nil
	if on {
		c.corkValue = 1
	}
	if err := c.raw.Control(c.corkFn); err != nil || c.corkErr != nil {
		return false
	}
	return true
}

func (c *SpliceWriter) cork(fd uintptr) {
	c.corkErr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_CORK, c.corkValue)
}

// sendfileChunkBytesMax caps one sendfile call so that a huge range does not monopolise
// the socket's writer between deadline checks.
const sendfileChunkBytesMax = 4 << 20

// ErrShortFile means a file range ended before its length: the segment was truncated
// under the response. The connection is closed because the frame length is already sent.
var ErrShortFile = errors.New("netio: file range shorter than announced")

func (c *SpliceWriter) sendFile(fr wire.FileRange) error {
	if c.egress == EgressCopy || c.raw == nil {
		return c.copyFile(fr)
	}
	if c.sendfileFn == nil {
		c.sendfileFn = c.sendfileReady
	}
	// The file's descriptor without File.SyscallConn (a new object per call): the fetch
	// holds a reference on the segment file until its response is written (Response.Done),
	// so the descriptor cannot be closed and reused under us.
	c.sf = sendfileState{fileFD: int(fr.File.Fd()), offset: fr.Offset, remaining: fr.Length}
	werr := c.raw.Write(c.sendfileFn)
	sendErr := c.sf.err
	if sendErr == nil {
		sendErr = werr
	}
	if sendErr != nil {
		return fmt.Errorf("sendfile %s [%d,+%d): %w", fr.File.Name(), fr.Offset, fr.Length, sendErr)
	}
	c.stats.sendfileBytes.Add(fr.Length)
	return nil
}

// sendfileReady is the socket's raw Write callback: it sends c.sf's range until done,
// failed, or the socket would block (false: park until it is writable).
func (c *SpliceWriter) sendfileReady(sockFD uintptr) bool {
	sf := &c.sf
	for sf.remaining > 0 {
		n, err := unix.Sendfile(int(sockFD), sf.fileFD, &sf.offset, int(min(sf.remaining, sendfileChunkBytesMax)))
		if n > 0 {
			sf.remaining -= int64(n)
		}
		switch {
		case err == unix.EAGAIN:
			return false
		case err == unix.EINTR:
			continue
		case err != nil:
			sf.err = err
			return true
		case n == 0:
			sf.err = ErrShortFile
			return true
		}
	}
	return true
}

// copyBufferBytes is the EgressCopy staging buffer per connection.
const copyBufferBytes = 256 << 10

func (c *SpliceWriter) copyFile(fr wire.FileRange) error {
	if c.copyBuf == nil {
		c.copyBuf = make([]byte, copyBufferBytes)
	}
	offset, remaining := fr.Offset, fr.Length
	for remaining > 0 {
		chunk := c.copyBuf[:min(remaining, int64(len(c.copyBuf)))]
		n, err := fr.File.ReadAt(chunk, offset)
		if n > 0 {
			if _, werr := c.nc.Write(chunk[:n]); werr != nil {
				return fmt.Errorf("write copied file bytes: %w", werr)
			}
			offset += int64(n)
			remaining -= int64(n)
			c.stats.copiedFileBytes.Add(int64(n))
		}
		if err != nil && remaining > 0 {
			if errors.Is(err, io.EOF) {
				err = ErrShortFile
			}
			return fmt.Errorf("pread %s [%d,+%d): %w", fr.File.Name(), offset, remaining, err)
		}
	}
	return nil
}

// FrameBuffer returns a request frame buffer of n bytes from the pools the ringlog protocol
// drivers use (power-of-two size classes; contents undefined). Give it back with
// PutFrameBuffer once nothing refers to it.
func FrameBuffer(n int) *[]byte { return getFrameBuffer(n) }

// PutFrameBuffer returns a buffer FrameBuffer handed out.
func PutFrameBuffer(b *[]byte) { putFrameBuffer(b) }
