package kafka_test

import (
	"testing"

	"github.com/ringlog/ringlog/netio/internal/brokertest"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestOffsetForLeaderEpochSingleBroker: a single broker's partitions have one leader epoch,
// 0, from offset 0 (what its Metadata says). OffsetForLeaderEpoch answers epoch 0 with the
// log end offset and any later epoch with (-1, -1); a current_leader_epoch above 0 is
// UNKNOWN_LEADER_EPOCH there and on Fetch and ListOffsets.
func TestOffsetForLeaderEpochSingleBroker(t *testing.T) {
	b := startKafka(t, brokertest.Options{})
	cl := newClient(t, b)
	ctx := testContext(t)
	createTopic(t, cl, "epochs", 1)
	for i := 0; i < 5; i++ {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "epochs", Value: []byte{byte(i)}}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name           string
		topic          string
		current, epoch int32
		code           int16
		wantEpoch      int32
		wantEnd        int64
	}{
		{"epoch 0 ends at the log end", "epochs", 0, 0, 0, 0, 5},
		{"no current epoch", "epochs", -1, 0, 0, 0, 5},
		{"a later epoch is unknown", "epochs", 0, 1, 0, -1, -1},
		{"no epoch", "epochs", 0, -1, 0, -1, -1},
		{"a future current epoch", "epochs", 1, 0, kerr.UnknownLeaderEpoch.Code, -1, -1},
		{"a current epoch below -1", "epochs", -2, 0, kerr.FencedLeaderEpoch.Code, -1, -1},
		{"unknown topic", "nope", 0, 0, kerr.UnknownTopicOrPartition.Code, -1, -1},
	} {
		req := kmsg.NewPtrOffsetForLeaderEpochRequest()
		rt := kmsg.NewOffsetForLeaderEpochRequestTopic()
		rt.Topic = tc.topic
		rp := kmsg.NewOffsetForLeaderEpochRequestTopicPartition()
		rp.CurrentLeaderEpoch, rp.LeaderEpoch = tc.current, tc.epoch
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, cl.Broker(0))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		got := resp.Topics[0].Partitions[0]
		if got.ErrorCode != tc.code || got.EndOffset != tc.wantEnd || got.LeaderEpoch != tc.wantEpoch {
			t.Errorf("%s: code %d epoch %d end %d, want code %d epoch %d end %d", tc.name, got.ErrorCode, got.LeaderEpoch, got.EndOffset, tc.code, tc.wantEpoch, tc.wantEnd)
		}
	}

	fetch := kmsg.NewPtrFetchRequest()
	fetch.MaxBytes = 1 << 20
	ft := kmsg.NewFetchRequestTopic()
	ft.Topic = "epochs"
	for _, epoch := range []int32{1, 0} {
		fp := kmsg.NewFetchRequestTopicPartition()
		fp.CurrentLeaderEpoch, fp.PartitionMaxBytes = epoch, 1<<20
		ft.Partitions = append(ft.Partitions, fp)
	}
	fetch.Topics = append(fetch.Topics, ft)
	fresp, err := fetch.RequestWith(ctx, cl.Broker(0))
	if err != nil {
		t.Fatal(err)
	}
	if got := fresp.Topics[0].Partitions; got[0].ErrorCode != kerr.UnknownLeaderEpoch.Code || got[1].ErrorCode != 0 || got[1].HighWatermark != 5 || len(got[1].RecordBatches) == 0 {
		t.Errorf("fetch at epochs 1 and 0: %+v, want UNKNOWN_LEADER_EPOCH, then the records up to the high watermark 5", got)
	}

	list := kmsg.NewPtrListOffsetsRequest()
	lt := kmsg.NewListOffsetsRequestTopic()
	lt.Topic = "epochs"
	lp := kmsg.NewListOffsetsRequestTopicPartition()
	lp.CurrentLeaderEpoch, lp.Timestamp = 3, -1
	lt.Partitions = append(lt.Partitions, lp)
	list.Topics = append(list.Topics, lt)
	lresp, err := list.RequestWith(ctx, cl.Broker(0))
	if err != nil || lresp.Topics[0].Partitions[0].ErrorCode != kerr.UnknownLeaderEpoch.Code {
		t.Errorf("list offsets at epoch 3: %v %+v, want UNKNOWN_LEADER_EPOCH", err, lresp)
	}
}
