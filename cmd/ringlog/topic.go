package main

// `ringlog topic`: create, list, describe, delete and configure topics through the admin
// calls of netio/client.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"text/tabwriter"

	"github.com/ringlog/ringlog/engine"
	"github.com/ringlog/ringlog/engine/shard"
	"github.com/ringlog/ringlog/netio/client"
	"github.com/ringlog/ringlog/netio/wire"
)

func init() {
	register("topic", "create, list, describe, delete and configure topics", runTopic)
}

var topicCommands = map[string]subcommand{
	"create":   {"topic create NAME [--partitions N] [--replication-factor R] [--config k=v ...]", topicCreate},
	"list":     {"topic list", topicList},
	"describe": {"topic describe NAME", topicDescribe},
	"delete":   {"topic delete NAME", topicDelete},
	"config":   {"topic config NAME [--set k=v ...] [--delete k ...]", topicConfig},
	"repair":   {"topic repair NAME --data DIR --partition P (--truncate-to OFFSET | --skip-to OFFSET)  (broker stopped)", topicRepair},
}

func runTopic(args []string) error { return runSubcommands("topic", topicCommands, args) }

// partitionsMax bounds --partitions (and --partition) on the client side with the broker's
// own limit, so the CLI refuses exactly what the broker would.
const partitionsMax = engine.PartitionsPerTopicMax

// replicationFactorMax is the controller's limit on replicas per partition.
const replicationFactorMax = 16

func topicCreate(usage string, args []string, stdout io.Writer) error {
	fs := newFlagSet("topic create", usage)
	broker := brokerFlag(fs)
	partitions := fs.Int("partitions", 1, "number of partitions")
	replicationFactor := fs.Int("replication-factor", 1, "replicas of each partition, on different brokers (a cluster of at least R brokers)")
	configs := keyValueFlag{}
	fs.Var(configs, "config", "topic config key=value (repeatable), e.g. flush.always=true, retention.ms=3600000")
	positional, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs(positional, "NAME"); err != nil {
		return err
	}
	if *partitions < 1 || *partitions > partitionsMax {
		return fmt.Errorf("--partitions %d: want 1..%d", *partitions, partitionsMax)
	}
	if *replicationFactor < 1 || *replicationFactor > replicationFactorMax {
		return fmt.Errorf("--replication-factor %d: want 1..%d", *replicationFactor, replicationFactorMax)
	}
	return withClient(*broker, func(ctx context.Context, c *client.Client) error {
		if err := c.CreateReplicatedTopic(ctx, positional[0], int32(*partitions), int16(*replicationFactor), configs); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "created topic %s with %s\n", positional[0], plural(*partitions, "partition"))
		return nil
	})
}

func topicList(usage string, args []string, stdout io.Writer) error {
	fs := newFlagSet("topic list", usage)
	broker := brokerFlag(fs)
	positional, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs(positional); err != nil {
		return err
	}
	return withClient(*broker, func(ctx context.Context, c *client.Client) error {
		topics, err := c.ListTopics(ctx)
		if err != nil {
			return fmt.Errorf("list topics: %w", err)
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "TOPIC\tPARTITIONS")
		for _, t := range topics {
			fmt.Fprintf(tw, "%s\t%d\n", t.Name, t.Partitions)
		}
		return tw.Flush()
	})
}

func topicDescribe(usage string, args []string, stdout io.Writer) error {
	fs := newFlagSet("topic describe", usage)
	broker := brokerFlag(fs)
	positional, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs(positional, "NAME"); err != nil {
		return err
	}
	return withClient(*broker, func(ctx context.Context, c *client.Client) error {
		topics, err := c.DescribeTopics(ctx, positional[0])
		if err != nil {
			return err
		}
		if len(topics) != 1 {
			return fmt.Errorf("describe topic %s: broker returned %d topics", positional[0], len(topics))
		}
		configs, err := c.DescribeConfigs(ctx, positional[0])
		if err != nil {
			return err
		}
		if err := printDescription(stdout, topics[0], configs); err != nil {
			return err
		}
		return printReplication(ctx, stdout, c, positional[0])
	})
}

