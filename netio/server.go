package netio

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ringlog/ringlog/netio/wire"

	"golang.org/x/sys/unix"
)

// Handler serves decoded requests. Serve is called once per request, on the goroutine that
// reads the request's connection (so it should hand work off, not block: a blocked Serve
// stalls only that connection's reads). The handler must call exactly one of req.Reply,
// req.ReplyMessage or req.ReplyError, once, from any goroutine, now or later (acks=all
// produce and long-poll fetch complete later). The server writes responses in request
// order per connection, so a late reply holds back the replies after it on the same
// connection.
//
// req.Body aliases the frame buffer: produce record bytes stay valid until Reply is called
// and must be copied if kept longer. ApiVersions is answered by the server itself.
type Handler interface {
	Serve(req *Request)
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(req *Request)

// Serve calls f(req).
func (f HandlerFunc) Serve(req *Request) { f(req) }

// ConnInfo identifies the connection a request arrived on.
type ConnInfo struct {
	ID         uint64 // unique per server, starting at 1
	Shard      int    // the shard index given to Serve for the accepting listener
	RemoteAddr string
	// OnLoop is set for connections served by ServeRing: the handler is called on shard
	// Shard's reactor loop, so it may run that shard's work inline instead of posting it.
	OnLoop bool
	// Session is the connection's security state: its principal and client id
	// (security.go). Never nil for connections the server accepted.
	Session *Session
	// FetchFiles is charged one unit per segment descriptor held by this connection's
	// unsent fetch responses (FetchFilesPerConnMax, and FetchFilesPerAddressMax for its
	// client IP). The broker core takes and gives back; nil in tests that build requests
	// by hand.
	FetchFiles *Charges
}

// Request is one decoded request frame waiting for its response.
type Request struct {
	Header wire.RequestHeader
	Body   wire.Message // the decoded request schema (e.g. *wire.ProduceRequest)
	Conn   ConnInfo

	owner   requestOwner
	frame   *[]byte // pooled payload buffer; returned when the request is released
	charged int64   // request bytes charged to the connection, address and shard budgets
	// respCharged is the reply's memory (responseBytes), charged to the same budgets when
	// the handler answers and released with the request.
	respCharged int64
	silent      bool // acks=0 produce: no response is written
	// amend, if set by the server before the handler runs, edits the handler's reply
	// (authorize.go puts back the entries an ACL denied).
	amend    func(*Response)
	fatal    bool // close the connection after writing this response
	replied  atomic.Bool
	ready    bool     // guarded by the owner's lock: resp is set
	response Response // guarded by the owner's lock until ready, then owned by the writer

	// Decoding targets kept with the pooled request (serveRequest): a produce or fetch
	// decodes into the arrays the request's previous use left, without allocating.
	produce wire.ProduceRequest
	fetch   wire.FetchRequest
}

// Requests are pooled (getRequest, recycleRequest): a request goes back once its connection
// has released it — replied, response written or dropped, Done called. A handler must not
// touch a request after its Reply (that includes its Body).
var requests sync.Pool

func getRequest(h wire.RequestHeader, info ConnInfo, owner requestOwner) *Request {
	req, _ := requests.Get().(*Request)
	if req == nil {
		req = new(Request)
	}
	req.Header, req.Conn, req.owner = h, info, owner
	return req
}

// refuseHeader makes r, whose header wire.ParseRequestHeader refused with herr, the
// connection's last request: answered at once with the correlation id there is
// (FRAME_TOO_LARGE for a length above frameBytesMax, INVALID_REQUEST otherwise), then the
// connection closes, as the stream cannot be resynchronised. Both drivers' readers call it
// before the request is queued or dispatched, so fatal is set directly (not markFatal).
func (r *Request) refuseHeader(herr error, frameBytesMax uint32) {
	code := wire.ErrInvalidRequest
	if r.Header.Length > frameBytesMax {
		code = wire.ErrFrameTooLarge
	}
	r.fatal = true
	r.response = Response{ErrorCode: code, ErrorMessage: herr.Error()}
	r.ready = true
	r.replied.Store(true)
}

// recycleRequest returns a released request to the pool, keeping only its decoding targets.
func recycleRequest(req *Request) {
	produce, fetch := req.produce, req.fetch
	*req = Request{produce: produce, fetch: fetch}
	requests.Put(req)
}

// fatalOwner is a connection that must hear of a fatal request when it is marked, not by
// reading the request later: the net driver's reader would race the writer that releases
// (and recycles) the request.
type fatalOwner interface{ fatalRequest() }

// markFatal makes the connection close after writing this request's response. Call it
// before Reply.
func (r *Request) markFatal() {
	r.fatal = true
	if o, ok := r.owner.(fatalOwner); ok {
		o.fatalRequest()
	}
}

// bodyFor is the message a request of api decodes into: the request's own target for
// produce and fetch, a new one otherwise.
func (r *Request) bodyFor(api wire.APIKey) wire.Message {
	switch api {
	case wire.APIProduce:
		return &r.produce
	case wire.APIFetch:
		return &r.fetch
	}
	return wire.NewRequest(api)
}

// requestOwner is the connection (of whichever I/O driver) a request belongs to.
type requestOwner interface {
	complete(req *Request, resp Response)
	server() *Server
}

// serverConn is what Shutdown and Close need from a connection of any driver.
type serverConn interface {
	stopReading()
	fail(err error)
}

// Response is a handler's answer. Either Body is set (the API's response schema), or
// ErrorCode is set and the response carries only the frame-level code and message.
type Response struct {
	Body         wire.Message
	ErrorCode    wire.ErrorCode
	ErrorMessage string
	// Done, if set, is called once the response has been written to the socket or
	// dropped (connection gone, acks=0). Fetch handlers use it to release the segment
	// files their FileRanges point into.
	Done func()
}

// Reply completes the request. It panics if called twice for the same request.
func (r *Request) Reply(resp Response) {
	if r.replied.Swap(true) {
		panic(fmt.Sprintf("netio: Reply called twice for %s correlation id %d", r.Header.API, r.Header.CorrelationID))
	}
	if r.amend != nil {
		resp = r.amended(resp)
	}
	if delay := r.owner.server().throttle(r, &resp); delay > 0 {
		r.completeAfter(delay, resp)
		return
	}
	r.owner.complete(r, resp)
}

// amended returns resp as r.amend edits it. Apart from Reply (and not inlined) so that
// resp escapes to the heap only when there is an amend.
//
//go:noinline
func (r *Request) amended(resp Response) Response {
	r.amend(&resp)
	return resp
}

// completeAfter completes r once delay has passed (a quota's throttle). Apart from Reply
// (and not inlined) so that resp escapes to the heap only when a reply is throttled.
//
//go:noinline
func (r *Request) completeAfter(delay time.Duration, resp Response) {
	time.AfterFunc(delay, func() { r.owner.complete(r, resp) })
}

// ReplyMessage completes the request with a response body.
func (r *Request) ReplyMessage(m wire.Message) { r.Reply(Response{Body: m}) }

// ReplyError completes the request with a frame-level error.
func (r *Request) ReplyError(code wire.ErrorCode, message string) {
	r.Reply(Response{ErrorCode: code, ErrorMessage: message})
}

// Egress selects how fetch file ranges reach the socket.
type Egress int

const (
	// EgressSendfile sends file ranges with sendfile(2) and an explicit offset, from the
	// page cache to the socket without a user-space copy (the default).
	EgressSendfile Egress = iota
	// EgressCopy preads file ranges into a buffer and writes it: the baseline to measure
	// sendfile against, and the path for transports that need the bytes (TLS).
	EgressCopy
)

// Config holds the server's limits. Zero fields take the defaults below.
type Config struct {
	FrameBytesMax      uint32 // largest request frame length; default FrameBytesMaxDefault
	InflightPerConnMax int    // requests read ahead per connection; default 64
	// ConnBufferBytesMax bounds the request and response bytes one connection holds;
	// default FrameBytesMax.
	ConnBufferBytesMax int64
	// ServerBufferBytesMax bounds the request and response bytes all connections hold;
	// default 1 GiB. It is split evenly among Shards budgets, so that no request takes a
	// lock or a counter shared by every shard.
	ServerBufferBytesMax int64
	// AddressBufferBytesMax bounds what the connections of one client IP hold together;
	// default a quarter of ServerBufferBytesMax.
	AddressBufferBytesMax int64
	// Shards is the number of shard indexes Serve and ServeRing are given (0..Shards-1);
	// default 1.
	Shards         int
	ConnectionsMax int // open connections; further ones are closed at accept; default 4096
	// ConnectionsPerAddressMax bounds open connections from one client IP; default a
	// quarter of ConnectionsMax, and at least min(ConnectionsMax, 16).
	ConnectionsPerAddressMax int
	// RequestEntriesMax bounds the entries (partitions, topics, names, config keys, summed)
	// of one request; more are refused with INVALID_REQUEST before decoding; default 10,000.
	RequestEntriesMax int
	// FetchFilesPerConnMax and FetchFilesPerAddressMax bound the segment descriptors held by
	// unsent fetch responses of one connection and of one client IP; beyond them a
	// partition is answered THROTTLED. Defaults 256 and 1,024.
	FetchFilesPerConnMax    int64
	FetchFilesPerAddressMax int64
	WriteTimeout            time.Duration // a client that reads nothing for this long is dropped; default 30s
	// FrameReadTimeout: a frame must be complete this long after its first byte (header
	// included) arrived; default 30s.
	FrameReadTimeout time.Duration
	// IdleTimeout closes a connection that has sent nothing for this long while none of its
	// requests is outstanding (Kafka's connections.max.idle.ms); default 10 min.
	IdleTimeout time.Duration
	Egress      Egress // default EgressSendfile
	// MemorySendZC makes the ring driver send in-memory records of at least
	// sendZCBytesMin (direct mode's recent-block cache) with IORING_OP_SEND_ZC instead of
	// SEND; a batch holding such a send is released only once the kernel's notification
	// says it let go of the pages. Off by default: it lost the A/B on loopback
	// (BenchmarkServerFetchEgress, docs/benchmarks.md), where the kernel copies
	// zero-copy sends anyway. A ring without SEND_ZC (before Linux 6.0) sends with SEND
	// (ServeRing logs it).
	MemorySendZC bool
	// TLS, when set, makes every connection of Serve a TLS server connection (crypto/tls)
	// with this configuration; the handshake must finish within FrameReadTimeout. File
	// ranges are then copied through user space (EgressCopy), since the kernel cannot
	// encrypt a sendfile, and ServeRing refuses to run: TLS connections take the net driver.
	TLS *tls.Config
	// Security configures authentication, ACLs and quotas (security.go); nil: none.
	Security      *Security
	BrokerVersion string // reported by ApiVersions
	// APIVersionsMax lowers the highest version the server serves and advertises of the
	// APIs it names, below what it can (wire.APIKey.VersionMax): a version above it is
	// answered UNSUPPORTED_VERSION, as an older release answers it. For tests of clients
	// against older brokers (and a broker mid-downgrade); nil serves every version.
	APIVersionsMax map[wire.APIKey]uint16
	Logf           func(format string, args ...any)
	// ConnState, if set, is called when a connection opens (open = true) and after it has
	// closed (open = false). Requests the handler has not answered yet are released when
	// it answers.
	ConnState             func(info ConnInfo, open bool)
	writeBatchBytesTarget int
}

// Defaults, with the back-of-the-envelope behind them: 64 in-flight requests per
// connection cover a pipelining producer at 1 MiB per request on a 10 Gb/s link with a
// 50 ms tail (~60 MiB in flight); 1 GiB of request buffers server-wide is what a 2-core
// box can hand to disks in about one second.
const (
	inflightPerConnDefault       = 64
	serverBufferBytesDefault     = 1 << 30
	connectionsMaxDefault        = 4096
	requestEntriesMaxDefault     = 10000
	connectionsPerAddressFloor   = 16
	fetchFilesPerConnDefault     = 256
	fetchFilesPerAddressDefault  = 1024
	writeTimeoutDefault          = 30 * time.Second
	frameReadTimeoutDefault      = 30 * time.Second
	idleTimeoutDefault           = 10 * time.Minute
	readBufferBytes              = 64 << 10
	writeBatchBytesTargetDefault = 256 << 10
)

func (c *Config) setDefaults() {
	if c.FrameBytesMax == 0 {
		c.FrameBytesMax = wire.FrameBytesMaxDefault
	}
	if c.InflightPerConnMax <= 0 {
		c.InflightPerConnMax = inflightPerConnDefault
	}
	if c.ConnBufferBytesMax <= 0 {
		c.ConnBufferBytesMax = int64(c.FrameBytesMax)
	}
	if c.ServerBufferBytesMax <= 0 {
		c.ServerBufferBytesMax = serverBufferBytesDefault
	}
	if c.ConnectionsMax <= 0 {
		c.ConnectionsMax = connectionsMaxDefault
	}
	if c.ConnectionsPerAddressMax <= 0 {
		c.ConnectionsPerAddressMax = max(c.ConnectionsMax/4, min(c.ConnectionsMax, connectionsPerAddressFloor))
	}
	if c.AddressBufferBytesMax <= 0 {
		c.AddressBufferBytesMax = c.ServerBufferBytesMax / 4
	}
	if c.Shards <= 0 {
		c.Shards = 1
	}
	if c.RequestEntriesMax <= 0 {
		c.RequestEntriesMax = requestEntriesMaxDefault
	}
	if c.FetchFilesPerConnMax <= 0 {
		c.FetchFilesPerConnMax = fetchFilesPerConnDefault
	}
	if c.FetchFilesPerAddressMax <= 0 {
		c.FetchFilesPerAddressMax = fetchFilesPerAddressDefault
	}
	if c.WriteTimeout <= 0 {
		c.WriteTimeout = writeTimeoutDefault
	}
	if c.FrameReadTimeout <= 0 {
		c.FrameReadTimeout = frameReadTimeoutDefault
	}
	if c.IdleTimeout <= 0 {
		c.IdleTimeout = idleTimeoutDefault
	}
	if c.writeBatchBytesTarget <= 0 {
		c.writeBatchBytesTarget = writeBatchBytesTargetDefault
	}
	if c.Logf == nil {
		c.Logf = func(string, ...any) {}
	}
}

// ErrServerClosed is returned by Serve after Shutdown or Close.
var ErrServerClosed = errors.New("netio: server closed")

// Server accepts connections and drives the protocol on them, with one of two I/O drivers
// per listener: Serve uses Go's net package (a reader and a writer goroutine per
// connection, conn_net.go; the Handler is called on the reader goroutine), ServeRing runs
// the listener and its connections on a shard's ring.Reactor (conn_ring.go; the Handler is
// called on the loop thread).
type Server struct {
	cfg     Config
	handler Handler
	budgets []*budget // per shard index: its share of ServerBufferBytesMax
	addrs   addressTable

	nextConnID       atomic.Uint64
	connCount        atomic.Int64
	stats            serverStats
	closing          chan struct{} // closed by Shutdown/Close: stop accepting and reading
	stoppedAccepting chan struct{} // closed once every listener is closed
	killed           chan struct{} // closed by Close or an expired Shutdown: drop everything

	mu            sync.Mutex
	listeners     map[net.Listener]struct{} // guarded by mu
	ringListeners []*ringListener           // guarded by mu
	conns         map[serverConn]struct{}   // guarded by mu
	closed        bool                      // guarded by mu
	connsWG       sync.WaitGroup
	closeOnce     sync.Once
	killOnce      sync.Once
}

// NewServer returns a server that hands requests to h.
func NewServer(h Handler, cfg Config) *Server {
	cfg.setDefaults()
	if cfg.ConnBufferBytesMax < int64(cfg.FrameBytesMax) {
		panic(fmt.Sprintf("netio: ConnBufferBytesMax %d below FrameBytesMax %d: a maximal frame could never be read", cfg.ConnBufferBytesMax, cfg.FrameBytesMax))
	}
	return &Server{
		cfg:              cfg,
		handler:          h,
		budgets:          shardBudgets(cfg),
		closing:          make(chan struct{}),
		stoppedAccepting: make(chan struct{}),
		killed:           make(chan struct{}),
		listeners:        map[net.Listener]struct{}{},
		conns:            map[serverConn]struct{}{},
	}
}

func shardBudgets(cfg Config) []*budget {
	out := make([]*budget, cfg.Shards)
	for i := range out {
		out[i] = newBudget(max(cfg.ServerBufferBytesMax/int64(cfg.Shards), 1))
	}
	return out
}

// shardBudget is the budget of the shard a connection was accepted for.
func (s *Server) shardBudget(shard int) *budget { return s.budgets[shard%len(s.budgets)] }

// admitAddress counts a new connection against its client IP's limits; nil when the
// address already has ConnectionsPerAddressMax open.
func (s *Server) admitAddress(remote string, shard int) *address {
	a := s.addrs.admit(remoteIP(remote), &s.cfg)
	if a == nil {
		s.stats.refusedConns.Add(1)
		s.cfg.Logf("netio: refusing %s on shard %d: %d connections open from that address (ConnectionsPerAddressMax)", remote, shard, s.cfg.ConnectionsPerAddressMax)
	}
	return a
}

// connBudgets are the byte budgets of a new connection.
func (s *Server) connBudgets(a *address, shard int) budgets {
	return budgets{conn: newBudget(s.cfg.ConnBufferBytesMax), addr: a.bytes, shard: s.shardBudget(shard)}
}

func (s *Server) fetchFiles(a *address) *Charges {
	return &Charges{conn: NewCounter(s.cfg.FetchFilesPerConnMax), addr: a.fetchFiles}
}

// Config returns the effective configuration (defaults filled in).
func (s *Server) Config() Config { return s.cfg }

// Listen opens the broker's main TCP listener. It does not set SO_REUSEPORT: a second
// process binding the same address fails with "address already in use" instead of
// silently taking half of the connections. Every shard accepts on this one socket (Serve
// and ServeRing may be given the same listener).
//
// The listener is plain TCP: Go makes MPTCP listeners by default (Go 1.24+, where the kernel
// has MPTCP), and every connection accepted on one is an MPTCP socket, even from a plain
// TCP client: it refuses zero-copy sends (SEND_ZC: EOPNOTSUPP) and puts another protocol
// layer under every send and splice (see ListenShard, and docs/benchmarks.md's direct-mode
// section).
func Listen(ctx context.Context, address string) (net.Listener, error) {
	var lc net.ListenConfig
	lc.SetMultipathTCP(false)
	ln, err := lc.Listen(ctx, "tcp", address)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", address, err)
	}
	return ln, nil
}

