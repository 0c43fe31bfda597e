package controller

import (
	"fmt"
	"testing"
)

// BenchmarkFSMApply: what one applied command costs the state machine with a topic of
// 10,000 partitions beside it (three brokers, replication factor 3) — a heartbeat, which
// changes one broker, and an ISR change (shrink and expand in turn), which changes one
// partition of the big topic. (Raft and the JSON decode of the log entry are not in it.)
func BenchmarkFSMApply(b *testing.B) {
	for _, partitions := range []int32{16, 10000} {
		setup := func(b *testing.B) (*FSM, uint64) {
			fsm := NewFSM(1 << 40)
			index := uint64(0)
			apply := func(c Command) Result {
				index++
				res := fsm.ApplyCommand(index, &c)
				if res.Err != nil {
					b.Fatalf("%+v: %v", c, res.Err)
				}
				return res
			}
			for id := int32(1); id <= 3; id++ {
				apply(Command{Type: CmdRegisterBroker, Broker: &BrokerRegistration{ID: id, Address: "127.0.0.1:1"}})
			}
			apply(Command{Type: CmdCreateTopic, Topic: &TopicRequest{Name: "big", Partitions: partitions, ReplicationFactor: 3}})
			return fsm, index
		}
		b.Run(fmt.Sprintf("command=heartbeat/partitions=%d", partitions), func(b *testing.B) {
			fsm, index := setup(b)
			epoch := fsm.Metadata().Brokers[1].SessionEpoch
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				index++
				c := Command{Type: CmdHeartbeat, NowMs: int64(i), Broker: &BrokerRegistration{ID: 1, SessionEpoch: epoch}}
				if res := fsm.ApplyCommand(index, &c); res.Err != nil {
					b.Fatal(res.Err)
				}
			}
		})
		b.Run(fmt.Sprintf("command=alter-isr/partitions=%d", partitions), func(b *testing.B) {
			fsm, index := setup(b)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				p := fsm.Metadata().Topics["big"].Partitions[partitions/2]
				isr := p.Replicas
				if len(p.ISR) == len(p.Replicas) {
					isr = []int32{p.Leader}
				}
				index++
				c := Command{Type: CmdAlterISR, AlterISR: &AlterISRRequest{Topic: "big", Partition: p.Index, Leader: p.Leader,
					LeaderEpoch: p.LeaderEpoch, PartitionEpoch: p.PartitionEpoch, ISR: isr}}
				if res := fsm.ApplyCommand(index, &c); res.Err != nil {
					b.Fatal(res.Err)
				}
			}
		})
	}
}
