package client_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/ringlog/ringlog/netio/wire"

	"github.com/ringlog/ringlog/engine/batch"
	"github.com/ringlog/ringlog/netio"
	"github.com/ringlog/ringlog/netio/client"
	"github.com/ringlog/ringlog/netio/fakebroker"
	"github.com/ringlog/ringlog/ring"
)

// These tests run the client against netio.Server with the fakebroker TEST FIXTURE (an
// in-memory handler), over real sockets on 127.0.0.1. End-to-end tests against the real
// broker belong next to cmd/ringlogd.

type shardCheck struct {
	fake *fakebroker.Broker
	mu   sync.Mutex
	// produce/fetch partitions seen per shard of the accepting listener
	seen map[int]map[int32]bool
}

func (s *shardCheck) Serve(req *netio.Request) {
	if p, ok := req.Body.(*wire.ProduceRequest); ok {
		s.mu.Lock()
		for _, t := range p.Topics {
			for _, pp := range t.Partitions {
				if s.seen[req.Conn.Shard] == nil {
					s.seen[req.Conn.Shard] = map[int32]bool{}
				}
				s.seen[req.Conn.Shard][pp.Partition] = true
			}
		}
		s.mu.Unlock()
	}
	s.fake.Serve(req)
}

type env struct {
	client *client.Client
	fake   *fakebroker.Broker
	check  *shardCheck
	addrs  []string
}

// start runs a fake broker behind one netio.Server with one listener per shard, on Go's
// net package.
func start(t *testing.T, shards int) *env { return startDriver(t, shards, "net") }

// startDriver is start with a choice of I/O driver: "net", or "ring" (one pinned reactor
// per shard, each with its own SO_REUSEPORT-capable listener).
func startDriver(t *testing.T, shards int, driver string) *env {
	t.Helper()
	fake := fakebroker.New(t.TempDir(), nil)
	check := &shardCheck{fake: fake, seen: map[int]map[int32]bool{}}
	srv := netio.NewServer(check, netio.Config{})
	var table []wire.MetadataShard
	var addrs []string
	var served sync.WaitGroup
	var reactors []*ring.Reactor
	for i := range shards {
		ln, err := netio.ListenShard(context.Background(), "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addrs = append(addrs, ln.Addr().String())
		table = append(table, wire.MetadataShard{Shard: int32(i), Address: ln.Addr().String()})
		served.Add(1)
		if driver == "net" {
			go func() { defer served.Done(); srv.Serve(ln, i) }()
			continue
		}
		ready := make(chan *ring.Reactor, 1)
		err = ring.StartPinned(-1, ring.Config{Entries: 256, SingleIssuer: true, DeferTaskrun: true, Backend: "uring"}, func(r *ring.Reactor) {
			defer served.Done()
			defer ln.Close()
			if err := srv.ServeRing(r, ln.(*net.TCPListener), i); err != nil {
				t.Error(err)
				ready <- nil
				return
			}
			ready <- r
			r.Run()
		})
		if err != nil {
			t.Skipf("io_uring unavailable here: %v", err)
		}
		if r := <-ready; r != nil {
			reactors = append(reactors, r)
		}
	}
	fake.SetShards(table)
	c, err := client.New(context.Background(), client.Config{Broker: addrs[0]})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Close()
		srv.Close()
		for _, r := range reactors {
			r.Stop()
		}
		served.Wait()
		fake.Close()
	})
	return &env{client: c, fake: fake, check: check, addrs: addrs}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestMurmur2KafkaVectors(t *testing.T) {
	// Kafka's UtilsTest.testMurmur2 vectors (signed Java ints) and the partition of
	// "foobar" among 50 partitions.
	cases := map[string]int32{
		"21":                         -973932308,
		"foobar":                     -790332482,
		"a-little-bit-long-string":   -985981536,
		"a-little-bit-longer-string": -1486304829,
		"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
		"abc": 479470107,
		"":    275646681,
	}
	for in, want := range cases {
		if got := client.Murmur2ForTest([]byte(in)); got != want {
			t.Errorf("murmur2(%q) = %d, want %d", in, got, want)
		}
	}
	if got := client.KeyPartition([]byte("foobar"), 50); got != 16 {
		t.Errorf("partition of foobar in 50 = %d, want 16", got)
	}
}

