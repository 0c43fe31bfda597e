package kafka_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ringlog/ringlog/netio"
	"github.com/ringlog/ringlog/netio/internal/brokertest"
	"github.com/ringlog/ringlog/netio/node"
	"github.com/ringlog/ringlog/netio/security"
	"github.com/ringlog/ringlog/netio/security/securitytest"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl"
	kscram "github.com/twmb/franz-go/pkg/sasl/scram"
)

const (
	saslUser     = "alice"
	saslPassword = "correct-horse-7f3a"
	wrongPass    = "wrong-battery-91c2"
)

// lockedBuffer is the broker's log, written by its goroutines and read by the test.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// startKafkaSASL starts a broker that requires authentication, with user saslUser (both
// SCRAM mechanisms) and its log in log; tune changes the node further (TLS).
func startKafkaSASL(t *testing.T, log *lockedBuffer, tune func(*node.Config)) *brokertest.Broker {
	t.Helper()
	creds, err := security.OpenCredentials(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	securitytest.AddUser(t, creds, saslUser, saslPassword)
	return startKafka(t, brokertest.Options{NoClient: true, Node: func(cfg *node.Config) {
		cfg.Server.Security = &netio.Security{Credentials: creds, AuthRequired: true}
		cfg.Logger = slog.New(slog.NewTextHandler(log, nil))
		if tune != nil {
			tune(cfg)
		}
	}})
}

// refusedKgo asserts that cl's Metadata request fails (the broker refused the login or
// the request before it).
func refusedKgo(t *testing.T, name string, cl *kgo.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl); err == nil {
		t.Fatalf("%s: Metadata answered by a broker that requires authentication", name)
	}
}

// TestKgoSASLSCRAM: with --auth required, kgo logging in by SCRAM-SHA-256 or -512 with the
// right password produces and consumes; with a wrong password, an unknown user or no
// login it is refused; the broker's log names the failed user and never a password.
func TestKgoSASLSCRAM(t *testing.T) {
	log := &lockedBuffer{}
	b := startKafkaSASL(t, log, nil)
	for _, mech := range []struct {
		name string
		as   func(kscram.Auth) sasl.Mechanism
	}{
		{"SCRAM-SHA-256", kscram.Auth.AsSha256Mechanism},
		{"SCRAM-SHA-512", kscram.Auth.AsSha512Mechanism},
	} {
		login := kgo.SASL(mech.as(kscram.Auth{User: saslUser, Pass: saslPassword}))
		cl := newClient(t, b, login)
		topic := "sasl-" + strings.ToLower(mech.name)
		createTopic(t, cl, topic, 1)
		if err := cl.ProduceSync(testContext(t), &kgo.Record{Topic: topic, Value: []byte(mech.name)}).FirstErr(); err != nil {
			t.Fatalf("%s: produce: %v", mech.name, err)
		}
		if r := consume(t, b, topic, 1, login); string(r[0].Value) != mech.name {
			t.Fatalf("%s: consumed %q", mech.name, r[0].Value)
		}
		refusedKgo(t, mech.name+" wrong password", newClient(t, b, kgo.RequestRetries(0),
			kgo.SASL(mech.as(kscram.Auth{User: saslUser, Pass: wrongPass}))))
		refusedKgo(t, mech.name+" unknown user", newClient(t, b, kgo.RequestRetries(0),
			kgo.SASL(mech.as(kscram.Auth{User: "mallory", Pass: saslPassword}))))
	}
	refusedKgo(t, "no login", newClient(t, b, kgo.RequestRetries(0)))

	logged := log.String()
	for _, secret := range []string{saslPassword, wrongPass} {
		if strings.Contains(logged, secret) {
			t.Fatalf("the broker log contains a password:\n%s", logged)
		}
	}
	for _, want := range []string{`SASL authentication failed for user \"alice\"`, `SASL authentication failed for user \"mallory\"`, "before authenticating"} {
		if !strings.Contains(logged, want) {
			t.Errorf("the broker log lacks %q:\n%s", want, logged)
		}
	}
}

