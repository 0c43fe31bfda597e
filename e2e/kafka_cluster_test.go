package e2e

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// A replicated cluster served over the Kafka protocol: three ringlogd processes, each with
// its own --kafka-listen, and franz-go's kgo (a Kafka client, not ours) as the client.

// startKafkaCluster starts n brokers with a Kafka listener each; kafkaAddrs[i] is node i+1's.
func startKafkaCluster(t *testing.T, n int) (*testCluster, []string) {
	t.Helper()
	addrs := make([]string, n)
	for i := range addrs {
		addrs[i] = freeAddr(t)
	}
	tc := startClusterWith(t, n, 0, func(id int) []string { return []string{"--kafka-listen", addrs[id-1]} })
	return tc, addrs
}

func newKgo(t *testing.T, seeds []string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(seeds...)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// kafkaPartition is partition of topic as the Metadata of a broker cl asks describes it;
// false while that broker does not know the topic (its controller voter may lag). A
// *kgo.Client sends each Metadata request to a broker of its choice (after the first
// answer, any it discovered): to ask one broker, pass cl.Broker(id).
func kafkaPartition(ctx context.Context, t *testing.T, cl kmsg.Requestor, topic string, partition int32) (*kmsg.MetadataResponse, kmsg.MetadataResponseTopicPartition, bool) {
	t.Helper()
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatalf("metadata: %v", err)
	}
	if len(resp.Topics) != 1 || resp.Topics[0].ErrorCode != 0 || int(partition) >= len(resp.Topics[0].Partitions) {
		return resp, kmsg.MetadataResponseTopicPartition{}, false
	}
	return resp, resp.Topics[0].Partitions[partition], true
}

