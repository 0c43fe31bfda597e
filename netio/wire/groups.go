package wire

// Consumer group APIs (keys 11-20): Kafka's classic group protocol in ringlog's framing.
// Group requests go to the group's coordinator: the shard FindCoordinator names (any
// address of the broker reaches it; the shard's own address saves a mailbox hop).
// Protocol metadata and assignments are opaque bytes here (for consumers, Kafka's
// ConsumerProtocolSubscription and ConsumerProtocolAssignment encodings).

// ---------------------------------------------------------------------------------------
// FindCoordinator (key 11)

// FindCoordinatorRequest asks which shard coordinates Group.
type FindCoordinatorRequest struct {
	Group string
}

// FindCoordinatorResponse names the coordinator shard and its address ("" when it shares
// the broker's listener).
type FindCoordinatorResponse struct {
	ErrorCode    ErrorCode
	ErrorMessage string
	Shard        int32
	Address      string
}

func (*FindCoordinatorRequest) API() APIKey  { return APIFindCoordinator }
func (*FindCoordinatorResponse) API() APIKey { return APIFindCoordinator }

func (m *FindCoordinatorRequest) AppendTo(dst []byte) []byte { return appendString(dst, m.Group) }

func (m *FindCoordinatorRequest) ReadFrom(b []byte) error {
	r := reader{buf: b}
	m.Group = r.string()
	return r.done("FindCoordinator request")
}

func (m *FindCoordinatorResponse) AppendTo(dst []byte) []byte {
	dst = appendInt16(dst, int16(m.ErrorCode))
	dst = appendString(dst, m.ErrorMessage)
	dst = appendInt32(dst, m.Shard)
	return appendString(dst, m.Address)
}

func (m *FindCoordinatorResponse) ReadFrom(b []byte) error {
	r := reader{buf: b}
	m.ErrorCode = ErrorCode(r.int16())
	m.ErrorMessage = r.string()
	m.Shard = r.int32()
	m.Address = r.string()
	return r.done("FindCoordinator response")
}

// ---------------------------------------------------------------------------------------
// JoinGroup (key 12)

// JoinGroupRequest joins (or rejoins) a group. An empty MemberID is a new member (or a
// restarted static one when InstanceID is set). The answer comes when the join phase
// ends, up to the group's rebalance timeout later. Version 1 (same payload) says the
// member handles ErrMemberIDRequired: a new dynamic member is then answered at once with
// that code and its member id, and joins with the id (KIP-394); version 0 joins at once.
type JoinGroupRequest struct {
	Version            uint16 // the frame's API version (not in the payload)
	Group              string
	MemberID           string
	InstanceID         string // group.instance.id; "" for a dynamic member
	ClientID           string // the member's client.id (its member id starts with it)
	SessionTimeoutMs   int32
	RebalanceTimeoutMs int32 // the consumer's max.poll.interval.ms
	ProtocolType       string
	Protocols          []GroupProtocol // in the member's order of preference
}

// GroupProtocol is one assignor the member supports, with its metadata for it.
type GroupProtocol struct {
	Name     string
	Metadata []byte
}

// JoinGroupResponse ends the join phase for one member; only the leader gets Members.
type JoinGroupResponse struct {
	ErrorCode    ErrorCode
	ErrorMessage string
	Generation   int32
	ProtocolType string
	Protocol     string
	Leader       string
	MemberID     string
	Members      []JoinGroupMember
}

type JoinGroupMember struct {
	MemberID   string
	InstanceID string
	Metadata   []byte
}

func (*JoinGroupRequest) API() APIKey  { return APIJoinGroup }
func (*JoinGroupResponse) API() APIKey { return APIJoinGroup }

// JoinGroupVersionMax is the highest JoinGroup version this package encodes: 1, the
// version whose new members accept ErrMemberIDRequired. Both versions have one payload.
const JoinGroupVersionMax = 1

func (m *JoinGroupRequest) WireVersion() uint16     { return m.Version }
func (m *JoinGroupRequest) SetWireVersion(v uint16) { m.Version = v }

