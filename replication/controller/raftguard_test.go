package controller

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/hashicorp/raft"
)

// raftServe reads a connection as hashicorp/raft's NetworkTransport.handleConn and
// handleCommand do (net_transport.go, v1.7.3): a 256 KiB bufio.Reader, one msgpack decoder
// for the connection, an rpc type byte then the request, and for InstallSnapshot the
// snapshot's Size bytes, which the FSM's Restore reads. It returns the most one request
// allocated (the transport holds one decoded request a connection at a time).
func raftServe(r io.Reader) (allocatedMax uint64, err error) {
	start := totalAlloc()
	br := bufio.NewReaderSize(r, 256<<10)
	dec := codec.NewDecoder(br, &codec.MsgpackHandle{})
	allocatedMax = totalAlloc() - start
	for {
		before := totalAlloc()
		err := raftServeOne(br, dec)
		allocatedMax = max(allocatedMax, totalAlloc()-before)
		if err != nil {
			return allocatedMax, err
		}
	}
}

func raftServeOne(br *bufio.Reader, dec *codec.Decoder) error {
	rpcType, err := br.ReadByte()
	if err != nil {
		return err
	}
	switch rpcType {
	case raftRPCAppendEntries:
		var req raft.AppendEntriesRequest
		err = dec.Decode(&req)
	case 1:
		var req raft.RequestVoteRequest
		err = dec.Decode(&req)
	case raftRPCInstallSnapshot:
		var req raft.InstallSnapshotRequest
		if err = dec.Decode(&req); err == nil {
			_, err = io.Copy(io.Discard, io.LimitReader(br, req.Size))
		}
	case 3:
		var req raft.TimeoutNowRequest
		err = dec.Decode(&req)
	case 4:
		var req raft.RequestPreVoteRequest
		err = dec.Decode(&req)
	default:
		return errors.New("unknown rpc type")
	}
	return err
}

// bytesConn is a net.Conn that reads b, for the guard without a socket.
type bytesConn struct {
	net.Conn
	r *bytes.Reader
}

func (c bytesConn) Read(p []byte) (int, error) { return c.r.Read(p) }
func (c bytesConn) Close() error               { return nil }

func guarded(b []byte) *guardedConn {
	return &guardedConn{Conn: bytesConn{r: bytes.NewReader(b)}, release: func() {}}
}

// raftRequest is an rpc type byte and req as raft's transport encodes it.
func raftRequest(t testing.TB, rpcType byte, req any) []byte {
	var buf bytes.Buffer
	buf.WriteByte(rpcType)
	if err := codec.NewEncoder(&buf, &codec.MsgpackHandle{BasicHandle: codec.BasicHandle{TimeNotBuiltin: true}}).Encode(req); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// hugeTimeRequest is an AppendEntries request of 30 bytes whose one entry's AppendedAt
// says it is n bytes long (binary 32), and then ends.
func hugeTimeRequest(n uint32) []byte {
	b := []byte{raftRPCAppendEntries, 0x81, 0xa7}
	b = append(b, "Entries"...)
	b = append(b, 0x91, 0x81, 0xaa)
	b = append(b, "AppendedAt"...)
	b = append(b, 0xc6)
	return binary.BigEndian.AppendUint32(b, n)
}

func totalAlloc() uint64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.TotalAlloc
}

// raftAllocBytesMax bounds what decoding one request may allocate beyond raftAllocPerByte
// times the connection's bytes: the guard's first 64 KiB chunk, a struct for each item of a
// container (~120 bytes, raftItemsMax items), and go-msgpack's first allocation for a
// container (256 KiB at most), one per nesting level.
const (
	raftAllocBytesMax = 64<<10 + raftItemsMax*128 + raftDepthMax*(256<<10) + 1<<20
	raftAllocPerByte  = 8
)

// FuzzRaftTransport: whatever reaches a voter's raft port, the guard and the transport's
// decoder behind it never panic and allocate in proportion to the bytes that arrived.
func FuzzRaftTransport(f *testing.F) {
	entry := &raft.Log{Index: 3, Term: 2, Type: raft.LogCommand, Data: []byte(`{"Type":4}`), AppendedAt: time.Unix(1700000000, 5)}
	appendReq := raftRequest(f, raftRPCAppendEntries, &raft.AppendEntriesRequest{RPCHeader: raft.RPCHeader{ID: []byte("1"), Addr: []byte("127.0.0.1:1")}, Term: 2, Entries: []*raft.Log{entry, entry}, LeaderCommitIndex: 3})
	snap := raftRequest(f, raftRPCInstallSnapshot, &raft.InstallSnapshotRequest{SnapshotVersion: 1, Term: 2, LastLogIndex: 9, Size: 5})
	f.Add(appendReq)
	f.Add(append(append(append([]byte(nil), snap...), "hello"...), appendReq...))
	f.Add(raftRequest(f, 1, &raft.RequestVoteRequest{Term: 3, LastLogIndex: 4}))
	f.Add(raftRequest(f, 3, &raft.TimeoutNowRequest{}))
	f.Add(raftRequest(f, 4, &raft.RequestPreVoteRequest{Term: 3}))
	f.Add(hugeTimeRequest(1 << 30))
	f.Add([]byte{raftRPCAppendEntries, 0x81, 0xa1, 'X', 0xc9, 0x40, 0, 0, 0, 0xff}) // an ext32 value raft skips
	f.Add([]byte{raftRPCAppendEntries, 0xdd, 0x7f, 0xff, 0xff, 0xff})
	f.Add([]byte{9})
	f.Fuzz(func(t *testing.T, b []byte) {
		if most, _ := raftServe(guarded(b)); most > raftAllocBytesMax+raftAllocPerByte*uint64(len(b)) {
			t.Fatalf("%d bytes in, %d allocated for one request", len(b), most)
		}
	})
}

