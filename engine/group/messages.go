package group

import "time"

// State is a group's state in Kafka's classic protocol.
type State int8

const (
	// Empty: no members; the group may still hold committed offsets.
	Empty State = iota
	// PreparingRebalance: the join phase; the coordinator waits for members to (re)join.
	PreparingRebalance
	// CompletingRebalance: the generation is formed; the leader's assignment is awaited.
	CompletingRebalance
	// Stable: every member has its assignment.
	Stable
	// Dead: the group is gone (deleted, expired, or its partition moved away).
	Dead
)

var stateNames = [...]string{"Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead"}

// String is Kafka's name of the state (as DescribeGroups and ListGroups report it).
func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return "Unknown"
}

// ParseState parses a state name as String writes it.
func ParseState(name string) (State, bool) {
	for i, n := range stateNames {
		if n == name {
			return State(i), true
		}
	}
	return 0, false
}

// A Request is one group API call. ReqID is the caller's: the reply carries it back, maybe
// much later (a JoinGroup waits for the join phase to end).
type Request interface{ reqID() uint64 }

// Protocol is one entry of a JoinGroup protocol list: an assignor name and the member's
// metadata for it (for consumers, an assign.Subscription).
type Protocol struct {
	Name     string
	Metadata []byte
}

// JoinGroup asks to join (or rejoin) a group. An empty MemberID is a new member (or a
// restarted static one when InstanceID is set).
type JoinGroup struct {
	ReqID            uint64
	Group            string
	MemberID         string
	InstanceID       string // group.instance.id; "" for a dynamic member
	ClientID         string
	ClientHost       string
	SessionTimeout   time.Duration
	RebalanceTimeout time.Duration // the consumer's max.poll.interval.ms
	ProtocolType     string        // "consumer" for consumers
	Protocols        []Protocol    // in the member's order of preference
	// RequireKnownMemberID: a new dynamic member (no MemberID, no InstanceID) is not added
	// yet; it is answered MEMBER_ID_REQUIRED with a member id, and joins when it comes back
	// with that id (KIP-394; Kafka's JoinGroup v4+). A member id handed out so and never
	// used expires after SessionTimeout. Static members join at once, as in Kafka.
	RequireKnownMemberID bool
}

// SyncGroup fetches the member's assignment; the leader's carries everyone's.
type SyncGroup struct {
	ReqID        uint64
	Group        string
	MemberID     string
	InstanceID   string
	Generation   int32
	ProtocolType string // checked when not empty
	Protocol     string // checked when not empty
	Assignments  []MemberAssignment
}

// MemberAssignment is the leader's assignment for one member.
type MemberAssignment struct {
	MemberID   string
	Assignment []byte
}

// Heartbeat keeps a member's session alive and tells it when to rejoin.
type Heartbeat struct {
	ReqID      uint64
	Group      string
	MemberID   string
	InstanceID string
	Generation int32
}

// LeaveGroup removes members (by member id, or by instance id for static members).
type LeaveGroup struct {
	ReqID   uint64
	Group   string
	Members []LeavingMember
}

// LeavingMember names one member leaving.
type LeavingMember struct {
	MemberID   string
	InstanceID string
}

// OffsetCommit commits offsets. A member commits with its MemberID and Generation; a
// consumer outside group management (or an admin tool) commits with Generation -1 and no
// member id, which only an Empty (or unknown) group accepts.
type OffsetCommit struct {
	ReqID      uint64
	Group      string
	MemberID   string
	InstanceID string
	Generation int32
	Offsets    []CommitOffset
}

// CommitOffset is one partition's offset to commit: the offset of the next record the
// group should read (last processed + 1).
type CommitOffset struct {
	Topic       string
	Partition   int32
	Offset      int64
	LeaderEpoch int32 // -1 when unknown
	Metadata    string
}

// OffsetFetch reads committed offsets; nil Partitions means all of the group's.
type OffsetFetch struct {
	ReqID      uint64
	Group      string
	Partitions []TopicPartition
}

// ListGroups lists the groups this coordinator serves, optionally only those in States.
type ListGroups struct {
	ReqID  uint64
	States []State
}

