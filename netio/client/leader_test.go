package client_test

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlog/ringlog/netio"
	"github.com/ringlog/ringlog/netio/client"
	"github.com/ringlog/ringlog/netio/wire"
)

// Leadership: seeds, metadata version 1 and the retries after leadership errors, against
// scripted brokers (netio.Server with a handler function) on real sockets.

// scriptedBroker serves one broker id of a pretend cluster; leaderOf says who leads
// partition 0 of topic "t" (asked at each Metadata request), and listOffset answers
// ListOffsets.
type scriptedBroker struct {
	id         int32
	addr       string
	srv        *netio.Server
	done       sync.WaitGroup
	brokers    func() []wire.MetadataBroker
	leaderOf   func() int32
	listOffset func() (int64, wire.ErrorCode)
	metadata   atomic.Int32 // Metadata requests served
	fetched    atomic.Int32 // Fetch requests answered as the leader
}

func startScripted(t *testing.T, id int32) *scriptedBroker {
	t.Helper()
	b := &scriptedBroker{id: id}
	b.srv = netio.NewServer(netio.HandlerFunc(b.serve), netio.Config{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b.addr = ln.Addr().String()
	b.done.Add(1)
	go func() { defer b.done.Done(); b.srv.Serve(ln, 0) }()
	t.Cleanup(b.stop)
	return b
}

func (b *scriptedBroker) stop() {
	b.srv.Close()
	b.done.Wait()
}

func (b *scriptedBroker) serve(req *netio.Request) {
	switch body := req.Body.(type) {
	case *wire.MetadataRequest:
		b.metadata.Add(1)
		leader := b.leaderOf()
		resp := &wire.MetadataResponse{BrokerID: b.id, Shards: []wire.MetadataShard{{Shard: 0}}, Brokers: b.brokers(), ControllerID: 1,
			Topics: []wire.MetadataTopic{{Topic: "t", Partitions: []wire.MetadataPartition{
				{Partition: 0, LeaderEpoch: leader, Leader: leader, Replicas: []int32{1, 2}, ISR: []int32{1, 2}, HighWatermark: -1}}}}}
		resp.Version = body.Version
		req.ReplyMessage(resp)
	case *wire.ListOffsetsRequest:
		off, code := b.listOffset()
		req.ReplyMessage(&wire.ListOffsetsResponse{Topics: []wire.ListOffsetsResponseTopic{{Topic: "t",
			Partitions: []wire.ListOffsetsResponsePartition{{Partition: 0, ErrorCode: code, Timestamp: -1, Offset: off}}}}})
	case *wire.FetchRequest:
		p := wire.FetchResponsePartition{Partition: 0, HighWatermark: 0}
		if b.leaderOf() != b.id {
			p.ErrorCode = wire.ErrNotLeaderOrWrongShard
		} else {
			b.fetched.Add(1)
		}
		req.ReplyMessage(&wire.FetchResponse{Topics: []wire.FetchResponseTopic{{Topic: "t", Partitions: []wire.FetchResponsePartition{p}}}})
	default:
		req.ReplyError(wire.ErrUnknownAPI, "not scripted")
	}
}

// pair starts brokers 1 and 2 of a pretend cluster that list each other; partition 0 of
// "t" is led by *leader.
func pair(t *testing.T, leader *atomic.Int32) (b1, b2 *scriptedBroker) {
	b1, b2 = startScripted(t, 1), startScripted(t, 2)
	for _, b := range []*scriptedBroker{b1, b2} {
		b.brokers = func() []wire.MetadataBroker {
			return []wire.MetadataBroker{{NodeID: 1, Address: b1.addr}, {NodeID: 2, Address: b2.addr, Rack: "r2"}}
		}
		b.leaderOf = func() int32 { return leader.Load() }
		b.listOffset = func() (int64, wire.ErrorCode) {
			if leader.Load() != b.id {
				return -1, wire.ErrNotLeaderOrWrongShard
			}
			return 100 + int64(b.id), wire.ErrNone
		}
	}
	return b1, b2
}

// recordedSleeps makes c record its retry pauses instead of sleeping; each pause runs
// onSleep first (the test moves leadership there).
func recordedSleeps(c *client.Client, onSleep func()) *[]time.Duration {
	var mu sync.Mutex
	var sleeps []time.Duration
	client.SetClientRetryClock(c, func(ctx context.Context, d time.Duration) error {
		mu.Lock()
		sleeps = append(sleeps, d)
		mu.Unlock()
		onSleep()
		return ctx.Err()
	}, func() float64 { return 0.5 })
	return &sleeps
}

// TestListOffsetFollowsLeader: the cached metadata names broker 1; broker 1 answers
// NOT_LEADER_OR_WRONG_SHARD because leadership moved to broker 2; the client backs off once,
// refreshes metadata (version 1: leader 2 at its address) and asks broker 2.
func TestListOffsetFollowsLeader(t *testing.T) {
	var leader atomic.Int32
	leader.Store(1)
	b1, _ := pair(t, &leader)
	c, err := client.New(ctxT(t), client.Config{Broker: b1.addr, RetryBackoff: 40 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := ctxT(t)
	if off, err := c.ListOffset(ctx, "t", 0, wire.TimestampLatest); err != nil || off != 101 {
		t.Fatalf("offset %d, %v; want 101 from broker 1", off, err)
	}
	if got := c.Brokers(); len(got) != 2 || got[2] == "" {
		t.Fatalf("brokers from metadata v1: %v", got)
	}
	leader.Store(2) // the client's cache still says 1
	sleeps := recordedSleeps(c, func() {})
	if off, err := c.ListOffset(ctx, "t", 0, wire.TimestampLatest); err != nil || off != 102 {
		t.Fatalf("offset %d, %v; want 102 from the new leader", off, err)
	}
	// One retry: BackoffDelay(40ms, 1s, 0, 0.5) = 20ms + 10ms.
	if len(*sleeps) != 1 || (*sleeps)[0] != 30*time.Millisecond {
		t.Fatalf("pauses %v, want one of 30ms", *sleeps)
	}
}

// TestConsumerFollowsLeader: a consumer's fetch answered NOT_LEADER_OR_WRONG_SHARD marks
// the topic's metadata stale; its next fetch round refreshes it (metadata version 1: the
// new leader at its address) and fetches from the new leader.
func TestConsumerFollowsLeader(t *testing.T) {
	var leader atomic.Int32
	leader.Store(1)
	b1, b2 := pair(t, &leader)
	c, err := client.New(ctxT(t), client.Config{Broker: b1.addr, RetryBackoff: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := ctxT(t)
	co := c.NewConsumer(client.ConsumerConfig{MaxWait: 10 * time.Millisecond})
	co.Assign("t", 0, client.AtOffset(0))
	if _, err := co.Poll(ctx); err != nil || b1.fetched.Load() != 1 {
		t.Fatalf("first poll: %v, broker 1 fetches %d; want 1", err, b1.fetched.Load())
	}
	leader.Store(2) // the client's cache still says 1
	metadataBefore := b1.metadata.Load() + b2.metadata.Load()
	for polls := 0; b2.fetched.Load() == 0; polls++ {
		if polls == 20 {
			t.Fatalf("no fetch reached the new leader after %d polls (metadata requests: %d)", polls, b1.metadata.Load()+b2.metadata.Load()-metadataBefore)
		}
		if _, err := co.Poll(ctx); err != nil {
			t.Fatalf("poll after the leader moved: %v", err)
		}
	}
	if n := b1.metadata.Load() + b2.metadata.Load() - metadataBefore; n != 1 {
		t.Fatalf("%d metadata requests after the move, want 1 (one refresh of the stale topic)", n)
	}
}

// TestListOffsetRetriesWithinDeadline: with no leader answering, the retries back off
// exponentially up to RetryBackoffMax and stop at the caller's deadline with the
// leadership error.
func TestListOffsetRetriesWithinDeadline(t *testing.T) {
	var leader atomic.Int32
	leader.Store(3) // a broker that never answers as leader
	b1, _ := pair(t, &leader)
	c, err := client.New(ctxT(t), client.Config{Broker: b1.addr, RetryBackoff: 10 * time.Millisecond, RetryBackoffMax: 80 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithCancel(ctxT(t))
	var n int
	sleeps := recordedSleeps(c, func() {
		if n++; n == 6 {
			cancel() // the caller's deadline passes during the 6th pause
		}
	})
	_, err = c.ListOffset(ctx, "t", 0, wire.TimestampLatest)
	if !errors.Is(err, wire.ErrNotLeaderOrWrongShard) {
		t.Fatalf("err %v, want NOT_LEADER_OR_WRONG_SHARD", err)
	}
	want := []time.Duration{7500 * time.Microsecond, 15 * time.Millisecond, 30 * time.Millisecond, 60 * time.Millisecond, 60 * time.Millisecond, 60 * time.Millisecond}
	if len(*sleeps) != len(want) {
		t.Fatalf("pauses %v, want %v", *sleeps, want)
	}
	for i := range want {
		if (*sleeps)[i] != want[i] {
			t.Fatalf("pauses %v, want %v", *sleeps, want)
		}
	}
}

// TestSeedListAndHomeFailover: New skips a seed that refuses connections; when the home
// broker goes away the client moves home to a broker metadata listed and keeps routing.
func TestSeedListAndHomeFailover(t *testing.T) {
	var leader atomic.Int32
	leader.Store(2)
	b1, b2 := pair(t, &leader)
	dead := startScripted(t, 9)
	dead.stop() // its port now refuses connections
	c, err := client.New(ctxT(t), client.Config{Broker: dead.addr + "," + b1.addr})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.BrokerAddr() != b1.addr {
		t.Fatalf("home %s, want the first live seed %s", c.BrokerAddr(), b1.addr)
	}
	ctx := ctxT(t)
	if off, err := c.ListOffset(ctx, "t", 0, wire.TimestampLatest); err != nil || off != 102 {
		t.Fatalf("offset %d, %v; want 102 from the leader, broker 2", off, err)
	}
	b1.stop()
	before := b2.metadata.Load()
	topics, err := c.ListTopics(ctx) // a home call: moves to broker 2
	if err != nil || len(topics) != 1 {
		t.Fatalf("list topics after the home broker stopped: %v %v", topics, err)
	}
	if c.BrokerAddr() != b2.addr || b2.metadata.Load() == before {
		t.Fatalf("home %s, want %s (metadata answered by broker 2: %d)", c.BrokerAddr(), b2.addr, b2.metadata.Load()-before)
	}
	if _, err := client.New(ctxT(t), client.Config{Broker: dead.addr, Brokers: []string{dead.addr}}); err == nil {
		t.Fatal("New with only dead seeds succeeded")
	}
}

// TestMetadataVersionZeroStillServed: a version 0 Metadata request (an older client) is
// answered without the cluster fields, in the version it asked for.
func TestMetadataVersionZeroStillServed(t *testing.T) {
	var leader atomic.Int32
	leader.Store(1)
	b1, _ := pair(t, &leader)
	c, err := client.New(ctxT(t), client.Config{Broker: b1.addr})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var v0 wire.MetadataResponse
	if err := c.Call(ctxT(t), b1.addr, &wire.MetadataRequest{Topics: []string{"t"}}, &v0); err != nil {
		t.Fatal(err)
	}
	if v0.Version != 0 || v0.Brokers != nil || v0.Topics[0].Partitions[0].Replicas != nil {
		t.Fatalf("version 0 answer carries version 1 fields: %+v", v0)
	}
	var v1 wire.MetadataResponse
	if err := c.Call(ctxT(t), b1.addr, &wire.MetadataRequest{Topics: []string{"t"}, Version: 1}, &v1); err != nil {
		t.Fatal(err)
	}
	if v1.Version != 1 || len(v1.Brokers) != 2 || v1.Brokers[1].Rack != "r2" || len(v1.Topics[0].Partitions[0].ISR) != 2 {
		t.Fatalf("version 1 answer: %+v", v1)
	}
}

func TestBackoffDelay(t *testing.T) {
	for _, c := range []struct {
		n    int
		r    float64
		want time.Duration
	}{
		{0, 0, 25 * time.Millisecond}, {0, 0.999, 49_975_000}, {1, 0, 50 * time.Millisecond},
		{4, 0, 400 * time.Millisecond}, {5, 0, 500 * time.Millisecond}, {60, 0.5, 750 * time.Millisecond},
	} {
		if got := client.BackoffDelay(50*time.Millisecond, time.Second, c.n, c.r); got != c.want {
			t.Errorf("BackoffDelay(50ms, 1s, %d, %v) = %v, want %v", c.n, c.r, got, c.want)
		}
	}
}

// TestProducerLeadershipErrorsDoNotSpendRetries: with Retries 2, a partition answering
// NOT_LEADER_OR_WRONG_SHARD 20 times in a row (a leader election) still takes the record;
// a retriable error of another kind gives up after the 2 retries.
func TestProducerLeadershipErrorsDoNotSpendRetries(t *testing.T) {
	e := start(t, 1)
	ctx := ctxT(t)
	if err := e.client.CreateTopic(ctx, "elect", 1, nil); err != nil {
		t.Fatal(err)
	}
	p := e.client.NewProducer(client.ProducerConfig{Retries: 2, RetryBackoff: time.Millisecond, RetryBackoffMax: 2 * time.Millisecond})
	defer p.Close(ctx)
	e.fake.InjectProduceError("elect", 0, wire.ErrNotLeaderOrWrongShard, 20)
	if off, err := p.SendSync(ctx, &client.Record{Topic: "elect", Partition: 0, Value: []byte("v")}); err != nil || off != 0 {
		t.Fatalf("after 20 leadership errors: offset %d, %v", off, err)
	}
	e.fake.InjectProduceError("elect", 0, wire.ErrRequestTimedOut, 5)
	if _, err := p.SendSync(ctx, &client.Record{Topic: "elect", Partition: 0, Value: []byte("w")}); !errors.Is(err, wire.ErrRequestTimedOut) {
		t.Fatalf("after 3 timeouts with Retries 2: %v, want REQUEST_TIMED_OUT", err)
	}
}
