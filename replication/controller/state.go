package controller

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"math"
	"slices"
	"sort"
	"strconv"
)

// Errors a command is refused with. They travel back to the submitter on the controller
// leader as the command's result.
var (
	ErrUnknownBroker        = errors.New("unknown broker")
	ErrStaleSession         = errors.New("stale broker session epoch")
	ErrTopicExists          = errors.New("topic already exists")
	ErrUnknownTopic         = errors.New("unknown topic or partition")
	ErrInvalidTopic         = errors.New("invalid topic request")
	ErrNotEnoughBrokers     = errors.New("replication factor larger than the live brokers")
	ErrNotPartitionLeader   = errors.New("not the leader of the partition")
	ErrStaleLeaderEpoch     = errors.New("stale leader epoch")
	ErrStalePartitionEpoch  = errors.New("stale partition epoch")
	ErrInvalidISR           = errors.New("invalid ISR")
	ErrInvalidReplicas      = errors.New("invalid replica assignment")
	ErrPreferredNotEligible = errors.New("preferred replica is not an in-sync live broker")
	ErrUnknownCommand       = errors.New("unknown command")
	ErrProducerIDsExhausted = errors.New("producer ids exhausted")
	// ErrTopicIDMismatch refuses a delete or config change naming a topic ID that is not
	// the current one: the topic was deleted and recreated since the caller looked.
	ErrTopicIDMismatch = errors.New("topic was recreated under a new topic ID")
)

// NoLeader is the leader of an offline partition.
const NoLeader int32 = -1

// Limits on what a command may ask for.
const (
	partitionsPerTopicMax = 1 << 16
	replicationFactorMax  = 16
	topicNameBytesMax     = 249 // Kafka's limit
	// deletedTopicsMax bounds the tombstones kept (oldest dropped first): at ~120 bytes of
	// JSON each, 1,024 cost ~120 KiB of snapshot. A broker needs no tombstone for a topic
	// created with an ID: the metadata version covers it (see TopicDeleted).
	deletedTopicsMax = 1024
	// topicConfigEntriesMax bounds a topic's config map in the controller (the engine's
	// own limit, engine.TopicConfigEntriesMax, is 64).
	topicConfigEntriesMax = 1024
)

// Producer id blocks (AllocateProducerIDs). The controller hands out consecutive blocks of
// ProducerIDBlockSize ids starting at Metadata.NextProducerID. A snapshot from before
// blocks existed has no counter (0): blocks then start at ProducerIDFloor, far above any id
// a broker's own allocator (which counts from 0) can have handed out, and never below the
// MinID the asking broker names.
const (
	ProducerIDBlockSize = 1000
	ProducerIDFloor     = int64(1) << 32
)

// Topic IDs. A topic created through the controller gets a random 128-bit ID (32
// lowercase hex digits), drawn by the controller leader when it proposes the create, so
// that it is in the raft log and every voter stores the same one. A topic created by a
// command of format version 0 (before IDs existed) and a topic restored from a snapshot
// that has none get LegacyTopicID(name): derived from the name alone, so that replay and
// restore agree.
const topicIDHexLen = 32

// NewTopicID draws a random 128-bit topic ID.
func NewTopicID() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(fmt.Sprintf("topic id: crypto/rand failed: %v", err))
	}
	return hex.EncodeToString(b[:])
}

// LegacyTopicID is the ID of a topic created before topic IDs existed: the first 128 bits
// of SHA-256 over a fixed prefix and the name.
func LegacyTopicID(name string) string {
	sum := sha256.Sum256([]byte("ringlog legacy topic id\x00" + name))
	return hex.EncodeToString(sum[:16])
}

