// Package brokertest starts the real broker core (engine/shard behind netio.BrokerHandler)
// in-process on loopback for tests and benchmarks: the stack ringlogd runs, without the
// binary. It is a test helper; nothing in the broker imports it.
package brokertest

import (
	"context"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/ringlog/ringlog/engine/shard"
	"github.com/ringlog/ringlog/netio"
	"github.com/ringlog/ringlog/netio/client"
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
	// --shard-ports does (ring driver only).
	ShardListeners bool
}

// Broker is a running in-process broker with a client connected to it.
type Broker struct {
	Core       *shard.Broker
	Addr       string
	ShardAddrs []string
	Client     *client.Client

	srv     *netio.Server
	served  chan error
	lns     []net.Listener
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
	core, err := shard.Open(shard.Config{DataDir: o.Dir, Shards: o.Shards, Ring: ring.Config{Backend: "auto"},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		tb.Fatal(err)
	}
	b := &Broker{Core: core, served: make(chan error, 1), tb: tb}
	main, err := netio.ListenShard(context.Background(), "127.0.0.1:0")
	if err != nil {
		core.Close()
		tb.Fatal(err)
	}
	b.Addr = main.Addr().String()
	b.lns = append(b.lns, main)
	if o.ShardListeners {
		for i := 0; i < o.Shards; i++ {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Stop()
				tb.Fatal(err)
			}
			b.lns = append(b.lns, ln)
			b.ShardAddrs = append(b.ShardAddrs, ln.Addr().String())
		}
	}
	handler := netio.NewBrokerHandler(core, b.Addr).WithShardAddresses(b.ShardAddrs)
	b.srv = netio.NewServer(handler, netio.Config{Egress: o.Egress})
	if o.Driver == "ring" {
		for i, ln := range b.lns {
			si, tl := max(i-1, 0), ln.(*net.TCPListener)
			if err := core.Exec(si, func(r *ring.Reactor) error { return b.srv.ServeRing(r, tl, si) }); err != nil {
				b.Stop()
				tb.Skipf("ring driver unavailable here: %v", err)
			}
		}
		close(b.served)
	} else {
		go func() { b.served <- b.srv.Serve(main, 0) }()
	}
	if b.Client, err = client.New(context.Background(), client.Config{Broker: b.Addr}); err != nil {
		b.Stop()
		tb.Fatal(err)
	}
	tb.Cleanup(b.Stop)
	return b
}

// Stop closes the client, shuts the server down and closes the broker (once).
func (b *Broker) Stop() {
	if b.stopped {
		return
	}
	b.stopped = true
	if b.Client != nil {
		b.Client.Close()
	}
	if b.srv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		b.srv.Shutdown(ctx)
		<-b.served
	}
	for _, ln := range b.lns {
		ln.Close()
	}
	if err := b.Core.Close(); err != nil {
		b.tb.Errorf("close broker: %v", err)
	}
}
