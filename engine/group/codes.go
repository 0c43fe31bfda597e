package group

import "fmt"

// Code is a group protocol error code. The numbers are Kafka's (so the broker can answer
// Kafka clients with them unchanged); the ringlog wire codec maps them when it carries them.
// Code implements error; CodeNone is success.
type Code int16

// Kafka's error codes for the group APIs. Part of the Kafka protocol: must not change.
const (
	CodeNone                      Code = 0
	CodeUnknownServerError        Code = -1
	CodeOffsetMetadataTooLarge    Code = 12
	CodeCoordinatorLoadInProgress Code = 14
	CodeCoordinatorNotAvailable   Code = 15
	CodeNotCoordinator            Code = 16
	CodeIllegalGeneration         Code = 22
	CodeInconsistentGroupProtocol Code = 23
	CodeInvalidGroupID            Code = 24
	CodeUnknownMemberID           Code = 25
	CodeInvalidSessionTimeout     Code = 26
	CodeRebalanceInProgress       Code = 27
	CodeInvalidCommitOffsetSize   Code = 28
	CodeNonEmptyGroup             Code = 68
	CodeGroupIDNotFound           Code = 69
	CodeMemberIDRequired          Code = 79
	CodeGroupMaxSizeReached       Code = 81
	CodeFencedInstanceID          Code = 82
)

var codeNames = map[Code]string{
	CodeNone:                      "NONE",
	CodeUnknownServerError:        "UNKNOWN_SERVER_ERROR",
	CodeOffsetMetadataTooLarge:    "OFFSET_METADATA_TOO_LARGE",
	CodeCoordinatorLoadInProgress: "COORDINATOR_LOAD_IN_PROGRESS",
	CodeCoordinatorNotAvailable:   "COORDINATOR_NOT_AVAILABLE",
	CodeNotCoordinator:            "NOT_COORDINATOR",
	CodeIllegalGeneration:         "ILLEGAL_GENERATION",
	CodeInconsistentGroupProtocol: "INCONSISTENT_GROUP_PROTOCOL",
	CodeInvalidGroupID:            "INVALID_GROUP_ID",
	CodeUnknownMemberID:           "UNKNOWN_MEMBER_ID",
	CodeInvalidSessionTimeout:     "INVALID_SESSION_TIMEOUT",
	CodeRebalanceInProgress:       "REBALANCE_IN_PROGRESS",
	CodeInvalidCommitOffsetSize:   "INVALID_COMMIT_OFFSET_SIZE",
	CodeNonEmptyGroup:             "NON_EMPTY_GROUP",
	CodeGroupIDNotFound:           "GROUP_ID_NOT_FOUND",
	CodeMemberIDRequired:          "MEMBER_ID_REQUIRED",
	CodeGroupMaxSizeReached:       "GROUP_MAX_SIZE_REACHED",
	CodeFencedInstanceID:          "FENCED_INSTANCE_ID",
}

// String is Kafka's name of the code.
func (c Code) String() string {
	if n, ok := codeNames[c]; ok {
		return n
	}
	return fmt.Sprintf("CODE_%d", int16(c))
}

// Error is the same as String, so a Code prints as its Kafka name either way.
func (c Code) Error() string { return c.String() }
