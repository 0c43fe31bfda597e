package security_test

import (
	"crypto/tls"
	"net"
	"os"
	"strings"
	"testing"

	"github.com/ringlog/ringlog/netio/security"
	"github.com/ringlog/ringlog/netio/security/securitytest"
)

// handshake dials ln over TLS with cfg and returns the broker certificate's common name.
func handshake(t *testing.T, ln net.Listener, cfg *tls.Config) (string, error) {
	t.Helper()
	c, err := tls.Dial("tcp", ln.Addr().String(), cfg)
	if err != nil {
		return "", err
	}
	defer c.Close()
	// TLS 1.3 reports a refused client certificate on the first read, not in Dial.
	if _, err := c.Write([]byte{1}); err != nil {
		return "", err
	}
	if _, err := c.Read(make([]byte, 1)); err != nil {
		return "", err
	}
	return c.ConnectionState().PeerCertificates[0].Subject.CommonName, nil
}

// serveTLS accepts on a loopback listener with st and echoes one byte per connection,
// sending the connection's principal to principals.
func serveTLS(t *testing.T, st *security.ServerTLS, principals chan<- string) net.Listener {
	t.Helper()
	return serveTLSConfig(t, st.Config(), principals)
}

// serveTLSConfig is serveTLS with a given configuration.
func serveTLSConfig(t *testing.T, cfg *tls.Config, principals chan<- string) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	tln := tls.NewListener(ln, cfg)
	go func() {
		for {
			c, err := tln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				tc := c.(*tls.Conn)
				if err := tc.Handshake(); err != nil {
					return
				}
				if principals != nil {
					principals <- security.TLSPrincipal(tc.ConnectionState())
				}
				b := make([]byte, 1)
				if _, err := c.Read(b); err == nil {
					c.Write(b)
				}
			}()
		}
	}()
	return ln
}

