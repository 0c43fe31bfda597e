// Package admin owns the broker's admin HTTP listener (ringlogd --admin; HTTPS when
// Config.TLS is set): Prometheus metrics (/metrics), liveness and readiness (/healthz,
// /readyz), and the JSON produce and fetch API for clients without the binary protocol
// (/v1/...; api.go).
//
// It reads the broker core (engine/shard) only through its public API: counters come from
// Broker.Stats, which copies each shard's plain counters on the shard's own loop at scrape
// time, so nothing here touches a partition or adds work to the produce and fetch paths.
// The engine never imports this package; netio/node starts it.
//
// Replication plugs in through the Replication seam (ISR changes, replica counts,
// readiness of the controller); without one the broker is its own only replica. Consumer
// groups plug in through the Groups seam (committed offsets for the lag metrics; netio/node
// wires the broker's coordinators with GroupsOf).
package admin

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ringlog/ringlog/engine/shard"
	"github.com/ringlog/ringlog/netio"
)

// Defaults and bounds. Each is a limit in docs/operations.md.
const (
	// BodyBytesMaxDefault bounds a request body (ringlogd --admin-max-body-bytes).
	BodyBytesMaxDefault = 1 << 20
	// ConnectionsMaxDefault and ConnectionsPerAddressMaxDefault bound open admin
	// connections, all and per client IP (--admin-max-connections[-per-address]).
	ConnectionsMaxDefault           = 256
	ConnectionsPerAddressMaxDefault = 32
	// FetchWaitMax bounds the long-poll of a fetch (wait_ms).
	FetchWaitMax = 30 * time.Second
	// FetchRecordsMax bounds the records one fetch returns (max).
	FetchRecordsMax = 10_000
	// fetchRecordsDefault is max when the request does not say.
	fetchRecordsDefault = 500
	// FetchBytesMaxDefault bounds the record bytes one fetch reads from a partition.
	FetchBytesMaxDefault = 4 << 20
	// scrapeWaitMax bounds how long a scrape or a readiness check waits for the shards.
	scrapeWaitMax       = 10 * time.Second
	readHeaderTimeout   = 10 * time.Second
	readTimeout         = 30 * time.Second // headers and body: a trickled body cannot hold a connection longer
	headerBytesMax      = 64 << 10
	idleTimeout         = 2 * time.Minute
	writeTimeoutPadding = 30 * time.Second // beyond the longest long-poll
)

// Config configures the admin listener. Zero fields take the defaults above.
type Config struct {
	// Listen is host:port (port 0 picks one).
	Listen string
	// BodyBytesMax bounds a request body; a larger one is refused with 413.
	BodyBytesMax int64
	// ConnectionsMax and ConnectionsPerAddressMax bound open connections; further ones
	// are closed at accept.
	ConnectionsMax, ConnectionsPerAddressMax int
	// FetchBytesMax bounds the record bytes one HTTP fetch reads.
	FetchBytesMax int64
	// Replication reports ISR changes, replica counts and the controller's reachability;
	// nil means Local (this broker is every partition's only replica).
	Replication Replication
	// Groups gives the committed offsets of the consumer groups this broker coordinates
	// (group lag metrics, the /v1/groups API); nil leaves both out.
	Groups Groups
	// Writeback is the broker's page-cache write-back starter (engine.Writeback); nil
	// leaves its counters out.
	Writeback WritebackStats
	// APIRefused, when not empty, turns the JSON API (/v1/...) off with this reason: the
	// admin listener has no authentication, so a broker whose main listener requires it
	// (or enforces ACLs) must not offer an unauthenticated way around them. Metrics and
	// health checks stay.
	APIRefused string
	// TLS, when set, makes the listener serve HTTPS only (crypto/tls; a plain HTTP request
	// is answered 400 and closed). Give it the ringlog listener's
	// security.ServerTLS.Config(): the same certificate, the same client CAs (with mutual
	// TLS a scraper needs a client certificate too) and the same SIGHUP reload. The
	// handshake is bounded by the read-header timeout.
	TLS    *tls.Config
	Logger *slog.Logger
}

// Replication is the admin endpoint's seam to replication: what the ISR metrics and the
// readiness check need beyond what each shard's core.Replicator reports (the ISR size).
// The implementation must be safe for concurrent use; it is called at scrape time only.
type Replication interface {
	// ReplicaCounts returns the number of replicas assigned to each partition (its
	// replication factor), read once per scrape; a partition it leaves out has one.
	ReplicaCounts() map[shard.TopicPartition]int
	// Leads reports whether this broker leads tp: the ISR size, under-replication and an
	// empty ISR are the leader's to report.
	Leads(tp shard.TopicPartition) bool
	// ISRChanges returns the ISR shrinks and expands of the partitions this broker leads,
	// since it started.
	ISRChanges() (shrinks, expands uint64)
	// Ready is nil when the broker can serve as a cluster member (the controller is
	// reachable); its error is what /readyz reports otherwise.
	Ready() error
}

