package client

// murmur2 is Kafka's murmur2 hash (org.apache.kafka.common.utils.Utils.murmur2), so that
// keyed records land on the partitions a Kafka client would choose.
func murmur2(data []byte) int32 {
	const (
		seed uint32 = 0x9747b28c
		m    uint32 = 0x5bd1e995
		r           = 24
	)
	length := len(data)
	h := seed ^ uint32(length)
	for i := 0; i+4 <= length; i += 4 {
		k := uint32(data[i]) | uint32(data[i+1])<<8 | uint32(data[i+2])<<16 | uint32(data[i+3])<<24
		k *= m
		k ^= k >> r
		k *= m
		h *= m
		h ^= k
	}
	tail := data[length&^3:]
	switch len(tail) {
	case 3:
		h ^= uint32(tail[2]) << 16
		fallthrough
	case 2:
		h ^= uint32(tail[1]) << 8
		fallthrough
	case 1:
		h ^= uint32(tail[0])
		h *= m
	}
	h ^= h >> 13
	h *= m
	h ^= h >> 15
	return int32(h)
}

// KeyPartition returns the partition Kafka's default partitioner picks for a non-null key:
// toPositive(murmur2(key)) % partitions.
func KeyPartition(key []byte, partitions int) int32 {
	return int32((uint32(murmur2(key)) & 0x7fffffff) % uint32(partitions))
}
