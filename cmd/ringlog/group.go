package main

// `ringlog group`: list, describe (with lag and the retention-overtake estimate), reset and
// delete consumer groups through the group admin calls of netio/client.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/ringlog/ringlog/engine"
	"github.com/ringlog/ringlog/engine/group"
	"github.com/ringlog/ringlog/netio/client"
	"github.com/ringlog/ringlog/netio/wire"
)

func init() {
	register("group", "list, describe, reset and delete consumer groups", runGroup)
}

var groupCommands = map[string]subcommand{
	"list":     {"group list", groupList},
	"describe": {"group describe GROUP", groupDescribe},
	"reset":    {"group reset GROUP --topic TOPIC --to earliest|latest|OFFSET|@UNIX_MS  (group must have no members)", groupReset},
	"delete":   {"group delete GROUP  (group must have no members)", groupDelete},
}

func runGroup(args []string) error { return runSubcommands("group", groupCommands, args) }

func groupList(usage string, args []string, stdout io.Writer) error {
	fs := newFlagSet("group list", usage)
	broker := brokerFlag(fs)
	positional, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs(positional); err != nil {
		return err
	}
	return withClient(*broker, func(ctx context.Context, c *client.Client) error {
		groups, err := c.ListGroups(ctx)
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "GROUP\tSTATE\tPROTOCOL-TYPE")
		for _, g := range groups {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", g.Group, g.State, dash(g.ProtocolType))
		}
		return tw.Flush()
	})
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func groupDelete(usage string, args []string, stdout io.Writer) error {
	return deleteNamed("group", "GROUP", usage, args, stdout, func(c *client.Client, ctx context.Context, groupID string) error {
		err := c.DeleteGroup(ctx, groupID)
		if errors.Is(err, wire.ErrNonEmptyGroup) {
			// The broker's answer names only the code; say who is in the way and what to do.
			if e := requireEmptyGroup(ctx, c, groupID); e != nil {
				return e
			}
		}
		return err
	})
}

// requireEmptyGroup refuses a group with members: the broker accepts offset commits from
// outside a group and deletes a group only while it is empty.
func requireEmptyGroup(ctx context.Context, c *client.Client, groupID string) error {
	d, err := c.DescribeGroup(ctx, groupID)
	if err != nil {
		return err
	}
	if n := len(d.Members); n > 0 {
		return fmt.Errorf("group %s has %s (state %s): %w; stop its consumers first", groupID, plural(n, "member"), d.State, wire.ErrNonEmptyGroup)
	}
	return nil
}

func groupReset(usage string, args []string, stdout io.Writer) error {
	fs := newFlagSet("group reset", usage)
	broker := brokerFlag(fs)
	topic := fs.String("topic", "", "topic whose partitions are reset (required)")
	to := fs.String("to", "", "earliest, latest, an OFFSET (one outside the partition's log start..log end becomes the nearer end), or @UNIX_MS (the first record at or after that time; latest when none)")
	positional, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs(positional, "GROUP"); err != nil {
		return err
	}
	if *topic == "" || *to == "" {
		return errors.New("--topic and --to are required")
	}
	target, err := parseFrom(*to)
	if err != nil {
		return fmt.Errorf("--to %q: want earliest, latest, an OFFSET or @UNIX_MS", *to)
	}
	groupID := positional[0]
	return withClient(*broker, func(ctx context.Context, c *client.Client) error {
		if err := requireEmptyGroup(ctx, c, groupID); err != nil {
			return err
		}
		partitions, err := c.Partitions(ctx, *topic)
		if err != nil {
			return err
		}
		offsets := make([]client.CommittedOffset, 0, partitions)
		notes := make([]string, 0, partitions)
		for p := range int32(partitions) {
			off, note, err := resolveOffset(ctx, c, *topic, p, target)
			if err != nil {
				return err
			}
			offsets = append(offsets, client.CommittedOffset{TopicPartition: client.TopicPartition{Topic: *topic, Partition: p}, Offset: off})
			notes = append(notes, note)
		}
		// The broker refuses the commit too when a member joined meanwhile.
		if err := c.CommitOffsets(ctx, groupID, offsets); err != nil {
			return err
		}
		for i, o := range offsets {
			fmt.Fprintf(stdout, "group %s %s/%d reset to %d%s\n", groupID, o.Topic, o.Partition, o.Offset, notes[i])
		}
		return nil
	})
}

