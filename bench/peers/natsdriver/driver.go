// Package natsdriver runs NATS JetStream as a benchmark peer: a nats-server with file
// storage in a child process of its own (so its RSS and CPU are its own), and nats.go
// clients in the benchmark process connected over loopback TCP.
//
// Mapping: a topic is a stream with subjects "<topic>.<partition>" or, with
// StreamPerPartition, one stream per partition ("<topic>_<partition>", subject
// "<topic>.<partition>": streams are NATS's unit of parallelism, as partitions are Kafka's);
// a producer publishes asynchronously (PublishMsgAsync, acknowledged when the server has
// stored the message); a consumer is an ordered consumer filtered to its partitions'
// subjects (one per partition's stream with StreamPerPartition), reading from the start. Durability "fsync" starts the server with sync_interval always (an fsync per
// message; NATS has no group commit), "none" keeps NATS's default (fsync every 2 minutes).
package natsdriver

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ringlog/ringlog/bench"
)

// Limits and timings.
const (
	serverStartTimeout  = 30 * time.Second
	pullBatchMessages   = 1000
	streamBytesDefault  = 8 << 30 // retention keeps disk use bounded and active during long runs
	serverReadyPrefix   = "nats-ready "
	ServeSubcommand     = "serve-nats"
	serverShutdownGrace = 10 * time.Second
)

// Config starts a driver.
type Config struct {
	DataDir        string // JetStream store directory (created; removed on Close if Temporary)
	Temporary      bool
	SyncAlways     bool  // sync_interval always
	StreamMaxBytes int64 // per-stream retention limit; 0 = streamBytesDefault
	Executable     string
	// StreamPerPartition maps each partition to a stream of its own instead of one stream
	// per topic with a subject per partition.
	StreamPerPartition bool
}

// Driver is the NATS JetStream peer.
type Driver struct {
	cfg     Config
	cmd     *exec.Cmd
	url     string
	conn    *nats.Conn // admin connection
	js      jetstream.JetStream
	mu      sync.Mutex // guards streams
	streams map[string]jetstream.Stream
	version string
}

// Open starts nats-server in a child process (re-executing this program with
// ServeSubcommand) and connects to it.
func Open(cfg Config) (*Driver, error) {
	if cfg.StreamMaxBytes == 0 {
		cfg.StreamMaxBytes = streamBytesDefault
	}
	if cfg.Executable == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("nats driver: %w", err)
		}
		cfg.Executable = exe
	}
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return nil, fmt.Errorf("nats driver: %w", err)
	}
	args := []string{ServeSubcommand, "--store", cfg.DataDir}
	if cfg.SyncAlways {
		args = append(args, "--sync-always")
	}
	cmd := exec.Command(cfg.Executable, args...)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("nats driver: %w", err)
	}
	stdin, err := cmd.StdinPipe() // the server exits when this closes
	if err != nil {
		return nil, fmt.Errorf("nats driver: %w", err)
	}
	_ = stdin
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("nats driver: start server: %w", err)
	}
	d := &Driver{cfg: cfg, cmd: cmd, streams: map[string]jetstream.Stream{}}
	url, err := waitReady(stdout)
	if err != nil {
		d.stopServer()
		return nil, err
	}
	d.url = url
	d.conn, err = nats.Connect(url, nats.Name("ringlog-bench-admin"))
	if err != nil {
		d.stopServer()
		return nil, fmt.Errorf("nats driver: connect %s: %w", url, err)
	}
	d.js, err = jetstream.New(d.conn)
	if err != nil {
		d.Close()
		return nil, fmt.Errorf("nats driver: %w", err)
	}
	d.version = d.conn.ConnectedServerVersion()
	return d, nil
}

