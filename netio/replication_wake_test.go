package netio_test

import (
	"context"
	"io"
	"net"
	"testing"
	"time"

	"github.com/ringlog/ringlog/engine/shard"
	"github.com/ringlog/ringlog/netio"
	"github.com/ringlog/ringlog/netio/wire"
	"github.com/ringlog/ringlog/replication/cluster"
)

// wakePeer is the leader's end of one peer connection, on loopback, driven by the test.
type wakePeer struct {
	t  *testing.T
	nc net.Conn
}

// next reads one request frame and decodes it.
func (p wakePeer) next() (wire.RequestHeader, wire.Message) {
	p.t.Helper()
	var hb [wire.RequestHeaderBytes]byte
	if _, err := io.ReadFull(p.nc, hb[:]); err != nil {
		p.t.Error(err)
		return wire.RequestHeader{}, nil
	}
	h, err := wire.ParseRequestHeader(hb[:], 1<<20)
	if err != nil {
		p.t.Error(err)
		return h, nil
	}
	payload := make([]byte, int(h.Length)-(wire.RequestHeaderBytes-wire.FrameLengthBytes))
	if _, err := io.ReadFull(p.nc, payload); err != nil {
		p.t.Error(err)
		return h, nil
	}
	m := wire.NewRequest(h.API)
	wire.SetWireVersion(m, h.Version)
	if err := m.ReadFrom(payload); err != nil {
		p.t.Error(err)
	}
	return h, m
}

func (p wakePeer) answer(b []byte) {
	if _, err := p.nc.Write(b); err != nil {
		p.t.Error(err)
	}
}

// TestPeerConnWakeFetch: a follower's connection ends its parked ReplicaFetch by sending
// a ReplicaFetchWake behind it (cluster.FetchWaker) and reads both answers, fetch first,
// so the connection stays in step: the next round trip on it works. A wake asked between
// fetches makes the next fetch not park (MaxWaitMs 0). A leader that refuses the wake (a
// release without the API answers UNKNOWN_API) is not asked again: WakeFetch reports
// false, and the lane cancels its round instead.
func TestPeerConnWakeFetch(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a hang guard
	defer cancel()
	accepted := make(chan wakePeer, 1)
	go func() {
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		accepted <- wakePeer{t, nc}
	}()
	pc, err := netio.DialPeer(ctx, ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	w, ok := pc.(cluster.FetchWaker)
	if !ok {
		t.Fatal("the peer connection cannot wake its fetch")
	}
	leader := <-accepted
	defer leader.nc.Close()
	req := &cluster.FetchRequest{ReplicaID: 3, MaxWait: time.Hour, BytesMax: 1 << 20,
		Partitions: []cluster.FetchPartition{{TopicPartition: shard.TopicPartition{Topic: "t", Partition: 0}, Offset: 5}}}
	answer := &wire.ReplicaFetchResponse{Topics: []wire.ReplicaFetchResponseTopic{{Topic: "t",
		Partitions: []wire.ReplicaFetchResponsePartition{{Partition: 0, HighWatermark: 5, LogStartOffset: -1, LogEndOffset: 5}}}}}
	type result struct {
		answers []cluster.FetchAnswer
		err     error
	}
	fetch := func() chan result {
		done := make(chan result, 1)
		go func() {
			a, err := pc.ReplicaFetch(ctx, req)
			done <- result{a, err}
		}()
		return done
	}
	// leaderRound reads the fetch, asks for a wake once it holds it, then answers the
	// fetch and the wake (with refuse, the error a release without the API sends).
	leaderRound := func(refuse bool) {
		h, m := leader.next()
		if f, ok := m.(*wire.ReplicaFetchRequest); !ok || f.MaxWaitMs == 0 {
			t.Fatalf("got %T %+v, want a parking ReplicaFetch", m, m)
		}
		if !w.WakeFetch() {
			t.Fatal("WakeFetch refused while a fetch is outstanding")
		}
		wh, wm := leader.next()
		if wr, ok := wm.(*wire.ReplicaFetchWakeRequest); !ok || wr.ReplicaID != 3 || wh.CorrelationID != h.CorrelationID+1 {
			t.Fatalf("got %T %+v (header %+v), want a ReplicaFetchWake from replica 3 behind the fetch %d", wm, wm, wh, h.CorrelationID)
		}
		leader.answer(wire.AppendResponse(nil, h, answer))
		if refuse {
			leader.answer(wire.AppendErrorResponse(nil, wh, wire.ErrUnknownAPI, "api key 31 is not known to this broker"))
		} else {
			leader.answer(wire.AppendResponse(nil, wh, &wire.ReplicaFetchWakeResponse{Woken: true}))
		}
	}

	done := fetch()
	leaderRound(false)
	if r := <-done; r.err != nil || len(r.answers) != 1 || r.answers[0].Err != nil || r.answers[0].LogEndOffset != 5 {
		t.Fatalf("woken fetch: %+v %v", r.answers, r.err)
	}

	// A wake between fetches: the next fetch goes out without a long-poll.
	if !w.WakeFetch() {
		t.Fatal("WakeFetch refused between fetches")
	}
	done = fetch()
	h, m := leader.next()
	if f, ok := m.(*wire.ReplicaFetchRequest); !ok || f.MaxWaitMs != 0 {
		t.Fatalf("got %T %+v, want a ReplicaFetch that does not park", m, m)
	}
	leader.answer(wire.AppendResponse(nil, h, answer))
	if r := <-done; r.err != nil {
		t.Fatal(r.err)
	}

	// A leader without the API: the round still ends in step, and the next kick cancels.
	done = fetch()
	leaderRound(true)
	if r := <-done; r.err != nil || len(r.answers) != 1 || r.answers[0].Err != nil {
		t.Fatalf("fetch beside a refused wake: %+v %v", r.answers, r.err)
	}
	if w.WakeFetch() {
		t.Fatal("WakeFetch asks a leader that refused the wake again")
	}
}
