package kafka_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/ringlog/ringlog/netio/internal/brokertest"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// strayJoin sends a new member's JoinGroup (kmsg picks v4+ against this broker) and
// abandons it: the member never comes back, as a client whose first join was cut short.
func strayJoin(ctx context.Context, t *testing.T, cl *kgo.Client, group, topic string) *kmsg.JoinGroupResponse {
	t.Helper()
	meta := kmsg.NewConsumerMemberMetadata()
	meta.Topics = []string{topic}
	req := kmsg.NewPtrJoinGroupRequest()
	req.Group, req.ProtocolType = group, "consumer"
	req.SessionTimeoutMillis, req.RebalanceTimeoutMillis = 300_000, 300_000 // a stray must not be waited for
	req.Protocols = []kmsg.JoinGroupRequestProtocol{{Name: "cooperative-sticky", Metadata: meta.AppendTo(nil)}, {Name: "range", Metadata: meta.AppendTo(nil)}}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func describeMembers(ctx context.Context, t *testing.T, cl *kgo.Client, group string) (string, []string) {
	t.Helper()
	req := kmsg.NewPtrDescribeGroupsRequest()
	req.Groups = []string{group}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil || len(resp.Groups) != 1 {
		t.Fatalf("DescribeGroups: %v", err)
	}
	var ids []string
	for _, m := range resp.Groups[0].Members {
		ids = append(ids, m.MemberID)
	}
	slices.Sort(ids)
	return resp.Groups[0].State, ids
}

// TestKafkaMemberIDRequired (KIP-394): a JoinGroup v4+ without a member id is answered
// MEMBER_ID_REQUIRED (79) with an id and adds no member, so an abandoned first join leaves
// nothing in the group, and a later rebalance completes without waiting for it. Before,
// the stray became a member at once: the group formed a generation around it (and gave it
// partitions) and the next rebalance waited for it until its session or rebalance timeout.
func TestKafkaMemberIDRequired(t *testing.T) {
	b := startKafka(t, brokertest.Options{})
	admin := newClient(t, b)
	ctx := testContext(t)
	createTopic(t, admin, "mir", 2)

	resp := strayJoin(ctx, t, admin, "mir-empty", "mir")
	if resp.ErrorCode != kerr.MemberIDRequired.Code || resp.MemberID == "" {
		t.Fatalf("first JoinGroup v%d: code %d, member %q; want MEMBER_ID_REQUIRED with an id", resp.Version, resp.ErrorCode, resp.MemberID)
	}
	if state, ids := describeMembers(ctx, t, admin, "mir-empty"); state != "Empty" || len(ids) != 0 {
		t.Fatalf("after an abandoned first join the group is %s with members %v; want Empty, none", state, ids)
	}

	// A kgo member forms the group; a stray's first join costs nothing; a second kgo member
	// joins and the rebalance completes with exactly the two.
	first := newGroupMember(t, b, "mir-g", "mir")
	defer first.cl.Close()
	waitStable := func(want int) []string {
		t.Helper()
		for {
			pollCtx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
			first.cl.PollRecords(pollCtx, 10)
			cancel()
			state, ids := describeMembers(ctx, t, admin, "mir-g")
			if state == "Stable" && len(ids) == want {
				return ids
			}
			if ctx.Err() != nil {
				t.Fatalf("group is %s with members %v; want Stable with %d", state, ids, want)
			}
		}
	}
	one := waitStable(1)
	if resp := strayJoin(ctx, t, admin, "mir-g", "mir"); resp.ErrorCode != kerr.MemberIDRequired.Code {
		t.Fatalf("stray's first join: code %d", resp.ErrorCode)
	}
	if state, ids := describeMembers(ctx, t, admin, "mir-g"); state != "Stable" || !slices.Equal(ids, one) {
		t.Fatalf("the stray's first join changed the group: %s %v", state, ids)
	}
	second := newGroupMember(t, b, "mir-g", "mir")
	defer second.cl.Close()
	go second.pollUntil(ctx, t, func() bool { return ctx.Err() != nil })
	two := waitStable(2)
	if !slices.Contains(two, one[0]) {
		t.Fatalf("members %v do not include the first member %s", two, one[0])
	}
}
