package netio_test

import (
	"context"
	"testing"
	"time"

	"github.com/ringlog/ringlog/netio/internal/brokertest"
	"github.com/ringlog/ringlog/netio/wire"
)

// TestAdminTimeoutZero: CreateTopics, DeleteTopics and AlterConfigs at version 1 with
// timeout_ms <= 0 are answered REQUEST_TIMED_OUT for every topic and change nothing,
// validate_only included: what Kafka's KRaft controller answers, and the Kafka listener
// (netio/kafka TestAdminTimeoutZero). Before, the ringlog listener read 0 as its 30 s
// default and did the work. Version 0 keeps that meaning for the clients written to it,
// and the bundled client sends version 1 with a real timeout.
func TestAdminTimeoutZero(t *testing.T) {
	b := brokertest.Start(t, brokertest.Options{})
	c := b.Client
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	call := func(what string, req, resp wire.Message) {
		t.Helper()
		if err := c.Call(ctx, b.Addr, req, resp); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	want := func(what string, got []wire.TopicResult, n int, code wire.ErrorCode) {
		t.Helper()
		if len(got) != n {
			t.Fatalf("%s: %d results, want %d: %+v", what, len(got), n, got)
		}
		for _, r := range got {
			if r.ErrorCode != code {
				t.Fatalf("%s: topic %s answered %s %q, want %s", what, r.Topic, r.ErrorCode.Name(), r.ErrorMessage, code.Name())
			}
		}
	}
	retention := func(topic string) string {
		t.Helper()
		tp := b.Core.Topic(topic)
		if tp == nil {
			t.Fatalf("topic %s does not exist", topic)
		}
		return tp.Config["retention.ms"]
	}
	if err := c.CreateTopic(ctx, "kept", 1, nil); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name         string
		timeoutMs    int32
		validateOnly bool
	}{{"zero", 0, false}, {"negative", -1, false}, {"zero validate-only", 0, true}} {
		var resp wire.CreateTopicsResponse
		call("create "+tc.name, &wire.CreateTopicsRequest{Version: 1, TimeoutMs: tc.timeoutMs, ValidateOnly: tc.validateOnly,
			Topics: []wire.CreateTopic{{Topic: "never-a", Partitions: 1, ReplicationFactor: 1}, {Topic: "never-b", Partitions: 1, ReplicationFactor: 1}}}, &resp)
		want("create "+tc.name, resp.Topics, 2, wire.ErrRequestTimedOut)
		for _, name := range []string{"never-a", "never-b"} {
			if b.Core.Topic(name) != nil {
				t.Fatalf("create %s: topic %s was created", tc.name, name)
			}
		}
	}
	var del wire.DeleteTopicsResponse
	call("delete", &wire.DeleteTopicsRequest{Version: 1, Topics: []string{"kept"}}, &del)
	want("delete", del.Topics, 1, wire.ErrRequestTimedOut)
	var alter wire.AlterConfigsResponse
	call("alter", &wire.AlterConfigsRequest{Version: 1, Topics: []wire.AlterConfigsTopic{{Topic: "kept",
		Configs: []wire.AlterConfig{{Key: "retention.ms", Op: wire.AlterConfigSet, Value: "1234567"}}}}}, &alter)
	want("alter", alter.Topics, 1, wire.ErrRequestTimedOut)
	if got := retention("kept"); got != "" {
		t.Fatalf("AlterConfigs with timeout_ms 0 set retention.ms=%s", got)
	}

	// Version 0: 0 is the broker's own wait, as its clients were told.
	var create0 wire.CreateTopicsResponse
	call("create v0", &wire.CreateTopicsRequest{Topics: []wire.CreateTopic{{Topic: "old-client", Partitions: 1, ReplicationFactor: 1}}}, &create0)
	want("create v0", create0.Topics, 1, wire.ErrNone)
	var alter0 wire.AlterConfigsResponse
	call("alter v0", &wire.AlterConfigsRequest{Topics: []wire.AlterConfigsTopic{{Topic: "old-client",
		Configs: []wire.AlterConfig{{Key: "retention.ms", Op: wire.AlterConfigSet, Value: "1234567"}}}}}, &alter0)
	want("alter v0", alter0.Topics, 1, wire.ErrNone)
	if got := retention("old-client"); got != "1234567" {
		t.Fatalf("AlterConfigs v0: retention.ms=%q", got)
	}
	var del0 wire.DeleteTopicsResponse
	call("delete v0", &wire.DeleteTopicsRequest{Topics: []string{"old-client"}}, &del0)
	want("delete v0", del0.Topics, 1, wire.ErrNone)

	// Version 1 with time to wait does the work; the bundled client sends it so.
	if err := c.AlterConfigs(ctx, "kept", map[string]string{"retention.ms": "7654321"}, nil); err != nil {
		t.Fatal(err)
	}
	if got := retention("kept"); got != "7654321" {
		t.Fatalf("the client's AlterConfigs: retention.ms=%q", got)
	}
	if err := c.DeleteTopic(ctx, "kept"); err != nil {
		t.Fatal(err)
	}
	if b.Core.Topic("kept") != nil {
		t.Fatal("the client's DeleteTopic left the topic")
	}
}
