package ringlogdriver

import (
	"context"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ringlog/ringlog/netio/wire"

	"github.com/ringlog/ringlog/bench"
	"github.com/ringlog/ringlog/bench/benchtest"
	"github.com/ringlog/ringlog/netio"
	"github.com/ringlog/ringlog/netio/fakebroker"
)

// startFake serves netio's fake broker (a test fixture that stores topics in files) on a
// real 127.0.0.1 socket, so the driver runs the real client over the real protocol.
func startFake(t *testing.T) string {
	t.Helper()
	fake := fakebroker.New(t.TempDir(), nil)
	srv := netio.NewServer(fake, netio.Config{})
	ln, err := netio.ListenShard(context.Background(), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fake.SetShards([]wire.MetadataShard{{Shard: 0, Address: ln.Addr().String()}})
	var served sync.WaitGroup
	served.Add(1)
	go func() { defer served.Done(); _ = srv.Serve(ln, 0) }()
	t.Cleanup(func() {
		srv.Close()
		served.Wait()
		fake.Close()
	})
	return ln.Addr().String()
}

func workload() bench.Workload {
	w, err := bench.ParseWorkload([]byte(`
name: driver-test
topics: 1
partitionsPerTopic: 3
messageSize: 512
keyDistribution: random
producers: 2
consumers: 2
producerRate: 3000
warmup: 50ms
duration: 400ms
acks: "1"
`))
	if err != nil {
		panic(err)
	}
	return w
}

// TestRunOverTheWire runs the framework through the ringlog client against a broker on a
// socket: every published message must come back to a consumer with its timestamp intact.
func TestRunOverTheWire(t *testing.T) {
	address := startFake(t)
	w := workload()
	result := benchtest.OpenAndRun(t, "ringlog", address, w)
	if result.Publish.Messages < 300 || result.Errors.Publish != 0 || result.Errors.BadPayloads != 0 {
		t.Fatalf("publish %+v errors %+v", result.Publish, result.Errors)
	}
	if !result.AllDelivered() || result.EndToEnd.Count == 0 || result.PublishDelay.Count == 0 {
		t.Fatalf("consumed %d of %d published, e2e %d delay %d", result.Totals.Consumed, result.Totals.Published, result.EndToEnd.Count, result.PublishDelay.Count)
	}
	if result.Driver.Name != "ringlog" || result.Driver.StorageMode == "" || result.BrokerRSS.PID != os.Getpid() {
		t.Fatalf("driver info %+v rss %+v", result.Driver, result.BrokerRSS)
	}
}

// TestNullKeysPlacedByTheClient: with keyDistribution none the bench sends partition -1
// and the bundled producer places every record (in sticky runs of the workload's
// batchBytes); all of them come back.
func TestNullKeysPlacedByTheClient(t *testing.T) {
	address := startFake(t)
	w := workload()
	w.KeyDistribution, w.BatchBytes = bench.KeysNone, 4<<10
	result := benchtest.OpenAndRun(t, "ringlog", address, w)
	if result.Totals.Published == 0 || result.Errors.Publish != 0 || !result.AllDelivered() || len(result.PartitionShares) != 0 {
		t.Fatalf("totals %+v errors %+v shares %v", result.Totals, result.Errors, result.PartitionShares)
	}
	if !slices.ContainsFunc(result.Notes, func(n string) bool { return strings.Contains(n, "placed by the client") }) {
		t.Fatalf("notes %q: want the client's placement said", result.Notes)
	}
}

func TestSyncProduceAndZstd(t *testing.T) {
	address := startFake(t)
	w := workload()
	w.MaxInFlight, w.ProducerRate, w.Compression, w.Acks = 1, 0, "zstd", "all"
	driver, err := Open(address, w)
	if err != nil {
		t.Fatal(err)
	}
	defer driver.Close()
	result, err := bench.Run(context.Background(), bench.RunOptions{Workload: w, Driver: driver, SampleInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if result.Publish.Messages == 0 || result.PublishLatency.Count == 0 || result.Errors.Publish != 0 {
		t.Fatalf("sync produce: %+v %+v", result.Publish, result.Errors)
	}
}

func TestOpenRefusesBadSettings(t *testing.T) {
	if _, err := Open("127.0.0.1:1", bench.Workload{}); err == nil {
		t.Fatal("connected to a port nobody listens on")
	}
	address := startFake(t)
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
	if got := TopicConfigs(bench.Workload{Durability: "fsync", RetentionBytes: 1 << 30}); got["flush.always"] != "true" || got["retention.bytes"] != "1073741824" || got["segment.bytes"] != "268435456" {
		t.Fatalf("fsync configs %v", got)
	}
	if TopicConfigs(bench.Workload{Durability: "none"}) != nil {
		t.Fatal("configs for durability none")
	}
}

// TestCreateTopicSendsReplicationFactor: the workload's replicationFactor reaches the
// broker's CreateTopics (the single-node fake refuses anything above 1; the e2e cluster
// tests cover a real RF=3 create through the same client call).
func TestCreateTopicSendsReplicationFactor(t *testing.T) {
	address := startFake(t)
	w := workload()
	w.ReplicationFactor = 3
	driver, err := Open(address, w)
	if err != nil {
		t.Fatal(err)
	}
	defer driver.Close()
	if err := driver.CreateTopic(context.Background(), "rf3", 1); err == nil || !strings.Contains(err.Error(), "replication factor") {
		t.Fatalf("RF=3 on a single node: %v", err)
	}
	w.ReplicationFactor = 1
	one, err := Open(address, w)
	if err != nil {
		t.Fatal(err)
	}
	defer one.Close()
	if err := one.CreateTopic(context.Background(), "rf1", 1); err != nil {
		t.Fatal(err)
	}
}