// resolveOffset turns a --to value into an offset of one partition. An OFFSET outside the
// partition's [log start, log end] becomes the nearer end, as Kafka's consumer-groups tool
// does, and note says so: committed past the end, the group's next consumer would be
// refused OFFSET_OUT_OF_RANGE and start over at its reset policy (`consume --group`:
// earliest), reading the whole partition again.
func resolveOffset(ctx context.Context, c *client.Client, topic string, partition int32, to client.Offset) (off int64, note string, err error) {
	var ts int64
	switch s := to.String(); {
	case s == "earliest":
		ts = wire.TimestampEarliest
	case s == "latest":
		ts = wire.TimestampLatest
	case strings.HasPrefix(s, "@"):
		ts, _ = strconv.ParseInt(s[1:], 10, 64)
	default:
		want, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, "", err
		}
		start, err := c.ListOffset(ctx, topic, partition, wire.TimestampEarliest)
		if err != nil {
			return 0, "", err
		}
		end, err := c.ListOffset(ctx, topic, partition, wire.TimestampLatest)
		if err != nil {
			return 0, "", err
		}
		switch {
		case want > end:
			return end, fmt.Sprintf(" (asked %d: past the log end)", want), nil
		case want < start:
			return start, fmt.Sprintf(" (asked %d: below the log start)", want), nil
		}
		return want, "", nil
	}
	off, err = c.ListOffset(ctx, topic, partition, ts)
	if err == nil && off < 0 { // no record at or after the time: the end
		off, err = c.ListOffset(ctx, topic, partition, wire.TimestampLatest)
	}
	return off, "", err
}

func groupDescribe(usage string, args []string, stdout io.Writer) error {
	fs := newFlagSet("group describe", usage)
	broker := brokerFlag(fs)
	positional, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs(positional, "GROUP"); err != nil {
		return err
	}
	groupID := positional[0]
	return withClient(*broker, func(ctx context.Context, c *client.Client) error {
		d, err := c.DescribeGroup(ctx, groupID)
		if err != nil {
			return err
		}
		committed, err := c.FetchCommitted(ctx, groupID)
		if err != nil {
			return err
		}
		if d.State == group.Dead.String() && len(committed) == 0 {
			return fmt.Errorf("group %s: %w", groupID, wire.ErrGroupIDNotFound)
		}
		fmt.Fprintf(stdout, "group %s  state %s  generation %d  protocol %s  members %d\n", groupID, d.State, d.Generation, dash(d.Protocol), len(d.Members))
		topics := map[string]bool{}
		for _, m := range d.Members {
			tps, _ := client.DecodeMemberAssignment(m.Assignment)
			fmt.Fprintf(stdout, "member %s  instance %s  host %s  partitions %s\n", m.MemberID, dash(m.InstanceID), m.ClientHost, formatTPs(tps))
			for _, tp := range tps {
				topics[tp.Topic] = true
			}
		}
		rows, err := lagRows(ctx, c, topics, committed, time.Now())
		if err != nil {
			return err
		}
		return printLag(stdout, rows)
	})
}

func formatTPs(tps []client.TopicPartition) string {
	if len(tps) == 0 {
		return "-"
	}
	parts := make([]string, len(tps))
	for i, tp := range tps {
		parts[i] = fmt.Sprintf("%s/%d", tp.Topic, tp.Partition)
	}
	return strings.Join(parts, ",")
}

// lagRow is one partition of `group describe`.
type lagRow struct {
	tp        client.TopicPartition
	committed int64
	logEnd    int64
	lag       group.Lag
	overtake  group.Overtake
	known     bool // the overtake estimate could be made
}

// lagRows computes, for every partition of the topics the group is assigned (topics) or
// has committed to, as Kafka's tools list them: lag in records and in time (record
// timestamps at the committed offset and at the tail) and the retention-overtake estimate.
// A partition without a committed offset lags by everything it retains (log end - log
// start). The produce rate for the size bound is the partition's average over what it
// retains: its size divided by the time between its oldest and newest record.
func lagRows(ctx context.Context, c *client.Client, topics map[string]bool, committed []client.CommittedOffset, now time.Time) ([]lagRow, error) {
	offsets := map[client.TopicPartition]int64{}
	for _, o := range committed {
		topics[o.Topic] = true
		offsets[o.TopicPartition] = o.Offset
	}
	names := make([]string, 0, len(topics))
	for name := range topics {
		names = append(names, name)
	}
	sort.Strings(names)
	var rows []lagRow
	for _, name := range names {
		described, err := c.DescribeTopics(ctx, name)
		if err != nil || len(described) != 1 { // deleted since: its commits without log offsets
			for _, o := range committed {
				if o.Topic == name {
					rows = append(rows, lagRow{tp: o.TopicPartition, committed: o.Offset, logEnd: -1, lag: group.Lag{Records: -1}})
				}
			}
			continue
		}
		retention := topicRetention(ctx, c, name)
		for _, p := range described[0].Partitions {
			tp := client.TopicPartition{Topic: name, Partition: p.Partition}
			offset, ok := offsets[tp]
			if !ok {
				offset = -1
			}
			rows = append(rows, partitionLag(ctx, c, tp, offset, p, retention, now))
		}
	}
	return rows, nil
}