// TestRaftGuardHugeTime: a 30-byte AppendEntries whose entry's time says 1 GiB made the
// voter allocate 1 GiB (4 GiB with a length of 2^32-1: a fatal out-of-memory under an
// address-space limit). Through the guard it allocates nothing until the bytes arrive.
func TestRaftGuardHugeTime(t *testing.T) {
	attack := hugeTimeRequest(1 << 30)
	most, err := raftServe(guarded(attack))
	if most > raftAllocBytesMax {
		t.Fatalf("a %d-byte request allocated %d MiB", len(attack), most>>20)
	}
	if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Logf("decode ended with %v", err)
	}
	// Over a socket too, against the voter's real transport: the request costs nothing,
	// and the transport still answers a real peer.
	trans := startGuardedTransport(t)
	c, err := net.Dial("tcp", string(trans.LocalAddr()))
	if err != nil {
		t.Fatal(err)
	}
	before := totalAlloc()
	if _, err := c.Write(attack); err != nil {
		t.Fatal(err)
	}
	peer := dialPeer(t)
	var resp raft.RequestVoteResponse
	if err := peer.RequestVote("1", trans.LocalAddr(), &raft.RequestVoteRequest{Term: 7}, &resp); err != nil || resp.Term != 7 {
		t.Fatalf("request vote after the attack: %+v, %v", resp, err)
	}
	if grown := totalAlloc() - before; grown > 32<<20 {
		t.Fatalf("the attack and one vote allocated %d MiB", grown>>20)
	}
	c.Close()
}

// TestRaftGuardPassesRaft: raft's own traffic goes through the guard unchanged, an
// InstallSnapshot's raw bytes included, with requests after it on the same connection.
func TestRaftGuardPassesRaft(t *testing.T) {
	trans := startGuardedTransport(t)
	peer := dialPeer(t)
	snapshot := bytes.Repeat([]byte{0xc1, 0xdd, 0xff}, 200<<10) // not msgpack: must pass raw
	var sresp raft.InstallSnapshotResponse
	if err := peer.InstallSnapshot("1", trans.LocalAddr(), &raft.InstallSnapshotRequest{SnapshotVersion: 1, Term: 7, Size: int64(len(snapshot))}, &sresp, bytes.NewReader(snapshot)); err != nil {
		t.Fatalf("install snapshot: %v", err)
	}
	big := bytes.Repeat([]byte("x"), 1<<20) // 16 of the guard's first chunk
	for i := range 3 {
		var resp raft.AppendEntriesResponse
		req := &raft.AppendEntriesRequest{Term: 7, Entries: []*raft.Log{{Index: uint64(i + 1), Data: big, AppendedAt: time.Now()}}}
		if err := peer.AppendEntries("1", trans.LocalAddr(), req, &resp); err != nil || !resp.Success {
			t.Fatalf("append entries %d: %+v, %v", i, resp, err)
		}
	}
}

// startGuardedTransport starts a voter's transport on 127.0.0.1 with a consumer that
// answers every request: votes and appends succeed, a snapshot must read back whole.
func startGuardedTransport(t *testing.T) *raft.NetworkTransport {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().(*net.TCPAddr)
	ln.Close()
	trans, err := newTransport(addr.String(), addr, nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { trans.Close() })
	go func() {
		for rpc := range trans.Consumer() {
			switch req := rpc.Command.(type) {
			case *raft.RequestVoteRequest:
				rpc.Respond(&raft.RequestVoteResponse{Term: req.Term, Granted: true}, nil)
			case *raft.AppendEntriesRequest:
				rpc.Respond(&raft.AppendEntriesResponse{Term: req.Term, Success: true}, nil)
			case *raft.InstallSnapshotRequest:
				n, err := io.Copy(io.Discard, rpc.Reader)
				if err == nil && n != req.Size {
					err = errors.New("snapshot cut short")
				}
				rpc.Respond(&raft.InstallSnapshotResponse{Term: req.Term, Success: err == nil}, err)
			default:
				rpc.Respond(nil, errors.New("unexpected"))
			}
		}
	}()
	return trans
}

// dialPeer is a peer voter's transport, which only dials.
func dialPeer(t *testing.T) *raft.NetworkTransport {
	t.Helper()
	peer, err := raft.NewTCPTransport("127.0.0.1:0", nil, 2, 30*time.Second, io.Discard) // -race on a loaded machine is slow
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { peer.Close() })
	return peer
}

// TestRaftGuardConnections: the raft listener keeps at most raftConnsMax connections.
func TestRaftGuardConnections(t *testing.T) {
	trans := startGuardedTransport(t)
	var open []net.Conn
	for range raftConnsMax + 8 {
		c, err := net.Dial("tcp", string(trans.LocalAddr()))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		open = append(open, c)
	}
	closed := 0
	for _, c := range open {
		c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		var b [1]byte
		_, err := c.Read(b[:])
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			closed++
		}
	}
	if closed != 8 {
		t.Fatalf("%d of %d connections closed at accept, want 8", closed, len(open))
	}
}
