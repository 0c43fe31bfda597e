package admin

import (
	"context"
	"math"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ringlog/ringlog/engine"
	"github.com/ringlog/ringlog/engine/group"
	"github.com/ringlog/ringlog/engine/shard"
)

// Consumer group lag metrics: for every committed offset of every group this broker
// coordinates, how far the group is behind the high watermark in records and in time, and
// how long until retention deletes the committed offset if the group stops consuming.

// Groups is the admin endpoint's seam to consumer groups: the committed offsets to export
// lag for. Safe for concurrent use; called at scrape time and by the HTTP group API.
type Groups interface {
	// CommittedOffsets lists the committed offsets (Offset >= 0) of every group this broker
	// coordinates, at most limit of them.
	CommittedOffsets(ctx context.Context, limit int) ([]GroupOffset, error)
}

// GroupOffset is one group's committed offset on one partition.
type GroupOffset struct {
	Group     string
	Topic     string
	Partition int32
	Offset    int64
}

// groupLagSeriesMax bounds the group/partition pairs one scrape exports (each costs one
// batch header read on its shard and four series).
const groupLagSeriesMax = 10_000

var (
	groupLabels        = []string{"group", "topic", "partition"}
	descGroupCommitted = prometheus.NewDesc("ringlog_group_committed_offset", "The group's committed offset: the next record it will read.", groupLabels, nil)
	descGroupLag       = prometheus.NewDesc("ringlog_group_lag_records", "Records between the group's committed offset and the high watermark (from the log start when retention deleted part of the backlog).", groupLabels, nil)
	descGroupLagTime   = prometheus.NewDesc("ringlog_group_lag_seconds", "How far behind the tail the group is in time: the newest record's timestamp minus that of the first unconsumed record's batch.", groupLabels, nil)
	descGroupOvertake  = prometheus.NewDesc("ringlog_group_retention_overtake_seconds", "Estimated seconds until retention deletes the group's committed offset if it consumes nothing more (+Inf: never; 0: already deleted or due).", groupLabels, nil)
	descGroupScrapeErr = prometheus.NewDesc("ringlog_group_scrape_error", "1 when the committed offsets could not be read for this scrape.", nil, nil)
	groupDescs         = []*prometheus.Desc{descGroupCommitted, descGroupLag, descGroupLagTime, descGroupOvertake, descGroupScrapeErr}
)

// lagRow is one group/partition's lag, computed for a scrape or the HTTP lag endpoint.
type lagRow struct {
	GroupOffset
	lag      group.Lag
	overtake group.Overtake
	known    bool // overtake is valid
}

// groupLags computes the lag of every offset against the partitions in states.
func groupLags(core *shard.Broker, offsets []GroupOffset, states map[shard.TopicPartition]shard.PartitionState, now time.Time) []lagRow {
	// Timestamps to read: per partition its oldest and newest batch, per offset its batch.
	type partTimes struct{ oldest, newest int }
	var queries []shard.BatchTimesQuery
	parts := map[shard.TopicPartition]partTimes{}
	first := make([]int, len(offsets))
	for i, o := range offsets {
		first[i] = -1
		tp := shard.TopicPartition{Topic: o.Topic, Partition: o.Partition}
		st, ok := states[tp]
		if !ok {
			continue
		}
		if _, seen := parts[tp]; !seen && st.HighWatermark > st.LogStartOffset {
			parts[tp] = partTimes{oldest: len(queries), newest: len(queries) + 1}
			queries = append(queries, shard.BatchTimesQuery{TopicPartition: tp, Offset: st.LogStartOffset},
				shard.BatchTimesQuery{TopicPartition: tp, Offset: st.HighWatermark - 1})
		}
		if from := max(o.Offset, st.LogStartOffset); from < st.HighWatermark {
			first[i] = len(queries)
			queries = append(queries, shard.BatchTimesQuery{TopicPartition: tp, Offset: from})
		}
	}
	_ = core.BatchTimes(queries) // unknown times stay -1
	rows := make([]lagRow, 0, len(offsets))
	for i, o := range offsets {
		tp := shard.TopicPartition{Topic: o.Topic, Partition: o.Partition}
		st, ok := states[tp]
		if !ok {
			continue
		}
		in := group.LagInput{Committed: o.Offset, LogStart: st.LogStartOffset, LogEnd: st.HighWatermark, CommittedTimestampMs: -1, NewestTimestampMs: -1}
		pt, hasTimes := parts[tp]
		if hasTimes {
			in.NewestTimestampMs = queries[pt.newest].MaxTimestamp
		}
		if first[i] >= 0 {
			in.CommittedTimestampMs = queries[first[i]].BaseTimestamp
		}
		row := lagRow{GroupOffset: o, lag: group.ComputeLag(in)}
		if in.CommittedTimestampMs >= 0 && hasTimes {
			row.overtake = group.RetentionOvertake(retentionInput(core, st, o, in, queries[pt.oldest].BaseTimestamp, now))
			row.known = true
		}
		rows = append(rows, row)
	}
	return rows
}

