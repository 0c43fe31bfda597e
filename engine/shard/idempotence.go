package shard

import (
	"fmt"

	"github.com/ringlog/ringlog/engine"
	"github.com/ringlog/ringlog/engine/batch"
)

// Idempotent producers. The per-partition sequence checks (dedup, out-of-order, stale epoch
// in that partition) run inside engine.Log.AppendBatches on the owning shard. Two things are
// broker-wide and live here: handing out producer ids and epochs (InitProducerID, backed by
// the data directory's engine.ProducerIDs), and fencing — a batch whose epoch is older than
// the one its producer name was last given is refused on every partition, also on those the
// new instance has not written to yet.

// InitProducerID hands out a producer id and epoch; see engine.ProducerIDs.Init (current is
// engine.NoProducer for a producer starting up). It writes a file (fsync) when it reserves
// a block of ids or bumps a name's epoch: call it off the shard loops.
func (b *Broker) InitProducerID(name string, current engine.ProducerIdentity) (engine.ProducerIdentity, error) {
	if b.closing.Load() {
		return engine.ProducerIdentity{}, ErrShuttingDown
	}
	return b.producerIDs.Init(name, current)
}

// ProducerIdentity returns the identity a producer name holds, initialising the name (at a
// fresh id, epoch 0) when it has none; an existing name keeps its epoch (nothing is
// fenced). The HTTP produce API's X-Producer-Id uses it: a request is a stateless retry
// of the name's current session, not a new producer instance. May write a file: call it
// off the shard loops.
func (b *Broker) ProducerIdentity(name string) (engine.ProducerIdentity, error) {
	if b.closing.Load() {
		return engine.ProducerIdentity{}, ErrShuttingDown
	}
	return b.producerIDs.Resume(name)
}

// SetClusterProducerNames replaces the identities of the cluster's producer names (the
// controller's map, replication/cluster at each metadata change): a batch with an older
// epoch than its name's is fenced from then on. Any goroutine.
func (b *Broker) SetClusterProducerNames(names map[string]engine.ProducerIdentity) {
	b.producerIDs.SetClusterNames(names)
}

// checkFenced refuses batches whose producer epoch is older than the current epoch of their
// producer's name. Lock-free; any goroutine.
func (b *Broker) checkFenced(batches [][]byte) error {
	for _, raw := range batches {
		h, err := batch.ParseHeader(raw)
		if err != nil || h.ProducerID < 0 {
			continue // the log validates it and refuses it if it is bad
		}
		if current, ok := b.producerIDs.CurrentEpoch(h.ProducerID); ok && h.ProducerEpoch < current {
			return fmt.Errorf("%w: producer %d epoch %d, its name now holds epoch %d", engine.ErrProducerFenced, h.ProducerID, h.ProducerEpoch, current)
		}
	}
	return nil
}
