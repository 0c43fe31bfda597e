package e2e

import (
	"bytes"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ringlog/ringlog/netio/wire"

	"github.com/ringlog/ringlog/engine/batch"
	"github.com/ringlog/ringlog/netio/client"
)

// TestProduceConsumeRestart produces 100k keyed records with headers over 8 partitions,
// consumes them all back (per-partition order, identical keys, values and headers, each key
// on client.KeyPartition), stops the broker with SIGTERM, starts it again and reads them
// all once more. It runs on both I/O backends with the ring connection driver, on the Go
// connection driver, and in direct storage mode on both drivers (fetches of recent data go
// out as memory ranges of the recent-block cache, spanning chunks and the file).
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
		{"uring", "go", "direct"}, // the Go driver's writev of the recent-block cache
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

// TestClientSurvivesRestart keeps one client across a broker restart: the shard ports it
// learned from metadata (--shard-ports auto) are gone afterwards, so its producer and
// consumer must fall back to the seed address, refresh metadata and carry on.
//
// A failed dial is ErrConnClosed, retriable with a metadata refresh, and the consumer
// re-routes by fresh metadata instead of failing Poll. Before that fix every record failed
// at once with "connect: connection refused".
func TestClientSurvivesRestart(t *testing.T) {
	b := startBroker(t)
	ctx := testContext(t, 90*time.Second)
	c := b.client(t)
	const topic = "survivor"
	if err := c.CreateTopic(ctx, topic, 4, nil); err != nil {
		t.Fatal(err)
	}
	acks := produceRecords(t, ctx, c, topic, "r", 0, 2000, client.ProducerConfig{})
	b.stop()
	addr := b.addr
	b.restart()
	if b.addr != addr {
		t.Skipf("the seed port was taken during the restart (%s -> %s); nothing to test", addr, b.addr)
	}
	acks = append(acks, produceRecords(t, ctx, c, topic, "r", 2000, 4000, client.ProducerConfig{})...)
	checkConsumed(t, "r", expectedByPartition(t, acks), consumeAll(t, ctx, c, topic))
}

// TestBatchLargerThanSegment produces a record that cannot fit a segment of its topic: the
// broker must refuse it as MESSAGE_TOO_LARGE (not retriable), as Kafka does.
//
// (Fixed: engine.ErrBatchTooLarge maps to MESSAGE_TOO_LARGE; before, it was CORRUPT_MESSAGE,
// a retriable code, so clients retried ten times and reported corruption.)
func TestBatchLargerThanSegment(t *testing.T) {
	b := startBroker(t)
	ctx := testContext(t, 30*time.Second)
	c := b.client(t)
	if err := c.CreateTopic(ctx, "tiny", 1, map[string]string{"segment.bytes": "4096"}); err != nil {
		t.Fatal(err)
	}
	p := c.NewProducer(client.ProducerConfig{})
	defer p.Close(ctx)
	_, err := p.SendSync(ctx, &client.Record{Topic: "tiny", Partition: 0, Value: make([]byte, 8192)})
	if !errors.Is(err, wire.ErrMessageTooLarge) || !strings.Contains(err.Error(), "after 1 attempts") {
		t.Fatalf("8 KiB record into 4 KiB segments: %v; want MESSAGE_TOO_LARGE without retries", err)
	}
}

// TestDataDirInUse starts a second ringlogd on the data directory of a running one: it must
// refuse to start (one-line error, status 1) instead of writing the same segment files, and
// the first broker must keep serving.
func TestDataDirInUse(t *testing.T) {
	b := startBroker(t)
	ctx := testContext(t, 30*time.Second)
	second := exec.CommandContext(ctx, filepath.Join(binDir, "ringlogd"), "--data", b.dataDir, "--listen", freeAddr(t), "--shards", "1")
	var stderr bytes.Buffer
	second.Stderr = &stderr
	err := second.Start()
	if err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- second.Wait() }()
	select {
	case err = <-exited:
	case <-ctx.Done():
		second.Process.Kill()
		<-exited
		t.Fatalf("a second broker on a data directory in use did not refuse to start:\n%s", stderr.String())
	}
	var exitErr *exec.ExitError
	if !errors.As(err, &exitErr) || exitErr.ExitCode() != 1 || !strings.Contains(stderr.String(), "in use") {
		t.Errorf("second broker on the same data dir: %v, stderr:\n%s", err, stderr.String())
	}
	expectHealthy(t, b)
}

// TestAdvertise: with --advertise HOST, metadata names HOST (with each listener's port) for
// every shard, and a shard-aware client reaches the shards through it.
func TestAdvertise(t *testing.T) {
	b := startBroker(t, "--advertise", "localhost")
	r := dialRaw(t, b.addr)
	r.write(wire.AppendRequest(nil, 1, &wire.MetadataRequest{}))
	h, payload := r.readResponse()
	var meta wire.MetadataResponse
	if err := meta.ReadFrom(payload); h.ErrorCode != wire.ErrNone || err != nil {
		t.Fatalf("metadata: %s %v", h.ErrorCode.Name(), err)
	}
	if len(meta.Shards) != 2 {
		t.Fatalf("metadata lists %d shards, want 2", len(meta.Shards))
	}
	for _, s := range meta.Shards {
		if !strings.HasPrefix(s.Address, "localhost:") {
			t.Errorf("shard %d advertised as %q, want localhost:PORT", s.Shard, s.Address)
		}
	}
	ctx := testContext(t, 30*time.Second)
	c := b.client(t)
	if err := c.CreateTopic(ctx, "adv", 2, nil); err != nil {
		t.Fatal(err)
	}
	acks := produceRecords(t, ctx, c, "adv", "v", 0, 200, client.ProducerConfig{})
	checkConsumed(t, "v", expectedByPartition(t, acks), consumeAll(t, ctx, c, "adv"))
}
