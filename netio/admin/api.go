package admin

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ringlog/ringlog/engine"
	"github.com/ringlog/ringlog/engine/batch"
	"github.com/ringlog/ringlog/engine/shard"
	"github.com/ringlog/ringlog/netio"
	"github.com/ringlog/ringlog/netio/client"
	"github.com/ringlog/ringlog/netio/wire"
)

// The HTTP API (docs/operations.md "HTTP API"): the seeds' REST surface for clients
// without the binary protocol, answered from the same broker core.
//
//	POST /v1/topics                          {name, partitions, replication_factor, retention_ms, cleanup_policy, configs} -> 201 {topic, partitions}
//	POST /v1/topics/{topic}/records?acks=all {key, value, headers} | {records: [...]} -> 202 {partition, offset} | {records: [{partition, offset}]}
//	GET  /v1/topics/{topic}/records?partition=0&offset=earliest&max=500&wait_ms=1000 -> 200 {records, next_offset, high_watermark, log_start_offset}
//
// and, on a broker with consumer groups, the group endpoints of groupapi.go. Errors are
// {"error": {"code", "name", "message"}} with the binary protocol's codes.

// Idempotence headers of a produce.
const (
	headerProducerID = "X-Producer-Id"
	headerSequence   = "X-Sequence"
)

func (s *Server) routes(mux *http.ServeMux) {
	s.handle(mux, "POST /v1/topics", "create_topic", s.createTopic)
	s.handle(mux, "POST /v1/topics/{topic}/records", "produce", s.produce)
	s.handle(mux, "GET /v1/topics/{topic}/records", "fetch", s.fetch)
	s.groupRoutes(mux)
}

// handle serves pattern with fn, counting its requests by status as endpoint.
func (s *Server) handle(mux *http.ServeMux, pattern, endpoint string, fn http.HandlerFunc) {
	if reason := s.cfg.APIRefused; reason != "" {
		fn = func(w http.ResponseWriter, _ *http.Request) {
			writeJSON(w, http.StatusForbidden, errorBody{Error: errorJSON{Code: int16(wire.ErrInvalidRequest),
				Name: wire.ErrInvalidRequest.Name(), Message: "the JSON API is off: " + reason}})
		}
	}
	mux.Handle(pattern, promhttp.InstrumentHandlerCounter(s.httpRequests.MustCurryWith(prometheus.Labels{"endpoint": endpoint}), fn))
}

// apiError is an error answered with a protocol code.
type apiError struct {
	code wire.ErrorCode
	msg  string
}

func (e *apiError) Error() string { return e.msg }

func invalid(format string, a ...any) error {
	return &apiError{code: wire.ErrInvalidRequest, msg: fmt.Sprintf(format, a...)}
}

// writeError answers err as JSON with its protocol code and the HTTP status of that code.
func writeError(w http.ResponseWriter, err error) {
	code := netio.CodeFor(err)
	var ae *apiError
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &ae):
		code = ae.code
	case errors.As(err, &tooLarge):
		code = wire.ErrMessageTooLarge
	case errors.Is(err, errBadBody):
		code = wire.ErrInvalidRequest
	}
	status := httpStatus(code)
	if tooLarge != nil {
		status = http.StatusRequestEntityTooLarge
	}
	writeJSON(w, status, errorBody{Error: errorJSON{Code: int16(code), Name: code.Name(), Message: err.Error()}})
}

type errorBody struct {
	Error errorJSON `json:"error"`
}

type errorJSON struct {
	Code    int16  `json:"code"`
	Name    string `json:"name"`
	Message string `json:"message"`
}