// ListenShard opens a TCP listener with SO_REUSEPORT set, so that every shard can own a
// listener on the same address and the kernel spreads connections across them. Any process
// of the same user can join the group, so a broker's main listener uses Listen; this is
// for tests and benchmarks that want several listeners of one process on one port.
func ListenShard(ctx context.Context, address string) (net.Listener, error) {
	lc := net.ListenConfig{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		if err := rc.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1)
		}); err != nil {
			return err
		}
		return serr
	}}
	// Plain TCP: Go's ListenConfig makes MPTCP listeners by default (Go 1.24+, where the
	// kernel has it), and an accepted MPTCP socket refuses zero-copy sends (SEND_ZC:
	// EOPNOTSUPP) and puts another protocol layer under every send.
	lc.SetMultipathTCP(false)
	ln, err := lc.Listen(ctx, "tcp", address)
	if err != nil {
		return nil, fmt.Errorf("listen %s with SO_REUSEPORT: %w", address, err)
	}
	return ln, nil
}

// Serve accepts connections on ln until the listener fails or the server shuts down;
// connections accepted here carry shard in their ConnInfo. It returns ErrServerClosed
// after Shutdown or Close.
func (s *Server) Serve(ln net.Listener, shard int) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		ln.Close()
		return ErrServerClosed
	}
	s.listeners[ln] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.listeners, ln)
		s.mu.Unlock()
	}()
	var backoff time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			select {
			case <-s.closing:
				return ErrServerClosed
			default:
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, unix.EMFILE) || errors.Is(err, unix.ENFILE) {
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				s.cfg.Logf("netio: accept on %s: %v; retrying in %v", ln.Addr(), err, backoff)
				time.Sleep(backoff)
				continue
			}
			return fmt.Errorf("accept on %s: %w", ln.Addr(), err)
		}
		backoff = 0
		if s.connCount.Add(1) > int64(s.cfg.ConnectionsMax) {
			s.connCount.Add(-1)
			s.stats.refusedConns.Add(1)
			s.cfg.Logf("netio: refusing %s: %d connections open (ConnectionsMax)", nc.RemoteAddr(), s.cfg.ConnectionsMax)
			nc.Close()
			continue
		}
		if s.cfg.TLS != nil {
			nc = tls.Server(nc, s.cfg.TLS)
		}
		s.startConn(nc, shard)
	}
}

