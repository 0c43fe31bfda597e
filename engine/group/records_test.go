package group

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/engine/batch"
)

// Our records are Kafka's bytes: franz-go's kmsg is generated from Kafka's own schemas.
func TestRecordsAreKafkaBytes(t *testing.T) {
	off := OffsetRecord("billing", "payments", 7, OffsetValue{Offset: 4_320_000_000, LeaderEpoch: 3, Metadata: "m", CommitTimestampMs: 1700000000123})
	kk := kmsg.OffsetCommitKey{Version: 1, Group: "billing", Topic: "payments", Partition: 7}
	kv := kmsg.OffsetCommitValue{Version: 3, Offset: 4_320_000_000, LeaderEpoch: 3, Metadata: "m", CommitTimestamp: 1700000000123}
	if !bytes.Equal(off.Key, kk.AppendTo(nil)) || !bytes.Equal(off.Value, kv.AppendTo(nil)) {
		t.Fatalf("offset record differs from Kafka's:\n key %x\n     %x\n value %x\n       %x", off.Key, kk.AppendTo(nil), off.Value, kv.AppendTo(nil))
	}

	gv := GroupValue{ProtocolType: "consumer", Generation: 9, Protocol: "range", Leader: "c1-1", StateTimestampMs: 5,
		Members: []MemberValue{
			{MemberID: "c1-1", InstanceID: "i1", ClientID: "c1", ClientHost: "/10.0.0.1", RebalanceTimeoutMs: 300000, SessionTimeoutMs: 45000, Subscription: []byte{1}, Assignment: []byte{2, 3}},
			{MemberID: "c2-2", ClientID: "c2", ClientHost: "/10.0.0.2", RebalanceTimeoutMs: 300000, SessionTimeoutMs: 45000, Subscription: []byte{}, Assignment: []byte{}},
		}}
	rec := GroupRecord("billing", gv)
	instance := "i1"
	protocol, leader := "range", "c1-1"
	kg := kmsg.GroupMetadataValue{Version: 3, ProtocolType: "consumer", Generation: 9, Protocol: &protocol, Leader: &leader, CurrentStateTimestamp: 5,
		Members: []kmsg.GroupMetadataValueMember{
			{MemberID: "c1-1", InstanceID: &instance, ClientID: "c1", ClientHost: "/10.0.0.1", RebalanceTimeoutMillis: 300000, SessionTimeoutMillis: 45000, Subscription: []byte{1}, Assignment: []byte{2, 3}},
			{MemberID: "c2-2", ClientID: "c2", ClientHost: "/10.0.0.2", RebalanceTimeoutMillis: 300000, SessionTimeoutMillis: 45000, Subscription: []byte{}, Assignment: []byte{}},
		}}
	kgk := kmsg.GroupMetadataKey{Version: 2, Group: "billing"}
	if !bytes.Equal(rec.Key, kgk.AppendTo(nil)) || !bytes.Equal(rec.Value, kg.AppendTo(nil)) {
		t.Fatalf("group record differs from Kafka's:\n %x\n %x", rec.Value, kg.AppendTo(nil))
	}
	got, err := DecodeGroupValue(rec.Value)
	if err != nil || !reflect.DeepEqual(got, gv) {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	empty := GroupRecord("g", GroupValue{ProtocolType: "consumer", Generation: 2, StateTimestampMs: 1})
	ke := kmsg.GroupMetadataValue{Version: 3, ProtocolType: "consumer", Generation: 2, CurrentStateTimestamp: 1}
	if !bytes.Equal(empty.Value, ke.AppendTo(nil)) {
		t.Fatalf("empty group (null protocol and leader) differs: %x vs %x", empty.Value, ke.AppendTo(nil))
	}
}

// Values written by older Kafka versions decode.
func TestDecodeOlderValueVersions(t *testing.T) {
	for version := int16(0); version <= 3; version++ {
		kv := kmsg.OffsetCommitValue{Version: version, Offset: 42, LeaderEpoch: 5, Metadata: "x", CommitTimestamp: 7, ExpireTimestamp: 99}
		v, err := DecodeOffsetValue(kv.AppendTo(nil))
		if err != nil || v.Offset != 42 || v.Metadata != "x" || v.CommitTimestampMs != 7 {
			t.Fatalf("offset v%d: %+v %v", version, v, err)
		}
		if wantEpoch := map[bool]int32{true: 5, false: -1}[version >= 3]; v.LeaderEpoch != wantEpoch {
			t.Fatalf("offset v%d: leader epoch %d", version, v.LeaderEpoch)
		}
		if wantExpire := map[bool]int64{true: 99, false: -1}[version == 1]; v.ExpireTimestampMs != wantExpire {
			t.Fatalf("offset v%d: expire %d", version, v.ExpireTimestampMs)
		}

		instance := "i"
		kg := kmsg.GroupMetadataValue{Version: version, ProtocolType: "consumer", Generation: 3, CurrentStateTimestamp: 11,
			Members: []kmsg.GroupMetadataValueMember{{MemberID: "m", InstanceID: &instance, ClientID: "c", ClientHost: "h",
				RebalanceTimeoutMillis: 20, SessionTimeoutMillis: 10, Subscription: []byte{1}, Assignment: []byte{2}}}}
		g, err := DecodeGroupValue(kg.AppendTo(nil))
		if err != nil || g.Generation != 3 || len(g.Members) != 1 || g.Members[0].SessionTimeoutMs != 10 {
			t.Fatalf("group v%d: %+v %v", version, g, err)
		}
		m := g.Members[0]
		if (version >= 1) != (m.RebalanceTimeoutMs == 20) || (version >= 2) != (g.StateTimestampMs == 11) || (version >= 3) != (m.InstanceID == "i") {
			t.Fatalf("group v%d: version-gated fields wrong: %+v", version, g)
		}
	}
	key0 := kmsg.OffsetCommitKey{Version: 0, Group: "g", Topic: "t", Partition: 1}
	if k, err := DecodeKey(key0.AppendTo(nil)); err != nil || k.Kind != KeyOffset || k.Topic != "t" {
		t.Fatalf("key v0: %+v %v", k, err)
	}
}

func TestDecodeRejects(t *testing.T) {
	tests := []struct {
		name string
		fn   func([]byte) error
		b    []byte
		want error
	}{
		{"key empty", decodeKeyErr, nil, ErrMalformedRecord},
		{"key version 3 (KIP-848 records)", decodeKeyErr, []byte{0, 3, 0, 1, 'g'}, ErrUnsupportedVersion},
		{"key trailing", decodeKeyErr, []byte{0, 2, 0, 1, 'g', 0}, ErrMalformedRecord},
		{"key short string", decodeKeyErr, []byte{0, 2, 0, 9, 'g'}, ErrMalformedRecord},
		{"offset value v4 (flexible)", decodeOffsetErr, []byte{0, 4, 0, 0, 0, 0, 0, 0, 0, 1}, ErrUnsupportedVersion},
		{"offset value short", decodeOffsetErr, []byte{0, 3, 0, 0}, ErrMalformedRecord},
		{"group value huge member count", decodeGroupErr, append(encodeGroupValue(GroupValue{})[:2+2+4+2+2+8], 0x7f, 0xff, 0xff, 0xff), ErrMalformedRecord},
		{"group value negative version", decodeGroupErr, []byte{0xff, 0xff}, ErrUnsupportedVersion},
	}
	for _, tt := range tests {
		if err := tt.fn(tt.b); !errors.Is(err, tt.want) {
			t.Errorf("%s: err = %v, want %v", tt.name, err, tt.want)
		}
	}
}

func decodeKeyErr(b []byte) error    { _, err := DecodeKey(b); return err }
func decodeOffsetErr(b []byte) error { _, err := DecodeOffsetValue(b); return err }
func decodeGroupErr(b []byte) error  { _, err := DecodeGroupValue(b); return err }

// Kafka's placement: abs(String.hashCode) % partitions. Hash values are Java's.
func TestPartitionFor(t *testing.T) {
	hashes := []struct {
		s    string
		hash int32
	}{
		{"", 0},
		{"a", 97},
		{"hello", 99162322},
		{"Aa", 2112}, {"BB", 2112}, // Java's classic collision
		{"polygenelubricants", -1 << 31}, // hashCode == Integer.MIN_VALUE
		{"é", 233},                       // one UTF-16 unit
		{"😀", 1772899},                   // a surrogate pair: 0xD83D*31 + 0xDE00
	}
	for _, h := range hashes {
		if got := javaStringHashCode(h.s); got != h.hash {
			t.Errorf("javaStringHashCode(%q) = %d, want %d", h.s, got, h.hash)
		}
	}
	if p := PartitionFor("polygenelubricants", 50); p != 0 {
		t.Errorf("MinInt32 hash must map to partition 0 (Kafka's Utils.abs), got %d", p)
	}
	if p := PartitionFor("hello", 50); p != 99162322%50 {
		t.Errorf("PartitionFor(hello) = %d", p)
	}
	// A negative hash: Java's "zzzzzzz".hashCode() overflows.
	h := javaStringHashCode("zzzzzzzzzz")
	if h >= 0 {
		t.Fatalf("want a negative hash for the test, got %d", h)
	}
	if p := PartitionFor("zzzzzzzzzz", 50); p != (-h)%50 {
		t.Errorf("negative hash: got %d, want %d", p, (-h)%50)
	}
}

// Replaying the log, or any compaction of it that keeps each key's newest record (and
// tombstones), gives the same snapshot — the property a compacted __consumer_offsets needs.
func TestRebuildCompactionInvariant(t *testing.T) {
	rng := rand.New(rand.NewPCG(seed(t), 7))
	for iter := range 300 {
		var recs []Record
		for range 1 + rng.IntN(60) {
			group := fmt.Sprintf("g%d", rng.IntN(3))
			switch rng.IntN(6) {
			case 0:
				recs = append(recs, GroupTombstone(group))
			case 1:
				recs = append(recs, OffsetTombstone(group, "t", int32(rng.IntN(3))))
			case 2:
				recs = append(recs, GroupRecord(group, GroupValue{ProtocolType: "consumer", Generation: int32(rng.IntN(9)),
					Members: []MemberValue{{MemberID: "m", SessionTimeoutMs: 10}}}))
			default:
				recs = append(recs, OffsetRecord(group, "t", int32(rng.IntN(3)), OffsetValue{Offset: int64(rng.IntN(1000))}))
			}
		}
		full := replay(t, recs)
		// Compact: keep the newest record per key, and maybe drop tombstones whose key has
		// no earlier record left (what the cleaner does after delete.retention.ms).
		newest := map[string]int{}
		for i, r := range recs {
			newest[string(r.Key)] = i
		}
		var compacted []Record
		for i, r := range recs {
			if newest[string(r.Key)] == i && (r.Value != nil || rng.IntN(2) == 0) {
				compacted = append(compacted, r)
			}
		}
		if got := replay(t, compacted); !sameGroups(got, full) {
			t.Fatalf("iter %d: compacted replay differs:\n full %v\n compacted %v", iter, dump(full), dump(got))
		}
	}
}

func replay(t *testing.T, recs []Record) *Snapshot {
	t.Helper()
	// Through real batches, several records per batch, as the log stores them.
	b := batch.NewBuilder(batch.BuilderOptions{})
	var batches [][]byte
	for i := 0; i < len(recs); i += 4 {
		enc, err := EncodeBatch(nil, b, recs[i:min(i+4, len(recs))], 1)
		if err != nil {
			t.Fatal(err)
		}
		batch.SetBaseOffset(enc, int64(i))
		batches = append(batches, enc)
	}
	snap, err := Rebuild(batches)
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

func sameGroups(a, b *Snapshot) bool { return reflect.DeepEqual(a.Groups, b.Groups) }

func dump(s *Snapshot) string {
	out := ""
	for _, id := range s.GroupIDs() {
		g := s.Groups[id]
		out += fmt.Sprintf("%s{meta=%v offsets=%v} ", id, g.Metadata != nil, g.Offsets)
	}
	return out
}

func TestRebuildSkipsUnknownKeysAndFailsOnCorruptValues(t *testing.T) {
	r := NewReplayer()
	if err := r.Apply(Record{Key: []byte{0, 4, 0, 1, 'g'}, Value: []byte{1}}); err != nil {
		t.Fatalf("unknown key version must be skipped: %v", err)
	}
	if r.Snapshot().Skipped != 1 {
		t.Fatal("Skipped not counted")
	}
	bad := OffsetRecord("g", "t", 0, OffsetValue{})
	bad.Value = bad.Value[:5]
	if err := NewReplayer().Apply(bad); !errors.Is(err, ErrMalformedRecord) {
		t.Fatalf("corrupt value: %v", err)
	}
}

func FuzzDecodeKey(f *testing.F) {
	f.Add(encodeOffsetKey("g", "t", 1))
	f.Add(encodeGroupKey("g"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		k, err := DecodeKey(b)
		if err != nil {
			return
		}
		var again []byte
		if k.Kind == KeyGroup {
			again = encodeGroupKey(k.Group)
		} else {
			again = encodeOffsetKey(k.Group, k.Topic, k.Partition)
		}
		if k2, err := DecodeKey(again); err != nil || k2 != k {
			t.Fatalf("re-decode %+v: %+v %v", k, k2, err)
		}
	})
}

func FuzzDecodeOffsetValue(f *testing.F) {
	f.Add(encodeOffsetValue(OffsetValue{Offset: 5, LeaderEpoch: 1, Metadata: "meta", CommitTimestampMs: 9}))
	f.Add([]byte{0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := DecodeOffsetValue(b)
		if err != nil {
			return
		}
		v2, err := DecodeOffsetValue(encodeOffsetValue(v))
		if err != nil || v2.Offset != v.Offset || v2.Metadata != v.Metadata || v2.CommitTimestampMs != v.CommitTimestampMs {
			t.Fatalf("re-decode %+v: %+v %v", v, v2, err)
		}
	})
}

func FuzzDecodeGroupValue(f *testing.F) {
	f.Add(encodeGroupValue(GroupValue{ProtocolType: "consumer", Generation: 1, Protocol: "range", Leader: "a",
		Members: []MemberValue{{MemberID: "a", InstanceID: "i", Subscription: []byte{1}, Assignment: nil}}}))
	f.Add(encodeGroupValue(GroupValue{}))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := DecodeGroupValue(b)
		if err != nil {
			return
		}
		v2, err := DecodeGroupValue(encodeGroupValue(v))
		if err != nil || v2.Generation != v.Generation || len(v2.Members) != len(v.Members) {
			t.Fatalf("re-decode %+v: %+v %v", v, v2, err)
		}
	})
}

