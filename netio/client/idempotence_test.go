package client_test

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/ringlog/ringlog/netio/client"
	"github.com/ringlog/ringlog/netio/wire"
)

// TestIdempotentProducerSurvivesFailedBatch: a batch the broker refuses for good
// (MESSAGE_TOO_LARGE) leaves a hole in its partition's sequence, and the batches pipelined
// behind it come back OUT_OF_ORDER_SEQUENCE. The producer must fail only that batch, move to a
// new producer id, renumber the rest and write them, in order, once each.
func TestIdempotentProducerSurvivesFailedBatch(t *testing.T) {
	c, stop := startBroker(t, 1, t.TempDir())
	defer stop()
	ctx := ctxT(t)
	if err := c.CreateTopic(ctx, "holes", 1, map[string]string{"segment.bytes": "1024"}); err != nil {
		t.Fatal(err)
	}
	// BatchBytes 1 and no linger: every record is a batch of its own, pipelined.
	p := c.NewProducer(client.ProducerConfig{BatchBytes: 1, Linger: -1})
	const records, big = 12, 3
	errs := make([]error, records)
	for i := range records {
		value := []byte(fmt.Sprintf("v%d", i))
		if i == big {
			value = bytes.Repeat([]byte("x"), 2048) // larger than the segment: refused for good
		}
		if err := p.Send(ctx, &client.Record{Topic: "holes", Partition: 0, Value: value}, func(_ *client.Record, err error) { errs[i] = err }); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			if err := p.Flush(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	first := p.Identity()
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	for i, err := range errs {
		if (i == big) != (err != nil) {
			t.Fatalf("record %d: %v", i, err)
		}
	}
	if !errors.Is(errs[big], wire.ErrMessageTooLarge) {
		t.Fatalf("the big record failed with %v", errs[big])
	}
	if after := p.Identity(); after.ID == first.ID {
		t.Fatalf("identity %+v after the failure, want a new producer id (was %+v)", after, first)
	}
	co := c.NewConsumer(client.ConsumerConfig{})
	co.Assign("holes", 0, client.Earliest())
	var got []string
	for len(got) < records-1 {
		rs, err := co.Poll(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rs {
			got = append(got, string(r.Value))
		}
	}
	want := []string{}
	for i := range records {
		if i != big {
			want = append(want, fmt.Sprintf("v%d", i))
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("log holds %v, want %v", got, want)
	}
}
