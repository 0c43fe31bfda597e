// Package node assembles one running broker: the broker core (engine/shard), the ringlog
// protocol server (netio) on the shards' rings or on Go's netpoller, its listeners (the
// main address and the optional per-shard addresses advertised in metadata), the optional
// Kafka protocol listener (netio/kafka) under the same limits, their orderly shutdown, and
// the admin HTTP listener (netio/admin: metrics, health, the JSON API) when Config.Admin
// names an address. It is the one constructor of a broker: cmd/ringlogd and every
// in-process test broker (netio/internal/brokertest) go through Start, so the stack under
// test is the stack that ships.
//
// Later pieces of a node (replication fetchers, the controller, the group coordinator)
// are wired here too, through the seams engine/shard defines; the core never imports them.
//
// It owns no logic of its own beyond wiring: request handling lives in netio, partition
// state in engine/shard.
package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"

	"github.com/ringlog/ringlog/engine/shard"
	"github.com/ringlog/ringlog/netio"
	"github.com/ringlog/ringlog/netio/admin"
	"github.com/ringlog/ringlog/netio/kafka"
	"github.com/ringlog/ringlog/replication/cluster"
	"github.com/ringlog/ringlog/ring"
)

// Network drivers.
const (
	// NetRing accepts, receives and sends on each shard's io_uring loop (the default).
	NetRing = "ring"
	// NetGo serves connections on Go's netpoller goroutines; every request crosses a
	// mailbox to reach its shard. It exists to measure against.
	NetGo = "go"
)

// ShardPortsAuto and ShardPortsOff are the non-numeric values of Config.ShardPorts.
const (
	ShardPortsAuto = "auto"
	ShardPortsOff  = "off"
)

// ErrRingDriverUnavailable wraps the failure to serve connections on a shard's ring (for
// example when the shards fell back to plain system calls).
var ErrRingDriverUnavailable = errors.New("ring network driver unavailable")

// Config says what to start.
type Config struct {
	// Core configures the broker core (data dir, shards, pinning, storage defaults).
	Core shard.Config
	// Listen is the main address (host:port; port 0 picks one). Every shard accepts on it.
	Listen string
	// ShardPorts is "auto" (one ephemeral port per shard on the Listen host), "off", or a
	// base port (shard i on base+i). Per-shard addresses are advertised in metadata so a
	// shard-aware client reaches a partition's owner directly. Empty means off.
	ShardPorts string
	// Advertise is the host clients are told to connect to; empty means the Listen host.
	Advertise string
	// Net is NetRing (default) or NetGo. With Server.TLS set it is always NetGo: TLS
	// connections take the net driver (netio.ErrRingTLS).
	Net string
	// Server configures the protocol server (frame and connection limits, egress). Its
	// Shards is set to the core's; FetchFilesPerConnMax and FetchFilesPerAddressMax
	// default to min(256, FetchFilesMax/16) and FetchFilesMax/4 of the core's quota.
	Server netio.Config
	// FetchResponseBytesMax caps a fetch response's records; 0 means
	// netio.FetchResponseBytesMaxDefault.
	FetchResponseBytesMax int64
	// Admin configures the admin HTTP listener (metrics, health, the JSON API); an empty
	// Admin.Listen leaves it off.
	Admin admin.Config
	// Logger receives start-up and shutdown lines; nil discards them.
	Logger *slog.Logger
	// KafkaListen, if set, opens the Kafka protocol listener (netio/kafka) on this address,
	// served by the same core under the same limits as the ringlog protocol, and with
	// Server.TLS over TLS.
	KafkaListen string
	// KafkaAdvertise is the host:port Kafka clients are told to connect to; empty means the
	// bound KafkaListen address (with Advertise's host when that is set).
	KafkaAdvertise string
	// KafkaAutoCreateTopics creates topics Kafka Metadata requests name (Kafka's
	// auto.create.topics.enable).
	KafkaAutoCreateTopics bool
	// Cluster, when set, makes this broker a member of a replicated cluster: it runs a
	// controller voter (or, outside the quorum, follows the metadata from Cluster.Seeds)
	// and replicates partitions (replication/cluster). Its DataDir, Dial
	// and Logger are filled in here. nil: a single broker, exactly as before.
	Cluster *cluster.Config
	// PeerDialer opens the cluster's broker-to-broker connections (TLS, SASL); nil: plain
	// TCP without a login, which a cluster whose listeners demand TLS or authentication
	// refuses (checkCluster). The raft transport's TLS is Cluster.RaftTLS.
	PeerDialer *netio.PeerDialer
}

