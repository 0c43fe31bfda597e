package wire

import (
	"encoding/binary"
	"fmt"
	"os"
)

// Message is one API's request or response schema, version 0. Every schema is written in
// the same shape: AppendTo appends the payload (no frame header) and ReadFrom decodes a
// whole payload, with a sticky-error reader checked once at the end. ReadFrom keeps
// sub-slices of the payload for raw byte fields (record batches), so the payload must stay
// unchanged while the message is in use.
type Message interface {
	API() APIKey
	AppendTo(dst []byte) []byte
	ReadFrom(payload []byte) error
}

// Versioned is a message whose schema depends on the API version in its frame header.
// AppendRequest writes WireVersion in the request header; a decoder is told the header's
// version with SetWireVersion before ReadFrom (the server for requests, the client for
// responses), and a response is encoded at the version of the request it answers.
type Versioned interface {
	Message
	WireVersion() uint16
	SetWireVersion(v uint16)
}

// NewRequest returns an empty request message for key, or nil for an unknown key.
func NewRequest(key APIKey) Message {
	switch key {
	case APIVersions:
		return new(APIVersionsRequest)
	case APIProduce:
		return new(ProduceRequest)
	case APIFetch:
		return new(FetchRequest)
	case APIListOffsets:
		return new(ListOffsetsRequest)
	case APIMetadata:
		return new(MetadataRequest)
	case APICreateTopics:
		return new(CreateTopicsRequest)
	case APIDeleteTopics:
		return new(DeleteTopicsRequest)
	case APIDescribeTopics:
		return new(DescribeTopicsRequest)
	case APIDescribeConfigs:
		return new(DescribeConfigsRequest)
	case APIAlterConfigs:
		return new(AlterConfigsRequest)
	case APIInitProducerID:
		return new(InitProducerIDRequest)
	case APIFindCoordinator:
		return new(FindCoordinatorRequest)
	case APIJoinGroup:
		return new(JoinGroupRequest)
	case APISyncGroup:
		return new(SyncGroupRequest)
	case APIHeartbeat:
		return new(HeartbeatRequest)
	case APILeaveGroup:
		return new(LeaveGroupRequest)
	case APIOffsetCommit:
		return new(OffsetCommitRequest)
	case APIOffsetFetch:
		return new(OffsetFetchRequest)
	case APIListGroups:
		return new(ListGroupsRequest)
	case APIDescribeGroups:
		return new(DescribeGroupsRequest)
	case APIDeleteGroups:
		return new(DeleteGroupsRequest)
	case APIReplicaFetch:
		return new(ReplicaFetchRequest)
	case APIOffsetsForLeaderEpoch:
		return new(OffsetsForLeaderEpochRequest)
	case APIController:
		return new(ControllerRequest)
	case APIQuotaGroup:
		return new(QuotaGroupRequest)
	case APIReplicaFetchWake:
		return new(ReplicaFetchWakeRequest)
	case APISaslHandshake:
		return new(SaslHandshakeRequest)
	case APISaslAuthenticate:
		return new(SaslAuthenticateRequest)
	case APIDescribeUsers:
		return new(DescribeUsersRequest)
	case APIAlterUsers:
		return new(AlterUsersRequest)
	case APIDescribeAcls:
		return new(DescribeAclsRequest)
	case APICreateAcls:
		return new(CreateAclsRequest)
	case APIDeleteAcls:
		return new(DeleteAclsRequest)
	}
	return nil
}

// NewResponse returns an empty response message for key, or nil for an unknown key.
func NewResponse(key APIKey) Message {
	switch key {
	case APIVersions:
		return new(APIVersionsResponse)
	case APIProduce:
		return new(ProduceResponse)
	case APIFetch:
		return new(FetchResponse)
	case APIListOffsets:
		return new(ListOffsetsResponse)
	case APIMetadata:
		return new(MetadataResponse)
	case APICreateTopics:
		return new(CreateTopicsResponse)
	case APIDeleteTopics:
		return new(DeleteTopicsResponse)
	case APIDescribeTopics:
		return new(DescribeTopicsResponse)
	case APIDescribeConfigs:
		return new(DescribeConfigsResponse)
	case APIAlterConfigs:
		return new(AlterConfigsResponse)
	case APIInitProducerID:
		return new(InitProducerIDResponse)
	case APIFindCoordinator:
		return new(FindCoordinatorResponse)
	case APIJoinGroup:
		return new(JoinGroupResponse)
	case APISyncGroup:
		return new(SyncGroupResponse)
	case APIHeartbeat:
		return new(HeartbeatResponse)
	case APILeaveGroup:
		return new(LeaveGroupResponse)
	case APIOffsetCommit:
		return new(OffsetCommitResponse)
	case APIOffsetFetch:
		return new(OffsetFetchResponse)
	case APIListGroups:
		return new(ListGroupsResponse)
	case APIDescribeGroups:
		return new(DescribeGroupsResponse)
	case APIDeleteGroups:
		return new(DeleteGroupsResponse)
	case APIReplicaFetch:
		return new(ReplicaFetchResponse)
	case APIOffsetsForLeaderEpoch:
		return new(OffsetsForLeaderEpochResponse)
	case APIController:
		return new(ControllerResponse)
	case APIQuotaGroup:
		return new(QuotaGroupResponse)
	case APIReplicaFetchWake:
		return new(ReplicaFetchWakeResponse)
	case APISaslHandshake:
		return new(SaslHandshakeResponse)
	case APISaslAuthenticate:
		return new(SaslAuthenticateResponse)
	case APIDescribeUsers:
		return new(DescribeUsersResponse)
	case APIAlterUsers:
		return new(AlterUsersResponse)
	case APIDescribeAcls:
		return new(DescribeAclsResponse)
	case APICreateAcls:
		return new(CreateAclsResponse)
	case APIDeleteAcls:
		return new(DeleteAclsResponse)
	}
	return nil
}

// Acks values of a produce request.
const (
	AcksNone   int16 = 0  // no response is sent
	AcksLeader int16 = 1  // answered after the leader's write completes
	AcksAll    int16 = -1 // answered once the high watermark covers the batch
)