// httpStatus maps a protocol error code to an HTTP status.
func httpStatus(code wire.ErrorCode) int {
	switch code {
	case wire.ErrNone:
		return http.StatusOK
	case wire.ErrUnknownTopicOrPartition, wire.ErrGroupIDNotFound:
		return http.StatusNotFound
	case wire.ErrTopicAlreadyExists, wire.ErrOutOfOrderSequence, wire.ErrDuplicateSequence, wire.ErrInvalidProducerEpoch,
		wire.ErrIllegalGeneration, wire.ErrUnknownMemberID, wire.ErrRebalanceInProgress, wire.ErrNonEmptyGroup, wire.ErrFencedInstanceID:
		return http.StatusConflict
	case wire.ErrMessageTooLarge:
		return http.StatusRequestEntityTooLarge
	case wire.ErrOffsetOutOfRange:
		return http.StatusRequestedRangeNotSatisfiable
	case wire.ErrThrottled:
		return http.StatusTooManyRequests
	case wire.ErrNotEnoughReplicas, wire.ErrNotEnoughReplicasAfter, wire.ErrShuttingDown, wire.ErrStorage,
		wire.ErrRequestTimedOut, wire.ErrNotLeaderOrWrongShard,
		wire.ErrCoordinatorLoadInProgress, wire.ErrCoordinatorNotAvailable, wire.ErrNotCoordinator:
		return http.StatusServiceUnavailable
	case wire.ErrUnknown:
		return http.StatusInternalServerError
	}
	return http.StatusBadRequest
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// body bounds a request body by Config.BodyBytesMax.
func (s *Server) body(w http.ResponseWriter, r *http.Request) *http.Request {
	r.Body = http.MaxBytesReader(w, r.Body, s.cfg.BodyBytesMax)
	return r
}

func (s *Server) createTopic(w http.ResponseWriter, r *http.Request) {
	body, config, err := decodeCreateTopic(s.body(w, r).Body)
	if err != nil {
		writeError(w, err)
		return
	}
	if rf := body.ReplicationFactor; rf != nil && *rf != 1 && *rf != -1 {
		writeError(w, &apiError{code: wire.ErrInvalidReplication, msg: fmt.Sprintf("replication factor %d: this broker serves replication factor 1 (or -1 for the default)", *rf)})
		return
	}
	if err := s.core.CreateTopic(body.Name, body.Partitions, config); err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, map[string]any{"topic": body.Name, "partitions": body.Partitions})
}

// producer is an idempotent produce's identity and first sequence (X-Producer-Id names the
// producer; X-Sequence is the sequence of the request's first record on its partition).
type producer struct {
	id       engine.ProducerIdentity
	sequence int32
	set      bool
}

func (s *Server) producerOf(r *http.Request) (producer, error) {
	name := r.Header.Get(headerProducerID)
	seq := r.Header.Get(headerSequence)
	if name == "" && seq == "" {
		return producer{}, nil
	}
	if name == "" || seq == "" {
		return producer{}, invalid("%s and %s go together", headerProducerID, headerSequence)
	}
	n, err := strconv.ParseInt(seq, 10, 32)
	if err != nil || n < 0 {
		return producer{}, invalid("%s %q: want a sequence number 0..2147483647", headerSequence, seq)
	}
	s.producersMu.Lock() // two first requests of one name must not both initialise it
	id, err := s.core.ProducerIdentity(name)
	s.producersMu.Unlock()
	if err != nil {
		return producer{}, err
	}
	return producer{id: id, sequence: int32(n), set: true}, nil
}

func parseAcks(v string) (int16, error) {
	switch v {
	case "", "all", "-1":
		return shard.AcksAll, nil
	case "1":
		return shard.AcksLeader, nil
	case "0":
		return shard.AcksNone, nil
	}
	return 0, &apiError{code: wire.ErrInvalidRequiredAcks, msg: fmt.Sprintf("acks %q: want all, 1 or 0", v)}
}

// recordResult is one produced record's place.
type recordResult struct {
	Partition int32      `json:"partition"`
	Offset    int64      `json:"offset"`
	Error     *errorJSON `json:"error,omitempty"`
}

func (s *Server) produce(w http.ResponseWriter, r *http.Request) {
	t := s.core.Topic(r.PathValue("topic"))
	if t == nil {
		writeError(w, fmt.Errorf("%w: topic %q", shard.ErrUnknownTopicOrPartition, r.PathValue("topic")))
		return
	}
	acks, err := parseAcks(r.URL.Query().Get("acks"))
	if err != nil {
		writeError(w, err)
		return
	}
	req, err := decodeProduce(s.body(w, r).Body)
	if err != nil {
		writeError(w, err)
		return
	}
	prod, err := s.producerOf(r)
	if err != nil {
		writeError(w, err)
		return
	}
	parts, err := s.assignPartitions(r, t, req.records, prod.set)
	if err != nil {
		writeError(w, err)
		return
	}
	results := s.produceGroups(t.Name, req.records, parts, acks, prod)
	status := http.StatusAccepted
	for _, res := range results {
		if res.Error != nil {
			status = httpStatus(wire.ErrorCode(res.Error.Code))
			break
		}
	}
	if !req.batch {
		if results[0].Error != nil {
			writeJSON(w, status, errorBody{Error: *results[0].Error})
			return
		}
		writeJSON(w, status, results[0])
		return
	}
	writeJSON(w, status, map[string]any{"records": results})
}

