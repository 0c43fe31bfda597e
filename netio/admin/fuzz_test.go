package admin

import (
	"bytes"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/ringlog/ringlog/engine/batch"
)

// FuzzDecodeProduce: any body either decodes into records within the bounds, which then
// encode into a valid record batch holding exactly those records, or fails as a malformed
// body. Never a panic. Seeds: testdata/fuzz/FuzzDecodeProduce and the cases below.
func FuzzDecodeProduce(f *testing.F) {
	for _, seed := range []string{
		``, `{}`, `null`, `[]`, `{"key": "k", "value": "v", "headers": {"a": "1"}}`,
		`{"records": [{"value": "a"}, {"key": null, "value": null, "partition": 1, "timestamp": 5}]}`,
		`{"records": []}`, `{"value": "x"} {}`, `{"value": 1}`, `{"partition": -1}`,
		`{"records": [{"headers": {"": ""}}]}`, `{"value": "\ud800"}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := decodeProduce(bytes.NewReader(body))
		if err != nil {
			if !errors.Is(err, errBadBody) {
				t.Fatalf("decode error %v is not a malformed-body error", err)
			}
			return
		}
		if n := len(req.records); n < 1 || n > produceRecordsMax {
			t.Fatalf("%d records decoded", n)
		}
		idx := make([]int, len(req.records))
		for i := range idx {
			if len(req.records[i].Headers) > recordHeadersMax {
				t.Fatalf("record %d: %d headers", i, len(req.records[i].Headers))
			}
			idx[i] = i
		}
		raw, err := buildBatch(req.records, idx, 1, producer{})
		if err != nil {
			t.Fatalf("build a batch of decoded records: %v", err)
		}
		count := 0
		err = batch.Decode(raw, func(offset, _ int64, r *batch.Record) error {
			rec := req.records[offset]
			if !bytes.Equal(r.Value, nullable(rec.Value)) || (r.Value == nil) != (rec.Value == nil) {
				t.Fatalf("record %d value %q, want %v", offset, r.Value, rec.Value)
			}
			count++
			return nil
		})
		if err != nil || count != len(req.records) {
			t.Fatalf("batch of %d records decodes to %d: %v", len(req.records), count, err)
		}
	})
}

// FuzzDecodeCreateTopic: any body decodes within the bounds or fails as malformed.
func FuzzDecodeCreateTopic(f *testing.F) {
	for _, seed := range []string{
		``, `{"name": "t"}`, `{"name": "t", "partitions": 3, "replication_factor": 1, "retention_ms": 1000, "cleanup_policy": "delete", "configs": {"segment.bytes": "1048576"}}`,
		`{"name": 5}`, `{"partitions": -1}`, `{"configs": {"a": 1}}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, config, err := decodeCreateTopic(bytes.NewReader(body))
		if err != nil {
			if !errors.Is(err, errBadBody) {
				t.Fatalf("decode error %v is not a malformed-body error", err)
			}
			return
		}
		if len(config) > topicConfigsMax+2 || req.Partitions == 0 {
			t.Fatalf("decoded %d configs, %d partitions", len(config), req.Partitions)
		}
	})
}

// FuzzParseFetchQuery: any query string parses within the bounds or is refused.
func FuzzParseFetchQuery(f *testing.F) {
	for _, seed := range []string{"", "partition=0&offset=earliest&max=500&wait_ms=1000", "offset=latest", "offset=-1", "max=0", "wait_ms=99999999999", "partition=2147483648", "max=%zz"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, query string) {
		r := httptest.NewRequest(http.MethodGet, "/v1/topics/t/records", nil)
		r.URL.RawQuery = query
		if _, err := url.ParseQuery(query); err != nil {
			return // net/http drops what it cannot parse; the handler sees the rest
		}
		fq, err := parseFetchQuery(r)
		if err != nil {
			return
		}
		if fq.partition < 0 || fq.max < 1 || fq.max > FetchRecordsMax || fq.wait < 0 || fq.wait > FetchWaitMax {
			t.Fatalf("query %q parsed out of bounds: %+v", query, fq)
		}
	})
}

// FuzzDecodeCommitOffsets: any body decodes into offsets within the bounds (partitions
// in order, none negative) or fails as malformed.
func FuzzDecodeCommitOffsets(f *testing.F) {
	for _, seed := range []string{``, `{"topic": "t", "offsets": {"0": 5, "1": 0}}`, `{"topic": "t", "offsets": {"01": 1}}`,
		`{"topic": "t", "offsets": {"-1": 1}}`, `{"topic": "", "offsets": {"0": 1}}`, `{"topic": "t", "offsets": {"0": 1.5}}`} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		topic, offsets, err := decodeCommitOffsets(bytes.NewReader(body))
		if err != nil {
			if !errors.Is(err, errBadBody) {
				t.Fatalf("decode error %v is not a malformed-body error", err)
			}
			return
		}
		if topic == "" || len(offsets) == 0 || len(offsets) > engineParts {
			t.Fatalf("topic %q with %d offsets", topic, len(offsets))
		}
		for i, o := range offsets {
			if o.Offset < 0 || o.Partition < 0 || i > 0 && o.Partition <= offsets[i-1].Partition || o.Topic != topic {
				t.Fatalf("offset %d: %+v", i, o)
			}
		}
	})
}