// Special timestamps of a list-offsets request.
const (
	TimestampLatest   int64 = -1 // the high watermark (next offset to be written)
	TimestampEarliest int64 = -2 // the log start offset
)

// ---------------------------------------------------------------------------------------
// ApiVersions (key 0)

// APIVersionsRequest is the handshake a client sends first.
type APIVersionsRequest struct {
	ClientID string
}

// APIVersionRange is one supported API and its version range.
type APIVersionRange struct {
	API        APIKey
	VersionMin uint16
	VersionMax uint16
}

// APIVersionsResponse lists what the broker speaks and its connection limits.
type APIVersionsResponse struct {
	APIs               []APIVersionRange
	FrameBytesMax      int32 // largest request frame length the broker accepts
	InflightPerConnMax int32 // requests the broker reads ahead per connection
	BrokerVersion      string
}

func (*APIVersionsRequest) API() APIKey  { return APIVersions }
func (*APIVersionsResponse) API() APIKey { return APIVersions }

func (m *APIVersionsRequest) AppendTo(dst []byte) []byte { return appendString(dst, m.ClientID) }

func (m *APIVersionsRequest) ReadFrom(b []byte) error {
	r := reader{buf: b}
	m.ClientID = r.string()
	return r.done("ApiVersions request")
}

func (m *APIVersionsResponse) AppendTo(dst []byte) []byte {
	dst = appendArrayLen(dst, len(m.APIs), m.APIs == nil, false)
	for _, a := range m.APIs {
		dst = appendInt16(dst, int16(a.API))
		dst = appendInt16(dst, int16(a.VersionMin))
		dst = appendInt16(dst, int16(a.VersionMax))
	}
	dst = appendInt32(dst, m.FrameBytesMax)
	dst = appendInt32(dst, m.InflightPerConnMax)
	return appendString(dst, m.BrokerVersion)
}

func (m *APIVersionsResponse) ReadFrom(b []byte) error {
	r := reader{buf: b}
	n := r.arrayLen(6)
	m.APIs = nil
	if n > 0 {
		m.APIs = make([]APIVersionRange, n)
	}
	for i := range m.APIs {
		m.APIs[i] = APIVersionRange{APIKey(r.int16()), uint16(r.int16()), uint16(r.int16())}
	}
	m.FrameBytesMax = r.int32()
	m.InflightPerConnMax = r.int32()
	m.BrokerVersion = r.string()
	return r.done("ApiVersions response")
}

// ---------------------------------------------------------------------------------------
// Produce (key 1)

// ProduceRequest appends raw Kafka v2 record batches to partitions.
type ProduceRequest struct {
	Acks      int16 // AcksNone, AcksLeader or AcksAll
	TimeoutMs int32 // how long acks=all may wait for replication
	Topics    []ProduceTopic
}

type ProduceTopic struct {
	Topic      string
	Partitions []ProducePartition
}

type ProducePartition struct {
	Partition int32
	Records   []byte // one or more Kafka RecordBatch v2, concatenated
}

type ProduceResponse struct {
	ThrottleMs int32
	Topics     []ProduceResponseTopic
}

type ProduceResponseTopic struct {
	Topic      string
	Partitions []ProduceResponsePartition
}

type ProduceResponsePartition struct {
	Partition      int32
	ErrorCode      ErrorCode
	ErrorMessage   string
	BaseOffset     int64 // offset given to the first record of the first batch
	LogAppendTime  int64 // ms since epoch, or -1 when the topic uses create time
	LogStartOffset int64
}

func (*ProduceRequest) API() APIKey  { return APIProduce }
func (*ProduceResponse) API() APIKey { return APIProduce }

func (m *ProduceRequest) AppendTo(dst []byte) []byte {
	dst = appendInt16(dst, m.Acks)
	dst = appendInt32(dst, m.TimeoutMs)
	dst = appendArrayLen(dst, len(m.Topics), false, false)
	for i := range m.Topics {
		t := &m.Topics[i]
		dst = appendString(dst, t.Topic)
		dst = appendArrayLen(dst, len(t.Partitions), false, false)
		for j := range t.Partitions {
			p := &t.Partitions[j]
			dst = appendInt32(dst, p.Partition)
			dst = appendBytes(dst, p.Records)
		}
	}
	return dst
}

// ReadFrom decodes a produce request. Decoding into a message decoded before reuses its
// arrays and its equal topic strings (the broker's pooled requests allocate nothing).
func (m *ProduceRequest) ReadFrom(b []byte) error {
	r := reader{buf: b}
	m.Acks = r.int16()
	m.TimeoutMs = r.int32()
	m.Topics = reuseSlice(m.Topics, r.arrayLen(2+4))
	for i := range m.Topics {
		t := &m.Topics[i]
		t.Topic = r.stringReusing(t.Topic)
		t.Partitions = reuseSlice(t.Partitions, r.arrayLen(4+4))
		for j := range t.Partitions {
			p := &t.Partitions[j]
			p.Partition = r.int32()
			p.Records = r.bytes()
		}
	}
	return r.done("Produce request")
}

func (m *ProduceResponse) AppendTo(dst []byte) []byte {
	dst = appendInt32(dst, m.ThrottleMs)
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
			dst = appendInt64(dst, p.BaseOffset)
			dst = appendInt64(dst, p.LogAppendTime)
			dst = appendInt64(dst, p.LogStartOffset)
		}
	}
	return dst
}

// ReadFrom decodes a produce response. Like ProduceRequest's, decoding into a message
// decoded before reuses its arrays and its equal topic strings (the client's pooled produce
// requests decode their answers without allocating).
func (m *ProduceResponse) ReadFrom(b []byte) error {
	r := reader{buf: b}
	m.ThrottleMs = r.int32()
	m.Topics = reuseSlice(m.Topics, r.arrayLen(2+4))
	for i := range m.Topics {
		t := &m.Topics[i]
		t.Topic = r.stringReusing(t.Topic)
		t.Partitions = reuseSlice(t.Partitions, r.arrayLen(4+2+2+8+8+8))
		for j := range t.Partitions {
			p := &t.Partitions[j]
			p.Partition = r.int32()
			p.ErrorCode = ErrorCode(r.int16())
			p.ErrorMessage = r.string()
			p.BaseOffset = r.int64()
			p.LogAppendTime = r.int64()
			p.LogStartOffset = r.int64()
		}
	}
	return r.done("Produce response")
}

