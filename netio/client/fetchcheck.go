package client

import (
	"encoding/binary"
	"hash/crc32"

	"github.com/ringlog/ringlog/engine/batch"
	"github.com/ringlog/ringlog/netio/wire"
)

// fetchChecker checks the CRC-32C of every record batch of a Fetch response while the
// response is still arriving: after each read from the socket, it walks the response's
// structure as far as the bytes allow and runs crc32.Update over the new bytes of the
// batch they belong to. The bytes are then still in the CPU cache (a read brings 100-500
// KiB here), where CRC-32C runs about 4x faster than over a whole 16 MiB answer read
// back from memory once it is complete (docs/benchmarks.md, "Egress and the consumer's
// CRC (issue 14, session 8)"), and the check overlaps the decode of the previous answer,
// which runs on the caller's goroutine.
//
// It only ever vouches for bytes it checked: per partition (in response order), the
// length of the prefix of its records made of whole batches whose stored CRC matched the
// computed one. apply hands that to the decoded response (wire.FetchResponsePartition's
// RecordsCRCChecked), and the consumer then decodes those batches without a second CRC
// pass (batch.DecodeCRCChecked); everything after the first mismatch, a malformed header
// or a structure the walk does not follow is checked by the decoder as before. Its
// memory is one entry per partition of the response, reused from frame to frame.
//
// The Fetch response payload (netio/wire, FetchResponse.ReadFrom):
//
//	throttleMs int32 | topics int32 | per topic: name (int16 length + bytes) |
//	partitions int32 | per partition: partition int32 | error int16 | message (int16
//	length + bytes) | highWatermark int64 | logStartOffset int64 | records (int32 length
//	+ bytes, whole batches and at most one partial batch at the end)
type fetchChecker struct {
	on             bool
	state          checkState
	pos            int // payload offset of the next field to parse
	topicsLeft     int32
	partitionsLeft int32
	recordsEnd     int    // payload offset where the current partition's records end
	batchStart     int    // payload offset of the batch being checked
	batchEnd       int    // its end; 0 until its header is in
	crcAt          int    // bytes of the batch before this offset are in crc
	crc            uint32 // CRC-32C of the batch's bytes [batch.CRCStart, crcAt)
	storedCRC      uint32
	checked        []checkedRecords // one per partition with records, in response order
}

// checkedRecords is what fetchChecker vouches for in one partition's records.
type checkedRecords struct {
	start   int // payload offset of the records
	checked int // bytes of whole batches from start whose CRC-32C matched
}

type checkState uint8

const (
	checkHead checkState = iota
	checkTopic
	checkPartition
	checkBatch
	checkDone
)

// Sizes of the fixed parts of the response layout above.
const (
	fetchHeadBytes         = 4 + 4     // throttleMs, topic count
	fetchPartitionLead     = 4 + 2 + 2 // partition, error code, message length
	fetchPartitionTailSize = 8 + 8 + 4 // highWatermark, logStartOffset, records length
	stringLengthBytes      = 2         // int16 before a string
	topicTailBytes         = 4         // partition count after the topic name
	checkNoString          = int16(-1) // a null string on the wire
)

var castagnoliTable = crc32.MakeTable(crc32.Castagnoli)

// reset starts a frame: on says it is a Fetch response without a frame-level error.
func (fc *fetchChecker) reset(on bool) {
	*fc = fetchChecker{on: on, checked: fc.checked[:0]}
}

