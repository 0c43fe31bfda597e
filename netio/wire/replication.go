package wire

import "fmt"

// ---------------------------------------------------------------------------------------
// ReplicaFetch (key 11)

// ReplicaFetchRequest is a follower broker's fetch from the leader of its partitions: it
// reads up to the leader's log end offset (not the high watermark), each partition's
// FetchOffset is the follower's log end offset (which the leader records), and
// CurrentLeaderEpoch fences a follower with stale metadata (FENCED_LEADER_EPOCH).
//
// Version 1 appends ProtocolVersion, the cluster's finalized inter-broker protocol version
// (replication/controller's features.go), after the version 0 fields: a broker that does
// not speak it answers UNSUPPORTED_PROTOCOL_VERSION, one that knows only version 0 of the
// API answers UNSUPPORTED_VERSION; neither misreads the request. A follower sends version 1
// once the cluster's finalized version is 2 or more, version 0 (no ProtocolVersion) before.
type ReplicaFetchRequest struct {
	ReplicaID int32
	MaxWaitMs int32
	MinBytes  int32
	MaxBytes  int32 // soft cap on the whole response; the first batch is always returned whole
	Topics    []ReplicaFetchTopic
	// ProtocolVersion (version 1; 0 in version 0) is the sender's inter-broker protocol
	// version.
	ProtocolVersion uint16

	wireVersion uint16 // the frame's version while decoding
}

type ReplicaFetchTopic struct {
	Topic      string
	Partitions []ReplicaFetchPartition
}

type ReplicaFetchPartition struct {
	Partition          int32
	CurrentLeaderEpoch int32
	FetchOffset        int64
	MaxBytes           int32
}

type ReplicaFetchResponse struct {
	Topics []ReplicaFetchResponseTopic
}

type ReplicaFetchResponseTopic struct {
	Topic      string
	Partitions []ReplicaFetchResponsePartition
}

// ReplicaFetchResponsePartition carries the leader's high watermark and log end offset and
// the batches from the fetch offset, as stored (offsets and leader epochs included).
type ReplicaFetchResponsePartition struct {
	Partition      int32
	ErrorCode      ErrorCode
	ErrorMessage   string
	HighWatermark  int64
	LogStartOffset int64
	LogEndOffset   int64
	Records        []byte
}

func (*ReplicaFetchRequest) API() APIKey  { return APIReplicaFetch }
func (*ReplicaFetchResponse) API() APIKey { return APIReplicaFetch }

// WireVersion is 1 when the request carries a protocol version, else 0.
func (m *ReplicaFetchRequest) WireVersion() uint16     { return protocolWireVersion(m.ProtocolVersion) }
func (m *ReplicaFetchRequest) SetWireVersion(v uint16) { m.wireVersion = v }

// ReplicaFetchVersionMax and ControllerVersionMax are the highest versions of those APIs
// this package encodes (version 1 carries the inter-broker protocol version).
const (
	ReplicaFetchVersionMax = 1
	ControllerVersionMax   = 1
)

func protocolWireVersion(protocol uint16) uint16 {
	if protocol > 0 {
		return 1
	}
	return 0
}

// readProtocolVersion reads the trailing protocol version of a version 1 request (which
// must not be 0), nothing for version 0.
func readProtocolVersion(r *reader, wireVersion uint16) uint16 {
	if wireVersion < 1 {
		return 0
	}
	v := uint16(r.int16())
	if v == 0 {
		r.fail(fmt.Errorf("version 1 request with protocol version 0"))
	}
	return v
}

func (m *ReplicaFetchRequest) AppendTo(dst []byte) []byte {
	dst = appendInt32(dst, m.ReplicaID)
	dst = appendInt32(dst, m.MaxWaitMs)
	dst = appendInt32(dst, m.MinBytes)
	dst = appendInt32(dst, m.MaxBytes)
	dst = appendArrayLen(dst, len(m.Topics), false, false)
	for i := range m.Topics {
		t := &m.Topics[i]
		dst = appendString(dst, t.Topic)
		dst = appendArrayLen(dst, len(t.Partitions), false, false)
		for _, p := range t.Partitions {
			dst = appendInt32(dst, p.Partition)
			dst = appendInt32(dst, p.CurrentLeaderEpoch)
			dst = appendInt64(dst, p.FetchOffset)
			dst = appendInt32(dst, p.MaxBytes)
		}
	}
	if m.ProtocolVersion > 0 {
		dst = appendInt16(dst, int16(m.ProtocolVersion))
	}
	return dst
}

