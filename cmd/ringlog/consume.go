package main

// `ringlog consume`: print a topic's records, one value per stdout line, through the
// consumer of netio/client: assigning partitions itself, or with --group as a member of a
// consumer group (committing what it printed after each batch).

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/ringlog/ringlog/engine/batch"
	"github.com/ringlog/ringlog/netio/client"
	"github.com/ringlog/ringlog/netio/wire"
)

func init() {
	register("consume", "print a topic's records to stdout, one per line", runConsume)
}

const (
	consumeUsage = "consume TOPIC [--partition P | --group G [--instance-id ID]] [--from earliest|latest|OFFSET|@UNIX_MS] [--max N] [--exit-at-end] [--print-key] [--print-offset] [--format FORMAT|json]"
	// consumeMaxWait is the long-poll wait per fetch: short enough that Ctrl-C and
	// --exit-at-end react quickly, long enough not to spin on an idle topic.
	consumeMaxWait = 500 * time.Millisecond
	// pollRoundsMax bounds the poll loop of one consume run (about 16 years of idle 500 ms
	// long-polls); a record limit or the end of the input ends it much sooner.
	pollRoundsMax = 1 << 30
)

// errRecordLimit stops consumeRecords' batch walk once --max records are printed.
var errRecordLimit = errors.New("--max records printed")

type consumeOptions struct {
	broker         string
	topic          string
	partition      int32 // -1 = every partition
	from           client.Offset
	max            int64 // 0 = unlimited
	exitAtEnd      bool
	printKey       bool
	printOffset    bool
	keySeparator   string
	format         []formatPart // --format FORMAT; nil: the value (and --print-*) per line
	json           bool         // --format json
	group          string       // --group: consume as a member of this consumer group
	instanceID     string       // --instance-id: static membership
	reset          string       // the group's auto.offset.reset (from --from)
	sessionTimeout time.Duration
}

// parseFrom parses --from: earliest, latest, an offset, or @UNIX_MS.
func parseFrom(s string) (client.Offset, error) {
	switch s {
	case "earliest", "beginning":
		return client.Earliest(), nil
	case "latest", "end":
		return client.Latest(), nil
	}
	if ms, ok := strings.CutPrefix(s, "@"); ok {
		n, err := strconv.ParseInt(ms, 10, 64)
		if err != nil || n < 0 {
			return client.Offset{}, fmt.Errorf("--from %q: want @ and milliseconds since the epoch", s)
		}
		return client.AtTime(time.UnixMilli(n)), nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return client.Offset{}, fmt.Errorf("--from %q: want earliest, latest, an offset or @UNIX_MS", s)
	}
	return client.AtOffset(n), nil
}

func parseConsumeFlags(args []string) (consumeOptions, error) {
	var o consumeOptions
	fs := newFlagSet("consume", consumeUsage)
	broker := brokerFlag(fs)
	partition := fs.Int("partition", -1, "read only this partition; -1 = all partitions")
	from := fs.String("from", "earliest", "start at earliest, latest, an OFFSET, or @UNIX_MS (first record at or after that time); with --group: where partitions without a committed offset start (earliest, latest, or none: fail instead)")
	fs.StringVar(&o.group, "group", "", "consume as a member of this consumer group: partitions are shared with its other members and what is printed is committed")
	fs.StringVar(&o.instanceID, "instance-id", "", "with --group: static member id (group.instance.id); a restart within the session timeout keeps the partitions")
	fs.DurationVar(&o.sessionTimeout, "session-timeout", 10*time.Second, "with --group: the member's session timeout")
	fs.Int64Var(&o.max, "max", 0, "stop after N records (0 = no limit)")
	fs.BoolVar(&o.exitAtEnd, "exit-at-end", false, "stop once every partition reached the high watermark seen at start")
	fs.BoolVar(&o.printKey, "print-key", false, "print KEY SEP VALUE (SEP from --key-separator)")
	fs.BoolVar(&o.printOffset, "print-offset", false, "prefix each line with PARTITION:OFFSET and a tab")
	fs.StringVar(&o.keySeparator, "key-separator", "\t", "separator printed between key and value with --print-key")
	format := fs.String("format", "", "print each record as FORMAT, with kcat's placeholders %t %p %o %k %s %K %S %T %h and escapes \\n \\t (add \\n yourself); or json: one object per line")
	positional, err := parseArgs(fs, args)
	if err != nil {
		return o, err
	}
	if err := wantArgs(positional, "TOPIC"); err != nil {
		return o, err
	}
	o.broker, o.topic = *broker, positional[0]
	if *partition < -1 || *partition >= partitionsMax {
		return o, fmt.Errorf("--partition %d: want a partition number", *partition)
	}
	o.partition = int32(*partition)
	if o.group != "" {
		if o.partition >= 0 {
			return o, errors.New("--partition and --group exclude each other (the group assigns partitions)")
		}
		switch *from {
		case "earliest", "latest", "none":
			o.reset = *from
		default:
			return o, fmt.Errorf("--from %q with --group: want earliest, latest or none (use `ringlog group reset` for offsets and times)", *from)
		}
	} else if o.from, err = parseFrom(*from); err != nil {
		return o, err
	}
	if o.max < 0 {
		return o, fmt.Errorf("--max %d: want >= 0", o.max)
	}
	if *format != "" {
		if o.printKey || o.printOffset {
			return o, errors.New("--format replaces --print-key and --print-offset (use %k and %o)")
		}
		if *format == formatJSON {
			o.json = true
		} else if o.format, err = compileFormat(*format); err != nil {
			return o, err
		}
	}
	return o, nil
}

