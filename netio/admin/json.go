package admin

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
)

// The JSON request bodies of the HTTP API and their decoders. Every decoder reads at most
// the body bound (the caller wraps the body in http.MaxBytesReader), refuses unknown
// fields and trailing data, and checks counts before anything is built from the body
// (FuzzDecodeProduce, FuzzDecodeCreateTopic).

// Bounds of a decoded request, besides the body bytes.
const (
	// produceRecordsMax bounds the records of one HTTP produce.
	produceRecordsMax = 10_000
	// recordHeadersMax bounds the headers of one record.
	recordHeadersMax = 256
	// topicConfigsMax bounds the config entries of one create-topic request.
	topicConfigsMax = 256
)

// errBadBody is the kind of every decoding failure (answered 400 INVALID_REQUEST).
var errBadBody = errors.New("malformed request body")

// recordJSON is one record: {key, value, headers, partition, timestamp}. A missing or null
// key or value is null in the record batch; strings are stored as their UTF-8 bytes.
type recordJSON struct {
	Key       *string           `json:"key"`
	Value     *string           `json:"value"`
	Headers   map[string]string `json:"headers"`
	Partition *int32            `json:"partition"`
	Timestamp *int64            `json:"timestamp"` // milliseconds since the epoch; default now
}

// produceJSON is a produce body: one record, or {"records": [...]}.
type produceJSON struct {
	recordJSON
	Records []recordJSON `json:"records"`
}

// produceRequest is a decoded produce body.
type produceRequest struct {
	records []recordJSON
	batch   bool // the {"records": [...]} form: answered with one result per record
}

// decodeProduce decodes a produce body.
func decodeProduce(r io.Reader) (produceRequest, error) {
	var body produceJSON
	if err := decodeStrict(r, &body); err != nil {
		return produceRequest{}, err
	}
	single := body.recordJSON
	if body.Records != nil {
		if single.Key != nil || single.Value != nil || single.Headers != nil || single.Partition != nil || single.Timestamp != nil {
			return produceRequest{}, fmt.Errorf("%w: give either one record or \"records\", not both", errBadBody)
		}
		if len(body.Records) == 0 || len(body.Records) > produceRecordsMax {
			return produceRequest{}, fmt.Errorf("%w: %d records (want 1..%d)", errBadBody, len(body.Records), produceRecordsMax)
		}
		for i := range body.Records {
			if err := checkRecord(&body.Records[i]); err != nil {
				return produceRequest{}, fmt.Errorf("record %d: %w", i, err)
			}
		}
		return produceRequest{records: body.Records, batch: true}, nil
	}
	if err := checkRecord(&single); err != nil {
		return produceRequest{}, err
	}
	return produceRequest{records: []recordJSON{single}}, nil
}

func checkRecord(r *recordJSON) error {
	if len(r.Headers) > recordHeadersMax {
		return fmt.Errorf("%w: %d headers (at most %d)", errBadBody, len(r.Headers), recordHeadersMax)
	}
	if r.Partition != nil && *r.Partition < 0 {
		return fmt.Errorf("%w: partition %d", errBadBody, *r.Partition)
	}
	if r.Timestamp != nil && *r.Timestamp < 0 {
		return fmt.Errorf("%w: timestamp %d", errBadBody, *r.Timestamp)
	}
	return nil
}

// sortedHeaderKeys are a record's header keys in a stable order (JSON objects have none).
func sortedHeaderKeys(h map[string]string) []string {
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// createTopicJSON is a create-topic body (the seed's fields, plus any topic config).
type createTopicJSON struct {
	Name              string            `json:"name"`
	Partitions        int               `json:"partitions"`
	ReplicationFactor *int              `json:"replication_factor"`
	RetentionMs       *int64            `json:"retention_ms"`
	CleanupPolicy     string            `json:"cleanup_policy"`
	Configs           map[string]string `json:"configs"`
}

// decodeCreateTopic decodes a create-topic body into its topic config map.
func decodeCreateTopic(r io.Reader) (createTopicJSON, map[string]string, error) {
	var body createTopicJSON
	if err := decodeStrict(r, &body); err != nil {
		return body, nil, err
	}
	if len(body.Configs) > topicConfigsMax {
		return body, nil, fmt.Errorf("%w: %d configs (at most %d)", errBadBody, len(body.Configs), topicConfigsMax)
	}
	if body.Partitions == 0 {
		body.Partitions = 1
	}
	config := make(map[string]string, len(body.Configs)+2)
	for k, v := range body.Configs {
		config[k] = v
	}
	if body.RetentionMs != nil {
		config["retention.ms"] = fmt.Sprint(*body.RetentionMs)
	}
	if body.CleanupPolicy != "" {
		config["cleanup.policy"] = body.CleanupPolicy
	}
	return body, config, nil
}

// decodeStrict decodes exactly one JSON value into v, refusing unknown fields and
// anything after the value.
func decodeStrict(r io.Reader, v any) error {
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return bodyError(err)
	}
	var extra json.RawMessage
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		if err != nil {
			return bodyError(err)
		}
		return fmt.Errorf("%w: data after the JSON value", errBadBody)
	}
	return nil
}

// bodyError keeps a body-too-large error recognisable (413) and wraps the rest as 400.
func bodyError(err error) error {
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return err
	}
	return fmt.Errorf("%w: %w", errBadBody, err)
}
