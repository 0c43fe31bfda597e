// Package rabbitmqdriver runs RabbitMQ Streams as a benchmark peer: Debian's rabbitmq-server
// with the stream plugin in a child process of its own (own node name, ports, data and log
// directories under the run's data dir, so its RSS and CPU are its own), and the RabbitMQ
// stream Go client in the benchmark process over loopback TCP.
//
// Mapping: a partition is a stream ("<topic>_<partition>"), the unit RabbitMQ Streams
// replicates and orders (a super stream is the same streams behind a routing exchange). A
// producer publishes asynchronously (Producer.Send, the client batches); a message counts
// as acknowledged when the broker's publish confirmation arrives. A consumer subscribes to
// its partitions' streams from the first offset. RabbitMQ Streams has no fsync-per-message
// setting (its durability is replication), so workloads with durability "fsync" are
// refused, as is producer compression (the client compresses only sub-entry batches).
package rabbitmqdriver

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/amqp"
	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/message"
	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/stream"

	"github.com/ringlog/ringlog/bench"
)

// Limits and timings.
const (
	// serverStartTimeout bounds the node's boot. It took 22 s alone on the 2-core test
	// machine and 41 s under nice -n 15 (as helpers run make test); at load 7-15 under nice
	// it took longer than the 90 s this was (the node still creating its schema 2 minutes
	// after its start): TestRunAgainstRealServer failed so three times in session 8, once
	// in make test, on main's code as on this one's.
	serverStartTimeout  = 4 * time.Minute
	serverShutdownGrace = 30 * time.Second
	streamBytesDefault  = 8 << 30 // retention keeps disk use bounded during long runs
	consumerBuffer      = 4096    // messages between the client's callbacks and Poll
)

// Config starts a driver.
type Config struct {
	DataDir        string // node directory (created; removed on Close if Temporary)
	Temporary      bool
	StreamMaxBytes int64  // per-stream retention (max-length-bytes); 0 = streamBytesDefault
	Server         string // rabbitmq-server executable; "" = found on PATH or in /usr/sbin
}

// Driver is the RabbitMQ Streams peer.
type Driver struct {
	cfg      Config
	cmd      *exec.Cmd
	port     int
	epmdPort int // the port mapper the node started, stopped with it
	env      *stream.Environment
	version  string
}

// ErrNoServer means rabbitmq-server is not installed.
var ErrNoServer = errors.New("rabbitmq driver: rabbitmq-server not found (Debian: apt-get install rabbitmq-server)")

// debianServer is the server script itself: Debian's /usr/sbin/rabbitmq-server wrapper
// switches to the rabbitmq user when started as root, who cannot write the run's directory.
const debianServer = "/usr/lib/rabbitmq/bin/rabbitmq-server"

// FindServer returns the rabbitmq-server executable.
func FindServer() (string, error) {
	if _, err := os.Stat(debianServer); err == nil {
		return debianServer, nil
	}
	if path, err := exec.LookPath("rabbitmq-server"); err == nil {
		return path, nil
	}
	return "", ErrNoServer
}

// freePorts returns n distinct loopback ports that were free a moment ago, drawn at random
// below the kernel's ephemeral range (ip_local_port_range starts at 32768 by default). A
// port the kernel hands out for ":0" lies inside that range, where any process's outgoing
// connection (this driver's own dials of the stream port included) or ":0" listener may
// take it during the seconds before the node binds it: the distribution port clashed with
// another process that way once. Below the range only another process drawing ports the
// same way can collide. It falls back to the kernel's choice when the draw finds nothing.
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	taken := func(p int) bool { return slices.Contains(ports, p) }
	for tries := 0; len(ports) < n && tries < 1000; tries++ {
		if p := portsDrawnMin + rand.IntN(portsDrawnMax-portsDrawnMin); !taken(p) && portFree(p) {
			ports = append(ports, p)
		}
	}
	for len(ports) < n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		p := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if !taken(p) {
			ports = append(ports, p)
		}
	}
	return ports, nil
}