// ---------------------------------------------------------------------------------------
// Fetch (key 2)

// FetchRequest reads record batches from partitions, waiting up to MaxWaitMs until at
// least MinBytes are available (long-poll).
type FetchRequest struct {
	MaxWaitMs int32
	MinBytes  int32
	MaxBytes  int32 // soft cap on the whole response; the first batch is always returned whole
	Isolation int8  // 0 = read up to the high watermark (the only level so far)
	Topics    []FetchTopic
}

type FetchTopic struct {
	Topic      string
	Partitions []FetchPartition
}

type FetchPartition struct {
	Partition   int32
	FetchOffset int64
	MaxBytes    int32
}

type FetchResponse struct {
	ThrottleMs int32
	Topics     []FetchResponseTopic
}

type FetchResponseTopic struct {
	Topic      string
	Partitions []FetchResponsePartition
}

// FetchResponsePartition carries a partition's batches. On the wire the records field is
// the last field of the entry, so a server can write everything before it from memory and
// then send the batch bytes straight from segment files. A server sets either Records or
// RecordsFile; a decoded response always has Records (a sub-slice of the frame payload).
type FetchResponsePartition struct {
	Partition      int32
	ErrorCode      ErrorCode
	ErrorMessage   string
	HighWatermark  int64
	LogStartOffset int64
	Records        []byte
	RecordsFile    []FileRange // server side only: file (or memory) ranges sent in place of Records
	// RecordsCRCChecked is client side only, never on the wire: the length of the prefix of
	// Records made of whole batches whose CRC-32C the bundled client checked as the bytes
	// arrived (netio/client's fetchChecker); 0 when it checked none.
	RecordsCRCChecked int
}

// FileRange is a byte range of an open segment file that the server sends without copying
// it through user space. The file must stay open until the response that carries it has
// been written or dropped (see Response.Done). With File nil it is an in-memory range
// instead (Data, Length = len(Data): direct mode's recent-block cache), sent from where it
// lies, never copied into the frame buffer; it must stay unmodified until the response has
// been written or dropped.
type FileRange struct {
	File   *os.File
	Offset int64
	Length int64
	Data   []byte
}

// Splice marks where, in an encoded frame buffer, bytes that are not in the buffer belong:
// either a file range (sent with sendfile) or a memory slice (sent with writev, not copied
// into the buffer). Exactly one of Range.File and Data is set.
type Splice struct {
	At    int // byte offset in the frame buffer; these bytes go before buf[At]
	Range FileRange
	Data  []byte
}

// Len is the number of bytes the splice contributes to the frame.
func (s Splice) Len() int64 {
	if s.Range.File != nil {
		return s.Range.Length
	}
	return int64(len(s.Data))
}

// spliceBytesMin is the smallest in-memory records field that AppendResponseSpliced leaves
// out of the frame buffer: below a few KiB a copy is cheaper than another iovec.
const spliceBytesMin = 4 << 10

func (*FetchRequest) API() APIKey  { return APIFetch }
func (*FetchResponse) API() APIKey { return APIFetch }

func (m *FetchRequest) AppendTo(dst []byte) []byte {
	dst = appendInt32(dst, m.MaxWaitMs)
	dst = appendInt32(dst, m.MinBytes)
	dst = appendInt32(dst, m.MaxBytes)
	dst = appendInt8(dst, m.Isolation)
	dst = appendArrayLen(dst, len(m.Topics), false, false)
	for i := range m.Topics {
		t := &m.Topics[i]
		dst = appendString(dst, t.Topic)
		dst = appendArrayLen(dst, len(t.Partitions), false, false)
		for _, p := range t.Partitions {
			dst = appendInt32(dst, p.Partition)
			dst = appendInt64(dst, p.FetchOffset)
			dst = appendInt32(dst, p.MaxBytes)
		}
	}
	return dst
}

// ReadFrom decodes a fetch request, reusing m's arrays and equal strings as
// ProduceRequest.ReadFrom does.
func (m *FetchRequest) ReadFrom(b []byte) error {
	r := reader{buf: b}
	m.MaxWaitMs = r.int32()
	m.MinBytes = r.int32()
	m.MaxBytes = r.int32()
	m.Isolation = r.int8()
	m.Topics = reuseSlice(m.Topics, r.arrayLen(2+4))
	for i := range m.Topics {
		t := &m.Topics[i]
		t.Topic = r.stringReusing(t.Topic)
		t.Partitions = reuseSlice(t.Partitions, r.arrayLen(4+8+4))
		for j := range t.Partitions {
			t.Partitions[j] = FetchPartition{r.int32(), r.int64(), r.int32()}
		}
	}
	return r.done("Fetch request")
}

// AppendTo encodes the response with its records in memory. It panics if a partition
// carries RecordsFile: such a response is encoded with AppendResponseSpliced.
func (m *FetchResponse) AppendTo(dst []byte) []byte {
	dst, splices := m.appendSpliced(dst, nil, false)
	if len(splices) != 0 {
		panic("netio: FetchResponse with RecordsFile must be encoded with AppendResponseSpliced")
	}
	return dst
}

func (m *FetchResponse) appendSpliced(dst []byte, splices []Splice, spliceMemory bool) ([]byte, []Splice) {
	dst = appendInt32(dst, m.ThrottleMs)
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
			if len(p.RecordsFile) == 0 {
				if spliceMemory && len(p.Records) >= spliceBytesMin {
					dst = appendInt32(dst, int32(len(p.Records)))
					splices = append(splices, Splice{At: len(dst), Data: p.Records})
					continue
				}
				dst = appendBytes(dst, p.Records)
				continue
			}
			var total int64
			for _, fr := range p.RecordsFile {
				total += fr.Length
			}
			if total > 1<<31-1 {
				panic(fmt.Sprintf("netio: fetch records of %d bytes exceed int32", total))
			}
			dst = appendInt32(dst, int32(total))
			for _, fr := range p.RecordsFile {
				if fr.File == nil {
					splices = append(splices, Splice{At: len(dst), Data: fr.Data})
					continue
				}
				splices = append(splices, Splice{At: len(dst), Range: fr})
			}
		}
	}
	return dst, splices
}

