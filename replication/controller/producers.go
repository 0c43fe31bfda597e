package controller

import (
	"errors"
	"fmt"
	"maps"
	"math"
)

// Named producers cluster-wide (InitProducerName): the controller keeps every producer
// name's (producer id, epoch), so that the name initialised at any broker bumps one epoch
// and every partition leader fences the older one (Kafka keeps the same map in its
// transaction coordinator's log). A name's first id, and its next one when the epoch is
// exhausted, is taken from the producer id counter (NextProducerID), so it never overlaps
// a block of AllocateProducerIDs.
//
// Every broker holds the map in its view of the metadata and a metadata watch carries it,
// so it is bounded: producerNamesMax names of at most ProducerNameBytesMax bytes, ~80 bytes
// of JSON each (~330 KiB at the limit). Metadata.ProducerNames is replaced whole by every
// change (copy-on-write), never written in place, so that Clone shares it.
const (
	// ProducerNameBytesMax bounds a producer name; the same as the broker's own limit
	// (engine.ProducerNameBytesMax, a Kafka transactional.id of 255 bytes).
	ProducerNameBytesMax = 255
	// producerNamesMax bounds the names the controller keeps.
	producerNamesMax = 4096
	// producerEpochMax is the last epoch a name reaches before it moves to a fresh id at
	// epoch 0 (Kafka's rule; the epoch is an int16 on the wire).
	producerEpochMax = math.MaxInt16 - 1
)

// Errors of InitProducerName.
var (
	ErrInvalidProducerName = errors.New("invalid producer name")
	ErrTooManyProducers    = errors.New("too many producer names")
	// ErrProducerFenced: the caller holds an identity the name has moved past (a newer
	// instance took the name).
	ErrProducerFenced = errors.New("producer fenced: a newer instance holds the name")
)

// ProducerIdentity is a named producer's id and epoch.
type ProducerIdentity struct {
	ID    int64
	Epoch int16
}

// ProducerNameRequest initialises a producer name (CmdInitProducerName).
type ProducerNameRequest struct {
	Name string
	// Current is the identity the caller holds (ID -1: none, a producer starting up). A
	// running producer bumping its own epoch passes it; when a newer instance has taken the
	// name since, the command is refused with ErrProducerFenced.
	Current ProducerIdentity
	// KeepEpoch: answer a known name's identity as it is (no bump, nothing fenced); an
	// unknown name is initialised. The HTTP API's X-Producer-Id resumes the name's session.
	KeepEpoch bool `json:",omitempty"`
}

// initProducerName gives r.Name its next identity: the same id one epoch later, or a fresh
// id at epoch 0 for a new name or an exhausted epoch.
func (m *Metadata) initProducerName(r *ProducerNameRequest) (*ProducerIdentity, error) {
	if r.Name == "" || len(r.Name) > ProducerNameBytesMax {
		return nil, fmt.Errorf("%w: %d bytes, want 1 to %d", ErrInvalidProducerName, len(r.Name), ProducerNameBytesMax)
	}
	prev, known := m.ProducerNames[r.Name]
	if r.Current.ID >= 0 && (!known || prev != r.Current) {
		return nil, fmt.Errorf("%w: producer %q holds id %d epoch %d, the name is at %+v", ErrProducerFenced, r.Name, r.Current.ID, r.Current.Epoch, prev)
	}
	if known && r.KeepEpoch {
		return &prev, nil
	}
	if !known && len(m.ProducerNames) >= producerNamesMax {
		return nil, fmt.Errorf("%w: the controller keeps at most %d names", ErrTooManyProducers, producerNamesMax)
	}
	next := ProducerIdentity{ID: prev.ID, Epoch: prev.Epoch + 1}
	if !known || prev.Epoch >= producerEpochMax {
		first := max(m.NextProducerID, ProducerIDFloor)
		if first == math.MaxInt64 {
			return nil, fmt.Errorf("next id %d: %w", first, ErrProducerIDsExhausted)
		}
		next = ProducerIdentity{ID: first}
		m.NextProducerID = first + 1
	}
	names := make(map[string]ProducerIdentity, len(m.ProducerNames)+1)
	maps.Copy(names, m.ProducerNames)
	names[r.Name] = next
	m.ProducerNames = names
	return &next, nil
}

// validateProducerNames checks the restored map: bounded, names valid, ids distinct and
// below the counter.
func (m *Metadata) validateProducerNames() error {
	if len(m.ProducerNames) > producerNamesMax {
		return fmt.Errorf("%d producer names: %w", len(m.ProducerNames), ErrCorruptMetadata)
	}
	ids := make(map[int64]bool, len(m.ProducerNames))
	for name, id := range m.ProducerNames {
		if name == "" || len(name) > ProducerNameBytesMax || id.ID < 0 || id.ID >= m.NextProducerID || id.Epoch < 0 || ids[id.ID] {
			return fmt.Errorf("producer name %q holds %+v (next id %d): %w", name, id, m.NextProducerID, ErrCorruptMetadata)
		}
		ids[id.ID] = true
	}
	return nil
}