// printReplication adds, on a broker of a cluster, each partition's leader, leader epoch,
// replicas, ISR and the high watermark its leader reports, from Metadata version 1. A
// single broker prints nothing.
func printReplication(ctx context.Context, w io.Writer, c *client.Client, topic string) error {
	parts, controllerID, err := c.DescribeReplication(ctx, topic)
	if err != nil || len(parts) == 0 {
		return err
	}
	fmt.Fprintf(w, "replication (controller leader: node %d)\n", controllerID)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "PARTITION\tLEADER\tLEADER-EPOCH\tREPLICAS\tISR\tLEADER-HWM\t")
	for _, p := range parts {
		hwm := "-"
		if p.HighWatermark >= 0 {
			hwm = strconv.FormatInt(p.HighWatermark, 10)
		}
		fmt.Fprintf(tw, "%d\t%d\t%d\t%s\t%s\t%s\t\n", p.Partition, p.Leader, p.LeaderEpoch, joinIDs(p.Replicas), joinIDs(p.ISR), hwm)
	}
	return tw.Flush()
}

// printDescription prints a topic summary, one row per partition, then the topic's
// non-default configs.
func printDescription(w io.Writer, t wire.DescribeTopic, configs []wire.ConfigDescription) error {
	var records, size int64
	for _, p := range t.Partitions {
		records += p.HighWatermark - p.LogStartOffset
		size += p.SizeBytes
	}
	fmt.Fprintf(w, "topic %s  partitions %d  records %d  size %d bytes (%s)\n", t.Topic, len(t.Partitions), records, size, humanBytes(size))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "PARTITION\tSHARD\tLOG-START\tLOG-END\tHIGH-WATERMARK\tSIZE-BYTES\tERROR\t")
	for _, p := range t.Partitions {
		errName := "-"
		if p.ErrorCode != wire.ErrNone {
			errName = p.ErrorCode.Name()
		}
		fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%d\t%d\t%s\t\n", p.Partition, p.Shard, p.LogStartOffset, p.LogEndOffset, p.HighWatermark, p.SizeBytes, errName)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, p := range t.Partitions {
		if p.ErrorMessage != "" {
			fmt.Fprintf(w, "partition %d: %s: %s\n", p.Partition, p.ErrorCode.Name(), p.ErrorMessage)
		}
	}
	for _, cfg := range configs {
		if cfg.Source == wire.ConfigSourceTopic {
			fmt.Fprintf(w, "config %s=%s\n", cfg.Key, cfg.Value)
		}
	}
	return nil
}

func topicDelete(usage string, args []string, stdout io.Writer) error {
	return deleteNamed("topic", "NAME", usage, args, stdout, (*client.Client).DeleteTopic)
}

// deleteNamed runs `ringlog KIND delete NAME`: one positional name, deleted through del.
func deleteNamed(kind, argName, usage string, args []string, stdout io.Writer,
	del func(*client.Client, context.Context, string) error) error {
	fs := newFlagSet(kind+" delete", usage)
	broker := brokerFlag(fs)
	positional, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs(positional, argName); err != nil {
		return err
	}
	return withClient(*broker, func(ctx context.Context, c *client.Client) error {
		if err := del(c, ctx, positional[0]); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "deleted %s %s\n", kind, positional[0])
		return nil
	})
}