// The range freePorts draws from: below the default ephemeral range.
const portsDrawnMin, portsDrawnMax = 20000, 32768

// portFree reports whether a loopback listener can bind port now.
func portFree(port int) bool {
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

// Open starts rabbitmq-server with the stream plugin in a child process and connects.
func Open(cfg Config) (*Driver, error) {
	if cfg.StreamMaxBytes == 0 {
		cfg.StreamMaxBytes = streamBytesDefault
	}
	server := cfg.Server
	if server == "" {
		var err error
		if server, err = FindServer(); err != nil {
			return nil, err
		}
	}
	ports, err := freePorts(4) // stream, AMQP, distribution, port mapper (epmd)
	if err != nil {
		return nil, fmt.Errorf("rabbitmq driver: %w", err)
	}
	dir := cfg.DataDir
	for _, sub := range []string{"mnesia", "log", "home"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o700); err != nil {
			return nil, fmt.Errorf("rabbitmq driver: %w", err)
		}
	}
	conf := filepath.Join(dir, "rabbitmq.conf")
	confText := fmt.Sprintf("listeners.tcp.1 = 127.0.0.1:%d\nstream.listeners.tcp.1 = 127.0.0.1:%d\nstream.advertised_host = 127.0.0.1\nstream.advertised_port = %d\nloopback_users = none\n",
		ports[1], ports[0], ports[0])
	plugins := filepath.Join(dir, "enabled_plugins")
	if err := os.WriteFile(conf, []byte(confText), 0o600); err != nil {
		return nil, fmt.Errorf("rabbitmq driver: %w", err)
	}
	if err := os.WriteFile(plugins, []byte("[rabbitmq_stream].\n"), 0o600); err != nil {
		return nil, fmt.Errorf("rabbitmq driver: %w", err)
	}
	node := fmt.Sprintf("ringlog-bench-%d@localhost", os.Getpid())
	cmd := exec.Command(server)
	cmd.Env = append(os.Environ(),
		"RABBITMQ_NODENAME="+node,
		"RABBITMQ_CONFIG_FILE="+conf,
		"RABBITMQ_ENABLED_PLUGINS_FILE="+plugins,
		"RABBITMQ_MNESIA_BASE="+filepath.Join(dir, "mnesia"),
		"RABBITMQ_LOG_BASE="+filepath.Join(dir, "log"),
		"RABBITMQ_DIST_PORT="+strconv.Itoa(ports[2]),
		"ERL_EPMD_PORT="+strconv.Itoa(ports[3]),
		"HOME="+filepath.Join(dir, "home"), // the Erlang cookie lives here
		"ERL_CRASH_DUMP="+filepath.Join(dir, "erl_crash.dump"),
	)
	cmd.Dir = dir
	// Its own process group, so that stopping it reaches beam behind the start script. The
	// Erlang port mapper (epmd) that the node starts is a daemon that would outlive it: it
	// gets a port of its own (not the host's 4369, so a host's Erlang nodes are left alone)
	// and stopServer stops it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	logFile, err := os.Create(filepath.Join(dir, "server.out"))
	if err != nil {
		return nil, fmt.Errorf("rabbitmq driver: %w", err)
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("rabbitmq driver: start %s: %w", server, err)
	}
	logFile.Close()
	d := &Driver{cfg: cfg, cmd: cmd, port: ports[0], epmdPort: ports[3]}
	if err := d.connect(); err != nil {
		d.stopServer()
		tail, _ := os.ReadFile(filepath.Join(dir, "server.out"))
		return nil, fmt.Errorf("%w\nserver output:\n%s", err, lastLines(string(tail), 20))
	}
	return d, nil
}

