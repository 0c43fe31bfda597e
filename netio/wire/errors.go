package wire

import (
	"errors"
	"fmt"
)

// ErrorCode is a protocol error code as carried on the wire (int16). Code 0 means no error.
// An ErrorCode other than ErrNone implements error, so callers can test a returned error
// with errors.Is(err, netio.ErrUnknownTopicOrPartition).
//
// The numeric values are part of the wire format and must not change; new codes are only
// ever appended.
type ErrorCode int16

// Error codes. The table in docs/protocol.md lists the same codes, names and meanings.
const (
	ErrNone                    ErrorCode = 0
	ErrUnknown                 ErrorCode = 1
	ErrCorruptMessage          ErrorCode = 2
	ErrUnknownTopicOrPartition ErrorCode = 3
	ErrOffsetOutOfRange        ErrorCode = 4
	ErrMessageTooLarge         ErrorCode = 5
	ErrNotEnoughReplicas       ErrorCode = 6
	ErrRequestTimedOut         ErrorCode = 7
	ErrThrottled               ErrorCode = 8
	ErrInvalidRequest          ErrorCode = 9
	ErrTopicAlreadyExists      ErrorCode = 10
	ErrUnsupportedVersion      ErrorCode = 11
	ErrInvalidConfig           ErrorCode = 12
	ErrNotLeaderOrWrongShard   ErrorCode = 13
	ErrStorage                 ErrorCode = 14
	ErrUnknownAPI              ErrorCode = 15
	ErrInvalidTopic            ErrorCode = 16
	ErrInvalidPartitions       ErrorCode = 17
	ErrInvalidReplication      ErrorCode = 18
	ErrNotEnoughReplicasAfter  ErrorCode = 19
	ErrInvalidRequiredAcks     ErrorCode = 20
	ErrOutOfOrderSequence      ErrorCode = 21
	ErrDuplicateSequence       ErrorCode = 22
	ErrInvalidProducerEpoch    ErrorCode = 23
	ErrShuttingDown            ErrorCode = 24
	ErrFrameTooLarge           ErrorCode = 25
	ErrInvalidTimestamp        ErrorCode = 26
	ErrTopicDeletionInProgress ErrorCode = 27

	// Consumer group codes (Kafka's names; the group coordinator's group.Code maps onto them).
	ErrCoordinatorLoadInProgress ErrorCode = 28
	ErrCoordinatorNotAvailable   ErrorCode = 29
	ErrNotCoordinator            ErrorCode = 30
	ErrIllegalGeneration         ErrorCode = 31
	ErrInconsistentGroupProtocol ErrorCode = 32
	ErrInvalidGroupID            ErrorCode = 33
	ErrUnknownMemberID           ErrorCode = 34
	ErrInvalidSessionTimeout     ErrorCode = 35
	ErrRebalanceInProgress       ErrorCode = 36
	ErrInvalidCommitOffsetSize   ErrorCode = 37
	ErrNonEmptyGroup             ErrorCode = 38
	ErrGroupIDNotFound           ErrorCode = 39
	ErrGroupMaxSizeReached       ErrorCode = 40
	ErrFencedInstanceID          ErrorCode = 41
	ErrOffsetMetadataTooLarge    ErrorCode = 42

	// Replication codes.
	ErrFencedLeaderEpoch  ErrorCode = 43
	ErrUnknownLeaderEpoch ErrorCode = 44
	ErrNotController      ErrorCode = 45

	// Security (docs/security.md).
	ErrSaslAuthenticationFailed   ErrorCode = 46
	ErrUnsupportedSaslMechanism   ErrorCode = 47
	ErrIllegalSaslState           ErrorCode = 48
	ErrTopicAuthorizationFailed   ErrorCode = 49
	ErrGroupAuthorizationFailed   ErrorCode = 50
	ErrClusterAuthorizationFailed ErrorCode = 51
	ErrSecurityDisabled           ErrorCode = 52

	// Inter-broker protocol versions (replication/controller's features.go).
	ErrUnsupportedProtocolVersion ErrorCode = 56
	ErrInvalidFinalizedVersion    ErrorCode = 57

	// Consumer groups, continued.
	ErrMemberIDRequired ErrorCode = 58
)

type errorInfo struct {
	name      string
	message   string
	retriable bool
}

