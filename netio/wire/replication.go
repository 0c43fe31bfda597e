package wire

// ---------------------------------------------------------------------------------------
// ReplicaFetch (key 11)

// ReplicaFetchRequest is a follower broker's fetch from the leader of its partitions: it
// reads up to the leader's log end offset (not the high watermark), each partition's
// FetchOffset is the follower's log end offset (which the leader records), and
// CurrentLeaderEpoch fences a follower with stale metadata (FENCED_LEADER_EPOCH).
type ReplicaFetchRequest struct {
	ReplicaID int32
	MaxWaitMs int32
	MinBytes  int32
	MaxBytes  int32 // soft cap on the whole response; the first batch is always returned whole
	Topics    []ReplicaFetchTopic
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
type ControllerRequest struct {
	Op   int8
	Body []byte
}

type ControllerResponse struct {
	ErrorCode    ErrorCode
	ErrorMessage string
	Body         []byte
}

func (*ControllerRequest) API() APIKey  { return APIController }
func (*ControllerResponse) API() APIKey { return APIController }

func (m *ControllerRequest) AppendTo(dst []byte) []byte {
	dst = appendInt8(dst, m.Op)
	return appendBytes(dst, m.Body)
}

func (m *ControllerRequest) ReadFrom(b []byte) error {
	r := reader{buf: b}
	m.Op = r.int8()
	m.Body = r.bytes()
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
