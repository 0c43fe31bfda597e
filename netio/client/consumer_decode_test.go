package client

import (
	"errors"
	"testing"

	"github.com/ringlog/ringlog/engine/batch"
	"github.com/ringlog/ringlog/netio/wire"
)

// TestDecodeRecordsCorruptBatch: a batch that fails its CRC on the client is reported with
// the same sentinel as one the broker found corrupt, and the position does not move.
func TestDecodeRecordsCorruptBatch(t *testing.T) {
	b := batch.NewBuilder(batch.BuilderOptions{})
	b.Append(1, nil, []byte("value"), nil)
	records, err := b.Build(nil)
	if err != nil {
		t.Fatal(err)
	}
	records[len(records)-1] ^= 1
	a := &assignment{position: 0}
	_, err = decodeRecords(topicPartition{"t", 0}, records, 0, a, nil)
	if !errors.Is(err, wire.ErrCorruptMessage) || !errors.Is(err, batch.ErrCorrupt) || a.position != 0 {
		t.Fatalf("decode of a corrupt batch: %v, position %d", err, a.position)
	}
}