func (m *FetchResponse) ReadFrom(b []byte) error {
	r := reader{buf: b}
	m.ThrottleMs = r.int32()
	m.Topics = makeSlice[FetchResponseTopic](r.arrayLen(2 + 4))
	for i := range m.Topics {
		t := &m.Topics[i]
		t.Topic = r.string()
		t.Partitions = makeSlice[FetchResponsePartition](r.arrayLen(4 + 2 + 2 + 8 + 8 + 4))
		for j := range t.Partitions {
			p := &t.Partitions[j]
			p.Partition = r.int32()
			p.ErrorCode = ErrorCode(r.int16())
			p.ErrorMessage = r.string()
			p.HighWatermark = r.int64()
			p.LogStartOffset = r.int64()
			p.Records = r.bytes()
		}
	}
	return r.done("Fetch response")
}

// AppendResponseSpliced appends a successful response frame for m to dst and returns the
// file ranges (and large in-memory record slices) that belong inside it. The frame length
// counts the spliced bytes; the sender writes buf[:s[0].At], s[0], buf[s[0].At:s[1].At],
// ..., buf[s[n-1].At:].
func AppendResponseSpliced(dst []byte, h RequestHeader, m Message, splices []Splice) ([]byte, []Splice) {
	start := len(dst)
	dst = appendResponseHeader(dst, h, ErrNone)
	first := len(splices)
	if f, ok := m.(*FetchResponse); ok {
		dst, splices = f.appendSpliced(dst, splices, true)
	} else {
		dst = m.AppendTo(dst)
	}
	length := int64(len(dst) - start - FrameLengthBytes)
	for _, s := range splices[first:] {
		length += s.Len()
	}
	if length > 1<<32-1 {
		panic(fmt.Sprintf("netio: response frame of %d bytes exceeds u32", length))
	}
	binary.BigEndian.PutUint32(dst[start:], uint32(length))
	return dst, splices
}

// ---------------------------------------------------------------------------------------
// ListOffsets (key 3)

type ListOffsetsRequest struct {
	Topics []ListOffsetsTopic
}

type ListOffsetsTopic struct {
	Topic      string
	Partitions []ListOffsetsPartition
}

type ListOffsetsPartition struct {
	Partition int32
	Timestamp int64 // TimestampLatest, TimestampEarliest, or ms since epoch
}

type ListOffsetsResponse struct {
	Topics []ListOffsetsResponseTopic
}

type ListOffsetsResponseTopic struct {
	Topic      string
	Partitions []ListOffsetsResponsePartition
}

// ListOffsetsResponsePartition answers one lookup. For a timestamp lookup Offset is the
// first offset whose record timestamp is >= the requested one and Timestamp is that
// record's timestamp; when no such record exists Offset and Timestamp are -1.
type ListOffsetsResponsePartition struct {
	Partition    int32
	ErrorCode    ErrorCode
	ErrorMessage string
	Timestamp    int64
	Offset       int64
}

func (*ListOffsetsRequest) API() APIKey  { return APIListOffsets }
func (*ListOffsetsResponse) API() APIKey { return APIListOffsets }

func (m *ListOffsetsRequest) AppendTo(dst []byte) []byte {
	dst = appendArrayLen(dst, len(m.Topics), false, false)
	for i := range m.Topics {
		t := &m.Topics[i]
		dst = appendString(dst, t.Topic)
		dst = appendArrayLen(dst, len(t.Partitions), false, false)
		for _, p := range t.Partitions {
			dst = appendInt32(dst, p.Partition)
			dst = appendInt64(dst, p.Timestamp)
		}
	}
	return dst
}

func (m *ListOffsetsRequest) ReadFrom(b []byte) error {
	r := reader{buf: b}
	m.Topics = makeSlice[ListOffsetsTopic](r.arrayLen(2 + 4))
	for i := range m.Topics {
		t := &m.Topics[i]
		t.Topic = r.string()
		t.Partitions = makeSlice[ListOffsetsPartition](r.arrayLen(4 + 8))
		for j := range t.Partitions {
			t.Partitions[j] = ListOffsetsPartition{r.int32(), r.int64()}
		}
	}
	return r.done("ListOffsets request")
}

func (m *ListOffsetsResponse) AppendTo(dst []byte) []byte {
	dst = appendArrayLen(dst, len(m.Topics), false, false)
	for i := range m.Topics {
		t := &m.Topics[i]
		dst = appendString(dst, t.Topic)
		dst = appendArrayLen(dst, len(t.Partitions), false, false)
		for _, p := range t.Partitions {
			dst = appendInt32(dst, p.Partition)
			dst = appendInt16(dst, int16(p.ErrorCode))
			dst = appendString(dst, p.ErrorMessage)
			dst = appendInt64(dst, p.Timestamp)
			dst = appendInt64(dst, p.Offset)
		}
	}
	return dst
}

func (m *ListOffsetsResponse) ReadFrom(b []byte) error {
	r := reader{buf: b}
	m.Topics = makeSlice[ListOffsetsResponseTopic](r.arrayLen(2 + 4))
	for i := range m.Topics {
		t := &m.Topics[i]
		t.Topic = r.string()
		t.Partitions = makeSlice[ListOffsetsResponsePartition](r.arrayLen(4 + 2 + 2 + 8 + 8))
		for j := range t.Partitions {
			p := &t.Partitions[j]
			p.Partition = r.int32()
			p.ErrorCode = ErrorCode(r.int16())
			p.ErrorMessage = r.string()
			p.Timestamp = r.int64()
			p.Offset = r.int64()
		}
	}
	return r.done("ListOffsets response")
}

