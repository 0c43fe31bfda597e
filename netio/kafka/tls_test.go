package kafka_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ringlog/ringlog/netio/client"
	"github.com/ringlog/ringlog/netio/internal/brokertest"
	"github.com/ringlog/ringlog/netio/node"
	"github.com/ringlog/ringlog/netio/security/securitytest"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// startKafkaTLS starts a broker whose listeners serve TLS with a certificate of a fresh
// CA (with mutual TLS: clients need a certificate of that CA too) and returns the CA.
func startKafkaTLS(t *testing.T, mutual bool) (*brokertest.Broker, *securitytest.CA) {
	t.Helper()
	ca, st := securitytest.ServerTLS(t, mutual)
	clientName := ""
	if mutual {
		clientName = "client"
	}
	b := startKafka(t, brokertest.Options{
		Node:   func(cfg *node.Config) { cfg.Server.TLS = st.Config() },
		Client: client.Config{TLS: ca.ClientTLS(t, clientName)},
	})
	return b, ca
}

// TestKgoTLS: with TLS on, the Kafka listener serves kgo over TLS (produce, then a fetch
// from the segment files, whose bytes are copied and encrypted instead of sent by
// sendfile) and refuses a plain Kafka client and one that does not trust the broker.
func TestKgoTLS(t *testing.T) {
	b, ca := startKafkaTLS(t, false)
	trusting := kgo.DialTLSConfig(ca.ClientTLS(t, ""))
	cl := newClient(t, b, trusting)
	createTopic(t, cl, "kgo-tls", 1)
	const n = 100
	ctx := testContext(t)
	for i := range n {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "kgo-tls", Value: fmt.Appendf(nil, "value-%d", i)}).FirstErr(); err != nil {
			t.Fatalf("produce %d over TLS: %v", i, err)
		}
	}
	records := consume(t, b, "kgo-tls", n, trusting)
	for i, r := range records {
		if want := fmt.Sprintf("value-%d", i); string(r.Value) != want || r.Offset != int64(i) {
			t.Fatalf("record %d: offset %d value %q, want %q", i, r.Offset, r.Value, want)
		}
	}
	// The server counts copied bytes after its write returns, which can be after the
	// client has read the reply: wait (bounded) for the count.
	st := b.Node.Server.Stats()
	for deadline := time.Now().Add(5 * time.Second); st.CopiedFileBytes == 0 && time.Now().Before(deadline); st = b.Node.Server.Stats() {
		time.Sleep(10 * time.Millisecond)
	}
	if st.CopiedFileBytes == 0 || st.SendfileBytes != 0 {
		t.Fatalf("egress after a TLS fetch: %d bytes copied, %d by sendfile (want copies only)", st.CopiedFileBytes, st.SendfileBytes)
	}

	// A plain Kafka client's first request (ApiVersions) is not a TLS handshake: closed.
	c := dialRaw(t, b.KafkaAddr)
	c.send(18, 0, 1, nil)
	if _, _, err := c.recv(); err == nil {
		t.Fatal("a plain Kafka client got an ApiVersions answer from the TLS listener")
	}
	refused := func(name string, opts ...kgo.Opt) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		cl := newClient(t, b, append(opts, kgo.RequestRetries(0))...)
		if _, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl); err == nil {
			t.Fatalf("%s: Metadata answered over the TLS listener", name)
		}
	}
	refused("plain kgo")
	other := securitytest.NewCA(t, t.TempDir(), "other")
	refused("kgo trusting another CA", kgo.DialTLSConfig(other.ClientTLS(t, "")))
}