func runConsume(args []string) error {
	o, err := parseConsumeFlags(args)
	if errors.Is(err, errHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	ctx, cancel := commandContext()
	defer cancel()
	c, err := dial(ctx, o.broker)
	if err != nil {
		return err
	}
	defer c.Close()
	out := bufio.NewWriterSize(os.Stdout, 64<<10)
	if o.group != "" {
		_, err = consumeGroup(ctx, c, o, out)
	} else {
		_, err = consumeRecords(ctx, c, o, out)
	}
	if flushErr := out.Flush(); err == nil && flushErr != nil {
		err = fmt.Errorf("write stdout: %w", flushErr)
	}
	if ctx.Err() != nil && errors.Is(err, context.Canceled) {
		return nil // Ctrl-C is how an unbounded consume ends
	}
	return err
}

// consumeRecords polls the assigned partitions and writes records to out until --max
// records, the end (--exit-at-end), or ctx ends. It returns the number of records written.
func consumeRecords(ctx context.Context, c *client.Client, o consumeOptions, out *bufio.Writer) (int64, error) {
	partitions, err := c.Partitions(ctx, o.topic)
	if err != nil {
		return 0, err
	}
	var assigned []int32
	if o.partition >= 0 {
		if int(o.partition) >= partitions {
			return 0, fmt.Errorf("partition %d of %s: %w (topic has %s)", o.partition, o.topic, wire.ErrUnknownTopicOrPartition, plural(partitions, "partition"))
		}
		assigned = []int32{o.partition}
	} else {
		for p := range int32(partitions) {
			assigned = append(assigned, p)
		}
	}
	co := c.NewConsumer(client.ConsumerConfig{MaxWait: consumeMaxWait})
	// end[p] is the high watermark seen at start: with --exit-at-end a partition is done
	// once its position reaches it, and records at or past it are not printed.
	end := map[int32]int64{}
	for _, p := range assigned {
		co.Assign(o.topic, p, o.from)
		if !o.exitAtEnd {
			continue
		}
		hw, err := c.ListOffset(ctx, o.topic, p, wire.TimestampLatest)
		if err != nil {
			return 0, err
		}
		end[p] = hw
		position, err := co.Position(ctx, o.topic, p)
		if err != nil {
			return 0, err
		}
		if position >= hw {
			co.Unassign(o.topic, p)
			delete(end, p)
		}
	}
	var enc *json.Encoder // --format json
	if o.json {
		enc = newJSONEncoder(out)
	}
	var written int64
	for range pollRoundsMax {
		if o.exitAtEnd && len(end) == 0 {
			return written, nil
		}
		// Batch by batch: each record is printed straight from the fetch response.
		err := co.PollBatches(ctx, func(b *client.FetchedBatch) error {
			hw, active := end[b.Partition]
			if o.exitAtEnd && !active {
				return nil
			}
			return b.Records(func(offset, ts int64, key, value []byte, headers []batch.RecordHeader) error {
				if o.exitAtEnd && offset >= hw {
					return nil
				}
				if len(headers) == 0 {
					headers = nil
				}
				r := client.ConsumedRecord{Topic: b.Topic, Partition: b.Partition, Offset: offset,
					Timestamp: time.UnixMilli(ts), Key: key, Value: value, Headers: headers}
				if err := emitRecord(out, enc, o, &r); err != nil {
					return err
				}
				written++
				if o.max > 0 && written >= o.max {
					return errRecordLimit
				}
				return nil
			})
		})
		if err == errRecordLimit {
			return written, nil
		}
		if err != nil {
			return written, err
		}
		if o.exitAtEnd {
			for p, hw := range end {
				position, err := co.Position(ctx, o.topic, p)
				if err != nil {
					return written, err
				}
				if position >= hw {
					co.Unassign(o.topic, p)
					delete(end, p)
				}
			}
		}
		if err := out.Flush(); err != nil {
			return written, fmt.Errorf("write stdout: %w", err)
		}
	}
	return written, fmt.Errorf("gave up after %d polls", pollRoundsMax)
}

// consumeGroup consumes as a member of o.group: it prints each poll's records, flushes
// stdout, then commits (at least once: a crash between the two prints them again). With
// --exit-at-end it stops once every partition it owns is read up to its high watermark.
func consumeGroup(ctx context.Context, c *client.Client, o consumeOptions, out *bufio.Writer) (written int64, err error) {
	g, err := c.NewGroupConsumer(client.GroupConfig{Group: o.group, InstanceID: o.instanceID, SessionTimeout: o.sessionTimeout,
		AutoOffsetReset: o.reset, Consumer: client.ConsumerConfig{MaxWait: consumeMaxWait}})
	if err != nil {
		return 0, err
	}
	defer func() {
		closeCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if cerr := g.Close(closeCtx); err == nil && cerr != nil {
			err = cerr
		}
	}()
	g.Subscribe(o.topic)
	var enc *json.Encoder
	if o.json {
		enc = newJSONEncoder(out)
	}
	for range pollRoundsMax {
		records, err := g.Poll(ctx)
		if errors.Is(err, client.ErrNoCommittedOffset) {
			return written, fmt.Errorf("%w: give the group offsets first (ringlog group reset %s --topic %s --to earliest|latest|OFFSET|@UNIX_MS), or --from earliest|latest", err, o.group, o.topic)
		}
		if err != nil {
			return written, err
		}
		for _, r := range records {
			if err := emitRecord(out, enc, o, &r); err != nil {
				return written, err
			}
			written++
			if o.max > 0 && written >= o.max {
				// Commit exactly what was printed: the rest of this poll is read again.
				if err := out.Flush(); err != nil {
					return written, fmt.Errorf("write stdout: %w", err)
				}
				return written, commitThrough(ctx, g, records, r)
			}
		}
		if err := out.Flush(); err != nil {
			return written, fmt.Errorf("write stdout: %w", err)
		}
		if len(records) > 0 {
			if err := g.CommitSync(ctx); err != nil {
				return written, err
			}
			continue
		}
		if o.exitAtEnd {
			if done, err := groupCaughtUp(ctx, c, g); err != nil || done {
				return written, err
			}
		}
	}
	return written, fmt.Errorf("gave up after %d polls", pollRoundsMax)
}

// commitThrough commits, per partition, the offset after the last record of records
// printed (up to and including last).
func commitThrough(ctx context.Context, g *client.GroupConsumer, records []client.ConsumedRecord, last client.ConsumedRecord) error {
	next := map[client.TopicPartition]int64{}
	for _, r := range records {
		next[client.TopicPartition{Topic: r.Topic, Partition: r.Partition}] = r.Offset + 1
		if r.Topic == last.Topic && r.Partition == last.Partition && r.Offset == last.Offset {
			break
		}
	}
	offsets := make([]client.CommittedOffset, 0, len(next))
	for tp, off := range next {
		offsets = append(offsets, client.CommittedOffset{TopicPartition: tp, Offset: off})
	}
	return g.CommitOffsets(ctx, offsets)
}

// groupCaughtUp reports whether the member owns partitions and has read each up to its
// high watermark.
func groupCaughtUp(ctx context.Context, c *client.Client, g *client.GroupConsumer) (bool, error) {
	owned := g.Assignment()
	if len(owned) == 0 {
		return false, nil
	}
	for _, tp := range owned {
		pos, err := g.Position(ctx, tp)
		if err != nil {
			return false, err
		}
		hw, err := c.ListOffset(ctx, tp.Topic, tp.Partition, wire.TimestampLatest)
		if err != nil {
			return false, err
		}
		if pos < hw {
			return false, nil
		}
	}
	return true, nil
}

// emitRecord writes one record as JSON (enc set) or per --format / --print-*.
func emitRecord(out *bufio.Writer, enc *json.Encoder, o consumeOptions, r *client.ConsumedRecord) error {
	if enc == nil {
		writeRecord(out, o, r)
		return nil
	}
	if err := enc.Encode(newJSONRecord(r)); err != nil {
		return fmt.Errorf("write record %s/%d@%d: %w", r.Topic, r.Partition, r.Offset, err)
	}
	return nil
}

func writeRecord(out *bufio.Writer, o consumeOptions, r *client.ConsumedRecord) {
	if o.format != nil {
		writeFormatted(out, o.format, r)
		return
	}
	if o.printOffset {
		out.WriteString(strconv.FormatInt(int64(r.Partition), 10))
		out.WriteByte(':')
		out.WriteString(strconv.FormatInt(r.Offset, 10))
		out.WriteByte('\t')
	}
	if o.printKey {
		out.Write(r.Key)
		out.WriteString(o.keySeparator)
	}
	out.Write(r.Value)
	out.WriteByte('\n')
}
