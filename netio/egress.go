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
	copyBuf []byte
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
	pending := iov // WriteTo consumes its receiver
	_, err := pending.WriteTo(c.nc)
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
	v := 0
	if on {
		v = 1
	}
	var serr error
	if err := c.raw.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_CORK, v)
	}); err != nil || serr != nil {
		return false
	}
	return true
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
	frc, err := fr.File.SyscallConn()
	if err != nil {
		return fmt.Errorf("sendfile %s: %w", fr.File.Name(), err)
	}
	var sendErr error
	ctrlErr := frc.Control(func(fileFD uintptr) {
		offset, remaining := fr.Offset, fr.Length
		werr := c.raw.Write(func(sockFD uintptr) bool {
			for remaining > 0 {
				n, err := unix.Sendfile(int(sockFD), int(fileFD), &offset, int(min(remaining, sendfileChunkBytesMax)))
				if n > 0 {
					remaining -= int64(n)
				}
				switch {
				case err == unix.EAGAIN:
					return false // park until the socket is writable
				case err == unix.EINTR:
					continue
				case err != nil:
					sendErr = err
					return true
				case n == 0:
					sendErr = ErrShortFile
					return true
				}
			}
			return true
		})
		if sendErr == nil {
			sendErr = werr
		}
	})
	if ctrlErr != nil {
		return fmt.Errorf("sendfile %s: %w", fr.File.Name(), ctrlErr)
	}
	if sendErr != nil {
		return fmt.Errorf("sendfile %s [%d,+%d): %w", fr.File.Name(), fr.Offset, fr.Length, sendErr)
	}
	c.stats.sendfileBytes.Add(fr.Length)
	return nil
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