func (s *Server) startConn(nc net.Conn, shard int) {
	remote := nc.RemoteAddr().String()
	a := s.admitAddress(remote, shard)
	if a == nil {
		s.connCount.Add(-1)
		nc.Close()
		return
	}
	c := newConn(s, nc, ConnInfo{ID: s.nextConnID.Add(1), Shard: shard, RemoteAddr: remote, FetchFiles: s.fetchFiles(a), Session: &Session{}}, a)
	if !s.addConn(c, c.info) {
		s.addrs.leave(a)
		s.connCount.Add(-1)
		nc.Close()
		return
	}
	c.start()
}

func (s *Server) connDone(c serverConn, info ConnInfo, a *address) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	s.addrs.leave(a)
	s.connCount.Add(-1)
	if s.cfg.ConnState != nil {
		s.cfg.ConnState(info, false)
	}
	s.connsWG.Done()
}

// addConn registers a connection of any driver; false if the server is closing.
func (s *Server) addConn(c serverConn, info ConnInfo) bool {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return false
	}
	s.conns[c] = struct{}{}
	s.connsWG.Add(1)
	s.mu.Unlock()
	if s.cfg.ConnState != nil {
		s.cfg.ConnState(info, true)
	}
	return true
}

// Stats are cumulative counters since the server started.
type Stats struct {
	Requests        int64 // request frames read
	Responses       int64 // response frames written
	SendfileBytes   int64 // file bytes sent with sendfile or splice (zero-copy)
	CopiedFileBytes int64 // file bytes sent by pread + write (EgressCopy)
	RefusedConns    int64 // connections closed at accept by ConnectionsMax or ConnectionsPerAddressMax
	RefusedRequests int64 // requests refused by RequestEntriesMax or for a repeated entry
	TLSHandshakes   int64 // TLS handshakes completed (Config.TLS)
	AuthFailures    int64 // SASL exchanges that failed (the connection was closed)
	Throttled       int64 // replies delayed by a quota
	// InlineSendBytes counts response bytes from memory the ring driver wrote with a
	// non-blocking send(2) on its loop; RingSendOps the ring SEND ops it submitted for what
	// the socket did not take at once (a full socket buffer).
	InlineSendBytes int64
	RingSendOps     int64
}