// retentionInput estimates what RetentionOvertake needs: the topic's retention, the bytes
// after the committed offset (the log's bytes in proportion to its records), and the
// produce rate (the log's bytes over the time its records span).
func retentionInput(core *shard.Broker, st shard.PartitionState, o GroupOffset, in group.LagInput, oldestMs int64, now time.Time) group.RetentionInput {
	ri := group.RetentionInput{Now: now, CommittedTimestampMs: in.CommittedTimestampMs, RetentionMs: -1, RetentionBytes: -1}
	if t := core.Topic(o.Topic); t != nil {
		config := core.EffectiveConfig(t)
		ri.RetentionMs = parseInt(config[engine.ConfigRetentionMs], -1)
		ri.RetentionBytes = parseInt(config[engine.ConfigRetentionBytes], -1)
	}
	if records := st.HighWatermark - st.LogStartOffset; records > 0 {
		from := max(o.Offset, st.LogStartOffset)
		ri.BytesFromCommitted = int64(float64(st.SizeBytes) * float64(st.HighWatermark-from) / float64(records))
	}
	if span := in.NewestTimestampMs - oldestMs; oldestMs >= 0 && span > 0 {
		ri.ProduceBytesPerSecond = float64(st.SizeBytes) / (float64(span) / 1000)
	}
	return ri
}

func parseInt(s string, fallback int64) int64 {
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return fallback
	}
	return v
}

// collectGroups sends the lag series of every committed offset.
func (c *collector) collectGroups(ch chan<- prometheus.Metric, stats []shard.ShardStats) {
	if c.groups == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), scrapeWaitMax)
	defer cancel()
	offsets, err := c.groups.CommittedOffsets(ctx, groupLagSeriesMax)
	if err != nil {
		ch <- gauge(descGroupScrapeErr, 1)
		return
	}
	ch <- gauge(descGroupScrapeErr, 0)
	states := map[shard.TopicPartition]shard.PartitionState{}
	for _, s := range stats {
		for _, p := range s.Partitions {
			states[shard.TopicPartition{Topic: p.Topic, Partition: p.Partition}] = p
		}
	}
	for _, r := range groupLags(c.core, offsets, states, time.Now()) {
		labels := []string{r.Group, r.Topic, strconv.Itoa(int(r.Partition))}
		ch <- gauge(descGroupCommitted, float64(r.Offset), labels...)
		if r.lag.Records >= 0 {
			ch <- gauge(descGroupLag, float64(r.lag.Records), labels...)
		}
		if r.lag.TimeKnown {
			ch <- gauge(descGroupLagTime, r.lag.Time.Seconds(), labels...)
		}
		if r.known {
			ch <- gauge(descGroupOvertake, overtakeSeconds(r.overtake), labels...)
		}
	}
}

func overtakeSeconds(o group.Overtake) float64 {
	if o.Never {
		return math.Inf(1)
	}
	return o.Hours * 3600
}
