package kafka_test

import (
	"testing"

	"github.com/ringlog/ringlog/netio/internal/brokertest"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestAdminTimeoutZero: CreateTopics, DeleteTopics and CreatePartitions with timeout_ms <= 0
// answer REQUEST_TIMED_OUT for every topic and change nothing, validate_only included — what
// Kafka's KRaft controller answers (the deadline now + timeout_ms has passed when its event
// queue reaches the request, so the event completes with a TimeoutException unrun). Before,
// ringlog read 0 as "the default wait" and created or deleted the topic.
func TestAdminTimeoutZero(t *testing.T) {
	b := startKafka(t, brokertest.Options{})
	cl := newClient(t, b)
	ctx := testContext(t)
	createTopic(t, cl, "kept", 1)

	for _, tc := range []struct {
		name         string
		timeoutMs    int32
		validateOnly bool
	}{{"zero", 0, false}, {"negative", -1, false}, {"zero validate-only", 0, true}} {
		req := kmsg.NewPtrCreateTopicsRequest()
		req.TimeoutMillis, req.ValidateOnly = tc.timeoutMs, tc.validateOnly
		for _, name := range []string{"never-a", "never-b"} {
			rt := kmsg.NewCreateTopicsRequestTopic()
			rt.Topic, rt.NumPartitions, rt.ReplicationFactor = name, 1, 1
			req.Topics = append(req.Topics, rt)
		}
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			t.Fatalf("create (%s): %v", tc.name, err)
		}
		if len(resp.Topics) != 2 {
			t.Fatalf("create (%s): %d results, want 2", tc.name, len(resp.Topics))
		}
		for _, rt := range resp.Topics {
			wantCode(t, "create "+rt.Topic+" ("+tc.name+")", rt.ErrorCode, kerr.RequestTimedOut.Code)
			if b.Core.Topic(rt.Topic) != nil {
				t.Fatalf("create (%s): topic %s was created", tc.name, rt.Topic)
			}
		}
	}

	del := kmsg.NewPtrDeleteTopicsRequest()
	del.TimeoutMillis, del.TopicNames = 0, []string{"kept"}
	delResp, err := del.RequestWith(ctx, cl)
	if err != nil || len(delResp.Topics) != 1 {
		t.Fatalf("delete: %v %+v", err, delResp)
	}
	wantCode(t, "delete kept", delResp.Topics[0].ErrorCode, kerr.RequestTimedOut.Code)
	if b.Core.Topic("kept") == nil {
		t.Fatal("DeleteTopics with timeout_ms 0 deleted the topic")
	}

	cp := kmsg.NewPtrCreatePartitionsRequest()
	ct := kmsg.NewCreatePartitionsRequestTopic()
	ct.Topic, ct.Count = "kept", 2
	cp.TimeoutMillis, cp.Topics = 0, []kmsg.CreatePartitionsRequestTopic{ct}
	cpResp, err := cp.RequestWith(ctx, cl)
	if err != nil || len(cpResp.Topics) != 1 {
		t.Fatalf("create partitions: %v %+v", err, cpResp)
	}
	wantCode(t, "create partitions kept", cpResp.Topics[0].ErrorCode, kerr.RequestTimedOut.Code)

	// With time to wait, the same requests do their work.
	createTopic(t, cl, "never-a", 1)
	del.TimeoutMillis = 5000
	if delResp, err = del.RequestWith(ctx, cl); err != nil || delResp.Topics[0].ErrorCode != 0 || b.Core.Topic("kept") != nil {
		t.Fatalf("delete with a timeout: %v %+v", err, delResp)
	}
}