// connect waits until the stream port accepts a client.
func (d *Driver) connect() error {
	deadline := time.Now().Add(serverStartTimeout)
	var last error
	for time.Now().Before(deadline) {
		// Dial first: the client logs every refused environment creation.
		conn, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(d.port), time.Second)
		if err != nil {
			last = err
			if d.cmd.ProcessState != nil {
				break
			}
			time.Sleep(250 * time.Millisecond) // a child process starting: nothing to wait on but its port
			continue
		}
		conn.Close()
		env, err := stream.NewEnvironment(stream.NewEnvironmentOptions().SetHost("127.0.0.1").SetPort(d.port).
			SetUser("guest").SetPassword("guest").SetMaxProducersPerClient(1).SetMaxConsumersPerClient(1))
		if err == nil {
			d.env = env
			d.version = serverVersion()
			return nil
		}
		last = err
		if d.cmd.ProcessState != nil {
			break
		}
		time.Sleep(250 * time.Millisecond) // a child process starting: nothing to wait on but its port
	}
	return fmt.Errorf("rabbitmq driver: stream port %d not ready after %v: %w", d.port, serverStartTimeout, last)
}

func serverVersion() string {
	out, err := exec.Command("dpkg-query", "-W", "-f=${Version}", "rabbitmq-server").Output()
	if err != nil {
		return "rabbitmq-server (version unknown)"
	}
	return "rabbitmq-server " + strings.TrimSpace(string(out))
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// Info describes the peer.
func (d *Driver) Info() bench.DriverInfo {
	return bench.DriverInfo{
		Name: "rabbitmq-streams", Version: d.version + ", rabbitmq-stream-go-client " + stream.ClientVersion,
		StorageMode: "stream segments (no fsync per message; one stream per partition)", IOBackend: "erlang VM",
		BrokerPID: d.cmd.Process.Pid, Address: "127.0.0.1:" + strconv.Itoa(d.port),
	}
}

func streamName(topic string, partition int) string { return topic + "_" + strconv.Itoa(partition) }

// CreateTopic declares one stream per partition.
func (d *Driver) CreateTopic(_ context.Context, name string, partitions int) error {
	for p := range partitions {
		err := d.env.DeclareStream(streamName(name, p), &stream.StreamOptions{MaxLengthBytes: stream.ByteCapacity{}.B(d.cfg.StreamMaxBytes)})
		if err != nil && !errors.Is(err, stream.StreamAlreadyExists) {
			return fmt.Errorf("rabbitmq driver: declare stream %s: %w", streamName(name, p), err)
		}
	}
	return nil
}

// NewProducer opens one stream producer per partition on first use.
func (d *Driver) NewProducer(_ context.Context, topic string, opts bench.ProducerOptions) (bench.Producer, error) {
	if opts.Compression != "none" {
		return nil, fmt.Errorf("rabbitmq driver: compression %q is not compared (the stream client compresses only sub-entry batches)", opts.Compression)
	}
	if opts.Durability == "fsync" {
		return nil, errors.New("rabbitmq driver: durability fsync: RabbitMQ Streams has no fsync-per-message setting")
	}
	return &producer{d: d, topic: topic, streams: map[int]*stream.Producer{}, pending: map[message.StreamMessage]func(error){}}, nil
}

type producer struct {
	d       *Driver
	topic   string
	mu      sync.Mutex // guards streams, pending and wg
	streams map[int]*stream.Producer
	pending map[message.StreamMessage]func(error)
	wg      sync.WaitGroup // confirmation readers
}

func (p *producer) streamProducer(partition int) (*stream.Producer, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if sp := p.streams[partition]; sp != nil {
		return sp, nil
	}
	sp, err := p.d.env.NewProducer(streamName(p.topic, partition), stream.NewProducerOptions().SetClientProvidedName("ringlog-bench-producer"))
	if err != nil {
		return nil, fmt.Errorf("rabbitmq driver: producer on %s: %w", streamName(p.topic, partition), err)
	}
	confirms := sp.NotifyPublishConfirmation()
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for batch := range confirms {
			for _, status := range batch {
				var err error
				if !status.IsConfirmed() {
					err = fmt.Errorf("rabbitmq driver: not confirmed: %v", status.GetError())
				}
				p.finish(status.GetMessage(), err)
			}
		}
	}()
	p.streams[partition] = sp
	return sp, nil
}

