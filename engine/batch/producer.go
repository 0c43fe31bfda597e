package batch

import (
	"encoding/binary"
	"hash/crc32"
)

// SetProducer rewrites the producer id, producer epoch and base sequence of the batch at the
// start of b and recomputes its CRC (the three fields are inside the checksummed range). An
// idempotent producer uses it when it moves its unacknowledged batches to a new producer
// epoch. b must hold exactly one batch that passed Validate (or came from Build).
func SetProducer(b []byte, producerID int64, epoch int16, baseSequence int32) {
	mustHoldHeader(b, "SetProducer")
	binary.BigEndian.PutUint64(b[offsetProducerID:], uint64(producerID))
	binary.BigEndian.PutUint16(b[offsetProducerEpoch:], uint16(epoch))
	binary.BigEndian.PutUint32(b[offsetBaseSequence:], uint32(baseSequence))
	binary.BigEndian.PutUint32(b[offsetCRC:], crc32.Checksum(b[offsetAttributes:], castagnoli))
}