func TestServerTLSReload(t *testing.T) {
	dir := t.TempDir()
	ca := securitytest.NewCA(t, dir, "reload")
	certFile, keyFile := ca.Issue(t, "broker", "broker-one")
	st, err := security.NewServerTLS(security.TLSFiles{CertFile: certFile, KeyFile: keyFile})
	if err != nil {
		t.Fatal(err)
	}
	ln := serveTLS(t, st, nil)
	clientCfg, err := security.ClientConfig(security.ClientTLSOptions{CAFile: ca.CAFile, ServerName: "localhost"})
	if err != nil {
		t.Fatal(err)
	}
	if cn, err := handshake(t, ln, clientCfg); err != nil || cn != "broker-one" {
		t.Fatalf("first handshake: cn %q, err %v", cn, err)
	}

	// A broken file keeps the running certificate.
	if err := os.WriteFile(certFile, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := st.Reload(); err == nil {
		t.Fatal("reload of a broken certificate file succeeded")
	}
	if cn, err := handshake(t, ln, clientCfg); err != nil || cn != "broker-one" {
		t.Fatalf("after a failed reload: cn %q, err %v", cn, err)
	}

	// A new certificate in the same files is served after Reload.
	ca.Issue(t, "broker", "broker-two")
	if err := st.Reload(); err != nil {
		t.Fatal(err)
	}
	if cn, err := handshake(t, ln, clientCfg); err != nil || cn != "broker-two" {
		t.Fatalf("after reload: cn %q, err %v", cn, err)
	}

	// A client that trusts another CA refuses the broker.
	other := securitytest.NewCA(t, dir, "other")
	otherCfg, err := security.ClientConfig(security.ClientTLSOptions{CAFile: other.CAFile, ServerName: "localhost"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := handshake(t, ln, otherCfg); err == nil {
		t.Fatal("a client trusting another CA completed a handshake")
	}
}

func TestMutualTLSPrincipal(t *testing.T) {
	dir := t.TempDir()
	ca := securitytest.NewCA(t, dir, "mtls")
	certFile, keyFile := ca.Issue(t, "broker", "broker")
	aliceCert, aliceKey := ca.Issue(t, "alice", "alice")
	st, err := security.NewServerTLS(security.TLSFiles{CertFile: certFile, KeyFile: keyFile, ClientCAFile: ca.CAFile})
	if err != nil {
		t.Fatal(err)
	}
	principals := make(chan string, 1)
	ln := serveTLS(t, st, principals)

	anonymous, err := security.ClientConfig(security.ClientTLSOptions{CAFile: ca.CAFile, ServerName: "localhost"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := handshake(t, ln, anonymous); err == nil {
		t.Fatal("a client without a certificate passed mutual TLS")
	}
	alice, err := security.ClientConfig(security.ClientTLSOptions{CAFile: ca.CAFile, CertFile: aliceCert, KeyFile: aliceKey, ServerName: "localhost"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := handshake(t, ln, alice); err != nil {
		t.Fatal(err)
	}
	if p := <-principals; p != "User:alice" {
		t.Fatalf("principal %q, want User:alice", p)
	}

	// A certificate from another CA is refused.
	other := securitytest.NewCA(t, dir, "other")
	malloryCert, malloryKey := other.Issue(t, "mallory", "alice")
	mallory, err := security.ClientConfig(security.ClientTLSOptions{CAFile: ca.CAFile, CertFile: malloryCert, KeyFile: malloryKey, ServerName: "localhost"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := handshake(t, ln, mallory); err == nil {
		t.Fatal("a certificate of another CA passed mutual TLS")
	}
}

// TestPeerTLS: brokers of a cluster dial each other with PeerClientConfig (verifying the
// peer against PeerCAFile, presenting their own certificate) and the raft listener's
// PeerServerConfig requires such a certificate; a reload reaches both sides.
func TestPeerTLS(t *testing.T) {
	dir := t.TempDir()
	ca := securitytest.NewCA(t, dir, "peers")
	certFile, keyFile := ca.Issue(t, "broker", "broker-one")
	st, err := security.NewServerTLS(security.TLSFiles{CertFile: certFile, KeyFile: keyFile, PeerCAFile: ca.CAFile})
	if err != nil {
		t.Fatal(err)
	}
	server, err := st.PeerServerConfig()
	if err != nil {
		t.Fatal(err)
	}
	principals := make(chan string, 4)
	ln := serveTLSConfig(t, server, principals)
	dial := func() (string, error) {
		cfg, err := st.PeerClientConfig(ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		return handshake(t, ln, cfg)
	}
	if cn, err := dial(); err != nil || cn != "broker-one" || <-principals != "User:broker-one" {
		t.Fatalf("peer handshake: cn %q, err %v", cn, err)
	}
	// A client without a certificate, or with one of another CA, is refused.
	if _, err := handshake(t, ln, ca.ClientTLS(t, "")); err == nil {
		t.Fatal("the peer listener accepted a client without a certificate")
	}
	other := securitytest.NewCA(t, dir, "other")
	if _, err := handshake(t, ln, &tls.Config{RootCAs: ca.ClientTLS(t, "").RootCAs, Certificates: other.ClientTLS(t, "intruder").Certificates}); err == nil {
		t.Fatal("the peer listener accepted a certificate of another CA")
	}
	// After a reload both the listener and the next dial use the new certificate.
	ca.Issue(t, "broker", "broker-two")
	if err := st.Reload(); err != nil {
		t.Fatal(err)
	}
	if cn, err := dial(); err != nil || cn != "broker-two" || <-principals != "User:broker-two" {
		t.Fatalf("peer handshake after reload: cn %q, err %v", cn, err)
	}
	// Without PeerCAFile there is no peer configuration.
	plain, err := security.NewServerTLS(security.TLSFiles{CertFile: certFile, KeyFile: keyFile})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := plain.PeerClientConfig("127.0.0.1:1"); err != security.ErrNoPeerCA {
		t.Fatalf("peer client config without a CA file: %v", err)
	}
}

// TestPeerCredentialsFile: the inter-broker login file is read, reloaded, refused when
// malformed (the running login stays), and never shows its password.
func TestPeerCredentialsFile(t *testing.T) {
	path := t.TempDir() + "/broker.creds"
	write := func(s string) {
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("broker\nfirst-secret\n")
	f, err := security.OpenPeerCredentials(path, "")
	if err != nil {
		t.Fatal(err)
	}
	if c := f.Current(); c.User != "broker" || c.Password != "first-secret" || c.Mechanism != "SCRAM-SHA-512" {
		t.Fatalf("loaded %+v", c)
	}
	if s := f.Current().String(); strings.Contains(s, "secret") {
		t.Fatalf("String shows the password: %s", s)
	}
	for _, bad := range []string{"", "broker\n", "bad name!\npassword\n"} {
		write(bad)
		if err := f.Reload(); err == nil || strings.Contains(err.Error(), "password\n") {
			t.Errorf("file %q: reload error %v", bad, err)
		}
	}
	if f.Current().Password != "first-secret" {
		t.Fatal("a failed reload replaced the running login")
	}
	write("broker\r\nsecond-secret\r\n")
	if err := f.Reload(); err != nil || f.Current().Password != "second-secret" {
		t.Fatalf("reload: %v, %+v", err, f.Current().User)
	}
	if _, err := security.OpenPeerCredentials(path, "PLAIN"); err == nil {
		t.Fatal("an unknown mechanism was accepted")
	}
}