// TestKafkaRequestBeforeLogin: under --auth required, ApiVersions is answered before
// login; any other request gets SASL_AUTHENTICATION_FAILED and the connection closes; a
// SaslHandshake naming a mechanism not offered gets UNSUPPORTED_SASL_MECHANISM with the
// list and the connection closes.
func TestKafkaRequestBeforeLogin(t *testing.T) {
	b := startKafkaSASL(t, &lockedBuffer{}, nil)

	c := dialRaw(t, b.KafkaAddr)
	c.send(18, 0, 1, nil) // ApiVersions v0
	if _, body, err := c.recv(); err != nil || binary.BigEndian.Uint16(body) != 0 {
		t.Fatalf("ApiVersions before login: %x, %v", body, err)
	}
	c.send(16, 0, 2, nil) // ListGroups v0: int16 error code first
	_, body, err := c.recv()
	if err != nil || int16(binary.BigEndian.Uint16(body)) != kerr.SaslAuthenticationFailed.Code {
		t.Fatalf("ListGroups before login: %x, %v; want SASL_AUTHENTICATION_FAILED", body, err)
	}
	if _, _, err := c.recv(); err == nil {
		t.Fatal("the connection stayed open after a request before login")
	}

	c = dialRaw(t, b.KafkaAddr)
	hs := kmsg.NewPtrSASLHandshakeRequest()
	hs.Version, hs.Mechanism = 1, "PLAIN"
	c.send(17, 1, 3, hs.AppendTo(nil))
	_, body, err = c.recv()
	if err != nil {
		t.Fatal(err)
	}
	resp := kmsg.NewPtrSASLHandshakeResponse()
	resp.Version = 1
	if err := resp.ReadFrom(body); err != nil {
		t.Fatal(err)
	}
	if resp.ErrorCode != kerr.UnsupportedSaslMechanism.Code || strings.Join(resp.SupportedMechanisms, ",") != "SCRAM-SHA-512,SCRAM-SHA-256" {
		t.Fatalf("SaslHandshake PLAIN: code %d, mechanisms %v", resp.ErrorCode, resp.SupportedMechanisms)
	}
	if _, _, err := c.recv(); err == nil {
		t.Fatal("the connection stayed open after an unsupported mechanism")
	}
}

// TestKgoSASLMutualTLS: under --auth required with mutual TLS, a client certificate is the
// login: kgo with one and no SASL is served.
func TestKgoSASLMutualTLS(t *testing.T) {
	ca, st := securitytest.ServerTLS(t, true)
	b := startKafkaSASL(t, &lockedBuffer{}, func(cfg *node.Config) { cfg.Server.TLS = st.Config() })
	cl := newClient(t, b, kgo.DialTLSConfig(ca.ClientTLS(t, "kgo")))
	createTopic(t, cl, "sasl-mtls", 1)
	if err := cl.ProduceSync(testContext(t), &kgo.Record{Topic: "sasl-mtls", Value: []byte("cert")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkKafkaSASLLogin: a new kgo client's first request on the loopback Kafka
// listener, plain (connect, ApiVersions, Metadata) and with a SCRAM-SHA-256 or -512 login
// before it (SaslHandshake, two SaslAuthenticate round trips; the user's secret is salted
// at the minimum 4096 iterations, which the client computes once per login).
func BenchmarkKafkaSASLLogin(b *testing.B) {
	creds, err := security.OpenCredentials(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	securitytest.AddUser(b, creds, saslUser, saslPassword)
	broker := brokertest.Start(b, brokertest.Options{Kafka: true, NoClient: true, Node: func(cfg *node.Config) {
		cfg.Server.Security = &netio.Security{Credentials: creds}
	}})
	auth := kscram.Auth{User: saslUser, Pass: saslPassword}
	for _, mode := range []struct {
		name string
		opts []kgo.Opt
	}{
		{"plain", nil},
		{"scram-sha-256", []kgo.Opt{kgo.SASL(auth.AsSha256Mechanism())}},
		{"scram-sha-512", []kgo.Opt{kgo.SASL(auth.AsSha512Mechanism())}},
	} {
		b.Run(mode.name, func(b *testing.B) {
			b.ReportAllocs()
			ctx := context.Background()
			for b.Loop() {
				cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(broker.KafkaAddr)}, mode.opts...)...)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl); err != nil {
					b.Fatal(err)
				}
				cl.Close()
			}
		})
	}
}
