package netio_test

import (
	"context"
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
	b := batch.NewBuilder(batch.BuilderOptions{})
	b.Append(1, nil, []byte("v"), nil)
	records, err := b.Build(nil)
	if err != nil {
		t.Fatal(err)
	}
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
