package controller

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync"
)

// The raft transport's guard. hashicorp/raft's NetworkTransport decodes each connection as
//
//	( rpc type: 1 byte | request: one msgpack value | InstallSnapshot only: Size raw bytes )*
//
// with go-msgpack, which allocates some values whole from their length prefix before a
// byte of them arrived: a time (Log.AppendedAt) or an ext value it skips reads its length
// with make([]byte, n), n up to 2^32-1. So a 20-byte request made a voter allocate 4 GiB,
// and a Go allocation that fails is a fatal error, not a panic: the whole broker went down
// (FuzzRaftTransport found it; TestRaftGuardHugeTime). The guard sits between the socket
// and the transport and hands the transport a value's length prefix only once every byte
// of the value has arrived, so what the decoder allocates from a length is what the peer
// really sent; it refuses a value longer than raftValueBytesMax, containers nested deeper
// than raftDepthMax or holding more than raftItemsMax items, and bytes that are not msgpack
// at all. It tracks the framing exactly
// as the transport does (the InstallSnapshot request's Size field says how many raw bytes
// follow it), and passes everything else through unchanged.
//
// The guard bounds memory per connection; raftConnsMax bounds the connections.

// Bounds of the raft listener.
const (
	// raftValueBytesMax bounds one msgpack string, binary or ext value: a raft log entry's
	// data is one controller command, which came in one ringlog frame (64 MiB at most, and
	// kilobytes in practice).
	raftValueBytesMax = 64 << 20
	// raftDepthMax bounds container nesting: raft's requests nest three deep
	// (request > Entries > Log).
	raftDepthMax = 8
	// raftItemsMax bounds one container's items: raft sends at most MaxAppendEntries (1,024
	// at most, ValidateConfig) entries a request, and a dozen fields a struct. go-msgpack
	// allocates a struct for each item of a slice of structs, ~100 bytes for a 1-byte empty
	// map, so the count bounds that amplification.
	raftItemsMax = 1024
	// raftConnsMax bounds the raft listener's open connections. Each peer voter keeps at
	// most transportPoolConns pooled connections plus one for heartbeats and one for
	// pipelined appends: 4 peers x 5 = 20 in a 5-voter quorum.
	raftConnsMax = 64
	// raftReadChunkBytes is what the guard reads from the socket at a time.
	raftReadChunkBytes = 64 << 10
)

// hashicorp/raft's rpc types (net_transport.go): part of its wire format.
const (
	raftRPCAppendEntries   = 0
	raftRPCInstallSnapshot = 2
	raftRPCTypeMax         = 4
)

var errRaftGuard = errors.New("raft transport guard")

// guardedListener hands the transport guarded connections, at most raftConnsMax at once
// (a connection past that is closed at accept).
type guardedListener struct {
	net.Listener
	mu   sync.Mutex
	open int // guarded by mu
}

func (l *guardedListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		l.mu.Lock()
		full := l.open >= raftConnsMax
		if !full {
			l.open++
		}
		l.mu.Unlock()
		if full {
			c.Close()
			continue
		}
		return &guardedConn{Conn: c, release: l.release}, nil
	}
}

func (l *guardedListener) release() {
	l.mu.Lock()
	l.open--
	l.mu.Unlock()
}

// guardedConn is one accepted raft connection: Read returns only bytes the scanner
// released. Read is called by the transport's one reader goroutine.
type guardedConn struct {
	net.Conn
	release func()
	once    sync.Once

	buf  []byte // bytes read from the socket: buf[off:scan.released] may be returned
	off  int    // bytes of buf already returned
	scan raftScanner
	err  error // the socket's or the scanner's, returned once the released bytes are gone
}

func (c *guardedConn) Close() error {
	c.once.Do(c.release)
	return c.Conn.Close()
}

func (c *guardedConn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	for c.off == c.scan.released {
		if c.err != nil {
			return 0, c.err
		}
		if len(c.buf) == cap(c.buf) {
			c.makeRoom()
		}
		n, err := c.Conn.Read(c.buf[len(c.buf):cap(c.buf)])
		c.buf = c.buf[:len(c.buf)+n]
		if serr := c.scan.advance(c.buf); serr != nil {
			c.err = serr
		} else if err != nil {
			c.err = err
		}
	}
	n := copy(p, c.buf[c.off:c.scan.released])
	if c.off += n; c.off == len(c.buf) {
		c.scan.shift(c.off)
		c.buf, c.off = c.buf[:0], 0
		if cap(c.buf) > raftReadChunkBytes {
			c.buf = nil // a large value went through: do not keep its buffer
		}
	}
	return n, nil
}

// makeRoom frees the returned bytes at the buffer's start, or else doubles the buffer (a
// value is buffered whole before its first byte is returned).
func (c *guardedConn) makeRoom() {
	if c.off > 0 {
		c.buf = c.buf[:copy(c.buf, c.buf[c.off:])]
		c.scan.shift(c.off)
		c.off = 0
		return
	}
	grown := make([]byte, len(c.buf), max(2*cap(c.buf), raftReadChunkBytes))
	copy(grown, c.buf)
	c.buf = grown
}

