package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"

	"github.com/ringlog/ringlog/netio/client"
	"github.com/ringlog/ringlog/netio/wire"
	"github.com/ringlog/ringlog/replication/cluster"
	"github.com/ringlog/ringlog/replication/controller"
)

func init() {
	register("cluster", "describe a replicated cluster (brokers, protocol versions, controller leader, partitions' leaders, replicas, ISR); finalize its protocol version", func(args []string) error {
		return clusterOnly(runSubcommands("cluster", clusterCommands, args))
	})
}

// clusterOnly says what a NOT_CONTROLLER from a broker that runs alone means: the command
// needs a replicated cluster (ringlogd --node-id), and retrying will not help although the
// code's own text says "retry".
func clusterOnly(err error) error {
	if errors.Is(err, wire.ErrNotController) && strings.Contains(err.Error(), "this broker is not part of a cluster") {
		return fmt.Errorf("%w (a broker started without --node-id runs alone: this command needs a replicated cluster, docs/replication.md)", err)
	}
	return err
}

var clusterCommands = map[string]subcommand{
	"describe":         {"cluster describe [--json]", func(_ string, args []string, stdout io.Writer) error { return clusterDescribe(args, stdout) }},
	"finalize-version": {"cluster finalize-version VERSION", clusterFinalizeVersion},
}

// clusterFinalizeVersion raises the cluster's finalized inter-broker protocol version
// (the last step of a rolling upgrade: docs/operations.md).
func clusterFinalizeVersion(usage string, args []string, stdout io.Writer) error {
	fs := newFlagSet("cluster finalize-version", usage)
	broker := brokerFlag(fs)
	positional, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs(positional, "VERSION"); err != nil {
		return err
	}
	version, err := strconv.ParseUint(positional[0], 10, 16)
	if err != nil || version == 0 {
		return fmt.Errorf("VERSION %q: want a protocol version (1 to %d in this build)", positional[0], controller.ProtocolVersionMax)
	}
	return withClient(*broker, func(ctx context.Context, c *client.Client) error {
		cmd, err := json.Marshal(&controller.Command{Type: controller.CmdFinalizeVersion, Finalize: &controller.FinalizeRequest{Version: uint16(version)}})
		if err != nil {
			return err
		}
		out, err := submitToController(ctx, c, cmd)
		if err != nil {
			return fmt.Errorf("finalize protocol version %d: %w", version, err)
		}
		var finalized uint16
		if err := json.Unmarshal(out, &finalized); err != nil {
			return fmt.Errorf("decode the controller's answer: %w", err)
		}
		_, err = fmt.Fprintf(stdout, "finalized protocol version: %d\n", finalized)
		return err
	})
}

func clusterDescribe(args []string, stdout io.Writer) error {
	fs := newFlagSet("cluster describe", "cluster describe [--json]")
	broker := brokerFlag(fs)
	asJSON := fs.Bool("json", false, "print the broker's view as JSON")
	positional, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs(positional); err != nil {
		return err
	}
	return withClient(*broker, func(ctx context.Context, c *client.Client) error {
		data, err := c.ClusterMetadata(ctx)
		if err != nil {
			return err
		}
		if *asJSON {
			_, err := fmt.Fprintf(stdout, "%s\n", data)
			return err
		}
		var v cluster.View
		if err := json.Unmarshal(data, &v); err != nil {
			return fmt.Errorf("decode cluster view: %w", err)
		}
		return printClusterView(stdout, &v)
	})
}

func printClusterView(w io.Writer, v *cluster.View) error {
	md := v.Metadata
	fmt.Fprintf(w, "answered by node %d; controller leader: node %d\nfinalized protocol version: %d\n\nbrokers:\n", v.NodeID, v.ControllerLeader, md.Finalized())
	ids := make([]int, 0, len(md.Brokers))
	for id := range md.Brokers {
		ids = append(ids, int(id))
	}
	sort.Ints(ids)
	for _, id := range ids {
		b := md.Brokers[int32(id)]
		state := "live"
		if b.Fenced {
			state = "fenced"
		}
		lo, hi := b.ProtocolRange()
		fmt.Fprintf(w, "  node %d  %s  rack=%q  session=%d  protocol=%d-%d  %s\n", b.ID, b.Address, b.Rack, b.SessionEpoch, lo, hi, state)
	}
	names := make([]string, 0, len(md.Topics))
	for name := range md.Topics {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		t := md.Topics[name]
		fmt.Fprintf(w, "\ntopic %s (unclean.leader.election.enable=%t)\n", name, t.UncleanLeaderElection)
		for _, p := range t.Partitions {
			hwm := "-"
			if h, ok := v.HighWatermarks[name+"/"+strconv.Itoa(int(p.Index))]; ok {
				hwm = strconv.FormatInt(h, 10)
			}
			fmt.Fprintf(w, "  partition %d  leader=%d  epoch=%d  replicas=%s  isr=%s  hwm=%s\n",
				p.Index, p.Leader, p.LeaderEpoch, joinIDs(p.Replicas), joinIDs(p.ISR), hwm)
		}
	}
	return nil
}

func joinIDs(ids []int32) string {
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = strconv.Itoa(int(id))
	}
	return "[" + strings.Join(parts, ",") + "]"
}