// DescribeGroups describes groups.
type DescribeGroups struct {
	ReqID  uint64
	Groups []string
}

// DeleteGroups deletes Empty groups with their offsets.
type DeleteGroups struct {
	ReqID  uint64
	Groups []string
}

func (r JoinGroup) reqID() uint64      { return r.ReqID }
func (r SyncGroup) reqID() uint64      { return r.ReqID }
func (r Heartbeat) reqID() uint64      { return r.ReqID }
func (r LeaveGroup) reqID() uint64     { return r.ReqID }
func (r OffsetCommit) reqID() uint64   { return r.ReqID }
func (r OffsetFetch) reqID() uint64    { return r.ReqID }
func (r ListGroups) reqID() uint64     { return r.ReqID }
func (r DescribeGroups) reqID() uint64 { return r.ReqID }
func (r DeleteGroups) reqID() uint64   { return r.ReqID }

// An Output is something the driver must do: send a Reply, or Append records.
type Output interface{ output() }

// Reply answers the request with ReqID.
type Reply struct {
	ReqID    uint64
	Response Response
}

// Append asks the driver to append Records, as one batch, to partition Partition of
// __consumer_offsets, and to report the outcome with Coordinator.AppendDone(ID, err).
// Appends must complete in the order they were asked for.
type Append struct {
	ID        uint64
	Partition int32
	Records   []Record
}

func (Reply) output()  {}
func (Append) output() {}

// A Response is the reply to one Request.
type Response interface{ response() }

// JoinGroupResponse ends the join phase for one member. Only the leader gets Members.
// With Err MEMBER_ID_REQUIRED, MemberID is the id to join again with.
type JoinGroupResponse struct {
	Err          Code
	Generation   int32
	ProtocolType string
	Protocol     string
	Leader       string
	MemberID     string
	Members      []JoinedMember
}

// JoinedMember is one member as the leader sees it, with its metadata for the chosen protocol.
type JoinedMember struct {
	MemberID   string
	InstanceID string
	Metadata   []byte
}

type SyncGroupResponse struct {
	Err          Code
	ProtocolType string
	Protocol     string
	Assignment   []byte
}

type HeartbeatResponse struct{ Err Code }

type LeaveGroupResponse struct {
	Err     Code // a group-level error; then Members is empty
	Members []LeftMember
}

type LeftMember struct {
	MemberID   string
	InstanceID string
	Err        Code
}

type OffsetCommitResponse struct{ Partitions []PartitionResult }

type PartitionResult struct {
	Topic     string
	Partition int32
	Err       Code
}

type OffsetFetchResponse struct {
	Err        Code
	Partitions []FetchedOffset
}

// FetchedOffset is one committed offset; Offset -1 means none.
type FetchedOffset struct {
	Topic       string
	Partition   int32
	Offset      int64
	LeaderEpoch int32
	Metadata    string
}

type ListGroupsResponse struct {
	Err    Code
	Groups []ListedGroup
}

type ListedGroup struct {
	Group        string
	ProtocolType string
	State        State
}

type DescribeGroupsResponse struct{ Groups []DescribedGroup }

type DescribedGroup struct {
	Err          Code
	Group        string
	State        State
	ProtocolType string
	Protocol     string
	Generation   int32
	Leader       string
	Members      []DescribedMember
}

type DescribedMember struct {
	MemberID         string
	InstanceID       string
	ClientID         string
	ClientHost       string
	SessionTimeout   time.Duration
	RebalanceTimeout time.Duration
	Metadata         []byte // for the chosen protocol; only when the group is Stable
	Assignment       []byte // only when the group is Stable
}

type DeleteGroupsResponse struct{ Results []DeleteResult }

type DeleteResult struct {
	Group string
	Err   Code
}

func (JoinGroupResponse) response()      {}
func (SyncGroupResponse) response()      {}
func (HeartbeatResponse) response()      {}
func (LeaveGroupResponse) response()     {}
func (OffsetCommitResponse) response()   {}
func (OffsetFetchResponse) response()    {}
func (ListGroupsResponse) response()     {}
func (DescribeGroupsResponse) response() {}
func (DeleteGroupsResponse) response()   {}