type serverStats struct {
	requests, responses, sendfileBytes, copiedFileBytes, refusedConns, refusedRequests, tlsHandshakes, authFailures, throttled atomic.Int64
	inlineSendBytes, ringSendOps                                                                                               atomic.Int64
}

// Stats returns the current counters.
func (s *Server) Stats() Stats {
	return Stats{
		Requests:        s.stats.requests.Load(),
		Responses:       s.stats.responses.Load(),
		SendfileBytes:   s.stats.sendfileBytes.Load(),
		CopiedFileBytes: s.stats.copiedFileBytes.Load(),
		RefusedConns:    s.stats.refusedConns.Load(),
		RefusedRequests: s.stats.refusedRequests.Load(),
		TLSHandshakes:   s.stats.tlsHandshakes.Load(),
		AuthFailures:    s.stats.authFailures.Load(),
		Throttled:       s.stats.throttled.Load(),
		InlineSendBytes: s.stats.inlineSendBytes.Load(),
		RingSendOps:     s.stats.ringSendOps.Load(),
	}
}

// StoppedAccepting is closed once Shutdown or Close has closed every listener.
func (s *Server) StoppedAccepting() <-chan struct{} { return s.stoppedAccepting }

// ConnCount returns the number of open connections.
func (s *Server) ConnCount() int { return int(s.connCount.Load()) }

