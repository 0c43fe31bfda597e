package controller

import (
	"encoding/json"
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"
)

// CommandType names a controller command.
type CommandType uint8

// Command types. Their values are in the raft log and snapshots: they must not change.
const (
	CmdRegisterBroker CommandType = 1
	CmdHeartbeat      CommandType = 2
	CmdExpireSessions CommandType = 3
	CmdCreateTopic    CommandType = 4
	CmdDeleteTopic    CommandType = 5
	CmdSetUnclean     CommandType = 6
	CmdAlterISR       CommandType = 7
	CmdReassign       CommandType = 8
	CmdElectPreferred CommandType = 9
	CmdAlterConfig    CommandType = 10
	// CmdAllocateProducerIDs reserves the next block of producer ids for a broker (Kafka's
	// AllocateProducerIds, KIP-730).
	CmdAllocateProducerIDs CommandType = 11
	// CmdInitProducerName gives a producer name its next (id, epoch) cluster-wide
	// (producers.go; Kafka's InitProducerId at the transaction coordinator).
	CmdInitProducerName CommandType = 12
	// CmdFinalizeVersion raises the cluster's finalized inter-broker protocol version
	// (features.go; Kafka's UpdateFeatures, KIP-584).
	CmdFinalizeVersion CommandType = 13
)

// CommandVersion is the command format this controller writes (Command.Version). Version
// 0 (the field absent) is the format before topic IDs: a create without an ID gets the
// name's LegacyTopicID. Version 1: creates carry the topic ID the controller leader drew;
// deletes and config changes may name the ID they mean. A controller refuses a version it
// does not know rather than apply half of it.
const CommandVersion uint8 = 1

// Command is one entry of the controller's raft log, JSON-encoded (the metadata is small
// and changes rarely; a readable log is worth more than a compact one). NowMs is the
// proposer's clock: the state machine never reads a clock, so that every voter computes the
// same state.
type Command struct {
	Type CommandType
	// Version is the command's format version (CommandVersion when proposed by Submit).
	Version uint8 `json:",omitempty"`
	NowMs   int64 `json:",omitempty"`
	// GraceFromMs (ExpireSessions): no session counts as silent before this time, the
	// moment the proposer became raft leader. Brokers cannot heartbeat while there is no
	// controller leader, and must not be fenced for it.
	GraceFromMs  int64                `json:",omitempty"`
	Broker       *BrokerRegistration  `json:",omitempty"`
	Topic        *TopicRequest        `json:",omitempty"`
	AlterISR     *AlterISRRequest     `json:",omitempty"`
	Reassign     *ReassignRequest     `json:",omitempty"`
	ProducerIDs  *ProducerIDsRequest  `json:",omitempty"`
	ProducerName *ProducerNameRequest `json:",omitempty"`
	Finalize     *FinalizeRequest     `json:",omitempty"`
	// Forwarded marks a command one broker sent to the controller leader's broker on
	// behalf of itself or a client: the receiver applies it or refuses it, never forwards
	// it again (no forwarding loops while brokers disagree on the leader). Submit clears
	// it, so it is never in the log.
	Forwarded bool `json:",omitempty"`
}

// BrokerRegistration is a broker's registration or heartbeat.
type BrokerRegistration struct {
	ID           int32
	Address      string `json:",omitempty"`
	KafkaAddress string `json:",omitempty"` // the Kafka listener's advertised host:port, if any
	Rack         string `json:",omitempty"`
	SessionEpoch int64  `json:",omitempty"` // heartbeats: the epoch registration returned
	// ProtocolMin and ProtocolMax (registrations) are the inter-broker protocol versions the
	// broker speaks (features.go); both 0 for a broker from before versions existed.
	ProtocolMin uint16 `json:",omitempty"`
	ProtocolMax uint16 `json:",omitempty"`
}