// assignPartitions picks each record's partition: ?partition=, else the record's own,
// else murmur2 of its key (as the bundled client and Kafka's do), else one partition for
// every keyless record of the request, round robin across requests. An idempotent
// request must land on one partition: its X-Sequence numbers that partition's records.
func (s *Server) assignPartitions(r *http.Request, t *shard.Topic, records []recordJSON, idempotent bool) ([]int32, error) {
	count := int32(len(t.Partitions))
	forced := int32(-1)
	if v := r.URL.Query().Get("partition"); v != "" {
		n, err := strconv.ParseInt(v, 10, 32)
		if err != nil || n < 0 {
			return nil, invalid("partition %q: want a partition number", v)
		}
		forced = int32(n)
	}
	keyless := int32(s.roundRobin.Add(1) % uint32(count))
	out := make([]int32, len(records))
	for i, rec := range records {
		switch {
		case forced >= 0:
			out[i] = forced
		case rec.Partition != nil:
			out[i] = *rec.Partition
		case rec.Key != nil:
			out[i] = client.KeyPartition([]byte(*rec.Key), int(count))
		default:
			out[i] = keyless
		}
		if out[i] >= count {
			return nil, fmt.Errorf("%w: %s/%d (the topic has %d partitions)", shard.ErrUnknownTopicOrPartition, t.Name, out[i], count)
		}
		if idempotent && out[i] != out[0] {
			return nil, invalid("an idempotent produce (%s) goes to one partition; records %d and %d map to %d and %d", headerProducerID, 0, i, out[0], out[i])
		}
	}
	return out, nil
}

// produceGroups builds one record batch per partition (records in request order) and
// produces them all at once; it returns each record's result.
func (s *Server) produceGroups(topic string, records []recordJSON, parts []int32, acks int16, prod producer) []recordResult {
	groups := map[int32][]int{} // partition -> record indexes
	var order []int32
	for i, p := range parts {
		if groups[p] == nil {
			order = append(order, p)
		}
		groups[p] = append(groups[p], i)
	}
	results := make([]recordResult, len(records))
	var wg sync.WaitGroup
	now := time.Now().UnixMilli()
	for _, p := range order {
		idx := groups[p]
		raw, err := buildBatch(records, idx, now, prod)
		if err != nil {
			fillResults(results, idx, p, -1, err)
			continue
		}
		wg.Add(1)
		s.core.Produce(shard.TopicPartition{Topic: topic, Partition: p}, [][]byte{raw}, acks, func(res shard.ProduceResult) {
			fillResults(results, idx, p, res.BaseOffset, res.Err)
			wg.Done()
		})
	}
	wg.Wait()
	return results
}

func fillResults(results []recordResult, idx []int, partition int32, base int64, err error) {
	for k, i := range idx {
		results[i] = recordResult{Partition: partition, Offset: -1}
		if err != nil {
			code := netio.CodeFor(err)
			results[i].Error = &errorJSON{Code: int16(code), Name: code.Name(), Message: err.Error()}
			continue
		}
		if base >= 0 {
			results[i].Offset = base + int64(k)
		}
	}
}

// buildBatch encodes the records idx as one Kafka v2 record batch.
func buildBatch(records []recordJSON, idx []int, now int64, prod producer) ([]byte, error) {
	opts := batch.BuilderOptions{}
	if prod.set {
		opts = batch.BuilderOptions{ProducerID: prod.id.ID, ProducerEpoch: prod.id.Epoch, BaseSequence: prod.sequence, Idempotent: true}
	}
	b := batch.NewBuilder(opts)
	for _, i := range idx {
		rec := &records[i]
		ts := now
		if rec.Timestamp != nil {
			ts = *rec.Timestamp
		}
		var headers []batch.RecordHeader
		for _, k := range sortedHeaderKeys(rec.Headers) {
			headers = append(headers, batch.RecordHeader{Key: k, Value: []byte(rec.Headers[k])})
		}
		b.Append(ts, nullable(rec.Key), nullable(rec.Value), headers)
	}
	return b.Build(nil)
}

func nullable(s *string) []byte {
	if s == nil {
		return nil
	}
	return []byte(*s)
}

// fetchedRecord is one record of a fetch answer.
type fetchedRecord struct {
	Partition int32             `json:"partition"`
	Offset    int64             `json:"offset"`
	Timestamp int64             `json:"timestamp"`
	Key       *string           `json:"key"`
	Value     *string           `json:"value"`
	Headers   map[string]string `json:"headers,omitempty"`
}

type fetchAnswer struct {
	Records        []fetchedRecord `json:"records"`
	NextOffset     int64           `json:"next_offset"`
	HighWatermark  int64           `json:"high_watermark"`
	LogStartOffset int64           `json:"log_start_offset"`
}

// fetchQuery is a decoded fetch query string.
type fetchQuery struct {
	partition int32
	offset    int64 // shard.TimestampEarliest or TimestampLatest for the named positions
	max       int
	wait      time.Duration
}

