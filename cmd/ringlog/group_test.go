package main

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/ringlog/ringlog/netio/client"
)

// TestGroupDescribeEveryPartition: like Kafka's consumer-groups tool, `group describe`
// lists every partition of the topics the group has committed to (orders) or is
// assigned (fresh, where it has committed nothing); a partition without a committed
// offset shows "-" and lags by what it retains (log end - log start).
func TestGroupDescribeEveryPartition(t *testing.T) {
	addr := startBroker(t)
	c := dialTest(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for topic, n := range map[string]int32{"orders": 3, "fresh": 2} {
		if err := c.CreateTopic(ctx, topic, n, nil); err != nil {
			t.Fatal(err)
		}
	}
	produceTestRecords(t, c, "orders", 1, 10)
	produceTestRecords(t, c, "orders", 2, 5)
	produceTestRecords(t, c, "fresh", 0, 3)
	if err := c.CommitOffsets(ctx, "g", []client.CommittedOffset{{TopicPartition: client.TopicPartition{Topic: "orders", Partition: 1}, Offset: 4}}); err != nil {
		t.Fatal(err)
	}

	gc, err := c.NewGroupConsumer(client.GroupConfig{Group: "g", Consumer: client.ConsumerConfig{MaxWait: 50 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	defer gc.Close(context.Background())
	gc.Subscribe("fresh")
	for len(gc.Assignment()) < 2 {
		if _, err := gc.Poll(ctx); err != nil {
			t.Fatalf("poll: %v (assigned %v)", err, gc.Assignment())
		}
	}

	var out bytes.Buffer
	if err := groupDescribe("", []string{"g", "--broker", addr}, &out); err != nil {
		t.Fatalf("describe: %v\n%s", err, out.String())
	}
	for _, row := range []string{
		`fresh\s+0\s+-\s+3\s+3\s`, // assigned, nothing committed: lag = 3 - 0
		`fresh\s+1\s+-\s+0\s+0\s`,
		`orders\s+0\s+-\s+0\s+0\s`, // committed on a sibling partition only
		`orders\s+1\s+4\s+10\s+6\s`,
		`orders\s+2\s+-\s+5\s+5\s`,
	} {
		if !regexpMatch(`(?m)^\s*`+row, out.String()) {
			t.Errorf("describe: no row %q:\n%s", row, out.String())
		}
	}
}