func validTopicID(id string) bool {
	if len(id) != topicIDHexLen {
		return false
	}
	for _, c := range id {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// Broker is a registered broker as the controller knows it.
type Broker struct {
	ID      int32
	Address string
	// KafkaAddress is the broker's Kafka listener as clients reach it (host:port; empty
	// without one). Kafka Metadata lists the brokers with it. Added in session 4: older
	// snapshots and log entries lack it and decode with it empty.
	KafkaAddress string `json:",omitempty"`
	Rack         string
	// SessionEpoch counts registrations: a restarted broker registers again and gets a new
	// one, and heartbeats of an older session are refused.
	SessionEpoch int64
	// LastHeartbeatMs is the proposer's clock (Unix ms) at the last registration or
	// heartbeat.
	LastHeartbeatMs int64
	// Fenced is set when the session expired: the broker leads nothing and is in no ISR
	// (unless it was a partition's last member) until it registers again.
	Fenced bool
	// ProtocolMin and ProtocolMax are the inter-broker protocol versions the broker
	// registered with (features.go); 0 for a broker registered before versions existed.
	ProtocolMin uint16 `json:",omitempty"`
	ProtocolMax uint16 `json:",omitempty"`
}

// Partition is one partition's replication state.
type Partition struct {
	Index    int32
	Replicas []int32 // the assignment; Replicas[0] is the preferred leader
	// TargetReplicas is the assignment a reassignment moves to; while it is set, Replicas
	// is the union of old and target, and the move completes when every target replica is
	// in the ISR.
	TargetReplicas []int32 `json:",omitempty"`
	Leader         int32   // NoLeader when offline
	LeaderEpoch    int32   // bumped on every leader change
	PartitionEpoch int32   // bumped on every leader or ISR change
	ISR            []int32
}

func (p *Partition) clone() *Partition {
	c := *p
	c.Replicas = slices.Clone(p.Replicas)
	c.TargetReplicas = slices.Clone(p.TargetReplicas)
	c.ISR = slices.Clone(p.ISR)
	return &c
}

// Topic is a topic and its partitions.
type Topic struct {
	Name string
	// ID is this incarnation's topic ID (see NewTopicID); a deleted and recreated topic has
	// a new one.
	ID string `json:",omitempty"`
	// CreatedVersion is the metadata version (raft index) of the create; 0 for a topic
	// created before topic IDs existed.
	CreatedVersion uint64 `json:",omitempty"`
	// UncleanLeaderElection is unclean.leader.election.enable: when no ISR member is alive,
	// elect any live replica (losing what it missed) rather than stay offline.
	UncleanLeaderElection bool
	// Config is the topic's configuration (retention.ms, min.insync.replicas, ...): every
	// replica's broker opens its partitions with it.
	Config     map[string]string `json:",omitempty"`
	Partitions []Partition
}

// DeletedTopic is the tombstone of a deleted topic incarnation.
type DeletedTopic struct {
	Name           string
	ID             string
	CreatedVersion uint64 `json:",omitempty"`
	DeletedVersion uint64
}

// Metadata is the controller's whole replicated state.
type Metadata struct {
	// Version is the raft index of the last command applied; brokers poll it and fetch
	// the metadata again when it moved. The state at a version is the same on every voter
	// and after every restart (snapshot or replay).
	Version          uint64
	SessionTimeoutMs int64
	Brokers          map[int32]*Broker
	Topics           map[string]*Topic
	// DeletedTopics are the tombstones of the last deletedTopicsMax deletions, oldest first.
	DeletedTopics []DeletedTopic `json:",omitempty"`
	// LeaderEpochFloor is the first leader epoch of a new topic's partitions: above every
	// epoch a deleted topic's partitions reached, so that a replica of an old incarnation
	// and one of a new incarnation of the same name never agree on a leader epoch (a
	// fetch across incarnations is fenced by epoch, as the ReplicaFetch API carries no
	// topic ID).
	LeaderEpochFloor int32 `json:",omitempty"`
	// NextProducerID is the first id of the next producer id block (0: none handed out
	// yet; see ProducerIDFloor).
	NextProducerID int64 `json:",omitempty"`
	// ProducerNames maps every producer name initialised on the cluster to its current
	// identity (producers.go). Replaced whole by each change, never written in place.
	ProducerNames map[string]ProducerIdentity `json:",omitempty"`
	// FinalizedVersion is the inter-broker protocol version every broker must speak
	// (features.go; 0 in metadata from before versions existed, which means 1).
	FinalizedVersion uint16 `json:",omitempty"`

	// cow is set while apply builds the state after a published one (FSM.ApplyCommand):
	// what it has made private so far. nil: every part of m is m's own (a new, restored,
	// decoded or cloned Metadata), and apply writes it in place.
	cow *copyOnWrite
}

// Copy-on-write. The FSM publishes every state it applies as a snapshot that readers hold
// without a lock and without a copy (FSM.Metadata), so no write may reach memory a
// published snapshot can reach. ApplyCommand hands apply a shallow copy of the published
// state (derive): its maps, brokers, topics and slices are the snapshot's until apply asks
// for a private copy of the part it is about to change (writableBroker, writableTopic,
// writablePartition, ownTopics). A topic is copied with its partition array, one
// allocation; the slices inside each partition (Replicas, TargetReplicas, ISR) and the
// topic's Config stay shared, so apply replaces them whole and never writes into them.
// A command thus costs what it changes: a heartbeat copies one Broker, an ISR change one
// topic's partition array (10,000 partitions: ~1 MB, one memmove), and everything it does
// not touch is shared with the snapshots before it.
type copyOnWrite struct {
	brokersMap, topicsMap bool            // the maps themselves are private
	brokers               map[int32]bool  // brokers copied (or added) by this apply; nil: none
	topics                map[string]bool // topics copied (or added) by this apply; nil: none
}

// derive is the start of the state after m: a shallow copy that shares everything with m
// until apply copies what it changes.
func (m *Metadata) derive() *Metadata {
	next := *m
	next.cow = &copyOnWrite{}
	return &next
}

// seal ends apply's writes: the result is published read-only.
func (m *Metadata) seal() { m.cow = nil }

func (m *Metadata) ownBrokers() {
	if m.cow != nil && !m.cow.brokersMap {
		m.Brokers = maps.Clone(m.Brokers)
		m.cow.brokersMap = true
	}
}

func (m *Metadata) ownTopics() {
	if m.cow != nil && !m.cow.topicsMap {
		m.Topics = maps.Clone(m.Topics)
		m.cow.topicsMap = true
	}
}

// addBroker and addTopic insert an entry apply created.
func (m *Metadata) addBroker(b *Broker) {
	m.ownBrokers()
	m.Brokers[b.ID] = b
	if m.cow != nil {
		if m.cow.brokers == nil {
			m.cow.brokers = map[int32]bool{}
		}
		m.cow.brokers[b.ID] = true
	}
}

func (m *Metadata) addTopic(t *Topic) {
	m.ownTopics()
	m.Topics[t.Name] = t
	if m.cow != nil {
		if m.cow.topics == nil {
			m.cow.topics = map[string]bool{}
		}
		m.cow.topics[t.Name] = true
	}
}

// writableBroker is broker id, copied first when a published snapshot shares it; nil when
// there is no such broker.
func (m *Metadata) writableBroker(id int32) *Broker {
	b, ok := m.Brokers[id]
	if !ok || m.cow == nil || m.cow.brokers[id] {
		return b
	}
	c := *b
	m.addBroker(&c)
	return &c
}

// writableTopic is topic name with its own partition array, copied first when a published
// snapshot shares it; nil when there is no such topic.
func (m *Metadata) writableTopic(name string) *Topic {
	t, ok := m.Topics[name]
	if !ok || m.cow == nil || m.cow.topics[name] {
		return t
	}
	c := *t
	c.Partitions = slices.Clone(t.Partitions)
	m.addTopic(&c)
	return &c
}

// writablePartition is partition index of topic in a writable topic; the caller has
// checked that it exists (partition).
func (m *Metadata) writablePartition(topic string, index int32) *Partition {
	return &m.writableTopic(topic).Partitions[index]
}

func newMetadata(sessionTimeoutMs int64) *Metadata {
	return &Metadata{SessionTimeoutMs: sessionTimeoutMs, Brokers: map[int32]*Broker{}, Topics: map[string]*Topic{}}
}

// Clone returns a deep copy, except ProducerNames, which is shared: it is never written in
// place (apply replaces it whole), and a caller must not write it either.
func (m *Metadata) Clone() *Metadata {
	c := &Metadata{Version: m.Version, SessionTimeoutMs: m.SessionTimeoutMs,
		Brokers: make(map[int32]*Broker, len(m.Brokers)), Topics: make(map[string]*Topic, len(m.Topics)),
		DeletedTopics: slices.Clone(m.DeletedTopics), LeaderEpochFloor: m.LeaderEpochFloor,
		NextProducerID: m.NextProducerID, ProducerNames: m.ProducerNames, FinalizedVersion: m.FinalizedVersion}
	for id, b := range m.Brokers {
		bc := *b
		c.Brokers[id] = &bc
	}
	for name, t := range m.Topics {
		tc := &Topic{Name: t.Name, ID: t.ID, CreatedVersion: t.CreatedVersion, UncleanLeaderElection: t.UncleanLeaderElection, Config: maps.Clone(t.Config), Partitions: make([]Partition, len(t.Partitions))}
		for i, p := range t.Partitions {
			p.Replicas = slices.Clone(p.Replicas)
			p.TargetReplicas = slices.Clone(p.TargetReplicas)
			p.ISR = slices.Clone(p.ISR)
			tc.Partitions[i] = p
		}
		c.Topics[name] = tc
	}
	return c
}

// ErrCorruptMetadata is returned by FSM.Restore for a snapshot whose metadata breaks the
// state machine's invariants.
var ErrCorruptMetadata = errors.New("corrupt controller metadata")

// normalize gives every topic without an ID (a snapshot from before topic IDs) its
// LegacyTopicID.
func (m *Metadata) normalize() {
	for name, t := range m.Topics {
		if t != nil && t.ID == "" {
			t.ID = LegacyTopicID(name)
		}
	}
}

// validate checks what apply relies on: entries keyed by their own id or name, distinct
// well-formed topic IDs, partitions indexed in order, each with replicas, an ISR of
// replicas, and a leader in the ISR or none.
func (m *Metadata) validate() error {
	ids := map[string]bool{}
	if m.NextProducerID < 0 {
		return fmt.Errorf("next producer id %d: %w", m.NextProducerID, ErrCorruptMetadata)
	}
	if len(m.DeletedTopics) > deletedTopicsMax {
		return fmt.Errorf("%d tombstones: %w", len(m.DeletedTopics), ErrCorruptMetadata)
	}
	for _, d := range m.DeletedTopics {
		ids[d.ID] = true
	}
	if err := m.validateProducerNames(); err != nil {
		return err
	}
	for id, b := range m.Brokers {
		if b == nil || b.ID != id {
			return fmt.Errorf("broker %d: %w", id, ErrCorruptMetadata)
		}
	}
	for name, t := range m.Topics {
		if t == nil || t.Name != name || !validTopicID(t.ID) || ids[t.ID] {
			return fmt.Errorf("topic %q: %w", name, ErrCorruptMetadata)
		}
		ids[t.ID] = true
		for i, p := range t.Partitions {
			ok := p.Index == int32(i) && len(p.Replicas) > 0 && len(p.ISR) > 0 &&
				(p.Leader == NoLeader || slices.Contains(p.ISR, p.Leader))
			for _, id := range p.ISR {
				ok = ok && slices.Contains(p.Replicas, id)
			}
			if !ok {
				return fmt.Errorf("partition %s/%d %+v: %w", name, i, p, ErrCorruptMetadata)
			}
		}
	}
	return nil
}

func (m *Metadata) live(id int32) bool {
	b, ok := m.Brokers[id]
	return ok && !b.Fenced
}

func (m *Metadata) topicNames() []string {
	names := make([]string, 0, len(m.Topics))
	for n := range m.Topics {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func (m *Metadata) brokerIDs() []int32 {
	ids := make([]int32, 0, len(m.Brokers))
	for id := range m.Brokers {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

func (m *Metadata) partition(topic string, index int32) (*Topic, *Partition, error) {
	t, ok := m.Topics[topic]
	if !ok || index < 0 || int(index) >= len(t.Partitions) {
		return nil, nil, fmt.Errorf("%s/%d: %w", topic, index, ErrUnknownTopic)
	}
	return t, &t.Partitions[index], nil
}

// apply executes one command at raft index. Everything it reads comes from the command or
// the state, so that every voter computes the same result.
func (m *Metadata) apply(index uint64, c *Command) (any, error) {
	m.Version = index
	if c.Version > CommandVersion {
		return nil, fmt.Errorf("command format version %d, this controller knows up to %d: %w", c.Version, CommandVersion, ErrUnknownCommand)
	}
	if err := c.check(); err != nil {
		return nil, err
	}
	switch c.Type {
	case CmdRegisterBroker:
		return nil, m.registerBroker(c.NowMs, c.Broker)
	case CmdHeartbeat:
		return nil, m.heartbeat(c.NowMs, c.Broker)
	case CmdExpireSessions:
		return m.expireSessions(c.NowMs, c.GraceFromMs), nil
	case CmdCreateTopic:
		return m.createTopic(index, c.Version, c.Topic)
	case CmdDeleteTopic:
		return m.deleteTopic(index, c.Topic)
	case CmdAlterConfig:
		return m.alterConfig(c.Topic)
	case CmdSetUnclean:
		return nil, m.setUnclean(c.Topic.Name, c.Topic.UncleanLeaderElection)
	case CmdAlterISR:
		return m.alterISR(c.AlterISR)
	case CmdReassign:
		return m.reassign(c.Reassign)
	case CmdElectPreferred:
		return m.electPreferred(c.Reassign.Topic, c.Reassign.Partition)
	case CmdAllocateProducerIDs:
		return m.allocateProducerIDs(c.ProducerIDs)
	case CmdInitProducerName:
		return m.initProducerName(c.ProducerName)
	case CmdFinalizeVersion:
		return m.finalizeVersion(c.Finalize)
	}
	return nil, fmt.Errorf("type %d: %w", c.Type, ErrUnknownCommand)
}

// check refuses a command without the payload its type needs.
func (c *Command) check() error {
	var ok bool
	switch c.Type {
	case CmdRegisterBroker, CmdHeartbeat:
		ok = c.Broker != nil
	case CmdExpireSessions:
		ok = true
	case CmdCreateTopic, CmdDeleteTopic, CmdSetUnclean, CmdAlterConfig:
		ok = c.Topic != nil
	case CmdAlterISR:
		ok = c.AlterISR != nil
	case CmdReassign, CmdElectPreferred:
		ok = c.Reassign != nil
	case CmdAllocateProducerIDs:
		ok = c.ProducerIDs != nil
	case CmdInitProducerName:
		ok = c.ProducerName != nil
	case CmdFinalizeVersion:
		ok = c.Finalize != nil
	default:
		return fmt.Errorf("type %d: %w", c.Type, ErrUnknownCommand)
	}
	if !ok {
		return fmt.Errorf("type %d without its payload: %w", c.Type, ErrUnknownCommand)
	}
	return nil
}

// allocateProducerIDs reserves the next block of producer ids: at NextProducerID, or
// higher when the floor or the request's MinID says so.
func (m *Metadata) allocateProducerIDs(r *ProducerIDsRequest) (*ProducerIDBlock, error) {
	first := max(m.NextProducerID, ProducerIDFloor, r.MinID)
	if first > math.MaxInt64-ProducerIDBlockSize {
		return nil, fmt.Errorf("next block at %d: %w", first, ErrProducerIDsExhausted)
	}
	m.NextProducerID = first + ProducerIDBlockSize
	return &ProducerIDBlock{First: first, Count: ProducerIDBlockSize}, nil
}

func (m *Metadata) registerBroker(nowMs int64, r *BrokerRegistration) error {
	if r == nil || r.ID < 0 || r.Address == "" {
		return fmt.Errorf("register %+v: %w", r, ErrInvalidReplicas)
	}
	if err := m.checkRegistration(r); err != nil {
		return err
	}
	if m.FinalizedVersion == 0 && len(m.Brokers) == 0 {
		_, m.FinalizedVersion = r.ProtocolRange() // a new cluster speaks its first broker's newest
	}
	b := m.writableBroker(r.ID)
	if b == nil {
		b = &Broker{ID: r.ID}
		m.addBroker(b)
	} else if !b.Fenced {
		// A new incarnation while the old session was still open: the old one may have
		// lost its unsynced tail, so it leaves every ISR as if its session had expired.
		m.fence(b)
	}
	b.Address, b.KafkaAddress, b.Rack = r.Address, r.KafkaAddress, r.Rack
	b.ProtocolMin, b.ProtocolMax = r.ProtocolMin, r.ProtocolMax
	b.SessionEpoch++
	b.LastHeartbeatMs = nowMs
	b.Fenced = false
	m.electOffline()
	return nil
}

func (m *Metadata) heartbeat(nowMs int64, r *BrokerRegistration) error {
	b, ok := m.Brokers[r.ID]
	if !ok {
		return fmt.Errorf("heartbeat from %d: %w", r.ID, ErrUnknownBroker)
	}
	if b.Fenced || r.SessionEpoch != b.SessionEpoch {
		return fmt.Errorf("heartbeat from %d session %d (current %d, fenced %v): %w", r.ID, r.SessionEpoch, b.SessionEpoch, b.Fenced, ErrStaleSession)
	}
	if nowMs > b.LastHeartbeatMs {
		m.writableBroker(r.ID).LastHeartbeatMs = nowMs
	}
	return nil
}

func (m *Metadata) overdue(b *Broker, nowMs, graceFromMs int64) bool {
	return !b.Fenced && nowMs-max(b.LastHeartbeatMs, graceFromMs) > m.SessionTimeoutMs
}

// expireSessions fences every live broker silent for longer than the session timeout at
// nowMs, counting silence from its last heartbeat or graceFromMs, whichever is later, and
// returns their ids.
func (m *Metadata) expireSessions(nowMs, graceFromMs int64) []int32 {
	var expired []int32
	for _, id := range m.brokerIDs() {
		if m.overdue(m.Brokers[id], nowMs, graceFromMs) {
			m.fence(m.writableBroker(id))
			expired = append(expired, id)
		}
	}
	return expired
}

// fence takes broker b (writable) out of every ISR (a partition's last ISR member stays,
// so that the partition waits for it to return) and elects new leaders where it led.
func (m *Metadata) fence(b *Broker) {
	b.Fenced = true
	for _, name := range m.topicNames() {
		t := m.Topics[name]
		for i := range t.Partitions {
			p := &t.Partitions[i]
			inISR := slices.Contains(p.ISR, b.ID) && len(p.ISR) > 1
			if !inISR && p.Leader != b.ID {
				continue
			}
			t = m.writableTopic(name)
			p = &t.Partitions[i]
			changed := false
			if inISR {
				p.ISR = slices.DeleteFunc(slices.Clone(p.ISR), func(id int32) bool { return id == b.ID })
				changed = true
			}
			if p.Leader == b.ID {
				m.elect(t, p)
				changed = false // elect bumped the epochs
			}
			if changed {
				p.PartitionEpoch++
			}
		}
	}
}

// elect chooses p's leader: the first replica in assignment order that is live and in the
// ISR; with unclean election allowed and no such replica, the first live replica, which
// becomes the whole ISR. Otherwise the partition goes offline (NoLeader). The leader and
// partition epochs are bumped.
//
// t and p must be writable (writableTopic).
func (m *Metadata) elect(t *Topic, p *Partition) {
	leader, unclean := m.electable(t, p)
	if unclean {
		p.ISR = []int32{leader}
	}
	p.Leader = leader
	p.LeaderEpoch++
	p.PartitionEpoch++
}

// electable is the leader elect would choose for p (NoLeader: none), and whether it is an
// unclean choice (a live replica outside the ISR). It writes nothing.
func (m *Metadata) electable(t *Topic, p *Partition) (leader int32, unclean bool) {
	for _, id := range p.Replicas {
		if m.live(id) && slices.Contains(p.ISR, id) {
			return id, false
		}
	}
	if t.UncleanLeaderElection {
		for _, id := range p.Replicas {
			if m.live(id) {
				return id, true
			}
		}
	}
	return NoLeader, false
}

// electOffline elects leaders for offline partitions after a broker came back. A
// partition that would stay offline is left as it is (no epoch bump).
func (m *Metadata) electOffline() {
	for _, name := range m.topicNames() {
		t := m.Topics[name]
		for i := range t.Partitions {
			p := &t.Partitions[i]
			if p.Leader != NoLeader {
				continue
			}
			if leader, _ := m.electable(t, p); leader == NoLeader {
				continue
			}
			t = m.writableTopic(name)
			m.elect(t, &t.Partitions[i])
		}
	}
}

// createTopic creates req's topic at metadata version index. A command of format version
// 0 (before topic IDs) gets the name's LegacyTopicID; later ones must carry a fresh ID.
func (m *Metadata) createTopic(index uint64, version uint8, req *TopicRequest) (*Topic, error) {
	if req == nil || req.Name == "" || len(req.Name) > topicNameBytesMax || req.Partitions < 1 ||
		req.Partitions > partitionsPerTopicMax || req.ReplicationFactor < 1 || req.ReplicationFactor > replicationFactorMax ||
		len(req.Config) > topicConfigEntriesMax {
		return nil, fmt.Errorf("create %+v: %w", req, ErrInvalidTopic)
	}
	if _, ok := m.Topics[req.Name]; ok {
		return nil, fmt.Errorf("create %s: %w", req.Name, ErrTopicExists)
	}
	id, created := req.ID, index
	if version == 0 {
		id, created = LegacyTopicID(req.Name), 0
	}
	if !validTopicID(id) || m.topicIDUsed(id) {
		return nil, fmt.Errorf("create %s: topic id %q malformed or used before: %w", req.Name, id, ErrInvalidTopic)
	}
	var live []*Broker
	for _, id := range m.brokerIDs() {
		if b := m.Brokers[id]; !b.Fenced {
			live = append(live, b)
		}
	}
	if int(req.ReplicationFactor) > len(live) {
		return nil, fmt.Errorf("create %s: replication factor %d, %d live brokers: %w", req.Name, req.ReplicationFactor, len(live), ErrNotEnoughBrokers)
	}
	assignment := placeReplicas(req.Name, live, int(req.Partitions), int(req.ReplicationFactor))
	t := &Topic{Name: req.Name, ID: id, CreatedVersion: created, UncleanLeaderElection: req.UncleanLeaderElection,
		Config: maps.Clone(req.Config), Partitions: make([]Partition, req.Partitions)}
	for i, replicas := range assignment {
		t.Partitions[i] = Partition{Index: int32(i), Replicas: replicas, Leader: replicas[0], LeaderEpoch: m.LeaderEpochFloor, ISR: slices.Clone(replicas)}
	}
	m.addTopic(t)
	return t, nil // read-only once published, as the whole state
}

// placeReplicas assigns rf distinct brokers to each of n partitions. Brokers are ordered
// so that racks alternate (rack a's first broker, rack b's first, ..., rack a's second,
// ...); partition i starts at a topic-dependent offset plus i in that order, so leaders
// spread over brokers and racks, and each further replica is the next broker in the order
// whose rack the partition does not use yet (any unused broker once every rack is used).
// With brokers on R racks and rf <= R, every partition's replicas are on rf different
// racks. Brokers without a rack form one rack of their own.
func placeReplicas(topic string, brokers []*Broker, n, rf int) [][]int32 {
	racks := map[string][]int32{}
	var rackNames []string
	for _, b := range brokers { // brokers are sorted by id
		if _, ok := racks[b.Rack]; !ok {
			rackNames = append(rackNames, b.Rack)
		}
		racks[b.Rack] = append(racks[b.Rack], b.ID)
	}
	sort.Strings(rackNames)
	rackOf := map[int32]string{}
	var order []int32
	for round := 0; len(order) < len(brokers); round++ {
		for _, r := range rackNames {
			if round < len(racks[r]) {
				order = append(order, racks[r][round])
				rackOf[racks[r][round]] = r
			}
		}
	}
	h := fnv.New32a()
	h.Write([]byte(topic))
	start := int(h.Sum32() % uint32(len(order)))
	out := make([][]int32, n)
	for p := range n {
		first := (start + p) % len(order)
		replicas := []int32{order[first]}
		usedRacks := map[string]bool{rackOf[order[first]]: true}
		for pass := 0; pass < 2 && len(replicas) < rf; pass++ {
			for k := 1; k < len(order) && len(replicas) < rf; k++ {
				id := order[(first+k)%len(order)]
				if slices.Contains(replicas, id) || (pass == 0 && usedRacks[rackOf[id]]) {
					continue
				}
				replicas = append(replicas, id)
				usedRacks[rackOf[id]] = true
			}
		}
		out[p] = replicas
	}
	return out
}

// topicIDUsed reports whether id names a topic or a tombstone.
func (m *Metadata) topicIDUsed(id string) bool {
	for _, t := range m.Topics {
		if t.ID == id {
			return true
		}
	}
	return slices.ContainsFunc(m.DeletedTopics, func(d DeletedTopic) bool { return d.ID == id })
}

// topicFor returns req's topic, refusing a request that names another incarnation's ID.
func (m *Metadata) topicFor(op string, req *TopicRequest) (*Topic, error) {
	t, ok := m.Topics[req.Name]
	if !ok {
		return nil, fmt.Errorf("%s %s: %w", op, req.Name, ErrUnknownTopic)
	}
	if req.ID != "" && req.ID != t.ID {
		return nil, fmt.Errorf("%s %s with topic id %s, current %s: %w", op, req.Name, req.ID, t.ID, ErrTopicIDMismatch)
	}
	return t, nil
}

// deleteTopic removes a topic at metadata version index, leaving a tombstone with its ID
// (the oldest tombstone goes beyond deletedTopicsMax) and raising the leader epoch floor
// above its partitions' epochs. It returns the tombstone.
func (m *Metadata) deleteTopic(index uint64, req *TopicRequest) (*DeletedTopic, error) {
	t, err := m.topicFor("delete", req)
	if err != nil {
		return nil, err
	}
	for _, p := range t.Partitions {
		m.LeaderEpochFloor = max(m.LeaderEpochFloor, p.LeaderEpoch+1)
	}
	d := DeletedTopic{Name: t.Name, ID: t.ID, CreatedVersion: t.CreatedVersion, DeletedVersion: index}
	// A new slice: published snapshots share the old one.
	tombstones := make([]DeletedTopic, 0, len(m.DeletedTopics)+1)
	tombstones = append(append(tombstones, m.DeletedTopics...), d)
	if over := len(tombstones) - deletedTopicsMax; over > 0 {
		tombstones = tombstones[over:]
	}
	m.DeletedTopics = tombstones
	m.ownTopics()
	delete(m.Topics, t.Name)
	return &d, nil
}

// alterConfig sets req.Config's keys and removes req.ConfigDeletes from the topic's
// config (the brokers validated the values); unclean.leader.election.enable follows its
// key. It returns the topic.
func (m *Metadata) alterConfig(req *TopicRequest) (*Topic, error) {
	t, err := m.topicFor("alter config of", req)
	if err != nil {
		return nil, err
	}
	next := maps.Clone(t.Config)
	if next == nil {
		next = map[string]string{}
	}
	maps.Copy(next, req.Config)
	for _, k := range req.ConfigDeletes {
		delete(next, k)
	}
	if len(next) > topicConfigEntriesMax {
		return nil, fmt.Errorf("alter config of %s: %d entries: %w", req.Name, len(next), ErrInvalidTopic)
	}
	unclean := false
	if v, ok := next[ConfigUnclean]; ok {
		if unclean, err = strconv.ParseBool(v); err != nil {
			return nil, fmt.Errorf("alter config of %s: %s=%q: %w", req.Name, ConfigUnclean, v, ErrInvalidTopic)
		}
	}
	t = m.writableTopic(t.Name)
	t.Config = next
	if len(next) == 0 {
		t.Config = nil
	}
	if t.UncleanLeaderElection != unclean {
		t.UncleanLeaderElection = unclean
		if unclean {
			m.electOffline()
		}
	}
	return m.Topics[t.Name], nil // read-only once published, as the whole state
}

// ConfigUnclean is the topic config key behind Topic.UncleanLeaderElection.
const ConfigUnclean = "unclean.leader.election.enable"

// TopicDeleted reports whether md proves that the topic incarnation (id, created at
// metadata version createdVersion; 0 when unknown) no longer exists: a tombstone names id,
// the name now belongs to an incarnation created later, or md is at or past
// createdVersion and holds no topic with id. A broker deletes its local copy only then,
// never because a possibly stale md lacks the topic.
func (m *Metadata) TopicDeleted(name, id string, createdVersion uint64) bool {
	if slices.ContainsFunc(m.DeletedTopics, func(d DeletedTopic) bool { return d.ID == id }) {
		return true
	}
	if t, ok := m.Topics[name]; ok {
		return t.ID != id && t.CreatedVersion > createdVersion
	}
	// The state at a version is the same wherever it is read: at or past the create, a
	// name without a topic means the incarnation was deleted (its tombstone may have been
	// dropped since). A topic without a known version (0) needs its tombstone.
	return createdVersion != 0 && m.Version >= createdVersion
}

func (m *Metadata) setUnclean(name string, on bool) error {
	t := m.writableTopic(name)
	if t == nil {
		return fmt.Errorf("set unclean.leader.election.enable on %s: %w", name, ErrUnknownTopic)
	}
	t.UncleanLeaderElection = on
	if on {
		m.electOffline()
	}
	return nil
}

// alterISR applies a partition leader's ISR change. Only the current leader at the current
// leader and partition epochs may change the ISR; the new ISR contains the leader, only
// replicas, and adds only live brokers.
func (m *Metadata) alterISR(req *AlterISRRequest) (*Partition, error) {
	_, p, err := m.partition(req.Topic, req.Partition)
	if err != nil {
		return nil, err
	}
	switch {
	case req.Leader != p.Leader:
		return nil, fmt.Errorf("alter ISR of %s/%d from %d, leader %d: %w", req.Topic, req.Partition, req.Leader, p.Leader, ErrNotPartitionLeader)
	case req.LeaderEpoch != p.LeaderEpoch:
		return nil, fmt.Errorf("alter ISR of %s/%d at leader epoch %d, current %d: %w", req.Topic, req.Partition, req.LeaderEpoch, p.LeaderEpoch, ErrStaleLeaderEpoch)
	case req.PartitionEpoch != p.PartitionEpoch:
		return nil, fmt.Errorf("alter ISR of %s/%d at partition epoch %d, current %d: %w", req.Topic, req.Partition, req.PartitionEpoch, p.PartitionEpoch, ErrStalePartitionEpoch)
	}
	isr := slices.Clone(req.ISR)
	slices.Sort(isr)
	if len(slices.Compact(slices.Clone(isr))) != len(isr) || !slices.Contains(isr, req.Leader) {
		return nil, fmt.Errorf("alter ISR of %s/%d to %v: %w", req.Topic, req.Partition, req.ISR, ErrInvalidISR)
	}
	for _, id := range isr {
		if !slices.Contains(p.Replicas, id) || (!slices.Contains(p.ISR, id) && !m.live(id)) {
			return nil, fmt.Errorf("alter ISR of %s/%d: %d is not a live replica: %w", req.Topic, req.Partition, id, ErrInvalidISR)
		}
	}
	p = m.writablePartition(req.Topic, req.Partition)
	p.ISR = isr
	p.PartitionEpoch++
	m.maybeCompleteReassignment(req.Topic, p)
	return p.clone(), nil
}

// reassign starts moving a partition to target: the replicas become old ∪ target; the move
// completes (maybeCompleteReassignment) once every target replica is in the ISR.
func (m *Metadata) reassign(req *ReassignRequest) (*Partition, error) {
	_, p, err := m.partition(req.Topic, req.Partition)
	if err != nil {
		return nil, err
	}
	target := slices.Clone(req.Replicas)
	if len(target) == 0 || len(target) > replicationFactorMax {
		return nil, fmt.Errorf("reassign %s/%d to %v: %w", req.Topic, req.Partition, target, ErrInvalidReplicas)
	}
	for i, id := range target {
		if _, ok := m.Brokers[id]; !ok || slices.Contains(target[:i], id) {
			return nil, fmt.Errorf("reassign %s/%d to %v: broker %d unknown or repeated: %w", req.Topic, req.Partition, target, id, ErrInvalidReplicas)
		}
	}
	replicas := slices.Clone(target)
	for _, id := range p.Replicas {
		if !slices.Contains(replicas, id) {
			replicas = append(replicas, id)
		}
	}
	p = m.writablePartition(req.Topic, req.Partition)
	p.Replicas = replicas
	p.TargetReplicas = target
	p.PartitionEpoch++
	m.maybeCompleteReassignment(req.Topic, p)
	return p.clone(), nil
}

// maybeCompleteReassignment: p must be writable (writablePartition).
func (m *Metadata) maybeCompleteReassignment(topic string, p *Partition) {
	if p.TargetReplicas == nil {
		return
	}
	for _, id := range p.TargetReplicas {
		if !slices.Contains(p.ISR, id) {
			return
		}
	}
	p.Replicas = p.TargetReplicas
	p.TargetReplicas = nil
	p.ISR = slices.DeleteFunc(slices.Clone(p.ISR), func(id int32) bool { return !slices.Contains(p.Replicas, id) })
	p.PartitionEpoch++
	if !slices.Contains(p.Replicas, p.Leader) {
		m.elect(m.Topics[topic], p)
	}
}

// electPreferred makes the preferred replica (the first of the assignment) the leader when
// it is live and in the ISR.
func (m *Metadata) electPreferred(topic string, index int32) (*Partition, error) {
	_, p, err := m.partition(topic, index)
	if err != nil {
		return nil, err
	}
	preferred := p.Replicas[0]
	if p.Leader == preferred {
		return p.clone(), nil
	}
	if !m.live(preferred) || !slices.Contains(p.ISR, preferred) {
		return nil, fmt.Errorf("%s/%d: preferred %d (live %v, isr %v): %w", topic, index, preferred, m.live(preferred), p.ISR, ErrPreferredNotEligible)
	}
	p = m.writablePartition(topic, index)
	p.Leader = preferred
	p.LeaderEpoch++
	p.PartitionEpoch++
	return p.clone(), nil
}
