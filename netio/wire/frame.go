package wire

import (
	"encoding/binary"
	"fmt"
	"io"
)

// Frames. Every request and every response travels in one frame:
//
//	request frame                          response frame
//	+----------------------------+         +----------------------------+
//	| u32 length                 |         | u32 length                 |
//	+----------------------------+         +----------------------------+
//	| u16 api key                |         | u16 api key (echoed)       |
//	| u16 api version            |         | u16 api version (echoed)   |
//	| u32 correlation id         |         | u32 correlation id (echoed)|
//	+----------------------------+         | i16 error code             |
//	| payload (request schema)   |         +----------------------------+
//	+----------------------------+         | payload: response schema   |
//	                                       | if error code = 0, else    |
//	                                       | string error message       |
//	                                       +----------------------------+
//
// length counts the bytes after the length field itself (header rest + payload), so a
// request frame occupies 4+length bytes. All integers are big-endian. These sizes and the
// layout are part of the wire format and must not change.
const (
	// RequestHeaderBytes is the size of a request header including the length field.
	RequestHeaderBytes = 12
	// ResponseHeaderBytes is the size of a response header including the length field.
	ResponseHeaderBytes = 14

	// FrameLengthBytes is the size of the length field that opens every frame.
	FrameLengthBytes = 4

	// FrameBytesMaxDefault is the default largest frame (length field value) a broker or
	// client accepts: 64 MiB holds a fetch of 32 partitions x 1 MiB with room to spare and
	// keeps one hostile length from pinning more than that per connection.
	FrameBytesMaxDefault = 64 << 20
)

// APIKey identifies a request type. The values are part of the wire format.
type APIKey uint16

// API keys.
const (
	APIVersions        APIKey = 0
	APIProduce         APIKey = 1
	APIFetch           APIKey = 2
	APIListOffsets     APIKey = 3
	APIMetadata        APIKey = 4
	APICreateTopics    APIKey = 5
	APIDeleteTopics    APIKey = 6
	APIDescribeTopics  APIKey = 7
	APIDescribeConfigs APIKey = 8
	APIAlterConfigs    APIKey = 9
	APIInitProducerID  APIKey = 10
	APIFindCoordinator APIKey = 11
	APIJoinGroup       APIKey = 12
	APISyncGroup       APIKey = 13
	APIHeartbeat       APIKey = 14
	APILeaveGroup      APIKey = 15
	APIOffsetCommit    APIKey = 16
	APIOffsetFetch     APIKey = 17
	APIListGroups      APIKey = 18
	APIDescribeGroups  APIKey = 19
	APIDeleteGroups    APIKey = 20
	// Between brokers (replication), and the CLI's cluster view.
	APIReplicaFetch          APIKey = 21
	APIOffsetsForLeaderEpoch APIKey = 22
	APIController            APIKey = 23
	// Security (security.go, docs/security.md).
	APISaslHandshake    APIKey = 24
	APISaslAuthenticate APIKey = 25
	APIDescribeUsers    APIKey = 26
	APIAlterUsers       APIKey = 27
	APIDescribeAcls     APIKey = 28
	APICreateAcls       APIKey = 29
	APIDeleteAcls       APIKey = 30
	// Between brokers: a follower ends its parked ReplicaFetch (fetchwake.go).
	APIReplicaFetchWake APIKey = 31
	// Quotas (quota.go): the consumer group a connection's fetches are charged to.
	APIQuotaGroup APIKey = 39

	// APIKeyCount is one past the highest API key this codec knows. Keys below it may be
	// unassigned (Known says which).
	APIKeyCount = 40
)

var apiNames = [APIKeyCount]string{
	"ApiVersions", "Produce", "Fetch", "ListOffsets", "Metadata",
	"CreateTopics", "DeleteTopics", "DescribeTopics", "DescribeConfigs", "AlterConfigs",
	"InitProducerId", "FindCoordinator", "JoinGroup", "SyncGroup", "Heartbeat",
	"LeaveGroup", "OffsetCommit", "OffsetFetch", "ListGroups", "DescribeGroups", "DeleteGroups", "ReplicaFetch", "OffsetsForLeaderEpoch", "Controller",
	"SaslHandshake", "SaslAuthenticate", "DescribeUsers", "AlterUsers",
	"DescribeAcls", "CreateAcls", "DeleteAcls",
	APIReplicaFetchWake: "ReplicaFetchWake",
	APIQuotaGroup:       "QuotaGroup",
}

func (k APIKey) String() string {
	if k.Known() {
		return apiNames[k]
	}
	return fmt.Sprintf("API(%d)", uint16(k))
}

