package group

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/ringlog/ringlog/engine/batch"
)

// Key versions of __consumer_offsets records (the int16 every key starts with). Part of
// Kafka's format: must not change.
const (
	keyVersionOffsetV0 = 0 // OffsetCommitKey, written by Kafka before 0.9
	keyVersionOffset   = 1 // OffsetCommitKey
	keyVersionGroup    = 2 // GroupMetadataKey
)

// Value versions written. Kafka's version 4 of both is "flexible" (compact strings, tagged
// fields); ringlog writes and reads versions 0 to 3.
const (
	offsetValueVersion = 3
	groupValueVersion  = 3
	valueVersionMax    = 3
)

// Errors of the record decoders.
var (
	// ErrMalformedRecord is a key or value whose bytes do not parse.
	ErrMalformedRecord = errors.New("malformed __consumer_offsets record")
	// ErrUnsupportedVersion is a value version this package cannot read (Kafka's flexible
	// versions 4+), or a key version it does not serve (Kafka 3.7+'s consumer-protocol
	// records, key versions 3 and up).
	ErrUnsupportedVersion = errors.New("unsupported __consumer_offsets record version")
)

// Record is one __consumer_offsets record: a key and a value; a nil Value is a tombstone.
type Record struct {
	Key, Value []byte
}

// KeyKind says what a record's key names.
type KeyKind int8

const (
	KeyOffset KeyKind = iota + 1 // (group, topic, partition) → committed offset
	KeyGroup                     // group → group metadata
)

// Key is a decoded record key.
type Key struct {
	Kind      KeyKind
	Group     string
	Topic     string // KeyOffset only
	Partition int32  // KeyOffset only
}

// OffsetValue is a committed offset as stored (OffsetCommitValue).
type OffsetValue struct {
	Offset            int64
	LeaderEpoch       int32  // -1 when unknown (values before version 3)
	Metadata          string // the client's commit metadata
	CommitTimestampMs int64
	ExpireTimestampMs int64 // only in version 1 values; -1 otherwise
}

// MemberValue is one member in a GroupValue.
type MemberValue struct {
	MemberID           string
	InstanceID         string // group.instance.id; "" (null) for a dynamic member
	ClientID           string
	ClientHost         string
	RebalanceTimeoutMs int32
	SessionTimeoutMs   int32
	Subscription       []byte // the member's metadata for the chosen protocol
	Assignment         []byte // what the leader assigned it
}

// GroupValue is a group's metadata as stored (GroupMetadataValue): written when a
// generation's assignment is complete, when the group becomes empty, and when a static
// member is replaced.
type GroupValue struct {
	ProtocolType     string
	Generation       int32
	Protocol         string // "" (null) when the group is empty
	Leader           string // "" (null) when the group is empty
	StateTimestampMs int64  // when the group entered its current state; -1 unknown
	Members          []MemberValue
}

// OffsetRecord is the record that commits v for (group, topic, partition).
func OffsetRecord(group, topic string, partition int32, v OffsetValue) Record {
	return Record{Key: encodeOffsetKey(group, topic, partition), Value: encodeOffsetValue(v)}
}

// OffsetTombstone deletes the committed offset of (group, topic, partition).
func OffsetTombstone(group, topic string, partition int32) Record {
	return Record{Key: encodeOffsetKey(group, topic, partition)}
}

// GroupRecord is the record that stores group's metadata.
func GroupRecord(group string, v GroupValue) Record {
	return Record{Key: encodeGroupKey(group), Value: encodeGroupValue(v)}
}

// GroupTombstone deletes group's metadata (with OffsetTombstones for its offsets, the
// group is gone once the partition is compacted).
func GroupTombstone(group string) Record { return Record{Key: encodeGroupKey(group)} }

// Byte layouts (Kafka's; all integers big-endian, string = int16 length + bytes, nullable
// string length -1 = null, bytes = int32 length + bytes, array = int32 count + elements):
//
//	offset key  : version int16 (1) | group string | topic string | partition int32
//	group key   : version int16 (2) | group string
//	offset value: version int16 (3) | offset int64 | leader_epoch int32 (v3+)
//	              | metadata string | commit_timestamp int64 | expire_timestamp int64 (v1 only)
//	group value : version int16 (3) | protocol_type string | generation int32
//	              | protocol nullable string | leader nullable string
//	              | current_state_timestamp int64 (v2+)
//	              | members [ member_id string | group_instance_id nullable string (v3+)
//	                        | client_id string | client_host string
//	                        | rebalance_timeout int32 (v1+) | session_timeout int32
//	                        | subscription bytes | assignment bytes ]

