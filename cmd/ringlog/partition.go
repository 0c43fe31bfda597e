package main

// `ringlog partition`: reassign a replicated partition's replicas and elect preferred
// leaders, through the controller commands (replication/controller's CmdReassign and
// CmdElectPreferred) sent over the Controller API.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ringlog/ringlog/netio/client"
	"github.com/ringlog/ringlog/netio/wire"
	"github.com/ringlog/ringlog/replication/cluster"
	"github.com/ringlog/ringlog/replication/controller"
)

func init() {
	register("partition", "reassign a replicated partition's replicas, elect preferred leaders", func(args []string) error {
		return clusterOnly(runSubcommands("partition", partitionCommands, args))
	})
}

var partitionCommands = map[string]subcommand{
	"reassign":     {"partition reassign TOPIC --partition P --replicas ID,ID,... [--wait DURATION]", partitionReassign},
	"elect-leader": {"partition elect-leader TOPIC [--partition P]", partitionElectLeader},
}

// pollInterval is how often --wait asks for the cluster view.
const pollInterval = 100 * time.Millisecond

func partitionReassign(usage string, args []string, stdout io.Writer) error {
	fs := newFlagSet("partition reassign", usage)
	broker := brokerFlag(fs)
	partition := fs.Int("partition", 0, "the partition to move")
	replicasFlag := fs.String("replicas", "", "the target replicas, broker ids, the preferred leader first (e.g. 1,2,3)")
	wait := fs.Duration("wait", 0, "wait up to this long for the move to complete (every target replica in the ISR); 0: return once the controller accepted it")
	positional, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs(positional, "TOPIC"); err != nil {
		return err
	}
	if *partition < 0 || *partition >= partitionsMax {
		return fmt.Errorf("--partition %d: want 0..%d", *partition, partitionsMax-1)
	}
	replicas, err := parseBrokerIDs(*replicasFlag)
	if err != nil {
		return fmt.Errorf("--replicas: %w", err)
	}
	if *wait < 0 {
		return fmt.Errorf("--wait %v: want 0 or more", *wait)
	}
	topic := positional[0]
	return withClient(*broker, func(ctx context.Context, c *client.Client) error {
		req := &controller.ReassignRequest{Topic: topic, Partition: int32(*partition), Replicas: replicas}
		p, err := submitPartitionCommand(ctx, c, controller.CmdReassign, req)
		if err != nil {
			return err
		}
		if p.TargetReplicas != nil && *wait > 0 {
			if p, err = waitReassigned(ctx, c, topic, int32(*partition), *wait); err != nil {
				return err
			}
		}
		state := "complete"
		if p.TargetReplicas != nil {
			state = "in progress (target " + joinIDs(p.TargetReplicas) + ")"
		}
		fmt.Fprintf(stdout, "reassignment of %s/%d %s: %s\n", topic, p.Index, state, describePartition(p))
		return nil
	})
}

func partitionElectLeader(usage string, args []string, stdout io.Writer) error {
	fs := newFlagSet("partition elect-leader", usage)
	broker := brokerFlag(fs)
	partition := fs.Int("partition", -1, "the partition (default: every partition of the topic)")
	positional, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs(positional, "TOPIC"); err != nil {
		return err
	}
	if *partition < -1 || *partition >= partitionsMax {
		return fmt.Errorf("--partition %d: want 0..%d", *partition, partitionsMax-1)
	}
	topic := positional[0]
	return withClient(*broker, func(ctx context.Context, c *client.Client) error {
		indexes := []int32{int32(*partition)}
		if *partition < 0 {
			v, err := clusterView(ctx, c)
			if err != nil {
				return err
			}
			t := v.Metadata.Topics[topic]
			if t == nil {
				return fmt.Errorf("topic %s: %w", topic, controller.ErrUnknownTopic)
			}
			indexes = indexes[:0]
			for _, p := range t.Partitions {
				indexes = append(indexes, p.Index)
			}
		}
		var errs []error
		for _, i := range indexes {
			p, err := submitPartitionCommand(ctx, c, controller.CmdElectPreferred, &controller.ReassignRequest{Topic: topic, Partition: i})
			if err != nil {
				errs = append(errs, err)
				fmt.Fprintf(stdout, "%s/%d: not elected: %v\n", topic, i, err)
				continue
			}
			fmt.Fprintf(stdout, "%s/%d: %s\n", topic, i, describePartition(p))
		}
		return errors.Join(errs...)
	})
}