func (p *producer) finish(m message.StreamMessage, err error) {
	p.mu.Lock()
	done, ok := p.pending[m]
	delete(p.pending, m)
	p.mu.Unlock()
	if ok {
		done(err)
	}
}

// Send copies value (the client queues the message and sends it later).
func (p *producer) Send(partition int, _, value []byte, done func(error)) error {
	sp, err := p.streamProducer(partition)
	if err != nil {
		return err
	}
	m := amqp.NewMessage(append([]byte(nil), value...))
	p.mu.Lock()
	p.pending[m] = done
	p.mu.Unlock()
	if err := sp.Send(m); err != nil {
		p.mu.Lock()
		delete(p.pending, m)
		p.mu.Unlock()
		return fmt.Errorf("rabbitmq driver: send: %w", err)
	}
	return nil
}

// Flush waits until every sent message is confirmed.
func (p *producer) Flush(ctx context.Context) error {
	for {
		p.mu.Lock()
		n := len(p.pending)
		p.mu.Unlock()
		if n == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("rabbitmq driver: flush: %d confirmations outstanding: %w", n, ctx.Err())
		case <-time.After(5 * time.Millisecond): // the client offers no completion signal
		}
	}
}

func (p *producer) Close() error {
	p.mu.Lock()
	var errs []error
	for _, sp := range p.streams {
		errs = append(errs, sp.Close())
	}
	p.mu.Unlock()
	p.wg.Wait()
	return errors.Join(errs...)
}

// NewConsumer subscribes to each partition's stream from its first offset; the client's
// callbacks feed one bench.PushConsumer that Poll drains.
func (d *Driver) NewConsumer(_ context.Context, topic string, partitions []int) (bench.Consumer, error) {
	c := &consumer{PushConsumer: bench.NewPushConsumer("rabbitmq driver", consumerBuffer)}
	for _, p := range partitions {
		sc, err := d.env.NewConsumer(streamName(topic, p), func(_ stream.ConsumerContext, m *amqp.Message) { c.Deliver(p, m.GetData()) },
			stream.NewConsumerOptions().SetOffset(stream.OffsetSpecification{}.First()).SetCRCCheck(false).
				SetClientProvidedName("ringlog-bench-consumer"))
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("rabbitmq driver: consumer on %s: %w", streamName(topic, p), err)
		}
		c.consumers = append(c.consumers, sc)
	}
	return c, nil
}

type consumer struct {
	*bench.PushConsumer
	consumers []*stream.Consumer
}

func (c *consumer) Close() error {
	c.Stop()
	var errs []error
	for _, sc := range c.consumers {
		errs = append(errs, sc.Close())
	}
	return errors.Join(errs...)
}

// Close disconnects, stops the server and removes a temporary node directory.
func (d *Driver) Close() error {
	var errs []error
	if d.env != nil {
		errs = append(errs, d.env.Close())
	}
	errs = append(errs, d.stopServer())
	if d.cfg.Temporary {
		errs = append(errs, os.RemoveAll(d.cfg.DataDir))
	}
	return errors.Join(errs...)
}

// stopServer sends SIGTERM to the server's process group (the start script and beam) and
// waits, killing the group after serverShutdownGrace.
func (d *Driver) stopServer() error {
	if d.cmd == nil || d.cmd.Process == nil {
		return nil
	}
	pgid := d.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	exited := make(chan error, 1)
	go func() { exited <- d.cmd.Wait() }()
	select {
	case <-exited:
	case <-time.After(serverShutdownGrace):
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-exited
	}
	d.stopPortMapper()
	return nil
}

// stopPortMapper stops the epmd daemon the node started on its own port (best effort: an
// epmd left behind only holds that port).
func (d *Driver) stopPortMapper() {
	epmd, err := exec.LookPath("epmd")
	if err != nil || d.epmdPort == 0 {
		return
	}
	cmd := exec.Command(epmd, "-port", strconv.Itoa(d.epmdPort), "-kill")
	cmd.Env = append(os.Environ(), "ERL_EPMD_PORT="+strconv.Itoa(d.epmdPort))
	_ = cmd.Run()
}
