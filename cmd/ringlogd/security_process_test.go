package main

import (
	"context"
	"crypto/tls"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ringlog/ringlog/netio/client"
	"github.com/ringlog/ringlog/netio/security"
	"github.com/ringlog/ringlog/netio/security/scram"
	"github.com/ringlog/ringlog/netio/security/securitytest"
	"github.com/ringlog/ringlog/netio/wire"
)

// TestSighupReloadsTLS on the real binary: ringlogd serves TLS with --tls-cert/--tls-key on
// its client, Kafka and admin listeners, and after the files change and SIGHUP a new
// connection to any of them gets the new certificate.
func TestSighupReloadsTLS(t *testing.T) {
	dir := t.TempDir()
	ca := securitytest.NewCA(t, dir, "sighup")
	cert, key := ca.Issue(t, "broker", "before-reload")
	p, started := startedLine(t, "--data", filepath.Join(dir, "data"), "--tls-cert", cert, "--tls-key", key, "--kafka-listen", "127.0.0.1:0")
	addr := startedField(t, started, "listen")
	listeners := map[string]string{"client": addr}
	for _, name := range []string{"admin", "kafka"} {
		listeners[name] = startedField(t, started, name)
	}
	clientTLS, err := security.ClientConfig(security.ClientTLSOptions{CAFile: ca.CAFile, ServerName: "localhost"})
	if err != nil {
		t.Fatal(err)
	}
	served := func(addr string) string {
		t.Helper()
		c, err := tls.Dial("tcp", addr, clientTLS)
		if err != nil {
			t.Fatalf("TLS dial %s: %v", addr, err)
		}
		defer c.Close()
		return c.ConnectionState().PeerCertificates[0].Subject.CommonName
	}
	for name, addr := range listeners {
		if cn := served(addr); cn != "before-reload" {
			t.Fatalf("%s listener served %q at start", name, cn)
		}
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
	for name, addr := range listeners {
		if cn := served(addr); cn != "after-reload" {
			t.Fatalf("%s listener served %q after SIGHUP", name, cn)
		}
	}
	if _, err := c.ListTopics(ctx); err != nil { // the open connection keeps working
		t.Fatalf("an open TLS connection after reload: %v", err)
	}
	p.stop()
}

// TestAuthRequiredBinary on the real binary with --auth required --acl on: the user made
// in the data directory logs in, a wrong password and an unauthenticated client are
// refused, and the broker's whole log (at debug level) holds neither the password nor
// any stored salt or key.
func TestAuthRequiredBinary(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	if err := os.MkdirAll(data, 0o755); err != nil {
		t.Fatal(err)
	}
	const password = "binary-test-password-42"
	creds, err := security.OpenCredentials(data)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range scram.Mechanisms {
		salt := scram.NewSalt()
		if err := creds.Set("admin", m, salt, scram.IterationsMin, m.SaltPassword(password, salt, scram.IterationsMin)); err != nil {
			t.Fatal(err)
		}
	}
	p, addr := startedAddr(t, "--data", data, "--auth", "required", "--acl", "on", "--super-users", "User:admin", "--log-level", "debug")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.New(ctx, client.Config{Broker: addr, SASL: &client.SASLConfig{User: "admin", Password: password}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.CreateTopic(ctx, "guarded", 1, nil); err != nil {
		t.Fatal(err)
	}
	if bad, err := client.New(ctx, client.Config{Broker: addr, SASL: &client.SASLConfig{User: "admin", Password: password + "x"}}); err == nil {
		bad.Close()
		t.Fatal("a wrong password logged in")
	}
	anon, err := client.New(ctx, client.Config{Broker: addr})
	if err != nil {
		t.Fatal(err)
	}
	defer anon.Close()
	if _, err := anon.ListTopics(ctx); !errors.Is(err, wire.ErrSaslAuthenticationFailed) {
		t.Fatalf("unauthenticated: %v", err)
	}
	p.stop()
	p.mu.Lock()
	logged := strings.Join(p.log, "\n") // every line since start
	p.mu.Unlock()
	if !strings.Contains(logged, `SASL authentication failed for user \"admin\"`) && !strings.Contains(logged, `SASL authentication failed for user "admin"`) {
		t.Errorf("the failed login is not in the log:\n%s", logged)
	}
	file, err := os.ReadFile(filepath.Join(data, security.CredentialsFile))
	if err != nil {
		t.Fatal(err)
	}
	secrets := []string{password}
	for _, field := range regexp.MustCompile(`"(?:salt|stored_key|server_key)": "([^"]+)"`).FindAllStringSubmatch(string(file), -1) {
		secrets = append(secrets, field[1])
	}
	if len(secrets) != 7 {
		t.Fatalf("found %d secrets in the credentials file, want the password and 6", len(secrets))
	}
	for _, s := range secrets {
		if strings.Contains(logged, s) {
			t.Fatalf("the broker log holds a secret (%d bytes)", len(s))
		}
	}
}

// TestSighupReloadsQuotas on the real binary: a changed quota key in the config file is
// applied on SIGHUP without a restart, a bad override is refused and the running quotas
// stay.
func TestSighupReloadsQuotas(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "ringlogd.yaml")
	write := func(text string) {
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	base := "data: " + filepath.Join(dir, "data") + "\n"
	write(base + "quota-produce-bytes-per-sec: 0\n")
	p, _ := startedAddr(t, "--config", path)
	write(base + "quota-produce-bytes-per-sec: 1048576\nquota-overrides: \"User:etl=produce:10485760\"\n")
	p.signal(syscall.SIGHUP)
	line, _ := p.waitFor(`msg="quotas reloaded"`)
	if !strings.Contains(line, "produce_bytes_per_sec=1048576") || !strings.Contains(line, "overrides=1") {
		t.Fatalf("reload line: %s", line)
	}
	write(base + "quota-overrides: \"etl=produce:1\"\n")
	p.signal(syscall.SIGHUP)
	if line, _ := p.waitFor("configuration reload failed"); !strings.Contains(line, "quota-overrides") {
		t.Fatalf("bad override: %s", line)
	}
	p.stop()
}
