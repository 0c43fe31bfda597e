// Package brokertest starts the real broker in-process on loopback for tests and
// benchmarks, through the same constructor ringlogd uses (netio/node.Start): the stack
// ringlogd runs, without the binary. It is a test helper; nothing in the broker imports it.
package brokertest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ringlog/ringlog/engine/shard"
	"github.com/ringlog/ringlog/netio"
	"github.com/ringlog/ringlog/netio/admin"
	"github.com/ringlog/ringlog/netio/client"
	"github.com/ringlog/ringlog/netio/node"
	"github.com/ringlog/ringlog/ring"
)

// Options says what to start. Zero values: 2 shards, a temp dir, the net driver, sendfile.
type Options struct {
	Shards int
	Dir    string
	// Driver is "net" (Go netpoller) or "ring" (connections on the shards' reactors, as
	// ringlogd serves them by default).
	Driver string
	Egress netio.Egress
	// ShardListeners adds one listener per shard, advertised in metadata, as ringlogd's
	// --shard-ports auto does.
	ShardListeners bool
	// Kafka opens the Kafka protocol listener on an ephemeral loopback port (KafkaAddr);
	// KafkaAutoCreateTopics turns on its topic auto-creation.
	Kafka                 bool
	KafkaAutoCreateTopics bool
	// Node, if set, changes the node's configuration before it starts (TLS,
	// authentication, ACLs, quotas).
	Node func(*node.Config)
	// Client is the configuration of b.Client (its Broker is filled in); NoClient starts
	// none, for brokers that refuse the default client.
	Client   client.Config
	NoClient bool
	// Groups configures the group coordinators (tests lower the session timeout bounds).
	Groups shard.GroupsConfig
	// Admin starts the admin HTTP listener (metrics, health, JSON API) on a loopback port
	// with this configuration (its Listen is set); nil leaves it off.
	Admin *admin.Config
}

// Broker is a running in-process broker with a client connected to it.
type Broker struct {
	Core       *shard.Broker
	Node       *node.Node
	Addr       string
	ShardAddrs []string
	KafkaAddr  string
	Client     *client.Client

	stopped bool
	tb      testing.TB
}

// Start starts a broker; it stops at the test's cleanup, or earlier with Stop.
func Start(tb testing.TB, o Options) *Broker {
	tb.Helper()
	if o.Shards == 0 {
		o.Shards = 2
	}
	if o.Dir == "" {
		o.Dir = tb.TempDir()
	}
	cfg := node.Config{
		Core:       shard.Config{DataDir: o.Dir, Shards: o.Shards, Ring: ring.Config{Backend: "auto"}, Groups: o.Groups},
		Listen:     "127.0.0.1:0",
		ShardPorts: node.ShardPortsOff,
		Net:        node.NetGo,
		Server:     netio.Config{Egress: o.Egress},
	}
	if o.ShardListeners {
		cfg.ShardPorts = node.ShardPortsAuto
	}
	if o.Driver == "ring" {
		cfg.Net = node.NetRing
	}
	if o.Kafka {
		cfg.KafkaListen, cfg.KafkaAutoCreateTopics = "127.0.0.1:0", o.KafkaAutoCreateTopics
	}
	if o.Admin != nil {
		cfg.Admin = *o.Admin
		cfg.Admin.Listen = "127.0.0.1:0"
	}
	if o.Node != nil {
		o.Node(&cfg)
	}
	n, err := node.Start(cfg)
	if errors.Is(err, node.ErrRingDriverUnavailable) {
		tb.Skipf("ring driver unavailable here: %v", err)
	}
	if err != nil {
		tb.Fatal(err)
	}
	b := &Broker{Core: n.Core, Node: n, Addr: n.Addr, ShardAddrs: n.ShardAddrs, KafkaAddr: n.KafkaAddr, tb: tb}
	if !o.NoClient {
		o.Client.Broker = b.Addr
		if b.Client, err = client.New(context.Background(), o.Client); err != nil {
			b.Stop()
			tb.Fatal(err)
		}
	}
	tb.Cleanup(b.Stop)
	return b
}

// Stop closes the client and shuts the broker down (once).
func (b *Broker) Stop() {
	if b.stopped {
		return
	}
	b.stopped = true
	if b.Client != nil {
		b.Client.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.Node.Shutdown(ctx); err != nil {
		b.tb.Errorf("shut the broker down: %v", err)
	}
}
