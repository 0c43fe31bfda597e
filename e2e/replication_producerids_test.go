package e2e

import (
	"fmt"
	"testing"
	"time"

	"github.com/ringlog/ringlog/netio/client"
	"github.com/ringlog/ringlog/replication/cluster"
	"github.com/ringlog/ringlog/replication/controller"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestReplicationProducerIDsDistinct: on a cluster, producer ids come from blocks the
// controller hands out, so idempotent producers (ringlog and Kafka listeners) whose home
// brokers differ never share an id — before and after restarts of brokers and of the controller leader. With per-broker
// ids, the three producers below (each sequence 0 on the same partition) would collide in
// the partition's duplicate detection and two of the three records would be dropped as
// duplicates.
func TestReplicationProducerIDsDistinct(t *testing.T) {
	tc, kafkaAddrs := startKafkaCluster(t, 3)
	ctx := testContext(t, 3*time.Minute)
	const topic = "pids"
	tc.createReplicated(ctx, topic, nil)

	owner := map[int64]string{} // id -> who got it
	take := func(id int64, who string) {
		t.Helper()
		if id < controller.ProducerIDFloor {
			t.Fatalf("%s got producer id %d, below the controller's floor", who, id)
		}
		if prev, dup := owner[id]; dup {
			t.Fatalf("producer id %d handed out to %s and to %s", id, prev, who)
		}
		owner[id] = who
	}
	round := func(round string) {
		t.Helper()
		for _, b := range tc.brokers {
			c := b.client(t)
			who := fmt.Sprintf("%s node %d", round, tc.idOf(b))
			p := c.NewProducer(client.ProducerConfig{})
			value := []byte(who)
			if _, err := p.SendSync(ctx, &client.Record{Topic: topic, Value: value}); err != nil {
				t.Fatalf("%s: produce: %v", who, err)
			}
			take(p.Identity().ID, who+" producer")
			if err := p.Close(ctx); err != nil {
				t.Fatal(err)
			}
			for i := range 3 {
				id, err := c.InitProducerID(ctx, "", client.ProducerIdentity{ID: -1, Epoch: -1})
				if err != nil {
					t.Fatalf("%s: InitProducerId: %v", who, err)
				}
				take(id.ID, fmt.Sprintf("%s InitProducerId %d", who, i))
			}
			// The Kafka listener's InitProducerId, asked of this broker alone.
			kcl := newKgo(t, []string{kafkaAddrs[tc.idOf(b)-1]})
			resp, err := kmsg.NewPtrInitProducerIDRequest().RequestWith(ctx, kcl.Broker(int(tc.idOf(b))))
			if err == nil {
				err = kerr.ErrorForCode(resp.ErrorCode)
			}
			if err != nil {
				t.Fatalf("%s: Kafka InitProducerId: %v", who, err)
			}
			take(resp.ProducerID, who+" Kafka InitProducerId")
		}
	}
	round("first")

	// Restart a broker (SIGTERM) and kill -9 the controller leader, then ask again.
	leaderID := tc.view(tc.brokers[0]).ControllerLeader
	if leaderID == 0 {
		t.Fatal("no controller leader")
	}
	other := tc.node(leaderID%3 + 1)
	epochs := map[int32]int64{}
	for id, b := range tc.view(tc.brokers[0]).Metadata.Brokers {
		epochs[id] = b.SessionEpoch
	}
	other.stop()
	other.restart()
	tc.node(leaderID).kill()
	survivor := tc.node((leaderID+1)%3 + 1)
	v := tc.waitFor("a new controller leader", func(v *cluster.View) bool {
		return v.ControllerLeader != 0 && v.ControllerLeader != leaderID
	}, survivor)
	t.Logf("controller leader was node %d, now node %d; node %d restarted too", leaderID, v.ControllerLeader, tc.idOf(other))
	tc.node(leaderID).restart()
	tc.waitFor("every broker live again, the restarted ones in new sessions", func(v *cluster.View) bool {
		live := 0
		for id, b := range v.Metadata.Brokers {
			restarted := id == leaderID || id == tc.idOf(other)
			if !b.Fenced && (!restarted || b.SessionEpoch > epochs[id]) {
				live++
			}
		}
		return live == 3 && v.ControllerLeader != 0
	}, survivor)
	round("second")

	// Every record of every producer is in the partition: none was taken for another's
	// duplicate.
	got, _ := readAll(t, tc.c, tc.leader(topic).addr, topic)
	values := map[string]bool{}
	for _, v := range got {
		values[string(v)] = true
	}
	for _, round := range []string{"first", "second"} {
		for id := 1; id <= 3; id++ {
			if who := fmt.Sprintf("%s node %d", round, id); !values[who] {
				t.Fatalf("the record of %s is missing (have %v)", who, values)
			}
		}
	}
}
