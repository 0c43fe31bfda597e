package e2e

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/ringlog/ringlog/netio/client"
	"github.com/ringlog/ringlog/netio/wire"
)

// ackDropProxy sits between a client and a broker. It forwards requests untouched; of the
// produce responses it swallows the third and every dropEvery-th and closes that connection, so the
// broker has written the batches but the client never learns it and must retry them: the
// exact case an idempotent producer exists for.
type ackDropProxy struct {
	t         testing.TB
	ln        net.Listener
	target    string
	dropEvery int

	mu       sync.Mutex
	produces int // produce responses seen; guarded by mu
	dropped  int // produce responses swallowed; guarded by mu
	conns    map[net.Conn]struct{}
}

func startAckDropProxy(t testing.TB, target string, dropEvery int) *ackDropProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &ackDropProxy{t: t, ln: ln, target: target, dropEvery: dropEvery, conns: map[net.Conn]struct{}{}}
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *ackDropProxy) addr() string { return p.ln.Addr().String() }

func (p *ackDropProxy) close() {
	p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
}

func (p *ackDropProxy) track(c net.Conn) {
	p.mu.Lock()
	p.conns[c] = struct{}{}
	p.mu.Unlock()
}

func (p *ackDropProxy) accept() {
	for {
		downstream, err := p.ln.Accept()
		if err != nil {
			return
		}
		upstream, err := net.Dial("tcp", p.target)
		if err != nil {
			downstream.Close()
			continue
		}
		p.track(downstream)
		p.track(upstream)
		go func() {
			io.Copy(upstream, downstream) // requests pass untouched
			upstream.Close()
			downstream.Close()
		}()
		go p.responses(downstream, upstream)
	}
}

// responses copies response frames from the broker to the client, swallowing some.
func (p *ackDropProxy) responses(downstream, upstream net.Conn) {
	defer downstream.Close()
	defer upstream.Close()
	r := bufio.NewReaderSize(upstream, 64<<10)
	frame := make([]byte, wire.FrameLengthBytes, 64<<10)
	for {
		frame = frame[:wire.FrameLengthBytes]
		if _, err := io.ReadFull(r, frame); err != nil {
			return
		}
		n := binary.BigEndian.Uint32(frame)
		if n < wire.ResponseHeaderBytes-wire.FrameLengthBytes || n > wire.FrameBytesMaxDefault {
			p.t.Errorf("proxy: response frame length %d", n)
			return
		}
		frame = append(frame, make([]byte, n)...)
		if _, err := io.ReadFull(r, frame[wire.FrameLengthBytes:]); err != nil {
			return
		}
		if wire.APIKey(binary.BigEndian.Uint16(frame[4:])) == wire.APIProduce {
			p.mu.Lock()
			p.produces++
			drop := p.produces == 3 || p.produces%p.dropEvery == 0
			if drop {
				p.dropped++
			}
			p.mu.Unlock()
			if drop {
				return // the write happened; its acknowledgement is lost with the connection
			}
		}
		if _, err := downstream.Write(frame); err != nil {
			return
		}
	}
}

func (p *ackDropProxy) stats() (produces, dropped int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.produces, p.dropped
}

// sendRetrying sends one record, retrying a Send that failed before queueing it because the
// connection it needed for metadata was one the proxy had just cut.
func sendRetrying(t *testing.T, ctx context.Context, p *client.Producer, r *client.Record, cb func(*client.Record, error)) {
	t.Helper()
	for attempt := 0; ; attempt++ {
		err := p.Send(ctx, r, cb)
		if err == nil {
			return
		}
		if !errors.Is(err, client.ErrConnClosed) || attempt == 100 {
			t.Fatalf("send: %v", err)
		}
	}
}

