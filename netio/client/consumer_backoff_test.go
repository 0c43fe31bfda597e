package client_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/ringlog/ringlog/netio/client"
	"github.com/ringlog/ringlog/netio/wire"
)

// TestConsumerBacksOffOnRetriableErrors: while a partition's fetches fail with
// STORAGE_ERROR the consumer waits between attempts (exponentially, with jitter), does not
// refresh metadata on every loop, logs what it waits for, and reads on once the error
// clears. Issue 10 item 11: it used to spin at 85 % CPU refreshing metadata.
func TestConsumerBacksOffOnRetriableErrors(t *testing.T) {
	e := start(t, 1)
	ctx := ctxT(t)
	if err := e.client.CreateTopic(ctx, "flaky", 1, nil); err != nil {
		t.Fatal(err)
	}
	p := e.client.NewProducer(client.ProducerConfig{Acks: client.AckLeader})
	defer p.Close(ctx)
	if _, err := p.SendSync(ctx, &client.Record{Topic: "flaky", Partition: 0, Value: []byte("v")}); err != nil {
		t.Fatal(err)
	}
	const failures = 8
	e.fake.InjectFetchError("flaky", 0, wire.ErrStorage, failures)

	var logged bytes.Buffer
	co := e.client.NewConsumer(client.ConsumerConfig{MaxWait: time.Hour, Logger: slog.New(slog.NewTextHandler(&logged, nil))})
	now := time.Unix(1_800_000_000, 0)
	var waits []time.Duration
	client.SetConsumerClock(co,
		func() time.Time { return now },
		func(_ context.Context, d time.Duration) { waits = append(waits, d); now = now.Add(d) },
		func(n int64) int64 { return n - 1 }) // the top of each jitter range
	co.Assign("flaky", 0, client.AtOffset(0))

	metadataBefore := e.fake.MetadataRequests()
	fetchesBefore := e.fake.FetchRequests()
	var got []client.ConsumedRecord
	for polls := 0; len(got) == 0; polls++ {
		if polls > 100 {
			t.Fatalf("no record after %d polls", polls)
		}
		recs, err := co.Poll(ctx)
		if err != nil {
			t.Fatalf("poll: %v", err)
		}
		got = append(got, recs...)
	}
	if fetches := e.fake.FetchRequests() - fetchesBefore; fetches != failures+1 {
		t.Errorf("%d fetches for %d failures: want one per back-off", fetches, failures)
	}
	if refreshed := e.fake.MetadataRequests() - metadataBefore; refreshed > 0 {
		t.Errorf("metadata refreshed %d times for a STORAGE_ERROR", refreshed)
	}
	if len(waits) != failures {
		t.Fatalf("waited %d times, want %d: %v", len(waits), failures, waits)
	}
	for i, w := range waits {
		ceiling := min(20*time.Millisecond<<i, 2*time.Second)
		if w < ceiling/2 || w > ceiling {
			t.Errorf("wait %d = %v, want within [%v, %v]", i, w, ceiling/2, ceiling)
		}
	}
	if !strings.Contains(logged.String(), "error=STORAGE_ERROR") || !strings.Contains(logged.String(), "retry_in=") {
		t.Errorf("back-off not logged with its reason and wait:\n%s", logged.String())
	}
}

// TestConsumerReturnsCorruptMessage: a fetch answered CORRUPT_MESSAGE (a stored batch the
// broker found unreadable) is returned to the caller at once with the offset, not retried.
func TestConsumerReturnsCorruptMessage(t *testing.T) {
	e := start(t, 1)
	ctx := ctxT(t)
	if err := e.client.CreateTopic(ctx, "rotten", 1, nil); err != nil {
		t.Fatal(err)
	}
	e.fake.InjectFetchError("rotten", 0, wire.ErrCorruptMessage, 1)
	co := e.client.NewConsumer(client.ConsumerConfig{MaxWait: time.Millisecond})
	co.Assign("rotten", 0, client.AtOffset(0))
	_, err := co.Poll(ctx)
	if !errors.Is(err, wire.ErrCorruptMessage) || !strings.Contains(err.Error(), "at offset 0") {
		t.Fatalf("poll: %v, want CORRUPT_MESSAGE at offset 0", err)
	}
}