// raftScanner follows the transport's framing over a buffer that only grows at its end
// (and loses returned bytes at its start, see shift). The bytes before released are
// complete tokens the transport may read.
type raftScanner struct {
	released int // the buffer's bytes before it may be handed out
	pos      int // the buffer's bytes before it were scanned (pos >= released)

	phase    int   // scanType, scanValue or scanRaw
	rpcType  byte  // the current request's type
	rawLeft  int64 // scanRaw: snapshot bytes still to pass through
	stack    []raftContainer
	topKey   string // the last key read in the request's top-level map
	snapSize int64  // the InstallSnapshot request's Size field
}

const (
	scanType = iota
	scanValue
	scanRaw
)

type raftContainer struct {
	left  uint64 // items still to read (a map has two per entry)
	isMap bool
}

// shift tells the scanner n returned bytes left the buffer's start.
func (s *raftScanner) shift(n int) {
	s.released -= n
	s.pos -= n
}

// advance scans buf (the whole buffer; buf[:s.pos] was scanned before) as far as it can.
func (s *raftScanner) advance(buf []byte) error {
	for s.pos < len(buf) {
		switch s.phase {
		case scanType:
			s.rpcType = buf[s.pos]
			if s.rpcType > raftRPCTypeMax {
				return fmt.Errorf("%w: rpc type %d", errRaftGuard, s.rpcType)
			}
			s.pos++
			s.released = s.pos
			s.phase, s.stack, s.topKey, s.snapSize = scanValue, s.stack[:0], "", 0
		case scanRaw:
			n := min(s.rawLeft, int64(len(buf)-s.pos))
			s.pos += int(n)
			s.released = s.pos
			if s.rawLeft -= n; s.rawLeft == 0 {
				s.phase = scanType
			}
		case scanValue:
			size, err := s.value(buf[s.pos:])
			if err != nil || size == 0 {
				return err // size 0: the token is not complete yet
			}
			s.pos += size
			s.released = s.pos
		}
	}
	return nil
}

// value scans the token at the start of b: a scalar, a string, binary or ext value with
// all its bytes, or a container's header. It returns the token's size, 0 if b does not
// hold all of it yet.
func (s *raftScanner) value(b []byte) (int, error) {
	head, payload, items, isMap, err := msgpackToken(b)
	if err != nil || head == 0 {
		return 0, err
	}
	if payload > raftValueBytesMax {
		return 0, fmt.Errorf("%w: a %d-byte value, most %d", errRaftGuard, payload, raftValueBytesMax)
	}
	size := head + int(payload)
	if len(b) < size {
		return 0, nil
	}
	if len(s.stack) == 0 && s.rpcType == raftRPCInstallSnapshot && !isMap {
		// The raw bytes after it are as many as its Size field says: read from a map's
		// "Size" key here, so the request must be a map (go-msgpack would also take an
		// array, as raft never sends it).
		return 0, fmt.Errorf("%w: an InstallSnapshot request that is not a map", errRaftGuard)
	}
	s.noteTopLevel(b[:size])
	if items > raftItemsMax {
		return 0, fmt.Errorf("%w: a container of %d items, most %d", errRaftGuard, items, raftItemsMax)
	}
	if items > 0 {
		if len(s.stack) == raftDepthMax {
			return 0, fmt.Errorf("%w: containers nested deeper than %d", errRaftGuard, raftDepthMax)
		}
		if isMap {
			items *= 2
		}
		s.stack = append(s.stack, raftContainer{left: items, isMap: isMap})
		return size, nil
	}
	s.itemDone()
	return size, nil
}

// noteTopLevel remembers the keys of the request's top-level map and, for InstallSnapshot,
// the value of its Size key: the raw bytes that follow the request.
func (s *raftScanner) noteTopLevel(token []byte) {
	if len(s.stack) != 1 || !s.stack[0].isMap {
		return
	}
	if s.stack[0].left%2 == 0 { // a key
		s.topKey = ""
		if str, ok := msgpackString(token); ok && len(str) <= len("Size") {
			s.topKey = str
		}
		return
	}
	if s.topKey == "Size" && s.rpcType == raftRPCInstallSnapshot {
		s.snapSize, _ = msgpackInt(token)
	}
}

// itemDone ends one item of the innermost container, and every container it completes.
func (s *raftScanner) itemDone() {
	for len(s.stack) > 0 {
		top := &s.stack[len(s.stack)-1]
		if top.left--; top.left > 0 {
			return
		}
		s.stack = s.stack[:len(s.stack)-1]
	}
	// The request is complete.
	s.phase = scanType
	if s.rpcType == raftRPCInstallSnapshot && s.snapSize > 0 {
		s.phase, s.rawLeft = scanRaw, s.snapSize
	}
}

