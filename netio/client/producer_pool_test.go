package client_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ringlog/ringlog/netio/client"
	"github.com/ringlog/ringlog/netio/internal/brokertest"
	"github.com/ringlog/ringlog/netio/wire"
)

// One collection of 120 partitions goes out in many requests of many topics each: past
// the producer's scans (more than 8 requests per collection, more than 8 topics per
// request, more than 16 results per response) its maps take over. Several rounds reuse
// the pooled requests, sealed batches and callback buffers: every record is acknowledged
// once, at the offset that follows its partition's previous one, and each log ends where
// its records do.
func TestProducerManyTopicsPerRequestPooled(t *testing.T) {
	br := brokertest.Start(t, brokertest.Options{Shards: 2, Driver: "net", ShardListeners: true})
	ctx := ctxT(t)
	const topics, partitions, rounds, perRound = 40, 3, 4, 1
	for i := range topics {
		if err := br.Client.CreateTopic(ctx, fmt.Sprint("many-", i), partitions, nil); err != nil {
			t.Fatal(err)
		}
	}
	for _, idempotent := range []bool{true, false} {
		t.Run(fmt.Sprint("idempotent=", idempotent), func(t *testing.T) {
			p := br.Client.NewProducer(client.ProducerConfig{
				Acks: client.AckLeader, DisableIdempotence: !idempotent,
				Linger: time.Hour, RequestBytesMax: 12 << 10, // Flush sends; ~11 batches fit a request
			})
			defer p.Close(context.Background())
			type tp struct {
				topic string
				part  int32
			}
			next := map[tp]int64{} // the offset expected next
			for i := range topics {
				for part := range partitions {
					key := tp{fmt.Sprint("many-", i), int32(part)}
					end, err := br.Client.ListOffset(ctx, key.topic, key.part, wire.TimestampLatest)
					if err != nil {
						t.Fatal(err)
					}
					next[key] = end
				}
			}
			value := make([]byte, 900)
			for round := range rounds {
				records := make([]client.Record, 0, topics*partitions*perRound)
				errs := make(chan error, cap(records))
				for range perRound {
					for i := range topics {
						for part := range partitions {
							records = append(records, client.Record{Topic: fmt.Sprint("many-", i), Partition: int32(part), Value: value})
						}
					}
				}
				for i := range records {
					if err := p.Send(ctx, &records[i], func(_ *client.Record, err error) { errs <- err }); err != nil {
						t.Fatal(err)
					}
				}
				if err := p.Flush(ctx); err != nil {
					t.Fatal(err)
				}
				close(errs)
				for err := range errs {
					if err != nil {
						t.Fatalf("round %d: %v", round, err)
					}
				}
				for _, r := range records { // in Send order: per partition, offsets follow
					key := tp{r.Topic, r.Partition}
					if r.Offset != next[key] {
						t.Fatalf("round %d: %s/%d got offset %d, want %d", round, key.topic, key.part, r.Offset, next[key])
					}
					next[key]++
				}
			}
			for key, want := range next {
				end, err := br.Client.ListOffset(ctx, key.topic, key.part, wire.TimestampLatest)
				if err != nil {
					t.Fatal(err)
				}
				if end != want {
					t.Fatalf("%s/%d ends at %d, want %d", key.topic, key.part, end, want)
				}
			}
		})
	}
}
