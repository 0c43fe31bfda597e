package kafka_test

import (
	"encoding/binary"
	"io"
	"net"
	"runtime/debug"
	"syscall"
	"testing"
	"time"

	"github.com/ringlog/ringlog/engine/batch"
	"github.com/ringlog/ringlog/netio/internal/brokertest"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// kafkaRig is the real broker (netio/node with its Kafka listener, one shard) in this
// process with a raw socket to the Kafka listener: the client side sends pre-encoded
// frames and reads responses into one reused buffer, so the process's allocations per
// request are the broker's. The requests are the ones kgo sends (Fetch v12 and Produce
// v9, both flexible) over rigPartitions partitions, as one bench consumer's or
// producer's requests name 8 partitions.
type kafkaRig struct {
	nc    net.Conn
	fetch []byte // Fetch v12 of every partition from offset 0: each answers rigBatchesPerPartition batches
	// fetchSmall is the same of rigTopicSmall, whose partitions hold one batch of one
	// record: a fetch at the head (a consumer keeping up), where per-request costs show.
	fetchSmall []byte
	produce    []byte // Produce v9 acks=1 of one batch of one 1 KiB record per partition
	buf        []byte
	tb         testing.TB
}

const (
	rigTopic                = "allocs"
	rigTopicSmall           = "allocs-small"
	rigPartitions           = 8
	rigBatchesPerPartition  = 4
	rigRecordsPerBatch      = 16
	rigRecordBytes          = 1 << 10
	rigPartitionFetchBytes  = 1 << 20
	rigFetchVersion         = 12
	rigProduceVersion       = 9
	rigFetchResponseRecords = rigPartitions * rigBatchesPerPartition * rigRecordsPerBatch
)

func startKafkaRig(tb testing.TB) *kafkaRig {
	b := brokertest.Start(tb, brokertest.Options{Shards: 1, Kafka: true})
	for _, topic := range []string{rigTopic, rigTopicSmall} {
		if err := b.Client.CreateTopic(tb.Context(), topic, rigPartitions, nil); err != nil {
			tb.Fatal(err)
		}
	}
	nc, err := net.Dial("tcp", b.KafkaAddr)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { nc.Close() })
	r := &kafkaRig{nc: nc, tb: tb}

	bl := batch.NewBuilder(batch.BuilderOptions{})
	value := make([]byte, rigRecordBytes)
	build := func(n int) []byte {
		bl.Reset()
		for range n {
			bl.Append(time.Now().UnixMilli(), nil, value, nil)
		}
		records, err := bl.Build(nil)
		if err != nil {
			tb.Fatal(err)
		}
		return records
	}
	produce := func(topic string, records []byte) []byte {
		req := kmsg.NewPtrProduceRequest()
		req.Version, req.Acks, req.TimeoutMillis = rigProduceVersion, 1, 30_000
		rt := kmsg.NewProduceRequestTopic()
		rt.Topic = topic
		for p := range int32(rigPartitions) {
			rp := kmsg.NewProduceRequestTopicPartition()
			rp.Partition, rp.Records = p, records
			rt.Partitions = append(rt.Partitions, rp)
		}
		req.Topics = append(req.Topics, rt)
		return rigFrame(req)
	}
	fill := produce(rigTopic, build(rigRecordsPerBatch))
	for range rigBatchesPerPartition {
		r.roundTrip(fill)
	}
	r.roundTrip(produce(rigTopicSmall, build(1)))
	r.produce = produce(rigTopic, build(1))
	r.fetch, r.fetchSmall = fetchFrame(rigTopic), fetchFrame(rigTopicSmall)
	return r
}

