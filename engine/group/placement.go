package group

import "unicode/utf16"

// OffsetsTopic is the internal, compacted topic that holds committed offsets and group
// metadata.
const OffsetsTopic = "__consumer_offsets"

// OffsetsPartitionsDefault is Kafka's default partition count of OffsetsTopic
// (offsets.topic.num.partitions). The count must never change once groups exist: it decides
// where every group's records live.
const OffsetsPartitionsDefault = 50

// PartitionFor returns the partition of OffsetsTopic that holds groupID's offsets and
// metadata; the broker leading that partition is the group's coordinator. It is Kafka's
// placement, so that a ringlog broker and a Kafka cluster put a group in the same place:
//
//	abs(javaStringHashCode(groupID)) % partitions
//
// where javaStringHashCode is Java's String.hashCode — s[0]*31^(n-1) + ... + s[n-1] in
// wrapping 32-bit arithmetic over the UTF-16 code units of the string — and abs maps
// math.MinInt32 to 0 (Kafka's Utils.abs, unlike Java's Math.abs which would leave it
// negative). Go strings are UTF-8: a group id is decoded rune by rune (invalid bytes become
// U+FFFD, one per byte) and re-encoded as UTF-16, surrogate pairs included. partitions must
// be positive.
func PartitionFor(groupID string, partitions int32) int32 {
	if partitions <= 0 {
		panic("group: PartitionFor needs a positive partition count")
	}
	h := javaStringHashCode(groupID)
	if h == -1<<31 {
		h = 0
	} else if h < 0 {
		h = -h
	}
	return h % partitions
}

// javaStringHashCode is java.lang.String.hashCode of s.
func javaStringHashCode(s string) int32 {
	var h int32
	for _, r := range s {
		if r1, r2 := utf16.EncodeRune(r); r1 != '\uFFFD' || r2 != '\uFFFD' {
			h = 31*h + r1
			h = 31*h + r2
			continue
		}
		h = 31*h + r
	}
	return h
}
