package netio_test

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/ringlog/ringlog/engine/batch"
	"github.com/ringlog/ringlog/engine/shard/core"
	"github.com/ringlog/ringlog/netio/internal/brokertest"
	"github.com/ringlog/ringlog/netio/node"
	"github.com/ringlog/ringlog/netio/wire"
)

// neverCommits is a replicator whose followers never fetch: acks=all never completes.
type neverCommits struct{}

func (neverCommits) HighWatermark(p *core.Partition) int64   { return p.Log.EndOffset() }
func (neverCommits) CommittedOffset(p *core.Partition) int64 { return p.Log.StartOffset() }
func (neverCommits) InSyncReplicas(*core.Partition) int      { return 1 }

// oneRecordBatch is a batch of one record.
func oneRecordBatch(t *testing.T) []byte {
	t.Helper()
	b := batch.NewBuilder(batch.BuilderOptions{})
	b.Append(1, nil, []byte("v"), nil)
	records, err := b.Build(nil)
	if err != nil {
		t.Fatal(err)
	}
	return records
}

// An acks=all produce that cannot commit is answered when its timeout_ms passes: the
// partitions still waiting get REQUEST_TIMED_OUT, the partitions already answered keep their
// answer, and the connection serves the requests behind it (the outcome does not depend on
// the timing: the produce never commits).
func TestProduceTimeout(t *testing.T) {
	rb := brokertest.Start(t, brokertest.Options{Node: func(c *node.Config) { c.Core.Replicator = neverCommits{} }})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := rb.Client.CreateTopic(ctx, "t", 1, nil); err != nil {
		t.Fatal(err)
	}
	records := oneRecordBatch(t)
	req := &wire.ProduceRequest{Acks: wire.AcksAll, TimeoutMs: 20, Topics: []wire.ProduceTopic{
		{Topic: "t", Partitions: []wire.ProducePartition{{Partition: 0, Records: records}}},
		{Topic: "missing", Partitions: []wire.ProducePartition{{Partition: 0, Records: records}}},
	}}
	var resp wire.ProduceResponse
	if err := rb.Client.Call(ctx, rb.Addr, req, &resp); err != nil {
		t.Fatal(err)
	}
	if got := resp.Topics[0].Partitions[0]; got.ErrorCode != wire.ErrRequestTimedOut || got.BaseOffset != -1 {
		t.Errorf("waiting partition: %+v, want REQUEST_TIMED_OUT", got)
	}
	if got := resp.Topics[1].Partitions[0].ErrorCode; got != wire.ErrUnknownTopicOrPartition {
		t.Errorf("missing topic: %s, want UNKNOWN_TOPIC_OR_PARTITION", got.Name())
	}
	// acks=1 is not held back by the produce still queued in the core.
	req.Acks, req.Topics = wire.AcksLeader, req.Topics[:1]
	if err := rb.Client.Call(ctx, rb.Addr, req, &resp); err != nil {
		t.Fatal(err)
	}
	if got := resp.Topics[0].Partitions[0]; got.ErrorCode != wire.ErrNone || got.BaseOffset != 1 {
		t.Errorf("acks=1 after the timed-out produce: %+v, want offset 1", got)
	}
}

// A produce whose connection died before its shard answered: the answer releases the reply
// at once, inline, and must neither deadlock nor leak. Regression: the pooled produceCall
// replied under its own lock, the dead connection ran the reply's Done inline, and Done
// took that lock again — the shard loop hung, and with it every connection on the shard
// (e2e.TestIdempotentProducerLostAcks hung in half its runs).
func TestProduceAnsweredAfterConnectionDied(t *testing.T) {
	// The ring driver (ringlogd's default) drops a connection whose frame stalls at once;
	// the net driver keeps writing replies after its reader stopped, so no reply there is
	// answered after the connection is gone in this scenario.
	for _, driver := range []string{"ring"} {
		t.Run(driver, func(t *testing.T) {
			rb := brokertest.Start(t, brokertest.Options{Driver: driver, Node: func(c *node.Config) {
				c.Core.Replicator = neverCommits{}
				c.Server.FrameReadTimeout = 50 * time.Millisecond
			}})
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()
			// A hung shard loop also hangs the broker's Stop in Cleanup: fail loudly instead.
			finished := make(chan struct{})
			defer close(finished)
			go func() {
				select {
				case <-finished:
				case <-time.After(60 * time.Second):
					panic("TestProduceAnsweredAfterConnectionDied: still running after 60s: the shard loop is deadlocked")
				}
			}()
			if err := rb.Client.CreateTopic(ctx, "t", 1, nil); err != nil {
				t.Fatal(err)
			}
			records := oneRecordBatch(t)
			conn, err := net.Dial("tcp", rb.Addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			frame := wire.AppendRequest(nil, 1, &wire.ProduceRequest{Acks: wire.AcksAll, Topics: []wire.ProduceTopic{
				{Topic: "t", Partitions: []wire.ProducePartition{{Partition: 0, Records: records}}}}})
			// Then the first bytes of a frame that never completes: the broker drops the
			// connection FrameReadTimeout later, with the acks=all produce still waiting.
			frame = append(frame, 0, 0)
			if _, err := conn.Write(frame); err != nil {
				t.Fatal(err)
			}
			conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			if n, err := conn.Read(make([]byte, 64)); !errors.Is(err, io.EOF) {
				t.Fatalf("read %d bytes (%v); want EOF: the broker should have dropped the connection unanswered", n, err)
			}
			// Deleting the topic answers the waiting produce on its shard's loop.
			if err := rb.Client.DeleteTopic(ctx, "t"); err != nil {
				t.Fatal(err)
			}
			// The shard still serves: produce and read back on a new topic.
			if err := rb.Client.CreateTopic(ctx, "u", 1, nil); err != nil {
				t.Fatal(err)
			}
			req := &wire.ProduceRequest{Acks: wire.AcksLeader, Topics: []wire.ProduceTopic{
				{Topic: "u", Partitions: []wire.ProducePartition{{Partition: 0, Records: records}}}}}
			var resp wire.ProduceResponse
			if err := rb.Client.Call(ctx, rb.Addr, req, &resp); err != nil {
				t.Fatal(err)
			}
			if got := resp.Topics[0].Partitions[0]; got.ErrorCode != wire.ErrNone || got.BaseOffset != 0 {
				t.Fatalf("produce after the dead connection's answer: %+v", got)
			}
		})
	}
}
