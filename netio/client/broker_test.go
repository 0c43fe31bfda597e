package client_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ringlog/ringlog/netio/wire"

	"github.com/ringlog/ringlog/engine/batch"
	"github.com/ringlog/ringlog/netio/client"
	"github.com/ringlog/ringlog/netio/internal/brokertest"
)

// These tests run the client against the real broker core (engine/shard behind
// netio.BrokerHandler) in-process, over real sockets: the same stack ringlogd runs,
// without the binary.

func startBroker(t *testing.T, shards int, dir string) (*client.Client, func()) {
	return startBrokerDriver(t, shards, dir, "net")
}

// startBrokerDriver serves the broker with the net driver or, for "ring", on the shards'
// reactors (the handler then runs each shard's work on that shard's loop thread).
func startBrokerDriver(t *testing.T, shards int, dir, driver string) (*client.Client, func()) {
	t.Helper()
	b := brokertest.Start(t, brokertest.Options{Shards: shards, Dir: dir, Driver: driver})
	return b.Client, b.Stop
}

func TestRealBrokerProduceConsumeRestart(t *testing.T) {
	for _, driver := range []string{"net", "ring"} {
		t.Run(driver, func(t *testing.T) { testRealBrokerProduceConsumeRestart(t, driver) })
	}
}

func testRealBrokerProduceConsumeRestart(t *testing.T, driver string) {
	dir := t.TempDir()
	c, stop := startBrokerDriver(t, 2, dir, driver)
	ctx := ctxT(t)
	const partitions, records = 8, 20000
	if err := c.CreateTopic(ctx, "orders", partitions, nil); err != nil {
		t.Fatal(err)
	}
	p := c.NewProducer(client.ProducerConfig{Compression: batch.CodecZstd, BatchBytes: 64 << 10})
	failures := make(chan error, records)
	for i := range records {
		r := &client.Record{Topic: "orders", Partition: -1, Key: []byte(fmt.Sprintf("user-%d", i%301)), Value: []byte(fmt.Sprintf("order-%d", i)),
			Headers: []batch.RecordHeader{{Key: "i", Value: []byte(fmt.Sprint(i))}}}
		if err := p.Send(ctx, r, func(_ *client.Record, err error) {
			if err != nil {
				failures <- err
			}
		}); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	close(failures)
	for err := range failures {
		t.Fatalf("send failed: %v", err)
	}
	check := func(c *client.Client) {
		t.Helper()
		co := c.NewConsumer(client.ConsumerConfig{MaxWait: 20 * time.Millisecond})
		for part := range int32(partitions) {
			co.Assign("orders", part, client.Earliest())
		}
		last := map[int32]int{}
		next := map[int32]int64{}
		got := 0
		for polls := 0; got < records; polls++ {
			if polls > 20000 {
				t.Fatalf("consumed %d of %d", got, records)
			}
			recs, err := co.Poll(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range recs {
				var i int
				fmt.Sscan(string(r.Headers[0].Value), &i)
				if string(r.Value) != fmt.Sprintf("order-%d", i) || string(r.Key) != fmt.Sprintf("user-%d", i%301) {
					t.Fatalf("record %d: key %q value %q", i, r.Key, r.Value)
				}
				if r.Partition != client.KeyPartition(r.Key, partitions) {
					t.Fatalf("key %q on partition %d", r.Key, r.Partition)
				}
				if prev, ok := last[r.Partition]; ok && i <= prev {
					t.Fatalf("partition %d: record %d after %d", r.Partition, i, prev)
				}
				if r.Offset != next[r.Partition] {
					t.Fatalf("partition %d: offset %d, want %d", r.Partition, r.Offset, next[r.Partition])
				}
				last[r.Partition], next[r.Partition] = i, r.Offset+1
				got++
			}
		}
	}
	check(c)
	desc, err := c.DescribeTopics(ctx, "orders")
	if err != nil || len(desc[0].Partitions) != partitions {
		t.Fatalf("describe: %+v %v", desc, err)
	}
	var sum int64
	for _, p := range desc[0].Partitions {
		sum += p.HighWatermark
	}
	if sum != records {
		t.Fatalf("high watermarks sum to %d, want %d", sum, records)
	}
	// Restart the broker on the same directory: everything is read back again.
	stop()
	c2, _ := startBrokerDriver(t, 2, dir, driver)
	check(c2)
}

func TestRealBrokerErrorsAndOffsets(t *testing.T) {
	c, _ := startBroker(t, 1, t.TempDir())
	ctx := ctxT(t)
	if err := c.CreateTopic(ctx, "t", 1, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.CreateTopic(ctx, "t", 1, nil); !errors.Is(err, wire.ErrTopicAlreadyExists) {
		t.Fatalf("duplicate create: %v", err)
	}
	p := c.NewProducer(client.ProducerConfig{Acks: client.AckLeader})
	defer p.Close(ctx)
	base := time.UnixMilli(1_900_000_000_000)
	for i := range 5 {
		off, err := p.SendSync(ctx, &client.Record{Topic: "t", Partition: 0, Value: []byte(fmt.Sprint(i)), Timestamp: base.Add(time.Duration(i) * time.Minute)})
		if err != nil || off != int64(i) {
			t.Fatalf("send %d: offset %d, %v", i, off, err)
		}
	}
	for _, tc := range []struct {
		ts   int64
		want int64
	}{{wire.TimestampEarliest, 0}, {wire.TimestampLatest, 5}, {base.Add(2 * time.Minute).UnixMilli(), 2}} {
		if off, err := c.ListOffset(ctx, "t", 0, tc.ts); err != nil || off != tc.want {
			t.Fatalf("list offset %d: %d, %v (want %d)", tc.ts, off, err, tc.want)
		}
	}
	co := c.NewConsumer(client.ConsumerConfig{MaxWait: 10 * time.Millisecond})
	co.Assign("t", 0, client.AtOffset(99))
	if _, err := co.Poll(ctx); !errors.Is(err, wire.ErrOffsetOutOfRange) {
		t.Fatalf("poll out of range: %v", err)
	}
	if _, err := p.SendSync(ctx, &client.Record{Topic: "missing", Partition: -1, Value: []byte("x")}); !errors.Is(err, wire.ErrUnknownTopicOrPartition) {
		t.Fatalf("unknown topic: %v", err)
	}
}