// advance checks what payload[:have] (the bytes read so far) allows.
func (fc *fetchChecker) advance(payload []byte) {
	for fc.on {
		switch fc.state {
		case checkHead:
			if len(payload) < fc.pos+fetchHeadBytes {
				return
			}
			fc.topicsLeft = int32(binary.BigEndian.Uint32(payload[fc.pos+4:]))
			fc.pos += fetchHeadBytes
			fc.state = checkTopic
		case checkTopic:
			if fc.topicsLeft <= 0 {
				fc.on = false // done (a null or negative count: the decoder says what is wrong)
				return
			}
			n, ok := stringBytes(payload, fc.pos)
			if !ok || len(payload) < fc.pos+stringLengthBytes+n+topicTailBytes {
				fc.on = ok
				return
			}
			fc.partitionsLeft = int32(binary.BigEndian.Uint32(payload[fc.pos+stringLengthBytes+n:]))
			fc.pos += stringLengthBytes + n + topicTailBytes
			fc.topicsLeft--
			fc.state = checkPartition
		case checkPartition:
			if fc.partitionsLeft <= 0 {
				fc.state = checkTopic
				continue
			}
			n, ok := stringBytes(payload, fc.pos+fetchPartitionLead-stringLengthBytes)
			end := fc.pos + fetchPartitionLead + n + fetchPartitionTailSize
			if !ok || len(payload) < end {
				fc.on = ok
				return
			}
			length := int32(binary.BigEndian.Uint32(payload[end-4:]))
			fc.pos = end
			fc.partitionsLeft--
			if length > 0 {
				fc.recordsEnd = fc.pos + int(length)
				fc.batchStart, fc.batchEnd = fc.pos, 0
				fc.checked = append(fc.checked, checkedRecords{start: fc.pos})
				fc.state = checkBatch
			}
		case checkBatch:
			if !fc.advanceBatch(payload) {
				return
			}
		}
	}
}

// stringBytes reads the length of the string whose int16 length is at off: 0 while that
// is not in yet (the callers' length checks include it), false when it is malformed
// (below -1: the checker stops).
func stringBytes(payload []byte, off int) (int, bool) {
	if len(payload) < off+stringLengthBytes {
		return 0, true
	}
	n := int16(binary.BigEndian.Uint16(payload[off:]))
	switch {
	case n == checkNoString:
		return 0, true
	case n < 0:
		return 0, false
	}
	return int(n), true
}

// advanceBatch moves the batch walk of the current partition's records as far as payload
// allows; false: it needs more bytes.
func (fc *fetchChecker) advanceBatch(payload []byte) bool {
	for fc.batchStart < fc.recordsEnd {
		if fc.batchEnd == 0 {
			if fc.recordsEnd-fc.batchStart < batch.HeaderSize {
				break // a partial header at the end, as the protocol allows
			}
			if len(payload) < fc.batchStart+batch.HeaderSize {
				return false
			}
			h, err := batch.ParseHeader(payload[fc.batchStart:])
			if err != nil || fc.batchStart+h.Size() > fc.recordsEnd {
				break // not a batch (the decoder reports it) or a partial one at the end
			}
			fc.batchEnd = fc.batchStart + h.Size()
			fc.crcAt, fc.crc, fc.storedCRC = fc.batchStart+batch.CRCStart, 0, h.CRC
		}
		end := min(len(payload), fc.batchEnd)
		if end > fc.crcAt {
			fc.crc = crc32.Update(fc.crc, castagnoliTable, payload[fc.crcAt:end])
			fc.crcAt = end
		}
		if fc.crcAt < fc.batchEnd {
			return false
		}
		if fc.crc != fc.storedCRC {
			break // the decoder checks this batch again and reports it
		}
		last := &fc.checked[len(fc.checked)-1]
		last.checked = fc.batchEnd - last.start
		fc.batchStart, fc.batchEnd = fc.batchEnd, 0
	}
	fc.pos = fc.recordsEnd
	fc.state = checkPartition
	return true
}

// apply sets RecordsCRCChecked on resp, decoded from payload, for each partition whose
// records start where the walk found them (anything else stays unchecked, 0).
func (fc *fetchChecker) apply(resp *wire.FetchResponse, payload []byte) {
	i := 0
	for t := range resp.Topics {
		partitions := resp.Topics[t].Partitions
		for j := range partitions {
			p := &partitions[j]
			if len(p.Records) == 0 {
				continue
			}
			if i == len(fc.checked) {
				return
			}
			c := fc.checked[i]
			i++
			if c.start >= len(payload) || &payload[c.start] != &p.Records[0] {
				return // the walk and the decoder disagree: vouch for nothing more
			}
			p.RecordsCRCChecked = min(c.checked, len(p.Records))
		}
	}
}
