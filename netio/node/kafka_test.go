package node

import (
	"crypto/tls"
	"errors"
	"testing"

	"github.com/ringlog/ringlog/netio"
	"github.com/ringlog/ringlog/netio/security"
	"github.com/ringlog/ringlog/replication/cluster"
)

// TestKafkaRefusedWhereItWouldBypass: the Kafka listener is refused beside ACLs or quotas
// (it serves neither yet), and allowed otherwise: TLS, required authentication and a
// replicated cluster included (it serves them).
func TestKafkaRefusedWhereItWouldBypass(t *testing.T) {
	for _, tc := range []struct {
		name   string
		cfg    Config
		refuse bool
	}{
		{"plain", Config{KafkaListen: "127.0.0.1:0"}, false},
		{"no kafka, tls", Config{Server: serverWithTLS()}, false},
		{"kafka and tls", Config{KafkaListen: "127.0.0.1:0", Server: serverWithTLS()}, false},
		{"kafka, tls and auth required", Config{KafkaListen: "127.0.0.1:0", Server: withAuth(serverWithTLS())}, false},
		{"kafka and a cluster", Config{KafkaListen: "127.0.0.1:0", Cluster: &cluster.Config{}}, false},
		{"kafka and security off", Config{KafkaListen: "127.0.0.1:0", Server: netio.Config{Security: &netio.Security{}}}, false},
		{"kafka and auth required", Config{KafkaListen: "127.0.0.1:0", Server: netio.Config{Security: &netio.Security{AuthRequired: true}}}, false},
		{"kafka and ACLs", Config{KafkaListen: "127.0.0.1:0", Server: netio.Config{Security: &netio.Security{Authorizer: authorizer(t, true)}}}, true},
		{"kafka and ACLs off", Config{KafkaListen: "127.0.0.1:0", Server: netio.Config{Security: &netio.Security{Authorizer: authorizer(t, false)}}}, false},
		{"kafka and quotas", Config{KafkaListen: "127.0.0.1:0", Server: netio.Config{Security: &netio.Security{
			Quotas: security.NewQuotas(security.QuotaConfig{Default: security.QuotaRates{RequestsPerSec: 10}})}}}, true},
	} {
		err := checkKafka(tc.cfg)
		if tc.refuse != errors.Is(err, ErrKafkaUnsupported) {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
}

func TestClusterRefusedWithTLSOrAuth(t *testing.T) {
	for _, tc := range []struct {
		name   string
		cfg    Config
		refuse bool
	}{
		{"cluster", Config{Cluster: &cluster.Config{}}, false},
		{"tls, no cluster", Config{Server: serverWithTLS()}, false},
		{"cluster and tls", Config{Cluster: &cluster.Config{}, Server: serverWithTLS()}, true},
		{"cluster and auth required", Config{Cluster: &cluster.Config{}, Server: withAuth(netio.Config{})}, true},
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