// Rebuild is fed whole stored batches: hostile ones must fail cleanly.
func FuzzRebuildBatch(f *testing.F) {
	b := batch.NewBuilder(batch.BuilderOptions{})
	enc, _ := EncodeBatch(nil, b, []Record{OffsetRecord("g", "t", 0, OffsetValue{Offset: 1}), GroupTombstone("g")}, 1)
	f.Add(enc)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		_, _ = Rebuild([][]byte{data})
	})
}

// Whatever group metadata decodes loads into a coordinator whose invariants hold.
func FuzzLoadGroupValue(f *testing.F) {
	f.Add(encodeGroupValue(GroupValue{ProtocolType: "consumer", Generation: 1, Protocol: "range", Leader: "a",
		Members: []MemberValue{{MemberID: "a", InstanceID: "i", SessionTimeoutMs: 10}, {MemberID: "a"}, {MemberID: "b", InstanceID: "i"}}}))
	f.Add(encodeGroupValue(GroupValue{ProtocolType: "consumer", Generation: 3, Leader: "x", Members: []MemberValue{{MemberID: "m"}}}))
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := DecodeGroupValue(b)
		if err != nil {
			return
		}
		snap := NewReplayer().Snapshot()
		snap.Groups["g"] = &LoadedGroup{Metadata: &v, Offsets: map[TopicPartition]OffsetValue{}}
		c := New(Config{OffsetsPartitions: 1})
		if err := c.Load(t0, 0, snap); err != nil {
			t.Fatal(err)
		}
		c.checkInvariants()
		c.Tick(t0.Add(time.Hour)) // sessions expire, the group rebalances
		c.checkInvariants()
	})
}
