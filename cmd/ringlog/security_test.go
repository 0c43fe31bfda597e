package main

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/ringlog/ringlog/engine/shard"
	"github.com/ringlog/ringlog/netio/node"
	"github.com/ringlog/ringlog/netio/security"
	"github.com/ringlog/ringlog/netio/security/securitytest"
	"github.com/ringlog/ringlog/ring"
)

// startNode runs a real broker (node.Start, as ringlogd) with configure applied, and
// returns its address.
func startNode(t *testing.T, configure func(*node.Config)) string {
	t.Helper()
	cfg := node.Config{
		Core:       shard.Config{DataDir: t.TempDir(), Shards: 1, Ring: ring.Config{Backend: "auto"}},
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
	return n.Addr
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
	if _, err := run(topicList); err == nil {
		t.Fatal("a plain connection to a TLS broker succeeded")
	}
	other := securitytest.NewCA(t, dir, "other")
	if _, err := run(topicList, "--tls-ca", other.CAFile); err == nil {
		t.Fatal("a client trusting another CA connected")
	}
	if _, err := run(topicList, "--tls-cert", cert); err == nil || !strings.Contains(err.Error(), "--tls-key") {
		t.Fatalf("--tls-cert without --tls-key: %v", err)
	}
}