func (m *JoinGroupRequest) AppendTo(dst []byte) []byte {
	dst = appendString(dst, m.Group)
	dst = appendString(dst, m.MemberID)
	dst = appendString(dst, m.InstanceID)
	dst = appendString(dst, m.ClientID)
	dst = appendInt32(dst, m.SessionTimeoutMs)
	dst = appendInt32(dst, m.RebalanceTimeoutMs)
	dst = appendString(dst, m.ProtocolType)
	dst = appendArrayLen(dst, len(m.Protocols), false, false)
	for _, p := range m.Protocols {
		dst = appendString(dst, p.Name)
		dst = appendBytes(dst, p.Metadata)
	}
	return dst
}

func (m *JoinGroupRequest) ReadFrom(b []byte) error {
	r := reader{buf: b}
	m.Group = r.string()
	m.MemberID = r.string()
	m.InstanceID = r.string()
	m.ClientID = r.string()
	m.SessionTimeoutMs = r.int32()
	m.RebalanceTimeoutMs = r.int32()
	m.ProtocolType = r.string()
	m.Protocols = makeSlice[GroupProtocol](r.arrayLen(2 + 4))
	for i := range m.Protocols {
		m.Protocols[i] = GroupProtocol{r.string(), r.bytes()}
	}
	return r.done("JoinGroup request")
}

func (m *JoinGroupResponse) AppendTo(dst []byte) []byte {
	dst = appendInt16(dst, int16(m.ErrorCode))
	dst = appendString(dst, m.ErrorMessage)
	dst = appendInt32(dst, m.Generation)
	dst = appendString(dst, m.ProtocolType)
	dst = appendString(dst, m.Protocol)
	dst = appendString(dst, m.Leader)
	dst = appendString(dst, m.MemberID)
	dst = appendArrayLen(dst, len(m.Members), false, false)
	for _, mb := range m.Members {
		dst = appendString(dst, mb.MemberID)
		dst = appendString(dst, mb.InstanceID)
		dst = appendBytes(dst, mb.Metadata)
	}
	return dst
}

func (m *JoinGroupResponse) ReadFrom(b []byte) error {
	r := reader{buf: b}
	m.ErrorCode = ErrorCode(r.int16())
	m.ErrorMessage = r.string()
	m.Generation = r.int32()
	m.ProtocolType = r.string()
	m.Protocol = r.string()
	m.Leader = r.string()
	m.MemberID = r.string()
	m.Members = makeSlice[JoinGroupMember](r.arrayLen(2 + 2 + 4))
	for i := range m.Members {
		m.Members[i] = JoinGroupMember{r.string(), r.string(), r.bytes()}
	}
	return r.done("JoinGroup response")
}

// ---------------------------------------------------------------------------------------
// SyncGroup (key 13)

// SyncGroupRequest fetches the member's assignment; the leader's carries everyone's.
type SyncGroupRequest struct {
	Group        string
	MemberID     string
	InstanceID   string
	Generation   int32
	ProtocolType string // checked when not empty
	Protocol     string // checked when not empty
	Assignments  []SyncGroupAssignment
}

type SyncGroupAssignment struct {
	MemberID   string
	Assignment []byte
}

type SyncGroupResponse struct {
	ErrorCode    ErrorCode
	ErrorMessage string
	ProtocolType string
	Protocol     string
	Assignment   []byte
}

func (*SyncGroupRequest) API() APIKey  { return APISyncGroup }
func (*SyncGroupResponse) API() APIKey { return APISyncGroup }

func (m *SyncGroupRequest) AppendTo(dst []byte) []byte {
	dst = appendString(dst, m.Group)
	dst = appendString(dst, m.MemberID)
	dst = appendString(dst, m.InstanceID)
	dst = appendInt32(dst, m.Generation)
	dst = appendString(dst, m.ProtocolType)
	dst = appendString(dst, m.Protocol)
	dst = appendArrayLen(dst, len(m.Assignments), false, false)
	for _, a := range m.Assignments {
		dst = appendString(dst, a.MemberID)
		dst = appendBytes(dst, a.Assignment)
	}
	return dst
}

