package kafka

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ringlog/ringlog/engine/shard"
	"github.com/ringlog/ringlog/netio"
	"github.com/ringlog/ringlog/netio/security"
	"github.com/ringlog/ringlog/netio/wire"
	"github.com/ringlog/ringlog/replication/cluster"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Config configures the Kafka listener. Its connection and byte limits are the ringlog
// protocol server's (the Limits server admits every connection, see netio.Admission), so
// one operator setting bounds both listeners together.
type Config struct {
	// Limits is the ringlog protocol server whose limits apply: FrameBytesMax,
	// InflightPerConnMax, ConnectionsMax and per address, the byte budgets, the fetch
	// descriptor quotas, RequestEntriesMax and the timeouts.
	Limits *netio.Server
	// FetchResponseBytesMax caps a fetch response's records whatever the client asks for;
	// 0 means netio.FetchResponseBytesMaxDefault.
	FetchResponseBytesMax int64
	// AutoCreateTopics creates a topic a Metadata request names and the broker lacks
	// (Kafka's auto.create.topics.enable, off by default here), with
	// AutoCreatePartitions partitions (default 1) and the broker's topic defaults.
	AutoCreateTopics     bool
	AutoCreatePartitions int
	// Logf receives connection-level events (refusals, protocol errors); nil discards them.
	Logf func(format string, args ...any)
	// TLS, when set, makes every connection a TLS server connection (crypto/tls), as on the
	// ringlog listener (give both the same security.ServerTLS.Config() so one SIGHUP
	// reloads both). The handshake must finish within the FrameReadTimeout of Limits. Fetch
	// records are then read into a buffer and encrypted instead of sent by sendfile (the
	// kernel cannot encrypt a sendfile; SpliceWriter copies on any conn that is not a raw
	// socket).
	TLS *tls.Config
	// Security is the ringlog server's (netio.Config.Security): with Credentials set the
	// listener offers SASL/SCRAM (SaslHandshake, SaslAuthenticate); with AuthRequired it
	// refuses every request but ApiVersions and the SASL exchange until the connection has
	// authenticated, by SCRAM or by a client certificate under mutual TLS (session.go).
	// Its Authorizer and Quotas apply here too, with Kafka's error codes and throttle
	// times (authorize.go, quota.go). nil: anyone, as security.Anonymous.
	Security *netio.Security
	// Cluster, when set, is the replicated cluster this broker belongs to (the Manager the
	// ringlog listener's BrokerHandler.WithCluster takes): Metadata describes it, and
	// partitions this broker does not lead answer NOT_LEADER_OR_FOLLOWER (cluster.go).
	// nil: a single broker, node 0.
	Cluster *cluster.Manager
}

// adminFrameBytesMax bounds the frame of every API but Produce: 1 MiB holds a Metadata or
// ListOffsets request naming 10,000 topics.
const adminFrameBytesMax = 1 << 20

// decodedBytesPerFrameByteMax bounds what kmsg allocates decoding a request, per frame
// byte. kmsg checks every array length against the bytes left before allocating, so the
// worst case is an array of the smallest elements into the largest structs: a flexible
// Metadata request's topics cost 2 bytes on the wire and 48 in memory (24x; DeleteTopics
// and DescribeConfigs names 16x, Fetch partitions 2x, Produce records alias the frame).
// FuzzServeFrame checks the bound on every input. A frame of an API other than Produce is
// charged to the connection's byte budgets at this multiple of its size, so decoded
// requests count against the same limits as raw bytes.
const decodedBytesPerFrameByteMax = 32

// Server is the Kafka protocol listener over one shard.Broker.
type Server struct {
	b        *shard.Broker
	cfg      Config
	limits   netio.Config
	nodeHost string
	nodePort int32
	logf     func(string, ...any)

	closing chan struct{}
	mu      sync.Mutex
	lns     map[net.Listener]struct{} // guarded by mu
	conns   map[*conn]struct{}        // guarded by mu
	closed  bool                      // guarded by mu
	wg      sync.WaitGroup
	once    sync.Once
	// throttled counts responses a quota delayed (held back, or followed by a mute).
	throttled atomic.Int64
}