func encodeOffsetKey(group, topic string, partition int32) []byte {
	b := make([]byte, 0, 2+2+len(group)+2+len(topic)+4)
	b = binary.BigEndian.AppendUint16(b, keyVersionOffset)
	b = appendString(b, group)
	b = appendString(b, topic)
	return binary.BigEndian.AppendUint32(b, uint32(partition))
}

func encodeGroupKey(group string) []byte {
	b := make([]byte, 0, 2+2+len(group))
	b = binary.BigEndian.AppendUint16(b, keyVersionGroup)
	return appendString(b, group)
}

func encodeOffsetValue(v OffsetValue) []byte {
	b := make([]byte, 0, 2+8+4+2+len(v.Metadata)+8)
	b = binary.BigEndian.AppendUint16(b, offsetValueVersion)
	b = binary.BigEndian.AppendUint64(b, uint64(v.Offset))
	b = binary.BigEndian.AppendUint32(b, uint32(v.LeaderEpoch))
	b = appendString(b, v.Metadata)
	return binary.BigEndian.AppendUint64(b, uint64(v.CommitTimestampMs))
}

func encodeGroupValue(v GroupValue) []byte {
	b := binary.BigEndian.AppendUint16(nil, groupValueVersion)
	b = appendString(b, v.ProtocolType)
	b = binary.BigEndian.AppendUint32(b, uint32(v.Generation))
	b = appendNullableString(b, v.Protocol)
	b = appendNullableString(b, v.Leader)
	b = binary.BigEndian.AppendUint64(b, uint64(v.StateTimestampMs))
	b = binary.BigEndian.AppendUint32(b, uint32(len(v.Members)))
	for _, m := range v.Members {
		b = appendString(b, m.MemberID)
		b = appendNullableString(b, m.InstanceID)
		b = appendString(b, m.ClientID)
		b = appendString(b, m.ClientHost)
		b = binary.BigEndian.AppendUint32(b, uint32(m.RebalanceTimeoutMs))
		b = binary.BigEndian.AppendUint32(b, uint32(m.SessionTimeoutMs))
		b = appendBytes(b, m.Subscription)
		b = appendBytes(b, m.Assignment)
	}
	return b
}

// DecodeKey decodes a record key.
func DecodeKey(b []byte) (Key, error) {
	r := reader{b: b}
	version := r.int16()
	var k Key
	switch {
	case r.err:
	case version == keyVersionOffsetV0 || version == keyVersionOffset:
		k = Key{Kind: KeyOffset, Group: r.string(), Topic: r.string(), Partition: r.int32()}
	case version == keyVersionGroup:
		k = Key{Kind: KeyGroup, Group: r.string()}
	default:
		return Key{}, fmt.Errorf("key version %d: %w", version, ErrUnsupportedVersion)
	}
	if err := r.finish(); err != nil {
		return Key{}, fmt.Errorf("key: %w", err)
	}
	return k, nil
}

// DecodeOffsetValue decodes a committed offset of any version from 0 to 3.
func DecodeOffsetValue(b []byte) (OffsetValue, error) {
	r := reader{b: b}
	version := r.int16()
	if !r.err && (version < 0 || version > valueVersionMax) {
		return OffsetValue{}, fmt.Errorf("offset value version %d: %w", version, ErrUnsupportedVersion)
	}
	v := OffsetValue{LeaderEpoch: -1, ExpireTimestampMs: -1}
	v.Offset = r.int64()
	if version >= 3 {
		v.LeaderEpoch = r.int32()
	}
	v.Metadata = r.string()
	v.CommitTimestampMs = r.int64()
	if version == 1 {
		v.ExpireTimestampMs = r.int64()
	}
	if err := r.finish(); err != nil {
		return OffsetValue{}, fmt.Errorf("offset value: %w", err)
	}
	return v, nil
}

// memberBytesMin is the fewest bytes one member of a version-0 group value takes; a member
// count is checked against it before anything is allocated.
const memberBytesMin = 2 + 2 + 2 + 4 + 4 + 4

