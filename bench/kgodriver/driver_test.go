package kgodriver

import (
	"context"
	"testing"
	"time"

	"github.com/ringlog/ringlog/bench"
	"github.com/ringlog/ringlog/bench/benchtest"
	"github.com/ringlog/ringlog/engine/shard"
	"github.com/ringlog/ringlog/netio/node"
	"github.com/ringlog/ringlog/ring"
)

// startBroker starts the real broker in-process (node.Start, as ringlogd does) with its
// Kafka listener on loopback; the driver reaches it only through kgo over the socket.
func startBroker(t *testing.T) string {
	t.Helper()
	n, err := node.Start(node.Config{
		Core:        shard.Config{DataDir: t.TempDir(), Shards: 2, Ring: ring.Config{Backend: "auto"}},
		Listen:      "127.0.0.1:0",
		ShardPorts:  node.ShardPortsOff,
		Net:         node.NetGo,
		KafkaListen: "127.0.0.1:0",
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		n.Shutdown(ctx)
	})
	return n.KafkaAddr
}

func workload(t *testing.T) bench.Workload {
	w, err := bench.ParseWorkload([]byte(`
name: kgo-driver-test
topics: 1
partitionsPerTopic: 3
messageSize: 512
keyDistribution: random
producers: 2
consumers: 2
producerRate: 3000
warmup: 50ms
duration: 400ms
acks: all
compression: lz4
`))
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// TestRunOverKafka runs the framework through kgo against the broker's Kafka listener:
// every published message comes back to a consumer with its payload intact.
func TestRunOverKafka(t *testing.T) {
	address := startBroker(t)
	w := workload(t)
	result := benchtest.OpenAndRun(t, "kgo", address, w)
	// How many records the run's 450 ms hold depends on the CPU it got (none in the measured
	// window once, under make test at load 25 with a benchmark ahead of it): check that
	// records went through without errors, not a rate.
	if result.Totals.Published == 0 || result.Errors.Publish != 0 || result.Errors.BadPayloads != 0 {
		t.Fatalf("published %d (window %+v) errors %+v", result.Totals.Published, result.Publish, result.Errors)
	}
	// Every acknowledged message came back by the end of the run's drain (a share of the
	// 400 ms window failed under load: the consumers lagged, not lost).
	if !result.AllDelivered() {
		t.Fatalf("consumed %d of %d published, e2e %d", result.Totals.Consumed, result.Totals.Published, result.EndToEnd.Count)
	}
	// End-to-end latency is sampled for what the consumers read inside the measured window;
	// a slow build (-race at load) can read all of it in the drain after it, so the samples
	// are required only when the window saw a consumed message.
	if result.Consume.Messages > 0 && result.EndToEnd.Count == 0 {
		t.Fatalf("%d messages consumed in the window but no end-to-end sample", result.Consume.Messages)
	}
	if result.Driver.Name != "kgo" {
		t.Fatalf("driver info %+v", result.Driver)
	}
}

// TestNullKeysPlacedByKgo: with keyDistribution none the producers use kgo's default
// uniform-bytes partitioner (partition -1 from the bench); every record comes back.
func TestNullKeysPlacedByKgo(t *testing.T) {
	address := startBroker(t)
	w := workload(t)
	w.KeyDistribution, w.BatchBytes = bench.KeysNone, 4<<10
	result := benchtest.OpenAndRun(t, "kgo", address, w)
	if result.Totals.Published == 0 || result.Errors.Publish != 0 || !result.AllDelivered() || len(result.PartitionShares) != 0 {
		t.Fatalf("totals %+v errors %+v shares %v", result.Totals, result.Errors, result.PartitionShares)
	}
}

func TestRefusesBadSettings(t *testing.T) {
	address := startBroker(t)
	driver, err := Open(address, bench.Workload{})
	if err != nil {
		t.Fatal(err)
	}
	defer driver.Close()
	if _, err := driver.NewProducer(context.Background(), "t", bench.ProducerOptions{Acks: "2", Compression: "none"}); err == nil {
		t.Fatal("accepted acks=2")
	}
	if _, err := driver.NewProducer(context.Background(), "t", bench.ProducerOptions{Acks: "1", Compression: "brotli"}); err == nil {
		t.Fatal("accepted brotli")
	}
	if _, err := Open("127.0.0.1:1", bench.Workload{}); err == nil {
		t.Fatal("opened a driver on a closed port")
	}
}
