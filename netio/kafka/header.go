package kafka

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// requestHeader is a Kafka request header (v1, or v2 with tagged fields for flexible
// versions). Layout, big-endian:
//
//	int16 api key | int16 api version | int32 correlation id | int16 client id length (-1 null) | client id
//	v2 only: uvarint tag count, then per tag: uvarint tag, uvarint size, size bytes
type requestHeader struct {
	key           int16
	version       int16
	correlationID int32
	clientID      string
}

// requestHeaderFixedBytes is key + version + correlation id.
const requestHeaderFixedBytes = 8

var errShortHeader = errors.New("request header cut short")

// parseFixedHeader reads key, version and correlation id.
func parseFixedHeader(b []byte) (requestHeader, error) {
	if len(b) < requestHeaderFixedBytes {
		return requestHeader{}, fmt.Errorf("%w: %d bytes", errShortHeader, len(b))
	}
	return requestHeader{
		key:           int16(binary.BigEndian.Uint16(b)),
		version:       int16(binary.BigEndian.Uint16(b[2:])),
		correlationID: int32(binary.BigEndian.Uint32(b[4:])),
	}, nil
}

// parseClientID reads the client id after the fixed part and, for a flexible header, skips
// its tagged fields. It returns the body that follows.
func parseClientID(h *requestHeader, b []byte, flexible bool) ([]byte, error) {
	b = b[requestHeaderFixedBytes:]
	if len(b) < 2 {
		return nil, fmt.Errorf("%w: no client id length", errShortHeader)
	}
	n := int(int16(binary.BigEndian.Uint16(b)))
	b = b[2:]
	if n > len(b) {
		return nil, fmt.Errorf("%w: client id of %d bytes, %d remain", errShortHeader, n, len(b))
	}
	if n > 0 {
		h.clientID = string(b[:n])
		b = b[n:]
	}
	if !flexible {
		return b, nil
	}
	return skipTags(b)
}

// skipTags skips a tagged-field section.
func skipTags(b []byte) ([]byte, error) {
	count, n := binary.Uvarint(b)
	if n <= 0 || count > uint64(len(b)) {
		return nil, fmt.Errorf("%w: bad tag count", errShortHeader)
	}
	b = b[n:]
	for range count {
		_, n = binary.Uvarint(b)
		if n <= 0 {
			return nil, fmt.Errorf("%w: bad tag", errShortHeader)
		}
		b = b[n:]
		size, n := binary.Uvarint(b)
		if n <= 0 || size > uint64(len(b)-n) {
			return nil, fmt.Errorf("%w: bad tag size", errShortHeader)
		}
		b = b[n+int(size):]
	}
	return b, nil
}
