package netio_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ringlog/ringlog/engine/batch"
	"github.com/ringlog/ringlog/netio"
	"github.com/ringlog/ringlog/netio/client"
	"github.com/ringlog/ringlog/netio/internal/brokertest"
	"github.com/ringlog/ringlog/netio/node"
	"github.com/ringlog/ringlog/netio/security"
	"github.com/ringlog/ringlog/netio/wire"
)

// TestACLs over real sockets, both drivers: with --acl on a principal without a rule can
// neither write, read, list offsets of, describe nor see a topic in metadata; a grant
// opens exactly what it names; a deny beats it; denied entries of a mixed request are
// answered TOPIC_AUTHORIZATION_FAILED while the allowed ones are served.
func TestACLs(t *testing.T) {
	for _, driver := range []string{"net", "ring"} {
		t.Run(driver, func(t *testing.T) { testACLs(t, driver) })
	}
}

func testACLs(t *testing.T, driver string) {
	creds, err := security.OpenCredentials(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	addUser(t, creds, "admin", testPassword)
	addUser(t, creds, "alice", testPassword)
	authz, err := security.OpenAuthorizer(t.TempDir(), true, []string{"User:admin"})
	if err != nil {
		t.Fatal(err)
	}
	log := &logBuffer{}
	rb := brokertest.Start(t, brokertest.Options{Driver: driver, ShardListeners: true,
		Client: client.Config{SASL: &client.SASLConfig{User: "admin", Password: testPassword}},
		Node: func(cfg *node.Config) {
			cfg.Server.Security = &netio.Security{Credentials: creds, AuthRequired: true, Authorizer: authz}
			cfg.Server.Logf = log.logf
		}})
	admin := rb.Client
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, topic := range []string{"orders-eu", "orders-us", "payroll"} {
		produceAndFetch(t, ctx, admin, topic)
	}
	alice, err := client.New(ctx, client.Config{Broker: rb.Addr, SASL: &client.SASLConfig{User: "alice", Password: testPassword}})
	if err != nil {
		t.Fatal(err)
	}
	defer alice.Close()

	// No rule: nothing.
	checkAccess(t, ctx, alice, "orders-eu", access{})
	if _, err := alice.InitProducerID(ctx, "", client.ProducerIdentity{ID: -1, Epoch: -1}); !errors.Is(err, wire.ErrClusterAuthorizationFailed) {
		t.Fatalf("init producer id without any write grant: %v", err)
	}
	if err := alice.CreateTopic(ctx, "mine", 1, nil); !errors.Is(err, wire.ErrTopicAuthorizationFailed) {
		t.Fatalf("create without a grant: %v", err)
	}

	// Groups and the broker-to-broker APIs are checked as a whole request.
	denied := []struct {
		req, resp wire.Message
		want      wire.ErrorCode
	}{
		{&wire.JoinGroupRequest{Group: "g", ProtocolType: "consumer", SessionTimeoutMs: 10000, RebalanceTimeoutMs: 10000,
			Protocols: []wire.GroupProtocol{{Name: "range"}}}, &wire.JoinGroupResponse{}, wire.ErrGroupAuthorizationFailed},
		{&wire.OffsetFetchRequest{Group: "g"}, &wire.OffsetFetchResponse{}, wire.ErrGroupAuthorizationFailed},
		{&wire.DeleteGroupsRequest{Groups: []string{"g"}}, &wire.DeleteGroupsResponse{}, wire.ErrGroupAuthorizationFailed},
		{&wire.ListGroupsRequest{}, &wire.ListGroupsResponse{}, wire.ErrClusterAuthorizationFailed},
		{&wire.ReplicaFetchRequest{ReplicaID: 2, Topics: []wire.ReplicaFetchTopic{{Topic: "payroll",
			Partitions: []wire.ReplicaFetchPartition{{MaxBytes: 1 << 20}}}}}, &wire.ReplicaFetchResponse{}, wire.ErrClusterAuthorizationFailed},
		{&wire.ControllerRequest{Op: wire.ControllerMetadata}, &wire.ControllerResponse{}, wire.ErrClusterAuthorizationFailed},
	}
	for _, d := range denied {
		if err := alice.Call(ctx, rb.Addr, d.req, d.resp); !errors.Is(err, d.want) {
			t.Fatalf("%s without a grant: %v, want %s", d.req.API(), err, d.want)
		}
	}
	if err := admin.CreateACLs(ctx, wire.ACLBinding{ResourceType: wire.ACLResourceGroup, ResourceName: "g", PatternType: wire.ACLPatternLiteral,
		Principal: "User:alice", Operation: wire.ACLOperationRead, Permission: wire.ACLPermissionAllow}); err != nil {
		t.Fatal(err)
	}
	var offsets wire.OffsetFetchResponse
	if err := alice.Call(ctx, rb.Addr, &wire.OffsetFetchRequest{Group: "g"}, &offsets); err != nil {
		t.Fatalf("offset fetch with a read grant on the group: %v", err)
	}

	// Prefix grant for orders-*, with a deny on orders-us.
	grant := func(perm int8, name string, pattern int8, ops ...int8) {
		for _, op := range ops {
			if err := admin.CreateACLs(ctx, wire.ACLBinding{ResourceType: wire.ACLResourceTopic, ResourceName: name, PatternType: pattern,
				Principal: "User:alice", Operation: op, Permission: perm}); err != nil {
				t.Fatal(err)
			}
		}
	}
	grant(wire.ACLPermissionAllow, "orders-", wire.ACLPatternPrefixed, wire.ACLOperationRead, wire.ACLOperationWrite)
	grant(wire.ACLPermissionDeny, "orders-us", wire.ACLPatternLiteral, wire.ACLOperationAll)
	checkAccess(t, ctx, alice, "orders-eu", access{read: true, write: true, describe: true})
	checkAccess(t, ctx, alice, "orders-us", access{})
	checkAccess(t, ctx, alice, "payroll", access{})
	if _, err := alice.InitProducerID(ctx, "", client.ProducerIdentity{ID: -1, Epoch: -1}); err != nil {
		t.Fatalf("init producer id with a write grant: %v", err)
	}

	// One fetch naming an allowed and a denied topic: served and refused side by side.
	var resp wire.FetchResponse
	req := &wire.FetchRequest{MaxBytes: 1 << 20, Topics: []wire.FetchTopic{
		{Topic: "payroll", Partitions: []wire.FetchPartition{{MaxBytes: 1 << 20}}},
		{Topic: "orders-eu", Partitions: []wire.FetchPartition{{MaxBytes: 1 << 20}}},
	}}
	if err := alice.Call(ctx, rb.Addr, req, &resp); err != nil {
		t.Fatal(err)
	}
	codes := map[string]wire.ErrorCode{}
	for _, tp := range resp.Topics {
		codes[tp.Topic] = tp.Partitions[0].ErrorCode
	}
	if len(codes) != 2 || codes["orders-eu"] != wire.ErrNone || codes["payroll"] != wire.ErrTopicAuthorizationFailed {
		t.Fatalf("mixed fetch: %v", codes)
	}

	// Removing the grants takes the access away again.
	if _, err := admin.DeleteACLs(ctx, wire.ACLBinding{Principal: "User:alice"}); err != nil {
		t.Fatal(err)
	}
	checkAccess(t, ctx, alice, "orders-eu", access{})
	checkNoSecrets(t, log.String(), creds, "alice")
}

type access struct{ read, write, describe bool }

// checkAccess checks what c may do with topic: produce, fetch, list offsets and see it in
// metadata (listed, and by name).
func checkAccess(t *testing.T, ctx context.Context, c *client.Client, topic string, want access) {
	t.Helper()
	var pr wire.ProduceResponse
	preq := &wire.ProduceRequest{Acks: wire.AcksLeader, Topics: []wire.ProduceTopic{{Topic: topic, Partitions: []wire.ProducePartition{{Records: oneBatch(t)}}}}}
	if err := c.Call(ctx, c.BrokerAddr(), preq, &pr); err != nil {
		t.Fatal(err)
	}
	if got := pr.Topics[0].Partitions[0].ErrorCode; (got == wire.ErrNone) != want.write || got != wire.ErrNone && got != wire.ErrTopicAuthorizationFailed {
		t.Errorf("produce to %s: %s, want allowed=%v", topic, got.Name(), want.write)
	}
	var fr wire.FetchResponse
	freq := &wire.FetchRequest{MaxBytes: 1 << 20, Topics: []wire.FetchTopic{{Topic: topic, Partitions: []wire.FetchPartition{{MaxBytes: 1 << 20}}}}}
	if err := c.Call(ctx, c.BrokerAddr(), freq, &fr); err != nil {
		t.Fatal(err)
	}
	if got := fr.Topics[0].Partitions[0]; (got.ErrorCode == wire.ErrNone) != want.read || !want.read && len(got.Records) != 0 {
		t.Errorf("fetch from %s: %s with %d bytes, want allowed=%v", topic, got.ErrorCode.Name(), len(got.Records), want.read)
	}
	_, err := c.ListOffset(ctx, topic, 0, wire.TimestampLatest)
	if (err == nil) != want.describe {
		t.Errorf("list offsets of %s: %v, want allowed=%v", topic, err, want.describe)
	}
	topics, err := c.ListTopics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	listed := false
	for _, ti := range topics {
		listed = listed || ti.Name == topic
	}
	if listed != want.describe {
		t.Errorf("metadata lists %s: %v, want %v", topic, listed, want.describe)
	}
	var md wire.MetadataResponse
	if err := c.Call(ctx, c.BrokerAddr(), &wire.MetadataRequest{Topics: []string{topic}}, &md); err != nil {
		t.Fatal(err)
	}
	if got := md.Topics[0]; (got.ErrorCode == wire.ErrNone) != want.describe || !want.describe && len(got.Partitions) != 0 {
		t.Errorf("metadata for %s: %s, %d partitions, want allowed=%v", topic, got.ErrorCode.Name(), len(got.Partitions), want.describe)
	}
	described, err := c.DescribeTopics(ctx) // every topic
	if err != nil {
		t.Fatal(err)
	}
	shown := false
	for _, d := range described {
		shown = shown || d.Topic == topic
	}
	if shown != want.describe {
		t.Errorf("describe-topics of every topic shows %s: %v, want %v", topic, shown, want.describe)
	}
	if _, err := c.DescribeTopics(ctx, topic); (err == nil) != want.describe || err != nil && !errors.Is(err, wire.ErrTopicAuthorizationFailed) {
		t.Errorf("describe-topics of %s: %v, want allowed=%v", topic, err, want.describe)
	}
}

// oneBatch is a one-record batch.
func oneBatch(t *testing.T) []byte {
	t.Helper()
	b := batch.NewBuilder(batch.BuilderOptions{})
	b.Append(1, nil, []byte("acl"), nil)
	out, err := b.Build(nil)
	if err != nil {
		t.Fatal(err)
	}
	return out
}
