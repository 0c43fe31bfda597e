package cluster

import (
	"sync"
	"time"

	"github.com/ringlog/ringlog/engine"
	"github.com/ringlog/ringlog/engine/shard"
	"github.com/ringlog/ringlog/replication/controller"
)

// throttle is the broker's replication throttle (replication.throttled.bytes.per.second):
// one budget shared by every fetcher goroutine of this broker, charged with the bytes
// fetched for replicas that are catching up (not in their partition's ISR: a new replica of
// a reassignment, a broker back from a failure). In-sync replicas are never throttled, so
// the throttle cannot push a follower out of the ISR. As in Kafka's follower-side quota, a
// throttled replica is left out of the next fetches while the budget is spent, rather than
// delaying the fetch that carries the in-sync replicas too.
//
// The budget is a virtual clock: each charge of n bytes moves next on by n/rate; the budget
// is spent while next is after now. An idle throttle saves at most one chunk's worth of
// credit (next never lags now by more than a chunk's time), which absorbs the fetch round
// trips between chunks; so over any stretch the bytes copied stay within rate × time plus
// two responses (chunkBytes bounds them).
type throttle struct {
	rate int64 // bytes per second; > 0
	now  func() time.Time

	mu   sync.Mutex
	next time.Time // guarded by mu
}

func newThrottle(rate int64, now func() time.Time) *throttle {
	return &throttle{rate: rate, now: now}
}

// wait is how long the budget remains spent: zero when a throttled replica may fetch.
func (t *throttle) wait() time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	return max(t.next.Sub(t.now()), 0)
}

// charge records n bytes fetched for throttled replicas.
func (t *throttle) charge(n int64) {
	if n <= 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if floor := t.now().Add(-t.seconds(int64(t.chunkBytes()))); t.next.Before(floor) {
		t.next = floor
	}
	t.next = t.next.Add(t.seconds(n))
}

// seconds is how long n bytes take at the rate.
func (t *throttle) seconds(n int64) time.Duration {
	return time.Duration(float64(n) / float64(t.rate) * float64(time.Second))
}

// chunkBytes bounds one fetch response that carries a throttled replica: a tenth of a
// second's budget (at least 64 KiB, at most the usual fetch size), so that one response
// overshoots the rate by little.
func (t *throttle) chunkBytes() int32 {
	return int32(min(max(t.rate/10, 64<<10), fetchBytesMax))
}

// throttleLists is every replicated topic's leader.replication.throttled.replicas and
// follower.replication.throttled.replicas, parsed once per metadata version (reconcile)
// so that neither the fetchers nor the leader's fetch path parse config per fetch.
type throttleLists struct {
	version uint64
	topics  map[string]topicThrottleLists // topics that set at least one of the keys
}

// topicThrottleLists is one topic's lists; nil: the key is not set, which throttles every
// catching-up replica of the topic (the throttle's rate alone decides, ringlog's default;
// Kafka's is none). An empty value lists none.
type topicThrottleLists struct {
	leader, follower *engine.ThrottledReplicas
}

func newThrottleLists(md *controller.Metadata) *throttleLists {
	l := &throttleLists{version: md.Version}
	for name, t := range md.Topics {
		var tl topicThrottleLists
		if v, ok := t.Config[engine.ConfigLeaderThrottledReplicas]; ok {
			if r, err := engine.ParseThrottledReplicas(v); err == nil { // validated at create/alter
				tl.leader = &r
			}
		}
		if v, ok := t.Config[engine.ConfigFollowerThrottledReplicas]; ok {
			if r, err := engine.ParseThrottledReplicas(v); err == nil {
				tl.follower = &r
			}
		}
		if tl.leader != nil || tl.follower != nil {
			if l.topics == nil {
				l.topics = map[string]topicThrottleLists{}
			}
			l.topics[name] = tl
		}
	}
	return l
}

// listed reports whether broker's replica of tp is throttled in the role (leader or
// follower side); a nil receiver (no metadata seen yet) lists every replica.
func (l *throttleLists) listed(leader bool, tp shard.TopicPartition, broker int32) bool {
	if l == nil {
		return true
	}
	tl, ok := l.topics[tp.Topic]
	list := tl.follower
	if leader {
		list = tl.leader
	}
	if !ok || list == nil {
		return true
	}
	return list.Contains(tp.Partition, broker)
}
