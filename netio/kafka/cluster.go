package kafka

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"

	"github.com/ringlog/ringlog/engine/shard"
	"github.com/ringlog/ringlog/netio"
	"github.com/ringlog/ringlog/replication/controller"
	"github.com/ringlog/ringlog/replication/isr"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The listener on a replicated cluster (Config.Cluster): Metadata lists every registered
// live broker with the Kafka address it registered with the controller, and each
// replicated partition's leader, leader epoch, replicas, ISR and offline replicas from this
// broker's controller voter; Produce, Fetch, ListOffsets and OffsetForLeaderEpoch of a
// partition this broker does not lead answer NOT_LEADER_OR_FOLLOWER, which makes Kafka
// clients refresh their metadata and retry at the leader; CreateTopics and DeleteTopics
// go through the controller as the ringlog listener's do; FindCoordinator names the leader
// of the group's partition of the replicated __consumer_offsets. A local topic the
// controller does not know is described as led by this broker alone.
//
// Without a cluster this broker is node 0 and leads every partition at leader epoch 0.

// localNodeID is a single broker's node id.
const localNodeID = 0

// nodeID is this broker's id in Kafka responses.
func (s *Server) nodeID() int32 {
	if s.cfg.Cluster != nil {
		return s.cfg.Cluster.NodeID()
	}
	return localNodeID
}

// clusterView is what one request reads of the controller's metadata: one consistent
// version, shared and read-only (cluster.Manager.Metadata: no copy, so nothing here may
// write it; replicatedPartitions clones the slices it hands to the response), nil without
// a cluster.
type clusterView struct {
	md *controller.Metadata
}

func (s *Server) clusterView() clusterView {
	if s.cfg.Cluster == nil {
		return clusterView{}
	}
	return clusterView{md: s.cfg.Cluster.Metadata()}
}

// replicated is the controller's topic, nil when name is not replicated (or no cluster).
func (v clusterView) replicated(name string) *controller.Topic {
	if v.md == nil {
		return nil
	}
	return v.md.Topics[name]
}

// live reports whether broker id holds a live session.
func (v clusterView) live(id int32) bool {
	b := v.md.Brokers[id]
	return b != nil && !b.Fenced
}

// brokers lists the brokers Kafka clients may connect to, by id: every live broker that
// registered a Kafka address, and this broker even before its registration is applied.
func (s *Server) brokers(v clusterView) []kmsg.MetadataResponseBroker {
	self := kmsg.NewMetadataResponseBroker()
	self.NodeID, self.Host, self.Port = s.nodeID(), s.nodeHost, s.nodePort
	if v.md == nil {
		return []kmsg.MetadataResponseBroker{self}
	}
	out := []kmsg.MetadataResponseBroker{self}
	for id, b := range v.md.Brokers {
		if id == self.NodeID || b.Fenced || b.KafkaAddress == "" {
			continue
		}
		host, port, err := splitHostPort(b.KafkaAddress)
		if err != nil {
			continue // registered by a broker that validated it; never expected
		}
		mb := kmsg.NewMetadataResponseBroker()
		mb.NodeID, mb.Host, mb.Port = id, host, port
		if b.Rack != "" {
			mb.Rack = str(b.Rack)
		}
		out = append(out, mb)
	}
	if b := v.md.Brokers[self.NodeID]; b != nil && b.Rack != "" {
		out[0].Rack = str(b.Rack)
	}
	slices.SortFunc(out, func(a, b kmsg.MetadataResponseBroker) int { return int(a.NodeID) - int(b.NodeID) })
	return out
}

// controllerID is the node id Metadata names as the controller: the controller quorum's
// leader (which every broker forwards controller commands to), -1 while none is known.
func (s *Server) controllerID() int32 {
	if s.cfg.Cluster == nil {
		return localNodeID
	}
	if id := s.cfg.Cluster.ControllerLeader(); id > 0 {
		return id
	}
	return -1
}

// replicatedPartitions describes a replicated topic's partitions as the controller has them.
func replicatedPartitions(v clusterView, t *controller.Topic) []kmsg.MetadataResponseTopicPartition {
	out := make([]kmsg.MetadataResponseTopicPartition, len(t.Partitions))
	for i, cp := range t.Partitions {
		p := kmsg.NewMetadataResponseTopicPartition()
		p.Partition, p.Leader, p.LeaderEpoch = cp.Index, cp.Leader, cp.LeaderEpoch
		p.Replicas, p.ISR = slices.Clone(cp.Replicas), slices.Clone(cp.ISR)
		p.OfflineReplicas = []int32{}
		for _, id := range cp.Replicas {
			if !v.live(id) {
				p.OfflineReplicas = append(p.OfflineReplicas, id)
			}
		}
		if cp.Leader == controller.NoLeader {
			p.ErrorCode = kerr.LeaderNotAvailable.Code
		}
		out[i] = p
	}
	return out
}