func TestProduceConsumeKeyedOrdered(t *testing.T) {
	for _, driver := range []string{"net", "ring"} {
		t.Run(driver, func(t *testing.T) { testProduceConsumeKeyedOrdered(t, driver) })
	}
}

func testProduceConsumeKeyedOrdered(t *testing.T, driver string) {
	e := startDriver(t, 2, driver)
	ctx := ctxT(t)
	const partitions, records = 8, 5000
	if err := e.client.CreateTopic(ctx, "events", partitions, nil); err != nil {
		t.Fatal(err)
	}
	p := e.client.NewProducer(client.ProducerConfig{Compression: batch.CodecZstd, BatchBytes: 16 << 10, Linger: 2 * time.Millisecond})
	var mu sync.Mutex
	var failed []error
	for i := range records {
		r := &client.Record{Topic: "events", Partition: -1, Key: []byte(fmt.Sprintf("key-%d", i%97)), Value: []byte(fmt.Sprintf("value-%d", i)),
			Headers: []batch.RecordHeader{{Key: "seq", Value: []byte(fmt.Sprint(i))}}}
		err := p.Send(ctx, r, func(r *client.Record, err error) {
			if err != nil {
				mu.Lock()
				failed = append(failed, err)
				mu.Unlock()
			}
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if len(failed) > 0 {
		t.Fatalf("%d sends failed, first: %v", len(failed), failed[0])
	}
	// Shard-aware routing: every partition's produce arrived on its shard's listener.
	e.check.mu.Lock()
	for shard, parts := range e.check.seen {
		for part := range parts {
			if int(part)%2 != shard {
				t.Errorf("partition %d produced via shard %d, owner is %d", part, shard, part%2)
			}
		}
	}
	if len(e.check.seen) != 2 {
		t.Errorf("produce reached %d shards, want 2", len(e.check.seen))
	}
	e.check.mu.Unlock()

	co := e.client.NewConsumer(client.ConsumerConfig{MaxWait: 50 * time.Millisecond, PartitionMaxBytes: 8 << 10})
	for part := range int32(partitions) {
		co.Assign("events", part, client.Earliest())
	}
	lastSeq := map[int32]int{}
	got := 0
	for polls := 0; got < records; polls++ {
		if polls > 10000 {
			t.Fatalf("consumed %d of %d records", got, records)
		}
		recs, err := co.Poll(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			var seq int
			fmt.Sscan(string(r.Headers[0].Value), &seq)
			if want := fmt.Sprintf("value-%d", seq); string(r.Value) != want || r.Headers[0].Key != "seq" {
				t.Fatalf("record %s/%d@%d: value %q headers %v", r.Topic, r.Partition, r.Offset, r.Value, r.Headers)
			}
			if string(r.Key) != fmt.Sprintf("key-%d", seq%97) || r.Partition != client.KeyPartition(r.Key, partitions) {
				t.Fatalf("record seq %d with key %q on partition %d", seq, r.Key, r.Partition)
			}
			if last, ok := lastSeq[r.Partition]; ok && seq <= last {
				t.Fatalf("partition %d: seq %d after %d", r.Partition, seq, last)
			}
			lastSeq[r.Partition] = seq
			got++
		}
	}
	if got != records {
		t.Fatalf("consumed %d records, want %d", got, records)
	}
}

func TestStickyPartitioningForNullKeys(t *testing.T) {
	e := start(t, 1)
	ctx := ctxT(t)
	if err := e.client.CreateTopic(ctx, "sticky", 6, nil); err != nil {
		t.Fatal(err)
	}
	p := e.client.NewProducer(client.ProducerConfig{BatchBytes: 1 << 10, Linger: time.Hour, Acks: client.AckLeader})
	value := bytes.Repeat([]byte("v"), 100)
	var recs []*client.Record
	for range 200 {
		r := &client.Record{Topic: "sticky", Partition: -1, Value: value}
		recs = append(recs, r)
		if err := p.Send(ctx, r, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	runs, used := 0, map[int32]bool{}
	for i, r := range recs {
		used[r.Partition] = true
		if i == 0 || recs[i-1].Partition != r.Partition {
			runs++
		}
	}
	// ~8 records of 124 bytes fill a 1 KiB batch: runs should be about 200/8, and never
	// one record per run as round-robin would give.
	if len(used) < 2 || runs > 60 || runs < 10 {
		t.Fatalf("null keys used %d partitions in %d runs; want sticky runs across several partitions", len(used), runs)
	}
}

func TestRetriesPreserveOrder(t *testing.T) {
	e := start(t, 1)
	ctx := ctxT(t)
	if err := e.client.CreateTopic(ctx, "retry", 1, nil); err != nil {
		t.Fatal(err)
	}
	e.fake.InjectProduceError("retry", 0, wire.ErrNotLeaderOrWrongShard, 3)
	p := e.client.NewProducer(client.ProducerConfig{BatchBytes: 256, Linger: time.Millisecond, RetryBackoff: time.Millisecond})
	var recs []*client.Record
	for i := range 100 {
		r := &client.Record{Topic: "retry", Partition: 0, Value: []byte(fmt.Sprintf("%03d", i))}
		recs = append(recs, r)
		if err := p.Send(ctx, r, func(r *client.Record, err error) {
			if err != nil {
				t.Errorf("record %s: %v", r.Value, err)
			}
		}); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	for i, r := range recs {
		if r.Offset != int64(i) {
			t.Fatalf("record %d got offset %d: order not preserved across retries", i, r.Offset)
		}
	}
	if left := e.fake.InjectedLeft(); left != 0 {
		t.Fatalf("%d injected errors never hit", left)
	}
}

func TestNonRetriableErrorFailsBatch(t *testing.T) {
	e := start(t, 1)
	ctx := ctxT(t)
	if err := e.client.CreateTopic(ctx, "fatal", 1, nil); err != nil {
		t.Fatal(err)
	}
	e.fake.InjectProduceError("fatal", 0, wire.ErrMessageTooLarge, 1)
	p := e.client.NewProducer(client.ProducerConfig{})
	defer p.Close(ctx)
	_, err := p.SendSync(ctx, &client.Record{Topic: "fatal", Partition: 0, Value: []byte("x")})
	if !errors.Is(err, wire.ErrMessageTooLarge) {
		t.Fatalf("got %v, want MESSAGE_TOO_LARGE", err)
	}
	off, err := p.SendSync(ctx, &client.Record{Topic: "fatal", Partition: 0, Value: []byte("y")})
	if err != nil || off != 0 {
		t.Fatalf("second send: offset %d, %v", off, err)
	}
	if _, err := p.SendSync(ctx, &client.Record{Topic: "nope", Partition: -1, Value: []byte("z")}); !errors.Is(err, wire.ErrUnknownTopicOrPartition) {
		t.Fatalf("unknown topic: %v", err)
	}
}

func TestAcksNone(t *testing.T) {
	e := start(t, 1)
	ctx := ctxT(t)
	if err := e.client.CreateTopic(ctx, "fire", 1, nil); err != nil {
		t.Fatal(err)
	}
	p := e.client.NewProducer(client.ProducerConfig{Acks: client.AckNone})
	for i := range 50 {
		if err := p.Send(ctx, &client.Record{Topic: "fire", Partition: 0, Value: []byte(fmt.Sprint(i))}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	co := e.client.NewConsumer(client.ConsumerConfig{MaxWait: 100 * time.Millisecond})
	co.Assign("fire", 0, client.Earliest())
	var got []string
	for polls := 0; len(got) < 50 && polls < 100; polls++ {
		recs, err := co.Poll(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			got = append(got, string(r.Value))
		}
	}
	if len(got) != 50 || got[0] != "0" || got[49] != "49" {
		t.Fatalf("acks=0 records: %v", got)
	}
}

func TestConsumerLongPollAndSeek(t *testing.T) {
	for _, driver := range []string{"net", "ring"} {
		t.Run(driver, func(t *testing.T) { testConsumerLongPollAndSeek(t, driver) })
	}
}

func testConsumerLongPollAndSeek(t *testing.T, driver string) {
	e := startDriver(t, 1, driver)
	ctx := ctxT(t)
	if err := e.client.CreateTopic(ctx, "poll", 1, nil); err != nil {
		t.Fatal(err)
	}
	p := e.client.NewProducer(client.ProducerConfig{Acks: client.AckLeader})
	defer p.Close(ctx)
	base := time.UnixMilli(1_800_000_000_000)
	for i := range 10 {
		if _, err := p.SendSync(ctx, &client.Record{Topic: "poll", Partition: 0, Value: []byte(fmt.Sprint(i)), Timestamp: base.Add(time.Duration(i) * time.Second)}); err != nil {
			t.Fatal(err)
		}
	}
	co := e.client.NewConsumer(client.ConsumerConfig{MaxWait: 10 * time.Second})
	co.Assign("poll", 0, client.Latest())
	if pos, err := co.Position(ctx, "poll", 0); err != nil || pos != 10 {
		t.Fatalf("latest position %d, %v", pos, err)
	}
	// Long-poll: the fetch parks at the high watermark and returns as soon as a record
	// arrives, well before MaxWait.
	polled := make(chan []client.ConsumedRecord, 1)
	go func() {
		recs, err := co.Poll(ctx)
		if err != nil {
			t.Error(err)
		}
		polled <- recs
	}()
	for spins := 0; e.fake.ParkedFetches() == 0; spins++ { // produce only once the poll is parked
		if spins > 1e7 {
			t.Fatal("the long-poll fetch never parked")
		}
		runtime.Gosched()
	}
	if _, err := p.SendSync(ctx, &client.Record{Topic: "poll", Partition: 0, Value: []byte("late")}); err != nil {
		t.Fatal(err)
	}
	select {
	case recs := <-polled:
		if len(recs) != 1 || string(recs[0].Value) != "late" || recs[0].Offset != 10 {
			t.Fatalf("long-poll returned %+v", recs)
		}
	case <-time.After(8 * time.Second):
		t.Fatal("long-poll did not return when a record arrived")
	}
	// Seek by timestamp: the first record at or after base+5s is offset 5.
	co.Seek("poll", 0, client.AtTime(base.Add(5*time.Second)))
	if pos, err := co.Position(ctx, "poll", 0); err != nil || pos != 5 {
		t.Fatalf("time position %d, %v", pos, err)
	}
	co.Seek("poll", 0, client.AtOffset(3))
	recs, err := co.Poll(ctx)
	if err != nil || len(recs) != 8 || string(recs[0].Value) != "3" {
		t.Fatalf("poll from 3: %d records, %v", len(recs), err)
	}
	// Out of range without a reset policy is an error the caller can test.
	co.Seek("poll", 0, client.AtOffset(1000))
	if _, err := co.Poll(ctx); !errors.Is(err, wire.ErrOffsetOutOfRange) {
		t.Fatalf("out of range: %v", err)
	}
}

func TestAdmin(t *testing.T) {
	e := start(t, 1)
	ctx := ctxT(t)
	c := e.client
	if err := c.CreateTopic(ctx, "a", 3, map[string]string{"retention.ms": "1000"}); err != nil {
		t.Fatal(err)
	}
	if err := c.CreateTopic(ctx, "b", 1, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.CreateTopic(ctx, "a", 3, nil); !errors.Is(err, wire.ErrTopicAlreadyExists) {
		t.Fatalf("duplicate create: %v", err)
	}
	if err := c.CreateTopic(ctx, "bad name!", 1, nil); !errors.Is(err, wire.ErrInvalidTopic) {
		t.Fatalf("invalid name: %v", err)
	}
	topics, err := c.ListTopics(ctx)
	if err != nil || len(topics) != 2 || topics[0] != (client.TopicInfo{Name: "a", Partitions: 3}) {
		t.Fatalf("list: %+v %v", topics, err)
	}
	desc, err := c.DescribeTopics(ctx, "a")
	if err != nil || len(desc) != 1 || len(desc[0].Partitions) != 3 {
		t.Fatalf("describe: %+v %v", desc, err)
	}
	cfgs, err := c.DescribeConfigs(ctx, "a", "retention.ms")
	if err != nil || len(cfgs) != 1 || cfgs[0].Value != "1000" || cfgs[0].Source != wire.ConfigSourceTopic {
		t.Fatalf("describe configs: %+v %v", cfgs, err)
	}
	if err := c.AlterConfigs(ctx, "a", map[string]string{"segment.bytes": "1048576"}, []string{"retention.ms"}); err != nil {
		t.Fatal(err)
	}
	cfgs, err = c.DescribeConfigs(ctx, "a", "retention.ms", "segment.bytes")
	if err != nil || len(cfgs) != 2 || cfgs[0].Source != wire.ConfigSourceDefault || cfgs[1].Value != "1048576" {
		t.Fatalf("after alter: %+v %v", cfgs, err)
	}
	if err := c.AlterConfigs(ctx, "a", map[string]string{"no.such.key": "1"}, nil); !errors.Is(err, wire.ErrInvalidConfig) {
		t.Fatalf("bad config: %v", err)
	}
	if err := c.DeleteTopic(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteTopic(ctx, "b"); !errors.Is(err, wire.ErrUnknownTopicOrPartition) {
		t.Fatalf("delete twice: %v", err)
	}
	if topics, _ := c.ListTopics(ctx); len(topics) != 1 {
		t.Fatalf("after delete: %+v", topics)
	}
}

func TestClientReconnectsAfterServerDropsConnection(t *testing.T) {
	e := start(t, 1)
	ctx := ctxT(t)
	if err := e.client.CreateTopic(ctx, "r", 1, nil); err != nil {
		t.Fatal(err)
	}
	// A raw garbage frame with a huge length makes the server close the client's
	// connection; the next call must redial and succeed.
	var resp wire.APIVersionsResponse
	err := e.client.Call(ctx, e.addrs[0], rawMessage{api: 77}, &resp)
	if !errors.Is(err, wire.ErrUnknownAPI) {
		t.Fatalf("unknown api: %v", err)
	}
	if _, err := e.client.ListTopics(ctx); err != nil {
		t.Fatalf("after an error response the connection must still work: %v", err)
	}
}

// rawMessage is a request with an arbitrary API key and empty payload.
type rawMessage struct{ api wire.APIKey }

func (m rawMessage) API() wire.APIKey              { return m.api }
func (m rawMessage) AppendTo(dst []byte) []byte    { return dst }
func (m rawMessage) ReadFrom(payload []byte) error { return nil }

func TestProducerRespectsBrokerFrameLimit(t *testing.T) {
	fake := fakebroker.New(t.TempDir(), nil)
	t.Cleanup(fake.Close)
	srv := netio.NewServer(fake, netio.Config{FrameBytesMax: 256 << 10})
	ln, err := netio.ListenShard(context.Background(), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln, 0)
	t.Cleanup(func() { srv.Close() })
	ctx := ctxT(t)
	c, err := client.New(ctx, client.Config{Broker: ln.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.CreateTopic(ctx, "limit", 4, nil); err != nil {
		t.Fatal(err)
	}
	// Batches of 128 KiB over 4 partitions would make 512 KiB requests: the producer must
	// split them to fit the broker's 256 KiB frames, and refuse a record that cannot fit.
	p := c.NewProducer(client.ProducerConfig{BatchBytes: 128 << 10, Linger: time.Hour, Acks: client.AckLeader})
	value := bytes.Repeat([]byte("v"), 1000)
	for i := range 2000 {
		if err := p.Send(ctx, &client.Record{Topic: "limit", Partition: int32(i % 4), Value: value}, func(_ *client.Record, err error) {
			if err != nil {
				t.Errorf("send: %v", err)
			}
		}); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	_, err = p.SendSync(ctx, &client.Record{Topic: "limit", Partition: 0, Value: bytes.Repeat([]byte("x"), 300<<10)})
	if !errors.Is(err, wire.ErrMessageTooLarge) {
		t.Fatalf("oversized record: %v", err)
	}
	p.Close(ctx)
	if st := srv.Stats(); st.Requests == 0 {
		t.Fatal("no requests reached the server")
	}
}

// parkingHandler holds produce requests until released; everything else goes to the fake.
type parkingHandler struct {
	fake   *fakebroker.Broker
	parked chan *netio.Request
}

func (h *parkingHandler) Serve(req *netio.Request) {
	if _, ok := req.Body.(*wire.ProduceRequest); ok {
		h.parked <- req
		return
	}
	h.fake.Serve(req)
}

func TestProducerBufferLimitBlocksSend(t *testing.T) {
	fake := fakebroker.New(t.TempDir(), nil)
	t.Cleanup(fake.Close)
	h := &parkingHandler{fake: fake, parked: make(chan *netio.Request, 100)}
	srv := netio.NewServer(h, netio.Config{})
	ln, err := netio.ListenShard(context.Background(), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln, 0)
	t.Cleanup(func() { srv.Close() })
	ctx := ctxT(t)
	c, err := client.New(ctx, client.Config{Broker: ln.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.CreateTopic(ctx, "buf", 1, nil); err != nil {
		t.Fatal(err)
	}
	p := c.NewProducer(client.ProducerConfig{BufferBytesMax: 8 << 10, Linger: -1, Acks: client.AckLeader})
	value := bytes.Repeat([]byte("v"), 1000)
	// The first record goes in under the test's context: it finds the buffer empty, but
	// fetches the topic's metadata first, a round trip that a loaded machine can stretch
	// past the short deadline below. The others wait only for buffer space.
	if err := p.Send(ctx, &client.Record{Topic: "buf", Partition: 0, Value: value}, nil); err != nil {
		t.Fatal(err)
	}
	sent := 1
	for ; sent < 100; sent++ {
		short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		err := p.Send(short, &client.Record{Topic: "buf", Partition: 0, Value: value}, nil)
		cancel()
		if errors.Is(err, context.DeadlineExceeded) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if sent > 8 {
		t.Fatalf("Send blocked after %d records of ~1 KiB; the buffer limit is 8 KiB", sent)
	}
	// Answer the parked produce requests: buffer space frees and sends proceed.
	go func() {
		for req := range h.parked {
			fake.Serve(req)
		}
	}()
	if err := p.Send(ctx, &client.Record{Topic: "buf", Partition: 0, Value: value}, nil); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	close(h.parked)
}

func TestConsumerSkipsControlBatches(t *testing.T) {
	e := start(t, 1)
	ctx := ctxT(t)
	if err := e.client.CreateTopic(ctx, "tx", 1, nil); err != nil {
		t.Fatal(err)
	}
	build := func(value string, control bool) []byte {
		b := batch.NewBuilder(batch.BuilderOptions{})
		b.Append(1, nil, []byte(value), nil)
		out, err := b.Build(nil)
		if err != nil {
			t.Fatal(err)
		}
		if control { // set attribute bit 5 and re-sign
			out[22] |= 0x20
			binary.BigEndian.PutUint32(out[17:21], crc32.Checksum(out[21:], crc32.MakeTable(crc32.Castagnoli)))
		}
		return out
	}
	records := append(append(build("a", false), build("marker", true)...), build("b", false)...)
	var resp wire.ProduceResponse
	req := &wire.ProduceRequest{Acks: wire.AcksLeader, Topics: []wire.ProduceTopic{{Topic: "tx", Partitions: []wire.ProducePartition{{Partition: 0, Records: records}}}}}
	if err := e.client.Call(ctx, e.addrs[0], req, &resp); err != nil || resp.Topics[0].Partitions[0].ErrorCode != wire.ErrNone {
		t.Fatalf("produce: %v %+v", err, resp)
	}
	co := e.client.NewConsumer(client.ConsumerConfig{MaxWait: 10 * time.Millisecond})
	co.Assign("tx", 0, client.Earliest())
	recs, err := co.Poll(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 || string(recs[0].Value) != "a" || string(recs[1].Value) != "b" || recs[1].Offset != 2 {
		t.Fatalf("got %d records: %+v", len(recs), recs)
	}
}