var errorTable = map[ErrorCode]errorInfo{
	ErrNone:                    {"NONE", "no error", false},
	ErrUnknown:                 {"UNKNOWN", "unexpected server error", false},
	ErrCorruptMessage:          {"CORRUPT_MESSAGE", "record batch failed its CRC or size checks", true},
	ErrUnknownTopicOrPartition: {"UNKNOWN_TOPIC_OR_PARTITION", "topic or partition does not exist", true},
	ErrOffsetOutOfRange:        {"OFFSET_OUT_OF_RANGE", "offset is outside the partition's [log start, high watermark] range", false},
	ErrMessageTooLarge:         {"MESSAGE_TOO_LARGE", "record batch is larger than the topic's segment.bytes or the broker's frame limit", false},
	ErrNotEnoughReplicas:       {"NOT_ENOUGH_REPLICAS", "fewer in-sync replicas than min.insync.replicas; write refused", true},
	ErrRequestTimedOut:         {"REQUEST_TIMED_OUT", "request did not complete within its timeout", true},
	ErrThrottled:               {"THROTTLED", "request refused by a quota; retry after the throttle time", true},
	ErrInvalidRequest:          {"INVALID_REQUEST", "request could not be decoded or is malformed", false},
	ErrTopicAlreadyExists:      {"TOPIC_ALREADY_EXISTS", "topic already exists", false},
	ErrUnsupportedVersion:      {"UNSUPPORTED_VERSION", "API version not supported by this broker", false},
	ErrInvalidConfig:           {"INVALID_CONFIG", "configuration key or value is invalid", false},
	ErrNotLeaderOrWrongShard:   {"NOT_LEADER_OR_WRONG_SHARD", "this broker or shard does not own the partition; refresh metadata", true},
	ErrStorage:                 {"STORAGE_ERROR", "disk error on the broker while serving the partition", true},
	ErrUnknownAPI:              {"UNKNOWN_API", "API key not known to this broker", false},
	ErrInvalidTopic:            {"INVALID_TOPIC", "topic name is empty, too long or uses characters outside [a-zA-Z0-9._-]", false},
	ErrInvalidPartitions:       {"INVALID_PARTITIONS", "partition count is out of range", false},
	ErrInvalidReplication:      {"INVALID_REPLICATION_FACTOR", "replication factor is out of range", false},
	ErrNotEnoughReplicasAfter:  {"NOT_ENOUGH_REPLICAS_AFTER_APPEND", "written locally, but the ISR shrank below min.insync.replicas before it was replicated", true},
	ErrInvalidRequiredAcks:     {"INVALID_REQUIRED_ACKS", "acks must be 0, 1 or -1", false},
	ErrOutOfOrderSequence:      {"OUT_OF_ORDER_SEQUENCE", "producer sequence number is out of order", false},
	ErrDuplicateSequence:       {"DUPLICATE_SEQUENCE", "batch is a duplicate of one already written", false},
	ErrInvalidProducerEpoch:    {"INVALID_PRODUCER_EPOCH", "producer epoch is older than the current one", false},
	ErrShuttingDown:            {"SHUTTING_DOWN", "broker is shutting down", true},
	ErrFrameTooLarge:           {"FRAME_TOO_LARGE", "frame length exceeds the broker's max frame size; connection closed", false},
	ErrInvalidTimestamp:        {"INVALID_TIMESTAMP", "timestamp is out of the accepted range", false},
	ErrTopicDeletionInProgress: {"TOPIC_DELETION_IN_PROGRESS", "topic is being deleted", true},

	ErrCoordinatorLoadInProgress: {"COORDINATOR_LOAD_IN_PROGRESS", "the group's coordinator is still loading its offsets; retry", true},
	ErrCoordinatorNotAvailable:   {"COORDINATOR_NOT_AVAILABLE", "the group's coordinator cannot serve it now (starting, stopping, or its offsets could not be written); retry", true},
	ErrNotCoordinator:            {"NOT_COORDINATOR", "this shard does not coordinate the group; find its coordinator again", true},
	ErrIllegalGeneration:         {"ILLEGAL_GENERATION", "the request names an older generation of the group; rejoin", false},
	ErrInconsistentGroupProtocol: {"INCONSISTENT_GROUP_PROTOCOL", "the member's protocol type or assignors match none the group uses", false},
	ErrInvalidGroupID:            {"INVALID_GROUP_ID", "group id is empty", false},
	ErrUnknownMemberID:           {"UNKNOWN_MEMBER_ID", "the member is not in the group (removed after its session or rebalance timeout, or it left); rejoin", false},
	ErrInvalidSessionTimeout:     {"INVALID_SESSION_TIMEOUT", "session timeout outside the broker's group-min/max-session-timeout", false},
	ErrRebalanceInProgress:       {"REBALANCE_IN_PROGRESS", "the group is rebalancing; rejoin", false},
	ErrInvalidCommitOffsetSize:   {"INVALID_COMMIT_OFFSET_SIZE", "the offset commit is too large", false},
	ErrNonEmptyGroup:             {"NON_EMPTY_GROUP", "the group has members; only an empty group can be deleted or reset", false},
	ErrGroupIDNotFound:           {"GROUP_ID_NOT_FOUND", "no such group", false},
	ErrGroupMaxSizeReached:       {"GROUP_MAX_SIZE_REACHED", "the group has the most members the broker allows (group-max-size)", false},
	ErrFencedInstanceID:          {"FENCED_INSTANCE_ID", "a newer member took over this group.instance.id", false},
	ErrOffsetMetadataTooLarge:    {"OFFSET_METADATA_TOO_LARGE", "the commit's metadata string is too long", false},

	ErrFencedLeaderEpoch:  {"FENCED_LEADER_EPOCH", "the request's leader epoch is older than the partition's; refresh metadata", true},
	ErrUnknownLeaderEpoch: {"UNKNOWN_LEADER_EPOCH", "the request's leader epoch is newer than this broker knows; retry", true},
	ErrNotController:      {"NOT_CONTROLLER", "no controller leader is reachable from this broker; retry", true},

	ErrSaslAuthenticationFailed:   {"SASL_AUTHENTICATION_FAILED", "authentication failed (unknown user or wrong password), or a request came before authentication; connection closed", false},
	ErrUnsupportedSaslMechanism:   {"UNSUPPORTED_SASL_MECHANISM", "the broker does not offer this SASL mechanism", false},
	ErrIllegalSaslState:           {"ILLEGAL_SASL_STATE", "SASL request out of order (authenticate before handshake, or after success)", false},
	ErrTopicAuthorizationFailed:   {"TOPIC_AUTHORIZATION_FAILED", "the principal is not allowed this operation on the topic", false},
	ErrGroupAuthorizationFailed:   {"GROUP_AUTHORIZATION_FAILED", "the principal is not allowed this operation on the group", false},
	ErrClusterAuthorizationFailed: {"CLUSTER_AUTHORIZATION_FAILED", "the principal is not allowed this cluster operation", false},
	ErrSecurityDisabled:           {"SECURITY_DISABLED", "the broker runs without the security feature this request administers (--auth or --acl off)", false},

	ErrUnsupportedProtocolVersion: {"UNSUPPORTED_PROTOCOL_VERSION", "the inter-broker protocol version asked for is outside the range a broker speaks: a peer's request, a registration refused because the broker's range excludes the cluster's finalized version, or a finalize refused because a live broker's range excludes it", false},
	ErrInvalidFinalizedVersion:    {"INVALID_FINALIZED_VERSION", "the finalized inter-broker protocol version never goes down", false},

	ErrMemberIDRequired: {"MEMBER_ID_REQUIRED", "a new member must join again with the member id this response carries (JoinGroup v1+, KIP-394)", false},
}

