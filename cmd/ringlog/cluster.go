package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/ringlog/ringlog/netio/client"
	"github.com/ringlog/ringlog/replication/cluster"
)

func init() {
	register("cluster", "describe a replicated cluster: brokers, controller leader, partitions' leaders, replicas, ISR", runCluster)
}

const clusterUsage = "usage: ringlog cluster describe [--broker HOST:PORT] [--json]"

func runCluster(args []string) error {
	if len(args) == 0 || args[0] != "describe" {
		fmt.Fprintln(os.Stderr, clusterUsage)
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
			return nil
		}
		return errors.New("unknown or missing subcommand (want describe)")
	}
	err := clusterDescribe(args[1:], os.Stdout)
	if errors.Is(err, errHelp) {
		return nil
	}
	return err
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
	fmt.Fprintf(w, "answered by node %d; controller leader: node %d\n\nbrokers:\n", v.NodeID, v.ControllerLeader)
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
		fmt.Fprintf(w, "  node %d  %s  rack=%q  session=%d  %s\n", b.ID, b.Address, b.Rack, b.SessionEpoch, state)
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
