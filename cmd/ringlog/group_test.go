package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ringlog/ringlog/netio/client"
	"github.com/ringlog/ringlog/netio/wire"
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

	joinTestGroup(ctx, t, c, "g", "fresh", 2)

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

// TestGroupResetAndDelete: `group reset --to OFFSET` moves an offset outside a partition's
// [log start, log end] to the nearer end and says so, as Kafka's consumer-groups tool does
// (before, 5000 was committed as given, and the group's next consumer was refused
// OFFSET_OUT_OF_RANGE and reread the partition from its start); `group delete` of a group
// with members names them and what to do (before: "NON_EMPTY_GROUP: NON_EMPTY_GROUP").
func TestGroupResetAndDelete(t *testing.T) {
	addr, c, ctx := brokerWithTopic(t, "orders", 2)
	produceTestRecords(t, c, "orders", 0, 10)
	produceTestRecords(t, c, "orders", 1, 3)

	var out bytes.Buffer
	if err := groupReset("", []string{"g", "--topic", "orders", "--to", "5", "--broker", addr}, &out); err != nil {
		t.Fatalf("reset: %v\n%s", err, out.String())
	}
	for _, want := range []string{"group g orders/0 reset to 5\n", "group g orders/1 reset to 3 (asked 5: past the log end)\n"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("reset output lacks %q:\n%s", want, out.String())
		}
	}
	committed, err := c.FetchCommitted(ctx, "g")
	if err != nil {
		t.Fatal(err)
	}
	got := map[int32]int64{}
	for _, o := range committed {
		got[o.Partition] = o.Offset
	}
	if got[0] != 5 || got[1] != 3 {
		t.Errorf("committed %v, want orders/0 at 5 and orders/1 at its log end 3", got)
	}
	if err := groupReset("", []string{"g", "--topic", "orders", "--to", "x", "--broker", addr}, &out); err == nil || !strings.Contains(err.Error(), `--to "x": want earliest, latest, an OFFSET or @UNIX_MS`) {
		t.Errorf("reset --to x: %v", err)
	}

	joinTestGroup(ctx, t, c, "g", "orders", 2)
	err = groupDelete("", []string{"g", "--broker", addr}, &out)
	if !errors.Is(err, wire.ErrNonEmptyGroup) || !strings.Contains(err.Error(), "group g has 1 member (state ") || !strings.Contains(err.Error(), "stop its consumers first") {
		t.Errorf("delete of a group with a member: %v", err)
	}
}

// joinTestGroup makes a member of group that reads topic and polls until it is assigned
// the topic's partitions; the member leaves at the end of the test.
func joinTestGroup(ctx context.Context, t *testing.T, c *client.Client, group, topic string, partitions int) {
	t.Helper()
	gc, err := c.NewGroupConsumer(client.GroupConfig{Group: group, Consumer: client.ConsumerConfig{MaxWait: 50 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gc.Close(context.Background()) })
	gc.Subscribe(topic)
	for len(gc.Assignment()) < partitions {
		if _, err := gc.Poll(ctx); err != nil {
			t.Fatalf("poll: %v (assigned %v)", err, gc.Assignment())
		}
	}
}

// `consume --group G --from none` on a group without offsets says how to give it some (it
// said only "no committed offset and auto.offset.reset is none").
func TestConsumeGroupFromNone(t *testing.T) {
	addr, c, ctx := brokerWithTopic(t, "orders", 1)
	produceTestRecords(t, c, "orders", 0, 3)
	o, err := parseConsumeFlags([]string{"orders", "--group", "g", "--from", "none", "--max", "1", "--broker", addr})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	w := bufio.NewWriter(&out)
	_, err = consumeGroup(ctx, c, o, w)
	if !errors.Is(err, client.ErrNoCommittedOffset) || !strings.Contains(err.Error(), "ringlog group reset g --topic orders --to earliest|latest|OFFSET|@UNIX_MS") {
		t.Fatalf("consume --group --from none without offsets: %v", err)
	}
}

// brokerWithTopic starts a broker holding topic with the given partitions and returns its
// address, a client of it and a context that ends with the test (30 s at most).
func brokerWithTopic(t *testing.T, topic string, partitions int32) (string, *client.Client, context.Context) {
	t.Helper()
	addr := startBroker(t)
	c := dialTest(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	if err := c.CreateTopic(ctx, topic, partitions, nil); err != nil {
		t.Fatal(err)
	}
	return addr, c, ctx
}
