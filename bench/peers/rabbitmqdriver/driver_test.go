package rabbitmqdriver

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ringlog/ringlog/bench"
)

func openOrSkip(t *testing.T) *Driver {
	t.Helper()
	d, err := Open(Config{DataDir: t.TempDir()})
	if errors.Is(err, ErrNoServer) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// A real rabbitmq-server child with the stream plugin: every message published comes back
// to the consumers, RSS is the child's, and what RabbitMQ Streams cannot do is refused.
func TestRunAgainstRealServer(t *testing.T) {
	w, err := bench.ParseWorkload([]byte(`
name: rabbitmq-test
topics: 1
partitionsPerTopic: 3
messageSize: 256
keyDistribution: random
producers: 1
consumers: 2
producerRate: 2000
warmup: 50ms
duration: 1500ms
`))
	if err != nil {
		t.Fatal(err)
	}
	d := openOrSkip(t)
	defer d.Close()
	result, err := bench.Run(context.Background(), bench.RunOptions{Workload: w, Driver: d, SampleInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if result.Publish.Messages == 0 || result.Errors.Publish != 0 || result.Errors.BadPayloads != 0 {
		t.Fatalf("publish %+v errors %+v", result.Publish, result.Errors)
	}
	if result.Consume.Messages < result.Publish.Messages*8/10 || result.EndToEnd.Count == 0 {
		t.Fatalf("consume %+v of %+v", result.Consume, result.Publish)
	}
	if result.BrokerRSS.PID == os.Getpid() || result.BrokerRSS.MaxBytes == 0 || !strings.HasPrefix(result.Driver.Version, "rabbitmq-server") {
		t.Fatalf("driver %+v rss %+v, want the server child", result.Driver, result.BrokerRSS)
	}
	ctx := context.Background()
	if _, err := d.NewProducer(ctx, "t", bench.ProducerOptions{Compression: "zstd", Acks: "1"}); err == nil {
		t.Fatal("compression accepted")
	}
	if _, err := d.NewProducer(ctx, "t", bench.ProducerOptions{Compression: "none", Durability: "fsync", Acks: "1"}); err == nil {
		t.Fatal("fsync durability accepted")
	}
}