func (m *SyncGroupRequest) ReadFrom(b []byte) error {
	r := reader{buf: b}
	m.Group = r.string()
	m.MemberID = r.string()
	m.InstanceID = r.string()
	m.Generation = r.int32()
	m.ProtocolType = r.string()
	m.Protocol = r.string()
	m.Assignments = makeSlice[SyncGroupAssignment](r.arrayLen(2 + 4))
	for i := range m.Assignments {
		m.Assignments[i] = SyncGroupAssignment{r.string(), r.bytes()}
	}
	return r.done("SyncGroup request")
}

func (m *SyncGroupResponse) AppendTo(dst []byte) []byte {
	dst = appendInt16(dst, int16(m.ErrorCode))
	dst = appendString(dst, m.ErrorMessage)
	dst = appendString(dst, m.ProtocolType)
	dst = appendString(dst, m.Protocol)
	return appendBytes(dst, m.Assignment)
}

func (m *SyncGroupResponse) ReadFrom(b []byte) error {
	r := reader{buf: b}
	m.ErrorCode = ErrorCode(r.int16())
	m.ErrorMessage = r.string()
	m.ProtocolType = r.string()
	m.Protocol = r.string()
	m.Assignment = r.bytes()
	return r.done("SyncGroup response")
}

// ---------------------------------------------------------------------------------------
// Heartbeat (key 14)

type HeartbeatRequest struct {
	Group      string
	MemberID   string
	InstanceID string
	Generation int32
}

// HeartbeatResponse: ErrRebalanceInProgress tells the member to rejoin.
type HeartbeatResponse struct {
	ErrorCode    ErrorCode
	ErrorMessage string
}

func (*HeartbeatRequest) API() APIKey  { return APIHeartbeat }
func (*HeartbeatResponse) API() APIKey { return APIHeartbeat }

func (m *HeartbeatRequest) AppendTo(dst []byte) []byte {
	dst = appendString(dst, m.Group)
	dst = appendString(dst, m.MemberID)
	dst = appendString(dst, m.InstanceID)
	return appendInt32(dst, m.Generation)
}

func (m *HeartbeatRequest) ReadFrom(b []byte) error {
	r := reader{buf: b}
	m.Group = r.string()
	m.MemberID = r.string()
	m.InstanceID = r.string()
	m.Generation = r.int32()
	return r.done("Heartbeat request")
}

func (m *HeartbeatResponse) AppendTo(dst []byte) []byte {
	dst = appendInt16(dst, int16(m.ErrorCode))
	return appendString(dst, m.ErrorMessage)
}

func (m *HeartbeatResponse) ReadFrom(b []byte) error {
	r := reader{buf: b}
	m.ErrorCode = ErrorCode(r.int16())
	m.ErrorMessage = r.string()
	return r.done("Heartbeat response")
}

// ---------------------------------------------------------------------------------------
// LeaveGroup (key 15)

// LeaveGroupRequest removes members, by member id or (static members) by instance id.
type LeaveGroupRequest struct {
	Group   string
	Members []GroupMemberRef
}

type GroupMemberRef struct {
	MemberID   string
	InstanceID string
}

// LeaveGroupResponse: a group-level ErrorCode, else one result per member.
type LeaveGroupResponse struct {
	ErrorCode    ErrorCode
	ErrorMessage string
	Members      []LeaveGroupResult
}

type LeaveGroupResult struct {
	MemberID   string
	InstanceID string
	ErrorCode  ErrorCode
}

func (*LeaveGroupRequest) API() APIKey  { return APILeaveGroup }
func (*LeaveGroupResponse) API() APIKey { return APILeaveGroup }

func (m *LeaveGroupRequest) AppendTo(dst []byte) []byte {
	dst = appendString(dst, m.Group)
	dst = appendArrayLen(dst, len(m.Members), false, false)
	for _, mb := range m.Members {
		dst = appendString(dst, mb.MemberID)
		dst = appendString(dst, mb.InstanceID)
	}
	return dst
}