// Node is a running broker.
type Node struct {
	// Core is the broker core; tests reach partitions through it.
	Core *shard.Broker
	// Server is the ringlog protocol server.
	Server *netio.Server
	// Addr is the advertised main address; ShardAddrs the advertised per-shard addresses.
	Addr       string
	ShardAddrs []string
	// ListenAddr is the main listener's bound address (Addr may differ by --advertise).
	ListenAddr string
	// Kafka is the Kafka protocol listener (nil without Config.KafkaListen); KafkaAddr is
	// the address it advertises.
	Kafka     *kafka.Server
	KafkaAddr string
	// Admin is the admin HTTP listener; nil when Config.Admin.Listen is empty.
	Admin *admin.Server
	// Net is the network driver serving connections (NetGo when TLS asked it to be).
	Net string

	// Cluster is this broker's replication; nil on a single broker.
	Cluster *cluster.Manager

	log       *slog.Logger
	listeners []net.Listener // by shard: the main listener (once per shard), then the per-shard ones
	errc      chan error
}

// Start opens the core, listens, and serves. On error nothing is left running.
func Start(cfg Config) (*Node, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.Core.Logger == nil {
		cfg.Core.Logger = cfg.Logger
	}
	if cfg.Core.ErrorCode == nil { // the shards count failures by protocol code
		cfg.Core.ErrorCode = func(err error) int { return int(netio.CodeFor(err)) }
	}
	if cfg.Net == "" {
		cfg.Net = NetRing
	}
	if cfg.Net != NetRing && cfg.Net != NetGo {
		return nil, fmt.Errorf("network driver %q: want %s or %s", cfg.Net, NetRing, NetGo)
	}
	if cfg.Server.TLS != nil && cfg.Net == NetRing {
		// The ring driver moves plain bytes (recv, send, splice on the socket); TLS
		// connections are crypto/tls over Go's net package.
		cfg.Logger.Info("TLS on: connections are served by Go's netpoller (net driver), file bytes are copied, not spliced")
		cfg.Net = NetGo
	}
	if err := checkCluster(cfg); err != nil {
		return nil, err
	}
	var mgr *cluster.Manager
	if cfg.Cluster != nil {
		cc := *cfg.Cluster
		dialer := cfg.PeerDialer
		if dialer == nil {
			dialer = &netio.PeerDialer{}
		}
		cc.DataDir, cc.Dial, cc.Logger = cfg.Core.DataDir, dialer.Dial, cfg.Logger
		var err error
		if mgr, err = cluster.New(cc); err != nil {
			return nil, err
		}
		cfg.Core.Replicator = mgr
		cfg.Core.ProducerIDBlocks = mgr.AllocateProducerIDs
		cfg.Core.ProducerNames = mgr.InitProducerName
		cfg.Core.Groups.Replicated = true // __consumer_offsets through the controller; groups follow its leaders
	}
	closeCluster := func() {
		if mgr != nil {
			mgr.Close()
		}
	}
	core, err := shard.Open(cfg.Core)
	if err != nil {
		closeCluster()
		return nil, err
	}
	n := &Node{Core: core, Cluster: mgr, log: cfg.Logger, Net: cfg.Net}
	if err := n.listen(cfg); err != nil {
		n.closeListeners()
		closeCluster()
		core.Close()
		return nil, err
	}
	handler := netio.NewBrokerHandler(core, n.Addr).WithShardAddresses(n.ShardAddrs).
		WithFetchResponseBytesMax(cfg.FetchResponseBytesMax)
	if mgr != nil {
		handler.WithCluster(mgr)
	}
	n.Server = netio.NewServer(handler, serverConfig(cfg.Server, core))
	if err := n.serve(cfg.Net); err != nil {
		n.Server.Close()
		n.closeListeners()
		closeCluster()
		core.Close()
		return nil, err
	}
	if cfg.KafkaListen != "" {
		if err := n.serveKafka(cfg); err != nil {
			n.Server.Close()
			n.closeListeners()
			closeCluster()
			core.Close()
			return nil, err
		}
	}
	if mgr != nil {
		if n.Kafka != nil {
			mgr.SetKafkaAddress(n.KafkaAddr) // registered with the controller for Kafka Metadata
		}
		mgr.Attach(core, n.Addr)
	}
	if cfg.Admin.Listen != "" {
		if cfg.Admin.Logger == nil {
			cfg.Admin.Logger = cfg.Logger
		}
		if cfg.Admin.Groups == nil {
			cfg.Admin.Groups = admin.GroupsOf(core.Groups())
		}
		if sec := cfg.Server.Security; sec != nil && cfg.Admin.APIRefused == "" &&
			(sec.AuthRequired || sec.Authorizer != nil && sec.Authorizer.Enabled()) {
			cfg.Admin.APIRefused = "the broker requires authentication or enforces ACLs, which the admin listener cannot check; use the binary protocol"
		}
		if cfg.Admin.Replication == nil && mgr != nil {
			cfg.Admin.Replication = mgr // ISR changes, replica counts, controller readiness
		}
		if n.Admin, err = admin.Start(cfg.Admin, core, n.Server); err != nil {
			if n.Kafka != nil {
				n.Kafka.Close()
			}
			n.Server.Close()
			n.closeListeners()
			closeCluster()
			core.Close()
			return nil, err
		}
		n.Admin.SetReady(true) // catalog loaded, partitions recovered, listeners serving
	}
	return n, nil
}