// KnownAPIs lists the keys Known, in order.
func KnownAPIs() []APIKey {
	var out []APIKey
	for k := APIKey(0); k < APIKeyCount; k++ {
		if k.Known() {
			out = append(out, k)
		}
	}
	return out
}

// Known reports whether the key names an API this package has a schema for.
func (k APIKey) Known() bool { return k < APIKeyCount && apiNames[k] != "" }

// VersionMax is the highest version of the API that this package encodes and decodes:
// 1 for Metadata (MetadataVersionMax), JoinGroup (JoinGroupVersionMax), CreateTopics,
// DeleteTopics and AlterConfigs (AdminVersionMax), ReplicaFetch and Controller (the
// inter-broker protocol version), 0 for every other API. A broker answers a higher version
// with ErrUnsupportedVersion.
func (k APIKey) VersionMax() uint16 {
	switch k {
	case APIMetadata:
		return MetadataVersionMax
	case APIJoinGroup:
		return JoinGroupVersionMax
	case APICreateTopics, APIDeleteTopics, APIAlterConfigs:
		return AdminVersionMax
	case APIReplicaFetch:
		return ReplicaFetchVersionMax
	case APIController:
		return ControllerVersionMax
	}
	return 0
}

// RequestHeader is the decoded fixed part of a request frame.
type RequestHeader struct {
	Length        uint32 // bytes after the length field
	API           APIKey
	Version       uint16
	CorrelationID uint32
}

// ResponseHeader is the decoded fixed part of a response frame.
type ResponseHeader struct {
	Length        uint32
	API           APIKey
	Version       uint16
	CorrelationID uint32
	ErrorCode     ErrorCode
}

// ParseRequestHeader decodes the first RequestHeaderBytes of b and checks the length field
// against frameBytesMax before anything is allocated for the payload. It returns
// ErrShortBuffer when b is shorter than a header, and an error wrapping ErrFrameLength when
// the length is impossible (below the header rest or above frameBytesMax).
func ParseRequestHeader(b []byte, frameBytesMax uint32) (RequestHeader, error) {
	if len(b) < RequestHeaderBytes {
		return RequestHeader{}, ErrShortBuffer
	}
	h := RequestHeader{
		Length:        binary.BigEndian.Uint32(b[0:4]),
		API:           APIKey(binary.BigEndian.Uint16(b[4:6])),
		Version:       binary.BigEndian.Uint16(b[6:8]),
		CorrelationID: binary.BigEndian.Uint32(b[8:12]),
	}
	if err := checkFrameLength(h.Length, RequestHeaderBytes, frameBytesMax); err != nil {
		return h, err
	}
	return h, nil
}

// ParseResponseHeader is ParseRequestHeader for response frames.
func ParseResponseHeader(b []byte, frameBytesMax uint32) (ResponseHeader, error) {
	if len(b) < ResponseHeaderBytes {
		return ResponseHeader{}, ErrShortBuffer
	}
	h := ResponseHeader{
		Length:        binary.BigEndian.Uint32(b[0:4]),
		API:           APIKey(binary.BigEndian.Uint16(b[4:6])),
		Version:       binary.BigEndian.Uint16(b[6:8]),
		CorrelationID: binary.BigEndian.Uint32(b[8:12]),
		ErrorCode:     ErrorCode(binary.BigEndian.Uint16(b[12:14])),
	}
	if err := checkFrameLength(h.Length, ResponseHeaderBytes, frameBytesMax); err != nil {
		return h, err
	}
	return h, nil
}

func checkFrameLength(length uint32, headerBytes int, frameBytesMax uint32) error {
	if length < uint32(headerBytes-FrameLengthBytes) {
		return fmt.Errorf("frame length %d below the %d-byte header: %w", length, headerBytes-FrameLengthBytes, ErrFrameLength)
	}
	if length > frameBytesMax {
		return fmt.Errorf("frame length %d above the %d-byte maximum: %w", length, frameBytesMax, ErrFrameLength)
	}
	return nil
}

// SplitRequest takes the first complete request frame from b. It returns the header, the
// payload (a sub-slice of b) and the bytes after the frame. When b holds only part of a
// frame it returns ErrShortBuffer and the caller reads more; an ErrFrameLength error is
// final for the stream.
func SplitRequest(b []byte, frameBytesMax uint32) (RequestHeader, []byte, []byte, error) {
	h, err := ParseRequestHeader(b, frameBytesMax)
	if err != nil {
		return h, nil, b, err
	}
	end := FrameLengthBytes + int(h.Length)
	if len(b) < end {
		return h, nil, b, ErrShortBuffer
	}
	return h, b[RequestHeaderBytes:end:end], b[end:], nil
}