func (m *LeaveGroupRequest) ReadFrom(b []byte) error {
	r := reader{buf: b}
	m.Group = r.string()
	m.Members = makeSlice[GroupMemberRef](r.arrayLen(2 + 2))
	for i := range m.Members {
		m.Members[i] = GroupMemberRef{r.string(), r.string()}
	}
	return r.done("LeaveGroup request")
}

func (m *LeaveGroupResponse) AppendTo(dst []byte) []byte {
	dst = appendInt16(dst, int16(m.ErrorCode))
	dst = appendString(dst, m.ErrorMessage)
	dst = appendArrayLen(dst, len(m.Members), false, false)
	for _, mb := range m.Members {
		dst = appendString(dst, mb.MemberID)
		dst = appendString(dst, mb.InstanceID)
		dst = appendInt16(dst, int16(mb.ErrorCode))
	}
	return dst
}

func (m *LeaveGroupResponse) ReadFrom(b []byte) error {
	r := reader{buf: b}
	m.ErrorCode = ErrorCode(r.int16())
	m.ErrorMessage = r.string()
	m.Members = makeSlice[LeaveGroupResult](r.arrayLen(2 + 2 + 2))
	for i := range m.Members {
		m.Members[i] = LeaveGroupResult{r.string(), r.string(), ErrorCode(r.int16())}
	}
	return r.done("LeaveGroup response")
}

// ---------------------------------------------------------------------------------------
// OffsetCommit (key 16)

// OffsetCommitRequest commits offsets (the next offset to read: last processed + 1). A
// member commits with its MemberID and Generation; a consumer outside group management or
// an admin tool with Generation -1 and no member id (accepted only by an Empty group).
type OffsetCommitRequest struct {
	Group      string
	MemberID   string
	InstanceID string
	Generation int32
	Topics     []OffsetCommitTopic
}

type OffsetCommitTopic struct {
	Topic      string
	Partitions []OffsetCommitPartition
}

type OffsetCommitPartition struct {
	Partition   int32
	Offset      int64
	LeaderEpoch int32 // -1 when unknown
	Metadata    string
}

type OffsetCommitResponse struct {
	Topics []OffsetCommitResponseTopic
}

type OffsetCommitResponseTopic struct {
	Topic      string
	Partitions []PartitionError
}

// PartitionError is one partition's outcome.
type PartitionError struct {
	Partition int32
	ErrorCode ErrorCode
}

func (*OffsetCommitRequest) API() APIKey  { return APIOffsetCommit }
func (*OffsetCommitResponse) API() APIKey { return APIOffsetCommit }

func (m *OffsetCommitRequest) AppendTo(dst []byte) []byte {
	dst = appendString(dst, m.Group)
	dst = appendString(dst, m.MemberID)
	dst = appendString(dst, m.InstanceID)
	dst = appendInt32(dst, m.Generation)
	dst = appendArrayLen(dst, len(m.Topics), false, false)
	for _, t := range m.Topics {
		dst = appendString(dst, t.Topic)
		dst = appendArrayLen(dst, len(t.Partitions), false, false)
		for _, p := range t.Partitions {
			dst = appendInt32(dst, p.Partition)
			dst = appendInt64(dst, p.Offset)
			dst = appendInt32(dst, p.LeaderEpoch)
			dst = appendString(dst, p.Metadata)
		}
	}
	return dst
}

func (m *OffsetCommitRequest) ReadFrom(b []byte) error {
	r := reader{buf: b}
	m.Group = r.string()
	m.MemberID = r.string()
	m.InstanceID = r.string()
	m.Generation = r.int32()
	m.Topics = makeSlice[OffsetCommitTopic](r.arrayLen(2 + 4))
	for i := range m.Topics {
		t := &m.Topics[i]
		t.Topic = r.string()
		t.Partitions = makeSlice[OffsetCommitPartition](r.arrayLen(4 + 8 + 4 + 2))
		for j := range t.Partitions {
			t.Partitions[j] = OffsetCommitPartition{r.int32(), r.int64(), r.int32(), r.string()}
		}
	}
	return r.done("OffsetCommit request")
}

