package controller

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestCopyOnWriteMatchesInPlace checks the FSM's copy-on-write apply against the simple
// reference (apply writing a private deep copy in place) over a random stream of every
// command type, while readers walk every published state without a lock:
//   - the state and the result are the reference's, command after command;
//   - the state a command was derived from encodes as it did before the command (apply
//     wrote nothing a published snapshot reaches); under -race the readers also make any
//     such write a reported race;
//   - what a command does not change is shared, not copied: after a heartbeat every topic
//     is the same *Topic as before.
func TestCopyOnWriteMatchesInPlace(t *testing.T) {
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(uint64(seed), 0))
	fsm := NewFSM(testSessionMs)

	var stop atomic.Bool
	var readers sync.WaitGroup
	for range 2 {
		readers.Add(1)
		go func() {
			defer readers.Done()
			for !stop.Load() {
				walkMetadata(fsm.Metadata())
			}
		}()
	}
	defer func() {
		stop.Store(true)
		readers.Wait()
	}()

	nowMs := int64(1_000_000)
	commands := 2000
	if testing.Short() || raceEnabled {
		commands = 300
	}
	for i := range commands {
		index := uint64(i + 1)
		nowMs += r.Int64N(testSessionMs / 2)
		c := randomCommand(r, nowMs)
		prev := fsm.Metadata()
		prevEncoding := encodeMetadata(t, prev)

		ref := prev.Clone()
		refValue, refErr := ref.apply(index, &c)
		if c.Type == CmdRegisterBroker && refErr == nil {
			refValue = ref.Brokers[c.Broker.ID].SessionEpoch
		}
		res := fsm.ApplyCommand(index, &c)
		got := fsm.Metadata()

		if encodeMetadata(t, prev) != prevEncoding {
			t.Fatalf("command %d %s wrote the published state it was derived from", index, describe(c))
		}
		if g, w := encodeMetadata(t, got), encodeMetadata(t, ref); g != w {
			t.Fatalf("command %d %s: state\n%s\nwant (applied in place)\n%s", index, describe(c), g, w)
		}
		if fmt.Sprint(res.Err) != fmt.Sprint(refErr) || encode(t, res.Value) != encode(t, refValue) {
			t.Fatalf("command %d %s: result %v %s, want %v %s", index, describe(c), res.Err, encode(t, res.Value), refErr, encode(t, refValue))
		}
		if c.Type == CmdHeartbeat {
			for name, topic := range prev.Topics {
				if got.Topics[name] != topic {
					t.Fatalf("command %d %s copied topic %q, which it does not change", index, describe(c), name)
				}
			}
		}
		checkInvariants(t, got)
	}
}

// randomCommand draws a command of any type over brokers 1-5 and topics a-d, mostly valid.
func randomCommand(r *rand.Rand, nowMs int64) Command {
	broker := int32(1 + r.IntN(5))
	topic := string(rune('a' + r.IntN(4)))
	ids := func() []int32 {
		out := []int32{}
		for id := int32(1); id <= 5; id++ {
			if r.IntN(2) == 0 {
				out = append(out, id)
			}
		}
		return out
	}
	c := Command{Version: CommandVersion, NowMs: nowMs}
	switch r.IntN(12) {
	case 0, 1:
		c.Type = CmdRegisterBroker
		c.Broker = &BrokerRegistration{ID: broker, Address: fmt.Sprintf("127.0.0.1:%d", broker), Rack: fmt.Sprint("r", broker%2)}
	case 2, 3:
		c.Type = CmdHeartbeat
		c.Broker = &BrokerRegistration{ID: broker, SessionEpoch: int64(1 + r.IntN(3))}
	case 4:
		c.Type = CmdExpireSessions
		c.GraceFromMs = nowMs - testSessionMs*int64(r.IntN(3))
	case 5:
		c.Type = CmdCreateTopic
		c.Topic = &TopicRequest{Name: topic, ID: NewTopicID(), Partitions: int32(1 + r.IntN(6)), ReplicationFactor: int32(1 + r.IntN(3)),
			UncleanLeaderElection: r.IntN(3) == 0}
	case 6:
		c.Type = CmdDeleteTopic
		c.Topic = &TopicRequest{Name: topic}
	case 7:
		c.Type = CmdAlterConfig
		c.Topic = &TopicRequest{Name: topic, Config: map[string]string{ConfigUnclean: fmt.Sprint(r.IntN(2) == 0), "retention.ms": fmt.Sprint(r.IntN(100))}}
		if r.IntN(2) == 0 {
			c.Topic.ConfigDeletes = []string{"retention.ms"}
		}
	case 8:
		c.Type = CmdSetUnclean
		c.Topic = &TopicRequest{Name: topic, UncleanLeaderElection: r.IntN(2) == 0}
	case 9:
		// An ISR change from the partition's leader at its epochs (read from no state: the
		// draw guesses, and a wrong guess is a refusal, which must match too).
		c.Type = CmdAlterISR
		c.AlterISR = &AlterISRRequest{Topic: topic, Partition: int32(r.IntN(3)), Leader: broker,
			LeaderEpoch: int32(r.IntN(3)), PartitionEpoch: int32(r.IntN(4)), ISR: append(ids(), broker)}
	case 10:
		c.Type = CmdReassign
		c.Reassign = &ReassignRequest{Topic: topic, Partition: int32(r.IntN(3)), Replicas: ids()}
	default:
		switch r.IntN(3) {
		case 0:
			c.Type = CmdElectPreferred
			c.Reassign = &ReassignRequest{Topic: topic, Partition: int32(r.IntN(3))}
		case 1:
			c.Type = CmdAllocateProducerIDs
			c.ProducerIDs = &ProducerIDsRequest{BrokerID: broker}
		default:
			c.Type = CmdInitProducerName
			c.ProducerName = &ProducerNameRequest{Name: topic, Current: ProducerIdentity{ID: -1, Epoch: -1}}
		}
	}
	return c
}

// walkMetadata reads every field a command can write.
func walkMetadata(md *Metadata) (sum int64) {
	for _, b := range md.Brokers {
		sum += b.LastHeartbeatMs + b.SessionEpoch + int64(len(b.Address))
		if b.Fenced {
			sum++
		}
	}
	for _, t := range md.Topics {
		sum += int64(len(t.Config))
		for k, v := range t.Config {
			sum += int64(len(k) + len(v))
		}
		for _, p := range t.Partitions {
			sum += int64(p.Leader + p.LeaderEpoch + p.PartitionEpoch)
			for _, ids := range [][]int32{p.Replicas, p.TargetReplicas, p.ISR} {
				for _, id := range ids {
					sum += int64(id)
				}
			}
		}
	}
	for _, d := range md.DeletedTopics {
		sum += int64(d.DeletedVersion)
	}
	for _, id := range md.ProducerNames {
		sum += id.ID
	}
	return sum + md.NextProducerID + int64(md.Version) + int64(md.LeaderEpochFloor) + int64(md.FinalizedVersion)
}

func encodeMetadata(t *testing.T, md *Metadata) string { return encode(t, md) }

func encode(t *testing.T, v any) string {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func describe(c Command) string {
	data, _ := json.Marshal(c)
	return string(data)
}
