package cluster

import (
	"errors"
	"io"
	"log/slog"
	"testing"

	"github.com/ringlog/ringlog/replication/controller"
)

// FuzzDecodeView: a peer's cluster view never panics the decoder, and what decodes has
// maps a broker may range over and entries keyed by their own id and name.
func FuzzDecodeView(f *testing.F) {
	f.Add([]byte(`{"NodeID":1,"ControllerLeader":2,"Metadata":{"Version":5,"Brokers":{"1":{"ID":1,"Address":"a:1"}},"Topics":{"t":{"Name":"t","ID":"00112233445566778899aabbccddeeff","Partitions":[{"Index":0,"Replicas":[1],"Leader":1,"ISR":[1]}]}}}}`))
	f.Add([]byte(`{"Metadata":{}}`))
	f.Add([]byte(`{"Metadata":null}`))
	f.Add([]byte(`{"Metadata":{"Brokers":{"1":null}}}`))
	f.Add([]byte(`{"Metadata":{"Topics":{"t":{"Name":"u"}}}}`))
	f.Add([]byte(`{"Metadata":{"Topics":{"t":{"Name":"t","Partitions":[{"Index":3}]}}}}`))
	f.Add([]byte(`[`))
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := DecodeView(data)
		if err != nil {
			if !errors.Is(err, ErrBadView) {
				t.Fatalf("error not ErrBadView: %v", err)
			}
			return
		}
		if v.Metadata.Brokers == nil || v.Metadata.Topics == nil {
			t.Fatal("nil maps")
		}
		for id, b := range v.Metadata.Brokers {
			if b == nil || b.ID != id {
				t.Fatalf("broker %d: %+v", id, b)
			}
		}
		for name, tp := range v.Metadata.Topics {
			if tp == nil || tp.Name != name {
				t.Fatalf("topic %q: %+v", name, tp)
			}
		}
	})
}

// TestRemoteQuorumNeverMovesBack: a broker outside the quorum keeps the newest metadata it
// was answered; an answer from a lagging broker does not take it back, but a leader it
// names is learned; Changed fires on both.
func TestRemoteQuorumNeverMovesBack(t *testing.T) {
	q := &remoteQuorum{self: 4, seeds: []string{"seed:1"}, log: slog.New(slog.NewTextHandler(io.Discard, nil)), changed: make(chan struct{})}
	q.meta.Store(&controller.Metadata{Brokers: map[int32]*controller.Broker{}, Topics: map[string]*controller.Topic{}})
	if q.isSynced() || q.next(0) != "seed:1" {
		t.Fatalf("before any answer: synced %v, next %q", q.isSynced(), q.next(0))
	}
	view := func(version uint64, leader int32, topics ...string) *View {
		md := &controller.Metadata{Version: version, Topics: map[string]*controller.Topic{},
			Brokers: map[int32]*controller.Broker{1: {ID: 1, Address: "b1:1"}, 2: {ID: 2, Address: "b2:1"}}}
		for _, n := range topics {
			md.Topics[n] = &controller.Topic{Name: n}
		}
		return &View{ControllerLeader: leader, Metadata: md}
	}
	ch := q.Changed(0)
	q.install(view(10, 0, "a", "b"))
	select {
	case <-ch:
	default:
		t.Fatal("Changed did not fire for a newer version")
	}
	if got := q.Metadata(); got.Version != 10 || len(got.Topics) != 2 || !q.isSynced() {
		t.Fatalf("after version 10: %+v", got)
	}
	ch = q.Changed(10)
	q.install(view(7, 2, "a"))
	select {
	case <-ch:
	default:
		t.Fatal("Changed did not fire for a new leader")
	}
	if got := q.Metadata(); got.Version != 10 || len(got.Topics) != 2 {
		t.Fatalf("an older answer replaced the metadata: %+v", got)
	}
	if id, _ := q.Leader(); id != 2 || q.next(0) != "b2:1" {
		t.Fatalf("leader %d, next %q; want 2 at b2:1", id, q.next(0))
	}
	q.forgetLeader()
	seen := map[string]bool{}
	for turn := range 3 {
		seen[q.next(turn)] = true
	}
	if !seen["seed:1"] || !seen["b1:1"] || !seen["b2:1"] {
		t.Fatalf("without a leader the watch cycles over %v", seen)
	}
	if _, err := q.Submit(&controller.Command{}, 0); !errors.Is(err, controller.ErrNotController) {
		t.Fatalf("Submit on a broker outside the quorum: %v", err)
	}
}
