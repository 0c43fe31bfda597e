package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"

	"github.com/ringlog/ringlog/engine/group"
	"github.com/ringlog/ringlog/engine/shard"
	"github.com/ringlog/ringlog/netio"
	"github.com/ringlog/ringlog/netio/wire"
)

// The group half of the HTTP API: a group's records from its committed offsets, its
// offset commits, and its lag. An HTTP consumer is not a group member: it reads from the
// committed offsets and commits with generation -1, which the coordinator accepts only
// while the group has no members (an HTTP consumer and binary group members do not share a
// group).
//
//	GET  /v1/groups/{group}/records?topic=t&max=500&wait_ms=0&reset=earliest -> 200 {records, positions}
//	POST /v1/groups/{group}/offsets {topic, offsets: {partition: offset}}   -> 204
//	GET  /v1/groups/{group}/lag?topic=t                                     -> 200 {partition: lag}

// shardGroups is Groups over the broker's group coordinators.
type shardGroups struct{ g *shard.Groups }

// GroupsOf returns the Groups of a broker's coordinators (nil when it has none).
func GroupsOf(g *shard.Groups) Groups {
	if g == nil {
		return nil
	}
	return shardGroups{g}
}

// CommittedOffsets lists every group, then each group's committed offsets.
func (s shardGroups) CommittedOffsets(ctx context.Context, limit int) ([]GroupOffset, error) {
	resp, err := s.g.Handle(ctx, group.ListGroups{})
	if err != nil {
		return nil, err
	}
	list, ok := resp.(group.ListGroupsResponse)
	if !ok || list.Err != group.CodeNone {
		return nil, fmt.Errorf("list groups: %v", responseErr(resp))
	}
	var out []GroupOffset
	for _, g := range list.Groups {
		offsets, err := s.committed(ctx, g.Group, nil)
		if err != nil {
			return nil, err
		}
		for _, o := range offsets {
			if len(out) == limit {
				return out, nil
			}
			out = append(out, o)
		}
	}
	return out, nil
}

// committed fetches a group's committed offsets (of partitions, or all of them when nil).
func (s shardGroups) committed(ctx context.Context, groupID string, partitions []group.TopicPartition) ([]GroupOffset, error) {
	resp, err := s.g.Handle(ctx, group.OffsetFetch{Group: groupID, Partitions: partitions})
	if err != nil {
		return nil, err
	}
	fetched, ok := resp.(group.OffsetFetchResponse)
	if !ok || fetched.Err != group.CodeNone {
		return nil, responseErr(resp)
	}
	var out []GroupOffset
	for _, o := range fetched.Partitions {
		if o.Offset >= 0 {
			out = append(out, GroupOffset{Group: groupID, Topic: o.Topic, Partition: o.Partition, Offset: o.Offset})
		}
	}
	return out, nil
}

// responseErr is the error of a group response that failed.
func responseErr(resp group.Response) error {
	var code group.Code
	switch r := resp.(type) {
	case group.ListGroupsResponse:
		code = r.Err
	case group.OffsetFetchResponse:
		code = r.Err
	case group.OffsetCommitResponse:
		for _, p := range r.Partitions {
			if p.Err != group.CodeNone {
				code = p.Err
				break
			}
		}
	default:
		return fmt.Errorf("unexpected group response %T", resp)
	}
	if code == group.CodeNone {
		return nil
	}
	return &apiError{code: netio.GroupCode(code), msg: code.String()}
}

func (s *Server) groupRoutes(mux *http.ServeMux) {
	if s.core.Groups() == nil {
		return
	}
	s.handle(mux, "GET /v1/groups/{group}/records", "group_records", s.groupRecords)
	s.handle(mux, "POST /v1/groups/{group}/offsets", "group_offsets", s.commitOffsets)
	s.handle(mux, "GET /v1/groups/{group}/lag", "group_lag", s.groupLag)
}

// topicOf is the ?topic= of a group request, which must exist.
func (s *Server) topicOf(r *http.Request) (*shard.Topic, error) {
	name := r.URL.Query().Get("topic")
	if name == "" {
		return nil, invalid("topic: the query names none (?topic=T)")
	}
	t := s.core.Topic(name)
	if t == nil {
		return nil, fmt.Errorf("%w: topic %q", shard.ErrUnknownTopicOrPartition, name)
	}
	return t, nil
}