// Throttled is how many responses a quota has delayed since the server started.
func (s *Server) Throttled() int64 { return s.throttled.Load() }

// NewServer returns a Kafka listener for b that tells clients to connect to advertised
// (host:port).
func NewServer(b *shard.Broker, advertised string, cfg Config) (*Server, error) {
	host, port, err := splitHostPort(advertised)
	if err != nil {
		return nil, fmt.Errorf("advertised: %w", err)
	}
	if cfg.Limits == nil {
		return nil, errors.New("kafka: Config.Limits (the server whose limits apply) is nil")
	}
	if cfg.FetchResponseBytesMax <= 0 {
		cfg.FetchResponseBytesMax = netio.FetchResponseBytesMaxDefault
	}
	if cfg.AutoCreatePartitions <= 0 {
		cfg.AutoCreatePartitions = 1
	}
	logf := cfg.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	return &Server{
		b: b, cfg: cfg, limits: cfg.Limits.Config(), nodeHost: host, nodePort: port, logf: logf,
		closing: make(chan struct{}), lns: map[net.Listener]struct{}{}, conns: map[*conn]struct{}{},
	}, nil
}

// Serve accepts connections on ln until it fails or the server closes (then it returns
// netio.ErrServerClosed).
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		ln.Close()
		return netio.ErrServerClosed
	}
	s.lns[ln] = struct{}{}
	s.mu.Unlock()
	for {
		nc, err := ln.Accept()
		if err != nil {
			select {
			case <-s.closing:
				return netio.ErrServerClosed
			default:
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return fmt.Errorf("kafka accept on %s: %w", ln.Addr(), err)
		}
		adm, err := s.cfg.Limits.Admit(nc.RemoteAddr().String())
		if err != nil {
			s.logf("kafka: refusing %s: %v", nc.RemoteAddr(), err)
			nc.Close()
			continue
		}
		if s.cfg.TLS != nil {
			nc = tls.Server(nc, s.cfg.TLS)
		}
		c := &conn{s: s, nc: nc, adm: adm, remote: nc.RemoteAddr().String(),
			queue: make(chan *pending, s.limits.InflightPerConnMax), quit: make(chan struct{})}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			adm.Leave()
			nc.Close()
			continue
		}
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		c.start()
	}
}

// Shutdown stops accepting and reading, lets every request already read answer, then
// closes the connections; when ctx ends first they are closed at once.
func (s *Server) Shutdown(ctx context.Context) error {
	s.once.Do(func() {
		s.mu.Lock()
		s.closed = true
		close(s.closing)
		for ln := range s.lns {
			ln.Close()
		}
		for c := range s.conns {
			c.cutReads() // the reader stops; the writer drains
		}
		s.mu.Unlock()
	})
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		s.mu.Lock()
		for c := range s.conns {
			c.fail()
		}
		s.mu.Unlock()
		<-done
		return ctx.Err()
	}
}

// Close closes listeners and connections at once.
func (s *Server) Close() error {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	s.Shutdown(ctx)
	return nil
}

// conn is one client connection: a reader goroutine decodes frames and dispatches them; a
// writer goroutine writes their responses in arrival order as they complete.
type conn struct {
	s      *Server
	nc     net.Conn
	adm    *netio.Admission
	remote string
	// queue holds requests read and not yet answered, in order; its capacity is the
	// connection's in-flight limit (InflightPerConnMax), so a full queue stops reading.
	queue    chan *pending
	quit     chan struct{} // closed by fail: waits give up
	quitOnce sync.Once
	dead     atomic.Bool
	sess     session // the reader goroutine's alone (session.go)
	// readMu orders the reader's deadline changes against Shutdown's cut: once readsCut
	// is set no later SetReadDeadline can push the cut back (an idle connection would
	// otherwise keep Shutdown waiting for its IdleTimeout or its context).
	readMu   sync.Mutex
	readsCut bool // guarded by readMu
	// mutedUntil (Unix nanoseconds) is when the reader may read again after a throttled
	// response (quota.go); set by the writer, read by the reader.
	mutedUntil atomic.Int64
}