// ---------------------------------------------------------------------------------------
// Metadata (key 4)

// MetadataRequest asks for topics; a nil Topics (null on the wire) asks for every topic,
// an empty non-nil slice for none (only the shard table). Version is the frame header's
// API version (not in the payload): 1 asks for the cluster fields of MetadataResponse.
type MetadataRequest struct {
	Topics  []string
	Version uint16
}

// MetadataResponse describes the broker's shards and the topics' partitions. A partition's
// Shard indexes Shards; a shard-aware client sends that partition's requests to the
// shard's Address. Version 1 adds the cluster: every partition's leader, replicas, ISR and
// (when this broker leads it) high watermark, the brokers and the controller leader.
type MetadataResponse struct {
	Version  uint16 // the frame header's API version: which fields are on the wire
	BrokerID int32
	Shards   []MetadataShard
	Topics   []MetadataTopic
	Brokers  []MetadataBroker // v1
	// ControllerID is the broker whose controller voter leads the quorum; -1 when none is
	// known or on a single broker. v1.
	ControllerID int32
}

type MetadataShard struct {
	Shard   int32
	Address string // host:port this shard accepts on; "" if it shares the broker's listener
}

type MetadataTopic struct {
	Topic        string
	ErrorCode    ErrorCode
	ErrorMessage string
	Partitions   []MetadataPartition
}

type MetadataPartition struct {
	Partition   int32
	ErrorCode   ErrorCode
	Shard       int32
	LeaderEpoch int32
	// v1 fields.
	Leader   int32   // broker id of the leader; -1 while the partition is offline
	Replicas []int32 // the assignment, preferred leader first
	ISR      []int32 // the in-sync replicas
	// HighWatermark is the answering broker's high watermark of the partition when it
	// leads it, else -1.
	HighWatermark int64
}

// MetadataBroker is one broker of the cluster (v1).
type MetadataBroker struct {
	NodeID  int32
	Address string // the client listener host:port
	Rack    string
	Fenced  bool // its session expired: it leads nothing until it registers again
}

// MetadataVersionMax is the highest Metadata version this package encodes.
const MetadataVersionMax = 1

func (*MetadataRequest) API() APIKey  { return APIMetadata }
func (*MetadataResponse) API() APIKey { return APIMetadata }

func (m *MetadataRequest) WireVersion() uint16     { return m.Version }
func (m *MetadataRequest) SetWireVersion(v uint16) { m.Version = v }
func (m *MetadataResponse) WireVersion() uint16    { return m.Version }
func (m *MetadataResponse) SetWireVersion(v uint16) {
	m.Version = v
}

func (m *MetadataRequest) AppendTo(dst []byte) []byte { return appendStrings(dst, m.Topics, true) }

func (m *MetadataRequest) ReadFrom(b []byte) error {
	r := reader{buf: b}
	m.Topics = readStrings(&r)
	return r.done("Metadata request")
}

func (m *MetadataResponse) AppendTo(dst []byte) []byte {
	dst = appendInt32(dst, m.BrokerID)
	dst = appendArrayLen(dst, len(m.Shards), false, false)
	for _, s := range m.Shards {
		dst = appendInt32(dst, s.Shard)
		dst = appendString(dst, s.Address)
	}
	dst = appendArrayLen(dst, len(m.Topics), false, false)
	for i := range m.Topics {
		t := &m.Topics[i]
		dst = appendString(dst, t.Topic)
		dst = appendInt16(dst, int16(t.ErrorCode))
		dst = appendString(dst, t.ErrorMessage)
		dst = appendArrayLen(dst, len(t.Partitions), false, false)
		for _, p := range t.Partitions {
			dst = appendInt32(dst, p.Partition)
			dst = appendInt16(dst, int16(p.ErrorCode))
			dst = appendInt32(dst, p.Shard)
			dst = appendInt32(dst, p.LeaderEpoch)
			if m.Version >= 1 {
				dst = appendInt32(dst, p.Leader)
				dst = appendInt32s(dst, p.Replicas)
				dst = appendInt32s(dst, p.ISR)
				dst = appendInt64(dst, p.HighWatermark)
			}
		}
	}
	if m.Version >= 1 {
		dst = appendArrayLen(dst, len(m.Brokers), false, false)
		for _, b := range m.Brokers {
			dst = appendInt32(dst, b.NodeID)
			dst = appendString(dst, b.Address)
			dst = appendString(dst, b.Rack)
			dst = appendBool(dst, b.Fenced)
		}
		dst = appendInt32(dst, m.ControllerID)
	}
	return dst
}

func (m *MetadataResponse) ReadFrom(b []byte) error {
	r := reader{buf: b}
	m.BrokerID = r.int32()
	m.Shards = makeSlice[MetadataShard](r.arrayLen(4 + 2))
	for i := range m.Shards {
		m.Shards[i] = MetadataShard{r.int32(), r.string()}
	}
	partitionBytesMin := 4 + 2 + 4 + 4
	if m.Version >= 1 {
		partitionBytesMin += 4 + 4 + 4 + 8
	}
	m.Topics = makeSlice[MetadataTopic](r.arrayLen(2 + 2 + 2 + 4))
	for i := range m.Topics {
		t := &m.Topics[i]
		t.Topic = r.string()
		t.ErrorCode = ErrorCode(r.int16())
		t.ErrorMessage = r.string()
		t.Partitions = makeSlice[MetadataPartition](r.arrayLen(partitionBytesMin))
		for j := range t.Partitions {
			p := &t.Partitions[j]
			p.Partition, p.ErrorCode, p.Shard, p.LeaderEpoch = r.int32(), ErrorCode(r.int16()), r.int32(), r.int32()
			p.Leader, p.HighWatermark = -1, -1
			if m.Version >= 1 {
				p.Leader = r.int32()
				p.Replicas = readInt32s(&r)
				p.ISR = readInt32s(&r)
				p.HighWatermark = r.int64()
			}
		}
	}
	m.Brokers, m.ControllerID = nil, -1
	if m.Version >= 1 {
		m.Brokers = makeSlice[MetadataBroker](r.arrayLen(4 + 2 + 2 + 1))
		for i := range m.Brokers {
			m.Brokers[i] = MetadataBroker{r.int32(), r.string(), r.string(), r.bool()}
		}
		m.ControllerID = r.int32()
	}
	return r.done("Metadata response")
}