func topicConfig(usage string, args []string, stdout io.Writer) error {
	fs := newFlagSet("topic config", usage)
	broker := brokerFlag(fs)
	set := keyValueFlag{}
	fs.Var(set, "set", "set a config key=value (repeatable)")
	var remove listFlag
	fs.Var(&remove, "delete", "remove a config key, back to the broker default (repeatable)")
	positional, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs(positional, "NAME"); err != nil {
		return err
	}
	for _, k := range remove {
		if _, both := set[k]; both {
			return fmt.Errorf("config %q is both --set and --delete", k)
		}
	}
	name := positional[0]
	return withClient(*broker, func(ctx context.Context, c *client.Client) error {
		if len(set) > 0 || len(remove) > 0 {
			if err := c.AlterConfigs(ctx, name, set, remove); err != nil {
				return err
			}
		}
		configs, err := c.DescribeConfigs(ctx, name)
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "KEY\tVALUE\tSOURCE")
		for _, cfg := range configs {
			source := configSourceName(cfg.Source)
			if cfg.ReadOnly {
				source += ",read-only"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\n", cfg.Key, cfg.Value, source)
		}
		return tw.Flush()
	})
}

func configSourceName(source int8) string {
	switch source {
	case wire.ConfigSourceDefault:
		return "default"
	case wire.ConfigSourceTopic:
		return "topic"
	case wire.ConfigSourceBroker:
		return "broker"
	}
	return fmt.Sprintf("source-%d", source)
}

// withClient dials the broker, runs fn under the command's context and closes the client.
func withClient(broker string, fn func(ctx context.Context, c *client.Client) error) error {
	ctx, cancel := commandContext()
	defer cancel()
	c, err := dial(ctx, broker)
	if err != nil {
		return err
	}
	defer c.Close()
	return fn(ctx, c)
}

func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	value, suffix := float64(n), ""
	for _, s := range []string{"KiB", "MiB", "GiB", "TiB", "PiB"} {
		value /= unit
		suffix = s
		if value < unit {
			break
		}
	}
	return fmt.Sprintf("%.1f %s", value, suffix)
}

// topicRepair gets a partition past a corrupt batch that the broker's scrubber or
// --verify-segments reported (topic describe prints the offsets and this command). It works
// on the data directory of a stopped broker: it takes the lock a running broker holds.
func topicRepair(usage string, args []string, stdout io.Writer) error {
	fs := newFlagSet("topic repair", usage)
	dataDir := fs.String("data", "", "the broker's data directory (the broker must be stopped)")
	partition := fs.Int("partition", -1, "partition to repair")
	truncateTo := fs.Int64("truncate-to", -1, "remove every record at or after this offset (the corrupt batch and everything after it)")
	skipTo := fs.Int64("skip-to", -1, "advance the log start offset to this offset (the corrupt batch and everything before it)")
	positional, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs(positional, "NAME"); err != nil {
		return err
	}
	if *dataDir == "" {
		return errors.New("--data is required: repair works on a stopped broker's data directory")
	}
	if *partition < 0 || *partition >= partitionsMax {
		return fmt.Errorf("--partition %d: want 0..%d", *partition, partitionsMax-1)
	}
	mode, offset := shard.RepairMode(0), int64(-1)
	switch {
	case *truncateTo >= 0 && *skipTo >= 0:
		return errors.New("--truncate-to and --skip-to are exclusive")
	case *truncateTo >= 0:
		mode, offset = shard.RepairTruncateTo, *truncateTo
	case *skipTo >= 0:
		mode, offset = shard.RepairSkipTo, *skipTo
	default:
		return errors.New("say how: --truncate-to OFFSET or --skip-to OFFSET")
	}
	tp := shard.TopicPartition{Topic: positional[0], Partition: int32(*partition)}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	if err := checkDataDir(*dataDir); err != nil {
		return err
	}
	res, err := shard.RepairPartition(*dataDir, tp, mode, offset, quiet)
	for _, c := range res.Before {
		fmt.Fprintf(stdout, "found: %s\n", c)
	}
	if err != nil {
		return fmt.Errorf("repair %s/%d: %w", tp.Topic, tp.Partition, err)
	}
	fmt.Fprintf(stdout, "repaired %s/%d: offsets [%d, %d) -> [%d, %d), %d corrupt batch(es) left\n",
		tp.Topic, tp.Partition, res.StartBefore, res.EndBefore, res.StartAfter, res.EndAfter, len(res.After))
	return nil
}
