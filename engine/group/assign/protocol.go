package assign

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
)

// ProtocolType is the JoinGroup protocol type of consumers.
const ProtocolType = "consumer"

// Versions written by the encoders. Part of the wire format.
const (
	subscriptionVersion = 3
	assignmentVersion   = 1
)

// ErrMalformed is returned by the decoders for bytes that are not a valid encoding.
var ErrMalformed = errors.New("malformed consumer protocol data")

// Subscription is what a consumer sends as its JoinGroup protocol metadata.
type Subscription struct {
	Topics     []string
	UserData   []byte
	Owned      []TopicPartition
	Generation int32 // -1 when none
	Rack       string
}

// Assignment is what the leader sends each member in SyncGroup.
type Assignment struct {
	Partitions []TopicPartition
	UserData   []byte
}

// Member turns a decoded subscription into an assignor input.
func (s Subscription) Member(memberID, instanceID string) Member {
	return Member{ID: memberID, InstanceID: instanceID, Topics: s.Topics, Owned: s.Owned, Generation: s.Generation}
}

// EncodeSubscription appends s as a version-3 subscription to dst.
func EncodeSubscription(dst []byte, s Subscription) []byte {
	dst = binary.BigEndian.AppendUint16(dst, subscriptionVersion)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(s.Topics)))
	for _, t := range s.Topics {
		dst = appendString(dst, t)
	}
	dst = appendBytes(dst, s.UserData)
	dst = appendPartitions(dst, s.Owned)
	dst = binary.BigEndian.AppendUint32(dst, uint32(s.Generation))
	if s.Rack == "" {
		return binary.BigEndian.AppendUint16(dst, 0xffff)
	}
	return appendString(dst, s.Rack)
}

// DecodeSubscription decodes a subscription of any version.
func DecodeSubscription(b []byte) (Subscription, error) {
	r := reader{b: b}
	s := Subscription{Generation: -1}
	version := r.int16()
	if n := r.count(2); n > 0 {
		s.Topics = make([]string, 0, n)
		for range n {
			s.Topics = append(s.Topics, r.string())
		}
	}
	s.UserData = r.bytes()
	if version >= 1 {
		s.Owned = r.partitions()
	}
	if version >= 2 {
		s.Generation = r.int32()
	}
	if version >= 3 {
		s.Rack = r.nullableString()
	}
	if version < 0 {
		r.fail()
	}
	if r.err {
		return Subscription{}, fmt.Errorf("subscription: %w", ErrMalformed)
	}
	return s, nil
}

// EncodeAssignment appends a as a version-1 assignment to dst, partitions grouped by topic.
func EncodeAssignment(dst []byte, a Assignment) []byte {
	dst = binary.BigEndian.AppendUint16(dst, assignmentVersion)
	dst = appendPartitions(dst, a.Partitions)
	return appendBytes(dst, a.UserData)
}

// DecodeAssignment decodes an assignment of any version. Empty input is an empty
// assignment (what a coordinator returns to a member the leader left out).
func DecodeAssignment(b []byte) (Assignment, error) {
	if len(b) == 0 {
		return Assignment{}, nil
	}
	r := reader{b: b}
	version := r.int16()
	a := Assignment{Partitions: r.partitions()}
	a.UserData = r.bytes()
	if version < 0 {
		r.fail()
	}
	if r.err {
		return Assignment{}, fmt.Errorf("assignment: %w", ErrMalformed)
	}
	return a, nil
}

func appendString(dst []byte, s string) []byte {
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(s)))
	return append(dst, s...)
}

func appendBytes(dst, b []byte) []byte {
	if b == nil {
		return binary.BigEndian.AppendUint32(dst, 0xffffffff)
	}
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(b)))
	return append(dst, b...)
}

// appendPartitions writes [topic string, partitions [int32]] grouped by topic, in sorted order.
func appendPartitions(dst []byte, tps []TopicPartition) []byte {
	sorted := slices.Clone(tps)
	SortPartitions(sorted)
	var topics int
	for i := range sorted {
		if i == 0 || sorted[i].Topic != sorted[i-1].Topic {
			topics++
		}
	}
	dst = binary.BigEndian.AppendUint32(dst, uint32(topics))
	for i := 0; i < len(sorted); {
		j := i
		for j < len(sorted) && sorted[j].Topic == sorted[i].Topic {
			j++
		}
		dst = appendString(dst, sorted[i].Topic)
		dst = binary.BigEndian.AppendUint32(dst, uint32(j-i))
		for _, tp := range sorted[i:j] {
			dst = binary.BigEndian.AppendUint32(dst, uint32(tp.Partition))
		}
		i = j
	}
	return dst
}

// reader is a sticky-error reader: after the first short read every call returns zero
// values, and the caller checks err once at the end.
type reader struct {
	b   []byte
	err bool
}

func (r *reader) fail() { r.err, r.b = true, nil }

func (r *reader) take(n int) []byte {
	if r.err || n < 0 || n > len(r.b) {
		r.fail()
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

// count reads an array length and checks that count elements of at least elemBytesMin
// each fit in what remains, so a hostile count cannot make the caller allocate.
func (r *reader) count(elemBytesMin int) int {
	n := int(r.int32())
	if n < 0 || n > len(r.b)/elemBytesMin {
		if n != -1 { // -1 is a null array: empty
			r.fail()
		}
		return 0
	}
	return n
}

func (r *reader) string() string {
	n := int(r.int16())
	return string(r.take(n))
}

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

func (r *reader) partitions() []TopicPartition {
	var out []TopicPartition
	topics := r.count(2 + 4)
	for range topics {
		topic := r.string()
		n := r.count(4)
		for range n {
			out = append(out, TopicPartition{topic, r.int32()})
		}
	}
	return out
}
