package shard

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ringlog/ringlog/engine"
	"github.com/ringlog/ringlog/engine/batch"
)

func idemBatch(t *testing.T, id engine.ProducerIdentity, seq int32, n int) []byte {
	t.Helper()
	bl := batch.NewBuilder(batch.BuilderOptions{ProducerID: id.ID, ProducerEpoch: id.Epoch, BaseSequence: seq, Idempotent: true})
	for i := 0; i < n; i++ {
		bl.Append(time.Now().UnixMilli(), []byte(fmt.Sprintf("k%d", i)), []byte(fmt.Sprintf("v%d-%d", seq, i)), nil)
	}
	out, err := bl.Build(nil)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestProduceIdempotent: through the broker core, a retried batch gets its original offset
// and is not appended again, a gap is refused, and after a second InitProducerID under the
// same name the old epoch is refused on every partition — also on one the new instance
// never wrote to — while the new epoch writes, and all of it survives a restart.
func TestProduceIdempotent(t *testing.T) {
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			dir := t.TempDir()
			b := openBroker(t, dir, backend, 2)
			if err := b.CreateTopic("t", 2, nil); err != nil {
				t.Fatal(err)
			}
			p0, p1 := TopicPartition{"t", 0}, TopicPartition{"t", 1}
			a, err := b.InitProducerID("writer", engine.NoProducer)
			if err != nil {
				t.Fatal(err)
			}
			first := produce(t, b, p0, AcksAll, idemBatch(t, a, 0, 3))
			produce(t, b, p1, AcksAll, idemBatch(t, a, 0, 1))
			second := produce(t, b, p0, AcksAll, idemBatch(t, a, 3, 2))
			if first.Err != nil || second.Err != nil || second.BaseOffset != 3 {
				t.Fatalf("first %+v, second %+v", first, second)
			}
			retry := produce(t, b, p0, AcksAll, idemBatch(t, a, 0, 3))
			if retry.Err != nil || retry.BaseOffset != first.BaseOffset {
				t.Fatalf("retry: %+v, want base offset %d", retry, first.BaseOffset)
			}
			if r := produce(t, b, p0, AcksAll, idemBatch(t, a, 9, 1)); !errors.Is(r.Err, engine.ErrOutOfOrderSequence) {
				t.Fatalf("gap: %+v", r)
			}
			b2, err := b.InitProducerID("writer", engine.NoProducer)
			if err != nil || b2.ID != a.ID || b2.Epoch != a.Epoch+1 {
				t.Fatalf("second init: %+v %v", b2, err)
			}
			if r := produce(t, b, p0, AcksAll, idemBatch(t, b2, 0, 1)); r.Err != nil || r.BaseOffset != 5 {
				t.Fatalf("new epoch on p0: %+v", r)
			}
			for _, tp := range []TopicPartition{p0, p1} {
				if r := produce(t, b, tp, AcksAll, idemBatch(t, a, 5, 1)); !errors.Is(r.Err, engine.ErrProducerFenced) {
					t.Fatalf("old epoch on %v: %+v", tp, r)
				}
			}
			if err := b.Close(); err != nil {
				t.Fatal(err)
			}
			b = openBroker(t, dir, backend, 2)
			defer b.Close()
			if r := produce(t, b, p1, AcksAll, idemBatch(t, a, 1, 1)); !errors.Is(r.Err, engine.ErrProducerFenced) {
				t.Fatalf("old epoch after restart: %+v", r)
			}
			if r := produce(t, b, p0, AcksAll, idemBatch(t, b2, 0, 1)); r.Err != nil || r.BaseOffset != 5 {
				t.Fatalf("retry of the new epoch's batch after restart: %+v", r)
			}
			c, err := b.InitProducerID("writer", engine.NoProducer)
			if err != nil || c.Epoch != b2.Epoch+1 {
				t.Fatalf("init after restart: %+v %v", c, err)
			}
		})
	}
}
