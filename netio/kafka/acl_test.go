package kafka_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/ringlog/ringlog/engine/batch"
	"github.com/ringlog/ringlog/netio"
	"github.com/ringlog/ringlog/netio/internal/brokertest"
	"github.com/ringlog/ringlog/netio/node"
	"github.com/ringlog/ringlog/netio/security"
	"github.com/ringlog/ringlog/netio/security/securitytest"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	kscram "github.com/twmb/franz-go/pkg/sasl/scram"
)

// aclBroker is a broker with ACLs on (super-user "admin") and SCRAM users admin, alice
// and bob, all with saslPassword.
type aclBroker struct {
	*brokertest.Broker
	az *security.Authorizer
}

func startKafkaACL(t *testing.T, tune func(*netio.Security)) aclBroker {
	t.Helper()
	creds, err := security.OpenCredentials(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range []string{"admin", "alice", "bob"} {
		securitytest.AddUser(t, creds, u, saslPassword)
	}
	az, err := security.OpenAuthorizer(t.TempDir(), true, []string{"User:admin"})
	if err != nil {
		t.Fatal(err)
	}
	b := startKafka(t, brokertest.Options{NoClient: true, Node: func(cfg *node.Config) {
		cfg.Server.Security = &netio.Security{Credentials: creds, AuthRequired: true, Authorizer: az}
		if tune != nil {
			tune(cfg.Server.Security)
		}
	}})
	return aclBroker{b, az}
}

// as is a kgo client logged in as user (SCRAM-SHA-256).
func (b aclBroker) as(t *testing.T, user string, opts ...kgo.Opt) *kgo.Client {
	login := kgo.SASL(kscram.Auth{User: user, Pass: saslPassword}.AsSha256Mechanism())
	return newClient(t, b.Broker, append([]kgo.Opt{login}, opts...)...)
}

func (b aclBroker) allow(t *testing.T, acls ...security.ACL) {
	t.Helper()
	if err := b.az.Add(acls); err != nil {
		t.Fatal(err)
	}
}

func rule(perm security.Permission, principal string, op security.Operation, rt security.ResourceType, name string, pattern security.PatternType) security.ACL {
	return security.ACL{Resource: rt, Name: name, Pattern: pattern, Principal: principal, Operation: op, Permission: perm}
}

// direct sends req to the broker itself (node 0), bypassing kgo's per-partition routing,
// which needs metadata a denied principal does not get.
func direct(t *testing.T, cl *kgo.Client, req kmsg.Request) kmsg.Response {
	t.Helper()
	ctx := testContext(t)
	if _, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl); err != nil { // learns the broker
		t.Fatal(err)
	}
	resp, err := cl.Broker(0).Request(ctx, req)
	if err != nil {
		t.Fatalf("%s: %v", kmsg.NameForKey(req.Key()), err)
	}
	return resp
}

// oneRecordBatch is a record batch of one record.
func oneRecordBatch(t *testing.T) []byte {
	t.Helper()
	b := batch.NewBuilder(batch.BuilderOptions{})
	b.Append(time.Now().UnixMilli(), nil, []byte("v"), nil)
	records, err := b.Build(nil)
	if err != nil {
		t.Fatal(err)
	}
	return records
}

func produceReq(records []byte, topics ...string) *kmsg.ProduceRequest {
	req := kmsg.NewPtrProduceRequest()
	req.Acks, req.TimeoutMillis = -1, 5000
	for _, topic := range topics {
		rt := kmsg.NewProduceRequestTopic()
		rt.Topic = topic
		rp := kmsg.NewProduceRequestTopicPartition()
		rp.Records = records
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
	}
	return req
}

// produceCodes maps each topic of a produce response to its first partition's code.
func produceCodes(resp kmsg.Response) map[string]int16 {
	out := map[string]int16{}
	for _, rt := range resp.(*kmsg.ProduceResponse).Topics {
		out[rt.Topic] = rt.Partitions[0].ErrorCode
	}
	return out
}

func fetchReq(topic string) *kmsg.FetchRequest {
	req := kmsg.NewPtrFetchRequest()
	req.MaxWaitMillis, req.MaxBytes, req.SessionEpoch = 10, 1<<20, -1
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.PartitionMaxBytes = 1 << 20
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	return req
}

func metadataTopics(t *testing.T, cl *kgo.Client, names ...string) map[string]int16 {
	t.Helper()
	req := kmsg.NewPtrMetadataRequest()
	for _, n := range names {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(n)
		req.Topics = append(req.Topics, rt)
	}
	resp, err := req.RequestWith(testContext(t), cl)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int16{}
	for _, rt := range resp.Topics {
		out[*rt.Topic] = rt.ErrorCode
	}
	return out
}