func waitReady(stdout io.Reader) (string, error) {
	lines := make(chan string, 1)
	go func() {
		scanner := bufio.NewScanner(stdout)
		for scanner.Scan() {
			if url, ok := strings.CutPrefix(scanner.Text(), serverReadyPrefix); ok {
				lines <- url
				break
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	select {
	case url := <-lines:
		return url, nil
	case <-time.After(serverStartTimeout):
		return "", fmt.Errorf("nats driver: server not ready after %v", serverStartTimeout)
	}
}

// Info describes the peer.
func (d *Driver) Info() bench.DriverInfo {
	mode := "file (default sync_interval 2m)"
	if d.cfg.SyncAlways {
		mode = "file (sync_interval always: fsync per message)"
	}
	return bench.DriverInfo{
		Name: "nats-jetstream", Version: "nats-server " + d.version + ", nats.go " + nats.Version,
		StorageMode: mode + "; " + d.Mapping(), IOBackend: "go runtime (buffered writes)", BrokerPID: d.cmd.Process.Pid, Address: d.url,
	}
}

func subject(topic string, partition int) string { return topic + "." + strconv.Itoa(partition) }

func partitionStream(topic string, partition int) string {
	return topic + "_" + strconv.Itoa(partition)
}

// Mapping names the topic-to-stream mapping in results.
func (d *Driver) Mapping() string {
	if d.cfg.StreamPerPartition {
		return "one stream per partition"
	}
	return "one stream per topic, a subject per partition"
}

// CreateTopic creates a file-backed stream with one subject per partition, or one stream
// per partition.
func (d *Driver) CreateTopic(ctx context.Context, name string, partitions int) error {
	create := func(stream string, subjects ...string) error {
		s, err := d.js.CreateStream(ctx, jetstream.StreamConfig{
			Name: stream, Subjects: subjects, Storage: jetstream.FileStorage, Replicas: 1,
			Retention: jetstream.LimitsPolicy, Discard: jetstream.DiscardOld, MaxBytes: d.cfg.StreamMaxBytes,
		})
		if err != nil {
			return fmt.Errorf("nats driver: create stream %s: %w", stream, err)
		}
		d.mu.Lock()
		d.streams[stream] = s
		d.mu.Unlock()
		return nil
	}
	if !d.cfg.StreamPerPartition {
		return create(name, name+".*")
	}
	for p := range partitions {
		if err := create(partitionStream(name, p), subject(name, p)); err != nil {
			return err
		}
	}
	return nil
}

// NewProducer opens its own connection and JetStream context.
func (d *Driver) NewProducer(_ context.Context, topic string, opts bench.ProducerOptions) (bench.Producer, error) {
	if opts.Compression != "none" {
		return nil, fmt.Errorf("nats driver: compression %q: NATS JetStream has no producer-side compression", opts.Compression)
	}
	conn, err := nats.Connect(d.url, nats.Name("ringlog-bench-producer"))
	if err != nil {
		return nil, fmt.Errorf("nats driver: connect: %w", err)
	}
	p := &producer{conn: conn, topic: topic, pending: map[*nats.Msg]func(error){}, acks: opts.Acks}
	for i := range 1024 {
		p.subjects = append(p.subjects, subject(topic, i))
	}
	p.js, err = jetstream.New(conn,
		jetstream.WithPublishAsyncMaxPending(max(opts.MaxInFlight, 1)),
		jetstream.WithPublishAsyncAckHandler(func(_ jetstream.JetStream, msg *nats.Msg, _ *jetstream.PubAck) { p.finish(msg, nil) }),
		jetstream.WithPublishAsyncErrHandler(func(_ jetstream.JetStream, msg *nats.Msg, err error) { p.finish(msg, err) }),
	)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("nats driver: %w", err)
	}
	return p, nil
}

type producer struct {
	conn     *nats.Conn
	js       jetstream.JetStream
	topic    string
	subjects []string
	acks     string
	mu       sync.Mutex // guards pending
	pending  map[*nats.Msg]func(error)
}

func (p *producer) subject(partition int) string {
	if partition < len(p.subjects) {
		return p.subjects[partition]
	}
	return subject(p.topic, partition)
}

// Send publishes asynchronously. nats.go copies the data into its write buffer inside
// PublishMsgAsync (no retries are configured), so value may be reused after Send returns.
func (p *producer) Send(partition int, _, value []byte, done func(error)) error {
	if p.acks == "0" {
		if err := p.conn.Publish(p.subject(partition), value); err != nil {
			return fmt.Errorf("nats driver: publish: %w", err)
		}
		done(nil)
		return nil
	}
	msg := &nats.Msg{Subject: p.subject(partition), Data: value}
	p.mu.Lock()
	p.pending[msg] = done
	p.mu.Unlock()
	if _, err := p.js.PublishMsgAsync(msg); err != nil {
		p.mu.Lock()
		delete(p.pending, msg)
		p.mu.Unlock()
		return fmt.Errorf("nats driver: publish: %w", err)
	}
	return nil
}

func (p *producer) finish(msg *nats.Msg, err error) {
	p.mu.Lock()
	done, ok := p.pending[msg]
	delete(p.pending, msg)
	p.mu.Unlock()
	if ok {
		done(err)
	}
}

func (p *producer) Flush(ctx context.Context) error {
	if p.acks == "0" {
		return p.conn.FlushWithContext(ctx)
	}
	select {
	case <-p.js.PublishAsyncComplete():
		return nil
	case <-ctx.Done():
		return fmt.Errorf("nats driver: flush: %d acks outstanding: %w", p.js.PublishAsyncPending(), ctx.Err())
	}
}

func (p *producer) Close() error {
	p.conn.Close()
	return nil
}

// NewConsumer opens an ordered consumer over the partitions' subjects, from the start.
func (d *Driver) NewConsumer(ctx context.Context, topic string, partitions []int) (bench.Consumer, error) {
	conn, err := nats.Connect(d.url, nats.Name("ringlog-bench-consumer"))
	if err != nil {
		return nil, fmt.Errorf("nats driver: connect: %w", err)
	}
	js, err := jetstream.New(conn)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("nats driver: %w", err)
	}
	if d.cfg.StreamPerPartition {
		return d.newStreamsConsumer(ctx, conn, js, topic, partitions)
	}
	var subjects []string
	for _, p := range partitions {
		subjects = append(subjects, subject(topic, p))
	}
	cons, err := js.OrderedConsumer(ctx, topic, jetstream.OrderedConsumerConfig{FilterSubjects: subjects, DeliverPolicy: jetstream.DeliverAllPolicy})
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("nats driver: consumer on %s: %w", topic, err)
	}
	iter, err := cons.Messages(jetstream.PullMaxMessages(pullBatchMessages))
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("nats driver: consume %s: %w", topic, err)
	}
	return &consumer{conn: conn, iter: iter, prefix: len(topic) + 1}, nil
}

