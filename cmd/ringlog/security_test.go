package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ringlog/ringlog/engine/shard"
	"github.com/ringlog/ringlog/netio"
	"github.com/ringlog/ringlog/netio/node"
	"github.com/ringlog/ringlog/netio/security"
	"github.com/ringlog/ringlog/netio/security/securitytest"
	"github.com/ringlog/ringlog/netio/wire"
	"github.com/ringlog/ringlog/ring"
)

// startNode runs a real broker (node.Start, as ringlogd) with configure applied, and
// returns its address.
func startNode(t *testing.T, configure func(*node.Config)) string {
	t.Helper()
	var addr string
	startNodeIn(t, t.TempDir(), configure, &addr)
	return addr
}

// startNodeIn is startNode on data directory dir, setting *addr.
func startNodeIn(t *testing.T, dir string, configure func(*node.Config), addr *string) {
	t.Helper()
	cfg := node.Config{
		Core:       shard.Config{DataDir: dir, Shards: 1, Ring: ring.Config{Backend: "auto"}},
		Listen:     "127.0.0.1:0",
		ShardPorts: node.ShardPortsOff,
		Net:        node.NetGo,
	}
	configure(&cfg)
	n, err := node.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := n.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	*addr = n.Addr
}

// TestCLIOverTLS: the TLS flags of every broker-facing command reach the broker; without
// them, or trusting another CA, the command fails to connect.
func TestCLIOverTLS(t *testing.T) {
	dir := t.TempDir()
	ca := securitytest.NewCA(t, dir, "cli")
	cert, key := ca.Issue(t, "broker", "localhost")
	st, err := security.NewServerTLS(security.TLSFiles{CertFile: cert, KeyFile: key})
	if err != nil {
		t.Fatal(err)
	}
	addr := startNode(t, func(cfg *node.Config) { cfg.Server.TLS = st.Config() })
	run := func(fn func(string, []string, io.Writer) error, args ...string) (string, error) {
		var out bytes.Buffer
		err := fn("", append(args, "--broker", addr), &out)
		return out.String(), err
	}
	if out, err := run(topicCreate, "secured", "--tls-ca", ca.CAFile); err != nil || !strings.Contains(out, "created topic secured") {
		t.Fatalf("create over TLS: %q %v", out, err)
	}
	if out, err := run(topicList, "--tls-insecure-skip-verify"); err != nil || !strings.Contains(out, "secured") {
		t.Fatalf("list over TLS without verification: %q %v", out, err)
	}
	if _, err := run(topicList); err == nil || !strings.Contains(err.Error(), "if it serves TLS, ringlogd --tls-cert, give --tls-ca") {
		t.Fatalf("a plain connection to a TLS broker: %v (want the hint to give --tls-ca)", err)
	}
	other := securitytest.NewCA(t, dir, "other")
	if _, err := run(topicList, "--tls-ca", other.CAFile); err == nil {
		t.Fatal("a client trusting another CA connected")
	}
	if _, err := run(topicList, "--tls-cert", cert); err == nil || !strings.Contains(err.Error(), "--tls-key") {
		t.Fatalf("--tls-cert without --tls-key: %v", err)
	}
}

