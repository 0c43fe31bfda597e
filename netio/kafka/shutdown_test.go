package kafka_test

import (
	"testing"
	"time"

	"github.com/ringlog/ringlog/netio/internal/brokertest"
	"github.com/ringlog/ringlog/netio/node"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestShutdownCutsIdleReaders: Shutdown closes a connection whose reader was between
// requests when it cut reads. With one request in flight per connection, a long-polling
// Fetch holds the writer, an ApiVersions fills the queue and a second ApiVersions leaves
// the reader waiting for room when Shutdown cuts reads; once the Fetch answers, the reader
// queues it and goes back to read. That read must fail at once, not wait the hour-long
// IdleTimeout (before the fix it reset the cut deadline and Shutdown waited for its
// context).
func TestShutdownCutsIdleReaders(t *testing.T) {
	b := startKafka(t, brokertest.Options{Node: func(c *node.Config) {
		c.Server.InflightPerConnMax = 1
		c.Server.IdleTimeout = time.Hour
	}})
	createTopic(t, newClient(t, b), "idle", 1)

	before := b.Node.Server.Stats().Requests
	c := dialRaw(t, b.KafkaAddr)
	fetch := kmsg.NewPtrFetchRequest()
	fetch.Version, fetch.ReplicaID, fetch.MaxWaitMillis, fetch.MinBytes, fetch.MaxBytes = 4, -1, 1000, 1, 1<<20
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic = "idle"
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.PartitionMaxBytes = 1 << 20
	rt.Partitions = append(rt.Partitions, rp)
	fetch.Topics = append(fetch.Topics, rt)
	c.send(1, 4, 1, fetch.AppendTo(nil))
	c.send(18, 0, 2, nil)
	c.send(18, 0, 3, nil)
	ctx := testContext(t)
	for b.Node.Server.Stats().Requests < before+3 { // all three read: the reader waits on the queue
		if ctx.Err() != nil {
			t.Fatalf("the broker read %d of 3 requests", b.Node.Server.Stats().Requests-before)
		}
		time.Sleep(time.Millisecond)
	}

	start := time.Now()
	if err := b.Node.Kafka.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown after %v: %v (an idle connection outlived it)", time.Since(start), err)
	}
	for id := int32(1); id <= 3; id++ { // every request read is answered, then the connection closes
		if got, _, err := c.recv(); err != nil || got != id {
			t.Fatalf("response %d: correlation id %d, %v", id, got, err)
		}
	}
	if _, _, err := c.recv(); err == nil {
		t.Fatal("a fourth response; want the connection closed")
	}
}