// TestIdempotentProducerLostAcks produces 100k keyed records through a proxy that swallows
// produce acknowledgements (and cuts those connections), with retries on: every record must
// be in the log exactly once, at the offset its callback reported, in send order within its
// partition. Without idempotence each swallowed acknowledgement duplicates its batches.
func TestIdempotentProducerLostAcks(t *testing.T) {
	const topic, run, records, partitions = "lost-acks", "la", 100_000, 8
	b := startBroker(t)
	ctx := testContext(t, soakScaled(240*time.Second))
	direct := b.client(t)
	if err := direct.CreateTopic(ctx, topic, partitions, nil); err != nil {
		t.Fatal(err)
	}
	proxy := startAckDropProxy(t, b.addr, 13)
	c, err := client.New(ctx, client.Config{Broker: proxy.addr(), ClientID: "e2e-proxy", DisableShardRouting: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p := c.NewProducer(client.ProducerConfig{BatchBytes: 16 << 10, Retries: 1000, RetryBackoff: 5 * time.Millisecond})
	var log ackLog
	for i := range records {
		sendRetrying(t, ctx, p, testRecord(topic, run, i), log.callback(i))
	}
	if err := p.Close(ctx); err != nil {
		t.Fatalf("close producer: %v", err)
	}
	acks, failed, firstErr := log.snapshot()
	if failed > 0 || len(acks) != records {
		t.Fatalf("%d acknowledged, %d failed (first: %v), want %d acknowledged", len(acks), failed, firstErr, records)
	}
	produces, dropped := proxy.stats()
	if dropped < 3 {
		t.Fatalf("the proxy swallowed only %d of %d produce acknowledgements: the test did not test retries", dropped, produces)
	}
	want := expectedByPartition(t, acks) // dense offsets, send order kept
	checkConsumed(t, run, want, consumeAll(t, ctx, direct, topic))
	t.Logf("%d records exactly once; %d of %d produce acknowledgements swallowed", records, dropped, produces)
}

// TestIdempotentProducerFencing: producer A (name "writer") writes, then stalls with
// records pending; producer B starts with the same name; when A resumes, every one of its
// writes is refused — on partitions B wrote to and on those it did not — and A's user sees
// ErrFenced, while all of B's writes land.
func TestIdempotentProducerFencing(t *testing.T) {
	const topic, partitions = "fenced", 4
	b := startBroker(t)
	ctx := testContext(t, 60*time.Second)
	c := b.client(t)
	if err := c.CreateTopic(ctx, topic, partitions, nil); err != nil {
		t.Fatal(err)
	}
	// A's batches wait for an explicit Flush: that is its "pause".
	a := c.NewProducer(client.ProducerConfig{Name: "writer", Linger: time.Hour})
	var aLog ackLog
	for i := range 100 {
		r := testRecord(topic, "a", i)
		r.Partition = int32(i % partitions)
		if err := a.Send(ctx, r, aLog.callback(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if acks, failed, err := aLog.snapshot(); len(acks) != 100 || failed != 0 {
		t.Fatalf("A before B: %d acknowledged, %d failed (%v)", len(acks), failed, err)
	}
	var aLate ackLog
	for i := 100; i < 200; i++ { // queued while A is stalled
		r := testRecord(topic, "a", i)
		r.Partition = int32(i % partitions)
		if err := a.Send(ctx, r, aLate.callback(i)); err != nil {
			t.Fatal(err)
		}
	}

	bp := c.NewProducer(client.ProducerConfig{Name: "writer"})
	var bLog ackLog
	for i := range 200 { // B writes to partitions 0 and 1 only at first
		r := testRecord(topic, "b", i)
		r.Partition = int32(i % 2)
		if err := bp.Send(ctx, r, bLog.callback(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := bp.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if aID, bID := a.Identity(), bp.Identity(); aID.ID != bID.ID || bID.Epoch != aID.Epoch+1 {
		t.Fatalf("A holds %+v, B %+v: want the same id, B one epoch newer", aID, bID)
	}

	if err := a.Flush(ctx); err != nil { // A resumes
		t.Fatal(err)
	}
	lateAcks, lateFailed, lateErr := aLate.snapshot()
	if len(lateAcks) != 0 || lateFailed != 100 || !errors.Is(lateErr, client.ErrFenced) || !errors.Is(lateErr, wire.ErrInvalidProducerEpoch) {
		t.Fatalf("A after B took over: %d written, %d refused (%v); want all 100 refused as fenced", len(lateAcks), lateFailed, lateErr)
	}
	for p := range int32(partitions) { // also where B never wrote (2, 3)
		r := testRecord(topic, "a", 1000+int(p))
		r.Partition = p
		if _, err := a.SendSync(ctx, r); !errors.Is(err, client.ErrFenced) {
			t.Fatalf("A's new write to partition %d after the fence: %v", p, err)
		}
	}
	for i := 200; i < 400; i++ {
		r := testRecord(topic, "b", i)
		r.Partition = int32(i % partitions)
		if err := bp.Send(ctx, r, bLog.callback(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := bp.Close(ctx); err != nil {
		t.Fatal(err)
	}
	bAcks, bFailed, bErr := bLog.snapshot()
	if len(bAcks) != 400 || bFailed != 0 {
		t.Fatalf("B: %d acknowledged, %d failed (%v), want 400", len(bAcks), bFailed, bErr)
	}

	got := consumeAll(t, ctx, c, topic)
	aEarly, _, _ := aLog.snapshot()
	type origin struct {
		run   string
		index int
	}
	want := map[int32]map[int64]origin{}
	add := func(run string, list []acked) {
		for _, x := range list {
			if want[x.partition] == nil {
				want[x.partition] = map[int64]origin{}
			}
			want[x.partition][x.offset] = origin{run, x.index}
		}
	}
	add("a", aEarly)
	add("b", bAcks)
	total := 0
	for p, list := range got {
		total += len(list)
		for _, r := range list {
			w, ok := want[p][r.Offset]
			if !ok {
				t.Fatalf("%s/%d@%d (%s) was written by nobody acknowledged: a fenced write got in", topic, p, r.Offset, r.Key)
			}
			if err := checkRecord(r, w.run, w.index); err != nil {
				t.Fatal(err)
			}
		}
	}
	if total != len(aEarly)+len(bAcks) {
		t.Fatalf("consumed %d records, want %d (A's 100 before the fence, B's 400)", total, len(aEarly)+len(bAcks))
	}
}

// TestIdempotentProducerKill9 kills the broker with SIGKILL several times while one
// idempotent producer (acks=all, flush.always, small segments so that producer state
// snapshots roll) keeps sending, and restarts it each time; the producer retries what was
// unacknowledged. At the end every record is in the log exactly once, at the offset its
// callback reported, in order: batches written before a kill but never acknowledged are
// recognised as duplicates by the producer state rebuilt at recovery.
func TestIdempotentProducerKill9(t *testing.T) {
	const topic, run, partitions = "exactly", "x", 4
	records, kills := 6000, 3
	if soak() {
		records, kills = 60_000, 10
	}
	b := startBroker(t)
	ctx := testContext(t, soakScaled(180*time.Second))
	c := b.client(t)
	if err := c.CreateTopic(ctx, topic, partitions, map[string]string{"flush.always": "true", "segment.bytes": "16384", "index.interval.bytes": "1024"}); err != nil {
		t.Fatal(err)
	}
	p := c.NewProducer(client.ProducerConfig{Acks: client.AckAll, BatchBytes: 4 << 10, Retries: 20_000, RetryBackoff: 5 * time.Millisecond, BufferBytesMax: 256 << 10})
	var log ackLog
	// marks[k] closes when (k+1)*records/(kills+1) records are acknowledged: kill k+1 is due.
	marks := make([]chan struct{}, kills)
	for k := range marks {
		marks[k] = make(chan struct{})
	}
	var markMu sync.Mutex
	acknowledged := 0
	callback := func(i int) func(*client.Record, error) {
		logged := log.callback(i)
		return func(r *client.Record, err error) {
			logged(r, err)
			if err != nil {
				return
			}
			markMu.Lock()
			defer markMu.Unlock()
			acknowledged++
			for k := range marks {
				if acknowledged == (k+1)*records/(kills+1) {
					close(marks[k])
				}
			}
		}
	}
	sendErr, sent := make(chan error, 1), make(chan struct{})
	go func() {
		defer close(sent)
		for i := range records {
			if err := p.Send(ctx, testRecord(topic, run, i), callback(i)); err != nil {
				sendErr <- fmt.Errorf("send %d: %w", i, err)
				return
			}
		}
	}()
	for k := 1; k <= kills; k++ {
		select {
		case <-marks[k-1]:
		case err := <-sendErr:
			t.Fatalf("producer stopped before kill %d: %v (%d acknowledged)", k, err, log.count())
		case <-ctx.Done():
			t.Fatalf("waiting for acknowledgements before kill %d: %v (have %d)", k, ctx.Err(), log.count())
		}
		b.kill()
		b.restart()
		t.Logf("kill %d after %d acknowledgements", k, log.count())
	}
	<-sent
	select {
	case err := <-sendErr:
		t.Fatal(err)
	default:
	}
	if err := p.Close(ctx); err != nil {
		t.Fatalf("close producer: %v", err)
	}
	acks, failed, firstErr := log.snapshot()
	if failed > 0 || len(acks) != records {
		t.Fatalf("%d acknowledged, %d failed (first: %v), want all %d", len(acks), failed, firstErr, records)
	}
	want := expectedByPartition(t, acks)
	checkConsumed(t, run, want, consumeAll(t, ctx, c, topic))
}