// BufferedBytes returns the request and response bytes currently held across all
// connections.
func (s *Server) BufferedBytes() int64 {
	var n int64
	for _, b := range s.budgets {
		n += b.usedNow()
	}
	return n
}

// Shutdown stops accepting, stops reading new requests, waits until every request already
// read has been answered and written, then closes the connections. If ctx ends first the
// remaining connections are closed at once and ctx's error is returned.
func (s *Server) Shutdown(ctx context.Context) error {
	s.beginClose()
	done := make(chan struct{})
	go func() {
		s.connsWG.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		s.kill()
		<-done
		return ctx.Err()
	}
}

// Close closes listeners and connections at once; responses not yet written are dropped
// (their Done callbacks still run when the handler replies).
func (s *Server) Close() error {
	s.beginClose()
	s.kill()
	s.connsWG.Wait()
	return nil
}

func (s *Server) beginClose() {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		close(s.closing)
		for ln := range s.listeners {
			ln.Close()
		}
		ringListeners := s.ringListeners
		conns := make([]serverConn, 0, len(s.conns))
		for c := range s.conns {
			conns = append(conns, c)
		}
		s.mu.Unlock()
		// Not under mu: a ring listener's stop waits for its loop, which may be taking mu.
		for _, l := range ringListeners {
			l.stop()
		}
		close(s.stoppedAccepting)
		for _, c := range conns {
			c.stopReading()
		}
		for _, b := range s.budgets {
			b.abort()
		}
	})
}

func (s *Server) kill() {
	s.killOnce.Do(func() {
		close(s.killed)
		s.mu.Lock()
		conns := make([]serverConn, 0, len(s.conns))
		for c := range s.conns {
			conns = append(conns, c)
		}
		s.mu.Unlock()
		for _, c := range conns {
			c.fail(ErrServerClosed)
		}
	})
}
