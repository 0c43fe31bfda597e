package netio_test

import (
	"context"
	"encoding/binary"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ringlog/ringlog/engine/batch"
	"github.com/ringlog/ringlog/netio/internal/brokertest"
	"github.com/ringlog/ringlog/netio/wire"
)

// poisonBatch is a one-record batch whose records bytes are garbage under a correct CRC.
func poisonBatch(t *testing.T) []byte {
	t.Helper()
	b := batch.NewBuilder(batch.BuilderOptions{})
	b.Append(1, []byte("k"), []byte("value"), nil)
	out, err := b.Build(nil)
	if err != nil {
		t.Fatal(err)
	}
	out[batch.HeaderSize] = 0x7f // record length 63: runs past the batch
	binary.BigEndian.PutUint32(out[17:], batch.Checksum(out))
	return out
}

// TestBrokerRefusesWhatItCannotServe: requests a consumer could not read back, or that
// name values out of range, are refused with the right code and leave nothing behind.
func TestBrokerRefusesWhatItCannotServe(t *testing.T) {
	rb := brokertest.Start(t, brokertest.Options{})
	c := rb.Client
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := c.CreateTopic(ctx, "checked", 1, nil); err != nil {
		t.Fatal(err)
	}

	t.Run("poison pill produce", func(t *testing.T) {
		var resp wire.ProduceResponse
		req := &wire.ProduceRequest{Acks: 1, Topics: []wire.ProduceTopic{{Topic: "checked", Partitions: []wire.ProducePartition{{Partition: 0, Records: poisonBatch(t)}}}}}
		if err := c.Call(ctx, rb.Addr, req, &resp); err != nil {
			t.Fatal(err)
		}
		p := resp.Topics[0].Partitions[0]
		if p.ErrorCode != wire.ErrCorruptMessage || !strings.Contains(p.ErrorMessage, "record 0") {
			t.Fatalf("produce of a poison pill: %s %q", p.ErrorCode.Name(), p.ErrorMessage)
		}
		if _, states, _ := rb.Core.DescribeTopic("checked"); states[0].LogEndOffset != 0 {
			t.Fatalf("the poison pill moved the log end to %d", states[0].LogEndOffset)
		}
	})

	create := func(name string, replication int16, configs ...wire.ConfigEntry) wire.TopicResult {
		t.Helper()
		var resp wire.CreateTopicsResponse
		req := &wire.CreateTopicsRequest{Topics: []wire.CreateTopic{{Topic: name, Partitions: 1, ReplicationFactor: replication, Configs: configs}}}
		if err := c.Call(ctx, rb.Addr, req, &resp); err != nil {
			t.Fatal(err)
		}
		return resp.Topics[0]
	}
	createCases := []struct {
		name        string
		topic       string
		replication int16
		configs     []wire.ConfigEntry
		want        wire.ErrorCode
		detail      string
	}{
		{"replication factor 0", "r0", 0, nil, wire.ErrInvalidReplication, "want 1, or -1"},
		{"replication factor -2", "r2", -2, nil, wire.ErrInvalidReplication, "want 1, or -1"},
		{"replication factor -1 is the default", "rdefault", -1, nil, wire.ErrNone, ""},
		{"negative flush.messages", "fm", 1, []wire.ConfigEntry{{Key: "flush.messages", Value: "-1"}}, wire.ErrInvalidConfig, "flush.messages -1"},
		{"negative retention.ms", "rm", 1, []wire.ConfigEntry{{Key: "retention.ms", Value: "-5"}}, wire.ErrInvalidConfig, "retention.ms -5"},
		{"negative retention.bytes", "rb", 1, []wire.ConfigEntry{{Key: "retention.bytes", Value: "-9"}}, wire.ErrInvalidConfig, "retention.bytes -9"},
		{"segment.ms=1", "sm", 1, []wire.ConfigEntry{{Key: "segment.ms", Value: "1"}}, wire.ErrInvalidConfig, "segment.ms 1"},
		{"non-ASCII name", "tópico", 1, nil, wire.ErrInvalidTopic, "'ó' (U+00F3) at byte 1"},
	}
	for _, tc := range createCases {
		t.Run(tc.name, func(t *testing.T) {
			res := create(tc.topic, tc.replication, tc.configs...)
			if res.ErrorCode != tc.want || !strings.Contains(res.ErrorMessage, tc.detail) {
				t.Fatalf("create %s: %s %q, want %s containing %q", tc.topic, res.ErrorCode.Name(), res.ErrorMessage, tc.want.Name(), tc.detail)
			}
		})
	}

	t.Run("unknown AlterConfigs op", func(t *testing.T) {
		var resp wire.AlterConfigsResponse
		req := &wire.AlterConfigsRequest{Topics: []wire.AlterConfigsTopic{{Topic: "checked", Configs: []wire.AlterConfig{
			{Key: "retention.ms", Op: wire.AlterConfigSet, Value: "1000"},
			{Key: "retention.bytes", Op: 7, Value: "1"},
		}}}}
		if err := c.Call(ctx, rb.Addr, req, &resp); err != nil {
			t.Fatal(err)
		}
		if r := resp.Topics[0]; r.ErrorCode != wire.ErrInvalidConfig || !strings.Contains(r.ErrorMessage, "operation 7 unknown") {
			t.Fatalf("unknown op: %s %q", r.ErrorCode.Name(), r.ErrorMessage)
		}
		if cfg := rb.Core.Topic("checked").Config; cfg["retention.ms"] != "" {
			t.Fatalf("a refused alter applied part of itself: %v", cfg)
		}
	})

	t.Run("isolation level", func(t *testing.T) {
		var resp wire.FetchResponse
		req := &wire.FetchRequest{Isolation: 1, Topics: []wire.FetchTopic{{Topic: "checked", Partitions: []wire.FetchPartition{{Partition: 0, MaxBytes: 1 << 10}}}}}
		err := c.Call(ctx, rb.Addr, req, &resp)
		if !errors.Is(err, wire.ErrInvalidRequest) {
			t.Fatalf("fetch with isolation 1: %v", err)
		}
	})
}
