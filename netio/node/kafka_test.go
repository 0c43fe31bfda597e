package node

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/ringlog/ringlog/engine/shard"
	"github.com/ringlog/ringlog/netio"
	"github.com/ringlog/ringlog/netio/security"
	"github.com/ringlog/ringlog/replication/cluster"
	"github.com/ringlog/ringlog/replication/controller"
	"github.com/ringlog/ringlog/ring"
)

// TestKafkaStartsWithACLsAndQuotas: a node with --kafka-listen beside ACLs and quotas
// starts, and its Kafka listener accepts connections.
func TestKafkaStartsWithACLsAndQuotas(t *testing.T) {
	n, err := Start(Config{
		Core:        shard.Config{DataDir: t.TempDir(), Shards: 1, Ring: ring.Config{Backend: "auto"}},
		Listen:      "127.0.0.1:0",
		KafkaListen: "127.0.0.1:0",
		ShardPorts:  ShardPortsOff,
		Net:         NetGo,
		Server: netio.Config{Security: &netio.Security{Authorizer: authorizer(t, true),
			Quotas: security.NewQuotas(security.QuotaConfig{Default: security.QuotaRates{ProduceBytesPerSec: 1 << 20}})}},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		n.Shutdown(ctx)
	}()
	if n.Kafka == nil || n.KafkaAddr == "" {
		t.Fatalf("no Kafka listener: %+v", n)
	}
	c, err := net.DialTimeout("tcp", n.KafkaAddr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
}

// TestClusterRefusedWithoutPeerSecurity: a cluster is refused when its brokers could not
// pass each other's listeners: TLS listeners without TLS dials (or a plain raft
// transport), required authentication with neither a login nor a TLS certificate.
func TestClusterRefusedWithoutPeerSecurity(t *testing.T) {
	tlsDial := &netio.PeerDialer{TLS: func(string) (*tls.Config, error) { return &tls.Config{}, nil }}
	login := &netio.PeerDialer{Credentials: func() security.PeerCredentials { return security.PeerCredentials{} }}
	raftTLS := &cluster.Config{RaftTLS: &controller.TransportTLS{}}
	for _, tc := range []struct {
		name   string
		cfg    Config
		refuse bool
	}{
		{"cluster", Config{Cluster: &cluster.Config{}}, false},
		{"tls, no cluster", Config{Server: serverWithTLS()}, false},
		{"cluster and tls, plain dials", Config{Cluster: raftTLS, Server: serverWithTLS()}, true},
		{"cluster and tls, plain raft", Config{Cluster: &cluster.Config{}, Server: serverWithTLS(), PeerDialer: tlsDial}, true},
		{"cluster and tls everywhere", Config{Cluster: raftTLS, Server: serverWithTLS(), PeerDialer: tlsDial}, false},
		{"cluster and auth required, no login", Config{Cluster: &cluster.Config{}, Server: withAuth(netio.Config{})}, true},
		{"cluster and auth required, login", Config{Cluster: &cluster.Config{}, Server: withAuth(netio.Config{}), PeerDialer: login}, false},
		{"cluster, tls and auth required, certificate", Config{Cluster: raftTLS, Server: withAuth(serverWithTLS()), PeerDialer: tlsDial}, false},
		{"cluster and security off", Config{Cluster: &cluster.Config{}, Server: netio.Config{Security: &netio.Security{}}}, false},
	} {
		if err := checkCluster(tc.cfg); tc.refuse != errors.Is(err, ErrClusterUnsupported) {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
}

func authorizer(t *testing.T, enabled bool) *security.Authorizer {
	a, err := security.OpenAuthorizer(t.TempDir(), enabled, nil)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func withAuth(c netio.Config) netio.Config {
	c.Security = &netio.Security{AuthRequired: true}
	return c
}

func serverWithTLS() (c netio.Config) {
	c.TLS = &tls.Config{}
	return c
}
