package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/ringlog/ringlog/engine/batch"
	"github.com/ringlog/ringlog/netio/client"
)

// TestProduceConsumeRestart produces 100k keyed records with headers over 8 partitions,
// consumes them all back (per-partition order, identical keys, values and headers, each key
// on client.KeyPartition), stops the broker with SIGTERM, starts it again and reads them
// all once more. It runs on both I/O backends with the ring connection driver, on the Go
// connection driver, and in direct storage mode.
func TestProduceConsumeRestart(t *testing.T) {
	records := 100_000
	if soak() {
		records = 1_000_000
	}
	for _, tc := range []struct{ backend, net, storage string }{
		{"uring", "ring", "page-cache"},
		{"syscall", "ring", "page-cache"},
		{"uring", "go", "page-cache"},
		{"uring", "ring", "direct"},
	} {
		t.Run("io="+tc.backend+",net="+tc.net+",storage="+tc.storage, func(t *testing.T) {
			const partitions = 8
			const topic = "orders"
			b := startBroker(t, "--io", tc.backend, "--net", tc.net, "--storage", tc.storage)
			for _, want := range []string{"io=" + ioName(tc.backend) + " ", "net=" + tc.net + " "} {
				if !strings.Contains(b.logText(), want) {
					t.Fatalf("start-up line lacks %s:\n%s", want, b.logText())
				}
			}
			ctx := testContext(t, soakScaled(120*time.Second))
			c := b.client(t)
			if err := c.CreateTopic(ctx, topic, partitions, nil); err != nil {
				t.Fatal(err)
			}
			// zstd on half the run exercises compressed batches on the same path.
			acks := produceRecords(t, ctx, c, topic, "a", 0, records/2, client.ProducerConfig{Acks: client.AckAll})
			acks = append(acks, produceRecords(t, ctx, c, topic, "a", records/2, records, client.ProducerConfig{Acks: client.AckLeader, Compression: batch.CodecZstd})...)
			for _, a := range acks {
				if want := client.KeyPartition(recordKey("a", a.index), partitions); a.partition != want {
					t.Fatalf("record %d landed on partition %d, KeyPartition says %d", a.index, a.partition, want)
				}
			}
			want := expectedByPartition(t, acks)
			if len(want) != partitions {
				t.Fatalf("keys spread over %d partitions, want %d", len(want), partitions)
			}
			checkConsumed(t, "a", want, consumeAll(t, ctx, c, topic))

			c.Close()
			b.stop()
			b.restart()
			c = b.client(t)
			checkConsumed(t, "a", want, consumeAll(t, ctx, c, topic))
		})
	}
}

// ioName is the backend name the broker logs for an --io value.
func ioName(backend string) string {
	if backend == "uring" {
		return "io_uring"
	}
	return backend
}