// Local is the Replication of a lone broker: one replica per partition, no ISR changes,
// no controller to reach.
type Local struct{}

// ReplicaCounts implements Replication: every partition has one replica.
func (Local) ReplicaCounts() map[shard.TopicPartition]int { return nil }

// Leads implements Replication: a lone broker leads everything.
func (Local) Leads(shard.TopicPartition) bool { return true }

// ISRChanges implements Replication.
func (Local) ISRChanges() (uint64, uint64) { return 0, 0 }

// Ready implements Replication.
func (Local) Ready() error { return nil }

// Server is a running admin listener.
type Server struct {
	cfg    Config
	core   *shard.Broker
	net    *netio.Server
	http   *http.Server
	ln     net.Listener
	log    *slog.Logger
	ready  atomic.Bool // set by SetReady once the broker serves; cleared at shutdown
	served chan error

	producersMu  sync.Mutex // serialises first use of a producer name (ProducerIdentity)
	roundRobin   atomic.Uint32
	httpRequests *prometheus.CounterVec // by endpoint and status (the API's own traffic)
}

// Start listens on cfg.Listen and serves. core and srv are the broker's core and protocol
// server (the connection counters); srv may be nil.
func Start(cfg Config, core *shard.Broker, srv *netio.Server) (*Server, error) {
	cfg = cfg.withDefaults()
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("admin listen %s: %w", cfg.Listen, err)
	}
	s := &Server{cfg: cfg, core: core, net: srv, log: cfg.Logger, served: make(chan error, 1)}
	s.ln = newLimitListener(ln, cfg.ConnectionsMax, cfg.ConnectionsPerAddressMax)
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), collectors.NewGoCollector(),
		newCollector(core, srv, cfg.Replication, cfg.Groups, cfg.Writeback))
	s.httpRequests = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ringlog_http_requests_total",
		Help: "Requests to the admin listener's JSON API by endpoint and HTTP status."}, []string{"endpoint", "code"})
	reg.MustRegister(s.httpRequests)
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError, Timeout: scrapeWaitMax}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { writeText(w, http.StatusOK, "ok\n") })
	mux.HandleFunc("GET /readyz", s.readyz)
	s.routes(mux)
	s.http = &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		WriteTimeout:      FetchWaitMax + writeTimeoutPadding,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    headerBytesMax,
		ErrorLog:          slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelWarn),
	}
	var serving net.Listener = s.ln
	if cfg.TLS != nil {
		serving = tls.NewListener(s.ln, cfg.TLS)
	}
	go func() { s.served <- s.http.Serve(serving) }()
	return s, nil
}

func (c Config) withDefaults() Config {
	if c.BodyBytesMax <= 0 {
		c.BodyBytesMax = BodyBytesMaxDefault
	}
	if c.ConnectionsMax <= 0 {
		c.ConnectionsMax = ConnectionsMaxDefault
	}
	if c.ConnectionsPerAddressMax <= 0 {
		c.ConnectionsPerAddressMax = min(ConnectionsPerAddressMaxDefault, c.ConnectionsMax)
	}
	if c.FetchBytesMax <= 0 {
		c.FetchBytesMax = FetchBytesMaxDefault
	}
	if c.Replication == nil {
		c.Replication = Local{}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Addr is the bound address.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// SetReady marks the broker ready (true once every listener serves) or not (shutdown).
func (s *Server) SetReady(ready bool) { s.ready.Store(ready) }

// Shutdown stops accepting, answers the requests in flight until ctx ends, then closes.
func (s *Server) Shutdown(ctx context.Context) error {
	s.SetReady(false)
	err := s.http.Shutdown(ctx)
	if err != nil {
		s.http.Close()
	}
	if serr := <-s.served; !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	return err
}

// readyz answers 200 when the broker serves: start-up finished (the catalog loaded and
// every partition recovered and opened before the listeners started), every shard loop
// answers its mailbox, replication is ready, and shutdown has not begun.
func (s *Server) readyz(w http.ResponseWriter, _ *http.Request) {
	if err := s.readiness(); err != nil {
		writeText(w, http.StatusServiceUnavailable, "not ready: "+err.Error()+"\n")
		return
	}
	writeText(w, http.StatusOK, "ready\n")
}

func (s *Server) readiness() error {
	if !s.ready.Load() {
		return errors.New("starting up or shutting down")
	}
	if err := s.core.Ping(scrapeWaitMax); err != nil {
		return err
	}
	return s.cfg.Replication.Ready()
}

func writeText(w http.ResponseWriter, status int, text string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(text))
}