// pending is one request waiting for its response.
type pending struct {
	c    *conn
	hdr  requestHeader
	body []byte // the whole frame until dispatch; record bytes alias it
	// pooled holds the frame until the response is written (produced records alias it
	// until the append is answered), then goes back to netio's frame pools.
	pooled  *[]byte
	charged int64 // bytes charged to the admission until written (see decodedBytesPerFrameByteMax)
	// frameBytes is the request frame's size (a produce's charge to its byte quota).
	frameBytes int64
	// Set by the reader before the handler runs, used by the writer (finish):
	// amend puts the entries an ACL denied into the handler's reply (authorize.go);
	// quotaKey is the quota bucket charged, "" for none (quota.go).
	amend    func(kmsg.Response)
	quotaKey string
	// hold and mute are the writer's: how long a quota holds this response back, or mutes
	// the connection's reads after it (quota.go).
	hold, mute time.Duration
	done       chan struct{}
	replied    atomic.Bool
	// Set by reply or replyFrame before done is closed; nil resp and frame: no response
	// (acks=0 produce, or a connection closed after the responses before it).
	resp    kmsg.Response
	frame   frameBuilder
	release func()
	fatal   bool // close the connection after this response
}

// reply completes p with resp (nil for none); release, if set, runs once the response is
// written or dropped. Any goroutine, exactly once.
func (p *pending) reply(resp kmsg.Response, release func()) {
	if p.replied.Swap(true) {
		panic(fmt.Sprintf("kafka: %s correlation id %d answered twice", kmsg.NameForKey(p.hdr.key), p.hdr.correlationID))
	}
	p.resp, p.release = resp, release
	close(p.done)
}

// frameBuilder appends a response (header tagged fields included) after the correlation
// id and says where bytes outside the buffer go (fetch records, sent by sendfile). It
// calls finish with the response before encoding it (p.finish: ACL amendments, quotas).
type frameBuilder func(dst []byte, finish func(resp kmsg.Response, recordBytes int64)) ([]byte, []wire.Splice)

// replyFrame completes p with a response the writer encodes when its turn comes: a fetch's
// records are then sent from their files, never read on a shard loop.
func (p *pending) replyFrame(frame frameBuilder, release func()) {
	if p.replied.Swap(true) {
		panic(fmt.Sprintf("kafka: %s correlation id %d answered twice", kmsg.NameForKey(p.hdr.key), p.hdr.correlationID))
	}
	p.frame, p.release = frame, release
	close(p.done)
}

func (c *conn) start() {
	go func() {
		c.readLoop()
		close(c.queue)
	}()
	go func() {
		c.writeLoop()
		c.nc.Close()
		c.adm.Leave()
		c.s.mu.Lock()
		delete(c.s.conns, c)
		c.s.mu.Unlock()
		c.s.wg.Done()
	}()
}

func (c *conn) fail() {
	c.dead.Store(true)
	c.nc.Close()
	c.quitOnce.Do(func() { close(c.quit) })
}

func (c *conn) readLoop() {
	if err := c.handshake(); err != nil {
		if !c.dead.Load() && !c.closing() {
			c.s.logf("kafka: conn from %s: TLS handshake: %v", c.remote, err)
		}
		return
	}
	br := bufio.NewReaderSize(c.nc, 64<<10)
	for {
		p, err := c.readRequest(br)
		if err != nil {
			if !errors.Is(err, io.EOF) && !c.dead.Load() && !c.closing() {
				c.s.logf("kafka: conn from %s: %v", c.remote, err)
			}
			return
		}
		if p == nil {
			continue
		}
		select {
		case c.queue <- p:
		case <-c.quit:
			return
		}
		c.s.dispatch(p)
		if p.fatal {
			return
		}
	}
}

