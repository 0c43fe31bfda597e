package e2e

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ringlog/ringlog/netio/wire"

	"github.com/ringlog/ringlog/engine/batch"
	"github.com/ringlog/ringlog/netio/client"
)

// Test records are a pure function of (run, index), so what a consumer reads back can be
// compared byte for byte with what was sent without keeping every record in memory.

func recordKey(run string, i int) []byte { return fmt.Appendf(nil, "%s-key-%07d", run, i) }

// recordValue is 16..271 bytes: a header naming the record, then a pattern that depends on
// the index, so a torn, shifted or swapped value is detected.
func recordValue(run string, i int) []byte {
	v := fmt.Appendf(nil, "%s-value-%07d:", run, i)
	for j := range 16 + i%256 {
		v = append(v, byte('a'+(i+j)%26))
	}
	return v
}

// recordHeaders gives every third record no headers, the others one or two.
func recordHeaders(i int) []batch.RecordHeader {
	switch i % 3 {
	case 0:
		return nil
	case 1:
		return []batch.RecordHeader{{Key: "index", Value: binary.BigEndian.AppendUint64(nil, uint64(i))}}
	}
	return []batch.RecordHeader{
		{Key: "index", Value: binary.BigEndian.AppendUint64(nil, uint64(i))},
		{Key: "empty", Value: []byte{}},
	}
}

func testRecord(topic, run string, i int) *client.Record {
	return &client.Record{Topic: topic, Partition: -1, Key: recordKey(run, i), Value: recordValue(run, i), Headers: recordHeaders(i)}
}

// acked is where one record was acknowledged.
type acked struct {
	index     int
	partition int32
	offset    int64
}

// ackLog records acknowledged sends; safe for concurrent use by producer callbacks.
type ackLog struct {
	mu     sync.Mutex
	acks   []acked // guarded by mu
	failed int     // guarded by mu
	err    error   // guarded by mu: the first failure

	target  int           // reached is closed when this many records are acknowledged
	reached chan struct{} // nil unless set up by notifyAt
}

// notifyAt returns a channel closed once n records are acknowledged. Call before sending.
func (l *ackLog) notifyAt(n int) <-chan struct{} {
	l.target, l.reached = n, make(chan struct{})
	return l.reached
}

func (l *ackLog) callback(index int) func(*client.Record, error) {
	return func(r *client.Record, err error) {
		l.mu.Lock()
		defer l.mu.Unlock()
		if err != nil {
			l.failed++
			if l.err == nil {
				l.err = err
			}
			return
		}
		l.acks = append(l.acks, acked{index: index, partition: r.Partition, offset: r.Offset})
		if l.reached != nil && len(l.acks) == l.target {
			close(l.reached)
		}
	}
}

func (l *ackLog) snapshot() ([]acked, int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.acks), l.failed, l.err
}

// summary says how many records were acknowledged and failed (with the first error) and,
// per partition, the last acknowledged offset, for a failure message.
func (l *ackLog) summary() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	last := map[int32]int64{}
	for _, a := range l.acks {
		last[a.partition] = max(last[a.partition], a.offset)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "have %d acknowledged, %d failed", len(l.acks), l.failed)
	if l.err != nil {
		fmt.Fprintf(&b, " (first: %v)", l.err)
	}
	b.WriteString("; last acknowledged offset per partition:")
	for _, p := range slices.Sorted(maps.Keys(last)) {
		fmt.Fprintf(&b, " %d@%d", p, last[p])
	}
	return b.String()
}

func (l *ackLog) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.acks)
}

// produceRecords sends records [from, to) of run with keys and waits for every
// acknowledgement.
func produceRecords(t *testing.T, ctx context.Context, c *client.Client, topic, run string, from, to int, cfg client.ProducerConfig) []acked {
	t.Helper()
	p := c.NewProducer(cfg)
	var log ackLog
	for i := from; i < to; i++ {
		if err := p.Send(ctx, testRecord(topic, run, i), log.callback(i)); err != nil {
			t.Fatalf("send record %d: %v", i, err)
		}
	}
	if err := p.Close(ctx); err != nil {
		t.Fatalf("close producer: %v", err)
	}
	acks, failed, err := log.snapshot()
	if failed > 0 {
		t.Fatalf("%d records failed, first: %v", failed, err)
	}
	if len(acks) != to-from {
		t.Fatalf("%d acknowledgements for %d records", len(acks), to-from)
	}
	return acks
}

