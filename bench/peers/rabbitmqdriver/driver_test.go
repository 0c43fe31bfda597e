package rabbitmqdriver

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/ringlog/ringlog/bench"
	"github.com/ringlog/ringlog/bench/benchtest"
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
	result := benchtest.RunDelivered(t, w, d, 1)
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

// TestFreePortsBelowEphemeralRange: the node's four ports are distinct, bindable, and
// outside the range the kernel hands out for outgoing connections, where another process
// could take one before the node binds it.
func TestFreePortsBelowEphemeralRange(t *testing.T) {
	ports, err := freePorts(4)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range ports {
		if seen[p] || p < portsDrawnMin || p >= portsDrawnMax || !portFree(p) {
			t.Fatalf("ports %v: %d repeated, outside [%d, %d) or not bindable", ports, p, portsDrawnMin, portsDrawnMax)
		}
		seen[p] = true
	}
}