// TestKgoMutualTLS: with a client CA, kgo with a certificate of it is served and kgo
// without one is refused.
func TestKgoMutualTLS(t *testing.T) {
	b, ca := startKafkaTLS(t, true)
	withCert := kgo.DialTLSConfig(ca.ClientTLS(t, "kgo"))
	cl := newClient(t, b, withCert)
	createTopic(t, cl, "kgo-mtls", 1)
	if err := cl.ProduceSync(testContext(t), &kgo.Record{Topic: "kgo-mtls", Value: []byte("mutual")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if r := consume(t, b, "kgo-mtls", 1, withCert); string(r[0].Value) != "mutual" {
		t.Fatalf("consumed %q", r[0].Value)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	noCert := newClient(t, b, kgo.DialTLSConfig(ca.ClientTLS(t, "")), kgo.RequestRetries(0))
	if _, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, noCert); err == nil {
		t.Fatal("kgo without a client certificate passed mutual TLS")
	}
}

// TestTLSHandshakeBounded: a client that connects to the TLS Kafka listener and never
// starts the handshake is closed after the frame-read timeout (here 100 ms; the test
// only waits for the close, bounded by testTimeout).
func TestTLSHandshakeBounded(t *testing.T) {
	_, st := securitytest.ServerTLS(t, false)
	b := startKafka(t, brokertest.Options{NoClient: true, Node: func(cfg *node.Config) {
		cfg.Server.TLS = st.Config()
		cfg.Server.FrameReadTimeout = 100 * time.Millisecond
	}})
	c := dialRaw(t, b.KafkaAddr)
	var one [1]byte
	if n, err := c.nc.Read(one[:]); err == nil || isTimeout(err) {
		t.Fatalf("a silent client: read %d bytes, %v; want the connection closed", n, err)
	}
}

func isTimeout(err error) bool {
	ne, ok := err.(interface{ Timeout() bool })
	return ok && ne.Timeout()
}

// BenchmarkKafkaFetchTLS: 1 MiB fetches of one partition from the page cache by kgo, over
// the plain Kafka listener (records by sendfile) and over TLS (records read into the
// connection's buffer, encrypted by the broker and decrypted by kgo on the same cores).
// SetBytes counts the record bytes of one response.
func BenchmarkKafkaFetchTLS(b *testing.B) {
	ca, st := securitytest.ServerTLS(b, false)
	clientTLS := ca.ClientTLS(b, "")
	for _, mode := range []string{"plain", "tls"} {
		b.Run(mode, func(b *testing.B) {
			o := brokertest.Options{Kafka: true, NoClient: true}
			var opts []kgo.Opt
			if mode == "tls" {
				o.Node = func(cfg *node.Config) { cfg.Server.TLS = st.Config() }
				opts = append(opts, kgo.DialTLSConfig(clientTLS))
			}
			broker := brokertest.Start(b, o)
			cl, err := kgo.NewClient(append(opts, kgo.SeedBrokers(broker.KafkaAddr), kgo.DefaultProduceTopic("bench"),
				kgo.ProducerBatchCompression(kgo.NoCompression()))...)
			if err != nil {
				b.Fatal(err)
			}
			defer cl.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			create := kmsg.NewPtrCreateTopicsRequest()
			rt := kmsg.NewCreateTopicsRequestTopic()
			rt.Topic, rt.NumPartitions, rt.ReplicationFactor = "bench", 1, 1
			create.Topics = append(create.Topics, rt)
			if _, err := create.RequestWith(ctx, cl); err != nil {
				b.Fatal(err)
			}
			value := make([]byte, 1024)
			for range 2048 { // 2 MiB: a 1 MiB fetch is full
				cl.Produce(ctx, &kgo.Record{Value: value}, nil)
			}
			if err := cl.Flush(ctx); err != nil {
				b.Fatal(err)
			}
			req := kmsg.NewPtrFetchRequest()
			req.Version, req.MaxWaitMillis, req.MaxBytes, req.SessionEpoch = 12, 100, 1<<20, -1
			ft := kmsg.NewFetchRequestTopic()
			ft.Topic = "bench"
			fp := kmsg.NewFetchRequestTopicPartition()
			fp.PartitionMaxBytes = 1 << 20
			ft.Partitions = append(ft.Partitions, fp)
			req.Topics = append(req.Topics, ft)
			fetch := func() int {
				resp, err := req.RequestWith(ctx, cl)
				if err != nil {
					b.Fatal(err)
				}
				return len(resp.Topics[0].Partitions[0].RecordBatches)
			}
			n := fetch()
			if n < 1<<19 {
				b.Fatalf("a fetch returned %d record bytes", n)
			}
			b.SetBytes(int64(n))
			b.ReportAllocs()
			for b.Loop() {
				fetch()
			}
		})
	}
}