func appendInt32s(dst []byte, v []int32) []byte {
	dst = appendArrayLen(dst, len(v), false, false)
	for _, x := range v {
		dst = appendInt32(dst, x)
	}
	return dst
}

func readInt32s(r *reader) []int32 {
	v := makeSlice[int32](r.arrayLen(4))
	for i := range v {
		v[i] = r.int32()
	}
	return v
}

// ---------------------------------------------------------------------------------------
// Admin request timeouts (CreateTopics, DeleteTopics, AlterConfigs).

// AdminVersionMax is the highest version of CreateTopics, DeleteTopics and AlterConfigs this
// package encodes: 1. Version 1 reads timeout_ms as Kafka's KRaft controller does (a
// deadline now + timeout_ms, so 0 or less has passed: the request is answered
// REQUEST_TIMED_OUT for every topic and nothing changes) and gives AlterConfigs a
// timeout_ms; version 0 read 0 or less as the broker's 30 s, and its AlterConfigs had no
// timeout. The payload of CreateTopics and DeleteTopics is the same in both versions.
const AdminVersionMax = 1

// adminDeadlinePassed reports whether an admin request at version has no time left.
func adminDeadlinePassed(version uint16, timeoutMs int32) bool { return version >= 1 && timeoutMs <= 0 }

// ---------------------------------------------------------------------------------------
// CreateTopics (key 5)

type CreateTopicsRequest struct {
	// Version is the API version (AdminVersionMax); it changes what TimeoutMs 0 means.
	Version      uint16
	TimeoutMs    int32
	ValidateOnly bool
	Topics       []CreateTopic
}

func (m *CreateTopicsRequest) WireVersion() uint16     { return m.Version }
func (m *CreateTopicsRequest) SetWireVersion(v uint16) { m.Version = v }

// DeadlinePassed reports whether the request must be answered REQUEST_TIMED_OUT unrun
// (version 1, timeout_ms <= 0).
func (m *CreateTopicsRequest) DeadlinePassed() bool {
	return adminDeadlinePassed(m.Version, m.TimeoutMs)
}

type CreateTopic struct {
	Topic             string
	Partitions        int32
	ReplicationFactor int16
	Configs           []ConfigEntry
}

// ConfigEntry is a topic configuration key and value (e.g. retention.ms=86400000).
type ConfigEntry struct {
	Key   string
	Value string
}

// TopicResult is the per-topic outcome of CreateTopics, DeleteTopics and AlterConfigs.
type TopicResult struct {
	Topic        string
	ErrorCode    ErrorCode
	ErrorMessage string
}

type CreateTopicsResponse struct {
	Topics []TopicResult
}

func (*CreateTopicsRequest) API() APIKey  { return APICreateTopics }
func (*CreateTopicsResponse) API() APIKey { return APICreateTopics }

func (m *CreateTopicsRequest) AppendTo(dst []byte) []byte {
	dst = appendInt32(dst, m.TimeoutMs)
	dst = appendBool(dst, m.ValidateOnly)
	dst = appendArrayLen(dst, len(m.Topics), false, false)
	for i := range m.Topics {
		t := &m.Topics[i]
		dst = appendString(dst, t.Topic)
		dst = appendInt32(dst, t.Partitions)
		dst = appendInt16(dst, t.ReplicationFactor)
		dst = appendConfigs(dst, t.Configs)
	}
	return dst
}

func (m *CreateTopicsRequest) ReadFrom(b []byte) error {
	r := reader{buf: b}
	m.TimeoutMs = r.int32()
	m.ValidateOnly = r.bool()
	m.Topics = makeSlice[CreateTopic](r.arrayLen(2 + 4 + 2 + 4))
	for i := range m.Topics {
		t := &m.Topics[i]
		t.Topic = r.string()
		t.Partitions = r.int32()
		t.ReplicationFactor = r.int16()
		t.Configs = readConfigs(&r)
	}
	return r.done("CreateTopics request")
}

func (m *CreateTopicsResponse) AppendTo(dst []byte) []byte { return appendTopicResults(dst, m.Topics) }

func (m *CreateTopicsResponse) ReadFrom(b []byte) error {
	r := reader{buf: b}
	m.Topics = readTopicResults(&r)
	return r.done("CreateTopics response")
}

// ---------------------------------------------------------------------------------------
// DeleteTopics (key 6)

type DeleteTopicsRequest struct {
	Version   uint16 // the API version (AdminVersionMax); it changes what TimeoutMs 0 means
	TimeoutMs int32
	Topics    []string
}

func (m *DeleteTopicsRequest) WireVersion() uint16     { return m.Version }
func (m *DeleteTopicsRequest) SetWireVersion(v uint16) { m.Version = v }

// DeadlinePassed reports whether the request must be answered REQUEST_TIMED_OUT unrun
// (version 1, timeout_ms <= 0).
func (m *DeleteTopicsRequest) DeadlinePassed() bool {
	return adminDeadlinePassed(m.Version, m.TimeoutMs)
}

type DeleteTopicsResponse struct {
	Topics []TopicResult
}

func (*DeleteTopicsRequest) API() APIKey  { return APIDeleteTopics }
func (*DeleteTopicsResponse) API() APIKey { return APIDeleteTopics }

func (m *DeleteTopicsRequest) AppendTo(dst []byte) []byte {
	dst = appendInt32(dst, m.TimeoutMs)
	return appendStrings(dst, m.Topics, false)
}

func (m *DeleteTopicsRequest) ReadFrom(b []byte) error {
	r := reader{buf: b}
	m.TimeoutMs = r.int32()
	m.Topics = readStrings(&r)
	return r.done("DeleteTopics request")
}

func (m *DeleteTopicsResponse) AppendTo(dst []byte) []byte { return appendTopicResults(dst, m.Topics) }