func (m *OffsetCommitResponse) AppendTo(dst []byte) []byte {
	dst = appendArrayLen(dst, len(m.Topics), false, false)
	for _, t := range m.Topics {
		dst = appendString(dst, t.Topic)
		dst = appendArrayLen(dst, len(t.Partitions), false, false)
		for _, p := range t.Partitions {
			dst = appendInt32(dst, p.Partition)
			dst = appendInt16(dst, int16(p.ErrorCode))
		}
	}
	return dst
}

func (m *OffsetCommitResponse) ReadFrom(b []byte) error {
	r := reader{buf: b}
	m.Topics = makeSlice[OffsetCommitResponseTopic](r.arrayLen(2 + 4))
	for i := range m.Topics {
		t := &m.Topics[i]
		t.Topic = r.string()
		t.Partitions = makeSlice[PartitionError](r.arrayLen(4 + 2))
		for j := range t.Partitions {
			t.Partitions[j] = PartitionError{r.int32(), ErrorCode(r.int16())}
		}
	}
	return r.done("OffsetCommit response")
}

// ---------------------------------------------------------------------------------------
// OffsetFetch (key 17)

// OffsetFetchRequest reads committed offsets; a nil Topics (null) asks for all the group's.
type OffsetFetchRequest struct {
	Group  string
	Topics []OffsetFetchTopic
}

type OffsetFetchTopic struct {
	Topic      string
	Partitions []int32
}

type OffsetFetchResponse struct {
	ErrorCode    ErrorCode
	ErrorMessage string
	Topics       []OffsetFetchResponseTopic
}

type OffsetFetchResponseTopic struct {
	Topic      string
	Partitions []OffsetFetchPartition
}

// OffsetFetchPartition is one committed offset; Offset -1 means none.
type OffsetFetchPartition struct {
	Partition   int32
	Offset      int64
	LeaderEpoch int32
	Metadata    string
	ErrorCode   ErrorCode
}

func (*OffsetFetchRequest) API() APIKey  { return APIOffsetFetch }
func (*OffsetFetchResponse) API() APIKey { return APIOffsetFetch }

func (m *OffsetFetchRequest) AppendTo(dst []byte) []byte {
	dst = appendString(dst, m.Group)
	dst = appendArrayLen(dst, len(m.Topics), m.Topics == nil, true)
	for _, t := range m.Topics {
		dst = appendString(dst, t.Topic)
		dst = appendArrayLen(dst, len(t.Partitions), false, false)
		for _, p := range t.Partitions {
			dst = appendInt32(dst, p)
		}
	}
	return dst
}

func (m *OffsetFetchRequest) ReadFrom(b []byte) error {
	r := reader{buf: b}
	m.Group = r.string()
	n := r.arrayLen(2 + 4)
	m.Topics = nil
	if n >= 0 {
		m.Topics = make([]OffsetFetchTopic, n)
	}
	for i := range m.Topics {
		t := &m.Topics[i]
		t.Topic = r.string()
		t.Partitions = makeSlice[int32](r.arrayLen(4))
		for j := range t.Partitions {
			t.Partitions[j] = r.int32()
		}
	}
	return r.done("OffsetFetch request")
}

func (m *OffsetFetchResponse) AppendTo(dst []byte) []byte {
	dst = appendInt16(dst, int16(m.ErrorCode))
	dst = appendString(dst, m.ErrorMessage)
	dst = appendArrayLen(dst, len(m.Topics), false, false)
	for _, t := range m.Topics {
		dst = appendString(dst, t.Topic)
		dst = appendArrayLen(dst, len(t.Partitions), false, false)
		for _, p := range t.Partitions {
			dst = appendInt32(dst, p.Partition)
			dst = appendInt64(dst, p.Offset)
			dst = appendInt32(dst, p.LeaderEpoch)
			dst = appendString(dst, p.Metadata)
			dst = appendInt16(dst, int16(p.ErrorCode))
		}
	}
	return dst
}

