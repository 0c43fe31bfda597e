package ringlogdriver

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/ringlog/ringlog/bench"
	"github.com/ringlog/ringlog/engine/batch"
	"github.com/ringlog/ringlog/netio/client"
	"github.com/ringlog/ringlog/netio/wire"
)

// RawProduce is a ping-pong whose message is a real acks=1 produce request of one record,
// encoded once and sent as is over a connection of its own to the partition's shard (the
// address a shard-aware client uses), with the answer read and its error code checked.
// Against a broker it is the round trip with the client library taken out: SendSync minus
// RawProduce is the client's own cost, RawProduce minus an echo that appends
// (bench.UringEcho.Append) the broker's. Every round trip appends the same batch again.
type RawProduce struct {
	conn    net.Conn
	request []byte // the whole frame
	buf     []byte // the answer's payload
	answer  wire.ProduceResponse
}

// rawProduceFrameBytesMax bounds an answer's frame: a one-partition produce answer is tens
// of bytes; anything near this is a broken stream.
const rawProduceFrameBytesMax = 1 << 20

// DialRawProduce asks the broker behind c (at brokerAddr) where topic's partition lives and
// connects to that shard's address (brokerAddr when the shard shares the broker's
// listener).
func DialRawProduce(ctx context.Context, c *client.Client, brokerAddr, topic string, partition int32, value []byte) (*RawProduce, error) {
	var meta wire.MetadataResponse
	if err := c.Call(ctx, brokerAddr, &wire.MetadataRequest{Topics: []string{topic}}, &meta); err != nil {
		return nil, fmt.Errorf("raw produce: metadata: %w", err)
	}
	addr, err := shardAddress(&meta, brokerAddr, topic, partition)
	if err != nil {
		return nil, fmt.Errorf("raw produce: %w", err)
	}
	b := batch.NewBuilder(batch.BuilderOptions{})
	b.Append(time.Now().UnixMilli(), nil, value, nil)
	records, err := b.Build(nil)
	if err != nil {
		return nil, fmt.Errorf("raw produce: %w", err)
	}
	req := &wire.ProduceRequest{Acks: wire.AcksLeader, TimeoutMs: 30_000, Topics: []wire.ProduceTopic{{
		Topic: topic, Partitions: []wire.ProducePartition{{Partition: partition, Records: records}},
	}}}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("raw produce: %w", err)
	}
	return &RawProduce{conn: conn, request: wire.AppendRequest(nil, 1, req)}, nil
}

// shardAddress is the address meta gives for topic's partition.
func shardAddress(meta *wire.MetadataResponse, brokerAddr, topic string, partition int32) (string, error) {
	for _, t := range meta.Topics {
		if t.Topic != topic {
			continue
		}
		if t.ErrorCode != wire.ErrNone {
			return "", fmt.Errorf("metadata of %s: error %d", topic, t.ErrorCode)
		}
		for _, p := range t.Partitions {
			if p.Partition != partition {
				continue
			}
			for _, s := range meta.Shards {
				if s.Shard == p.Shard && s.Address != "" {
					return s.Address, nil
				}
			}
			return brokerAddr, nil
		}
	}
	return "", fmt.Errorf("metadata names no %s/%d", topic, partition)
}

// Run does count produce round trips and records each into lat. It stops early when ctx
// is done.
func (p *RawProduce) Run(ctx context.Context, count int, lat *bench.Latency) error {
	for i := range count {
		if i%1024 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		start := time.Now()
		if _, err := p.conn.Write(p.request); err != nil {
			return fmt.Errorf("raw produce: %w", err)
		}
		h, payload, buf, err := wire.ReadResponse(p.conn, p.buf, rawProduceFrameBytesMax)
		p.buf = buf
		if err != nil {
			return fmt.Errorf("raw produce: %w", err)
		}
		lat.Record(time.Since(start))
		if err := p.check(h, payload); err != nil {
			return err
		}
	}
	return nil
}

// check fails on an error answer, outside the timed part of the round trip.
func (p *RawProduce) check(h wire.ResponseHeader, payload []byte) error {
	if h.ErrorCode != wire.ErrNone {
		return fmt.Errorf("raw produce: answer error %d", h.ErrorCode)
	}
	if err := p.answer.ReadFrom(payload); err != nil {
		return fmt.Errorf("raw produce: answer: %w", err)
	}
	for _, t := range p.answer.Topics {
		for _, part := range t.Partitions {
			if part.ErrorCode != wire.ErrNone {
				return fmt.Errorf("raw produce: %s/%d: error %d %s", t.Topic, part.Partition, part.ErrorCode, part.ErrorMessage)
			}
		}
	}
	return nil
}

// Close closes the connection.
func (p *RawProduce) Close() error { return p.conn.Close() }
