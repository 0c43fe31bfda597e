// Command ringlogd is the ringlog broker: shards (one pinned loop and io_uring ring each)
// owning partitions on a data directory, serving the ringlog protocol and, with
// --kafka-listen, the Apache Kafka protocol (netio/kafka).
//
//	ringlogd [--data DIR] [--listen HOST:PORT] [--kafka-listen HOST:PORT] [--shards N] [--cpus LIST | --tune-plan FILE]
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
	"net/http"
	_ "net/http/pprof" // served only with --debug-addr
	"os"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/ringlog/ringlog/internal/buildinfo"
	"github.com/ringlog/ringlog/netio/node"
	"github.com/ringlog/ringlog/netio/security"
	"github.com/ringlog/ringlog/replication/cluster"
	"github.com/ringlog/ringlog/replication/controller"

	"github.com/ringlog/ringlog/engine"
	"github.com/ringlog/ringlog/engine/shard"
	"github.com/ringlog/ringlog/netio"
	"github.com/ringlog/ringlog/ring"
	"github.com/ringlog/ringlog/tuning"
)

// Version is the broker version, overridable at link time (-ldflags -X main.Version=...).
var Version = "0.1.0-dev"

const shutdownGraceDefault = 10 * time.Second

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
	procs := setMaxProcs(shards)
	serverTLS, err := o.security.serverTLS()
	if err != nil {
		return err
	}
	disk, err := engine.NewDiskSpace(o.dataDir, o.diskFreeMin, nil)
	if err != nil {
		return err
	}
	inlineFileIO, err := chooseFileIO(o, log)
	if err != nil {
		return err
	}
	// Partition defaults: the process-wide parts (disk guard, start-up verification) under
	// the reloadable ones (storage, flush-always, topic-defaults).
	writeback := engine.NewWriteback(o.writebackBytes) // nil when 0
	adminCfg := o.admin.config(serverTLS, log)
	if writeback != nil {
		adminCfg.Writeback = writeback
	}
	defer writeback.Close() // appends after it are harmless
	logBase := engine.LogConfig{Disk: disk, VerifySegments: o.verify, ProducerIDExpirationMs: o.producerIDExpiration.Milliseconds(), Writeback: writeback}
	logDefaults, _ := cfg.logDefaultsOver(logBase) // validated
	serverCfg := o.limits.serverConfig(netio.Config{
		FrameBytesMax:  uint32(o.frameBytesMax),
		ConnectionsMax: o.connsMax,
		BrokerVersion:  Version,
		Logf:           func(format string, a ...any) { log.Info(fmt.Sprintf(format, a...)) },
	})
	if serverTLS != nil {
		serverCfg.TLS = serverTLS.Config()
	}
	if serverCfg.Security, err = o.security.serverSecurity(o.dataDir, log); err != nil {
		return err
	}
	var clusterCfg *cluster.Config
	var peerDialer *netio.PeerDialer
	var peerCreds *security.PeerCredentialsFile
	if o.nodeID > 0 {
		var raftTLS *controller.TransportTLS
		if peerDialer, raftTLS, peerCreds, err = o.security.peerDialer(serverTLS); err != nil {
			return err
		}
		protocolMin, protocolMax, _ := parseProtocolRange(o.testingProtocol) // validated by loadSettings
		clusterCfg = &cluster.Config{NodeID: int32(o.nodeID), Voters: o.controllerVoters, Seeds: splitList(o.clusterSeeds), Rack: o.rack,
			SessionTimeout: o.sessionTimeout, ReplicaLagMax: o.replicaLagMax, ThrottledBytesPerSecond: o.replThrottle,
			LeaderThrottledBytesPerSecond: o.leaderThrottle, RaftLog: os.Stderr,
			RaftTLS: raftTLS, ProtocolMin: protocolMin, ProtocolMax: protocolMax,
			OffsetsPartitions: int32(o.offsetsPartitions), OffsetsReplicationFactor: int32(o.offsetsRF)}
	}
	engine.DirectWriteGroupsMax = o.directWriteGroups // read by each direct-mode log as it opens
	n, err := node.Start(node.Config{
		Cluster:    clusterCfg,
		PeerDialer: peerDialer,
		Core: shard.Config{
			DataDir: o.dataDir,
			Shards:  shards,
			CPUs:    cpus,
			Pin:     o.pin,
			Ring:    ring.Config{Backend: o.io, InlineFileIO: inlineFileIO, SingleIssuer: o.deferTaskrun, DeferTaskrun: o.deferTaskrun, SpinBeforeWait: o.loopSpin},
			Log:     logDefaults,
			// The shard's 0 means its default; the flag's 0 means off.
			ScrubBytesPerSecond:      scrubRate(o.scrubRate),
			CleanerDisabled:          !o.cleanerEnable,
			CleanerIOBytesPerSecond:  o.cleanerRate,
			CleanerDedupeBufferBytes: o.cleanerMap,
			CleanerInterval:          o.cleanerEvery,
			RetentionCheckInterval:   o.retentionEvery,
			FetchFilesMax:            o.limits.fetchFilesMax,
			PartitionsMax:            o.limits.partitionsMax,
			SyncInlineOff:            o.syncInline == "off",
			Groups: shard.GroupsConfig{OffsetsPartitions: o.offsetsPartitions, SessionTimeoutMin: o.groupSessionMin,
				SessionTimeoutMax: o.groupSessionMax, GroupMembersMax: o.groupMembersMax, PendingMembersMax: o.groupPendingMax,
				StateBytesMax: o.groupStateBytes},
		},
		FetchResponseBytesMax: o.limits.fetchResponseBytesMax,
		Listen:                o.listen,
		ShardPorts:            o.shardPorts,
		Advertise:             o.advertise,
		KafkaListen:           o.kafkaListen,
		KafkaAdvertise:        o.kafkaAdvertise,
		KafkaAutoCreateTopics: o.kafkaAutoCreate,
		Net:                   o.net,
		Server:                serverCfg,
		Admin:                 adminCfg,
		Logger:                log,
	})
	if err != nil {
		return err
	}
	adminAddr := ""
	if n.Admin != nil {
		adminAddr = n.Admin.Addr()
	}
	backend := "?"
	for _, s := range n.Core.ShardInfos() {
		numaNode := -1
		if s.CPU >= 0 {
			numaNode, _ = tuning.NUMANodeOfCPU(o.sysRoot, s.CPU)
		}
		backend = s.Backend
		log.Info("shard", "index", s.Index, "cpu", s.CPU, "numa_node", numaNode, "io", s.Backend)
	}
	log.Info("ringlogd started", "version", Version, "commit", buildinfo.Commit(Commit), "listen", n.ListenAddr, "admin", adminAddr, "shard_addrs", strings.Join(n.ShardAddrs, ","), "kafka", n.KafkaAddr, "shards", shards, "gomaxprocs", procs, "net", n.Net,
		"storage", o.storage, "io", backend, "data", o.dataDir, "topics", len(n.Core.Topics()), "node_id", o.nodeID,
		"tls", serverTLS != nil, "auth", o.security.auth, "acl", o.security.acl)

	if o.debugAddr != "" {
		go func() {
			log.Info("pprof listening", "addr", o.debugAddr)
			if err := http.ListenAndServe(o.debugAddr, nil); err != nil {
				log.Warn("pprof server failed", "err", err)
			}
		}()
	}
	var serveErr error
	running := cfg
