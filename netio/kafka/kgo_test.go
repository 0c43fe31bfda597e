package kafka_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/ringlog/ringlog/engine/batch"
	"github.com/ringlog/ringlog/netio/client"
	"github.com/ringlog/ringlog/netio/internal/brokertest"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// These tests run franz-go's kgo client — a Kafka client, not ours — against the real broker
// (netio/node, as ringlogd starts it) over its Kafka listener on loopback.

const testTimeout = 30 * time.Second

func startKafka(t *testing.T, o brokertest.Options) *brokertest.Broker {
	t.Helper()
	o.Kafka = true
	return brokertest.Start(t, o)
}

func newClient(t *testing.T, b *brokertest.Broker, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(b.KafkaAddr)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// createTopic creates a topic through the Kafka CreateTopics API.
func createTopic(t *testing.T, cl *kgo.Client, name string, partitions int32) {
	t.Helper()
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = name, partitions, 1
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(testContext(t), cl)
	if err != nil {
		t.Fatal(err)
	}
	if err := kerr.ErrorForCode(resp.Topics[0].ErrorCode); err != nil {
		t.Fatalf("create %s: %v", name, err)
	}
}

// consume reads n records of topic from the start with a fresh client.
func consume(t *testing.T, b *brokertest.Broker, topic string, n int, opts ...kgo.Opt) []*kgo.Record {
	t.Helper()
	cl := newClient(t, b, append([]kgo.Opt{kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(200 * time.Millisecond)}, opts...)...)
	ctx := testContext(t)
	var out []*kgo.Record
	for len(out) < n {
		fetches := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("consumed %d of %d records of %s: %v", len(out), n, topic, err)
		}
		fetches.EachError(func(topic string, p int32, err error) { t.Fatalf("fetch %s/%d: %v", topic, p, err) })
		out = append(out, fetches.Records()...)
	}
	return out
}

