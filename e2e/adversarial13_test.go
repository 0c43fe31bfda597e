package e2e

import (
	"errors"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ringlog/ringlog/engine/batch"
	"github.com/ringlog/ringlog/netio/wire"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Session 13's hostile clients (the adversarial suite, adversarial_test.go): names repeated
// in the Kafka listener's admin APIs, produces that ask for no time, a huge OffsetCommit.

// adminRepeats is how often a hostile admin request names one thing: under the default
// --max-request-entries (10,000), so the requests reach their handlers.
const adminRepeats = 9000

// DescribeConfigs answered a resource once per copy: a 90 KB request naming one topic
// 9,000 times got the same ~17 config keys 9,000 times, a 4.6 MB answer. CreateTopics,
// DeleteTopics and CreatePartitions acted on every copy (9,000 creates or deletes of one
// name, each waiting for every shard). Now DescribeConfigs describes each resource once,
// and the other three answer a repeated name once with INVALID_REQUEST "Duplicate topic
// name." and do nothing with it, as Kafka's KRaft controller (ControllerApis) answers.
func TestAdversarialKafkaRepeatedAdminNames(t *testing.T) {
	kafkaAddr := freeAddr(t)
	b := startCapped(t, 4096, "--kafka-listen", kafkaAddr)
	ctx := testContext(t, 2*time.Minute)
	if err := b.client(t).CreateTopic(ctx, "victim", 4, nil); err != nil {
		t.Fatal(err)
	}
	pr := newProbe(t, b)
	k := dialKafka(t, attacker, kafkaAddr)

	describe := kmsg.NewPtrDescribeConfigsRequest()
	describe.Version = 4
	for range adminRepeats {
		res := kmsg.NewDescribeConfigsRequestResource()
		res.ResourceType, res.ResourceName = kmsg.ConfigResourceTypeTopic, "victim"
		describe.Resources = append(describe.Resources, res)
	}
	requestBytes := k.send(describe)
	resp, size := k.receive(describe)
	described := resp.(*kmsg.DescribeConfigsResponse)
	t.Logf("describe configs naming a topic %d times (%d-byte request): %d resources, %d bytes", adminRepeats, requestBytes, len(described.Resources), size)
	if len(described.Resources) != 1 || described.Resources[0].ErrorCode != 0 || len(described.Resources[0].Configs) == 0 {
		t.Errorf("describe configs: %d resources, want the topic once with its configs", len(described.Resources))
	}
	if size > 64<<10 {
		t.Errorf("describe configs response of %d bytes", size)
	}

	create := kmsg.NewPtrCreateTopicsRequest()
	create.Version, create.TimeoutMillis = 4, 30000
	for range adminRepeats {
		ct := kmsg.NewCreateTopicsRequestTopic()
		ct.Topic, ct.NumPartitions, ct.ReplicationFactor = "twice", 1, 1
		create.Topics = append(create.Topics, ct)
	}
	unique := kmsg.NewCreateTopicsRequestTopic()
	unique.Topic, unique.NumPartitions, unique.ReplicationFactor = "once", 1, 1
	create.Topics = append(create.Topics, unique)
	created := k.roundTrip(create).(*kmsg.CreateTopicsResponse)
	expectDuplicateAnswer(t, "create topics", len(created.Topics), func(i int) (string, int16) {
		return created.Topics[i].Topic, created.Topics[i].ErrorCode
	})
	if got := topicNames(t, b); !got["once"] || got["twice"] {
		t.Errorf("after create topics: topics %v, want once and not twice", got)
	}

	del := kmsg.NewPtrDeleteTopicsRequest()
	del.Version, del.TimeoutMillis = 4, 30000
	for range adminRepeats {
		del.TopicNames = append(del.TopicNames, "victim")
	}
	del.TopicNames = append(del.TopicNames, "once")
	deleted := k.roundTrip(del).(*kmsg.DeleteTopicsResponse)
	expectDuplicateAnswer(t, "delete topics", len(deleted.Topics), func(i int) (string, int16) {
		return *deleted.Topics[i].Topic, deleted.Topics[i].ErrorCode
	})
	if got := topicNames(t, b); !got["victim"] || got["once"] {
		t.Errorf("after delete topics: topics %v, want victim and not once", got)
	}

	grow := kmsg.NewPtrCreatePartitionsRequest()
	grow.Version, grow.TimeoutMillis = 1, 30000
	for range adminRepeats {
		gt := kmsg.NewCreatePartitionsRequestTopic()
		gt.Topic, gt.Count = "victim", 8
		grow.Topics = append(grow.Topics, gt)
	}
	grown := k.roundTrip(grow).(*kmsg.CreatePartitionsResponse)
	if len(grown.Topics) != 1 || grown.Topics[0].ErrorCode != kerr.InvalidRequest.Code || grown.Topics[0].ErrorMessage == nil || *grown.Topics[0].ErrorMessage != "Duplicate topic name." {
		t.Errorf("create partitions naming a topic %d times: %d answers, want one INVALID_REQUEST", adminRepeats, len(grown.Topics))
	}
	pr.expectFast("after repeated admin names on the Kafka listener")
	expectSurvived(t, b, probeTopic, "victim")
}

// expectDuplicateAnswer checks an admin answer to adminRepeats copies of one name and one
// other name: two entries, the repeated name's INVALID_REQUEST and the other's success.
func expectDuplicateAnswer(t *testing.T, what string, n int, entry func(int) (string, int16)) {
	t.Helper()
	if n != 2 {
		t.Errorf("%s naming a topic %d times and another once: %d answers, want 2", what, adminRepeats, n)
		return
	}
	dupName, dupCode := entry(0)
	otherName, otherCode := entry(1)
	if dupCode != kerr.InvalidRequest.Code || otherCode != 0 {
		t.Errorf("%s: %s answered %d (want %d), %s answered %d (want 0)", what, dupName, dupCode, kerr.InvalidRequest.Code, otherName, otherCode)
	}
}

// topicNames lists the broker's topics over the ringlog protocol.
func topicNames(t *testing.T, b *broker) map[string]bool {
	t.Helper()
	ctx := testContext(t, rawTimeout)
	described, err := b.client(t).DescribeTopics(ctx)
	if err != nil {
		t.Fatalf("describe topics: %v", err)
	}
	names := map[string]bool{}
	for _, d := range described {
		if d.ErrorCode == 0 {
			names[d.Topic] = true
		}
	}
	return names
}

// An acks=all produce with timeout_ms 0 to a replicated partition whose followers are
// frozen (SIGSTOP, both: the controller has no quorum, so the ISR cannot shrink) waited for
// replication without a limit on both listeners. Kafka's DelayedProduce expires at once
// with timeout 0: the partitions not replicated yet answer REQUEST_TIMED_OUT. Both
// listeners now do so, while the records stay appended.
func TestProduceTimeoutZeroAnsweredAtOnce(t *testing.T) {
	tc, kafkaAddrs := startKafkaCluster(t, 3)
	ctx := testContext(t, 3*time.Minute)
	tc.createReplicated(ctx, "zero", nil)
	if _, err := tc.produce(ctx, "zero", wire.AcksAll, []byte("before")); err != nil {
		t.Fatal(err)
	}
	leader := tc.leader("zero")
	for _, f := range tc.followers(leader) {
		f.signal(t, syscall.SIGSTOP)
		defer f.signal(t, syscall.SIGCONT)
	}
	b := batch.NewBuilder(batch.BuilderOptions{})
	b.Append(time.Now().UnixMilli(), nil, []byte("zero"), nil)
	records, err := b.Build(nil)
	if err != nil {
		t.Fatal(err)
	}
	const answerMax = 5 * time.Second

	// The ringlog listener.
	conn, err := net.DialTimeout("tcp", leader.addr, answerMax)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(answerMax))
	req := &wire.ProduceRequest{Acks: wire.AcksAll, TimeoutMs: 0, Topics: []wire.ProduceTopic{{Topic: "zero", Partitions: []wire.ProducePartition{{Partition: 0, Records: records}}}}}
	start := time.Now()
	if _, err := conn.Write(wire.AppendRequest(nil, 1, req)); err != nil {
		t.Fatal(err)
	}
	_, payload, _, err := wire.ReadResponse(conn, nil, wire.FrameBytesMaxDefault)
	if err != nil {
		t.Fatalf("ringlog listener: acks=all, timeout_ms 0, followers frozen: no answer within %v: %v", answerMax, err)
	}
	var resp wire.ProduceResponse
	if err := resp.ReadFrom(payload); err != nil {
		t.Fatal(err)
	}
	if got := resp.Topics[0].Partitions[0]; got.ErrorCode != wire.ErrRequestTimedOut {
		t.Errorf("ringlog listener: %s %q, want REQUEST_TIMED_OUT", got.ErrorCode.Name(), got.ErrorMessage)
	}
	t.Logf("ringlog listener answered in %v: %s", time.Since(start).Round(time.Millisecond), resp.Topics[0].Partitions[0].ErrorMessage)

	// The Kafka listener.
	k := dialKafka(t, "127.0.0.1", kafkaAddrs[tc.idOf(leader)-1])
	produce := kmsg.NewPtrProduceRequest()
	produce.Version, produce.Acks, produce.TimeoutMillis = 7, -1, 0
	pt := kmsg.NewProduceRequestTopic()
	pt.Topic = "zero"
	pp := kmsg.NewProduceRequestTopicPartition()
	pp.Partition, pp.Records = 0, records
	pt.Partitions = append(pt.Partitions, pp)
	produce.Topics = append(produce.Topics, pt)
	start = time.Now()
	k.send(produce)
	kresp, _, err := k.tryReceive(produce)
	if err != nil {
		t.Fatalf("Kafka listener: acks=all, timeout_ms 0, followers frozen: no answer: %v", err)
	}
	got := kresp.(*kmsg.ProduceResponse).Topics[0].Partitions[0]
	if got.ErrorCode != kerr.RequestTimedOut.Code {
		t.Errorf("Kafka listener: code %d, want REQUEST_TIMED_OUT", got.ErrorCode)
	}
	t.Logf("Kafka listener answered in %v", time.Since(start).Round(time.Millisecond))
}

