// Command ringlogd is the ringlog broker: shards (one pinned loop and io_uring ring each)
// owning partitions on a data directory, serving the ringlog protocol.
//
//	ringlogd [--data DIR] [--listen HOST:PORT] [--shards N] [--cpus LIST | --tune-plan FILE]
//	         [--storage page-cache|direct] [--io auto|uring|syscall] [--flush-always]
//
// Every flag is also a key of the YAML file --config names and a RINGLOG_* environment
// variable (config.go); --print-config shows the effective configuration. SIGHUP reloads
// what can change at run time (reload.go). It stops cleanly on SIGTERM or SIGINT: it stops
// accepting, answers what is in flight, syncs every partition and closes.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	_ "net/http/pprof" // served only with --debug-addr
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ringlog/ringlog/engine/shard"
	"github.com/ringlog/ringlog/netio"
	"github.com/ringlog/ringlog/ring"
	"github.com/ringlog/ringlog/tuning"
)

// Version is the broker version, overridable at link time (-ldflags -X main.Version=...).
var Version = "0.1.0-dev"

const shutdownGraceDefault = 10 * time.Second

// listenPerShard opens one listener per shard for --shard-ports (none for "off").
func listenPerShard(o options, shards int) ([]net.Listener, error) {
	if o.shardPorts == "off" {
		return nil, nil
	}
	host, _, err := net.SplitHostPort(o.listen)
	if err != nil {
		return nil, fmt.Errorf("--listen %q: %w", o.listen, err)
	}
	base := 0
	if o.shardPorts != "auto" {
		if base, err = strconv.Atoi(o.shardPorts); err != nil || base <= 0 || base+shards > 65536 {
			return nil, fmt.Errorf("--shard-ports %q: want auto, off or a base port that leaves room for %d shards", o.shardPorts, shards)
		}
	}
	var out []net.Listener
	for i := 0; i < shards; i++ {
		port := 0
		if base > 0 {
			port = base + i
		}
		ln, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
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

func shardCPUs(o options) ([]int, error) {
	switch {
	case o.cpus != "":
		cpus, err := tuning.ParseCPUList(o.cpus)
		if err != nil {
			return nil, fmt.Errorf("--cpus: %w", err)
		}
		return cpus, nil
	case o.tunePlan != "":
		plan, err := tuning.LoadPlan(o.tunePlan)
		if err != nil {
			return nil, fmt.Errorf("--tune-plan: %w", err)
		}
		return plan.ShardCPUs, nil
	}
	return nil, nil
}

func main() {
	level := new(slog.LevelVar)
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	slog.SetDefault(log)
	if err := run(os.Args[1:], log, level); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		fmt.Fprintf(os.Stderr, "ringlogd: %v\n", err)
		os.Exit(1)
	}
}

func run(args []string, log *slog.Logger, level *slog.LevelVar) error {
	cfg, err := loadSettings(args, os.LookupEnv)
	if err != nil {
		return err
	}
	switch {
	case cfg.version:
		printVersion(os.Stdout)
		return nil
	case cfg.printConfig:
		return cfg.writeConfig(os.Stdout)
	}
	o := cfg.o
	logLevel, _ := parseLogLevel(o.logLevel) // validated
	level.Set(logLevel)
	logConfig(log, cfg)
	logDefaults, _ := cfg.logDefaults() // validated
	// Handle SIGTERM/SIGINT from here on: a signal that arrives during start-up, or right
	// after the start-up line that scripts wait for, must mean a clean shutdown, not the
	// default action (death without syncing).
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sig)
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	cpus, err := shardCPUs(o)
	if err != nil {
		return err
	}
	for _, cpu := range cpus {
		if _, err := tuning.NUMANodeOfCPU(o.sysRoot, cpu); err != nil {
			return fmt.Errorf("cannot pin a shard to cpu %d: %w", cpu, err)
		}
	}
	shards := o.shards
	if shards <= 0 {
		shards = runtime.NumCPU()
		if len(cpus) > 0 {
			shards = len(cpus)
		}
	}
	b, err := shard.Open(shard.Config{
		DataDir: o.dataDir,
		Shards:  shards,
		CPUs:    cpus,
		Pin:     o.pin,
		Ring:    ring.Config{Backend: o.io, InlineFileIO: o.fileIO == "inline", SingleIssuer: o.deferTaskrun, DeferTaskrun: o.deferTaskrun},
		Log:     logDefaults,
		Logger:  log,
	})
	if err != nil {
		return err
	}
	listeners := make([]net.Listener, 0, shards)
	for i := 0; i < shards; i++ {
		ln, err := netio.ListenShard(context.Background(), o.listen)
		if err != nil {
			b.Close()
			return err
		}
		listeners = append(listeners, ln)
	}
	addr := listeners[0].Addr().String()
	shardListeners, err := listenPerShard(o, shards)
	if err != nil {
		b.Close()
		return err
	}
	var shardAddrs []string
	for _, ln := range shardListeners {
		shardAddrs = append(shardAddrs, advertisedAddr(ln.Addr(), o.advertise))
	}
	if o.advertise == "" && unspecifiedHost(listeners[0].Addr()) {
		log.Warn("listening on an unspecified address without --advertise: metadata tells clients to connect to it as is, which only works on this host",
			"listen", addr)
	}
	srv := netio.NewServer(netio.NewBrokerHandler(b, advertisedAddr(listeners[0].Addr(), o.advertise)).WithShardAddresses(shardAddrs), netio.Config{
		FrameBytesMax:  uint32(o.frameBytesMax),
		ConnectionsMax: o.connsMax,
		BrokerVersion:  Version,
		Logf:           func(format string, a ...any) { log.Info(fmt.Sprintf(format, a...)) },
	})

	backend := "?"
	for _, s := range b.ShardInfos() {
		node := -1
		if s.CPU >= 0 {
			node, _ = tuning.NUMANodeOfCPU(o.sysRoot, s.CPU)
		}
		backend = s.Backend
		log.Info("shard", "index", s.Index, "cpu", s.CPU, "numa_node", node, "io", s.Backend)
	}
	log.Info("ringlogd started", "version", Version, "commit", Commit, "listen", addr, "shard_addrs", strings.Join(shardAddrs, ","), "shards", shards, "net", o.net,
		"storage", o.storage, "io", backend, "data", o.dataDir, "topics", len(b.Topics()))

	if o.debugAddr != "" {
		go func() {
			log.Info("pprof listening", "addr", o.debugAddr)
			if err := http.ListenAndServe(o.debugAddr, nil); err != nil {
				log.Warn("pprof server failed", "err", err)
			}
		}()
	}
	errc := make(chan error, len(listeners)+len(shardListeners))
	for i, ln := range append(listeners, shardListeners...) {
		i := i % shards
		if o.net == "go" {
			go func() { errc <- srv.Serve(ln, i) }()
			continue
		}
		tl := ln.(*net.TCPListener)
		if err := b.Exec(i, func(r *ring.Reactor) error { return srv.ServeRing(r, tl, i) }); err != nil {
			srv.Close()
			b.Close()
			return fmt.Errorf("serve on shard %d's ring: %w", i, err)
		}
	}
	var serveErr error
	running := cfg
wait:
	for {
		select {
		case <-hup:
			running = reload(running, args, os.LookupEnv, b, level, log)
		case s := <-sig:
			log.Info("shutting down", "signal", s.String())
			break wait
		case serveErr = <-errc:
			log.Error("listener failed, shutting down", "err", serveErr)
			break wait
		}
	}
	b.Drain() // answer parked long-polls now: Shutdown waits for every in-flight request
	ctx, cancel := context.WithTimeout(context.Background(), o.shutdownGrace)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		log.Warn("in-flight requests cut off at shutdown", "err", err)
	}
	if err := b.Close(); err != nil {
		return fmt.Errorf("close broker: %w", err)
	}
	log.Info("ringlogd stopped")
	if serveErr != nil && !errors.Is(serveErr, netio.ErrServerClosed) {
		return serveErr
	}
	return nil
}

// advertisedAddr is the address metadata gives clients for a listener: host (from
// --advertise) with the listener's port, or the listener's own address.
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
