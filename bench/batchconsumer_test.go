package bench

import (
	"context"
	"iter"
	"sync/atomic"
	"testing"
	"time"
)

// batchMemDriver is the mem driver whose consumers are BatchConsumers: each Poll's
// messages become one batch per partition run, and the consumer counts what it handed out.
type batchMemDriver struct {
	*MemDriver
	batches, polls atomic.Int64
}

func (d *batchMemDriver) NewConsumer(ctx context.Context, topic string, partitions []int) (Consumer, error) {
	c, err := d.MemDriver.NewConsumer(ctx, topic, partitions)
	if err != nil {
		return nil, err
	}
	return &batchMemConsumer{Consumer: c, driver: d}, nil
}

type batchMemConsumer struct {
	Consumer
	driver *batchMemDriver
}

func (c *batchMemConsumer) Poll(ctx context.Context, handle func(int, []byte)) error {
	c.driver.polls.Add(1)
	return c.Consumer.Poll(ctx, handle)
}

func (c *batchMemConsumer) PollBatches(ctx context.Context, handle func(int, iter.Seq[[]byte])) error {
	var partitions []int
	var values [][]byte
	if err := c.Consumer.Poll(ctx, func(partition int, value []byte) {
		partitions, values = append(partitions, partition), append(values, value)
	}); err != nil {
		return err
	}
	for start := 0; start < len(values); {
		end := start + 1
		for end < len(values) && partitions[end] == partitions[start] {
			end++
		}
		run := values[start:end]
		c.driver.batches.Add(1)
		handle(partitions[start], func(yield func([]byte) bool) {
			for _, v := range run {
				if !yield(v) {
					return
				}
			}
		})
		start = end
	}
	return nil
}

// TestRunAccountsPerBatch: with a BatchConsumer the runner counts every message and byte
// but records one end-to-end sample per batch, and never falls back to Poll.
func TestRunAccountsPerBatch(t *testing.T) {
	w := memWorkload()
	w.Topics, w.Consumers, w.BacklogSize, w.Warmup = 1, 1, 1<<20, 0
	w.Duration = Duration(300 * time.Millisecond)
	driver := &batchMemDriver{MemDriver: NewMemDriver()}
	result, err := Run(context.Background(), RunOptions{Workload: w, Driver: driver, SampleInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if driver.polls.Load() != 0 {
		t.Fatalf("runner called Poll %d times on a BatchConsumer", driver.polls.Load())
	}
	batches := driver.batches.Load()
	if !result.AllDelivered() || result.Errors.BadPayloads != 0 || batches == 0 {
		t.Fatalf("totals %+v errors %+v batches %d", result.Totals, result.Errors, batches)
	}
	if result.Consume.Bytes != result.Consume.Messages*int64(w.MessageSize) {
		t.Fatalf("consumed %d bytes in %d messages of %d", result.Consume.Bytes, result.Consume.Messages, w.MessageSize)
	}
	// One sample per batch at most (batches outside the window record none).
	if n := result.EndToEnd.Count; n == 0 || n > batches {
		t.Fatalf("%d end-to-end samples for %d batches of %d messages in the window", n, batches, result.Consume.Messages)
	}
	if b := result.Backlog; b == nil || !b.Drained || b.BacklogReadSeconds <= 0 {
		t.Fatalf("backlog %+v", b)
	}
}