// SplitResponse is SplitRequest for response frames.
func SplitResponse(b []byte, frameBytesMax uint32) (ResponseHeader, []byte, []byte, error) {
	h, err := ParseResponseHeader(b, frameBytesMax)
	if err != nil {
		return h, nil, b, err
	}
	end := FrameLengthBytes + int(h.Length)
	if len(b) < end {
		return h, nil, b, ErrShortBuffer
	}
	return h, b[ResponseHeaderBytes:end:end], b[end:], nil
}

// ReadResponse reads one response frame from r into buf (grown if needed) and returns the
// header, the payload (aliasing the returned buffer) and the buffer for reuse.
func ReadResponse(r io.Reader, buf []byte, frameBytesMax uint32) (ResponseHeader, []byte, []byte, error) {
	var hb [ResponseHeaderBytes]byte
	if _, err := io.ReadFull(r, hb[:]); err != nil {
		return ResponseHeader{}, nil, buf, err
	}
	h, err := ParseResponseHeader(hb[:], frameBytesMax)
	if err != nil {
		return h, nil, buf, err
	}
	n := int(h.Length) - (ResponseHeaderBytes - FrameLengthBytes)
	if cap(buf) < n {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	if _, err := io.ReadFull(r, buf); err != nil {
		return h, nil, buf, fmt.Errorf("read %d-byte %s response payload: %w", n, h.API, NoEOF(err))
	}
	return h, buf, buf, nil
}

// NoEOF turns io.EOF into io.ErrUnexpectedEOF: inside a frame, running out of bytes is a
// truncation, not a clean end of stream.
func NoEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// AppendRequest appends a complete request frame for m to dst, at version 0 or, for a
// Versioned message, at its WireVersion.
func AppendRequest(dst []byte, correlationID uint32, m Message) []byte {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0)
	dst = binary.BigEndian.AppendUint16(dst, uint16(m.API()))
	dst = binary.BigEndian.AppendUint16(dst, WireVersionOf(m))
	dst = binary.BigEndian.AppendUint32(dst, correlationID)
	dst = m.AppendTo(dst)
	binary.BigEndian.PutUint32(dst[start:], uint32(len(dst)-start-FrameLengthBytes))
	return dst
}

// WireVersionOf is m's API version: its WireVersion when it is Versioned, else 0.
func WireVersionOf(m Message) uint16 {
	if v, ok := m.(Versioned); ok {
		return v.WireVersion()
	}
	return 0
}

// SetWireVersion tells a Versioned message the version of the frame it is decoded from;
// other messages have one version and ignore it.
func SetWireVersion(m Message, version uint16) {
	if v, ok := m.(Versioned); ok {
		v.SetWireVersion(version)
	}
}

// AppendResponse appends a complete, successful response frame for m to dst. A response
// that carries file ranges must go through AppendResponseSpliced instead.
func AppendResponse(dst []byte, h RequestHeader, m Message) []byte {
	start := len(dst)
	dst = appendResponseHeader(dst, h, ErrNone)
	dst = m.AppendTo(dst)
	binary.BigEndian.PutUint32(dst[start:], uint32(len(dst)-start-FrameLengthBytes))
	return dst
}

// AppendErrorResponse appends a response frame that carries only a frame-level error code
// and message (no schema payload): the answer to an unknown API, an unsupported version,
// an undecodable request or an oversized frame.
func AppendErrorResponse(dst []byte, h RequestHeader, code ErrorCode, message string) []byte {
	start := len(dst)
	dst = appendResponseHeader(dst, h, code)
	if len(message) > stringBytesMax {
		message = message[:stringBytesMax]
	}
	dst = appendString(dst, message)
	binary.BigEndian.PutUint32(dst[start:], uint32(len(dst)-start-FrameLengthBytes))
	return dst
}

func appendResponseHeader(dst []byte, h RequestHeader, code ErrorCode) []byte {
	dst = append(dst, 0, 0, 0, 0)
	dst = binary.BigEndian.AppendUint16(dst, uint16(h.API))
	dst = binary.BigEndian.AppendUint16(dst, h.Version)
	dst = binary.BigEndian.AppendUint32(dst, h.CorrelationID)
	return binary.BigEndian.AppendUint16(dst, uint16(code))
}

// DecodeErrorPayload decodes the payload of a response whose header error code is not
// ErrNone: a single string, the broker's message.
func DecodeErrorPayload(payload []byte) (string, error) {
	r := reader{buf: payload}
	msg := r.string()
	return msg, r.done("error response")
}