type consumer struct {
	conn   *nats.Conn
	iter   jetstream.MessagesContext
	prefix int
}

func (c *consumer) Poll(ctx context.Context, handle func(int, []byte)) error {
	msg, err := c.iter.Next(jetstream.NextContext(ctx))
	if err != nil {
		return fmt.Errorf("nats driver: next: %w", err)
	}
	partition, _ := strconv.Atoi(msg.Subject()[min(c.prefix, len(msg.Subject())):])
	handle(partition, msg.Data())
	return nil
}

func (c *consumer) Close() error {
	c.iter.Stop()
	c.conn.Close()
	return nil
}

// newStreamsConsumer reads one stream per partition: an ordered consumer on each, whose
// callbacks feed one bench.PushConsumer that Poll drains.
func (d *Driver) newStreamsConsumer(ctx context.Context, conn *nats.Conn, js jetstream.JetStream, topic string, partitions []int) (bench.Consumer, error) {
	c := &streamsConsumer{PushConsumer: bench.NewPushConsumer("nats driver", pullBatchMessages), conn: conn}
	for _, p := range partitions {
		cons, err := js.OrderedConsumer(ctx, partitionStream(topic, p), jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy})
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("nats driver: consumer on %s: %w", partitionStream(topic, p), err)
		}
		cc, err := cons.Consume(func(msg jetstream.Msg) { c.Deliver(p, msg.Data()) }, jetstream.PullMaxMessages(pullBatchMessages))
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("nats driver: consume %s: %w", partitionStream(topic, p), err)
		}
		c.consumers = append(c.consumers, cc)
	}
	return c, nil
}

type streamsConsumer struct {
	*bench.PushConsumer
	conn      *nats.Conn
	consumers []jetstream.ConsumeContext
}

func (c *streamsConsumer) Close() error {
	c.Stop()
	for _, cc := range c.consumers {
		cc.Stop()
	}
	c.conn.Close()
	return nil
}

// Close disconnects, stops the server and removes a temporary store.
func (d *Driver) Close() error {
	if d.conn != nil {
		d.conn.Close()
	}
	err := d.stopServer()
	if d.cfg.Temporary {
		if rmErr := os.RemoveAll(d.cfg.DataDir); rmErr != nil && err == nil {
			err = rmErr
		}
	}
	return err
}

func (d *Driver) stopServer() error {
	if d.cmd == nil || d.cmd.Process == nil {
		return nil
	}
	_ = d.cmd.Process.Signal(os.Interrupt)
	exited := make(chan error, 1)
	go func() { exited <- d.cmd.Wait() }()
	select {
	case err := <-exited:
		var exitErr *exec.ExitError
		if errors.As(err, &exitErr) {
			return nil // interrupted on purpose
		}
		return err
	case <-time.After(serverShutdownGrace):
		_ = d.cmd.Process.Kill()
		return <-exited
	}
}

// Serve runs nats-server in this process until stdin closes or an interrupt arrives; it is
// the child side of Open. It prints serverReadyPrefix+URL on stdout once clients may connect.
func Serve(storeDir string, syncAlways bool, stdin io.Reader, stdout io.Writer, interrupt <-chan os.Signal) error {
	opts := &server.Options{
		Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true, StoreDir: storeDir,
		JetStreamMaxStore: 1 << 40, JetStreamMaxMemory: 1 << 30, SyncAlways: syncAlways,
		NoLog: true, NoSigs: true, MaxPayload: 16 << 20,
	}
	s, err := server.NewServer(opts)
	if err != nil {
		return fmt.Errorf("nats server: %w", err)
	}
	go s.Start()
	if !s.ReadyForConnections(serverStartTimeout) {
		s.Shutdown()
		return errors.New("nats server: not ready for connections")
	}
	fmt.Fprintf(stdout, "%s%s\n", serverReadyPrefix, s.ClientURL())
	closed := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, stdin)
		close(closed)
	}()
	select {
	case <-closed:
	case <-interrupt:
	}
	s.Shutdown()
	s.WaitForShutdown()
	return nil
}