// DecodeGroupValue decodes group metadata of any version from 0 to 3.
func DecodeGroupValue(b []byte) (GroupValue, error) {
	r := reader{b: b}
	version := r.int16()
	if !r.err && (version < 0 || version > valueVersionMax) {
		return GroupValue{}, fmt.Errorf("group value version %d: %w", version, ErrUnsupportedVersion)
	}
	v := GroupValue{StateTimestampMs: -1}
	v.ProtocolType = r.string()
	v.Generation = r.int32()
	v.Protocol = r.nullableString()
	v.Leader = r.nullableString()
	if version >= 2 {
		v.StateTimestampMs = r.int64()
	}
	if n := r.count(memberBytesMin); n > 0 {
		v.Members = make([]MemberValue, n)
	}
	for i := range v.Members {
		m := &v.Members[i]
		m.MemberID = r.string()
		if version >= 3 {
			m.InstanceID = r.nullableString()
		}
		m.ClientID = r.string()
		m.ClientHost = r.string()
		m.RebalanceTimeoutMs = -1
		if version >= 1 {
			m.RebalanceTimeoutMs = r.int32()
		}
		m.SessionTimeoutMs = r.int32()
		m.Subscription = r.bytes()
		m.Assignment = r.bytes()
	}
	if err := r.finish(); err != nil {
		return GroupValue{}, fmt.Errorf("group value: %w", err)
	}
	return v, nil
}

// EncodeBatch appends one RecordBatch v2 holding recs (all stamped tsMs) to dst, using b as
// scratch (reset first). The broker appends it to the group's __consumer_offsets partition.
func EncodeBatch(dst []byte, b *batch.Builder, recs []Record, tsMs int64) ([]byte, error) {
	b.ResetWith(batch.BuilderOptions{})
	for _, rec := range recs {
		b.Append(tsMs, rec.Key, rec.Value, nil)
	}
	out, err := b.Build(dst)
	if err != nil {
		return dst, fmt.Errorf("encode %d group records: %w", len(recs), err)
	}
	return out, nil
}

// DecodeBatch calls fn for every record of one stored batch of __consumer_offsets, with
// its offset. Control batches (transaction markers) carry no group state and are skipped.
// The Record's slices alias the batch (or a pooled buffer) and are valid only during fn.
func DecodeBatch(b []byte, fn func(offset int64, rec Record) error) error {
	h, err := batch.ParseHeader(b)
	if err != nil {
		return fmt.Errorf("__consumer_offsets batch: %w", err)
	}
	if h.Control() {
		return nil
	}
	return batch.Decode(b, func(offset, _ int64, r *batch.Record) error {
		return fn(offset, Record{Key: r.Key, Value: r.Value})
	})
}

func appendString(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(len(s)))
	return append(b, s...)
}

func appendNullableString(b []byte, s string) []byte {
	if s == "" {
		return binary.BigEndian.AppendUint16(b, 0xffff)
	}
	return appendString(b, s)
}

func appendBytes(b, p []byte) []byte {
	if p == nil {
		return binary.BigEndian.AppendUint32(b, 0xffffffff)
	}
	b = binary.BigEndian.AppendUint32(b, uint32(len(p)))
	return append(b, p...)
}

// reader is a sticky-error reader: after the first bad read every call returns a zero
// value; finish reports whether everything was read and nothing is left over.
type reader struct {
	b   []byte
	err bool
}

func (r *reader) take(n int) []byte {
	if r.err || n < 0 || n > len(r.b) {
		r.err, r.b = true, nil
		return nil
	}
	out := r.b[:n]
	r.b = r.b[n:]
	return out
}

func (r *reader) int16() int16 {
	if b := r.take(2); b != nil {
		return int16(binary.BigEndian.Uint16(b))
	}
	return 0
}

func (r *reader) int32() int32 {
	if b := r.take(4); b != nil {
		return int32(binary.BigEndian.Uint32(b))
	}
	return 0
}

func (r *reader) int64() int64 {
	if b := r.take(8); b != nil {
		return int64(binary.BigEndian.Uint64(b))
	}
	return 0
}

func (r *reader) string() string { return string(r.take(int(r.int16()))) }

func (r *reader) nullableString() string {
	n := int(r.int16())
	if n == -1 {
		return ""
	}
	return string(r.take(n))
}

func (r *reader) bytes() []byte {
	n := int(r.int32())
	if n == -1 {
		return nil
	}
	return slices.Clone(r.take(n))
}

// count reads an array length and checks that count elements of at least elemBytesMin
// bytes each fit in what remains.
func (r *reader) count(elemBytesMin int) int {
	n := int(r.int32())
	if n < 0 || n > len(r.b)/elemBytesMin {
		r.err, r.b = true, nil
		return 0
	}
	return n
}

func (r *reader) finish() error {
	switch {
	case r.err:
		return ErrMalformedRecord
	case len(r.b) != 0:
		return fmt.Errorf("%w: %d trailing bytes", ErrMalformedRecord, len(r.b))
	}
	return nil
}