wait:
	for {
		select {
		case <-hup:
			before := running
			running = reload(running, args, os.LookupEnv, n.Core, logBase, level, log)
			reloadTLS(serverTLS, log)
			reloadPeerCredentials(peerCreds, log)
			reloadQuotas(serverCfg.Security.Quotas, before, running, log)
		case s := <-sig:
			log.Info("shutting down", "signal", s.String())
			break wait
		case serveErr = <-n.Errors():
			log.Error("listener failed, shutting down", "err", serveErr)
			break wait
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.shutdownGrace)
	defer cancel()
	if err := n.Shutdown(ctx); err != nil {
		return err
	}
	log.Info("ringlogd stopped")
	if serveErr != nil && !errors.Is(serveErr, netio.ErrServerClosed) {
		return serveErr
	}
	return nil
}

// scrubRate maps --scrub-bytes-per-sec (0: off) to shard.Config.ScrubBytesPerSecond
// (negative: off).
func scrubRate(flag int64) int64 {
	if flag == 0 {
		return -1
	}
	return flag
}

// chooseFileIO turns --file-io into the ring's InlineFileIO; auto measures both modes on
// the data directory (ring.ProbeFileIO) and logs which it chose and why.
func chooseFileIO(o options, log *slog.Logger) (bool, error) {
	if o.fileIO != "auto" {
		return o.fileIO == "inline", nil
	}
	probe, err := ring.ProbeFileIO(o.dataDir, ring.Config{Backend: o.io}, o.storage == string(engine.StorageDirect))
	if err != nil {
		return false, fmt.Errorf("--file-io auto: %w", err)
	}
	log.Info("file-io auto: measured appends on the data dir", "chose", probe.String())
	return probe.InlineIsFaster, nil
}

// spareProcs is how many Go Ps ringlogd runs beyond its shards (or the default
// GOMAXPROCS, if larger) when the GOMAXPROCS environment variable is not set. A shard's
// locked thread waits in io_uring_enter holding its P; with no idle P left the runtime's
// sysmon takes that P back after 20 µs of every wait, stays in its 20 µs polling loop, and
// the shard must win a P back when its completion arrives. Two idle Ps let sysmon leave a
// waiting shard's P alone (for up to 10 ms) and back off: 26–31 % fewer context switches at
// 5,000 msg/s acks=all RF=3 (docs/benchmarks.md, "GOMAXPROCS").
const spareProcs = 2

// setMaxProcs sets GOMAXPROCS to max(default, shards) + spareProcs unless the environment
// sets it, and returns the value in force.
func setMaxProcs(shards int) int {
	if os.Getenv("GOMAXPROCS") != "" {
		return runtime.GOMAXPROCS(0)
	}
	n := max(runtime.GOMAXPROCS(0), shards) + spareProcs
	runtime.GOMAXPROCS(n)
	return n
}