// submitPartitionCommand replicates a reassignment or preferred-leader election through
// the controller and returns the partition it produced.
func submitPartitionCommand(ctx context.Context, c *client.Client, typ controller.CommandType, req *controller.ReassignRequest) (*controller.Partition, error) {
	cmd, err := json.Marshal(&controller.Command{Type: typ, NowMs: time.Now().UnixMilli(), Reassign: req})
	if err != nil {
		return nil, err
	}
	out, err := submitToController(ctx, c, cmd)
	if err != nil {
		return nil, err
	}
	var p controller.Partition
	if err := json.Unmarshal(out, &p); err != nil {
		return nil, fmt.Errorf("decode the controller's answer: %w", err)
	}
	return &p, nil
}

// controllerRetryFor bounds how long a command waits for a controller leader (a raft
// election takes one to two seconds).
const controllerRetryFor = 15 * time.Second

// submitToController sends cmd to the seed broker, which forwards it to the controller
// leader's broker, asking again while the leadership moves. A broker that answers
// NOT_CONTROLLER without forwarding (a version before brokers forwarded clients'
// commands) is bypassed: cmd then goes to the broker its cluster view names as leader.
func submitToController(ctx context.Context, c *client.Client, cmd []byte) ([]byte, error) {
	deadline := time.Now().Add(controllerRetryFor)
	for {
		out, err := c.ControllerSubmitAt(ctx, c.BrokerAddr(), cmd)
		if !errors.Is(err, wire.ErrNotController) {
			return out, err
		}
		if time.Now().After(deadline) {
			return nil, err
		}
		if out, err = submitToLeader(ctx, c, cmd); !errors.Is(err, wire.ErrNotController) {
			return out, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(pollInterval):
		}
	}
}

// submitToLeader sends cmd to the broker whose voter leads the controller quorum, as the
// seed broker's cluster view names it, once.
func submitToLeader(ctx context.Context, c *client.Client, cmd []byte) ([]byte, error) {
	v, err := clusterView(ctx, c)
	if err != nil {
		return nil, err
	}
	b := v.Metadata.Brokers[v.ControllerLeader]
	if b == nil || b.Address == "" {
		return nil, fmt.Errorf("%w: node %d's view names no controller leader with an address", wire.ErrNotController, v.NodeID)
	}
	return c.ControllerSubmitAt(ctx, b.Address, cmd)
}

// waitReassigned polls the seed broker's cluster view until partition index of topic has
// no reassignment in progress, for at most limit.
func waitReassigned(ctx context.Context, c *client.Client, topic string, index int32, limit time.Duration) (*controller.Partition, error) {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	for {
		v, err := clusterView(ctx, c)
		if err == nil {
			if t := v.Metadata.Topics[topic]; t != nil && int(index) < len(t.Partitions) && t.Partitions[index].TargetReplicas == nil {
				return &t.Partitions[index], nil
			}
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("reassignment of %s/%d not complete within --wait %v (last error: %v)", topic, index, limit, err)
		case <-time.After(pollInterval):
		}
	}
}

func clusterView(ctx context.Context, c *client.Client) (*cluster.View, error) {
	data, err := c.ClusterMetadata(ctx)
	if err != nil {
		return nil, err
	}
	var v cluster.View
	if err := json.Unmarshal(data, &v); err != nil {
		return nil, fmt.Errorf("decode cluster view: %w", err)
	}
	return &v, nil
}

func describePartition(p *controller.Partition) string {
	return fmt.Sprintf("leader=%d epoch=%d replicas=%s isr=%s", p.Leader, p.LeaderEpoch, joinIDs(p.Replicas), joinIDs(p.ISR))
}

// parseBrokerIDs parses "1,2,3": distinct positive broker ids, at most the controller's
// replication factor limit.
func parseBrokerIDs(s string) ([]int32, error) {
	if s == "" {
		return nil, errors.New("missing (want broker ids like 1,2,3)")
	}
	parts := strings.Split(s, ",")
	if len(parts) > replicationFactorMax {
		return nil, fmt.Errorf("%d replicas: at most %d", len(parts), replicationFactorMax)
	}
	ids := make([]int32, 0, len(parts))
	for _, part := range parts {
		id, err := strconv.ParseInt(strings.TrimSpace(part), 10, 32)
		if err != nil || id < 0 {
			return nil, fmt.Errorf("%q is not a broker id", part)
		}
		if slices.Contains(ids, int32(id)) {
			return nil, fmt.Errorf("broker %d named twice", id)
		}
		ids = append(ids, int32(id))
	}
	return ids, nil
}
