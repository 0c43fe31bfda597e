package bench

import (
	"context"
	"fmt"
	"sync"
)

func init() {
	RegisterDriver("mem", func(string, Workload) (Driver, error) { return NewMemDriver(), nil })
}

// MemDriver is an in-process log: one slice of messages per partition behind a mutex. It
// measures the framework's own ceiling (what rate the harness can drive and observe with no
// broker at all) and backs the framework's tests. It is not a broker and nothing compares
// against it.
type MemDriver struct {
	mu      sync.Mutex // guards topics, every partition's messages, notify and waiting
	topics  map[string][]*memPartition
	notify  chan struct{} // closed and replaced on an append that has waiters
	waiting bool          // a consumer is blocked on notify
}

type memPartition struct {
	messages [][]byte
}

// NewMemDriver returns an empty in-memory log.
func NewMemDriver() *MemDriver {
	return &MemDriver{topics: map[string][]*memPartition{}, notify: make(chan struct{})}
}

// Info describes the driver.
func (d *MemDriver) Info() DriverInfo {
	return DriverInfo{Name: "mem", Version: "in-process", StorageMode: "memory", IOBackend: "none"}
}

// CreateTopic adds a topic.
func (d *MemDriver) CreateTopic(_ context.Context, name string, partitions int) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.topics[name]; ok {
		return fmt.Errorf("mem driver: topic %q: %w", name, ErrTopicExists)
	}
	parts := make([]*memPartition, partitions)
	for i := range parts {
		parts[i] = &memPartition{}
	}
	d.topics[name] = parts
	return nil
}

func (d *MemDriver) partitions(topic string) ([]*memPartition, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	parts, ok := d.topics[topic]
	if !ok {
		return nil, fmt.Errorf("mem driver: no topic %q", topic)
	}
	return parts, nil
}

// NewProducer returns a producer that appends synchronously and acknowledges at once.
func (d *MemDriver) NewProducer(_ context.Context, topic string, _ ProducerOptions) (Producer, error) {
	parts, err := d.partitions(topic)
	if err != nil {
		return nil, err
	}
	return &memProducer{driver: d, parts: parts}, nil
}

// NewConsumer reads partitions from offset 0.
func (d *MemDriver) NewConsumer(_ context.Context, topic string, partitions []int) (Consumer, error) {
	parts, err := d.partitions(topic)
	if err != nil {
		return nil, err
	}
	c := &memConsumer{driver: d}
	for _, p := range partitions {
		if p < 0 || p >= len(parts) {
			return nil, fmt.Errorf("mem driver: topic %q has no partition %d", topic, p)
		}
		c.parts = append(c.parts, parts[p])
		c.ids = append(c.ids, p)
	}
	c.next = make([]int, len(c.parts))
	return c, nil
}

// Close drops the data.
func (d *MemDriver) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.topics = map[string][]*memPartition{}
	return nil
}

type memProducer struct {
	driver *MemDriver
	parts  []*memPartition
}

func (p *memProducer) Send(partition int, _, value []byte, done func(error)) error {
	if partition < 0 || partition >= len(p.parts) {
		return fmt.Errorf("mem driver: no partition %d", partition)
	}
	stored := append([]byte(nil), value...)
	p.driver.mu.Lock()
	part := p.parts[partition]
	part.messages = append(part.messages, stored)
	if p.driver.waiting {
		close(p.driver.notify)
		p.driver.notify, p.driver.waiting = make(chan struct{}), false
	}
	p.driver.mu.Unlock()
	done(nil)
	return nil
}

func (p *memProducer) Flush(context.Context) error { return nil }
func (p *memProducer) Close() error                { return nil }

type memConsumer struct {
	driver *MemDriver
	parts  []*memPartition
	ids    []int
	next   []int // next message index per partition; owned by the polling goroutine
}

const memPollBatchMax = 1024

func (c *memConsumer) Poll(ctx context.Context, handle func(int, []byte)) error {
	for {
		var batch [][]byte
		var batchPartitions []int
		c.driver.mu.Lock()
		for i, part := range c.parts {
			for c.next[i] < len(part.messages) && len(batch) < memPollBatchMax {
				batch = append(batch, part.messages[c.next[i]])
				batchPartitions = append(batchPartitions, c.ids[i])
				c.next[i]++
			}
		}
		var wait chan struct{}
		if len(batch) == 0 {
			c.driver.waiting = true
			wait = c.driver.notify
		}
		c.driver.mu.Unlock()
		if len(batch) > 0 {
			for i, value := range batch {
				handle(batchPartitions[i], value)
			}
			return nil
		}
		select {
		case <-wait:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (c *memConsumer) Close() error { return nil }
