package e2e

import (
	"context"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ringlog/ringlog/netio/wire"
	"github.com/ringlog/ringlog/replication/cluster"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestCreateTopicControllerLost: a topic create that reaches the controller leader's broker
// just as it freezes (SIGSTOP) has an unknown outcome — the command may sit in the frozen
// broker's socket or raft log and be applied later. Both listeners of another broker, which
// forwards the create, answer within the request's own timeout (timeout_ms, 2 s here) with a
// retriable code, NOT_CONTROLLER or REQUEST_TIMED_OUT, as Kafka's controller does (before the
// fix the forward waited 30 s, past the clients' own deadlines); once the quorum has a
// leader again a retry succeeds or, when the first attempt was applied after all, answers
// TOPIC_ALREADY_EXISTS; and every broker ends with one topic of that name, its partition
// count and one topic ID.
func TestCreateTopicControllerLost(t *testing.T) {
	tc, kafkaAddrs := startKafkaCluster(t, 3)
	ctx := testContext(t, 3*time.Minute)
	leaderID := tc.waitFor("a controller leader", func(v *cluster.View) bool { return v.ControllerLeader > 0 }, tc.brokers[0]).ControllerLeader
	askID := 1 + leaderID%3
	kc := newKgo(t, kafkaAddrs[askID-1:askID])
	if _, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, kc); err != nil { // kgo learns the node ids
		t.Fatal(err)
	}
	const partitions = 3
	const requestTimeoutMs = 2000
	topics := map[string]string{"ringlog": "lost-ringlog", "kafka": "lost-kafka"}

	// create sends one attempt over listener to broker id (the first attempts) or, for
	// retries, as a client would (the ringlog client to its home broker, kgo to the
	// controller it discovers); it returns the answer's code and message.
	create := func(listener string, to int32) (code int16, msg string, err error) {
		cctx, cancel := context.WithTimeout(ctx, 20*time.Second) // far beyond timeout_ms
		defer cancel()
		if listener == "ringlog" {
			req := &wire.CreateTopicsRequest{TimeoutMs: requestTimeoutMs, Topics: []wire.CreateTopic{{Topic: topics[listener], Partitions: partitions, ReplicationFactor: 1}}}
			var resp wire.CreateTopicsResponse
			addr := tc.brokers[0].addr
			if to != 0 {
				addr = tc.node(to).addr
			}
			if err := tc.c.Call(cctx, addr, req, &resp); err != nil {
				return 0, "", err
			}
			return int16(resp.Topics[0].ErrorCode), resp.Topics[0].ErrorMessage, nil
		}
		req := kmsg.NewPtrCreateTopicsRequest()
		req.TimeoutMillis = requestTimeoutMs
		rt := kmsg.NewCreateTopicsRequestTopic()
		rt.Topic, rt.NumPartitions, rt.ReplicationFactor = topics[listener], partitions, 1
		req.Topics = append(req.Topics, rt)
		kresp, err := kafkaRequest(cctx, kc, to, req)
		if err != nil {
			return 0, "", err
		}
		resp := kresp.(*kmsg.CreateTopicsResponse)
		if m := resp.Topics[0].ErrorMessage; m != nil {
			msg = *m
		}
		return resp.Topics[0].ErrorCode, msg, nil
	}
	// The codes of each protocol for the outcomes the test tells apart.
	want := map[string]outcomeCodes{
		"ringlog": {int16(wire.ErrNotController), int16(wire.ErrRequestTimedOut), int16(wire.ErrTopicAlreadyExists)},
		"kafka":   {kerr.NotController.Code, kerr.RequestTimedOut.Code, kerr.TopicAlreadyExists.Code},
	}

	tc.node(leaderID).signal(t, syscall.SIGSTOP)
	var wg sync.WaitGroup
	first := map[string]int16{}
	var mu sync.Mutex
	for listener := range topics {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, msg, err := create(listener, askID)
			if err != nil {
				t.Errorf("%s create at node %d while the controller leader %d is frozen: no answer: %v", listener, askID, leaderID, err)
				return
			}
			t.Logf("%s create at node %d, controller leader %d frozen: code %d %q", listener, askID, leaderID, code, msg)
			if w := want[listener]; code != w.notController && code != w.timedOut && code != 0 {
				t.Errorf("%s create: code %d (%s), want NOT_CONTROLLER or REQUEST_TIMED_OUT (or success, had the quorum elected another leader first)", listener, code, msg)
			}
			mu.Lock()
			first[listener] = code
			mu.Unlock()
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	tc.node(leaderID).signal(t, syscall.SIGCONT)

	for listener, topic := range topics {
		code := retryUntilApplied(ctx, t, listener+" create of "+topic, first[listener], want[listener], func() (int16, string, error) { return create(listener, 0) })
		if first[listener] != 0 && code == want[listener].done {
			t.Logf("%s: the first attempt was applied after its %d answer (the retry found the topic)", listener, first[listener])
		}
	}
	// Every broker ends with one incarnation of each topic, with its partitions.
	var ids map[string]string
	for _, b := range tc.brokers {
		v := tc.waitFor("both topics created", func(v *cluster.View) bool {
			for _, topic := range topics {
				if t := v.Metadata.Topics[topic]; t == nil || len(t.Partitions) != partitions {
					return false
				}
			}
			return true
		}, b)
		if ids == nil {
			ids = map[string]string{}
			for _, topic := range topics {
				ids[topic] = v.Metadata.Topics[topic].ID
			}
		}
		for _, topic := range topics {
			if got := v.Metadata.Topics[topic].ID; got != ids[topic] {
				t.Errorf("node %d: %s has topic id %s, node 1 %s", tc.idOf(b), topic, got, ids[topic])
			}
		}
	}
}

// outcomeCodes are one protocol's codes for the answers to an admin request whose outcome
// may be unknown: the retriable ones, and done, what a retry gets when an earlier attempt
// was applied (TOPIC_ALREADY_EXISTS for a create, UNKNOWN_TOPIC_OR_PARTITION for a delete).
type outcomeCodes struct{ notController, timedOut, done int16 }

// retryUntilApplied retries send, as a client would, while its answer (code at first) is
// retriable, until it succeeds or answers w.done, which it returns; what names the request.
func retryUntilApplied(ctx context.Context, t *testing.T, what string, code int16, w outcomeCodes, send func() (int16, string, error)) int16 {
	t.Helper()
	for code != 0 && code != w.done {
		if code != w.notController && code != w.timedOut {
			t.Fatalf("%s: code %d, want a retriable code, success or %d", what, code, w.done)
		}
		time.Sleep(100 * time.Millisecond)
		c, msg, err := send()
		if err != nil { // no answer (a connection to the thawing broker): retry, as a client would
			t.Logf("%s retry: %v", what, err)
			c = w.timedOut
		} else {
			t.Logf("%s retry: code %d %q", what, c, msg)
		}
		code = c
		if ctx.Err() != nil {
			t.Fatalf("%s never succeeded", what)
		}
	}
	return code
}

// kafkaRequest sends req through kc to broker to, or to a broker of kc's choice when to is 0.
func kafkaRequest(ctx context.Context, kc *kgo.Client, to int32, req kmsg.Request) (kmsg.Response, error) {
	if to != 0 {
		return kc.Broker(int(to)).Request(ctx, req)
	}
	return kc.Request(ctx, req)
}