// consumeAll reads every partition of topic from the log start to the high watermark
// (looked up first) and returns the records per partition in offset order.
func consumeAll(t *testing.T, ctx context.Context, c *client.Client, topic string) map[int32][]client.ConsumedRecord {
	t.Helper()
	partitions, err := c.Partitions(ctx, topic)
	if err != nil {
		t.Fatalf("partitions of %s: %v", topic, err)
	}
	co := c.NewConsumer(client.ConsumerConfig{MaxWait: 100 * time.Millisecond})
	end := map[int32]int64{}
	for p := range int32(partitions) {
		hw, err := c.ListOffset(ctx, topic, p, wire.TimestampLatest)
		if err != nil {
			t.Fatalf("high watermark of %s/%d: %v", topic, p, err)
		}
		end[p] = hw
		co.Assign(topic, p, client.Earliest())
	}
	out := map[int32][]client.ConsumedRecord{}
	for len(end) > 0 {
		if ctx.Err() != nil {
			t.Fatalf("consume %s: %v with %d partitions unfinished", topic, ctx.Err(), len(end))
		}
		records, err := co.Poll(ctx)
		if err != nil {
			t.Fatalf("poll %s: %v", topic, err)
		}
		for _, r := range records {
			if hw, ok := end[r.Partition]; ok && r.Offset < hw {
				out[r.Partition] = append(out[r.Partition], r)
			}
		}
		for p, hw := range end {
			position, err := co.Position(ctx, topic, p)
			if err != nil {
				t.Fatal(err)
			}
			if position >= hw {
				co.Unassign(topic, p)
				delete(end, p)
			}
		}
	}
	return out
}

// checkRecord compares a consumed record with test record index of run.
func checkRecord(r client.ConsumedRecord, run string, index int) error {
	if !bytes.Equal(r.Key, recordKey(run, index)) {
		return fmt.Errorf("%s/%d@%d: key %q, want %q", r.Topic, r.Partition, r.Offset, r.Key, recordKey(run, index))
	}
	if !bytes.Equal(r.Value, recordValue(run, index)) {
		return fmt.Errorf("%s/%d@%d: value %q, want record %d's", r.Topic, r.Partition, r.Offset, r.Value, index)
	}
	want := recordHeaders(index)
	if len(r.Headers) != len(want) {
		return fmt.Errorf("%s/%d@%d: %d headers, want %d", r.Topic, r.Partition, r.Offset, len(r.Headers), len(want))
	}
	for i := range want {
		if r.Headers[i].Key != want[i].Key || !bytes.Equal(r.Headers[i].Value, want[i].Value) {
			return fmt.Errorf("%s/%d@%d: header %d = %q:%x, want %q:%x", r.Topic, r.Partition, r.Offset, i, r.Headers[i].Key, r.Headers[i].Value, want[i].Key, want[i].Value)
		}
	}
	return nil
}

// expectedByPartition arranges acknowledgements per partition in offset order and checks
// that offsets are dense from 0 and that each partition kept send order.
func expectedByPartition(t *testing.T, acks []acked) map[int32][]acked {
	t.Helper()
	out := map[int32][]acked{}
	for _, a := range acks {
		out[a.partition] = append(out[a.partition], a)
	}
	for p, list := range out {
		slices.SortFunc(list, func(a, b acked) int { return int(a.offset - b.offset) })
		for i, a := range list {
			if a.offset != int64(i) {
				t.Fatalf("partition %d: acknowledged offsets not dense: #%d has offset %d", p, i, a.offset)
			}
			if i > 0 && a.index < list[i-1].index {
				t.Fatalf("partition %d: record %d at offset %d after record %d: send order lost", p, a.index, a.offset, list[i-1].index)
			}
		}
	}
	return out
}

// checkConsumed requires the consumed partitions to hold exactly the expected records.
func checkConsumed(t *testing.T, run string, want map[int32][]acked, got map[int32][]client.ConsumedRecord) {
	t.Helper()
	for p, list := range want {
		if len(got[p]) != len(list) {
			t.Fatalf("partition %d: consumed %d records, want %d", p, len(got[p]), len(list))
		}
		for i, a := range list {
			r := got[p][i]
			if r.Offset != a.offset {
				t.Fatalf("partition %d: consumed offset %d at position %d, want %d", p, r.Offset, i, a.offset)
			}
			if err := checkRecord(r, run, a.index); err != nil {
				t.Fatal(err)
			}
		}
	}
	for p, list := range got {
		if _, ok := want[p]; !ok && len(list) > 0 {
			t.Fatalf("partition %d holds %d records nobody produced", p, len(list))
		}
	}
}