func (m *OffsetFetchResponse) ReadFrom(b []byte) error {
	r := reader{buf: b}
	m.ErrorCode = ErrorCode(r.int16())
	m.ErrorMessage = r.string()
	m.Topics = makeSlice[OffsetFetchResponseTopic](r.arrayLen(2 + 4))
	for i := range m.Topics {
		t := &m.Topics[i]
		t.Topic = r.string()
		t.Partitions = makeSlice[OffsetFetchPartition](r.arrayLen(4 + 8 + 4 + 2 + 2))
		for j := range t.Partitions {
			t.Partitions[j] = OffsetFetchPartition{r.int32(), r.int64(), r.int32(), r.string(), ErrorCode(r.int16())}
		}
	}
	return r.done("OffsetFetch response")
}

// ---------------------------------------------------------------------------------------
// ListGroups (key 18)

// ListGroupsRequest lists the broker's groups, only those in States when it is not empty
// (state names as DescribeGroups reports them).
type ListGroupsRequest struct {
	States []string
}

type ListGroupsResponse struct {
	ErrorCode    ErrorCode
	ErrorMessage string
	Groups       []ListedGroup
}

type ListedGroup struct {
	Group        string
	ProtocolType string
	State        string
}

func (*ListGroupsRequest) API() APIKey  { return APIListGroups }
func (*ListGroupsResponse) API() APIKey { return APIListGroups }

func (m *ListGroupsRequest) AppendTo(dst []byte) []byte { return appendStrings(dst, m.States, false) }

func (m *ListGroupsRequest) ReadFrom(b []byte) error {
	r := reader{buf: b}
	m.States = readStrings(&r)
	if len(m.States) == 0 {
		m.States = nil // null and empty both mean every state
	}
	return r.done("ListGroups request")
}

func (m *ListGroupsResponse) AppendTo(dst []byte) []byte {
	dst = appendInt16(dst, int16(m.ErrorCode))
	dst = appendString(dst, m.ErrorMessage)
	dst = appendArrayLen(dst, len(m.Groups), false, false)
	for _, g := range m.Groups {
		dst = appendString(dst, g.Group)
		dst = appendString(dst, g.ProtocolType)
		dst = appendString(dst, g.State)
	}
	return dst
}

func (m *ListGroupsResponse) ReadFrom(b []byte) error {
	r := reader{buf: b}
	m.ErrorCode = ErrorCode(r.int16())
	m.ErrorMessage = r.string()
	m.Groups = makeSlice[ListedGroup](r.arrayLen(2 + 2 + 2))
	for i := range m.Groups {
		m.Groups[i] = ListedGroup{r.string(), r.string(), r.string()}
	}
	return r.done("ListGroups response")
}

// ---------------------------------------------------------------------------------------
// DescribeGroups (key 19)

type DescribeGroupsRequest struct {
	Groups []string
}

type DescribeGroupsResponse struct {
	Groups []DescribedGroup
}

// DescribedGroup is one group; an unknown group is State "Dead" with no error.
type DescribedGroup struct {
	ErrorCode    ErrorCode
	ErrorMessage string
	Group        string
	State        string
	ProtocolType string
	Protocol     string
	Generation   int32
	Leader       string
	Members      []DescribedMember
}

// DescribedMember is one member; Metadata and Assignment only while the group is Stable.
type DescribedMember struct {
	MemberID           string
	InstanceID         string
	ClientID           string
	ClientHost         string
	SessionTimeoutMs   int32
	RebalanceTimeoutMs int32
	Metadata           []byte
	Assignment         []byte
}

func (*DescribeGroupsRequest) API() APIKey  { return APIDescribeGroups }
func (*DescribeGroupsResponse) API() APIKey { return APIDescribeGroups }

func (m *DescribeGroupsRequest) AppendTo(dst []byte) []byte {
	return appendStrings(dst, m.Groups, false)
}

func (m *DescribeGroupsRequest) ReadFrom(b []byte) error {
	r := reader{buf: b}
	m.Groups = makeSlice[string](r.arrayLen(2))
	for i := range m.Groups {
		m.Groups[i] = r.string()
	}
	return r.done("DescribeGroups request")
}