// fetchFrame is a Fetch v12 of every partition of topic from offset 0, as kgo asks.
func fetchFrame(topic string) []byte {
	req := kmsg.NewPtrFetchRequest()
	req.Version, req.ReplicaID, req.MaxBytes, req.MinBytes = rigFetchVersion, -1, 16<<20, 1
	req.SessionEpoch = -1
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic = topic
	for p := range int32(rigPartitions) {
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes = p, 0, rigPartitionFetchBytes
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	return rigFrame(req)
}

// rigFrame frames req with a v2 request header (client id "kgo", no tags), as kgo does
// for flexible versions.
func rigFrame(req kmsg.Request) []byte {
	frame := binary.BigEndian.AppendUint32(nil, 0)
	frame = binary.BigEndian.AppendUint16(frame, uint16(req.Key()))
	frame = binary.BigEndian.AppendUint16(frame, uint16(req.GetVersion()))
	frame = binary.BigEndian.AppendUint32(frame, 1)
	frame = binary.BigEndian.AppendUint16(frame, 3)
	frame = append(frame, "kgo"...)
	frame = append(frame, 0) // header tags
	frame = req.AppendTo(frame)
	binary.BigEndian.PutUint32(frame, uint32(len(frame)-4))
	return frame
}

// roundTrip writes frame and reads its response into r.buf.
func (r *kafkaRig) roundTrip(frame []byte) {
	if _, err := r.nc.Write(frame); err != nil {
		r.tb.Fatal(err)
	}
	var size [4]byte
	if _, err := io.ReadFull(r.nc, size[:]); err != nil {
		r.tb.Fatal(err)
	}
	n := int(binary.BigEndian.Uint32(size[:]))
	if cap(r.buf) < n {
		r.buf = make([]byte, n)
	}
	if _, err := io.ReadFull(r.nc, r.buf[:n]); err != nil {
		r.tb.Fatal(err)
	}
}

func (r *kafkaRig) run(op string) {
	switch op {
	case "fetch":
		r.roundTrip(r.fetch)
	case "fetch-small":
		r.roundTrip(r.fetchSmall)
	case "produce":
		r.roundTrip(r.produce)
	}
}

// check decodes the last response of op and fails on an error code or a short fetch.
func (r *kafkaRig) check(op string) {
	body := r.buf[4:] // past the correlation id
	if len(body) > 0 {
		body = body[1:] // the flexible response header's tags (both versions are flexible)
	}
	switch op {
	case "fetch", "fetch-small":
		resp := kmsg.NewPtrFetchResponse()
		resp.Version = rigFetchVersion
		if err := resp.ReadFrom(body); err != nil {
			r.tb.Fatal(err)
		}
		records := 0
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if p.ErrorCode != 0 {
					r.tb.Fatalf("fetch %s/%d: error code %d", t.Topic, p.Partition, p.ErrorCode)
				}
				for b := p.RecordBatches; len(b) > 0; {
					h, err := batch.ParseHeader(b)
					if err != nil {
						r.tb.Fatal(err)
					}
					records += int(h.LastOffsetDelta) + 1
					b = b[h.Size():]
				}
			}
		}
		want := rigFetchResponseRecords
		if op == "fetch-small" {
			want = rigPartitions
		}
		if records != want {
			r.tb.Fatalf("%s answered %d records, want %d", op, records, want)
		}
	case "produce":
		resp := kmsg.NewPtrProduceResponse()
		resp.Version = rigProduceVersion
		if err := resp.ReadFrom(body); err != nil {
			r.tb.Fatal(err)
		}
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if p.ErrorCode != 0 {
					r.tb.Fatalf("produce %s/%d: error code %d", t.Topic, p.Partition, p.ErrorCode)
				}
			}
		}
	}
}

// processCPU is this process's user + system CPU time so far.
func processCPU(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

var kafkaAllocsOps = []string{"fetch", "fetch-small", "produce"}

// kafkaAllocsMax bounds TestKafkaRequestAllocs's counts (measured, plus a little slack for
// sync.Pool misses).
var kafkaAllocsMax = map[string]float64{"fetch": 14, "fetch-small": 14, "produce": 14}

// BenchmarkKafkaRequestAllocs: one kgo-shaped request at a time from a raw socket into the
// real broker's Kafka listener; allocs/op and B/op are the broker's (the raw client
// allocates nothing per request). cpu-ns/op is the process's CPU time (user + system,
// getrusage) per request, the broker's and the raw client's together: on a shared machine
// it moves far less with the load than ns/op, which waits for the CPU too. fetch answers 8
// partitions of 4 batches of 16 1 KiB records (512 KiB of records by sendfile),
// fetch-small 8 partitions of one 1 KiB record (a consumer at the head), produce writes
// one 1 KiB record to each of 8 partitions with acks=1. SetBytes counts the records
// carried.
func BenchmarkKafkaRequestAllocs(b *testing.B) {
	for _, op := range kafkaAllocsOps {
		b.Run(op, func(b *testing.B) {
			r := startKafkaRig(b)
			r.run(op)
			r.check(op)
			if op == "fetch" {
				b.SetBytes(rigFetchResponseRecords * rigRecordBytes)
			} else {
				b.SetBytes(rigPartitions * rigRecordBytes) // fetch-small, produce
			}
			b.ReportAllocs()
			cpu := processCPU(b)
			for b.Loop() {
				r.run(op)
			}
			b.ReportMetric(float64((processCPU(b)-cpu).Nanoseconds())/float64(b.N), "cpu-ns/op")
		})
	}
}

// TestKafkaRequestAllocs logs the broker's allocations per Kafka fetch and produce (the
// numbers BenchmarkKafkaRequestAllocs reports) and fails if either grows past its bound:
// a new allocation per partition or per batch shows as 8 or more. The race detector
// allocates, so the count runs without it.
func TestKafkaRequestAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	r := startKafkaRig(t)
	for _, op := range kafkaAllocsOps {
		for range 50 { // warm the pools and the connection's buffers
			r.run(op)
		}
		r.check(op)
		gc := debug.SetGCPercent(-1) // a GC empties the sync.Pools; refilling them is not per request
		n := testing.AllocsPerRun(200, func() { r.run(op) })
		debug.SetGCPercent(gc)
		t.Logf("%s of %d partitions: %v allocations per request in the broker", op, rigPartitions, n)
		if limit := kafkaAllocsMax[op]; n > limit {
			t.Errorf("%s: %v allocations per request, more than %v (go test ./netio/kafka -run XXX -bench KafkaRequestAllocs -memprofile to find them)", op, n, limit)
		}
	}
}