// checkLeader is nil when this broker serves clients for tp at the client's view of the
// leader epoch (-1: the client does not say; requests before KIP-320's versions). Without a
// cluster every partition is led here at epoch 0.
func (s *Server) checkLeader(tp shard.TopicPartition, currentEpoch int32) error {
	if s.cfg.Cluster != nil {
		return s.cfg.Cluster.CheckLeaderEpoch(tp, currentEpoch)
	}
	switch {
	case currentEpoch > 0:
		return fmt.Errorf("%s/%d epoch %d, leader's 0: %w", tp.Topic, tp.Partition, currentEpoch, isr.ErrUnknownLeaderEpoch)
	case currentEpoch < -1:
		return fmt.Errorf("%s/%d epoch %d, leader's 0: %w", tp.Topic, tp.Partition, currentEpoch, isr.ErrFencedLeaderEpoch)
	}
	return nil
}

// groupCoordinator is the node that coordinates group on a cluster: the leader of the
// group's __consumer_offsets partition (cluster.Manager.GroupCoordinator), at the Kafka
// address it registered. While the topic is being created, its partition is offline or its
// leader is not live, the answer is COORDINATOR_NOT_AVAILABLE (clients retry the lookup).
func (s *Server) groupCoordinator(group string) (kmsg.FindCoordinatorResponseCoordinator, bool) {
	c := kmsg.NewFindCoordinatorResponseCoordinator()
	c.Key, c.NodeID, c.Port = group, -1, -1
	b, err := s.cfg.Cluster.GroupCoordinator(group)
	if err != nil {
		c.ErrorCode, c.ErrorMessage = kerr.CoordinatorNotAvailable.Code, str(err.Error())
		return c, false
	}
	if b.ID == s.nodeID() {
		c.NodeID, c.Host, c.Port = b.ID, s.nodeHost, s.nodePort
		return c, true
	}
	if b.KafkaAddress == "" {
		c.ErrorCode, c.ErrorMessage = kerr.CoordinatorNotAvailable.Code, str(fmt.Sprintf("group %q is coordinated by node %d, which registered no Kafka listener", group, b.ID))
		return c, false
	}
	host, port, err := splitHostPort(b.KafkaAddress)
	if err != nil {
		c.ErrorCode, c.ErrorMessage = kerr.CoordinatorNotAvailable.Code, str(err.Error())
		return c, false
	}
	c.NodeID, c.Host, c.Port = b.ID, host, port
	return c, true
}

// createReplicated creates a topic through the controller; the answer comes once this
// broker has opened its replicas (cluster.Manager.CreateTopic).
func (s *Server) createReplicated(t kmsg.CreateTopicsRequestTopic, partitions int, configs map[string]string, validateOnly bool, timeoutMs int32) (int16, *codedError) {
	if len(t.ReplicaAssignment) > 0 {
		return 0, &codedError{kerr.InvalidRequest.Code, "a manual replica assignment is not supported on a ringlog cluster: the controller places replicas (ringlog partition reassign moves them)"}
	}
	rf := t.ReplicationFactor
	if rf == -1 {
		rf = 1 // the ringlog listener's default too
	}
	if rf < 1 {
		return 0, &codedError{kerr.InvalidReplicationFactor.Code, fmt.Sprintf("replication factor %d: want 1 or more, or -1 for the default (1)", t.ReplicationFactor)}
	}
	if validateOnly {
		if err := s.b.ValidateTopic(t.Topic, partitions, configs); err != nil {
			return 0, &codedError{codeFor(err), err.Error()}
		}
		return rf, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), netio.RequestAdminTimeout(timeoutMs))
	defer cancel()
	if err := s.cfg.Cluster.CreateTopic(ctx, t.Topic, int32(partitions), int32(rf), configs); err != nil {
		return 0, &codedError{codeFor(err), err.Error()}
	}
	return rf, nil
}

// deleteReplicated deletes a replicated topic through the controller, within the
// request's timeout_ms as the ringlog listener does (netio.RequestAdminTimeout).
func (s *Server) deleteReplicated(name string, timeoutMs int32) error {
	ctx, cancel := context.WithTimeout(context.Background(), netio.RequestAdminTimeout(timeoutMs))
	defer cancel()
	return s.cfg.Cluster.DeleteTopic(ctx, name)
}

func splitHostPort(addr string) (string, int32, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, fmt.Errorf("kafka address %q: %w", addr, err)
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return "", 0, fmt.Errorf("kafka address %q: port: %w", addr, err)
	}
	return host, int32(p), nil
}