func mapHas(m map[string]int16, k string) bool { _, ok := m[k]; return ok }

func wantCode(t *testing.T, what string, got, want int16) {
	t.Helper()
	if got != want {
		t.Errorf("%s: code %d (%v), want %d (%v)", what, got, kerr.ErrorForCode(got), want, kerr.ErrorForCode(want))
	}
}

// TestKgoACLTopics: with ACLs on, a principal without an ACL cannot produce, fetch, list
// offsets of, create, delete or describe a topic, nor see it in Metadata, and gets
// TOPIC_AUTHORIZATION_FAILED (29) — through kgo's own producer and consumer as well as
// per request; with an ACL it can; entries of one request are decided one by one; a deny
// rule beats an allow rule.
func TestKgoACLTopics(t *testing.T) {
	b := startKafkaACL(t, nil)
	admin, alice, bob := b.as(t, "admin"), b.as(t, "alice"), b.as(t, "bob", kgo.RequestRetries(0))
	createTopic(t, admin, "orders", 1)
	createTopic(t, admin, "secret", 1)
	b.allow(t,
		rule(security.Allow, "User:alice", security.OpWrite, security.ResourceTopic, "orders", security.PatternLiteral),
		rule(security.Allow, "User:alice", security.OpRead, security.ResourceTopic, "orders", security.PatternLiteral))

	// Without an ACL: kgo's producer fails on the topic's metadata, with code 29.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := bob.ProduceSync(ctx, &kgo.Record{Topic: "orders", Value: []byte("x")}).FirstErr()
	if !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Fatalf("bob's kgo produce: %v, want TOPIC_AUTHORIZATION_FAILED", err)
	}
	if got := metadataTopics(t, bob); len(got) != 0 {
		t.Errorf("bob's Metadata for every topic lists %v, want none", got)
	}
	wantCode(t, "bob: Metadata orders", metadataTopics(t, bob, "orders")["orders"], kerr.TopicAuthorizationFailed.Code)
	md := kmsg.NewPtrMetadataRequest()
	md.Topics = []kmsg.MetadataRequestTopic{{Topic: kmsg.StringPtr("orders")}}
	if resp := direct(t, bob, md).(*kmsg.MetadataResponse); len(resp.Brokers) != 1 || len(resp.Topics) != 1 {
		t.Errorf("bob's Metadata naming only a denied topic: %d brokers, %d topics; want the broker and the denied topic", len(resp.Brokers), len(resp.Topics))
	}
	wantCode(t, "bob: Metadata of a topic that does not exist", metadataTopics(t, bob, "nope")["nope"], kerr.TopicAuthorizationFailed.Code)
	records := oneRecordBatch(t)
	wantCode(t, "bob: Produce", produceCodes(direct(t, bob, produceReq(records, "orders")))["orders"], kerr.TopicAuthorizationFailed.Code)
	wantCode(t, "bob: Fetch", direct(t, bob, fetchReq("orders")).(*kmsg.FetchResponse).Topics[0].Partitions[0].ErrorCode, kerr.TopicAuthorizationFailed.Code)
	lo := kmsg.NewPtrListOffsetsRequest()
	lo.Topics = []kmsg.ListOffsetsRequestTopic{{Topic: "orders", Partitions: []kmsg.ListOffsetsRequestTopicPartition{{Timestamp: -1}}}}
	wantCode(t, "bob: ListOffsets", direct(t, bob, lo).(*kmsg.ListOffsetsResponse).Topics[0].Partitions[0].ErrorCode, kerr.TopicAuthorizationFailed.Code)
	ole := kmsg.NewPtrOffsetForLeaderEpochRequest()
	ole.Topics = []kmsg.OffsetForLeaderEpochRequestTopic{{Topic: "orders", Partitions: []kmsg.OffsetForLeaderEpochRequestTopicPartition{{CurrentLeaderEpoch: -1}}}}
	wantCode(t, "bob: OffsetForLeaderEpoch", direct(t, bob, ole).(*kmsg.OffsetForLeaderEpochResponse).Topics[0].Partitions[0].ErrorCode, kerr.TopicAuthorizationFailed.Code)
	ct := kmsg.NewPtrCreateTopicsRequest()
	ct.Topics = []kmsg.CreateTopicsRequestTopic{{Topic: "bobs", NumPartitions: 1, ReplicationFactor: 1}}
	wantCode(t, "bob: CreateTopics", direct(t, bob, ct).(*kmsg.CreateTopicsResponse).Topics[0].ErrorCode, kerr.TopicAuthorizationFailed.Code)
	dt := kmsg.NewPtrDeleteTopicsRequest()
	dt.Version, dt.TopicNames = 5, []string{"orders"}
	wantCode(t, "bob: DeleteTopics", direct(t, bob, dt).(*kmsg.DeleteTopicsResponse).Topics[0].ErrorCode, kerr.TopicAuthorizationFailed.Code)
	dc := kmsg.NewPtrDescribeConfigsRequest()
	dc.Resources = []kmsg.DescribeConfigsRequestResource{{ResourceType: kmsg.ConfigResourceTypeTopic, ResourceName: "orders"}, {ResourceType: kmsg.ConfigResourceTypeBroker, ResourceName: "0"}}
	dcr := direct(t, bob, dc).(*kmsg.DescribeConfigsResponse)
	wantCode(t, "bob: DescribeConfigs topic", dcr.Resources[0].ErrorCode, kerr.TopicAuthorizationFailed.Code)
	wantCode(t, "bob: DescribeConfigs broker", dcr.Resources[1].ErrorCode, kerr.ClusterAuthorizationFailed.Code)
	ip := kmsg.NewPtrInitProducerIDRequest()
	wantCode(t, "bob: InitProducerId", direct(t, bob, ip).(*kmsg.InitProducerIDResponse).ErrorCode, kerr.ClusterAuthorizationFailed.Code)

	// With the ACLs: kgo's idempotent producer (InitProducerId: Write on some topic) and
	// consumer work, Metadata lists the topic alone.
	if err := alice.ProduceSync(testContext(t), &kgo.Record{Topic: "orders", Value: []byte("hello")}).FirstErr(); err != nil {
		t.Fatalf("alice's kgo produce: %v", err)
	}
	if r := consume(t, b.Broker, "orders", 1, kgo.SASL(kscram.Auth{User: "alice", Pass: saslPassword}.AsSha256Mechanism())); string(r[0].Value) != "hello" {
		t.Fatalf("alice consumed %q", r[0].Value)
	}
	if got := metadataTopics(t, alice); len(got) != 1 || got["orders"] != 0 {
		t.Errorf("alice's Metadata for every topic: %v, want orders alone", got)
	}
	if got := metadataTopics(t, admin); !mapHas(got, "orders") || !mapHas(got, "secret") {
		t.Errorf("the super-user's Metadata for every topic: %v, want orders and secret", got)
	}
	// One request, two topics: each decided on its own.
	codes := produceCodes(direct(t, alice, produceReq(records, "secret", "orders")))
	wantCode(t, "alice: Produce orders beside secret", codes["orders"], 0)
	wantCode(t, "alice: Produce secret beside orders", codes["secret"], kerr.TopicAuthorizationFailed.Code)

	// Deny beats allow: a prefixed deny for alice, and an allow for everyone that bob's own
	// deny overrides.
	b.allow(t,
		rule(security.Deny, "User:alice", security.OpWrite, security.ResourceTopic, "ord", security.PatternPrefixed),
		rule(security.Allow, security.AnyPrincipal, security.OpRead, security.ResourceTopic, "orders", security.PatternLiteral),
		rule(security.Deny, "User:bob", security.OpRead, security.ResourceTopic, "*", security.PatternLiteral))
	wantCode(t, "alice: Produce after a deny", produceCodes(direct(t, alice, produceReq(records, "orders")))["orders"], kerr.TopicAuthorizationFailed.Code)
	wantCode(t, "alice: Fetch (still allowed)", direct(t, alice, fetchReq("orders")).(*kmsg.FetchResponse).Topics[0].Partitions[0].ErrorCode, 0)
	wantCode(t, "bob: Fetch under User:* allow and his deny", direct(t, bob, fetchReq("orders")).(*kmsg.FetchResponse).Topics[0].Partitions[0].ErrorCode, kerr.TopicAuthorizationFailed.Code)
}