// TestUserAndACLCommands: the first user is written offline (--data, refused while a
// broker holds the directory); a broker with --auth required and --acl on then lets that
// super-user log in with --sasl-user, add a second user and grant it a topic; the second
// user sees and reads only that topic, and cannot administer anything.
func TestUserAndACLCommands(t *testing.T) {
	dir := t.TempDir()
	pwFile := func(name, password string) string {
		path := filepath.Join(t.TempDir(), name)
		if err := os.WriteFile(path, []byte(password+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	adminPW := pwFile("admin", "admin-secret")
	run := func(fn func(string, []string, io.Writer) error, args ...string) (string, error) {
		var out bytes.Buffer
		err := fn("", args, &out)
		return out.String(), err
	}
	// A data directory no broker has created yet: said so, with what to do (it was "open data
	// dir lock: open DIR/.lock: no such file or directory").
	missing := filepath.Join(dir, "not-yet")
	if _, err := run(userAdd, "admin", "--data", missing, "--password-file", adminPW); err == nil || !strings.Contains(err.Error(), "data directory "+missing+" does not exist: create it first (mkdir -p "+missing) {
		t.Errorf("user add --data on a missing directory: %v", err)
	}
	if out, err := run(userAdd, "admin", "--data", dir, "--password-file", adminPW, "--iterations", "4096"); err != nil || !strings.Contains(out, "set user admin") {
		t.Fatalf("offline user add: %q %v", out, err)
	}
	if out, err := run(userList, "--data", dir); err != nil || !regexpMatch(`(?m)^admin\s+SCRAM-SHA-512 \(4096 iterations\), SCRAM-SHA-256 \(4096 iterations\)`, out) {
		t.Fatalf("offline user list: %q %v", out, err)
	}
	data, err := os.ReadFile(filepath.Join(dir, security.CredentialsFile))
	if err != nil || strings.Contains(string(data), "admin-secret") {
		t.Fatalf("credentials file: %v (holds the password: %v)", err, strings.Contains(string(data), "admin-secret"))
	}

	var addr string
	startNodeIn(t, dir, func(cfg *node.Config) {
		creds, err := security.OpenCredentials(dir)
		if err != nil {
			t.Fatal(err)
		}
		authz, err := security.OpenAuthorizer(dir, true, []string{"User:admin"})
		if err != nil {
			t.Fatal(err)
		}
		cfg.Server.Security = &netio.Security{Credentials: creds, AuthRequired: true, Authorizer: authz}
	}, &addr)
	if _, err := run(userAdd, "x", "--data", dir, "--password-file", adminPW); !errors.Is(err, shard.ErrDataDirInUse) {
		t.Fatalf("offline user add with the broker running: %v", err)
	}
	as := func(user, pw string) []string {
		return []string{"--broker", addr, "--sasl-user", user, "--sasl-password-file", pw, "--sasl-mechanism", "SCRAM-SHA-256"}
	}
	admin := as("admin", adminPW)
	alicePW := pwFile("alice", "alice-secret")
	steps := []struct {
		fn   func(string, []string, io.Writer) error
		args []string
		want string
	}{
		{userAdd, append([]string{"alice", "--password-file", alicePW}, admin...), "set user alice"},
		{userList, admin, "alice"},
		{topicCreate, append([]string{"visible"}, admin...), "created topic visible"},
		{topicCreate, append([]string{"hidden"}, admin...), "created topic hidden"},
		{aclAdd, append([]string{"--principal", "User:alice", "--topic", "vis", "--prefixed", "--operation", "read,describe"}, admin...), "added allow User:alice topic:vis prefixed read"},
		{aclList, append([]string{"--principal", "User:alice"}, admin...), "User:alice  allow       describe   topic     vis   prefixed"},
	}
	for _, s := range steps {
		if out, err := run(s.fn, s.args...); err != nil || !strings.Contains(out, s.want) {
			t.Fatalf("%v: %q %v (want %q)", s.args, out, err, s.want)
		}
	}
	alice := as("alice", alicePW)
	out, err := run(topicList, alice...)
	if err != nil || !strings.Contains(out, "visible") || strings.Contains(out, "hidden") {
		t.Fatalf("alice's topic list: %q %v (want visible only)", out, err)
	}
	if _, err := run(userList, alice...); !errors.Is(err, wire.ErrClusterAuthorizationFailed) {
		t.Fatalf("alice lists users: %v", err)
	}
	if _, err := run(aclAdd, append([]string{"--principal", "User:alice", "--topic", "hidden", "--operation", "all"}, alice...)...); !errors.Is(err, wire.ErrClusterAuthorizationFailed) {
		t.Fatalf("alice grants herself: %v", err)
	}
	if _, err := run(topicList, as("alice", adminPW)...); err == nil || !strings.Contains(err.Error(), "SASL_AUTHENTICATION_FAILED") {
		t.Fatalf("wrong password: %v", err)
	}
	if out, err := run(aclRemove, append([]string{"--principal", "User:alice"}, admin...)...); err != nil || strings.Count(out, "removed") != 2 {
		t.Fatalf("acl remove: %q %v", out, err)
	}
	if out, err := run(userRemove, append([]string{"alice"}, admin...)...); err != nil || !strings.Contains(out, "removed user alice") {
		t.Fatalf("user remove: %q %v", out, err)
	}
	if _, err := run(topicList, alice...); err == nil {
		t.Fatal("a removed user logged in")
	}
}