// Error returns the code's name and default message.
func (c ErrorCode) Error() string {
	if info, ok := errorTable[c]; ok {
		return info.name + ": " + info.message
	}
	return fmt.Sprintf("UNKNOWN_CODE_%d: error code not known to this client", int16(c))
}

// Name returns the code's upper-case name as in docs/protocol.md.
func (c ErrorCode) Name() string {
	if info, ok := errorTable[c]; ok {
		return info.name
	}
	return fmt.Sprintf("UNKNOWN_CODE_%d", int16(c))
}

// Retriable reports whether a client may retry the same request after this error
// (possibly after refreshing metadata).
func (c ErrorCode) Retriable() bool { return errorTable[c].retriable }

// Err returns nil for ErrNone and the code itself otherwise.
func (c ErrorCode) Err() error {
	if c == ErrNone {
		return nil
	}
	return c
}

// Error is an error code together with the broker's message for this occurrence.
// errors.Is(err, code) matches on the code.
type Error struct {
	Code    ErrorCode
	Message string
}

func (e *Error) Error() string {
	if e.Message == "" {
		return e.Code.Error()
	}
	return e.Code.Name() + ": " + e.Message
}

func (e *Error) Unwrap() error { return e.Code }

// CodeError returns nil when code is ErrNone, else an *Error carrying message.
func CodeError(code ErrorCode, message string) error {
	if code == ErrNone {
		return nil
	}
	return &Error{Code: code, Message: message}
}

// CodeOf returns the protocol error code carried by err: the code itself, the code of a
// wrapped *Error, ErrNone for nil, ErrUnknown for anything else.
func CodeOf(err error) ErrorCode {
	if err == nil {
		return ErrNone
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	var c ErrorCode
	if errors.As(err, &c) {
		return c
	}
	return ErrUnknown
}

// Decoding errors. They say why bytes are not a valid frame or message; the server answers
// them with ErrInvalidRequest (or ErrFrameTooLarge) and the message of the error.
var (
	// ErrShortBuffer means the bytes end before a field or a length-prefixed value does.
	ErrShortBuffer = errors.New("netio: message truncated")
	// ErrTrailingBytes means a message decoded completely but bytes were left over.
	ErrTrailingBytes = errors.New("netio: trailing bytes after message")
	// ErrBadLength means a length or count field is negative where that is not allowed, or
	// larger than the bytes that remain.
	ErrBadLength = errors.New("netio: invalid length or count")
	// ErrFrameLength means a frame's length field is below the header size or above the
	// maximum frame size; the stream cannot be resynchronised and must be closed.
	ErrFrameLength = errors.New("netio: invalid frame length")
)