// TopicRequest creates, deletes or reconfigures a topic.
type TopicRequest struct {
	Name string
	// ID (create): the new topic's ID, drawn by the controller leader's Submit. (delete,
	// alter config): when set, the topic must still be this incarnation.
	ID                    string `json:",omitempty"`
	Partitions            int32  `json:",omitempty"`
	ReplicationFactor     int32  `json:",omitempty"`
	UncleanLeaderElection bool   `json:",omitempty"`
	// Config (create): the topic's configuration, stored with it; (alter config): the keys
	// to set.
	Config map[string]string `json:",omitempty"`
	// ConfigDeletes (alter config): the keys to remove (their defaults apply again).
	ConfigDeletes []string `json:",omitempty"`
}

// AlterISRRequest is a partition leader's ISR change (isr.AlterISR, named by partition).
type AlterISRRequest struct {
	Topic          string
	Partition      int32
	Leader         int32
	LeaderEpoch    int32
	PartitionEpoch int32
	ISR            []int32
}

// ReassignRequest moves a partition to Replicas (reassign) or names the partition whose
// preferred leader to elect.
type ReassignRequest struct {
	Topic     string
	Partition int32
	Replicas  []int32 `json:",omitempty"`
}

// ProducerIDsRequest is a broker's request for a block of producer ids. MinID is the
// lowest id the block may start at: the broker's own producer-id file's next id, so that a
// broker that handed out ids by itself (before it joined a cluster, or before controller
// allocation existed) gets no block overlapping them.
type ProducerIDsRequest struct {
	BrokerID int32
	MinID    int64 `json:",omitempty"`
}

// ProducerIDBlock is the answer to AllocateProducerIDs: ids First to First+Count-1 belong
// to the broker that asked; no other request ever gets any of them.
type ProducerIDBlock struct {
	First int64
	Count int64
}

// Result is what applying a command returns to its submitter: Value is the command's
// answer (the created *Topic, the changed *Partition, the *ProducerIDBlock, the *ProducerIdentity, the []int32 of expired brokers, the
// new session epoch), Err its refusal.
type Result struct {
	Value any
	Err   error
}

// FSM is the controller's raft state machine: it applies commands to the Metadata,
// snapshots and restores it, and lets readers wait for a new version. Apply, Snapshot and
// Restore are called by raft's goroutine; the read methods are safe from any goroutine.
//
// Every applied state is published whole and read-only (copy-on-write, state.go): apply
// builds the next state beside the current one, sharing what the command does not change,
// and stores it in one atomic pointer. Readers load the pointer: no lock, no copy, and a
// state that never changes under them (a request reads one consistent version however
// long it holds it). The contract is that no reader writes what Metadata returns; the
// invariants build tag checks it, and apply's own discipline, at every command
// (checkPublished).
type FSM struct {
	// published is the current state, read-only. Written under mu.
	published atomic.Pointer[Metadata]

	mu      sync.Mutex    // serializes Apply and Restore; guards changed and fingerprint
	changed chan struct{} // closed and replaced when the state changes; guarded by mu
	// fingerprint is the published state's encoding when it was published (invariants
	// builds only); guarded by mu.
	fingerprint []byte
}

// NewFSM returns an empty state machine whose brokers' sessions last sessionTimeoutMs.
func NewFSM(sessionTimeoutMs int64) *FSM {
	f := &FSM{changed: make(chan struct{})}
	f.publishLocked(newMetadata(sessionTimeoutMs))
	return f
}

// publishLocked makes md the current state and wakes the waiters.
func (f *FSM) publishLocked(md *Metadata) {
	md.seal()
	f.published.Store(md)
	if invariantsEnabled {
		f.fingerprint = fingerprint(md)
	}
	close(f.changed)
	f.changed = make(chan struct{})
}

// Apply implements raft.FSM.
func (f *FSM) Apply(entry *raft.Log) any {
	if entry.Type != raft.LogCommand {
		return nil
	}
	var c Command
	if err := json.Unmarshal(entry.Data, &c); err != nil {
		return Result{Err: fmt.Errorf("decode command at index %d: %w", entry.Index, err)}
	}
	return f.ApplyCommand(entry.Index, &c)
}