// An OffsetCommit of 9,000 partitions with 1 KiB of metadata each (a 9 MB frame, within
// the default frame and entry limits) once got no answer within 20 s under heavy load
// (docs/benchmarks.md). Here: four such commits, each to a new group, on both network
// drivers, with the default frame timeout (30 s) and the adversarial suite's 3 s, on
// whatever load the machine has. Each must be answered or the connection closed (a frame
// that does not arrive within the frame timeout); the time of each is logged.
func TestAdversarialOffsetCommitHuge(t *testing.T) {
	metadata := string(make([]byte, 1024))
	parts := make([]wire.OffsetCommitPartition, adminRepeats)
	for i := range parts {
		parts[i] = wire.OffsetCommitPartition{Partition: int32(i), Offset: 1, LeaderEpoch: -1, Metadata: metadata}
	}
	for _, drv := range netDrivers {
		for _, frameTimeout := range []string{"30s", "3s"} {
			t.Run(drv+"/frame-timeout="+frameTimeout, func(t *testing.T) {
				b := startCapped(t, 1024, "--net", drv, "--frame-timeout", frameTimeout)
				pr := newProbe(t, b)
				for i := range uint32(4) {
					r := mustDialFrom(t, attacker, b.addr)
					req := &wire.OffsetCommitRequest{Group: "huge-" + strconv.Itoa(int(i)), Generation: -1, Topics: []wire.OffsetCommitTopic{{Topic: "any", Partitions: parts}}}
					frame := wire.AppendRequest(nil, i, req)
					start := time.Now()
					r.conn.SetDeadline(time.Now().Add(rawTimeout))
					_, werr := r.conn.Write(frame)
					h, payload, _, rerr := wire.ReadResponse(r.conn, nil, wire.FrameBytesMaxDefault)
					took := time.Since(start).Round(time.Millisecond)
					var resp wire.OffsetCommitResponse
					switch {
					case rerr == nil && h.ErrorCode == wire.ErrNone && resp.ReadFrom(payload) == nil && len(resp.Topics) == 1:
						t.Logf("commit %d (%d bytes): answered %s in %v (load %s)", i, len(frame), resp.Topics[0].Partitions[0].ErrorCode.Name(), took, loadavg())
					case rerr != nil && !isTimeout(rerr):
						t.Logf("commit %d (%d bytes): connection closed after %v (write: %v, read: %v; load %s)", i, len(frame), took, werr, rerr, loadavg())
					default:
						t.Errorf("commit %d (%d bytes): no answer within %v (write: %v, read: %v, frame error %s; load %s)", i, len(frame), took, werr, rerr, h.ErrorCode.Name(), loadavg())
					}
				}
				pr.expectFast("after 9 MB offset commits")
				expectSurvived(t, b, probeTopic)
			})
		}
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Join(strings.Fields(string(b))[:3], " ")
}
