package controller

import (
	"errors"
	"fmt"
)

// Inter-broker protocol versions (a simplified Kafka inter.broker.protocol.version /
// KIP-584 finalized feature). Every broker registers the range of versions it can speak
// (BrokerRegistration.ProtocolMin..ProtocolMax); the metadata holds the cluster's
// finalized version (Metadata.FinalizedVersion), the one every broker speaks. A broker
// whose range excludes it is refused registration (ErrUnsupportedProtocolVersion): it
// leads nothing and joins no ISR. FinalizeVersion raises it once every live broker
// supports the new one; it never goes down.
//
// Versions (their numbers are in the raft log, snapshots and frames; they must not change):
//
//	1  brokers before versions existed: a registration without a range means [1, 1];
//	   producer names in each broker's producer-ids.json
//	2  producer names kept by the controller (InitProducerName); replica fetches and
//	   broker-to-broker Controller requests carry the finalized version (frame version 1)
const (
	ProtocolVersionLegacy         uint16 = 1
	ProtocolVersionNamedProducers uint16 = 2
	// ProtocolVersionMin and ProtocolVersionMax are the range this build speaks.
	ProtocolVersionMin = ProtocolVersionLegacy
	ProtocolVersionMax = ProtocolVersionNamedProducers
)

// Errors of registration and FinalizeVersion.
var (
	// ErrUnsupportedProtocolVersion: a broker's range excludes the version asked (the
	// finalized one at registration, the new one at FinalizeVersion).
	ErrUnsupportedProtocolVersion = errors.New("unsupported inter-broker protocol version")
	// ErrInvalidFinalizedVersion: FinalizeVersion below the finalized version (no
	// downgrades) or below 1.
	ErrInvalidFinalizedVersion = errors.New("invalid finalized protocol version")
)

// FinalizeRequest raises the cluster's finalized protocol version (CmdFinalizeVersion).
type FinalizeRequest struct {
	Version uint16
}

// ProtocolRange is a broker's supported protocol versions, a registration without one
// meaning the legacy [1, 1].
func (r *BrokerRegistration) ProtocolRange() (lo, hi uint16) {
	if r.ProtocolMax == 0 {
		return ProtocolVersionLegacy, ProtocolVersionLegacy
	}
	return r.ProtocolMin, r.ProtocolMax
}

// Finalized is the cluster's finalized protocol version (1 for metadata from before
// versions existed).
func (m *Metadata) Finalized() uint16 { return max(m.FinalizedVersion, ProtocolVersionLegacy) }

// checkRegistration refuses a broker whose protocol range excludes the finalized
// version. The first broker of a new cluster finalizes its own highest version.
func (m *Metadata) checkRegistration(r *BrokerRegistration) error {
	lo, hi := r.ProtocolRange()
	if lo < ProtocolVersionLegacy || lo > hi {
		return fmt.Errorf("broker %d registers protocol versions %d-%d: %w", r.ID, lo, hi, ErrUnsupportedProtocolVersion)
	}
	if m.FinalizedVersion == 0 && len(m.Brokers) == 0 {
		return nil
	}
	if f := m.Finalized(); f < lo || f > hi {
		return fmt.Errorf("broker %d supports protocol versions %d-%d, the cluster's finalized version is %d (upgrade the broker to a build that speaks %d): %w",
			r.ID, lo, hi, f, f, ErrUnsupportedProtocolVersion)
	}
	return nil
}

// CheckRegistration is checkRegistration for the controller leader's broker, which
// refuses a registration it can tell is doomed without putting it in the raft log.
func (m *Metadata) CheckRegistration(r *BrokerRegistration) error { return m.checkRegistration(r) }

// finalizeVersion raises the finalized version to r.Version when every live broker
// supports it, and returns it.
func (m *Metadata) finalizeVersion(r *FinalizeRequest) (uint16, error) {
	if r.Version < ProtocolVersionLegacy || r.Version < m.Finalized() {
		return 0, fmt.Errorf("finalize protocol version %d, finalized %d (versions never go down): %w", r.Version, m.Finalized(), ErrInvalidFinalizedVersion)
	}
	for _, id := range m.brokerIDs() {
		b := m.Brokers[id]
		if b.Fenced {
			continue
		}
		if lo, hi := b.protocolRange(); r.Version < lo || r.Version > hi {
			return 0, fmt.Errorf("finalize protocol version %d: live broker %d supports %d-%d (upgrade it first): %w", r.Version, id, lo, hi, ErrUnsupportedProtocolVersion)
		}
	}
	m.FinalizedVersion = r.Version
	return r.Version, nil
}

// protocolRange is the broker's registered range ([1, 1] for a broker registered before
// versions existed).
func (b *Broker) protocolRange() (lo, hi uint16) {
	if b.ProtocolMax == 0 {
		return ProtocolVersionLegacy, ProtocolVersionLegacy
	}
	return b.ProtocolMin, b.ProtocolMax
}

// ProtocolRange is protocolRange for readers outside the package (cluster describe).
func (b *Broker) ProtocolRange() (lo, hi uint16) { return b.protocolRange() }