// ApplyCommand applies c as the command at raft index (for tests that drive the state
// machine without raft).
func (f *FSM) ApplyCommand(index uint64, c *Command) Result {
	f.mu.Lock()
	defer f.mu.Unlock()
	current := f.published.Load()
	if invariantsEnabled {
		f.checkPublished(current, "a reader of FSM.Metadata wrote the published state")
	}
	next := current.derive()
	value, err := next.apply(index, c)
	if c.Type == CmdRegisterBroker && err == nil {
		value = next.Brokers[c.Broker.ID].SessionEpoch
	}
	if invariantsEnabled {
		f.checkPublished(current, fmt.Sprintf("applying command %d (type %d) wrote the state it was derived from", index, c.Type))
	}
	f.publishLocked(next)
	return Result{Value: value, Err: err}
}

// checkPublished panics when md, the published state, no longer encodes as it did when it
// was published (invariants builds).
func (f *FSM) checkPublished(md *Metadata, what string) {
	if got := fingerprint(md); string(got) != string(f.fingerprint) {
		panic(fmt.Sprintf("controller metadata version %d changed after it was published: %s\nwas: %s\nnow: %s", md.Version, what, f.fingerprint, got))
	}
}

// fingerprint is md's encoding, every field apply can write included.
func fingerprint(md *Metadata) []byte {
	data, err := json.Marshal(md)
	if err != nil {
		panic(fmt.Sprintf("encode controller metadata: %v", err))
	}
	return data
}

// anyExpired reports whether ExpireSessions at nowMs would fence a broker.
func (f *FSM) anyExpired(nowMs, graceFromMs int64) bool {
	md := f.published.Load()
	for _, b := range md.Brokers {
		if md.overdue(b, nowMs, graceFromMs) {
			return true
		}
	}
	return false
}

// Metadata returns the current state: shared and read-only. A caller must not write
// anything it reaches from it (Clone gives a copy to change); it never changes under the
// caller, and a later version is a different *Metadata.
func (f *FSM) Metadata() *Metadata { return f.published.Load() }

// Finalized is the finalized protocol version of the current state (Metadata.Finalized).
func (f *FSM) Finalized() uint16 { return f.published.Load().Finalized() }

// Version is the raft index of the last applied command.
func (f *FSM) Version() uint64 { return f.published.Load().Version }

// Changed returns a channel closed once the version is above since (at once if it already
// is).
func (f *FSM) Changed(since uint64) <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.published.Load().Version > since {
		ch := make(chan struct{})
		close(ch)
		return ch
	}
	return f.changed
}

// Snapshot implements raft.FSM: the current state, encoded as JSON by Persist, which raft
// runs beside Apply (the state is read-only, so the encoding of a large metadata never
// holds up the commands behind it).
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	return snapshot{f.published.Load()}, nil
}

// snapshotBytesMax bounds what Restore reads: 64 MiB is far above the metadata of a
// cluster with a million partitions at ~60 bytes each.
const snapshotBytesMax = 64 << 20

// Restore implements raft.FSM.
func (f *FSM) Restore(r io.ReadCloser) error {
	defer r.Close()
	data, err := io.ReadAll(io.LimitReader(r, snapshotBytesMax+1))
	if err != nil {
		return fmt.Errorf("read snapshot: %w", err)
	}
	if len(data) > snapshotBytesMax {
		return fmt.Errorf("snapshot over %d bytes", snapshotBytesMax)
	}
	meta := newMetadata(0)
	if err := json.Unmarshal(data, meta); err != nil {
		return fmt.Errorf("decode snapshot: %w", err)
	}
	if meta.Brokers == nil {
		meta.Brokers = map[int32]*Broker{}
	}
	if meta.Topics == nil {
		meta.Topics = map[string]*Topic{}
	}
	meta.normalize() // topics of a snapshot from before topic IDs
	if err := meta.validate(); err != nil {
		return fmt.Errorf("restore snapshot: %w", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.publishLocked(meta)
	return nil
}

// snapshot is a published state, encoded when raft persists it.
type snapshot struct{ md *Metadata }

func (s snapshot) Persist(sink raft.SnapshotSink) error {
	data, err := json.Marshal(s.md)
	if err != nil {
		sink.Cancel()
		return fmt.Errorf("snapshot metadata: %w", err)
	}
	if _, err := sink.Write(data); err != nil {
		sink.Cancel()
		return fmt.Errorf("write snapshot: %w", err)
	}
	return sink.Close()
}

func (s snapshot) Release() {}