func parseFetchQuery(r *http.Request) (fetchQuery, error) {
	q := r.URL.Query()
	fq := fetchQuery{offset: shard.TimestampEarliest, max: fetchRecordsDefault}
	if v := q.Get("partition"); v != "" {
		n, err := strconv.ParseInt(v, 10, 32)
		if err != nil || n < 0 {
			return fq, invalid("partition %q: want a partition number", v)
		}
		fq.partition = int32(n)
	}
	switch v := q.Get("offset"); v {
	case "", "earliest":
	case "latest":
		fq.offset = shard.TimestampLatest
	default:
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return fq, invalid("offset %q: want earliest, latest or an offset", v)
		}
		fq.offset = n
	}
	if v := q.Get("max"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > FetchRecordsMax {
			return fq, invalid("max %q: want 1..%d records", v, FetchRecordsMax)
		}
		fq.max = n
	}
	if v := q.Get("wait_ms"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 || n > FetchWaitMax.Milliseconds() {
			return fq, invalid("wait_ms %q: want 0..%d", v, FetchWaitMax.Milliseconds())
		}
		fq.wait = time.Duration(n) * time.Millisecond
	}
	return fq, nil
}

func (s *Server) fetch(w http.ResponseWriter, r *http.Request) {
	fq, err := parseFetchQuery(r)
	if err != nil {
		writeError(w, err)
		return
	}
	tp := shard.TopicPartition{Topic: r.PathValue("topic"), Partition: fq.partition}
	if fq.offset < 0 {
		if fq.offset, err = s.listOffset(tp, fq.offset); err != nil {
			writeError(w, err)
			return
		}
	}
	answer, err := s.fetchRecords(tp, fq)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, answer)
}

func (s *Server) listOffset(tp shard.TopicPartition, which int64) (int64, error) {
	type result struct {
		off int64
		err error
	}
	ch := make(chan result, 1)
	s.core.ListOffset(tp, which, func(off int64, err error) { ch <- result{off, err} })
	res := <-ch
	return res.off, res.err
}

// fetchRecords long-polls one partition from fq.offset (up to fq.wait for a first record)
// and decodes at most fq.max records.
func (s *Server) fetchRecords(tp shard.TopicPartition, fq fetchQuery) (fetchAnswer, error) {
	ch := make(chan []shard.FetchResult, 1)
	maxBytes := int32(min(s.cfg.FetchBytesMax, 1<<30))
	s.core.Fetch(shard.FetchRequest{
		Partitions: []shard.FetchPartition{{TopicPartition: tp, Offset: fq.offset, MaxBytes: maxBytes}},
		MinBytes:   1, MaxWait: fq.wait, ResponseBytesMax: s.cfg.FetchBytesMax,
	}, func(r []shard.FetchResult) { ch <- r })
	res := (<-ch)[0]
	defer res.Release()
	if res.Err != nil {
		return fetchAnswer{}, res.Err
	}
	raw, err := res.AppendTo(make([]byte, 0, res.Records.Size))
	if err != nil {
		return fetchAnswer{}, fmt.Errorf("%w: %w", engine.ErrStorageWrite, err)
	}
	answer := fetchAnswer{Records: []fetchedRecord{}, NextOffset: fq.offset, HighWatermark: res.HighWatermark, LogStartOffset: res.LogStartOffset}
	err = decodeRecords(raw, fq, func(rec fetchedRecord) {
		answer.Records = append(answer.Records, rec)
		answer.NextOffset = rec.Offset + 1
	})
	return answer, err
}

// errEnough stops decoding once max records are collected.
var errEnough = errors.New("enough records")

// decodeRecords walks the batches in raw and calls add for each record at or after
// fq.offset, at most fq.max times.
func decodeRecords(raw []byte, fq fetchQuery, add func(fetchedRecord)) error {
	count := 0
	for len(raw) > 0 {
		h, err := batch.ParseHeader(raw)
		if err != nil || h.Size() > len(raw) {
			return fmt.Errorf("%w: stored batch: %v", engine.ErrCorruptBatch, err)
		}
		err = batch.Decode(raw[:h.Size()], func(offset, ts int64, rec *batch.Record) error {
			if offset < fq.offset || h.Control() {
				return nil
			}
			if count == fq.max {
				return errEnough
			}
			count++
			out := fetchedRecord{Partition: fq.partition, Offset: offset, Timestamp: ts, Key: text(rec.Key), Value: text(rec.Value)}
			if len(rec.Headers) > 0 {
				out.Headers = make(map[string]string, len(rec.Headers))
				for _, hd := range rec.Headers {
					out.Headers[hd.Key] = string(hd.Value)
				}
			}
			add(out)
			return nil
		})
		if errors.Is(err, errEnough) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%w: %w", engine.ErrCorruptBatch, err)
		}
		raw = raw[h.Size():]
	}
	return nil
}

func text(b []byte) *string {
	if b == nil {
		return nil
	}
	s := strings.Clone(string(b))
	return &s
}
