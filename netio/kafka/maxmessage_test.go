package kafka_test

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/ringlog/ringlog/netio/internal/brokertest"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestKgoMaxMessageBytes: a topic created over CreateTopics with max.message.bytes (what
// franz-go's own suite does in TestClient_ProduceLargeMessages) keeps it, DescribeConfigs
// shows it as a topic setting, and a produced batch over it is refused with
// MESSAGE_TOO_LARGE while one under it is appended.
func TestKgoMaxMessageBytes(t *testing.T) {
	b := startKafka(t, brokertest.Options{})
	cl := newClient(t, b, kgo.ProducerBatchMaxBytes(1<<20), kgo.RecordRetries(0))
	ctx := testContext(t)
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = "capped", 1, 1
	rt.Configs = []kmsg.CreateTopicsRequestTopicConfig{{Name: "max.message.bytes", Value: kmsg.StringPtr("51200")}}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil || resp.Topics[0].ErrorCode != 0 {
		t.Fatalf("create with max.message.bytes: %v %+v", err, resp)
	}

	dc := kmsg.NewPtrDescribeConfigsRequest()
	res := kmsg.NewDescribeConfigsRequestResource()
	res.ResourceType, res.ResourceName, res.ConfigNames = kmsg.ConfigResourceTypeTopic, "capped", []string{"max.message.bytes"}
	dc.Resources = append(dc.Resources, res)
	dresp, err := dc.RequestWith(ctx, cl)
	if err != nil || len(dresp.Resources[0].Configs) != 1 {
		t.Fatalf("describe configs: %v %+v", err, dresp)
	}
	if c := dresp.Resources[0].Configs[0]; c.Value == nil || *c.Value != "51200" || c.Source != kmsg.ConfigSourceDynamicTopicConfig {
		t.Errorf("max.message.bytes described as %+v, want 51200 set on the topic", c)
	}

	// Random bytes: kgo compresses batches (snappy by default), and max.message.bytes counts
	// the batch as sent, compressed, as Kafka does.
	value := make([]byte, 60<<10)
	rand.NewChaCha8([32]byte{1}).Read(value)
	big := &kgo.Record{Topic: "capped", Value: value}
	if err := cl.ProduceSync(ctx, big).FirstErr(); !errors.Is(err, kerr.MessageTooLarge) {
		t.Fatalf("a 60 KiB record into max.message.bytes 51200: %v, want MESSAGE_TOO_LARGE", err)
	}
	small := &kgo.Record{Topic: "capped", Value: value[:40<<10]}
	if err := cl.ProduceSync(ctx, small).FirstErr(); err != nil {
		t.Fatalf("a 40 KiB record: %v", err)
	}
	if got := consume(t, b, "capped", 1); !bytes.Equal(got[0].Value, small.Value) {
		t.Fatalf("read back %d bytes, want the 40 KiB record", len(got[0].Value))
	}
}
