package shard

import (
	"fmt"
	"testing"

	"github.com/ringlog/ringlog/engine"
	"github.com/ringlog/ringlog/ring"
)

// TestDirectAppendsInFlight: produces to direct-mode partitions keep many writes in
// flight on the shard's ring and are answered in offset order once written, acks=1 and
// acks=all alike; a reconfiguration (which reopens the log) and a delete with writes in
// flight answer every produce; everything answered is there after a restart. Both with
// plain writes (the default) and from chunks registered as fixed buffers.
func TestDirectAppendsInFlight(t *testing.T) {
	for _, backend := range backends {
		for _, registered := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/registered=%v", backend, registered), func(t *testing.T) {
				testDirectAppendsInFlight(t, backend, registered)
			})
		}
	}
}

func testDirectAppendsInFlight(t *testing.T, backend string, registered bool) {
	dir := t.TempDir()
	b := openBroker(t, dir, backend, 2)
	b.cfg.hooks = &testHooks{unregisteredDirectWrites: !registered}
	direct := map[string]string{engine.ConfigStorageMode: string(engine.StorageDirect)}
	for _, topic := range []string{"d", "gone"} {
		if err := b.CreateTopic(topic, 4, direct); err != nil {
			t.Fatal(err)
		}
	}
	_, states, err := b.DescribeTopic("d")
	if err != nil {
		t.Fatal(err)
	}
	if states[0].Storage != string(engine.StorageDirect) {
		t.Skipf("direct mode unavailable here (%s)", states[0].Storage)
	}
	const perPartition = 200
	type answer struct {
		p   int32
		seq int
		r   ProduceResult
	}
	answers := make(chan answer, 8*perPartition+64)
	batches := map[int32][][]byte{}
	for p := int32(0); p < 4; p++ {
		for i := 0; i < perPartition; i++ {
			batches[p] = append(batches[p], buildBatch(t, fmt.Sprintf("p%d-%d", p, i), 1+i%7))
		}
	}
	for i := 0; i < perPartition; i++ {
		for p := int32(0); p < 4; p++ {
			acks := AcksLeader
			if i%5 == 0 {
				acks = AcksAll
			}
			p, i := p, i
			b.Produce(TopicPartition{"d", p}, batches[p][i:i+1], acks, func(r ProduceResult) { answers <- answer{p, i, r} })
		}
		// a batch of its own: the log rewrites its base offset in place
		b.Produce(TopicPartition{"gone", int32(i % 4)}, [][]byte{buildBatch(t, "gone", 50)}, AcksLeader, func(ProduceResult) {})
		if i == perPartition/2 {
			if err := b.AlterTopicConfig("d", map[string]string{"flush.messages": "1000"}, nil); err != nil {
				t.Fatal(err)
			}
			if err := b.DeleteTopic("gone"); err != nil {
				t.Fatal(err)
			}
		}
	}
	// acks=1 produces are answered when written, acks=all ones after a sync: each
	// kind in offset order.
	type key struct {
		p   int32
		all bool
	}
	next, lastSeq := map[key]int64{}, map[key]int{}
	for n := 0; n < 4*perPartition; n++ {
		a := <-answers
		if a.r.Err != nil {
			t.Fatalf("produce p%d #%d: %v", a.p, a.seq, a.r.Err)
		}
		k := key{a.p, a.seq%5 == 0}
		if last, ok := lastSeq[k]; ok && (a.seq <= last || a.r.BaseOffset < next[k]) {
			t.Fatalf("p%d: answer #%d at offset %d after #%d (offset %d): out of order", a.p, a.seq, a.r.BaseOffset, last, next[k])
		}
		lastSeq[k], next[k] = a.seq, a.r.BaseOffset+1
	}
	var started, fixed uint64
	for i := 0; i < 2; i++ {
		if err := b.Exec(i, func(r *ring.Reactor) error {
			st := r.Stats()
			started, fixed = started+st.WritesStarted, fixed+st.WritesFixed
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	if started == 0 {
		t.Fatal("no write went through the ring asynchronously")
	}
	t.Logf("%d asynchronous writes, %d of them from registered buffers", started, fixed)
	if !registered && fixed > 0 {
		t.Fatalf("%d writes from registered buffers with registration off", fixed)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	b = openBroker(t, dir, backend, 2)
	defer b.Close()
	for p := int32(0); p < 4; p++ {
		tp := TopicPartition{"d", p}
		var got []string
		for off := int64(0); ; {
			res := fetch(t, b, FetchRequest{Partitions: []FetchPartition{{tp, off, 1 << 20}}})
			vs := values(t, &res[0])
			if len(vs) == 0 {
				break
			}
			got = append(got, vs...)
			off += int64(len(vs))
		}
		want := 0
		for i := 0; i < perPartition; i++ {
			want += 1 + i%7
		}
		if len(got) != want {
			t.Fatalf("p%d after restart: %d records, want %d", p, len(got), want)
		}
	}
}