// partitionLag is one row of lagRows; offset -1 means nothing committed.
func partitionLag(ctx context.Context, c *client.Client, tp client.TopicPartition, offset int64, p wire.DescribePartition, retention [2]int64, now time.Time) lagRow {
	from := offset
	if offset < 0 { // lag from the log start, like Kafka's tools; no overtake estimate
		from = p.LogStartOffset
	}
	in := group.LagInput{Committed: from, LogStart: p.LogStartOffset, LogEnd: p.HighWatermark, CommittedTimestampMs: -1, NewestTimestampMs: -1}
	first := max(from, p.LogStartOffset)
	if first < p.HighWatermark {
		in.CommittedTimestampMs = recordTimestamp(ctx, c, tp, first)
		in.NewestTimestampMs = recordTimestamp(ctx, c, tp, p.HighWatermark-1)
	}
	row := lagRow{tp: tp, committed: offset, logEnd: p.HighWatermark, lag: group.ComputeLag(in)}
	if offset < 0 || in.CommittedTimestampMs < 0 {
		return row
	}
	oldest := recordTimestamp(ctx, c, tp, p.LogStartOffset)
	rate := 0.0
	if span := in.NewestTimestampMs - oldest; oldest >= 0 && span > 0 {
		rate = float64(p.SizeBytes) / (float64(span) / 1000)
	}
	fromCommitted := int64(0)
	if records := p.HighWatermark - p.LogStartOffset; records > 0 {
		fromCommitted = int64(float64(p.SizeBytes) * float64(p.HighWatermark-first) / float64(records))
	}
	row.overtake = group.RetentionOvertake(group.RetentionInput{Now: now, CommittedTimestampMs: in.CommittedTimestampMs,
		RetentionMs: retention[0], RetentionBytes: retention[1], BytesFromCommitted: fromCommitted, ProduceBytesPerSecond: rate})
	row.known = true
	return row
}

// topicRetention returns retention.ms and retention.bytes (-1: unlimited or unknown).
func topicRetention(ctx context.Context, c *client.Client, topic string) [2]int64 {
	out := [2]int64{-1, -1}
	configs, err := c.DescribeConfigs(ctx, topic, engine.ConfigRetentionMs, engine.ConfigRetentionBytes)
	if err != nil {
		return out
	}
	for _, cfg := range configs {
		v, err := strconv.ParseInt(cfg.Value, 10, 64)
		if err != nil {
			continue
		}
		switch cfg.Key {
		case engine.ConfigRetentionMs:
			out[0] = v
		case engine.ConfigRetentionBytes:
			out[1] = v
		}
	}
	return out
}

// recordTimestamp reads the timestamp (ms) of the first record at or after offset; -1
// when none could be read.
func recordTimestamp(ctx context.Context, c *client.Client, tp client.TopicPartition, offset int64) int64 {
	co := c.NewConsumer(client.ConsumerConfig{MaxWait: 100 * time.Millisecond, PartitionMaxBytes: 64 << 10, MaxBytes: 64 << 10})
	co.Assign(tp.Topic, tp.Partition, client.AtOffset(offset))
	recs, err := co.Poll(ctx)
	if err != nil || len(recs) == 0 {
		return -1
	}
	return recs[0].Timestamp.UnixMilli()
}

func printLag(w io.Writer, rows []lagRow) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "TOPIC\tPARTITION\tCOMMITTED\tLOG-END\tLAG\tLAG-SECONDS\tRETENTION-HOURS\t")
	for _, r := range rows {
		lag, lagTime, hours := "-", "-", "-"
		if r.lag.Records >= 0 {
			lag = strconv.FormatInt(r.lag.Records, 10)
			if r.lag.BelowLogStart {
				lag += " (below log start)"
			}
		}
		if r.lag.TimeKnown {
			lagTime = strconv.FormatFloat(r.lag.Time.Seconds(), 'f', 1, 64)
		}
		switch {
		case r.known && r.overtake.Never:
			hours = "never"
		case r.known:
			hours = strconv.FormatFloat(math.Round(r.overtake.Hours*10)/10, 'f', 1, 64)
		}
		committed := "-"
		if r.committed >= 0 {
			committed = strconv.FormatInt(r.committed, 10)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%s\t%s\t%s\t\n", r.tp.Topic, r.tp.Partition, committed, r.logEnd, lag, lagTime, hours)
	}
	return tw.Flush()
}