// waitKafkaPartition polls Metadata until ok holds for the partition.
func waitKafkaPartition(ctx context.Context, t *testing.T, cl kmsg.Requestor, topic string, partition int32, what string, ok func(kmsg.MetadataResponseTopicPartition) bool) (*kmsg.MetadataResponse, kmsg.MetadataResponseTopicPartition) {
	t.Helper()
	for {
		resp, p, known := kafkaPartition(ctx, t, cl, topic, partition)
		if known && ok(p) {
			return resp, p
		}
		if ctx.Err() != nil {
			t.Fatalf("timed out waiting for %s: %+v", what, resp)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestKafkaClusterFailover: 3 brokers, an RF=3 topic with min.insync.replicas=2 created
// over CreateTopics, kgo producing keyed records with acks=all (idempotent) through one
// broker's Kafka listener. kill -9 the leader of partition 0 while records flow: kgo
// follows the new leader (NOT_LEADER_OR_FOLLOWER and Metadata), every acknowledged record
// reads back byte-identical at its offset, exactly once, and the new leader answers
// OffsetForLeaderEpoch from its epoch checkpoint with the epochs the records carry, with
// leader-epoch fencing on Fetch, ListOffsets and OffsetForLeaderEpoch.
func TestKafkaClusterFailover(t *testing.T) {
	tc, kafkaAddrs := startKafkaCluster(t, 3)
	ctx := testContext(t, 3*time.Minute)
	const topic, partitions = "kafka-orders", 3
	admin := newKgo(t, kafkaAddrs[:1])

	create := kmsg.NewPtrCreateTopicsRequest()
	ct := kmsg.NewCreateTopicsRequestTopic()
	ct.Topic, ct.NumPartitions, ct.ReplicationFactor = topic, partitions, 3
	ct.Configs = []kmsg.CreateTopicsRequestTopicConfig{{Name: "min.insync.replicas", Value: kmsg.StringPtr("2")}}
	create.Topics = append(create.Topics, ct)
	cresp, err := create.RequestWith(ctx, admin)
	if err != nil || cresp.Topics[0].ErrorCode != 0 || cresp.Topics[0].ReplicationFactor != 3 {
		t.Fatalf("CreateTopics RF=3: %v %+v", err, cresp)
	}
	md, p0 := waitKafkaPartition(ctx, t, admin, topic, 0, "a leader with a full ISR", func(p kmsg.MetadataResponseTopicPartition) bool {
		return p.Leader > 0 && len(p.ISR) == 3
	})
	// Metadata names every broker at its own Kafka address, and the controller.
	if len(md.Brokers) != 3 || md.ControllerID < 1 || md.ControllerID > 3 {
		t.Fatalf("metadata brokers %+v controller %d: want nodes 1-3 and a controller among them", md.Brokers, md.ControllerID)
	}
	for _, b := range md.Brokers {
		if want := kafkaAddrs[b.NodeID-1]; fmt.Sprintf("%s:%d", b.Host, b.Port) != want {
			t.Errorf("node %d advertised at %s:%d, want %s", b.NodeID, b.Host, b.Port, want)
		}
	}
	if len(p0.Replicas) != 3 || len(p0.OfflineReplicas) != 0 {
		t.Fatalf("partition 0: %+v", p0)
	}
	oldLeader, oldEpoch := p0.Leader, p0.LeaderEpoch
	for id := int32(1); id <= 3; id++ { // every broker's own metadata knows every partition's leader
		waitKafkaPartition(ctx, t, admin.Broker(int(id)), topic, partitions-1, "every partition led", func(p kmsg.MetadataResponseTopicPartition) bool { return p.Leader > 0 })
	}

	// A produce straight to a follower is refused with NOT_LEADER_OR_FOLLOWER, whether or
	// not its reconcile has opened its replica yet (TestTopicKnownButNotOpened). (CI once
	// saw UNKNOWN_TOPIC_OR_PARTITION here when the wait above asked whichever broker kgo
	// chose: the follower's controller voter had not applied the topic yet, and a broker
	// that does not know a topic answers so, as Kafka's does.)
	follower := int32(1 + oldLeader%3)
	if code := produceTo(ctx, t, admin, follower, topic, 0); code != kerr.NotLeaderForPartition.Code {
		t.Fatalf("produce to follower %d: code %d, want NOT_LEADER_OR_FOLLOWER", follower, code)
	}

	// Produce through the follower's listener (any broker will do), keyed, acks=all.
	producer := newKgo(t, kafkaAddrs[follower-1:follower], kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.DefaultProduceTopic(topic), kgo.RetryBackoffFn(func(int) time.Duration { return 100 * time.Millisecond }))
	type key struct {
		partition int32
		offset    int64
	}
	var (
		mu      sync.Mutex
		acked   = map[key]*kgo.Record{}
		failed  []error
		wg      sync.WaitGroup
		sent    int
		total   = 1500
		killAt  = 400
		started = time.Now()
	)
	for ; sent < total; sent++ {
		if sent == killAt {
			// Wait for the first records to be acknowledged, some of them on partition 0
			// (whose batches must show the leader change), then kill its leader.
			for {
				mu.Lock()
				n, p0 := len(acked), 0
				for k := range acked {
					if k.partition == 0 {
						p0++
					}
				}
				mu.Unlock()
				if n >= killAt/2 && p0 > 0 || ctx.Err() != nil {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			tc.node(oldLeader).kill()
		}
		r := &kgo.Record{Key: []byte(fmt.Sprintf("key-%d", sent%17)), Value: []byte(fmt.Sprintf("value-%06d-%s", sent, bytes.Repeat([]byte{'v'}, sent%64)))}
		wg.Add(1)
		producer.Produce(ctx, r, func(r *kgo.Record, err error) {
			defer wg.Done()
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failed = append(failed, err)
				return
			}
			acked[key{r.Partition, r.Offset}] = r
		})
	}
	wg.Wait()
	t.Logf("%d records produced with acks=all across a kill -9 of node %d in %v", total, oldLeader, time.Since(started).Round(time.Millisecond))
	if len(failed) > 0 {
		t.Fatalf("%d produces failed, first: %v", len(failed), failed[0])
	}
	if len(acked) != total {
		t.Fatalf("%d records acknowledged at distinct offsets, want %d", len(acked), total)
	}

	survivor := kafkaAddrs[follower-1]
	reader := newKgo(t, []string{survivor})
	_, p0 = waitKafkaPartition(ctx, t, reader, topic, 0, "a new leader without the killed broker in the ISR", func(p kmsg.MetadataResponseTopicPartition) bool {
		return p.Leader > 0 && p.Leader != oldLeader && !slices.Contains(p.ISR, oldLeader)
	})
	if !slices.Contains(p0.OfflineReplicas, oldLeader) || p0.LeaderEpoch <= oldEpoch {
		t.Errorf("after the kill, partition 0 %+v: want node %d offline and a leader epoch above %d", p0, oldLeader, oldEpoch)
	}

	// Every acknowledged record reads back byte-identical at its offset, once.
	consumer := newKgo(t, []string{survivor}, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(200*time.Millisecond))
	var byPartition [partitions][]*kgo.Record
	seen := map[key]bool{}
	values := map[string]int{}
	for len(seen) < total {
		fetches := consumer.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %d of %d records back", len(seen), total)
		}
		fetches.EachError(func(topic string, p int32, err error) { t.Logf("fetch %s/%d: %v (retried)", topic, p, err) })
		for _, r := range fetches.Records() {
			k := key{r.Partition, r.Offset}
			if seen[k] {
				continue
			}
			seen[k] = true
			values[string(r.Value)]++
			byPartition[r.Partition] = append(byPartition[r.Partition], r)
			want := acked[k]
			if want == nil {
				t.Fatalf("read %s/%d@%d %q, which no produce was acknowledged at", topic, r.Partition, r.Offset, r.Value)
			}
			if !bytes.Equal(want.Key, r.Key) || !bytes.Equal(want.Value, r.Value) {
				t.Fatalf("%s/%d@%d: read %q=%q, acknowledged %q=%q", topic, r.Partition, r.Offset, r.Key, r.Value, want.Key, want.Value)
			}
		}
	}
	for v, n := range values {
		if n != 1 {
			t.Fatalf("value %q read %d times", v, n)
		}
	}

	// OffsetForLeaderEpoch on the new leader agrees with the epochs the records carry:
	// an epoch ends where the next one's first record is, the latest at the log end.
	newLeader, newEpoch := p0.Leader, p0.LeaderEpoch
	records := byPartition[0]
	slices.SortFunc(records, func(a, b *kgo.Record) int { return int(a.Offset - b.Offset) })
	checked := 0
	for i := 1; i < len(records); i++ {
		prev, next := records[i-1].LeaderEpoch, records[i].LeaderEpoch
		if prev == next {
			continue
		}
		got := offsetForLeaderEpoch(ctx, t, reader, newLeader, topic, newEpoch, prev)
		if got.ErrorCode != 0 || got.LeaderEpoch != prev || got.EndOffset != records[i].Offset {
			t.Errorf("OffsetForLeaderEpoch(epoch %d) = %+v, want epoch %d ending at %d (the first record of epoch %d)", prev, got, prev, records[i].Offset, next)
		}
		checked++
	}
	if checked == 0 {
		t.Errorf("partition 0's records all carry epoch %d: the leader change did not show in the batches", records[0].LeaderEpoch)
	}
	last := records[len(records)-1]
	if got := offsetForLeaderEpoch(ctx, t, reader, newLeader, topic, newEpoch, newEpoch); got.ErrorCode != 0 || got.EndOffset != last.Offset+1 {
		t.Errorf("OffsetForLeaderEpoch(current epoch %d) = %+v, want the log end %d", newEpoch, got, last.Offset+1)
	}
	for _, tt := range []struct {
		name    string
		broker  int32
		current int32
		code    int16
	}{
		{"stale current epoch", newLeader, newEpoch - 1, kerr.FencedLeaderEpoch.Code},
		{"future current epoch", newLeader, newEpoch + 1, kerr.UnknownLeaderEpoch.Code},
		{"not the leader", 6 - newLeader - oldLeader, newEpoch, kerr.NotLeaderForPartition.Code},
	} {
		if got := offsetForLeaderEpoch(ctx, t, reader, tt.broker, topic, tt.current, newEpoch); got.ErrorCode != tt.code {
			t.Errorf("OffsetForLeaderEpoch, %s: code %d, want %d", tt.name, got.ErrorCode, tt.code)
		}
	}
	// Fetch and ListOffsets fence a stale leader epoch too.
	fetch := kmsg.NewPtrFetchRequest()
	fetch.MaxWaitMillis, fetch.MaxBytes = 10, 1<<20
	ft := kmsg.NewFetchRequestTopic()
	ft.Topic = topic
	fp := kmsg.NewFetchRequestTopicPartition()
	fp.Partition, fp.CurrentLeaderEpoch, fp.PartitionMaxBytes = 0, newEpoch-1, 1<<20
	ft.Partitions = append(ft.Partitions, fp)
	fetch.Topics = append(fetch.Topics, ft)
	fresp, err := fetch.RequestWith(ctx, reader.Broker(int(newLeader)))
	if err != nil || fresp.Topics[0].Partitions[0].ErrorCode != kerr.FencedLeaderEpoch.Code {
		t.Errorf("fetch at a stale epoch: %v %+v, want FENCED_LEADER_EPOCH", err, fresp)
	}
	list := kmsg.NewPtrListOffsetsRequest()
	lt := kmsg.NewListOffsetsRequestTopic()
	lt.Topic = topic
	lp := kmsg.NewListOffsetsRequestTopicPartition()
	lp.Partition, lp.CurrentLeaderEpoch, lp.Timestamp = 0, newEpoch+1, -1
	lt.Partitions = append(lt.Partitions, lp)
	list.Topics = append(list.Topics, lt)
	lresp, err := list.RequestWith(ctx, reader.Broker(int(newLeader)))
	if err != nil || lresp.Topics[0].Partitions[0].ErrorCode != kerr.UnknownLeaderEpoch.Code {
		t.Errorf("list offsets at a future epoch: %v %+v, want UNKNOWN_LEADER_EPOCH", err, lresp)
	}
	lp.CurrentLeaderEpoch = newEpoch
	list.Topics[0].Partitions[0] = lp
	if lresp, err = list.RequestWith(ctx, reader.Broker(int(newLeader))); err != nil || lresp.Topics[0].Partitions[0].Offset != last.Offset+1 {
		t.Errorf("list offsets (latest) at the leader: %v %+v, want %d", err, lresp, last.Offset+1)
	}
}

// produceTo sends one record to partition of topic straight to broker id and returns the
// partition's error code.
func produceTo(ctx context.Context, t *testing.T, cl *kgo.Client, id int32, topic string, partition int32) int16 {
	t.Helper()
	req := kmsg.NewPtrProduceRequest()
	req.Acks, req.TimeoutMillis = -1, 5000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Partition = partition
	rp.Records = produceRequest(t, topic, -1, 0, []byte("to a follower")).Topics[0].Partitions[0].Records
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl.Broker(int(id)))
	if err != nil {
		t.Fatalf("produce to node %d: %v", id, err)
	}
	return resp.Topics[0].Partitions[0].ErrorCode
}

func offsetForLeaderEpoch(ctx context.Context, t *testing.T, cl *kgo.Client, id int32, topic string, current, epoch int32) kmsg.OffsetForLeaderEpochResponseTopicPartition {
	t.Helper()
	req := kmsg.NewPtrOffsetForLeaderEpochRequest()
	rt := kmsg.NewOffsetForLeaderEpochRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewOffsetForLeaderEpochRequestTopicPartition()
	rp.Partition, rp.CurrentLeaderEpoch, rp.LeaderEpoch = 0, current, epoch
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl.Broker(int(id)))
	if err != nil || len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		t.Fatalf("OffsetForLeaderEpoch at node %d: %v %+v", id, err, resp)
	}
	return resp.Topics[0].Partitions[0]
}
