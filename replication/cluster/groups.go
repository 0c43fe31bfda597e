package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ringlog/ringlog/engine/group"
	"github.com/ringlog/ringlog/engine/shard"
	"github.com/ringlog/ringlog/replication/controller"
)

// Consumer groups on a cluster. __consumer_offsets is a replicated topic the controller
// creates (at the first coordinator lookup, Kafka's auto-creation: OffsetsPartitions
// partitions, replication factor min(OffsetsReplicationFactor, live brokers)); a group's
// coordinator is the leader of its partition, group.PartitionFor(group, N). When this
// broker becomes the leader of an offsets partition (replica.apply) the shard that owns it
// replays the partition's log and serves its groups (shard.Groups.Lead); when it stops
// leading (replica.resign) they are dropped (shard.Groups.Resign). The coordinator's
// writes are acks=all produces to that partition, answered once the high watermark covers
// them, so a commit that was answered is on every ISR member and survives the leader.

// Defaults of the offsets topic (Kafka's offsets.topic.replication.factor is 3).
const (
	offsetsReplicationFactorDefault = 3
	// offsetsCreateTimeout bounds one auto-creation of __consumer_offsets.
	offsetsCreateTimeout = 10 * time.Second
	// offsetsCreateWaitMax: how long after its start a broker waits for the brokers a
	// cluster of its size should have (the voters, the registered brokers) before it
	// creates __consumer_offsets with fewer replicas than offsets.topic.replication.factor.
	offsetsCreateWaitMax = 30 * time.Second
)

// ErrNoCoordinator: a group has no coordinator now (the offsets topic is being created,
// its partition is offline, or its leader is not live): COORDINATOR_NOT_AVAILABLE.
var ErrNoCoordinator = errors.New("group coordinator not available")

// ErrInternalTopic refuses a client's create or delete of __consumer_offsets on a cluster.
var ErrInternalTopic = shard.ErrInternalTopic

// GroupCoordinator returns the broker coordinating groupID: the leader of its
// __consumer_offsets partition in this broker's view of the controller metadata. While the
// topic does not exist it starts creating it and answers ErrNoCoordinator, as it does
// for an offline partition or a leader whose session expired.
func (m *Manager) GroupCoordinator(groupID string) (controller.Broker, error) {
	md := m.ctl.Metadata()
	t := md.Topics[group.OffsetsTopic]
	if t == nil {
		m.createOffsetsTopic()
		return controller.Broker{}, fmt.Errorf("%w: %s is being created", ErrNoCoordinator, group.OffsetsTopic)
	}
	p := group.PartitionFor(groupID, int32(len(t.Partitions)))
	leader := t.Partitions[p].Leader
	b := md.Brokers[leader]
	switch {
	case leader == controller.NoLeader:
		return controller.Broker{}, fmt.Errorf("%w: %s partition %d is offline", ErrNoCoordinator, group.OffsetsTopic, p)
	case b == nil || b.Fenced:
		return controller.Broker{}, fmt.Errorf("%w: the leader of %s partition %d, broker %d, is not live", ErrNoCoordinator, group.OffsetsTopic, p, leader)
	}
	return *b, nil
}

// createOffsetsTopic starts creating __consumer_offsets through the controller unless a
// creation is under way.
func (m *Manager) createOffsetsTopic() {
	if m.b == nil || m.stopped() || !m.creatingOffsets.CompareAndSwap(false, true) {
		return
	}
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		defer m.creatingOffsets.Store(false)
		ctx, cancel := context.WithTimeout(context.Background(), offsetsCreateTimeout)
		defer cancel()
		go func() {
			select {
			case <-m.stop:
				cancel()
			case <-ctx.Done():
			}
		}()
		live, known := int32(0), int32(0)
		for _, b := range m.ctl.Metadata().Brokers {
			known++
			if !b.Fenced {
				live++
			}
		}
		// The factor a cluster of this size should get: a lookup made while the cluster
		// starts (its other brokers not registered yet) waits for them for up to
		// offsetsCreateWaitMax rather than creating the topic with one replica for good
		// (the lookup answers COORDINATOR_NOT_AVAILABLE meanwhile, and clients retry). After
		// that it takes the live brokers, as before.
		want := min(m.cfg.OffsetsReplicationFactor, max(m.voterCount, known, 1))
		if live < want && m.cfg.Now().Sub(m.started) < offsetsCreateWaitMax {
			return
		}
		rf := min(m.cfg.OffsetsReplicationFactor, max(live, 1))
		n := m.cfg.OffsetsPartitions
		_, err := m.Submit(ctx, &controller.Command{Type: controller.CmdCreateTopic, Topic: &controller.TopicRequest{
			Name: group.OffsetsTopic, Partitions: n, ReplicationFactor: rf, Config: shard.OffsetsTopicConfig(),
		}})
		switch {
		case err == nil:
			m.log.Info("created "+group.OffsetsTopic, "partitions", n, "replication_factor", rf, "live_brokers", live)
		case errors.Is(err, controller.ErrTopicExists):
		default:
			m.log.Warn("create "+group.OffsetsTopic, "partitions", n, "replication_factor", rf, "err", err)
		}
	}()
}

// adoptOffsetsTopic makes the broker's group coordinators use the controller topic's
// partition count (reconcile, before any replica of it is applied).
func (m *Manager) adoptOffsetsTopic(t *controller.Topic) bool {
	if err := m.b.Groups().SetOffsetsPartitions(int32(len(t.Partitions))); err != nil {
		m.log.Warn("adopt the partition count of "+group.OffsetsTopic, "partitions", len(t.Partitions), "err", err)
		return false
	}
	return true
}

// groupsLead and groupsResign tell the broker's group coordinators that this broker now
// leads, or no longer leads, a partition of __consumer_offsets.
func (m *Manager) groupsLead(tp shard.TopicPartition) {
	if tp.Topic != group.OffsetsTopic || m.b == nil {
		return
	}
	if err := m.b.Groups().Lead(tp.Partition); err != nil {
		m.log.Warn("load consumer groups", "partition", tp.Partition, "err", err)
	}
}

func (m *Manager) groupsResign(tp shard.TopicPartition) {
	if tp.Topic != group.OffsetsTopic || m.b == nil {
		return
	}
	if err := m.b.Groups().Resign(tp.Partition); err != nil && !errors.Is(err, shard.ErrShuttingDown) {
		m.log.Warn("drop consumer groups", "partition", tp.Partition, "err", err)
	}
}
