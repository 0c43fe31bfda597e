package e2e

import (
	"errors"
	"testing"
	"time"

	"github.com/ringlog/ringlog/netio/client"
	"github.com/ringlog/ringlog/netio/wire"
	"github.com/ringlog/ringlog/replication/cluster"
)

// TestReplicationProducerNamesFenced: a producer name is kept by the controller, so the
// same name initialised at broker A and then at broker B is one id at the next epoch, and
// the producer that took it at A is fenced by the partition's leader (a third broker)
// even though the new instance never wrote there. The name keeps its id across a kill -9
// of the controller leader.
func TestReplicationProducerNamesFenced(t *testing.T) {
	tc := startCluster(t, 3)
	ctx := testContext(t, 3*time.Minute)
	const topic, name = "named", "billing-writer"
	tc.createReplicated(ctx, topic, nil)
	leader := tc.leader(topic)
	others := tc.followers(leader)
	if leader == nil || len(others) != 2 {
		t.Fatalf("leader %v, followers %d", leader, len(others))
	}
	a, b := others[0], others[1]

	first := a.client(t).NewProducer(client.ProducerConfig{Name: name})
	if _, err := first.SendSync(ctx, &client.Record{Topic: topic, Value: []byte("first, before")}); err != nil {
		t.Fatalf("first producer (home node %d): %v", tc.idOf(a), err)
	}
	old := first.Identity()

	bc := b.client(t)
	id, err := bc.InitProducerID(ctx, name, client.ProducerIdentity{ID: -1, Epoch: -1})
	if err != nil {
		t.Fatalf("InitProducerId %q at node %d: %v", name, tc.idOf(b), err)
	}
	if id.ID != old.ID || id.Epoch != old.Epoch+1 {
		t.Fatalf("%q at node %d: %+v, at node %d before: %+v; want the same id one epoch later", name, tc.idOf(b), id, tc.idOf(a), old)
	}
	// The leader fences once its view of the metadata holds the new epoch.
	tc.waitFor("the leader's metadata holds the new epoch", func(v *cluster.View) bool {
		return v.Metadata.ProducerNames[name].Epoch == id.Epoch
	}, leader)
	_, err = first.SendSync(ctx, &client.Record{Topic: topic, Value: []byte("first, after")})
	if !errors.Is(err, client.ErrFenced) || !errors.Is(err, wire.ErrInvalidProducerEpoch) {
		t.Fatalf("first producer's write after the name moved to node %d: %v; want it fenced", tc.idOf(b), err)
	}
	t.Logf("producer %q: id %d epoch %d at node %d, epoch %d at node %d; leader node %d fenced the first: %v",
		name, old.ID, old.Epoch, tc.idOf(a), id.Epoch, tc.idOf(b), tc.idOf(leader), err)

	// The name survives the controller leader's kill -9: the next init anywhere is the same
	// id at the next epoch.
	ctlLeader := tc.view(a).ControllerLeader
	tc.node(ctlLeader).kill()
	var survivor *broker
	for _, x := range tc.brokers {
		if x != tc.node(ctlLeader) {
			survivor = x
		}
	}
	tc.waitFor("a new controller leader", func(v *cluster.View) bool {
		return v.ControllerLeader != 0 && v.ControllerLeader != ctlLeader
	}, survivor)
	again, err := survivor.client(t).InitProducerID(ctx, name, client.ProducerIdentity{ID: -1, Epoch: -1})
	if err != nil || again.ID != id.ID || again.Epoch != id.Epoch+1 {
		t.Fatalf("InitProducerId %q after the controller leader's kill: %+v %v; want id %d epoch %d", name, again, err, id.ID, id.Epoch+1)
	}
}