// msgpackToken decodes the header of the msgpack token at the start of b: the header's
// size (0: b is too short to tell), the bytes of payload that follow it (strings, binary,
// ext and fixed-size numbers), and a container's item count. The format is msgpack's
// (github.com/msgpack/msgpack/blob/master/spec.md).
func msgpackToken(b []byte) (head int, payload uint64, items uint64, isMap bool, err error) {
	if len(b) == 0 {
		return 0, 0, 0, false, nil
	}
	t := b[0]
	// length reads an n-byte big-endian length after the type byte.
	length := func(n int) (uint64, bool) {
		if len(b) < 1+n {
			return 0, false
		}
		switch n {
		case 1:
			return uint64(b[1]), true
		case 2:
			return uint64(binary.BigEndian.Uint16(b[1:])), true
		default:
			return uint64(binary.BigEndian.Uint32(b[1:])), true
		}
	}
	switch {
	case t <= 0x7f, t >= 0xe0, t == 0xc0, t == 0xc2, t == 0xc3: // fixint, nil, bool
		return 1, 0, 0, false, nil
	case t >= 0xa0 && t <= 0xbf: // fixstr
		return 1, uint64(t & 0x1f), 0, false, nil
	case t >= 0x90 && t <= 0x9f: // fixarray
		return 1, 0, uint64(t & 0x0f), false, nil
	case t >= 0x80 && t <= 0x8f: // fixmap
		return 1, 0, uint64(t & 0x0f), true, nil
	}
	switch t {
	case 0xcc, 0xd0: // uint8, int8
		return 1, 1, 0, false, nil
	case 0xcd, 0xd1:
		return 1, 2, 0, false, nil
	case 0xce, 0xd2, 0xca: // 32-bit ints, float32
		return 1, 4, 0, false, nil
	case 0xcf, 0xd3, 0xcb:
		return 1, 8, 0, false, nil
	case 0xd4, 0xd5, 0xd6, 0xd7, 0xd8: // fixext 1, 2, 4, 8, 16 (type byte counted in the header)
		return 2, 1 << (t - 0xd4), 0, false, nil
	case 0xc4, 0xd9, 0xc5, 0xda, 0xc6, 0xdb: // bin/str 8, 16, 32
		n := 1
		if t == 0xc5 || t == 0xda {
			n = 2
		} else if t == 0xc6 || t == 0xdb {
			n = 4
		}
		l, ok := length(n)
		if !ok {
			return 0, 0, 0, false, nil
		}
		return 1 + n, l, 0, false, nil
	case 0xc7, 0xc8, 0xc9: // ext 8, 16, 32: length, then a type byte
		n := 1 << (t - 0xc7)
		l, ok := length(n)
		if !ok || len(b) < 2+n {
			return 0, 0, 0, false, nil
		}
		return 2 + n, l, 0, false, nil
	case 0xdc, 0xdd, 0xde, 0xdf: // array 16, 32, map 16, 32
		n := 2 << ((t - 0xdc) % 2)
		l, ok := length(n)
		if !ok {
			return 0, 0, 0, false, nil
		}
		return 1 + n, 0, l, t >= 0xde, nil
	}
	return 0, 0, 0, false, fmt.Errorf("%w: byte 0x%02x starts no msgpack value", errRaftGuard, t)
}

// msgpackString returns the text of a complete string or binary token of at most 31 bytes
// (go-msgpack reads a struct's field name from either).
func msgpackString(token []byte) (string, bool) {
	if len(token) > 32 {
		return "", false
	}
	head, payload, _, _, err := msgpackToken(token)
	t := token[0]
	isStr := t >= 0xa0 && t <= 0xbf || t == 0xd9 || t == 0xda || t == 0xdb || t == 0xc4 || t == 0xc5 || t == 0xc6
	if err != nil || !isStr || head+int(payload) != len(token) {
		return "", false
	}
	return string(token[head:]), true
}

// msgpackInt returns the value of a complete integer token.
func msgpackInt(token []byte) (int64, bool) {
	t := token[0]
	switch {
	case t <= 0x7f:
		return int64(t), true
	case t >= 0xe0:
		return int64(int8(t)), true
	}
	p := token[1:]
	switch t {
	case 0xcc:
		return int64(p[0]), true
	case 0xcd:
		return int64(binary.BigEndian.Uint16(p)), true
	case 0xce:
		return int64(binary.BigEndian.Uint32(p)), true
	case 0xcf:
		return int64(binary.BigEndian.Uint64(p)), true // above MaxInt64: negative, as raft reads it
	case 0xd0:
		return int64(int8(p[0])), true
	case 0xd1:
		return int64(int16(binary.BigEndian.Uint16(p))), true
	case 0xd2:
		return int64(int32(binary.BigEndian.Uint32(p))), true
	case 0xd3:
		return int64(binary.BigEndian.Uint64(p)), true
	}
	return 0, false
}