func TestKgoProduceConsume(t *testing.T) {
	b := startKafka(t, brokertest.Options{})
	cl := newClient(t, b)
	createTopic(t, cl, "kgo-basic", 3)
	const n = 300
	ctx := testContext(t)
	for i := range n {
		r := &kgo.Record{Topic: "kgo-basic", Key: fmt.Appendf(nil, "key-%d", i%17), Value: fmt.Appendf(nil, "value-%d", i)}
		cl.Produce(ctx, r, func(r *kgo.Record, err error) {
			if err != nil {
				t.Errorf("produce: %v", err)
			}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	records := consume(t, b, "kgo-basic", n)
	if len(records) != n {
		t.Fatalf("consumed %d records, want %d", len(records), n)
	}
	// Keys keep to one partition (murmur2, Kafka's default partitioner), offsets are dense
	// per partition and values come back in produce order within a key.
	partitionOf := map[string]int32{}
	nextOffset := map[int32]int64{}
	lastValue := map[string]int{}
	for _, r := range records {
		if p, ok := partitionOf[string(r.Key)]; ok && p != r.Partition {
			t.Fatalf("key %s on partitions %d and %d", r.Key, p, r.Partition)
		}
		partitionOf[string(r.Key)] = r.Partition
		if r.Offset != nextOffset[r.Partition] {
			t.Fatalf("partition %d: offset %d, want %d", r.Partition, r.Offset, nextOffset[r.Partition])
		}
		nextOffset[r.Partition]++
		var v int
		fmt.Sscanf(string(r.Value), "value-%d", &v)
		if last, ok := lastValue[string(r.Key)]; ok && v <= last {
			t.Fatalf("key %s: value %d after %d", r.Key, v, last)
		}
		lastValue[string(r.Key)] = v
	}
	if len(nextOffset) != 3 {
		t.Fatalf("records landed on %d partitions, want 3", len(nextOffset))
	}
}

// TestKgoIdempotentProduce: kgo is idempotent by default (InitProducerId, then sequence
// numbers per partition, up to 5 requests in flight). Every record lands once, in order.
// A batch replayed by hand with the same producer id and sequence is answered as a
// duplicate with the original offset and not stored twice.
func TestKgoIdempotentProduce(t *testing.T) {
	b := startKafka(t, brokertest.Options{})
	cl := newClient(t, b, kgo.MaxBufferedRecords(10000), kgo.ProducerLinger(time.Millisecond))
	createTopic(t, cl, "kgo-idem", 1)
	ctx := testContext(t)
	const n = 2000
	for i := range n {
		cl.Produce(ctx, &kgo.Record{Topic: "kgo-idem", Value: fmt.Appendf(nil, "%d", i)}, func(r *kgo.Record, err error) {
			if err != nil {
				t.Errorf("produce: %v", err)
			}
			if r.ProducerID < 0 {
				t.Errorf("record acknowledged without a producer id: not idempotent")
			}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	records := consume(t, b, "kgo-idem", n)
	for i, r := range records[:n] {
		if string(r.Value) != fmt.Sprint(i) || r.Offset != int64(i) {
			t.Fatalf("record %d: offset %d value %s", i, r.Offset, r.Value)
		}
	}

	// Replay: an InitProducerId, then the same batch twice.
	raw := newClient(t, b)
	ipid, err := kmsg.NewPtrInitProducerIDRequest().RequestWith(ctx, raw)
	if err != nil || ipid.ErrorCode != 0 {
		t.Fatalf("InitProducerId: %v, code %d", err, ipid.ErrorCode)
	}
	builder := batch.NewBuilder(batch.BuilderOptions{ProducerID: ipid.ProducerID, ProducerEpoch: ipid.ProducerEpoch, BaseSequence: 0})
	builder.Append(time.Now().UnixMilli(), nil, []byte("once"), nil)
	records0, err := builder.Build(nil)
	if err != nil {
		t.Fatal(err)
	}
	var offsets []int64
	for range 2 {
		resp := produceRaw(t, raw, "kgo-idem", 0, records0, 9)
		p := resp.Topics[0].Partitions[0]
		if p.ErrorCode != 0 {
			t.Fatalf("produce (replay): %v", kerr.ErrorForCode(p.ErrorCode))
		}
		offsets = append(offsets, p.BaseOffset)
	}
	if offsets[0] != n || offsets[1] != n {
		t.Fatalf("a batch and its replay got offsets %v, want %d twice", offsets, n)
	}
	if hw := listOffset(t, raw, "kgo-idem", 0, -1); hw != n+1 {
		t.Fatalf("high watermark %d after a replayed batch, want %d", hw, n+1)
	}
}

func produceRaw(t *testing.T, cl *kgo.Client, topic string, partition int32, records []byte, version int16) *kmsg.ProduceResponse {
	t.Helper()
	req := kmsg.NewPtrProduceRequest()
	req.Version, req.Acks, req.TimeoutMillis = version, -1, 5000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Partition, rp.Records = partition, records
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := cl.Request(testContext(t), req)
	if err != nil {
		t.Fatal(err)
	}
	return resp.(*kmsg.ProduceResponse)
}

func listOffset(t *testing.T, cl *kgo.Client, topic string, partition int32, timestamp int64) int64 {
	t.Helper()
	req := kmsg.NewPtrListOffsetsRequest()
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewListOffsetsRequestTopicPartition()
	rp.Partition, rp.Timestamp = partition, timestamp
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(testContext(t), cl)
	if err != nil {
		t.Fatal(err)
	}
	p := resp.Topics[0].Partitions[0]
	if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
		t.Fatalf("list offsets %s/%d at %d: %v", topic, partition, timestamp, err)
	}
	return p.Offset
}

// fetchRaw fetches one partition from offset and returns the partition's answer.
func fetchRaw(t *testing.T, cl *kgo.Client, topic string, partition int32, offset int64) kmsg.FetchResponseTopicPartition {
	t.Helper()
	req := kmsg.NewPtrFetchRequest()
	req.Version, req.MaxWaitMillis, req.MaxBytes, req.SessionEpoch = 12, 100, 1<<20, -1
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes = partition, offset, 1<<20
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(testContext(t), cl)
	if err != nil {
		t.Fatal(err)
	}
	return resp.Topics[0].Partitions[0]
}

// TestKgoCompressionCodecs: kgo produces with each codec; the batches are stored as produced
// (the fetched bytes carry the same codec bits and decode) and kgo consumes them back.
func TestKgoCompressionCodecs(t *testing.T) {
	b := startKafka(t, brokertest.Options{})
	codecs := map[string]struct {
		kgo   kgo.CompressionCodec
		batch batch.Codec
	}{
		"gzip": {kgo.GzipCompression(), batch.CodecGzip}, "snappy": {kgo.SnappyCompression(), batch.CodecSnappy},
		"lz4": {kgo.Lz4Compression(), batch.CodecLZ4}, "zstd": {kgo.ZstdCompression(), batch.CodecZstd},
	}
	admin := newClient(t, b)
	for name, c := range codecs {
		t.Run(name, func(t *testing.T) {
			topic := "kgo-" + name
			createTopic(t, admin, topic, 1)
			cl := newClient(t, b, kgo.ProducerBatchCompression(c.kgo), kgo.ProducerLinger(5*time.Millisecond))
			ctx := testContext(t)
			const n = 200
			value := strings.Repeat("compressible ", 20)
			for i := range n {
				cl.Produce(ctx, &kgo.Record{Topic: topic, Value: fmt.Appendf(nil, "%d %s", i, value)}, nil)
			}
			if err := cl.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			records := consume(t, b, topic, n)
			for i, r := range records[:n] {
				if !strings.HasPrefix(string(r.Value), fmt.Sprintf("%d ", i)) {
					t.Fatalf("record %d: %.20q", i, r.Value)
				}
			}
			p := fetchRaw(t, admin, topic, 0, 0)
			h, err := batch.ParseHeader(p.RecordBatches)
			if err != nil {
				t.Fatal(err)
			}
			if h.Compression() != c.batch {
				t.Fatalf("stored batch has codec %s, want %s", h.Compression(), c.batch)
			}
		})
	}
}

// TestFetchMidBatch: a fetch from an offset inside a batch returns that whole batch (base
// offset below the fetch offset); kgo drops the records before its offset.
func TestFetchMidBatch(t *testing.T) {
	b := startKafka(t, brokertest.Options{})
	cl := newClient(t, b)
	createTopic(t, cl, "kgo-mid", 1)
	builder := batch.NewBuilder(batch.BuilderOptions{})
	for i := range 10 {
		builder.Append(time.Now().UnixMilli(), nil, fmt.Appendf(nil, "%d", i), nil)
	}
	records, err := builder.Build(nil)
	if err != nil {
		t.Fatal(err)
	}
	if p := produceRaw(t, cl, "kgo-mid", 0, records, 7).Topics[0].Partitions[0]; p.ErrorCode != 0 {
		t.Fatal(kerr.ErrorForCode(p.ErrorCode))
	}
	p := fetchRaw(t, cl, "kgo-mid", 0, 5)
	h, err := batch.ParseHeader(p.RecordBatches)
	if err != nil || h.BaseOffset != 0 || h.RecordCount != 10 || p.HighWatermark != 10 || p.LogStartOffset != 0 {
		t.Fatalf("fetch at 5: %v, batch base %d count %d, hwm %d, log start %d", err, h.BaseOffset, h.RecordCount, p.HighWatermark, p.LogStartOffset)
	}
	got := consume(t, b, "kgo-mid", 5, kgo.ConsumeResetOffset(kgo.NewOffset().At(5)))
	if got[0].Offset != 5 || string(got[0].Value) != "5" {
		t.Fatalf("kgo from offset 5 got offset %d value %s first", got[0].Offset, got[0].Value)
	}
	// Nothing at the high watermark: records empty but not null (librdkafka refuses null).
	if p := fetchRaw(t, cl, "kgo-mid", 0, 10); p.ErrorCode != 0 || p.RecordBatches == nil || len(p.RecordBatches) != 0 {
		t.Fatalf("fetch at the high watermark: code %d, records %v (nil: %t)", p.ErrorCode, p.RecordBatches, p.RecordBatches == nil)
	}
	if p := fetchRaw(t, cl, "kgo-mid", 0, 11); p.ErrorCode != kerr.OffsetOutOfRange.Code {
		t.Fatalf("fetch past the end: %v", kerr.ErrorForCode(p.ErrorCode))
	}
}

// TestListOffsetsByTime: records with explicit timestamps; ListOffsets finds the first at
// or after a time, -1 past the last, and -2/-1 the log start and end.
func TestListOffsetsByTime(t *testing.T) {
	b := startKafka(t, brokertest.Options{})
	cl := newClient(t, b)
	createTopic(t, cl, "kgo-time", 1)
	base := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	ctx := testContext(t)
	for i := range 10 {
		r := &kgo.Record{Topic: "kgo-time", Value: []byte{byte(i)}, Timestamp: base.Add(time.Duration(i) * time.Minute)}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		ts   int64
		want int64
	}{
		{base.UnixMilli(), 0}, {base.Add(150 * time.Second).UnixMilli(), 3}, {base.Add(9 * time.Minute).UnixMilli(), 9},
		{base.Add(time.Hour).UnixMilli(), -1}, {-2, 0}, {-1, 10},
	} {
		if got := listOffset(t, cl, "kgo-time", 0, tc.ts); got != tc.want {
			t.Errorf("list offsets at %d: %d, want %d", tc.ts, got, tc.want)
		}
	}
}

// TestBothProtocolsShareLogs: what kgo produces over Kafka the bundled client reads over
// the ringlog protocol at the same offsets, and the other way round.
func TestBothProtocolsShareLogs(t *testing.T) {
	b := startKafka(t, brokertest.Options{})
	cl := newClient(t, b)
	createTopic(t, cl, "shared", 1)
	ctx := testContext(t)
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "shared", Key: []byte("k"), Value: []byte("from kafka")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	p := b.Client.NewProducer(client.ProducerConfig{})
	defer p.Close(context.Background())
	if _, err := p.SendSync(ctx, &client.Record{Topic: "shared", Partition: 0, Value: []byte("from ringlog")}); err != nil {
		t.Fatal(err)
	}
	records := consume(t, b, "shared", 2)
	if string(records[0].Value) != "from kafka" || string(records[1].Value) != "from ringlog" || records[1].Offset != 1 {
		t.Fatalf("kgo read %q@%d, %q@%d", records[0].Value, records[0].Offset, records[1].Value, records[1].Offset)
	}
}

// TestAutoCreateTopics: off by default (UNKNOWN_TOPIC_OR_PARTITION), on with the option.
func TestAutoCreateTopics(t *testing.T) {
	for _, on := range []bool{false, true} {
		t.Run(fmt.Sprint(on), func(t *testing.T) {
			b := startKafka(t, brokertest.Options{KafkaAutoCreateTopics: on})
			cl := newClient(t, b)
			req := kmsg.NewPtrMetadataRequest()
			rt := kmsg.NewMetadataRequestTopic()
			rt.Topic = kmsg.StringPtr("auto-topic")
			req.Topics, req.AllowAutoTopicCreation = append(req.Topics, rt), true
			resp, err := req.RequestWith(testContext(t), cl)
			if err != nil {
				t.Fatal(err)
			}
			got := resp.Topics[0]
			if on && (got.ErrorCode != 0 || len(got.Partitions) != 1 || b.Core.Topic("auto-topic") == nil) {
				t.Fatalf("auto-create on: code %d, %d partitions", got.ErrorCode, len(got.Partitions))
			}
			if !on && (got.ErrorCode != kerr.UnknownTopicOrPartition.Code || b.Core.Topic("auto-topic") != nil) {
				t.Fatalf("auto-create off: code %d", got.ErrorCode)
			}
		})
	}
}

// TestAdminAPIs: DescribeConfigs, CreatePartitions (refused, with a reason), DeleteTopics.
func TestAdminAPIs(t *testing.T) {
	b := startKafka(t, brokertest.Options{})
	cl := newClient(t, b)
	ctx := testContext(t)
	createTopic(t, cl, "admin", 2)

	dc := kmsg.NewPtrDescribeConfigsRequest()
	res := kmsg.NewDescribeConfigsRequestResource()
	res.ResourceType, res.ResourceName, res.ConfigNames = kmsg.ConfigResourceTypeTopic, "admin", []string{"retention.ms"}
	dc.Resources = append(dc.Resources, res)
	dresp, err := dc.RequestWith(ctx, cl)
	if err != nil || dresp.Resources[0].ErrorCode != 0 || len(dresp.Resources[0].Configs) != 1 || dresp.Resources[0].Configs[0].Value == nil {
		t.Fatalf("describe configs: %v %+v", err, dresp)
	}

	cp := kmsg.NewPtrCreatePartitionsRequest()
	ct := kmsg.NewCreatePartitionsRequestTopic()
	ct.Topic, ct.Count = "admin", 4
	cp.Topics = append(cp.Topics, ct)
	cresp, err := cp.RequestWith(ctx, cl)
	if err != nil || cresp.Topics[0].ErrorCode != kerr.InvalidRequest.Code || !strings.Contains(*cresp.Topics[0].ErrorMessage, "cannot add partitions") {
		t.Fatalf("create partitions: %v %+v", err, cresp)
	}

	dt := kmsg.NewPtrDeleteTopicsRequest()
	dt.TopicNames = []string{"admin", "missing"}
	delResp, err := dt.RequestWith(ctx, cl)
	if err != nil || delResp.Topics[0].ErrorCode != 0 || delResp.Topics[1].ErrorCode != kerr.UnknownTopicOrPartition.Code {
		t.Fatalf("delete topics: %v %+v", err, delResp)
	}
	if b.Core.Topic("admin") != nil {
		t.Fatal("topic still there after DeleteTopics")
	}
}

// rawConn speaks the Kafka framing by hand, to send what a client library would not.
type rawConn struct {
	t  *testing.T
	nc net.Conn
}

func dialRaw(t *testing.T, addr string) *rawConn {
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	nc.SetDeadline(time.Now().Add(testTimeout))
	return &rawConn{t: t, nc: nc}
}

// send writes a v1 request header (key, version, correlation id, client id) and body.
func (c *rawConn) send(key, version int16, correlationID int32, body []byte) {
	frame := binary.BigEndian.AppendUint16(nil, uint16(key))
	frame = binary.BigEndian.AppendUint16(frame, uint16(version))
	frame = binary.BigEndian.AppendUint32(frame, uint32(correlationID))
	frame = binary.BigEndian.AppendUint16(frame, 4)
	frame = append(frame, "test"...)
	frame = append(frame, body...)
	if _, err := c.nc.Write(append(binary.BigEndian.AppendUint32(nil, uint32(len(frame))), frame...)); err != nil {
		c.t.Fatal(err)
	}
}

// recv reads one response: correlation id and the rest.
func (c *rawConn) recv() (int32, []byte, error) {
	var size [4]byte
	if _, err := ioReadFull(c.nc, size[:]); err != nil {
		return 0, nil, err
	}
	body := make([]byte, binary.BigEndian.Uint32(size[:]))
	if _, err := ioReadFull(c.nc, body); err != nil {
		return 0, nil, err
	}
	return int32(binary.BigEndian.Uint32(body)), body[4:], nil
}

// TestUnsupportedRequests: a too-new ApiVersions gets a v0 answer with UNSUPPORTED_VERSION
// and the table; an API kmsg knows but we do not serve gets UNSUPPORTED_VERSION in its
// response; a served API at an unserved version gets it on every entry; a key no Kafka
// schema has closes the connection after the answers before it.
func TestUnsupportedRequests(t *testing.T) {
	b := startKafka(t, brokertest.Options{})
	c := dialRaw(t, b.KafkaAddr)

	c.send(18, 99, 1, nil)
	id, body, err := c.recv()
	if err != nil || id != 1 {
		t.Fatalf("ApiVersions v99: %v, correlation id %d", err, id)
	}
	av := kmsg.NewPtrApiVersionsResponse()
	if err := av.ReadFrom(body); err != nil || av.ErrorCode != kerr.UnsupportedVersion.Code || len(av.ApiKeys) < 10 {
		t.Fatalf("ApiVersions v99 answered %v: code %d, %d keys", err, av.ErrorCode, len(av.ApiKeys))
	}

	endTxn := kmsg.NewPtrEndTxnRequest()
	endTxn.Version, endTxn.TransactionalID, endTxn.ProducerID = 1, "txn", 1
	c.send(26, 1, 2, endTxn.AppendTo(nil))
	id, body, err = c.recv()
	er := kmsg.NewPtrEndTxnResponse()
	er.Version = 1
	if err != nil || id != 2 || er.ReadFrom(body) != nil || er.ErrorCode != kerr.UnsupportedVersion.Code {
		t.Fatalf("EndTxn: %v, id %d, code %d", err, id, er.ErrorCode)
	}

	c.send(2, 0, 3, (&kmsg.ListOffsetsRequest{Version: 0, ReplicaID: -1, Topics: []kmsg.ListOffsetsRequestTopic{{Topic: "x", Partitions: []kmsg.ListOffsetsRequestTopicPartition{{Partition: 0, Timestamp: -1, MaxNumOffsets: 1}}}}}).AppendTo(nil))
	id, body, err = c.recv()
	lr := kmsg.NewPtrListOffsetsResponse()
	lr.Version = 0
	if err != nil || id != 3 || lr.ReadFrom(body) != nil || lr.Topics[0].Partitions[0].ErrorCode != kerr.UnsupportedVersion.Code {
		t.Fatalf("ListOffsets v0: %v, id %d, %+v", err, id, lr)
	}

	c.send(30000, 0, 4, nil)
	if _, _, err := c.recv(); err == nil {
		t.Fatal("an unknown API key got a response; want the connection closed")
	}
}

// TestOversizedFrameCloses: a frame above the limits is refused before its body is read.
func TestOversizedFrameCloses(t *testing.T) {
	b := startKafka(t, brokertest.Options{})
	for _, tc := range []struct {
		name string
		size uint32
		key  int16
	}{{"over max frame", 1 << 31, 0}, {"metadata over 1 MiB", 2 << 20, 3}, {"negative", 0xffffffff, 0}, {"too short", 4, 0}} {
		t.Run(tc.name, func(t *testing.T) {
			c := dialRaw(t, b.KafkaAddr)
			frame := binary.BigEndian.AppendUint32(nil, tc.size)
			frame = binary.BigEndian.AppendUint16(frame, uint16(tc.key))
			frame = append(frame, 0, 0, 0, 0, 0, 1)
			c.nc.Write(frame)
			if _, _, err := c.recv(); err == nil {
				t.Fatal("got a response; want the connection closed")
			}
		})
	}
}

func ioReadFull(nc net.Conn, b []byte) (int, error) { return io.ReadFull(nc, b) }
