package client_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ringlog/ringlog/netio/client"
)

// Records handed out by Poll alias the fetch response (uncompressed batches are not
// copied); they must stay intact while later Polls reuse pooled buffers.
func TestPolledRecordsSurviveLaterPolls(t *testing.T) {
	c, stop := startBroker(t, 1, t.TempDir())
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.CreateTopic(ctx, "t", 1, nil); err != nil {
		t.Fatal(err)
	}
	p := c.NewProducer(client.ProducerConfig{Acks: client.AckLeader, BatchBytes: 4 << 10})
	const n = 2000
	for i := 0; i < n; i++ {
		if err := p.Send(ctx, &client.Record{Topic: "t", Partition: 0, Key: []byte(fmt.Sprint("k", i)), Value: []byte(fmt.Sprintf("value-%06d", i))}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	co := c.NewConsumer(client.ConsumerConfig{PartitionMaxBytes: 8 << 10, MaxWait: time.Millisecond})
	co.Assign("t", 0, client.Earliest())
	var all []client.ConsumedRecord
	for len(all) < n {
		recs, err := co.Poll(ctx)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, recs...)
	}
	for i, r := range all {
		if string(r.Value) != fmt.Sprintf("value-%06d", i) || string(r.Key) != fmt.Sprint("k", i) {
			t.Fatalf("record %d reads %q=%q after later polls", i, r.Key, r.Value)
		}
	}
}
