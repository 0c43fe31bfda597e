package netio_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ringlog/ringlog/netio"
	"github.com/ringlog/ringlog/netio/internal/brokertest"
	"github.com/ringlog/ringlog/netio/node"
	"github.com/ringlog/ringlog/netio/security"
	"github.com/ringlog/ringlog/netio/security/securitytest"
	"github.com/ringlog/ringlog/netio/wire"
	"github.com/ringlog/ringlog/replication/cluster"
)

// TestPeerDialer: a broker's connections to another broker pass a listener that demands
// TLS and authentication, by its certificate where the listener asks for one (mutual TLS;
// no SASL then, even with credentials) or else by a SCRAM login over TLS; a wrong
// password, no login, a plain dial and a principal without rights on the cluster are
// refused, each with its own error. The listener is a real broker on a real socket; a
// Controller command reaching it proves the connection got past every check (a broker
// outside a cluster answers NOT_CONTROLLER).
func TestPeerDialer(t *testing.T) {
	dir := t.TempDir()
	ca := securitytest.NewCA(t, dir, "brokers")
	cert, key := ca.Issue(t, "broker", "broker")
	otherCert, otherKey := ca.Issue(t, "stranger", "stranger")
	st, err := security.NewServerTLS(security.TLSFiles{CertFile: cert, KeyFile: key, ClientCAFile: ca.CAFile, PeerCAFile: ca.CAFile})
	if err != nil {
		t.Fatal(err)
	}
	stranger, err := security.NewServerTLS(security.TLSFiles{CertFile: otherCert, KeyFile: otherKey, PeerCAFile: ca.CAFile})
	if err != nil {
		t.Fatal(err)
	}
	creds, err := security.OpenCredentials(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	addUser(t, creds, "replicator", testPassword)
	authz, err := security.OpenAuthorizer(t.TempDir(), true, []string{"User:broker", "User:replicator"})
	if err != nil {
		t.Fatal(err)
	}
	// A: mutual TLS, the certificate is the login. B: TLS and SCRAM.
	secured := &netio.Security{Credentials: creds, AuthRequired: true, Authorizer: authz}
	a := brokertest.Start(t, brokertest.Options{NoClient: true, Node: func(cfg *node.Config) {
		cfg.Server.TLS, cfg.Server.Security = st.Config(), secured
	}})
	b := brokertest.Start(t, brokertest.Options{NoClient: true, Node: func(cfg *node.Config) {
		cfg.Server.TLS, cfg.Server.Security = stranger.Config(), secured
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	login := func(password string) func() security.PeerCredentials {
		return func() security.PeerCredentials {
			return security.PeerCredentials{Mechanism: "SCRAM-SHA-256", User: "replicator", Password: password}
		}
	}
	for _, tc := range []struct {
		name   string
		addr   string
		dialer *netio.PeerDialer
		want   func(error) bool
	}{
		{"certificate", a.Addr, &netio.PeerDialer{TLS: st.PeerClientConfig, Credentials: login("unused")}, notController},
		{"certificate without rights on the cluster", a.Addr, &netio.PeerDialer{TLS: stranger.PeerClientConfig},
			func(err error) bool { return errors.Is(err, wire.ErrClusterAuthorizationFailed) }},
		{"plain TCP", a.Addr, &netio.PeerDialer{}, func(err error) bool { return err != nil && !errors.Is(err, wire.ErrNotController) }},
		{"SCRAM over TLS", b.Addr, &netio.PeerDialer{TLS: stranger.PeerClientConfig, Credentials: login(testPassword)}, notController},
		{"wrong password", b.Addr, &netio.PeerDialer{TLS: stranger.PeerClientConfig, Credentials: login("wrong")},
			func(err error) bool { return errors.Is(err, netio.ErrPeerAuthentication) }},
		{"no login", b.Addr, &netio.PeerDialer{TLS: stranger.PeerClientConfig},
			func(err error) bool { return errors.Is(err, wire.ErrSaslAuthenticationFailed) }},
	} {
		err := controllerCommand(ctx, tc.dialer, tc.addr)
		if !tc.want(err) {
			t.Errorf("%s: %v", tc.name, err)
		}
		if err != nil && strings.Contains(err.Error(), testPassword) {
			t.Errorf("%s: the error shows the password", tc.name)
		}
	}
}

func notController(err error) bool { return errors.Is(err, wire.ErrNotController) }

// controllerCommand dials addr with d and submits an empty controller command.
func controllerCommand(ctx context.Context, d *netio.PeerDialer, addr string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	c, err := d.Dial(ctx, addr)
	if err != nil {
		return err
	}
	defer c.Close()
	_, err = c.Controller(ctx, cluster.OpSubmit, 0, []byte("{}"))
	return err
}
