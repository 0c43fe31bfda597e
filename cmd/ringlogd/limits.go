package main

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/ringlog/ringlog/engine"
	"github.com/ringlog/ringlog/netio"
	"github.com/ringlog/ringlog/netio/admin"
	"github.com/ringlog/ringlog/netio/security"
)

// limitFlags are the per-request and per-client limits (issue 10); docs/operations.md
// "Limits" lists each with its default and what a client sees when it hits it. Zero means
// the netio/shard default.
type limitFlags struct {
	bufferBytesMax        int64
	connBufferBytesMax    int64
	addressBufferBytesMax int64
	connsPerAddressMax    int
	requestEntriesMax     int
	fetchResponseBytesMax int64
	fetchFilesMax         int64
	fetchFilesPerConnMax  int64
	fetchFilesPerAddrMax  int64
	partitionsMax         int
	frameTimeout          time.Duration
	idleTimeout           time.Duration
	writeTimeout          time.Duration
}

func (l *limitFlags) register(fs *flag.FlagSet) {
	fs.Int64Var(&l.bufferBytesMax, "max-buffer-bytes", 1<<30, "request and response bytes all connections may hold (split evenly among shards)")
	fs.Int64Var(&l.connBufferBytesMax, "max-connection-buffer-bytes", 0, "request and response bytes one connection may hold (default --max-frame-bytes)")
	fs.Int64Var(&l.addressBufferBytesMax, "max-address-buffer-bytes", 0, "request and response bytes the connections of one client IP may hold together (default a quarter of --max-buffer-bytes)")
	fs.IntVar(&l.connsPerAddressMax, "max-connections-per-address", 0, "open connections from one client IP (default a quarter of --max-connections)")
	fs.IntVar(&l.requestEntriesMax, "max-request-entries", 10000, "partitions, topics, names or config keys one request may name, summed")
	fs.Int64Var(&l.fetchResponseBytesMax, "max-fetch-bytes", netio.FetchResponseBytesMaxDefault, "records one fetch response may carry, whatever its max_bytes (the first batch is always returned whole)")
	fs.Int64Var(&l.fetchFilesMax, "max-fetch-files", 0, "segment descriptors held by unsent fetch responses, broker-wide (default a quarter of the descriptor limit)")
	fs.Int64Var(&l.fetchFilesPerConnMax, "max-fetch-files-per-connection", 0, "segment descriptors held by one connection's unsent fetch responses (default min(256, --max-fetch-files / 16))")
	fs.Int64Var(&l.fetchFilesPerAddrMax, "max-fetch-files-per-address", 0, "segment descriptors held by one client IP's unsent fetch responses (default --max-fetch-files / 4)")
	fs.IntVar(&l.partitionsMax, "max-partitions", engine.PartitionsPerBrokerDefault, "partitions of all topics together this broker holds; a create beyond it is refused (INVALID_PARTITIONS)")
	fs.DurationVar(&l.frameTimeout, "frame-timeout", 30*time.Second, "a request frame must arrive whole within this of its first byte")
	fs.DurationVar(&l.idleTimeout, "idle-timeout", 10*time.Minute, "close a connection that sent nothing for this long with nothing outstanding")
	fs.DurationVar(&l.writeTimeout, "write-timeout", 30*time.Second, "close a connection that reads none of a response for this long")
}

// adminFlags configure the admin HTTP listener (netio/admin): metrics, health checks and
// the JSON API. docs/operations.md lists the limits.
type adminFlags struct {
	listen             string
	bodyBytesMax       int64
	connsMax           int
	connsPerAddressMax int
	tls                string // "on": HTTPS when --tls-cert is set; "off": plain HTTP always
}