// positions are the offsets a group reads the partitions of t from: its committed offset,
// or where reset says (earliest or latest) for partitions it has none for, or whose
// committed offset retention deleted.
func (s *Server) positions(ctx context.Context, groupID string, t *shard.Topic, reset string) ([]int64, error) {
	tps := make([]group.TopicPartition, len(t.Partitions))
	for p := range tps {
		tps[p] = group.TopicPartition{Topic: t.Name, Partition: int32(p)}
	}
	committed, err := shardGroups{s.core.Groups()}.committed(ctx, groupID, tps)
	if err != nil {
		return nil, err
	}
	pos := make([]int64, len(t.Partitions))
	for p := range pos {
		pos[p] = -1
	}
	for _, o := range committed {
		if int(o.Partition) < len(pos) {
			pos[o.Partition] = o.Offset
		}
	}
	which := shard.TimestampEarliest
	if reset == "latest" {
		which = shard.TimestampLatest
	}
	for p := range pos {
		tp := shard.TopicPartition{Topic: t.Name, Partition: int32(p)}
		start, err := s.listOffset(tp, shard.TimestampEarliest)
		if err != nil {
			return nil, err
		}
		if pos[p] >= start {
			continue
		}
		if pos[p] >= 0 && reset == "none" {
			return nil, &apiError{code: wire.ErrOffsetOutOfRange, msg: fmt.Sprintf("%s/%d: committed offset %d is below the log start %d (reset=none)", t.Name, p, pos[p], start)}
		}
		if pos[p], err = s.listOffset(tp, which); err != nil {
			return nil, err
		}
	}
	return pos, nil
}

type groupRecordsAnswer struct {
	Records   []fetchedRecord  `json:"records"`
	Positions map[string]int64 `json:"positions"`
}

// groupRecords long-polls every partition of the topic from the group's positions and
// answers at most max records, partition by partition, with the position after each
// partition's last record. Nothing is committed: POST the positions to /offsets once the
// records are processed.
func (s *Server) groupRecords(w http.ResponseWriter, r *http.Request) {
	t, err := s.topicOf(r)
	if err != nil {
		writeError(w, err)
		return
	}
	fq, err := parseFetchQuery(r)
	if err != nil {
		writeError(w, err)
		return
	}
	reset := r.URL.Query().Get("reset")
	if reset != "" && reset != "earliest" && reset != "latest" && reset != "none" {
		writeError(w, invalid("reset %q: want earliest, latest or none", reset))
		return
	}
	pos, err := s.positions(r.Context(), r.PathValue("group"), t, reset)
	if err != nil {
		writeError(w, err)
		return
	}
	// Each partition gets an equal share of the byte budget: the shards read their
	// partitions at the same time, and one partition reserving the whole budget would
	// leave the others none (the first batch of each is returned whole anyway).
	req := shard.FetchRequest{MinBytes: 1, MaxWait: fq.wait, ResponseBytesMax: s.cfg.FetchBytesMax}
	share := int32(min(max(s.cfg.FetchBytesMax/int64(len(pos)), 1), 1<<30))
	for p, off := range pos {
		req.Partitions = append(req.Partitions, shard.FetchPartition{TopicPartition: shard.TopicPartition{Topic: t.Name, Partition: int32(p)},
			Offset: off, MaxBytes: share})
	}
	ch := make(chan []shard.FetchResult, 1)
	s.core.Fetch(req, func(r []shard.FetchResult) { ch <- r })
	results := <-ch
	defer func() {
		for i := range results {
			results[i].Release()
		}
	}()
	answer := groupRecordsAnswer{Records: []fetchedRecord{}, Positions: map[string]int64{}}
	for i := range results {
		res := &results[i]
		p := int(res.Partition)
		answer.Positions[strconv.Itoa(p)] = pos[p]
		if res.Err != nil {
			writeError(w, res.Err)
			return
		}
		left := fq.max - len(answer.Records)
		if left == 0 || res.Records.Size == 0 {
			continue
		}
		raw, err := res.AppendTo(make([]byte, 0, res.Records.Size))
		if err != nil {
			writeError(w, err)
			return
		}
		pq := fetchQuery{partition: int32(p), offset: pos[p], max: left}
		err = decodeRecords(raw, pq, func(rec fetchedRecord) {
			answer.Records = append(answer.Records, rec)
			answer.Positions[strconv.Itoa(p)] = rec.Offset + 1
		})
		if err != nil {
			writeError(w, err)
			return
		}
	}
	writeJSON(w, http.StatusOK, answer)
}