func (m *ReplicaFetchRequest) ReadFrom(b []byte) error {
	r := reader{buf: b}
	m.ReplicaID = r.int32()
	m.MaxWaitMs = r.int32()
	m.MinBytes = r.int32()
	m.MaxBytes = r.int32()
	m.Topics = makeSlice[ReplicaFetchTopic](r.arrayLen(2 + 4))
	for i := range m.Topics {
		t := &m.Topics[i]
		t.Topic = r.string()
		t.Partitions = makeSlice[ReplicaFetchPartition](r.arrayLen(4 + 4 + 8 + 4))
		for j := range t.Partitions {
			t.Partitions[j] = ReplicaFetchPartition{r.int32(), r.int32(), r.int64(), r.int32()}
		}
	}
	m.ProtocolVersion = readProtocolVersion(&r, m.wireVersion)
	return r.done("ReplicaFetch request")
}

func (m *ReplicaFetchResponse) AppendTo(dst []byte) []byte {
	dst = appendArrayLen(dst, len(m.Topics), false, false)
	for i := range m.Topics {
		t := &m.Topics[i]
		dst = appendString(dst, t.Topic)
		dst = appendArrayLen(dst, len(t.Partitions), false, false)
		for j := range t.Partitions {
			p := &t.Partitions[j]
			dst = appendInt32(dst, p.Partition)
			dst = appendInt16(dst, int16(p.ErrorCode))
			dst = appendString(dst, p.ErrorMessage)
			dst = appendInt64(dst, p.HighWatermark)
			dst = appendInt64(dst, p.LogStartOffset)
			dst = appendInt64(dst, p.LogEndOffset)
			dst = appendBytes(dst, p.Records)
		}
	}
	return dst
}

func (m *ReplicaFetchResponse) ReadFrom(b []byte) error {
	r := reader{buf: b}
	m.Topics = makeSlice[ReplicaFetchResponseTopic](r.arrayLen(2 + 4))
	for i := range m.Topics {
		t := &m.Topics[i]
		t.Topic = r.string()
		t.Partitions = makeSlice[ReplicaFetchResponsePartition](r.arrayLen(4 + 2 + 2 + 8 + 8 + 8 + 4))
		for j := range t.Partitions {
			p := &t.Partitions[j]
			p.Partition = r.int32()
			p.ErrorCode = ErrorCode(r.int16())
			p.ErrorMessage = r.string()
			p.HighWatermark = r.int64()
			p.LogStartOffset = r.int64()
			p.LogEndOffset = r.int64()
			p.Records = r.bytes()
		}
	}
	return r.done("ReplicaFetch response")
}

// ---------------------------------------------------------------------------------------
// OffsetsForLeaderEpoch (key 12)

// OffsetsForLeaderEpochRequest asks a partition's leader where its log stops holding
// records of LeaderEpoch (the first offset of the next epoch it has, or its log end
// offset): a follower truncates its log to where the two diverge (KIP-101, KIP-279).
type OffsetsForLeaderEpochRequest struct {
	Topics []OffsetsForLeaderEpochTopic
}

type OffsetsForLeaderEpochTopic struct {
	Topic      string
	Partitions []OffsetsForLeaderEpochPartition
}

type OffsetsForLeaderEpochPartition struct {
	Partition          int32
	CurrentLeaderEpoch int32
	LeaderEpoch        int32
}

type OffsetsForLeaderEpochResponse struct {
	Topics []OffsetsForLeaderEpochResponseTopic
}

type OffsetsForLeaderEpochResponseTopic struct {
	Topic      string
	Partitions []OffsetsForLeaderEpochResponsePartition
}

// OffsetsForLeaderEpochResponsePartition: LeaderEpoch is the largest epoch at or below the
// one asked that the leader has, EndOffset where it ends; -1 and -1 when it has none.
type OffsetsForLeaderEpochResponsePartition struct {
	Partition    int32
	ErrorCode    ErrorCode
	ErrorMessage string
	LeaderEpoch  int32
	EndOffset    int64
}

func (*OffsetsForLeaderEpochRequest) API() APIKey  { return APIOffsetsForLeaderEpoch }
func (*OffsetsForLeaderEpochResponse) API() APIKey { return APIOffsetsForLeaderEpoch }

func (m *OffsetsForLeaderEpochRequest) AppendTo(dst []byte) []byte {
	dst = appendArrayLen(dst, len(m.Topics), false, false)
	for i := range m.Topics {
		t := &m.Topics[i]
		dst = appendString(dst, t.Topic)
		dst = appendArrayLen(dst, len(t.Partitions), false, false)
		for _, p := range t.Partitions {
			dst = appendInt32(dst, p.Partition)
			dst = appendInt32(dst, p.CurrentLeaderEpoch)
			dst = appendInt32(dst, p.LeaderEpoch)
		}
	}
	return dst
}

