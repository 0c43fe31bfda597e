package assign

import (
	"bytes"
	"errors"
	"reflect"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

func TestSubscriptionRoundTripAndKafkaBytes(t *testing.T) {
	tests := []Subscription{
		{Topics: []string{"a", "b"}, Generation: -1},
		{Topics: []string{"orders"}, UserData: []byte{1, 2}, Owned: []TopicPartition{{"orders", 3}, {"orders", 1}, {"a", 0}}, Generation: 7, Rack: "r1"},
		{Topics: []string{}, UserData: []byte{}, Generation: 0},
	}
	for i, s := range tests {
		enc := EncodeSubscription(nil, s)
		got, err := DecodeSubscription(enc)
		if err != nil {
			t.Fatalf("%d: %v", i, err)
		}
		want := s
		SortPartitions(want.Owned)
		if !reflect.DeepEqual(got.Topics, want.Topics) && len(want.Topics) != 0 || got.Generation != want.Generation ||
			!bytes.Equal(got.UserData, want.UserData) || got.Rack != want.Rack || !reflect.DeepEqual(got.Owned, want.Owned) {
			t.Fatalf("%d: round trip %+v, want %+v", i, got, want)
		}
		// The same bytes as Kafka's encoder (franz-go's kmsg is generated from Kafka's schemas).
		k := kmsg.ConsumerMemberMetadata{Version: 3, Topics: s.Topics, UserData: s.UserData, Generation: s.Generation}
		if s.Rack != "" {
			k.Rack = &s.Rack
		}
		for _, tp := range want.Owned {
			if n := len(k.OwnedPartitions); n == 0 || k.OwnedPartitions[n-1].Topic != tp.Topic {
				k.OwnedPartitions = append(k.OwnedPartitions, kmsg.ConsumerMemberMetadataOwnedPartition{Topic: tp.Topic})
			}
			last := &k.OwnedPartitions[len(k.OwnedPartitions)-1]
			last.Partitions = append(last.Partitions, tp.Partition)
		}
		if kb := k.AppendTo(nil); !bytes.Equal(kb, enc) {
			t.Fatalf("%d: encoding differs from Kafka's\n ours  %x\n kafka %x", i, enc, kb)
		}
	}
}

// Older versions decode (Kafka clients before KIP-429 send version 0).
func TestSubscriptionOldVersions(t *testing.T) {
	for version := int16(0); version <= 3; version++ {
		k := kmsg.ConsumerMemberMetadata{Version: version, Topics: []string{"t"}, Generation: 9,
			OwnedPartitions: []kmsg.ConsumerMemberMetadataOwnedPartition{{Topic: "t", Partitions: []int32{2}}}}
		s, err := DecodeSubscription(k.AppendTo(nil))
		if err != nil {
			t.Fatalf("v%d: %v", version, err)
		}
		if version >= 1 != (len(s.Owned) == 1) || (version >= 2) != (s.Generation == 9) {
			t.Fatalf("v%d: decoded %+v", version, s)
		}
	}
}

func TestAssignmentRoundTripAndKafkaBytes(t *testing.T) {
	a := Assignment{Partitions: []TopicPartition{{"b", 1}, {"a", 4}, {"a", 2}}}
	enc := EncodeAssignment(nil, a)
	got, err := DecodeAssignment(enc)
	if err != nil {
		t.Fatal(err)
	}
	want := []TopicPartition{{"a", 2}, {"a", 4}, {"b", 1}}
	if !reflect.DeepEqual(got.Partitions, want) {
		t.Fatalf("got %v", got.Partitions)
	}
	k := kmsg.ConsumerMemberAssignment{Version: 1, Topics: []kmsg.ConsumerMemberAssignmentTopic{
		{Topic: "a", Partitions: []int32{2, 4}}, {Topic: "b", Partitions: []int32{1}}}}
	if kb := k.AppendTo(nil); !bytes.Equal(kb, enc) {
		t.Fatalf("encoding differs from Kafka's\n ours  %x\n kafka %x", enc, kb)
	}
	if empty, err := DecodeAssignment(nil); err != nil || len(empty.Partitions) != 0 {
		t.Fatalf("empty assignment: %v %v", empty, err)
	}
}

func TestDecodeMalformed(t *testing.T) {
	tests := map[string][]byte{
		"short version":      {0},
		"huge topic count":   {0, 0, 0x7f, 0xff, 0xff, 0xff},
		"negative count":     {0, 0, 0xff, 0xff, 0xff, 0xfe},
		"truncated string":   {0, 0, 0, 0, 0, 1, 0, 5, 'a'},
		"negative version":   {0xff, 0xff, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff},
		"missing user data":  {0, 0, 0, 0, 0, 0},
		"huge owned count":   {0, 1, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x10, 0, 0, 0, 0},
		"truncated gen (v2)": {0, 2, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0},
	}
	for name, b := range tests {
		if _, err := DecodeSubscription(b); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: DecodeSubscription err = %v", name, err)
		}
	}
	if _, err := DecodeAssignment([]byte{0, 1, 0, 0, 0, 9}); !errors.Is(err, ErrMalformed) {
		t.Errorf("DecodeAssignment err = %v", err)
	}
}

func FuzzDecodeSubscription(f *testing.F) {
	f.Add([]byte{})
	f.Add(EncodeSubscription(nil, Subscription{Topics: []string{"a"}, Owned: []TopicPartition{{"a", 1}}, Generation: 2, Rack: "r"}))
	f.Add([]byte{0, 0, 0x7f, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := DecodeSubscription(b)
		if err != nil {
			return
		}
		// Whatever decodes re-encodes (as v3) to something that decodes to the same.
		again, err := DecodeSubscription(EncodeSubscription(nil, s))
		if err != nil || len(again.Topics) != len(s.Topics) || len(again.Owned) != len(s.Owned) {
			t.Fatalf("re-decode: %+v, %v (was %+v)", again, err, s)
		}
	})
}

func FuzzDecodeAssignment(f *testing.F) {
	f.Add([]byte{})
	f.Add(EncodeAssignment(nil, Assignment{Partitions: []TopicPartition{{"a", 1}, {"b", 0}}, UserData: []byte("x")}))
	f.Add([]byte{0, 1, 0x7f, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		a, err := DecodeAssignment(b)
		if err != nil {
			return
		}
		again, err := DecodeAssignment(EncodeAssignment(nil, a))
		if err != nil || len(again.Partitions) != len(a.Partitions) {
			t.Fatalf("re-decode: %+v, %v (was %+v)", again, err, a)
		}
	})
}
