package main

import (
	"context"
	"crypto/tls"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/ringlog/ringlog/netio/client"
	"github.com/ringlog/ringlog/netio/security"
	"github.com/ringlog/ringlog/netio/security/securitytest"
)

// TestSighupReloadsTLS on the real binary: ringlogd serves TLS with --tls-cert/--tls-key,
// and after the files change and SIGHUP a new connection gets the new certificate.
func TestSighupReloadsTLS(t *testing.T) {
	dir := t.TempDir()
	ca := securitytest.NewCA(t, dir, "sighup")
	cert, key := ca.Issue(t, "broker", "before-reload")
	p, addr := startedAddr(t, "--data", filepath.Join(dir, "data"), "--tls-cert", cert, "--tls-key", key)
	clientTLS, err := security.ClientConfig(security.ClientTLSOptions{CAFile: ca.CAFile, ServerName: "localhost"})
	if err != nil {
		t.Fatal(err)
	}
	served := func() string {
		t.Helper()
		c, err := tls.Dial("tcp", addr, clientTLS)
		if err != nil {
			t.Fatalf("TLS dial: %v", err)
		}
		defer c.Close()
		return c.ConnectionState().PeerCertificates[0].Subject.CommonName
	}
	if cn := served(); cn != "before-reload" {
		t.Fatalf("served %q at start", cn)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.New(ctx, client.Config{Broker: addr, TLS: clientTLS})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.CreateTopic(ctx, "over-tls", 1, nil); err != nil {
		t.Fatal(err)
	}

	ca.Issue(t, "broker", "after-reload")
	p.signal(syscall.SIGHUP)
	p.waitFor(`msg="TLS certificate reloaded"`)
	if cn := served(); cn != "after-reload" {
		t.Fatalf("served %q after SIGHUP", cn)
	}
	if _, err := c.ListTopics(ctx); err != nil { // the open connection keeps working
		t.Fatalf("an open TLS connection after reload: %v", err)
	}
	p.stop()
}