// ErrClusterUnsupported refuses a replicated cluster whose broker-to-broker connections
// could not pass its own listeners' security.
var ErrClusterUnsupported = errors.New("replicated cluster")

// checkCluster refuses a cluster (--node-id) whose peers could not reach each other's
// client listeners: under TLS the PeerDialer must dial TLS and the raft transport must be
// secured as well; under required authentication the PeerDialer must log in, or present
// a certificate (TLS, the listeners asking for one: the mTLS principal).
func checkCluster(cfg Config) error {
	if cfg.Cluster == nil {
		return nil
	}
	d, sec := cfg.PeerDialer, cfg.Server.Security
	dialsTLS := d != nil && d.TLS != nil
	if cfg.Server.TLS != nil && (!dialsTLS || cfg.Cluster.RaftTLS == nil) {
		return fmt.Errorf("%w: the listeners serve TLS, so brokers must dial each other over TLS: give --inter-broker-tls-ca (the CAs of the other brokers' certificates)", ErrClusterUnsupported)
	}
	if sec != nil && sec.AuthRequired && !dialsTLS && (d == nil || d.Credentials == nil) {
		return fmt.Errorf("%w: --auth required: brokers must log in to each other: give --inter-broker-credentials-file, or TLS with client certificates (--tls-client-ca, --inter-broker-tls-ca)", ErrClusterUnsupported)
	}
	return nil
}

// serveKafka opens the Kafka listener: its connections are admitted under n.Server's limits
// and served on Go's netpoller (requests reach shards through their mailboxes), over TLS
// when the ringlog listener serves TLS.
func (n *Node) serveKafka(cfg Config) error {
	ln, err := netio.Listen(context.Background(), cfg.KafkaListen)
	if err != nil {
		return fmt.Errorf("kafka listener: %w", err)
	}
	n.KafkaAddr = advertisedAddr(ln.Addr(), cfg.Advertise)
	if cfg.KafkaAdvertise != "" {
		n.KafkaAddr = cfg.KafkaAdvertise
	}
	srv, err := kafka.NewServer(n.Core, n.KafkaAddr, kafka.Config{
		Limits:                n.Server,
		FetchResponseBytesMax: cfg.FetchResponseBytesMax,
		AutoCreateTopics:      cfg.KafkaAutoCreateTopics,
		TLS:                   cfg.Server.TLS,
		Security:              cfg.Server.Security,
		Cluster:               n.Cluster,
		Logf:                  func(format string, a ...any) { n.log.Info(fmt.Sprintf(format, a...)) },
	})
	if err != nil {
		ln.Close()
		return err
	}
	n.Kafka = srv
	n.listeners = append(n.listeners, ln)
	go func() { n.errc <- srv.Serve(ln) }()
	return nil
}

// serverConfig fills the server limits that depend on the core.
func serverConfig(sc netio.Config, core *shard.Broker) netio.Config {
	sc.Shards = core.Shards()
	_, filesMax := core.FilesHeld()
	if sc.FetchFilesPerConnMax <= 0 {
		sc.FetchFilesPerConnMax = max(min(256, filesMax/16), 1)
	}
	if sc.FetchFilesPerAddressMax <= 0 {
		sc.FetchFilesPerAddressMax = max(filesMax/4, 1)
	}
	return sc
}

// listen opens the main listener, which every shard accepts on, and the per-shard
// listeners. The main listener is one socket without SO_REUSEPORT (netio.Listen): a second
// broker on the same address fails with "address already in use" instead of silently
// receiving a share of the clients.
func (n *Node) listen(cfg Config) error {
	shards := n.Core.Shards()
	ln, err := netio.Listen(context.Background(), cfg.Listen)
	if err != nil {
		return err
	}
	n.ListenAddr = ln.Addr().String()
	n.Addr = advertisedAddr(ln.Addr(), cfg.Advertise)
	for i := 0; i < shards; i++ {
		n.listeners = append(n.listeners, ln)
	}
	if cfg.Advertise == "" && unspecifiedHost(n.listeners[0].Addr()) {
		n.log.Warn("listening on an unspecified address without an advertised host: metadata tells clients to connect to it as is, which only works on this host",
			"listen", n.ListenAddr)
	}
	shardListeners, err := listenPerShard(cfg.ShardPorts, n.ListenAddr, shards)
	if err != nil {
		return err
	}
	for _, ln := range shardListeners {
		n.listeners = append(n.listeners, ln)
		n.ShardAddrs = append(n.ShardAddrs, advertisedAddr(ln.Addr(), cfg.Advertise))
	}
	return nil
}

