package netio_test

import (
	"context"
	"crypto/tls"
	"testing"
	"time"

	"github.com/ringlog/ringlog/netio"
	"github.com/ringlog/ringlog/netio/client"
	"github.com/ringlog/ringlog/netio/internal/brokertest"
	"github.com/ringlog/ringlog/netio/node"
	"github.com/ringlog/ringlog/netio/security"
	"github.com/ringlog/ringlog/netio/security/securitytest"
	"github.com/ringlog/ringlog/netio/wire"
)

// tlsSetup makes a CA, a broker certificate and the client configuration trusting it.
type tlsSetup struct {
	ca       *securitytest.CA
	server   *security.ServerTLS
	clientTL *tls.Config
}

func newTLSSetup(tb testing.TB, clientCA bool) *tlsSetup {
	tb.Helper()
	ca, st := securitytest.ServerTLS(tb, clientCA)
	return &tlsSetup{ca: ca, server: st, clientTL: ca.ClientTLS(tb, "")}
}

// withTLS is a brokertest.Options.Node hook serving TLS with st.
func withTLS(st *security.ServerTLS) func(*node.Config) {
	return func(cfg *node.Config) { cfg.Server.TLS = st.Config() }
}

// TestTLSListener: a broker with TLS serves a TLS client end to end (produce, fetch from
// segment files), refuses plain clients and clients that do not trust its certificate, and
// copies fetched file bytes instead of sendfile (the kernel cannot encrypt a sendfile).
// Asked for the ring driver, it serves TLS on the net driver.
func TestTLSListener(t *testing.T) {
	ts := newTLSSetup(t, false)
	rb := brokertest.Start(t, brokertest.Options{Driver: "ring", ShardListeners: true, Node: withTLS(ts.server),
		Client: client.Config{TLS: ts.clientTL}})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	produceAndFetch(t, ctx, rb.Client, "secured")
	// The server counts the copied bytes after its write returns, which can be after the
	// client has read the reply: wait (bounded) for the count.
	st := rb.Node.Server.Stats()
	for deadline := time.Now().Add(5 * time.Second); st.CopiedFileBytes == 0 && time.Now().Before(deadline); st = rb.Node.Server.Stats() {
		time.Sleep(10 * time.Millisecond)
	}
	if st.TLSHandshakes == 0 || st.CopiedFileBytes == 0 || st.SendfileBytes != 0 {
		t.Fatalf("stats after a TLS fetch: %+v (want handshakes, copied file bytes and no sendfile)", st)
	}

	if c, err := client.New(ctx, client.Config{Broker: rb.Addr, DialTimeout: 5 * time.Second, RequestTimeout: 5 * time.Second}); err == nil {
		c.Close()
		t.Fatal("a plain client completed the handshake with a TLS broker")
	}
	other := securitytest.NewCA(t, t.TempDir(), "other")
	otherTLS, err := security.ClientConfig(security.ClientTLSOptions{CAFile: other.CAFile})
	if err != nil {
		t.Fatal(err)
	}
	if c, err := client.New(ctx, client.Config{Broker: rb.Addr, TLS: otherTLS}); err == nil {
		c.Close()
		t.Fatal("a client trusting another CA connected")
	}
}

// TestMutualTLSListener: with a client CA, a client without a certificate is refused and one
// with a certificate of that CA is served.
func TestMutualTLSListener(t *testing.T) {
	ts := newTLSSetup(t, true)
	cert, key := ts.ca.Issue(t, "alice", "alice")
	alice, err := security.ClientConfig(security.ClientTLSOptions{CAFile: ts.ca.CAFile, CertFile: cert, KeyFile: key})
	if err != nil {
		t.Fatal(err)
	}
	rb := brokertest.Start(t, brokertest.Options{Node: withTLS(ts.server), Client: client.Config{TLS: alice}})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	produceAndFetch(t, ctx, rb.Client, "mutual")
	if c, err := client.New(ctx, client.Config{Broker: rb.Addr, TLS: ts.clientTL}); err == nil {
		c.Close()
		t.Fatal("a client without a certificate passed mutual TLS")
	}
}

// produceAndFetch creates topic, produces one record and fetches it back raw.
func produceAndFetch(t *testing.T, ctx context.Context, c *client.Client, topic string) {
	t.Helper()
	if err := c.CreateTopic(ctx, topic, 1, nil); err != nil {
		t.Fatal(err)
	}
	p := c.NewProducer(client.ProducerConfig{Acks: client.AckLeader})
	if err := p.Send(ctx, &client.Record{Topic: topic, Partition: 0, Value: []byte("over tls")}, nil); err != nil {
		t.Fatal(err)
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	var resp wire.FetchResponse
	req := &wire.FetchRequest{MaxBytes: 1 << 20, Topics: []wire.FetchTopic{{Topic: topic, Partitions: []wire.FetchPartition{{MaxBytes: 1 << 20}}}}}
	if err := c.Call(ctx, c.BrokerAddr(), req, &resp); err != nil {
		t.Fatal(err)
	}
	if p := resp.Topics[0].Partitions[0]; p.ErrorCode != wire.ErrNone || len(p.Records) == 0 {
		t.Fatalf("fetch: %s %q, %d bytes", p.ErrorCode.Name(), p.ErrorMessage, len(p.Records))
	}
}

// BenchmarkBrokerTLS: produce (1 KiB records, acks=1) and 1 MiB raw fetches over plain TCP
// with sendfile egress, over plain TCP with copy egress (pread + write: what TLS must do
// before it encrypts), and over TLS, in one run, so that the cost of losing sendfile and
// the cost of encryption are read off side by side (docs/benchmarks.md).
func BenchmarkBrokerTLS(b *testing.B) {
	ts := newTLSSetup(b, false)
	for _, mode := range []string{"plain", "copy", "tls"} {
		start := func(b *testing.B) *brokertest.Broker {
			switch mode {
			case "plain":
				return brokertest.Start(b, brokertest.Options{})
			case "copy":
				return brokertest.Start(b, brokertest.Options{Egress: netio.EgressCopy})
			}
			return brokertest.Start(b, brokertest.Options{Node: withTLS(ts.server), Client: client.Config{TLS: ts.clientTL}})
		}
		b.Run("produce/"+mode, func(b *testing.B) {
			rb := start(b)
			defer rb.Stop()
			benchProduceOn(b, rb.Client, client.AckLeader)
		})
		b.Run("fetch/"+mode, func(b *testing.B) {
			rb := start(b)
			defer rb.Stop()
			benchFetchOn(b, rb.Client)
		})
	}
}