func (m *OffsetsForLeaderEpochRequest) ReadFrom(b []byte) error {
	r := reader{buf: b}
	m.Topics = makeSlice[OffsetsForLeaderEpochTopic](r.arrayLen(2 + 4))
	for i := range m.Topics {
		t := &m.Topics[i]
		t.Topic = r.string()
		t.Partitions = makeSlice[OffsetsForLeaderEpochPartition](r.arrayLen(4 + 4 + 4))
		for j := range t.Partitions {
			t.Partitions[j] = OffsetsForLeaderEpochPartition{r.int32(), r.int32(), r.int32()}
		}
	}
	return r.done("OffsetsForLeaderEpoch request")
}

func (m *OffsetsForLeaderEpochResponse) AppendTo(dst []byte) []byte {
	dst = appendArrayLen(dst, len(m.Topics), false, false)
	for i := range m.Topics {
		t := &m.Topics[i]
		dst = appendString(dst, t.Topic)
		dst = appendArrayLen(dst, len(t.Partitions), false, false)
		for _, p := range t.Partitions {
			dst = appendInt32(dst, p.Partition)
			dst = appendInt16(dst, int16(p.ErrorCode))
			dst = appendString(dst, p.ErrorMessage)
			dst = appendInt32(dst, p.LeaderEpoch)
			dst = appendInt64(dst, p.EndOffset)
		}
	}
	return dst
}

func (m *OffsetsForLeaderEpochResponse) ReadFrom(b []byte) error {
	r := reader{buf: b}
	m.Topics = makeSlice[OffsetsForLeaderEpochResponseTopic](r.arrayLen(2 + 4))
	for i := range m.Topics {
		t := &m.Topics[i]
		t.Topic = r.string()
		t.Partitions = makeSlice[OffsetsForLeaderEpochResponsePartition](r.arrayLen(4 + 2 + 2 + 4 + 8))
		for j := range t.Partitions {
			t.Partitions[j] = OffsetsForLeaderEpochResponsePartition{r.int32(), ErrorCode(r.int16()), r.string(), r.int32(), r.int64()}
		}
	}
	return r.done("OffsetsForLeaderEpoch response")
}

// ---------------------------------------------------------------------------------------
// Controller (key 13)

// Controller operations.
const (
	// ControllerSubmit replicates Body, a JSON controller command, through the controller
	// quorum; the response's Body is the JSON of the command's result value. The broker
	// whose voter leads the quorum applies it; any other forwards a client's command to
	// the leader's broker, marked Forwarded, and a Forwarded command it refuses with
	// NOT_CONTROLLER (never forwarded twice).
	ControllerSubmit int8 = 0
	// ControllerMetadata returns the controller metadata (JSON) as this broker last saw it.
	ControllerMetadata int8 = 1
)

// ControllerRequest carries a cluster-metadata operation between brokers, and from the CLI
// (cluster describe). The body's JSON is the controller's own schema (replication/controller).
//
// Version 1 appends ProtocolVersion, as ReplicaFetch does: a broker sends version 1 to
// another broker (forwarded commands, metadata watches) once the cluster's finalized
// inter-broker protocol version is 2 or more; the CLI sends version 0.
type ControllerRequest struct {
	Op   int8
	Body []byte
	// ProtocolVersion (version 1; 0 in version 0) is the sender's inter-broker protocol
	// version.
	ProtocolVersion uint16

	wireVersion uint16 // the frame's version while decoding
}

func (m *ControllerRequest) WireVersion() uint16     { return protocolWireVersion(m.ProtocolVersion) }
func (m *ControllerRequest) SetWireVersion(v uint16) { m.wireVersion = v }

type ControllerResponse struct {
	ErrorCode    ErrorCode
	ErrorMessage string
	Body         []byte
}

func (*ControllerRequest) API() APIKey  { return APIController }
func (*ControllerResponse) API() APIKey { return APIController }

func (m *ControllerRequest) AppendTo(dst []byte) []byte {
	dst = appendInt8(dst, m.Op)
	dst = appendBytes(dst, m.Body)
	if m.ProtocolVersion > 0 {
		dst = appendInt16(dst, int16(m.ProtocolVersion))
	}
	return dst
}

func (m *ControllerRequest) ReadFrom(b []byte) error {
	r := reader{buf: b}
	m.Op = r.int8()
	m.Body = r.bytes()
	m.ProtocolVersion = readProtocolVersion(&r, m.wireVersion)
	return r.done("Controller request")
}

func (m *ControllerResponse) AppendTo(dst []byte) []byte {
	dst = appendInt16(dst, int16(m.ErrorCode))
	dst = appendString(dst, m.ErrorMessage)
	return appendBytes(dst, m.Body)
}

func (m *ControllerResponse) ReadFrom(b []byte) error {
	r := reader{buf: b}
	m.ErrorCode = ErrorCode(r.int16())
	m.ErrorMessage = r.string()
	m.Body = r.bytes()
	return r.done("Controller response")
}