func (m *DescribeGroupsResponse) AppendTo(dst []byte) []byte {
	dst = appendArrayLen(dst, len(m.Groups), false, false)
	for i := range m.Groups {
		g := &m.Groups[i]
		dst = appendInt16(dst, int16(g.ErrorCode))
		dst = appendString(dst, g.ErrorMessage)
		dst = appendString(dst, g.Group)
		dst = appendString(dst, g.State)
		dst = appendString(dst, g.ProtocolType)
		dst = appendString(dst, g.Protocol)
		dst = appendInt32(dst, g.Generation)
		dst = appendString(dst, g.Leader)
		dst = appendArrayLen(dst, len(g.Members), false, false)
		for _, mb := range g.Members {
			dst = appendString(dst, mb.MemberID)
			dst = appendString(dst, mb.InstanceID)
			dst = appendString(dst, mb.ClientID)
			dst = appendString(dst, mb.ClientHost)
			dst = appendInt32(dst, mb.SessionTimeoutMs)
			dst = appendInt32(dst, mb.RebalanceTimeoutMs)
			dst = appendBytes(dst, mb.Metadata)
			dst = appendBytes(dst, mb.Assignment)
		}
	}
	return dst
}

func (m *DescribeGroupsResponse) ReadFrom(b []byte) error {
	r := reader{buf: b}
	m.Groups = makeSlice[DescribedGroup](r.arrayLen(2 + 2*6 + 4 + 4))
	for i := range m.Groups {
		g := &m.Groups[i]
		g.ErrorCode = ErrorCode(r.int16())
		g.ErrorMessage = r.string()
		g.Group = r.string()
		g.State = r.string()
		g.ProtocolType = r.string()
		g.Protocol = r.string()
		g.Generation = r.int32()
		g.Leader = r.string()
		g.Members = makeSlice[DescribedMember](r.arrayLen(2*4 + 4 + 4 + 4 + 4))
		for j := range g.Members {
			g.Members[j] = DescribedMember{r.string(), r.string(), r.string(), r.string(), r.int32(), r.int32(), r.bytes(), r.bytes()}
		}
	}
	return r.done("DescribeGroups response")
}

// ---------------------------------------------------------------------------------------
// DeleteGroups (key 20)

// DeleteGroupsRequest deletes Empty groups with their committed offsets.
type DeleteGroupsRequest struct {
	Groups []string
}

type DeleteGroupsResponse struct {
	Groups []GroupResult
}

// GroupResult is one group's outcome.
type GroupResult struct {
	Group        string
	ErrorCode    ErrorCode
	ErrorMessage string
}

func (*DeleteGroupsRequest) API() APIKey  { return APIDeleteGroups }
func (*DeleteGroupsResponse) API() APIKey { return APIDeleteGroups }

func (m *DeleteGroupsRequest) AppendTo(dst []byte) []byte { return appendStrings(dst, m.Groups, false) }

func (m *DeleteGroupsRequest) ReadFrom(b []byte) error {
	r := reader{buf: b}
	m.Groups = makeSlice[string](r.arrayLen(2))
	for i := range m.Groups {
		m.Groups[i] = r.string()
	}
	return r.done("DeleteGroups request")
}

func (m *DeleteGroupsResponse) AppendTo(dst []byte) []byte {
	dst = appendArrayLen(dst, len(m.Groups), false, false)
	for _, g := range m.Groups {
		dst = appendString(dst, g.Group)
		dst = appendInt16(dst, int16(g.ErrorCode))
		dst = appendString(dst, g.ErrorMessage)
	}
	return dst
}

func (m *DeleteGroupsResponse) ReadFrom(b []byte) error {
	r := reader{buf: b}
	m.Groups = makeSlice[GroupResult](r.arrayLen(2 + 2 + 2))
	for i := range m.Groups {
		m.Groups[i] = GroupResult{r.string(), ErrorCode(r.int16()), r.string()}
	}
	return r.done("DeleteGroups response")
}