// commitOffsetsJSON is an offset commit body: {"topic", "offsets": {"partition": offset}}.
type commitOffsetsJSON struct {
	Topic   string           `json:"topic"`
	Offsets map[string]int64 `json:"offsets"`
}

// decodeCommitOffsets decodes a commit body into the coordinator's offsets, sorted by
// partition.
func decodeCommitOffsets(r io.Reader) (string, []group.CommitOffset, error) {
	var body commitOffsetsJSON
	if err := decodeStrict(r, &body); err != nil {
		return "", nil, err
	}
	if body.Topic == "" || len(body.Offsets) == 0 || len(body.Offsets) > engineParts {
		return "", nil, fmt.Errorf("%w: want a topic and 1..%d offsets", errBadBody, engineParts)
	}
	out := make([]group.CommitOffset, 0, len(body.Offsets))
	for k, off := range body.Offsets {
		p, err := strconv.ParseInt(k, 10, 32)
		if err != nil || p < 0 || strconv.Itoa(int(p)) != k {
			return "", nil, fmt.Errorf("%w: partition %q", errBadBody, k)
		}
		if off < 0 {
			return "", nil, fmt.Errorf("%w: partition %s: offset %d", errBadBody, k, off)
		}
		out = append(out, group.CommitOffset{Topic: body.Topic, Partition: int32(p), Offset: off, LeaderEpoch: -1})
	}
	slices.SortFunc(out, func(a, b group.CommitOffset) int { return int(a.Partition) - int(b.Partition) })
	return body.Topic, out, nil
}

// engineParts bounds the offsets of one commit (the partitions a topic may have).
const engineParts = 10_000

func (s *Server) commitOffsets(w http.ResponseWriter, r *http.Request) {
	topic, offsets, err := decodeCommitOffsets(s.body(w, r).Body)
	if err != nil {
		writeError(w, err)
		return
	}
	t := s.core.Topic(topic)
	if t == nil {
		writeError(w, fmt.Errorf("%w: topic %q", shard.ErrUnknownTopicOrPartition, topic))
		return
	}
	for _, o := range offsets {
		if int(o.Partition) >= len(t.Partitions) {
			writeError(w, fmt.Errorf("%w: %s/%d", shard.ErrUnknownTopicOrPartition, topic, o.Partition))
			return
		}
	}
	resp, err := s.core.Groups().Handle(r.Context(), group.OffsetCommit{Group: r.PathValue("group"), Generation: -1, Offsets: offsets})
	if err == nil {
		err = responseErr(resp)
	}
	if err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// groupLag answers {partition: lag in records} for every partition of the topic the group
// has committed an offset on (null for the others: no committed offset, no lag).
func (s *Server) groupLag(w http.ResponseWriter, r *http.Request) {
	t, err := s.topicOf(r)
	if err != nil {
		writeError(w, err)
		return
	}
	tps := make([]group.TopicPartition, len(t.Partitions))
	for p := range tps {
		tps[p] = group.TopicPartition{Topic: t.Name, Partition: int32(p)}
	}
	committed, err := shardGroups{s.core.Groups()}.committed(r.Context(), r.PathValue("group"), tps)
	if err != nil {
		writeError(w, err)
		return
	}
	_, states, err := s.core.DescribeTopic(t.Name)
	if err != nil {
		writeError(w, err)
		return
	}
	answer := map[string]*int64{}
	for _, st := range states {
		answer[strconv.Itoa(int(st.Partition))] = nil
	}
	for _, o := range committed {
		if int(o.Partition) >= len(states) {
			continue
		}
		st := states[o.Partition]
		lag := group.ComputeLag(group.LagInput{Committed: o.Offset, LogStart: st.LogStartOffset, LogEnd: st.HighWatermark,
			CommittedTimestampMs: -1, NewestTimestampMs: -1}).Records
		answer[strconv.Itoa(int(o.Partition))] = &lag
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_ = json.NewEncoder(w).Encode(answer)
}