// serve starts accepting: listener i of the main group and per-shard listener i are served
// by shard i.
func (n *Node) serve(driver string) error {
	shards := n.Core.Shards()
	n.errc = make(chan error, len(n.listeners)+1) // +1: the Kafka listener
	for i, ln := range n.listeners {
		si := i % shards
		if driver == NetGo {
			go func() { n.errc <- n.Server.Serve(ln, si) }()
			continue
		}
		tl := ln.(*net.TCPListener)
		if err := n.Core.Exec(si, func(r *ring.Reactor) error { return n.Server.ServeRing(r, tl, si) }); err != nil {
			return fmt.Errorf("serve on shard %d's ring: %w: %w", si, ErrRingDriverUnavailable, err)
		}
	}
	return nil
}

// Errors yields a listener's failure (Go driver); ring listeners report through the log.
func (n *Node) Errors() <-chan error { return n.errc }

// Shutdown answers parked long-polls, stops accepting, lets in-flight requests answer until
// ctx ends, then syncs and closes every partition. It returns the first error.
func (n *Node) Shutdown(ctx context.Context) error {
	if n.Cluster != nil {
		// Leave the cluster first: fetchers stop, leaderships end (waiting acks=all
		// produces answer NOT_LEADER), the voter stops.
		if err := n.Cluster.Close(); err != nil {
			n.log.Warn("leave the cluster", "err", err)
		}
	}
	if n.Admin != nil {
		n.Admin.SetReady(false) // /readyz fails from here on
	}
	n.Core.Drain() // Shutdown below waits for every in-flight request, parked fetches too
	var kerr error
	if n.Kafka != nil {
		kerr = n.Kafka.Shutdown(ctx)
	}
	serr := n.Server.Shutdown(ctx)
	if serr == nil {
		serr = kerr
	}
	if serr != nil {
		n.log.Warn("in-flight requests cut off at shutdown", "err", serr)
	}
	if n.Admin != nil {
		if err := n.Admin.Shutdown(ctx); err != nil {
			n.log.Warn("admin requests cut off at shutdown", "err", err)
		}
	}
	n.closeListeners()
	if err := n.Core.Close(); err != nil {
		return fmt.Errorf("close broker: %w", err)
	}
	return nil
}

func (n *Node) closeListeners() {
	for _, ln := range n.listeners {
		ln.Close() // the main listener repeats; closing it again is harmless
	}
}

// listenPerShard opens one listener per shard for ShardPorts (none for "off" or "").
func listenPerShard(shardPorts, mainAddr string, shards int) ([]net.Listener, error) {
	if shardPorts == "" || shardPorts == ShardPortsOff {
		return nil, nil
	}
	host, _, err := net.SplitHostPort(mainAddr)
	if err != nil {
		return nil, fmt.Errorf("listen address %q: %w", mainAddr, err)
	}
	base := 0
	if shardPorts != ShardPortsAuto {
		if base, err = strconv.Atoi(shardPorts); err != nil || base <= 0 || base+shards > 65536 {
			return nil, fmt.Errorf("shard ports %q: want auto, off or a base port that leaves room for %d shards", shardPorts, shards)
		}
	}
	var out []net.Listener
	for i := 0; i < shards; i++ {
		port := 0
		if base > 0 {
			port = base + i
		}
		ln, err := netio.Listen(context.Background(), net.JoinHostPort(host, strconv.Itoa(port)))
		if err != nil {
			for _, l := range out {
				l.Close()
			}
			return nil, fmt.Errorf("listen for shard %d: %w", i, err)
		}
		out = append(out, ln)
	}
	return out, nil
}

// advertisedAddr is the address metadata gives clients for a listener: host with the
// listener's port, or the listener's own address when host is empty.
func advertisedAddr(listener net.Addr, host string) string {
	if host == "" {
		return listener.String()
	}
	_, port, err := net.SplitHostPort(listener.String())
	if err != nil {
		return listener.String()
	}
	return net.JoinHostPort(host, port)
}

// unspecifiedHost reports whether a listener is bound to 0.0.0.0 or ::, an address that a
// remote client cannot connect to.
func unspecifiedHost(listener net.Addr) bool {
	tcp, ok := listener.(*net.TCPAddr)
	return ok && tcp.IP.IsUnspecified()
}