func (m *DeleteTopicsResponse) ReadFrom(b []byte) error {
	r := reader{buf: b}
	m.Topics = readTopicResults(&r)
	return r.done("DeleteTopics response")
}

// ---------------------------------------------------------------------------------------
// DescribeTopics (key 7)

// DescribeTopicsRequest asks for partition state; nil Topics (null) means every topic.
type DescribeTopicsRequest struct {
	Topics []string
}

type DescribeTopicsResponse struct {
	Topics []DescribeTopic
}

type DescribeTopic struct {
	Topic        string
	ErrorCode    ErrorCode
	ErrorMessage string
	Partitions   []DescribePartition
}

type DescribePartition struct {
	Partition      int32
	ErrorCode      ErrorCode
	Shard          int32
	LogStartOffset int64
	HighWatermark  int64
	LogEndOffset   int64
	SizeBytes      int64 // bytes of segment files on disk
	ErrorMessage   string
	CorruptBatches int32 // bad batches found in sealed segments (scrubber, --verify-segments)
}

func (*DescribeTopicsRequest) API() APIKey  { return APIDescribeTopics }
func (*DescribeTopicsResponse) API() APIKey { return APIDescribeTopics }

func (m *DescribeTopicsRequest) AppendTo(dst []byte) []byte {
	return appendStrings(dst, m.Topics, true)
}

func (m *DescribeTopicsRequest) ReadFrom(b []byte) error {
	r := reader{buf: b}
	m.Topics = readStrings(&r)
	return r.done("DescribeTopics request")
}

func (m *DescribeTopicsResponse) AppendTo(dst []byte) []byte {
	dst = appendArrayLen(dst, len(m.Topics), false, false)
	for i := range m.Topics {
		t := &m.Topics[i]
		dst = appendString(dst, t.Topic)
		dst = appendInt16(dst, int16(t.ErrorCode))
		dst = appendString(dst, t.ErrorMessage)
		dst = appendArrayLen(dst, len(t.Partitions), false, false)
		for _, p := range t.Partitions {
			dst = appendInt32(dst, p.Partition)
			dst = appendInt16(dst, int16(p.ErrorCode))
			dst = appendInt32(dst, p.Shard)
			dst = appendInt64(dst, p.LogStartOffset)
			dst = appendInt64(dst, p.HighWatermark)
			dst = appendInt64(dst, p.LogEndOffset)
			dst = appendInt64(dst, p.SizeBytes)
			dst = appendString(dst, p.ErrorMessage)
			dst = appendInt32(dst, p.CorruptBatches)
		}
	}
	return dst
}

func (m *DescribeTopicsResponse) ReadFrom(b []byte) error {
	r := reader{buf: b}
	m.Topics = makeSlice[DescribeTopic](r.arrayLen(2 + 2 + 2 + 4))
	for i := range m.Topics {
		t := &m.Topics[i]
		t.Topic = r.string()
		t.ErrorCode = ErrorCode(r.int16())
		t.ErrorMessage = r.string()
		t.Partitions = makeSlice[DescribePartition](r.arrayLen(4 + 2 + 4 + 8*4 + 2 + 4))
		for j := range t.Partitions {
			t.Partitions[j] = DescribePartition{r.int32(), ErrorCode(r.int16()), r.int32(), r.int64(), r.int64(), r.int64(), r.int64(), r.string(), r.int32()}
		}
	}
	return r.done("DescribeTopics response")
}

// ---------------------------------------------------------------------------------------
// DescribeConfigs (key 8)

type DescribeConfigsRequest struct {
	Topics []DescribeConfigsTopic
}

// DescribeConfigsTopic names a topic and the keys wanted; nil Keys (null) means all.
type DescribeConfigsTopic struct {
	Topic string
	Keys  []string
}

type DescribeConfigsResponse struct {
	Topics []DescribeConfigsResult
}

type DescribeConfigsResult struct {
	Topic        string
	ErrorCode    ErrorCode
	ErrorMessage string
	Configs      []ConfigDescription
}

// Config sources.
const (
	ConfigSourceDefault int8 = 0 // the broker's built-in default
	ConfigSourceTopic   int8 = 1 // set on the topic
	ConfigSourceBroker  int8 = 2 // set in the broker's configuration
)

type ConfigDescription struct {
	Key      string
	Value    string
	Source   int8
	ReadOnly bool
}

func (*DescribeConfigsRequest) API() APIKey  { return APIDescribeConfigs }
func (*DescribeConfigsResponse) API() APIKey { return APIDescribeConfigs }

func (m *DescribeConfigsRequest) AppendTo(dst []byte) []byte {
	dst = appendArrayLen(dst, len(m.Topics), false, false)
	for _, t := range m.Topics {
		dst = appendString(dst, t.Topic)
		dst = appendStrings(dst, t.Keys, true)
	}
	return dst
}

func (m *DescribeConfigsRequest) ReadFrom(b []byte) error {
	r := reader{buf: b}
	m.Topics = makeSlice[DescribeConfigsTopic](r.arrayLen(2 + 4))
	for i := range m.Topics {
		m.Topics[i].Topic = r.string()
		m.Topics[i].Keys = readStrings(&r)
	}
	return r.done("DescribeConfigs request")
}

func (m *DescribeConfigsResponse) AppendTo(dst []byte) []byte {
	dst = appendArrayLen(dst, len(m.Topics), false, false)
	for i := range m.Topics {
		t := &m.Topics[i]
		dst = appendString(dst, t.Topic)
		dst = appendInt16(dst, int16(t.ErrorCode))
		dst = appendString(dst, t.ErrorMessage)
		dst = appendArrayLen(dst, len(t.Configs), false, false)
		for _, c := range t.Configs {
			dst = appendString(dst, c.Key)
			dst = appendString(dst, c.Value)
			dst = appendInt8(dst, c.Source)
			dst = appendBool(dst, c.ReadOnly)
		}
	}
	return dst
}