// handshake completes a TLS server handshake within FrameReadTimeout, so a client that
// connects and says nothing (or speaks plain Kafka) is dropped like one that sends half a
// frame. A plain connection needs none.
func (c *conn) handshake() error {
	tc, ok := c.nc.(*tls.Conn)
	if !ok {
		return nil
	}
	tc.SetDeadline(time.Now().Add(c.s.limits.FrameReadTimeout))
	if c.closing() { // Shutdown closes s.closing before it cuts reads short: ours may have come after
		return net.ErrClosed
	}
	if err := tc.Handshake(); err != nil {
		return err
	}
	tc.SetWriteDeadline(time.Time{})                               // the writer sets its own per write
	c.sess.principal = security.TLSPrincipal(tc.ConnectionState()) // "" without a client certificate
	return nil
}

// cutReads ends the reader's current and every later read at once.
func (c *conn) cutReads() {
	c.readMu.Lock()
	c.readsCut = true
	c.nc.SetReadDeadline(time.Now())
	c.readMu.Unlock()
}

// setReadDeadline sets the reader's deadline unless Shutdown has cut reads, whose
// deadline (now) stands.
func (c *conn) setReadDeadline(d time.Duration) {
	c.readMu.Lock()
	if !c.readsCut {
		c.nc.SetReadDeadline(time.Now().Add(d))
	}
	c.readMu.Unlock()
}

func (c *conn) closing() bool {
	select {
	case <-c.s.closing:
		return true
	default:
		return false
	}
}

// readRequest reads one frame: size, fixed header, then the rest once its bytes are
// charged. A frame above the limits ends the connection before its body is buffered.
func (c *conn) readRequest(br *bufio.Reader) (*pending, error) {
	c.setReadDeadline(c.s.limits.IdleTimeout)
	var sizeBuf [4]byte
	if _, err := io.ReadFull(br, sizeBuf[:]); err != nil {
		return nil, err
	}
	// A muted connection (quota.go) has its next request read once the mute ends: the
	// reader waits here, after a frame began, so that it also holds back a request the
	// client sent while the reader was already waiting for it.
	if !c.waitMuted() {
		return nil, io.EOF
	}
	c.setReadDeadline(c.s.limits.FrameReadTimeout)
	size := int64(int32(binary.BigEndian.Uint32(sizeBuf[:])))
	if size < requestHeaderFixedBytes+2 || size > int64(c.s.limits.FrameBytesMax) {
		return nil, fmt.Errorf("frame of %d bytes: want %d..%d (the broker's frame limit); closing", size, requestHeaderFixedBytes+2, c.s.limits.FrameBytesMax)
	}
	var fixed [requestHeaderFixedBytes]byte
	if _, err := io.ReadFull(br, fixed[:]); err != nil {
		return nil, noEOF(err)
	}
	hdr, _ := parseFixedHeader(fixed[:])
	if hdr.key != keyProduce && size > adminFrameBytesMax {
		return nil, fmt.Errorf("%s frame of %d bytes (correlation id %d): only Produce may exceed %d bytes; closing",
			kmsg.NameForKey(hdr.key), size, hdr.correlationID, adminFrameBytesMax)
	}
	charge := size
	if hdr.key != keyProduce {
		charge = size * decodedBytesPerFrameByteMax
	}
	if !c.adm.Acquire(charge, c.quit) {
		return nil, io.EOF
	}
	pooled := netio.FrameBuffer(int(size))
	frame := *pooled
	copy(frame, fixed[:])
	if _, err := io.ReadFull(br, frame[requestHeaderFixedBytes:]); err != nil {
		netio.PutFrameBuffer(pooled)
		c.adm.Release(charge)
		return nil, fmt.Errorf("read %d-byte %s frame: %w", size, kmsg.NameForKey(hdr.key), noEOF(err))
	}
	c.adm.Counted(1, 0)
	return &pending{c: c, hdr: hdr, charged: charge, frameBytes: size, done: make(chan struct{}), body: frame, pooled: pooled}, nil
}

func noEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// writeBatchBytesTarget: the writer gathers responses that are ready, in order, until
// their bytes reach this, then sends them in one writev (file ranges by sendfile).
const writeBatchBytesTarget = 256 << 10

// writeLoop writes responses in request order, gathering those already answered into one
// write. After a write failure it keeps draining (waiting for each reply and releasing it)
// so that nothing the handlers hold leaks.
func (c *conn) writeLoop() {
	out := netio.NewSpliceWriter(c.nc, c.s.cfg.Limits)
	var (
		buf     []byte
		splices []wire.Splice
		batch   []*pending
		next    *pending
	)
	for open := true; open || next != nil; {
		p := next
		next = nil
		if p == nil {
			if p, open = <-c.queue; !open {
				break
			}
		}
		c.wait(p)
		batch = append(batch[:0], p)
		buf, splices = p.appendResponse(buf[:0], splices[:0])
	gather:
		for len(buf) < writeBatchBytesTarget && !p.fatal {
			select {
			case q, ok := <-c.queue:
				if !ok {
					open = false
					break gather
				}
				select {
				case <-q.done:
				default:
					next = q // not answered yet: send what is ready first
					break gather
				}
				batch = append(batch, q)
				buf, splices = q.appendResponse(buf, splices)
				p = q
			default:
				break gather
			}
		}
		c.holdBack(batch)
		c.muteAfter(batch) // before the write: the client's next request finds the mute set
		if len(buf) > 0 && !c.dead.Load() {
			c.nc.SetWriteDeadline(time.Now().Add(c.s.limits.WriteTimeout))
			if err := out.Emit(buf, splices); err != nil {
				c.s.logf("kafka: conn from %s: write responses: %v", c.remote, err)
				c.fail()
			} else {
				c.adm.Counted(0, int64(len(batch)))
			}
		}
		for _, q := range batch {
			if q.release != nil {
				q.release()
			}
			if q.pooled != nil {
				netio.PutFrameBuffer(q.pooled)
				q.pooled = nil
			}
			c.adm.Release(q.charged)
			if q.fatal {
				c.fail()
			}
		}
		clear(batch)
		clear(splices)
		if cap(buf) > 4*writeBatchBytesTarget {
			buf = nil
		}
	}
}

// wait blocks until p is answered (also after the connection failed: the handler still
// answers, and its release must run).
func (c *conn) wait(p *pending) {
	select {
	case <-p.done:
	case <-c.quit:
		<-p.done
	}
}

// appendResponse appends the framed response — size, correlation id, the header's tagged
// fields for a flexible response other than ApiVersions, the body — and its splices. A
// request answered with nothing, or answered after the connection failed, appends nothing.
func (p *pending) appendResponse(dst []byte, splices []wire.Splice) ([]byte, []wire.Splice) {
	if p.c.dead.Load() {
		return dst, splices
	}
	if p.resp == nil && p.frame == nil {
		p.finish(nil, 0) // an acks=0 produce is still charged
		return dst, splices
	}
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0)
	dst = binary.BigEndian.AppendUint32(dst, uint32(p.hdr.correlationID))
	spliced := int64(0)
	if p.frame != nil {
		first := len(splices)
		var more []wire.Splice
		dst, more = p.frame(dst, p.finish)
		splices = append(splices, more...)
		for _, sp := range splices[first:] {
			spliced += sp.Len()
		}
	} else {
		p.finish(p.resp, 0)
		if p.resp.IsFlexible() && p.hdr.key != keyApiVersions {
			dst = append(dst, 0)
		}
		dst = p.resp.AppendTo(dst)
	}
	binary.BigEndian.PutUint32(dst[start:], uint32(int64(len(dst)-start-4)+spliced))
	p.resp, p.frame = nil, nil
	return dst, splices
}