// TestKgoACLGroups: group APIs need Read (join, sync, heartbeat, leave, commit) or
// Describe (find the coordinator, fetch offsets, describe) on the group and answer
// GROUP_AUTHORIZATION_FAILED (30) without; ListGroups lists the groups a principal without
// Describe on the cluster may describe; a kgo group consumer with the ACLs consumes and
// commits.
func TestKgoACLGroups(t *testing.T) {
	b := startKafkaACL(t, nil)
	admin, alice, bob := b.as(t, "admin"), b.as(t, "alice"), b.as(t, "bob", kgo.RequestRetries(0))
	createTopic(t, admin, "events", 1)
	if err := admin.ProduceSync(testContext(t), &kgo.Record{Topic: "events", Value: []byte("e1")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	b.allow(t,
		rule(security.Allow, "User:alice", security.OpRead, security.ResourceTopic, "events", security.PatternLiteral),
		rule(security.Allow, "User:alice", security.OpRead, security.ResourceGroup, "billing", security.PatternLiteral),
		rule(security.Allow, "User:bob", security.OpRead, security.ResourceTopic, "events", security.PatternLiteral))

	// kgo's group consumer, as alice: join, sync, heartbeat, fetch and commit pass.
	m := newGroupMember(t, b.Broker, "billing", "events", kgo.SASL(kscram.Auth{User: "alice", Pass: saslPassword}.AsSha256Mechanism()))
	defer m.cl.Close()
	m.pollUntil(testContext(t), t, func() bool { return m.count() >= 1 })
	if m.count() < 1 {
		t.Fatal("alice's group consumer got nothing")
	}
	if err := m.cl.CommitUncommittedOffsets(testContext(t)); err != nil {
		t.Fatalf("alice commits in billing: %v", err)
	}

	fc := kmsg.NewPtrFindCoordinatorRequest()
	fc.CoordinatorKeys = []string{"billing"}
	wantCode(t, "bob: FindCoordinator", direct(t, bob, fc).(*kmsg.FindCoordinatorResponse).Coordinators[0].ErrorCode, kerr.GroupAuthorizationFailed.Code)
	jg := kmsg.NewPtrJoinGroupRequest()
	jg.Group, jg.ProtocolType, jg.SessionTimeoutMillis, jg.RebalanceTimeoutMillis = "billing", "consumer", 10000, 10000
	jg.Protocols = []kmsg.JoinGroupRequestProtocol{{Name: "range", Metadata: []byte{}}}
	wantCode(t, "bob: JoinGroup", direct(t, bob, jg).(*kmsg.JoinGroupResponse).ErrorCode, kerr.GroupAuthorizationFailed.Code)
	hb := kmsg.NewPtrHeartbeatRequest()
	hb.Group = "billing"
	wantCode(t, "bob: Heartbeat", direct(t, bob, hb).(*kmsg.HeartbeatResponse).ErrorCode, kerr.GroupAuthorizationFailed.Code)
	oc := kmsg.NewPtrOffsetCommitRequest()
	oc.Group, oc.Generation = "billing", -1
	oc.Topics = []kmsg.OffsetCommitRequestTopic{{Topic: "events", Partitions: []kmsg.OffsetCommitRequestTopicPartition{{Offset: 0}}}}
	wantCode(t, "bob: OffsetCommit", direct(t, bob, oc).(*kmsg.OffsetCommitResponse).Topics[0].Partitions[0].ErrorCode, kerr.GroupAuthorizationFailed.Code)
	of := kmsg.NewPtrOffsetFetchRequest()
	of.Group = "billing"
	wantCode(t, "bob: OffsetFetch", direct(t, bob, of).(*kmsg.OffsetFetchResponse).ErrorCode, kerr.GroupAuthorizationFailed.Code)
	dg := kmsg.NewPtrDescribeGroupsRequest()
	dg.Groups = []string{"billing"}
	wantCode(t, "bob: DescribeGroups", direct(t, bob, dg).(*kmsg.DescribeGroupsResponse).Groups[0].ErrorCode, kerr.GroupAuthorizationFailed.Code)

	listed := func(cl *kgo.Client) []string {
		resp := direct(t, cl, kmsg.NewPtrListGroupsRequest()).(*kmsg.ListGroupsResponse)
		var out []string
		for _, g := range resp.Groups {
			out = append(out, g.Group)
		}
		return out
	}
	if got := listed(bob); len(got) != 0 {
		t.Errorf("bob's ListGroups: %v, want none", got)
	}
	if got := listed(alice); !slices.Contains(got, "billing") {
		t.Errorf("alice's ListGroups: %v, want billing", got)
	}
	// alice may commit in billing, but not offsets of a topic she may not read.
	oc.Topics[0].Topic = "secret"
	wantCode(t, "alice: OffsetCommit of an unreadable topic", direct(t, alice, oc).(*kmsg.OffsetCommitResponse).Topics[0].Partitions[0].ErrorCode, kerr.TopicAuthorizationFailed.Code)
}