func (m *DescribeConfigsResponse) ReadFrom(b []byte) error {
	r := reader{buf: b}
	m.Topics = makeSlice[DescribeConfigsResult](r.arrayLen(2 + 2 + 2 + 4))
	for i := range m.Topics {
		t := &m.Topics[i]
		t.Topic = r.string()
		t.ErrorCode = ErrorCode(r.int16())
		t.ErrorMessage = r.string()
		t.Configs = makeSlice[ConfigDescription](r.arrayLen(2 + 2 + 1 + 1))
		for j := range t.Configs {
			t.Configs[j] = ConfigDescription{r.string(), r.string(), r.int8(), r.bool()}
		}
	}
	return r.done("DescribeConfigs response")
}

// ---------------------------------------------------------------------------------------
// AlterConfigs (key 9)

// AlterConfigsRequest changes topic configs incrementally: each op sets or removes one key.
type AlterConfigsRequest struct {
	Version      uint16 // the API version (AdminVersionMax): 1 carries TimeoutMs
	ValidateOnly bool
	Topics       []AlterConfigsTopic
	// TimeoutMs (version 1, after Topics on the wire) bounds a replicated change's wait for
	// the controller, as CreateTopics' does; version 0 has none (the broker's 30 s).
	TimeoutMs int32
}

func (m *AlterConfigsRequest) WireVersion() uint16     { return m.Version }
func (m *AlterConfigsRequest) SetWireVersion(v uint16) { m.Version = v }

// DeadlinePassed reports whether the request must be answered REQUEST_TIMED_OUT unrun
// (version 1, timeout_ms <= 0).
func (m *AlterConfigsRequest) DeadlinePassed() bool {
	return adminDeadlinePassed(m.Version, m.TimeoutMs)
}

type AlterConfigsTopic struct {
	Topic   string
	Configs []AlterConfig
}

// Alter operations.
const (
	AlterConfigSet    int8 = 0 // set Key to Value on the topic
	AlterConfigDelete int8 = 1 // remove the topic's value; the default applies again
)

type AlterConfig struct {
	Key   string
	Op    int8
	Value string
}

type AlterConfigsResponse struct {
	Topics []TopicResult
}

func (*AlterConfigsRequest) API() APIKey  { return APIAlterConfigs }
func (*AlterConfigsResponse) API() APIKey { return APIAlterConfigs }

func (m *AlterConfigsRequest) AppendTo(dst []byte) []byte {
	dst = appendBool(dst, m.ValidateOnly)
	dst = appendArrayLen(dst, len(m.Topics), false, false)
	for _, t := range m.Topics {
		dst = appendString(dst, t.Topic)
		dst = appendArrayLen(dst, len(t.Configs), false, false)
		for _, c := range t.Configs {
			dst = appendString(dst, c.Key)
			dst = appendInt8(dst, c.Op)
			dst = appendString(dst, c.Value)
		}
	}
	if m.Version >= 1 {
		dst = appendInt32(dst, m.TimeoutMs)
	}
	return dst
}

func (m *AlterConfigsRequest) ReadFrom(b []byte) error {
	r := reader{buf: b}
	m.ValidateOnly = r.bool()
	m.Topics = makeSlice[AlterConfigsTopic](r.arrayLen(2 + 4))
	for i := range m.Topics {
		t := &m.Topics[i]
		t.Topic = r.string()
		t.Configs = makeSlice[AlterConfig](r.arrayLen(2 + 1 + 2))
		for j := range t.Configs {
			t.Configs[j] = AlterConfig{r.string(), r.int8(), r.string()}
		}
	}
	m.TimeoutMs = 0
	if m.Version >= 1 {
		m.TimeoutMs = r.int32()
	}
	return r.done("AlterConfigs request")
}

func (m *AlterConfigsResponse) AppendTo(dst []byte) []byte { return appendTopicResults(dst, m.Topics) }

func (m *AlterConfigsResponse) ReadFrom(b []byte) error {
	r := reader{buf: b}
	m.Topics = readTopicResults(&r)
	return r.done("AlterConfigs response")
}

// ---------------------------------------------------------------------------------------
// Shared pieces.

// reuseSlice is makeSlice reusing s's array when it is large enough (elements keep their
// old values until the decoder overwrites them: it must set every field).
func reuseSlice[T any](s []T, n int) []T {
	if n <= 0 {
		return nil
	}
	if cap(s) >= n {
		return s[:n]
	}
	return make([]T, n)
}

func makeSlice[T any](n int) []T {
	if n <= 0 {
		return nil
	}
	return make([]T, n)
}

func appendStrings(dst []byte, s []string, nullable bool) []byte {
	dst = appendArrayLen(dst, len(s), s == nil, nullable)
	for _, v := range s {
		dst = appendString(dst, v)
	}
	return dst
}

// readStrings returns nil for a null array and a non-nil empty slice for an empty one.
func readStrings(r *reader) []string {
	n := r.arrayLen(2)
	if n < 0 {
		return nil
	}
	s := make([]string, n)
	for i := range s {
		s[i] = r.string()
	}
	return s
}

func appendConfigs(dst []byte, c []ConfigEntry) []byte {
	dst = appendArrayLen(dst, len(c), false, false)
	for _, e := range c {
		dst = appendString(dst, e.Key)
		dst = appendString(dst, e.Value)
	}
	return dst
}

func readConfigs(r *reader) []ConfigEntry {
	c := makeSlice[ConfigEntry](r.arrayLen(2 + 2))
	for i := range c {
		c[i] = ConfigEntry{r.string(), r.string()}
	}
	return c
}

func appendTopicResults(dst []byte, t []TopicResult) []byte {
	dst = appendArrayLen(dst, len(t), false, false)
	for _, v := range t {
		dst = appendString(dst, v.Topic)
		dst = appendInt16(dst, int16(v.ErrorCode))
		dst = appendString(dst, v.ErrorMessage)
	}
	return dst
}

func readTopicResults(r *reader) []TopicResult {
	t := makeSlice[TopicResult](r.arrayLen(2 + 2 + 2))
	for i := range t {
		t[i] = TopicResult{r.string(), ErrorCode(r.int16()), r.string()}
	}
	return t
}