func (a *adminFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&a.listen, "admin", "127.0.0.1:9401", "admin HTTP address: /metrics (Prometheus), /healthz, /readyz and the JSON API /v1/...; empty turns it off")
	fs.Int64Var(&a.bodyBytesMax, "admin-max-body-bytes", admin.BodyBytesMaxDefault, "largest admin HTTP request body (a JSON produce); larger ones are refused with 413")
	fs.IntVar(&a.connsMax, "admin-max-connections", admin.ConnectionsMaxDefault, "open admin HTTP connections; further ones are closed at accept")
	fs.IntVar(&a.connsPerAddressMax, "admin-max-connections-per-address", admin.ConnectionsPerAddressMaxDefault, "open admin HTTP connections from one client IP")
	fs.StringVar(&a.tls, "admin-tls", "on", "on: with --tls-cert the admin listener serves HTTPS only, with the same certificate and client CAs (re-read on SIGHUP); off: plain HTTP even then")
}

func (a *adminFlags) check() error {
	if a.bodyBytesMax <= 0 || a.connsMax <= 0 || a.connsPerAddressMax <= 0 {
		return errors.New("--admin-max-body-bytes, --admin-max-connections and --admin-max-connections-per-address must be positive")
	}
	if a.tls != "on" && a.tls != "off" {
		return fmt.Errorf("--admin-tls %q: want on or off", a.tls)
	}
	if a.listen != "" {
		if _, _, err := net.SplitHostPort(a.listen); err != nil {
			return fmt.Errorf("--admin %q: want host:port or empty: %w", a.listen, err)
		}
	}
	return nil
}

// config is the admin listener's configuration: HTTPS with serverTLS (the client
// listener's, nil when TLS is off) unless --admin-tls off.
func (a *adminFlags) config(serverTLS *security.ServerTLS, log *slog.Logger) admin.Config {
	cfg := admin.Config{Listen: a.listen, BodyBytesMax: a.bodyBytesMax, ConnectionsMax: a.connsMax, ConnectionsPerAddressMax: a.connsPerAddressMax}
	switch {
	case serverTLS == nil || a.listen == "":
	case a.tls == "on":
		cfg.TLS = serverTLS.Config()
	default:
		log.Warn("--admin-tls off: the admin listener serves plain HTTP while the other listeners serve TLS; metrics and the JSON API travel in clear", "admin", a.listen)
	}
	return cfg
}

func (l *limitFlags) check() error {
	for _, v := range []int64{l.bufferBytesMax, l.connBufferBytesMax, l.addressBufferBytesMax, int64(l.connsPerAddressMax),
		int64(l.requestEntriesMax), int64(l.partitionsMax), l.fetchResponseBytesMax, l.fetchFilesMax, l.fetchFilesPerConnMax, l.fetchFilesPerAddrMax} {
		if v < 0 {
			return errors.New("limits must not be negative")
		}
	}
	if l.frameTimeout <= 0 || l.idleTimeout <= 0 || l.writeTimeout <= 0 {
		return errors.New("--frame-timeout, --idle-timeout and --write-timeout must be positive")
	}
	if l.fetchResponseBytesMax > 1<<30 {
		return errors.New("--max-fetch-bytes above 1 GiB: a response frame could not hold it with its first batch")
	}
	return nil
}

// serverConfig fills cfg's limits (zero ones take their defaults in netio/node).
func (l *limitFlags) serverConfig(cfg netio.Config) netio.Config {
	cfg.ServerBufferBytesMax = l.bufferBytesMax
	cfg.ConnBufferBytesMax = l.connBufferBytesMax
	cfg.AddressBufferBytesMax = l.addressBufferBytesMax
	cfg.ConnectionsPerAddressMax = l.connsPerAddressMax
	cfg.RequestEntriesMax = l.requestEntriesMax
	cfg.FetchFilesPerConnMax = l.fetchFilesPerConnMax
	cfg.FetchFilesPerAddressMax = l.fetchFilesPerAddrMax
	cfg.FrameReadTimeout = l.frameTimeout
	cfg.IdleTimeout = l.idleTimeout
	cfg.WriteTimeout = l.writeTimeout
	return cfg
}
