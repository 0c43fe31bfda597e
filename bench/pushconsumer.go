package bench

import (
	"context"
	"fmt"
	"sync"
)

// PushConsumer adapts a client that hands messages to a callback (NATS's Consume, the
// RabbitMQ stream client) to Consumer.Poll: the callbacks Deliver into a bounded channel and
// Poll drains it. A driver embeds it and calls Stop before closing its client, so that no
// callback stays blocked on a full channel.
type PushConsumer struct {
	name string
	msgs chan pushed
	done chan struct{}
	once sync.Once
}

type pushed struct {
	partition int
	data      []byte
}

// NewPushConsumer returns a consumer that buffers up to buffer messages; name prefixes
// Poll's errors.
func NewPushConsumer(name string, buffer int) *PushConsumer {
	return &PushConsumer{name: name, msgs: make(chan pushed, buffer), done: make(chan struct{})}
}

// Deliver queues one message; it waits while the buffer is full, until Poll takes some or
// Stop is called (then the message is dropped).
func (c *PushConsumer) Deliver(partition int, data []byte) {
	select {
	case c.msgs <- pushed{partition, data}:
	case <-c.done:
	}
}

// Poll hands over the next message, waiting for one, and then whatever else is queued.
func (c *PushConsumer) Poll(ctx context.Context, handle func(int, []byte)) error {
	select {
	case m := <-c.msgs:
		handle(m.partition, m.data)
		for range len(c.msgs) {
			m = <-c.msgs
			handle(m.partition, m.data)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%s: poll: %w", c.name, ctx.Err())
	}
}

// Stop releases blocked callbacks; later deliveries are dropped.
func (c *PushConsumer) Stop() { c.once.Do(func() { close(c.done) }) }
